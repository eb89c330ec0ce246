/**
 * `obs-utils telemetry collect` (docs/collect.md): the collector, beside the service with its
 * own scoped permissions. Loaded by `cli.ts` only when this command runs, so the other commands
 * never load the collector's inputs and their npm packages.
 *
 * @module
 */

// deno-lint-ignore-file no-console
import { readEnv } from "../wire/address.ts";
import { printable } from "../wire/terminal_text.ts";
import { Collector } from "../collect/collector.ts";
import { CollectConfigError, readCollectConfig } from "../collect/config.ts";
import { INPUT_KINDS } from "../collect/inputs/mod.ts";
import { Outbox } from "../collect/outbox.ts";
import { client, connection, HELP_OPTION, parse, printHelp, UsageError } from "./common.ts";
import { COLLECT_HELP, COLLECT_OPTIONS } from "./collect_help.ts";
import { printLog, stopOnSignals } from "./beside.ts";

/**
 * How long the outbox waits for the answer to one post. A batch the service stored but answered
 * late (a disk stalling in fsync) and given up on is posted again with its `Idempotency-Key` and
 * answered from it, not stored twice; the long wait spares a stalling disk the retries, so only a
 * service that is really gone times out (docs/collect.md, "Faults").
 */
const POST_TIMEOUT_MS = 30_000;

/** How long `--once` listens to push inputs. */
const ONCE_LISTEN_MS = 5_000;

/**
 * Runs `obs-utils telemetry collect`.
 *
 * @param args The arguments after `collect`.
 * @returns The exit code: 0 stopped by a signal (or `--once` done), 1 when `--once` found an
 *   input that never came up, 2 a bad config or flag.
 */
export async function collectCommand(args: string[]): Promise<number> {
  const { values } = parse("collect", args, { ...COLLECT_OPTIONS, ...HELP_OPTION }, false);
  if (values.help) return printHelp(COLLECT_HELP);
  const file = values.config ?? readEnv("OBS_TELEMETRY_COLLECT");
  if (file === undefined) {
    throw new UsageError("--config FILE is required (or set OBS_TELEMETRY_COLLECT)", "collect");
  }
  const conn = connection(values, "collect");
  let config;
  try {
    config = readCollectConfig(file, INPUT_KINDS);
  } catch (err) {
    if (!(err instanceof CollectConfigError)) throw err;
    console.error(printable(err.message));
    return 2;
  }
  const log = printLog(values.once === true);
  const collector = new Collector({ config, log });
  if (values.once) {
    const { events, neverUp } = await collector.onceReport(ONCE_LISTEN_MS);
    for (const event of events) {
      console.log(JSON.stringify({
        type: event.type,
        ts: event.ts instanceof Date ? event.ts.toISOString() : event.ts,
        data: event.data,
        ...(event.meta ? { meta: event.meta } : {}),
        ...(event.storePermanently !== undefined
          ? { store_permanently: event.storePermanently }
          : {}),
      }));
    }
    // Trying a config must not pass while a source is down: it read nothing (docs/collect.md).
    for (const input of neverUp) {
      log(
        "error",
        `input ${input.name} (${input.kind}) never came up, so --once read nothing from it: ${input.reason}`,
      );
    }
    return neverUp.length > 0 ? 1 : 0;
  }
  using stop = stopOnSignals();
  log("info", `collecting ${config.inputs.length} input(s) from ${file} into ${conn.baseUrl}`);
  const outbox = new Outbox(client(conn, POST_TIMEOUT_MS), log);
  await collector.run(outbox, stop.signal);
  log("info", "stopped");
  return 0;
}
