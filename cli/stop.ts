/**
 * `obs-utils telemetry stop`: asks the running service to shut down and waits until it has.
 *
 * @example Usage
 * ```ts ignore
 * import { stopCommand } from "./stop.ts";
 * Deno.exit(await stopCommand(["--port", "6562"]));
 * ```
 *
 * @module
 */

// deno-lint-ignore-file no-console
import { TelemetryConnectionError, TelemetryHttpError } from "../client/client.ts";
import { sleep } from "../wire/async.ts";
import {
  client,
  clientFailure,
  type Connection,
  connection,
  CONNECTION_OPTIONS,
  Failure,
  parse,
  parseSeconds,
  printHelp,
  tokenAdvice,
} from "./common.ts";
import { isTelemetryRefusal, notTelemetry } from "./port_holder.ts";

/** The `--help` text of `stop`. */
export const STOP_HELP: string = `Usage: obs-utils telemetry stop [options]

Ask the running service to shut down and wait until it has.

Options:
  --host HOST    [env OBS_TELEMETRY_HOST, default localhost]
  --port PORT    [env OBS_TELEMETRY_PORT, default 6562]
  --token TOKEN  [env OBS_TELEMETRY_TOKEN]
  --tls          Use HTTPS (a server run with --tls-cert; trust its CA with DENO_CERT=FILE)
  --timeout S    Seconds to wait for the service to exit  [default 10]
  -h, --help     Show this help
`;

/**
 * Runs `obs-utils telemetry stop`.
 *
 * @param args The arguments after `telemetry stop`.
 * @returns The exit code, 0 once the service has stopped.
 * @throws {UsageError} For a bad flag.
 * @throws {Failure} If no service answers, it wants a token, or it still answers at the timeout.
 *
 * @example Usage
 * ```ts ignore
 * import { stopCommand } from "./stop.ts";
 * Deno.exit(await stopCommand(["--timeout", "30"]));
 * ```
 */
export async function stopCommand(args: string[]): Promise<number> {
  const { values } = parse("stop", args, {
    ...CONNECTION_OPTIONS,
    timeout: { type: "string" },
  }, false);
  if (values.help) return printHelp(STOP_HELP);
  const conn = connection(values, "stop");
  const timeoutS = values.timeout === undefined
    ? 10
    : parseSeconds(values.timeout, "--timeout", "stop");
  const api = client(conn, 2000);
  // Asked before the shutdown: a run that stays active resumes at the next start (docs/cli.md).
  // The answer also tells whether a telemetry service is there at all: another program on the
  // port must hear no POST /shutdown, and the operator must hear what it is.
  let activeRun: string | null = null;
  try {
    const ready = await api.ready();
    activeRun = ready.run_active ? ready.run_id : null;
  } catch (err) {
    if (!(err instanceof TelemetryConnectionError) && !isTelemetryRefusal(err)) {
      throw new Failure(notTelemetry(conn.baseUrl));
    }
  }
  try {
    await api.shutdown();
  } catch (err) {
    if (err instanceof TelemetryConnectionError) {
      throw new Failure(`No telemetry service answers at ${conn.baseUrl}; nothing to stop`);
    }
    if (!isTelemetryRefusal(err)) throw new Failure(notTelemetry(conn.baseUrl));
    if (err instanceof TelemetryHttpError && err.status === 401) {
      throw new Failure(tokenAdvice(conn));
    }
    // 503: it is already shutting down; wait for it like for our own request.
    if (!(err instanceof TelemetryHttpError && err.status === 503)) throw clientFailure(err, conn);
  }
  const code = await waitForExit(conn, timeoutS);
  if (activeRun !== null) console.error(activeRunNote(activeRun));
  return code;
}

/**
 * What `stop` prints when a run was active (docs/cli.md): the run goes on at the next start.
 *
 * @param runId The active run.
 * @returns The note.
 *
 * @example Usage
 * ```ts
 * import { activeRunNote } from "./stop.ts";
 * import assert from "node:assert/strict";
 *
 * assert.match(activeRunNote("m31-1"), /^note: run m31-1 is still active; it resumes/);
 * ```
 */
export function activeRunNote(runId: string): string {
  return `note: run ${runId} is still active; it resumes when the service starts (end it with obs-utils telemetry stop-run)`;
}

async function waitForExit(conn: Connection, timeoutS: number): Promise<number> {
  const deadline = Date.now() + timeoutS * 1000;
  while (Date.now() < deadline) {
    try {
      await client(conn, 500).health();
    } catch (err) {
      // Only a refused connection says it exited: the listener stays open until the site lock
      // is released (docs/storage.md). A busy machine may let a poll time out (the abort is
      // its cause, not fetch's TypeError), and that proves nothing.
      if (err instanceof TelemetryConnectionError && err.cause instanceof TypeError) {
        console.log(`telemetry service at ${conn.baseUrl} stopped`);
        return 0;
      }
      // 503 while draining, or a poll that timed out: keep waiting.
    }
    await sleep(100);
  }
  throw new Failure(
    `The service at ${conn.baseUrl} accepted the shutdown but still answers after ${timeoutS} s; check its log`,
  );
}
