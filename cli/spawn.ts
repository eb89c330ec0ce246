/**
 * `spawnServer()`: the service as a separate, detached process with scoped permissions
 * (docs/cli.md's "function that takes the site directory and returns a daemon process").
 * Re-exported from `server.ts`.
 *
 * @module
 */

import { resolve } from "node:path";
import type { FsyncMode } from "../store/writer.ts";
import { DEFAULT_HOST, DEFAULT_PORT, hostForUrl } from "../wire/address.ts";
import { sleep } from "../wire/async.ts";
import { spawnDeno } from "../process/spawn.ts";
import { runFlagArgs, SERVER_ENV_VARS } from "./flags.ts";
import { runPermissionFlags } from "./permissions.ts";
import type { LogFormat } from "../core/log.ts";
import type { NotifyFormat } from "../notify/post.ts";

export { SERVER_ENV_VARS };

/**
 * Runtime flags the service is started with: a smaller young generation keeps the resident size
 * of a long-running service near 90 MB instead of 120 MB under load (bench/RESULTS.md), at a
 * small cost in batch throughput.
 */
export const SERVICE_V8_FLAGS: readonly string[] = ["--v8-flags=--max-semi-space-size=8"];

/**
 * The scoped Deno permission flags for a server on `host:port` over `siteDir` (docs/cli.md):
 * net for that one address (and, on a non-loopback `host`, for 127.0.0.1, where the service
 * listens behind its connection guard), read and write for the site directory (and any run
 * roots), and the `OBS_TELEMETRY_*` variables. Nothing more. The same derivation from the `run`
 * flag table as the launcher's and `spawnServer()`'s (docs/cli.md#permissions).
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
  options: {
    siteDir: string;
    host: string;
    port: number;
    allowRunRoots?: readonly string[];
    /** Files read once at start-up (`--tls-cert`, `--tls-key`, `--types`): read only. */
    readFiles?: readonly string[];
  },
): string[] {
  const { siteDir, host, port, allowRunRoots = [], readFiles = [] } = options;
  const flags = runPermissionFlags({ siteDir, host, port, allowRunRoots });
  if (readFiles.length === 0) return flags;
  return flags.map((flag) =>
    flag.startsWith("--allow-read=") ? [flag, ...readFiles].join(",") : flag
  );
}

/**
 * Options of {@linkcode spawnServer}: one per `telemetry run` flag, named as in `run`'s flag
 * table, plus where the output goes and how long to wait.
 */
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
  /** `GET /history` requests served at once (`--max-history`). */
  maxHistory?: number;
  /** Most event types the snapshot holds (`--max-types`). */
  maxTypes?: number;
  /** Budget of the snapshot in bytes (`--max-snapshot`). */
  maxSnapshotBytes?: number;
  /** Allow a non-loopback `host` without a token (`--insecure`). */
  insecure?: boolean;
  /** Log one line per event (`--verbose`). */
  verbose?: boolean;
  /** The types registry file (`--types`); the child also gets read permission for it. */
  typesFile?: string;
  /** Free bytes below which `/check` fails (`--min-free`). */
  minFreeBytes?: number;
  /** With a token, reads need none (`--public-read`). */
  publicRead?: boolean;
  /** With a token, loopback peers need none (`--trust-loopback`). */
  trustLoopback?: boolean;
  /** `GET /current` answers `{"current": {...}}` (`--wrap-current`). */
  wrapCurrent?: boolean;
  /** PEM certificate file (`--tls-cert`): the child serves HTTPS and is granted read on it. */
  tlsCert?: string;
  /** PEM private key file (`--tls-key`), granted read too. */
  tlsKey?: string;
  /** How the service log prints its lines (`--log-format`). */
  logFormat?: LogFormat;
  /** Nights after which files are compressed, 0 off (`--compress-after`). */
  compressAfter?: number;
  /** Nights after which site files are deleted, 0 never (`--retain`). */
  retain?: number;
  /** Seconds a connection may take to send a whole request head (`--head-timeout`). */
  headTimeout?: number;
  /** Seconds a kept-alive connection may stay idle between requests (`--idle-timeout`). */
  idleTimeout?: number;
  /** Most connections one peer address may hold (`--max-conns-per-peer`). */
  maxConnsPerPeer?: number;
  /** Most connections all peers together may hold (`--max-conns`). */
  maxConns?: number;
  /** Seconds a request body may take to arrive in full after its head (`--body-timeout`). */
  bodyTimeout?: number;
  /** Receivers of the safety notifications (`--notify`); the child may connect to their hosts. */
  notify?: readonly string[];
  /** How the notifications are written (`--notify-format`). */
  notifyFormat?: NotifyFormat;
  /** Port of the ASCOM Alpaca listener on `host` (`--alpaca-port`); absent: none. */
  alpacaPort?: number;
  /** UDP port of Alpaca discovery, 0 off (`--alpaca-discovery-port`). @default {32227} */
  alpacaDiscoveryPort?: number;
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

/** The absolute certificate and key files, or `undefined` for plain HTTP. */
function tlsFiles(options: SpawnOptions): [string, string] | undefined {
  if (options.tlsCert === undefined || options.tlsKey === undefined) return undefined;
  return [resolve(options.tlsCert), resolve(options.tlsKey)];
}

/**
 * The `deno run` arguments of the child: scoped permissions, then `cli.ts telemetry run` with a
 * flag for every option given. `siteDir`, `host` and `port` are always passed.
 */
function childArgs(options: SpawnOptions & { host: string; port: number }): string[] {
  const siteDir = resolve(options.siteDir);
  const allowRunRoots = (options.allowRunRoots ?? []).map((r) => resolve(r));
  const typesFile = options.typesFile === undefined ? undefined : resolve(options.typesFile);
  const tls = tlsFiles(options);
  const tlsPaths = tls ? { tlsCert: tls[0], tlsKey: tls[1] } : {};
  const values = {
    ...options,
    siteDir,
    allowRunRoots,
    ...(typesFile ? { typesFile } : {}),
    ...tlsPaths,
  };
  return [
    "run",
    "--no-prompt",
    // The service imports no npm package: the lockfile (the tests' packages) is not its business.
    "--no-lock",
    ...SERVICE_V8_FLAGS,
    ...runPermissionFlags(values),
    new URL("../cli.ts", import.meta.url).href,
    "telemetry",
    "run",
    ...runFlagArgs(values),
  ];
}

/**
 * Polls `/ready` until it answers 200.
 *
 * @throws {Error} If the child exits first, or nothing answers by the deadline (the child is
 *   then killed).
 */
async function waitUntilReady(
  child: Deno.ChildProcess,
  url: string,
  options: SpawnOptions,
): Promise<void> {
  let exited: Deno.CommandStatus | undefined;
  const status = child.status.then((s) => (exited = s));
  const siteDir = resolve(options.siteDir);
  const timeoutMs = options.readyTimeoutMs ?? 10_000;
  const deadline = Date.now() + timeoutMs;
  // Over HTTPS the child's own certificate is the trust anchor of the probe (a self-signed one
  // is its own CA); a certificate the probe cannot verify still proves the listener is up.
  const tls = tlsFiles(options);
  using probe = tls
    ? Deno.createHttpClient({ caCerts: [await Deno.readTextFile(tls[0])] })
    : undefined;
  while (true) {
    if (exited) {
      throw new Error(
        `Cannot start the telemetry server for ${siteDir}: it exited with code ${exited.code} (its error is on stderr)`,
      );
    }
    try {
      const res = await fetch(`${url}/ready`, {
        signal: AbortSignal.timeout(1000),
        ...(probe ? { client: probe } : {}),
        ...(options.token ? { headers: { authorization: `Bearer ${options.token}` } } : {}),
      });
      await res.body?.cancel();
      if (res.ok) return;
    } catch (err) {
      // not listening yet, unless the TLS handshake got as far as a certificate
      if (probe && /certificate|UnknownIssuer|tls/i.test(String((err as Error)?.message))) return;
    }
    if (Date.now() > deadline) {
      try {
        child.kill("SIGKILL");
      } catch {
        // already gone
      }
      await status;
      throw new Error(
        `Cannot start the telemetry server for ${siteDir}: /ready did not answer within ${timeoutMs} ms`,
      );
    }
    await sleep(50);
  }
}

/**
 * Starts `cli.ts telemetry run` as a detached child process with exactly the scoped permissions
 * of {@linkcode permissionFlags}, waits until `/ready` answers, and returns the process handle.
 * Every `telemetry run` flag has its option; each option given is passed on as its flag.
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
  const output = options.output ?? "inherit";
  // stop() sends SIGTERM once: the service takes a second signal as "exit now".
  const child = spawnDeno({ args: childArgs({ ...options, host, port }), output, detached: true });
  const url = `${tlsFiles(options) ? "https" : "http"}://${hostForUrl(host)}:${port}`;
  await waitUntilReady(child.process, url, options);
  return { ...child, url };
}
