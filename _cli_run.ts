/**
 * `obs-utils telemetry run`: the service in the foreground until Ctrl-C, SIGTERM or
 * `obs-utils telemetry stop`. Its flags come from the table in `_run_flags.ts`.
 *
 * @example Usage
 * ```ts ignore
 * import { runCommand } from "./_cli_run.ts";
 * Deno.exit(await runCommand(["--site-dir", "./telemetry", "--port", "0"]));
 * ```
 *
 * @module
 */

// deno-lint-ignore-file no-console
import { ConfigError, ListenerError, type ServerHandle, startServer } from "./server.ts";
import { errorText, SiteInUseError } from "./_errors.ts";
import { resolveRunFlags, runFlagHelp, type RunFlagValues, runParseOptions } from "./_run_flags.ts";
import {
  Failure,
  HELP_OPTION,
  parse,
  permissionHint,
  printHelp,
  UsageError,
} from "./_cli_common.ts";

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
 * import { runCommand } from "./_cli_run.ts";
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
  const warnings = new Warnings();
  const server = await start(flags, warnings);
  if (flags.verbose) logEvents(server);
  return await serve(server, flags, warnings);
}

/**
 * Holds the warnings of start-up until the ready line is out (CONTRACT 4.7: nothing is printed
 * before the listener is up, so a start-up failure stays one line; what recovery found is
 * reported right after the ready line), then prints each as it comes.
 */
class Warnings {
  #held: string[] | undefined = [];
  warn(message: string): void {
    const line = `warning: ${message}`;
    if (this.#held) this.#held.push(line);
    else console.error(line);
  }
  /** An information line (the lifecycle's), held like the warnings until the ready line. */
  info(message: string): void {
    const line = `info: ${message}`;
    if (this.#held) this.#held.push(line);
    else console.error(line);
  }
  release(): void {
    for (const line of this.#held ?? []) console.error(line);
    this.#held = undefined;
  }
}

/**
 * An unexpected error of a request as one log line: its class and message, no stack trace (the
 * log is read by people and line-based tools; CONTRACT 4.7, 9.4).
 */
export function unexpectedErrorLine(err: unknown): string {
  const name = err instanceof Error ? err.name : typeof err;
  const message = err instanceof Error ? err.message : String(err);
  return `unexpected ${name} while answering a request: ${message.replace(/\s*[\r\n]+\s*/g, " ")}`;
}

/** Starts the server; a failure becomes one line naming the flag that fixes it. */
async function start(flags: RunFlagValues, warnings: Warnings): Promise<ServerHandle> {
  const { siteDir, host: hostname, port } = flags;
  try {
    return await startServer({
      siteDir,
      hostname,
      port,
      timeZone: flags.timeZone,
      fsync: flags.fsync,
      ...(flags.maxBody !== undefined ? { maxBody: flags.maxBody } : {}),
      ...(flags.maxTypes !== undefined ? { maxTypes: flags.maxTypes } : {}),
      ...(flags.maxSnapshotBytes !== undefined ? { maxSnapshotBytes: flags.maxSnapshotBytes } : {}),
      token: flags.token,
      insecure: flags.insecure,
      allowRunRoots: flags.allowRunRoots,
      ...(flags.siteTypes ? { siteTypes: flags.siteTypes } : {}),
      onWarning: (message) => warnings.warn(message),
      onInfo: (message) => warnings.info(message),
      ...(flags.compressAfter !== undefined ? { compressAfter: flags.compressAfter } : {}),
      ...(flags.retain !== undefined ? { retain: flags.retain } : {}),
      onError: (err) => console.error(`error: ${unexpectedErrorLine(err)}`),
    });
  } catch (err) {
    throw new Failure(startupFailure(err, { siteDir, hostname, port }));
  }
}

function logEvents(server: ServerHandle): void {
  server.service.subscribe((message) => {
    if (message.kind === "telemetry") {
      const e = message.event;
      console.log(`debug event ${e.stream}#${e.seq} ${e.type} ${e.line}`);
    } else {
      console.log(
        `debug run ${message.active ? "started" : "stopped"} ${JSON.stringify(message.run)}`,
      );
    }
  });
}

/** Prints the ready line and the early warnings, then waits for a shutdown by signal or request. */
async function serve(
  server: ServerHandle,
  flags: RunFlagValues,
  warnings: Warnings,
): Promise<number> {
  let signals = 0;
  const onSignal = () => {
    signals++;
    if (signals > 1) {
      console.error("Second signal: exiting without waiting for in-flight requests.");
      Deno.exit(1);
    }
    void server.shutdown();
  };
  const signalNames: Deno.Signal[] = Deno.build.os === "windows"
    ? ["SIGINT"]
    : ["SIGINT", "SIGTERM"];
  for (const s of signalNames) Deno.addSignalListener(s, onSignal);

  console.log(
    `telemetry service listening on ${server.url} (site dir ${server.service.siteDir}, zone ${flags.timeZone}, fsync ${flags.fsync}${
      flags.token ? ", token required" : ""
    })`,
  );
  warnings.release();
  try {
    await server.finished;
  } catch (err) {
    // CONTRACT 10: only POST /shutdown, SIGINT and SIGTERM end the service with 0; any other
    // way out (a listener that stayed down, a failed close) is non-zero so a supervisor restarts.
    console.error(
      err instanceof ListenerError
        ? `error: ${err.message}; the service stopped (files flushed and closed), exiting 1 so a supervisor restarts it`
        : `error: the service stopped with an error: ${errorText(err)}; exiting 1`,
    );
    return 1;
  } finally {
    for (const s of signalNames) Deno.removeSignalListener(s, onSignal);
  }
  console.log("telemetry service stopped; all files flushed and closed");
  return 0;
}

function startupFailure(
  err: unknown,
  ctx: { siteDir: string; hostname: string; port: number },
): string {
  if (err instanceof ConfigError || err instanceof SiteInUseError) return err.message;
  if (err instanceof Deno.errors.AddrInUse) {
    return `Cannot listen on ${ctx.hostname}:${ctx.port}: the port is in use; stop the other server ('obs-utils telemetry stop --port ${ctx.port}') or choose another --port`;
  }
  if (err instanceof Deno.errors.NotCapable) return permissionHint(err);
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
  if (err instanceof Deno.errors.AddrNotAvailable) {
    return `Cannot listen on ${ctx.hostname}:${ctx.port}: the address is not available on this machine; check --host`;
  }
  if (err instanceof RangeError) return err.message;
  return `Cannot start the telemetry service: ${err instanceof Error ? err.message : String(err)}`;
}
