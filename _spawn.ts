/**
 * `spawnServer()`: the service as a separate, detached process with scoped permissions
 * (SPEC 4.5's "function that takes the site directory and returns a daemon process").
 * Re-exported from `server.ts`.
 *
 * @module
 */

import { resolve } from "node:path";
import type { FsyncMode } from "./storage.ts";
import { DEFAULT_HOST, DEFAULT_PORT, hostForUrl } from "./_address.ts";
import { sleep } from "./_async.ts";

/** The environment variables the server may read: the only `--allow-env` it gets (CONTRACT 6). */
export const SERVER_ENV_VARS: readonly string[] = [
  "OBS_TELEMETRY_HOST",
  "OBS_TELEMETRY_PORT",
  "OBS_TELEMETRY_SITE_DIR",
  "OBS_TELEMETRY_TZ",
  "OBS_TELEMETRY_SITE_TYPES",
  "OBS_TELEMETRY_TOKEN",
  "OBS_TELEMETRY_FSYNC",
];

/**
 * Runtime flags the service is started with: a smaller young generation keeps the resident size
 * of a long-running service near 90 MB instead of 120 MB under load (bench/RESULTS.md), at a
 * small cost in batch throughput.
 */
export const SERVICE_V8_FLAGS: readonly string[] = ["--v8-flags=--max-semi-space-size=8"];

/**
 * The scoped Deno permission flags for a server on `host:port` over `siteDir` (CONTRACT 6):
 * net for that one address, read and write for the site directory (and any run roots), and the
 * `OBS_TELEMETRY_*` variables. Nothing more.
 *
 * @param options Where the server listens and stores.
 * @returns Flags for `deno run` or `deno compile`.
 *
 * @example Usage
 * ```ts
 * import { permissionFlags } from "@obs-utils/telemetry/server";
 * import assert from "node:assert/strict";
 *
 * const flags = permissionFlags({ siteDir: "/srv/telemetry", host: "localhost", port: 6562 });
 * assert.equal(flags[0], "--allow-net=localhost:6562");
 * ```
 */
export function permissionFlags(
  options: { siteDir: string; host: string; port: number; allowRunRoots?: readonly string[] },
): string[] {
  const dirs = [options.siteDir, ...(options.allowRunRoots ?? [])].join(",");
  const host = hostForUrl(options.host);
  return [
    `--allow-net=${host}:${options.port}`,
    `--allow-read=${dirs}`,
    `--allow-write=${dirs}`,
    `--allow-env=${SERVER_ENV_VARS.join(",")}`,
  ];
}

/** Options of {@linkcode spawnServer}. */
export interface SpawnOptions {
  /** The site telemetry directory. */
  siteDir: string;
  /**
   * Address to bind.
   * @default {"localhost"}
   */
  host?: string;
  /**
   * Port; 0 picks a free port before starting the child.
   * @default {6562}
   */
  port?: number;
  /** IANA zone of the noon rotation (`--tz`). */
  timeZone?: string;
  /** Types also written to the site file during a run (`--site-types`). */
  siteTypes?: readonly string[];
  /** `--fsync` mode. */
  fsync?: FsyncMode;
  /** Bearer token the server requires (`--token`). */
  token?: string;
  /** Extra run roots (`--allow-run-root`), also granted read and write permission. */
  allowRunRoots?: readonly string[];
  /** Largest request body in bytes (`--max-body`). */
  maxBody?: number;
  /** Log one line per event (`--verbose`). */
  verbose?: boolean;
  /**
   * Where the child's output goes.
   * @default {"inherit"}
   */
  output?: "inherit" | "null";
  /**
   * How long to wait for `/ready`.
   * @default {10000}
   */
  readyTimeoutMs?: number;
}

/** A server started by {@linkcode spawnServer}. */
export interface SpawnedServer extends AsyncDisposable {
  /** The detached child process. */
  readonly process: Deno.ChildProcess;
  /** Its process id. */
  readonly pid: number;
  /** Base URL of the server, for example `http://localhost:6562`. */
  readonly url: string;
  /**
   * Asks the server to shut down gracefully (SIGTERM) and waits for it to exit.
   * @returns The exit status (code 0 after a clean shutdown).
   */
  stop(): Promise<Deno.CommandStatus>;
}

function freePort(hostname: string): number {
  const listener = Deno.listen({ hostname, port: 0 });
  const port = (listener.addr as Deno.NetAddr).port;
  listener.close();
  return port;
}

/**
 * Starts `cli.ts telemetry run` as a detached child process with exactly the scoped permissions
 * of {@linkcode permissionFlags}, waits until `/ready` answers, and returns the process handle.
 *
 * Needs `--allow-run` (for the Deno executable) and `--allow-net` for the server's address.
 *
 * @param options Site directory and server options.
 * @returns The running child.
 * @throws {Error} If the child exits or `/ready` does not answer within `readyTimeoutMs`; the
 *   child's own one-line error went to its stderr.
 *
 * @example Usage
 * ```ts ignore
 * import { spawnServer } from "@obs-utils/telemetry/server";
 *
 * await using server = await spawnServer({ siteDir: "./telemetry", port: 0 });
 * console.log(`pid ${server.pid} on ${server.url}`);
 * ```
 */
export async function spawnServer(options: SpawnOptions): Promise<SpawnedServer> {
  const host = options.host ?? DEFAULT_HOST;
  const port = options.port === 0
    ? freePort(host === "localhost" ? "127.0.0.1" : host)
    : options.port ?? DEFAULT_PORT;
  const siteDir = resolve(options.siteDir);
  const roots = (options.allowRunRoots ?? []).map((r) => resolve(r));
  const args = [
    "run",
    "--no-prompt",
    ...SERVICE_V8_FLAGS,
    ...permissionFlags({ siteDir, host, port, allowRunRoots: roots }),
    new URL("./cli.ts", import.meta.url).href,
    "telemetry",
    "run",
    "--site-dir",
    siteDir,
    "--host",
    host,
    "--port",
    String(port),
  ];
  if (options.timeZone !== undefined) args.push("--tz", options.timeZone);
  if (options.siteTypes !== undefined) args.push("--site-types", options.siteTypes.join(","));
  if (options.fsync !== undefined) args.push("--fsync", options.fsync);
  if (options.token !== undefined) args.push("--token", options.token);
  for (const root of roots) args.push("--allow-run-root", root);
  if (options.maxBody !== undefined) args.push("--max-body", String(options.maxBody));
  if (options.verbose) args.push("--verbose");

  const output = options.output ?? "inherit";
  const child = new Deno.Command(Deno.execPath(), {
    args,
    stdin: "null",
    stdout: output,
    stderr: output,
    detached: true,
  }).spawn();
  const urlHost = hostForUrl(host);
  const url = `http://${urlHost}:${port}`;
  let exited: Deno.CommandStatus | undefined;
  const status = child.status.then((s) => (exited = s));

  const deadline = Date.now() + (options.readyTimeoutMs ?? 10_000);
  while (true) {
    if (exited) {
      throw new Error(
        `Cannot start the telemetry server for ${siteDir}: it exited with code ${exited.code} (its error is on stderr)`,
      );
    }
    try {
      const res = await fetch(`${url}/ready`, {
        signal: AbortSignal.timeout(1000),
        ...(options.token ? { headers: { authorization: `Bearer ${options.token}` } } : {}),
      });
      await res.body?.cancel();
      if (res.ok) break;
    } catch {
      // not listening yet
    }
    if (Date.now() > deadline) {
      try {
        child.kill("SIGKILL");
      } catch {
        // already gone
      }
      await status;
      throw new Error(
        `Cannot start the telemetry server for ${siteDir}: /ready did not answer within ${
          options.readyTimeoutMs ?? 10_000
        } ms`,
      );
    }
    await sleep(50);
  }

  let stopping: Promise<Deno.CommandStatus> | undefined;
  const stop = () => {
    stopping ??= (async () => {
      if (!exited) {
        try {
          child.kill("SIGTERM");
        } catch {
          // already gone
        }
      }
      return await status;
    })();
    return stopping;
  };
  return {
    process: child,
    pid: child.pid,
    url,
    stop,
    async [Symbol.asyncDispose]() {
      await stop();
    },
  };
}
