/**
 * `obs-utils telemetry run`: the service in the foreground until Ctrl-C, SIGTERM or
 * `obs-utils telemetry stop`. Its flags come from the table in `flags.ts`.
 *
 * @example Usage
 * ```ts ignore
 * import { runCommand } from "./serve.ts";
 * Deno.exit(await runCommand(["--site-dir", "./telemetry", "--port", "0"]));
 * ```
 *
 * @module
 */

import { ConfigError } from "../core/errors.ts";
import { ListenerError } from "../http/listener.ts";
import type { ConnectionLimits } from "../http/conn_guard.ts";
import { type ServerHandle, startServer } from "../server/serve.ts";
import { errorText, SiteInUseError } from "../core/errors.ts";
import { TypesFileError } from "../core/types_registry.ts";
import { DEFAULT_HOST, DEFAULT_PORT, hostForUrl } from "../wire/address.ts";
import { ServiceLog } from "../core/log.ts";
import { resolveRunFlags, runFlagHelp, type RunFlagValues, runParseOptions } from "./flags.ts";
import { portHolder } from "./port_holder.ts";
import { counted, Failure, HELP_OPTION, parse, printHelp, UsageError } from "./common.ts";
import { permissionAdvice } from "./permissions.ts";

/** The `--help` text of `run`; the options are the rows of the flag table. */
export const RUN_HELP: string = `Usage: obs-utils telemetry run [options]

Start the telemetry service in the foreground. Stop it with Ctrl-C, SIGTERM or
'obs-utils telemetry stop'.

Options:
${runFlagHelp()}  -h, --help            Show this help
`;

/**
 * Runs `obs-utils telemetry run`: starts the server, prints the ready line, and returns once it
 * has shut down.
 *
 * @param args The arguments after `telemetry run`.
 * @returns The exit code, 0 after a clean shutdown.
 * @throws {UsageError} For a bad flag or `OBS_TELEMETRY_*` value.
 * @throws {Failure} If the server cannot start.
 *
 * @example Usage
 * ```ts ignore
 * import { runCommand } from "./serve.ts";
 * Deno.exit(await runCommand(["--site-dir", "./telemetry"]));
 * ```
 */
export async function runCommand(args: string[]): Promise<number> {
  const { values } = parse("run", args, { ...runParseOptions(), ...HELP_OPTION }, false);
  if (values.help) return printHelp(RUN_HELP);
  let flags: RunFlagValues;
  try {
    flags = resolveRunFlags(values);
  } catch (err) {
    throw new UsageError((err as Error).message, "run");
  }
  const log = new ServiceLog(flags.logFormat !== undefined ? { format: flags.logFormat } : {});
  const warnings = new Warnings(log);
  // Signals are heard from before the listener opens: a SIGTERM that comes right after /ready
  // first answers (a supervisor, spawnServer().stop()) is a clean shutdown, not Deno's default
  // exit 143.
  using signals = new ShutdownSignals(log);
  const server = await start(flags, warnings, log);
  signals.attach(server);
  logSafetyChanges(server, warnings);
  if (flags.verbose) logEvents(server, log);
  return await serve(server, flags, warnings, log);
}

/**
 * SIGINT and SIGTERM (SIGINT alone on Windows) as a graceful shutdown of the server, from the
 * moment it is constructed: one that comes during start-up shuts the server down as soon as it
 * is attached. A second signal exits 1 at once, without waiting for in-flight requests.
 */
class ShutdownSignals implements Disposable {
  #log: ServiceLog;
  #server: ServerHandle | undefined;
  #count = 0;
  #names: Deno.Signal[] = Deno.build.os === "windows" ? ["SIGINT"] : ["SIGINT", "SIGTERM"];
  #finished = false;
  #onSignal = () => {
    // Shut down already: the process is about to exit with its code; a late signal (a Ctrl-C
    // relayed by `deno task` on a loaded machine) must not end it by Deno's default (exit 130).
    if (this.#finished) return;
    this.#count++;
    if (this.#count > 1) {
      this.#log.flush(true);
      this.#log.error("second signal: exiting without waiting for in-flight requests");
      Deno.exit(1);
    }
    if (this.#server) void this.#server.shutdown();
  };
  constructor(log: ServiceLog) {
    this.#log = log;
    for (const s of this.#names) Deno.addSignalListener(s, this.#onSignal);
  }
  /** From now on a signal shuts `server` down; one that already came does so now. */
  attach(server: ServerHandle): void {
    this.#server = server;
    if (this.#count > 0) void server.shutdown();
  }
  /** The listeners stay until the process exits (runCommand's caller exits with its code). */
  [Symbol.dispose](): void {
    this.#finished = true;
  }
}

/**
 * Holds the lines of start-up until the ready line is out (docs/storage.md: nothing is printed
 * before the listener is up, so a start-up failure stays one line; what recovery found is
 * reported right after the ready line), then prints each as it comes, through the service log
 * (docs/operations.md).
 */
class Warnings {
  #log: ServiceLog;
  #held: (() => void)[] | undefined = [];
  constructor(log: ServiceLog) {
    this.#log = log;
  }
  warn(message: string): void {
    this.#print(() => this.#log.warn(message));
  }
  info(message: string): void {
    this.#print(() => this.#log.info(message));
  }
  error(message: string): void {
    this.#print(() => this.#log.error(message));
  }
  #print(line: () => void): void {
    if (this.#held) this.#held.push(line);
    else line();
  }
  release(): void {
    for (const line of this.#held ?? []) line();
    this.#held = undefined;
  }
}

/**
 * An unexpected error of a request as one log line: its class and message, no stack trace (the
 * log is read by people and line-based tools; docs/storage.md, docs/operations.md).
 */
export function unexpectedErrorLine(err: unknown): string {
  const name = err instanceof Error ? err.name : typeof err;
  const message = err instanceof Error ? err.message : String(err);
  return `unexpected ${name} while answering a request: ${message.replace(/\s*[\r\n]+\s*/g, " ")}`;
}

/** Starts the server; a failure becomes one line naming the flag that fixes it. */
async function start(
  flags: RunFlagValues,
  warnings: Warnings,
  log: ServiceLog,
): Promise<ServerHandle> {
  const { siteDir, host: hostname, port } = flags;
  try {
    return await startServer({
      siteDir,
      hostname,
      port,
      timeZone: flags.timeZone,
      fsync: flags.fsync,
      ...(flags.maxBody !== undefined ? { maxBody: flags.maxBody } : {}),
      ...(flags.maxHistory !== undefined ? { maxHistory: flags.maxHistory } : {}),
      ...(flags.maxTypes !== undefined ? { maxTypes: flags.maxTypes } : {}),
      ...(flags.maxSnapshotBytes !== undefined ? { maxSnapshotBytes: flags.maxSnapshotBytes } : {}),
      token: flags.token,
      insecure: flags.insecure,
      publicRead: flags.publicRead,
      trustLoopback: flags.trustLoopback,
      wrapCurrent: flags.wrapCurrent,
      ...(flags.tlsCert !== undefined ? { tlsCert: flags.tlsCert } : {}),
      ...(flags.tlsKey !== undefined ? { tlsKey: flags.tlsKey } : {}),
      allowRunRoots: flags.allowRunRoots,
      ...(flags.siteTypes ? { siteTypes: flags.siteTypes } : {}),
      ...(flags.typesFile !== undefined ? { typesFile: flags.typesFile } : {}),
      ...(flags.minFreeBytes !== undefined ? { minFreeBytes: flags.minFreeBytes } : {}),
      ...(flags.alpacaPort !== undefined ? { alpacaPort: flags.alpacaPort } : {}),
      ...(flags.alpacaDiscoveryPort !== undefined
        ? { alpacaDiscoveryPort: flags.alpacaDiscoveryPort }
        : {}),
      onWarning: (message) => warnings.warn(message),
      onInfo: (message) => warnings.info(message),
      ...(flags.compressAfter !== undefined ? { compressAfter: flags.compressAfter } : {}),
      ...(flags.retain !== undefined ? { retain: flags.retain } : {}),
      notify: flags.notify,
      ...(flags.notifyFormat !== undefined ? { notifyFormat: flags.notifyFormat } : {}),
      connectionLimits: connectionLimits(flags),
      ...(flags.bodyTimeout !== undefined ? { bodyTimeoutMs: flags.bodyTimeout * 1000 } : {}),
      onError: (err) => warnings.error(unexpectedErrorLine(err)),
      onRejected: (rejection) => log.rejection(rejection),
    });
  } catch (err) {
    if (err instanceof Deno.errors.AddrInUse) throw new Failure(await portInUse(hostname, port));
    throw new Failure(startupFailure(err, { siteDir, hostname, port }));
  }
}

/**
 * The connection guard's limits of `--head-timeout`, `--idle-timeout`, `--max-conns-per-peer`
 * and `--max-conns`.
 */
function connectionLimits(flags: RunFlagValues): ConnectionLimits {
  return {
    ...(flags.headTimeout !== undefined ? { headTimeoutMs: flags.headTimeout * 1000 } : {}),
    ...(flags.idleTimeout !== undefined ? { idleTimeoutMs: flags.idleTimeout * 1000 } : {}),
    ...(flags.maxConnsPerPeer !== undefined ? { maxPerPeer: flags.maxConnsPerPeer } : {}),
    ...(flags.maxConns !== undefined ? { maxConns: flags.maxConns } : {}),
  };
}

/**
 * One log line per change of the safety verdict (docs/operations.md, "Logs"; docs/safety.md):
 * `info` when the site becomes safe, `warn` with the reasons when it becomes unsafe. The change
 * found at start-up (stopped safe, started after the night made it unsafe) is one too, printed
 * after the ready line.
 */
function logSafetyChanges(server: ServerHandle, warnings: Warnings): void {
  server.service.onSafetyChange((change) => {
    // The site's verdict keeps its 0.6 wording; a profile's, an external event's and a waiver's
    // say what they are (docs/safety.md#profiles, #safety-events, #waivers).
    const of = change.profile === undefined ? "" : ` of ${change.profile}`;
    if (change.kind === "safety") {
      if (change.safe) warnings.info(`safety verdict${of}: safe (every critical type is fine)`);
      else warnings.warn(`safety verdict${of}: UNSAFE: ${change.reasons.join("; ")}`);
    } else if (change.kind === "external" || change.kind === "waiver") {
      warnings.warn(`safety ${change.kind}${of}: ${change.reasons.join("; ")}`);
    }
  }, { replayOpening: true });
}

function logEvents(server: ServerHandle, log: ServiceLog): void {
  server.service.subscribe((message) => {
    if (message.kind === "telemetry") {
      const e = message.event;
      log.debug(`event ${e.stream}#${e.seq} ${e.type} ${e.line}`);
    } else if (message.kind === "run") {
      log.debug(`run ${message.active ? "started" : "stopped"} ${JSON.stringify(message.run)}`);
    } else {
      log.debug(`forgot ${JSON.stringify(message.type)}`);
    }
  });
}

/** Prints the ready line and the early warnings, then waits for a shutdown by signal or request. */
async function serve(
  server: ServerHandle,
  flags: RunFlagValues,
  warnings: Warnings,
  log: ServiceLog,
): Promise<number> {
  log.info(
    `telemetry service listening on ${server.url} (site dir ${server.service.siteDir}, zone ${flags.timeZone}, fsync ${flags.fsync}${
      flags.token ? ", token required" : ""
    }${accessNote(flags)})`,
  );
  if (server.alpaca) {
    const { addr, discovery } = server.alpaca;
    log.info(
      `ASCOM Alpaca devices on http://${hostForUrl(addr.hostname)}:${addr.port}/api/v1 (${
        discovery ? `discovery on UDP ${discovery.port}` : "discovery off"
      })`,
    );
  }
  // docs/cli.md: a run that was active when the service last stopped goes on; say so.
  const resumed = server.service.run;
  if (resumed) {
    log.info(
      `resumed run ${resumed.run_id} (started ${resumed.started_at}, ${
        counted(resumed.events, "event")
      })`,
    );
  }
  warnings.release();
  try {
    await server.finished;
  } catch (err) {
    log.flush(true);
    // docs/operations.md: only POST /shutdown, SIGINT and SIGTERM end the service with 0; any other
    // way out (a listener that stayed down, a failed close) is non-zero so a supervisor restarts.
    log.error(
      err instanceof ListenerError
        ? `${err.message}; the service stopped (files flushed and closed), exiting 1 so a supervisor restarts it`
        : `the service stopped with an error: ${errorText(err)}; exiting 1`,
    );
    return 1;
  }
  // A burst of rejections just before the end still gets its count.
  log.flush(true);
  log.info("telemetry service stopped; all files flushed and closed");
  return 0;
}

/** The access modes in force, for the ready line. */
function accessNote(flags: RunFlagValues): string {
  const notes = [
    ...(flags.token && flags.publicRead ? ["reads public"] : []),
    ...(flags.token && flags.trustLoopback ? ["loopback trusted"] : []),
    ...(flags.wrapCurrent ? ["/current wrapped"] : []),
  ];
  return notes.map((n) => `, ${n}`).join("");
}

/**
 * "Site directory in use", naming the holder and the command that stops it (docs/cli.md).
 *
 * @param err The refusal, with what the lock file says about its holder.
 * @returns The one line.
 *
 * @example Usage
 * ```ts
 * import { siteInUse } from "./serve.ts";
 * import { SiteInUseError } from "../core/errors.ts";
 * import assert from "node:assert/strict";
 *
 * assert.equal(
 *   siteInUse(new SiteInUseError("/srv/t", { pid: 812, url: "http://127.0.0.1:7000" })),
 *   "site directory /srv/t is in use by another telemetry server (pid 812 at http://127.0.0.1:7000); stop it with 'obs-utils telemetry stop --host 127.0.0.1 --port 7000' or choose another --site-dir",
 * );
 * ```
 */
export function siteInUse(err: SiteInUseError): string {
  // "pid 812 at http://...": not "listening on", which is how scripts spot the ready line.
  const who = [
    ...(err.holderPid === undefined ? [] : [`pid ${err.holderPid}`]),
    ...(err.holderUrl === undefined ? [] : [`at ${err.holderUrl}`]),
  ];
  const held = `site directory ${err.siteDir} is in use by another telemetry server${
    who.length === 0 ? "" : ` (${who.join(" ")})`
  }`;
  const stop = stopCommand(err.holderUrl);
  if (stop) return `${held}; stop it with '${stop}' or choose another --site-dir`;
  if (err.holderPid !== undefined) {
    return `${held}; stop it with 'kill ${err.holderPid}' (it is not listening yet, or is a migration) or choose another --site-dir`;
  }
  return `${held}; stop it ('obs-utils telemetry stop --port PORT') or choose another --site-dir`;
}

/** `obs-utils telemetry stop` with the flags that reach a server at `url`. */
function stopCommand(url: string | undefined): string | undefined {
  if (url === undefined) return undefined;
  let parsed: URL;
  try {
    parsed = new URL(url);
  } catch {
    return undefined;
  }
  const port = parsed.port || (parsed.protocol === "https:" ? "443" : "80");
  const host = parsed.hostname.replace(/^\[(.*)\]$/, "$1");
  const hostFlag = host === DEFAULT_HOST ? "" : ` --host ${host}`;
  return `obs-utils telemetry stop${hostFlag}${
    port === String(DEFAULT_PORT) ? "" : ` --port ${port}`
  }`;
}

function startupFailure(
  err: unknown,
  ctx: { siteDir: string; hostname: string; port: number },
): string {
  if (err instanceof SiteInUseError) return siteInUse(err);
  if (err instanceof ConfigError) return err.message;
  if (err instanceof TypesFileError) return err.message;
  if (err instanceof Deno.errors.NotCapable) return permissionAdvice(err);
  if (err instanceof Deno.errors.PermissionDenied) {
    return `Cannot use site directory ${ctx.siteDir}: the operating system denied access (${
      (err as Error).message
    }); choose a writable --site-dir`;
  }
  if (err instanceof Deno.errors.AlreadyExists || err instanceof Deno.errors.NotADirectory) {
    return `Cannot use site directory ${ctx.siteDir}: a file is in the way; choose another --site-dir`;
  }
  if (err instanceof Deno.errors.NotFound) {
    return `Cannot create site directory ${ctx.siteDir}: ${
      (err as Error).message.replace(/ \(os error \d+\).*$/, "")
    }; choose a writable --site-dir`;
  }
  if ((err as { code?: unknown } | null)?.code === "EROFS") {
    return `Cannot use site directory ${ctx.siteDir}: it is on a file system mounted read-only (${
      (err as Error).message
    }); choose a writable directory with --site-dir (or OBS_TELEMETRY_SITE_DIR), or remount it read-write`;
  }
  if (err instanceof Deno.errors.AddrNotAvailable) {
    return `Cannot listen on ${ctx.hostname}:${ctx.port}: the address is not available on this machine; check --host`;
  }
  if (err instanceof RangeError) return err.message;
  return `Cannot start the telemetry service: ${err instanceof Error ? err.message : String(err)}`;
}

/**
 * "The port is in use", saying what holds it (docs/cli.md): a telemetry service gets the `stop`
 * command that reaches it; another program gets no advice that cannot work on it.
 */
async function portInUse(hostname: string, port: number): Promise<string> {
  const where = `Cannot listen on ${hostForUrl(hostname)}:${port}: the port is in use`;
  // A wildcard bind collides with a program on any address; ask it on the loopback one.
  const asked = hostname === "0.0.0.0" ? "127.0.0.1" : hostname === "::" ? "::1" : hostname;
  const holder = await portHolder(`http://${hostForUrl(asked)}:${port}`);
  if (holder.kind === "telemetry") {
    const stop = stopCommand(`http://${hostForUrl(asked)}:${port}`);
    return `${where} by another telemetry service; stop it with '${stop}' or choose another --port`;
  }
  if (holder.kind === "other") {
    return `${where} by another program, not a telemetry service (it answered HTTP ${holder.status}); choose another --port or stop that program`;
  }
  return `${where} by another program that does not answer as a telemetry service; choose another --port or stop that program`;
}
