/**
 * A real service with its Alpaca listener (docs/safety.md, "ASCOM Alpaca (N.I.N.A.)"): started in
 * this process on port 0 with a types file written beside the site directory, or as a child
 * `cli.ts telemetry run` for kill -9; a types file with safety profiles that is safe at start,
 * and the safety monitors' actions as a client sends them.
 */

import assert from "node:assert/strict";
import { join } from "node:path";
import { freePort, postJson, testServer } from "./util.ts";

export { safetyEvent } from "./util.ts";
import { type ChildServer, spawnCliServer } from "./fault_util.ts";
import { permissionFlags, type ServerHandle, type ServerOptions } from "../../server.ts";

/** A running service and the base URL of its Alpaca port; `await using` stops it. */
export interface AlpacaService extends AsyncDisposable {
  server: ServerHandle;
  /** `http://127.0.0.1:PORT` of the Alpaca listener. */
  base: string;
}

/**
 * Starts the service on 127.0.0.1 with `--alpaca-port 0`, discovery off, and `types` as its
 * types file; `options` may be a token (`--token`) or more server options.
 */
export async function alpacaServer(
  siteDir: string,
  types: unknown,
  options: string | Partial<ServerOptions> = {},
): Promise<AlpacaService> {
  const file = await writeTypes(siteDir, types);
  const more = typeof options === "string" ? { token: options, insecure: false } : options;
  const server = await testServer({
    siteDir,
    typesFile: file,
    alpacaPort: 0,
    alpacaDiscoveryPort: 0,
    ...more,
  });
  return {
    server,
    base: `http://127.0.0.1:${server.alpaca!.addr.port}`,
    async [Symbol.asyncDispose]() {
      await server.shutdown();
      await Deno.remove(file).catch(() => {});
    },
  };
}

/** Writes a types file beside the site directory; returns its path. */
export async function writeTypes(siteDir: string, types: unknown): Promise<string> {
  const file = join(siteDir, "..", `types-${crypto.randomUUID()}.json`);
  await Deno.writeTextFile(file, JSON.stringify(types));
  return file;
}

/**
 * Two safety profiles beside the site (docs/safety.md#profiles): `weather` counts for every
 * profile, `dome` for north only, `shutter` for south only. Each critical type clears at once
 * (`clear_after_s` 0), so a fresh event of each ({@linkcode postSafe}) makes every profile safe.
 */
export const PROFILE_TYPES = {
  weather: {
    critical: true,
    critical_for: ["north", "south"],
    stale_after_s: 3600,
    clear_after_s: 0,
    fields: { rain: { alarm_if: true } },
  },
  dome: {
    critical_for: ["north"],
    stale_after_s: 3600,
    clear_after_s: 0,
    fields: { fault: { alarm_if: true } },
  },
  shutter: {
    critical_for: ["south"],
    stale_after_s: 3600,
    clear_after_s: 0,
    fields: { fault: { alarm_if: true } },
  },
};

/** The safety monitors of {@linkcode PROFILE_TYPES}, by device number. */
export const PROFILES = ["site", "north", "south"] as const;

/** Posts a fresh, fine event of every type of {@linkcode PROFILE_TYPES}: every profile is safe. */
export async function postSafe(url: string): Promise<void> {
  for (
    const [type, data] of [
      ["weather", { rain: false }],
      ["dome", { fault: false }],
      ["shutter", { fault: false }],
    ] as const
  ) {
    const res = await postJson(`${url}/event`, { type, data });
    assert.equal(res.status, 200, JSON.stringify(res.body));
  }
}

/** The Alpaca JSON answer of a device member. */
export type AlpacaAnswer = Record<string, unknown>;

/** GETs a member of a device (`safetymonitor/1/issafe`); asserts HTTP 200. */
export async function alpacaGet(
  base: string,
  path: string,
  init: RequestInit & { client?: Deno.HttpClient } = {},
): Promise<AlpacaAnswer> {
  const res = await fetch(`${base}/api/v1/${path}`, init);
  assert.equal(res.status, 200, `GET ${path}: ${res.status}`);
  return await res.json();
}

/**
 * PUTs an action to a safety monitor, with `ClientID` 9; `params` is the `Parameters` field (a
 * string as sent, or a value sent as its JSON). `form` replaces the field names when given.
 */
export async function alpacaAction(
  base: string,
  number: number,
  action: string,
  params: unknown = "",
  init: RequestInit & { client?: Deno.HttpClient; form?: [string, string][] } = {},
): Promise<AlpacaAnswer> {
  const text = typeof params === "string" ? params : JSON.stringify(params);
  const form = new URLSearchParams(
    init.form ?? [["Action", action], ["Parameters", text], ["ClientID", "9"]],
  );
  const res = await fetch(`${base}/api/v1/safetymonitor/${number}/action`, {
    ...init,
    method: "PUT",
    headers: { "content-type": "application/x-www-form-urlencoded", ...init.headers },
    body: form.toString(),
  });
  const body = await res.text();
  assert.equal(res.status, 200, `${action}: ${res.status} ${body}`);
  return JSON.parse(body);
}

/** An action that must succeed: ErrorNumber 0; returns its `Value`. */
export async function actionOk(
  base: string,
  number: number,
  action: string,
  params: unknown = "",
): Promise<unknown> {
  const body = await alpacaAction(base, number, action, params);
  assert.equal(body.ErrorNumber, 0, `${action}: ${body.ErrorMessage}`);
  return body.Value;
}

/** The `Id`s `SafetyEvents` lists on a safety monitor. */
export async function eventIds(base: string, number: number): Promise<string[]> {
  const value = await actionOk(base, number, "SafetyEvents");
  return (JSON.parse(String(value)) as { Id: string }[]).map((e) => e.Id);
}

/** `issafe` of a safety monitor. */
export async function isSafe(base: string, number: number): Promise<boolean> {
  const body = await alpacaGet(base, `safetymonitor/${number}/issafe`);
  assert.equal(body.ErrorNumber, 0, String(body.ErrorMessage));
  return body.Value as boolean;
}

/** A child `cli.ts telemetry run` with an Alpaca port, for kill -9. */
export interface AlpacaChild extends AsyncDisposable {
  readonly child: ChildServer;
  /** The main port's URL. */
  readonly url: string;
  /** `http://127.0.0.1:PORT` of the Alpaca listener. */
  readonly base: string;
}

/**
 * Starts `cli.ts telemetry run` as a child with `--types typesFile`, `--alpaca-port` (a free
 * port) and discovery off, under the scoped permissions of the flag table plus the Alpaca port.
 */
export async function spawnAlpacaChild(siteDir: string, typesFile: string): Promise<AlpacaChild> {
  const port = freePort();
  const alpacaPort = freePort();
  const flags = permissionFlags({ siteDir, host: "127.0.0.1", port, readFiles: [typesFile] })
    .map((flag) => flag.startsWith("--allow-net=") ? `${flag},127.0.0.1:${alpacaPort}` : flag);
  const child = await spawnCliServer({
    siteDir,
    port,
    flags,
    args: [
      "--types",
      typesFile,
      "--alpaca-port",
      String(alpacaPort),
      "--alpaca-discovery-port",
      "0",
    ],
  });
  return {
    child,
    url: child.url,
    base: `http://127.0.0.1:${alpacaPort}`,
    async [Symbol.asyncDispose]() {
      await child.kill("SIGKILL");
    },
  };
}
