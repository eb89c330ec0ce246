/**
 * `obs-utils telemetry start-run | stop-run | runs` (docs/cli.md): start and stop a run of the
 * running service, and list every run from the run log `runs.ndjson`, read directly (no service
 * needed).
 *
 * @example Usage
 * ```ts ignore
 * import { startRunCommand } from "./runs.ts";
 * Deno.exit(await startRunCommand(["m31-1", "--meta", '{"target": "M31"}']));
 * ```
 *
 * @module
 */

// deno-lint-ignore-file no-console
import { join, resolve } from "node:path";
import { scanStream } from "../store/stored_read.ts";
import { TelemetryHttpError } from "../client/client.ts";
import type { RunRecord } from "../wire/event.ts";
import { readEnv } from "../wire/address.ts";
import { DEFAULT_SITE_DIR } from "./flags.ts";
import { readRunLog } from "../store/run_log.ts";
import { RUN_FILE } from "../store/layout.ts";
import { readActiveRun } from "../store/run_records.ts";
import {
  client,
  clientFailure,
  connection,
  CONNECTION_HELP,
  CONNECTION_OPTIONS,
  counted,
  Failure,
  HELP_OPTION,
  parse,
  parseJsonObject,
  printHelp,
  printJson,
  UsageError,
} from "./common.ts";
import { printable } from "../wire/terminal_text.ts";

/** The `--help` text of `start-run`. */
export const START_RUN_HELP: string = `Usage: obs-utils telemetry start-run [RUN_ID] [options]

Start a run on the running service and print its record. Without RUN_ID and --run-dir the
service numbers the run (001, 002, ...). Starting the run that is already active is a no-op.

Options:
  --run-dir D     The run's directory, relative to the site directory or absolute
  --meta JSON     Stored with the run record, a JSON object, e.g. '{"target": "M31"}'
  --json          Print the record as JSON
${CONNECTION_HELP}
`;

/** The `--help` text of `stop-run`. */
export const STOP_RUN_HELP: string = `Usage: obs-utils telemetry stop-run [options]

Stop the active run and print its final record, with the number of events. The service keeps
running.

Options:
  --json          Print the record as JSON
${CONNECTION_HELP}
`;

/** The `--help` text of `runs`. */
export const RUNS_HELP: string = `Usage: obs-utils telemetry runs [options]

List every run of a site directory from its run log (runs.ndjson), newest first. Reads the
files directly: no running service is needed.

Options:
  --site-dir D    [env OBS_TELEMETRY_SITE_DIR, default ${DEFAULT_SITE_DIR}]
  --json          Print the runs as a JSON array of run records
  -h, --help      Show this help
`;

/**
 * One readable line for a run record.
 *
 * @param run The record.
 * @returns The line.
 *
 * @example Usage
 * ```ts
 * import { runLine } from "./runs.ts";
 * import assert from "node:assert/strict";
 *
 * assert.equal(
 *   runLine({ run_id: "001", run_dir: "/t/001", started_at: "2026-11-21T23:00:00.000Z",
 *     stopped_at: null, events: 0, meta: {} }),
 *   "run 001 active since 2026-11-21T23:00:00.000Z, 0 events, dir /t/001",
 * );
 * ```
 */
export function runLine(run: RunRecord): string {
  const when = run.stopped_at === null
    ? `active since ${run.started_at}`
    : `started ${run.started_at}, stopped ${run.stopped_at}`;
  const target = targetOf(run);
  // run_id, run_dir and meta come from the service or the run log: printable only (docs/cli.md).
  return printable(
    `run ${run.run_id} ${when}, ${counted(run.events, "event")}, dir ${run.run_dir}${
      target === "" ? "" : `, target ${target}`
    }`,
  );
}

/** `meta.target` for display, or "". */
function targetOf(run: RunRecord): string {
  const target = run.meta.target;
  if (target === undefined || target === null) return "";
  return typeof target === "string" ? target : JSON.stringify(target);
}

/**
 * The `runs` table: RUN_ID, STARTED, STOPPED (or "active"), EVENTS, DIR and, when any run has
 * one, TARGET (`meta.target`). Columns are padded to their widest cell.
 *
 * @param runs The runs, in the order to print.
 * @returns The table, one line per run after the header, without a final newline.
 *
 * @example Usage
 * ```ts
 * import { renderRuns } from "./runs.ts";
 * import assert from "node:assert/strict";
 *
 * const table = renderRuns([{ run_id: "001", run_dir: "/t/001",
 *   started_at: "2026-11-21T23:00:00.000Z", stopped_at: null, events: 3, meta: {} }]);
 * assert.match(table.split("\n")[1]!, /^001 +2026-11-21T23:00:00.000Z +active +3 +\/t\/001$/);
 * ```
 */
export function renderRuns(runs: readonly RunRecord[]): string {
  const withTarget = runs.some((run) => targetOf(run) !== "");
  const header = [
    "RUN_ID",
    "STARTED",
    "STOPPED",
    "EVENTS",
    "DIR",
    ...(withTarget ? ["TARGET"] : []),
  ];
  const rows = runs.map((run) =>
    [
      run.run_id,
      run.started_at,
      run.stopped_at ?? "active",
      String(run.events),
      run.run_dir,
      ...(withTarget ? [targetOf(run)] : []),
    ].map(printable)
  );
  const widths = header.map((h, i) => Math.max(h.length, ...rows.map((r) => r[i]!.length)));
  return [header, ...rows].map((cells) =>
    cells.map((cell, i) => i === cells.length - 1 ? cell : cell.padEnd(widths[i]!)).join("  ")
      .trimEnd()
  ).join("\n");
}

/**
 * Runs `obs-utils telemetry start-run`.
 *
 * @param args The arguments after `telemetry start-run`.
 * @returns The exit code, 0 once the run is active.
 * @throws {UsageError} For a bad flag or `--meta` that is not a JSON object.
 * @throws {Failure} If no service answers, or it refuses (another run active: 409).
 *
 * @example Usage
 * ```ts ignore
 * import { startRunCommand } from "./runs.ts";
 * Deno.exit(await startRunCommand(["--run-dir", "2026/m31"]));
 * ```
 */
export async function startRunCommand(args: string[]): Promise<number> {
  const { values, positionals } = parse("start-run", args, {
    ...CONNECTION_OPTIONS,
    "run-dir": { type: "string" },
    meta: { type: "string" },
    json: { type: "boolean" },
  }, true);
  if (values.help) return printHelp(START_RUN_HELP);
  if (positionals.length > 1) {
    throw new UsageError(`expected at most one RUN_ID, got ${positionals.length}`, "start-run");
  }
  const meta = values.meta === undefined
    ? undefined
    : parseJsonObject(values.meta, "--meta", "start-run", `'{"target": "M31"}'`);
  const conn = connection(values, "start-run");
  const api = client(conn);
  let run: RunRecord;
  try {
    run = await api.startRun({
      ...(positionals[0] !== undefined ? { runId: positionals[0] } : {}),
      ...(values["run-dir"] !== undefined ? { runDir: values["run-dir"] } : {}),
      ...(meta ? { meta } : {}),
    });
  } catch (err) {
    if (err instanceof TypeError) throw new UsageError(err.message, "start-run");
    // A 409 that is not about an active run: the run id names another directory; the
    // service's detail says which and what to do (docs/http-api.md).
    if (
      err instanceof TelemetryHttpError && err.status === 409 &&
      !/^Run "[^"]*" is active/.test(err.detail)
    ) {
      throw new Failure(err.detail.replace(/\.$/, ""));
    }
    if (err instanceof TelemetryHttpError && err.status === 409) {
      const active = await api.getRun().catch(() => undefined);
      const id = active?.run_id ?? /Run "([^"]*)" is active/.exec(err.detail ?? "")?.[1];
      throw new Failure(
        `run ${
          id ?? "(unknown)"
        } is active; end it with 'obs-utils telemetry stop-run' before starting another`,
      );
    }
    throw clientFailure(err, conn);
  }
  if (values.json) printJson(JSON.stringify(run));
  else console.log(runLine(run));
  return 0;
}

/**
 * Runs `obs-utils telemetry stop-run`.
 *
 * @param args The arguments after `telemetry stop-run`.
 * @returns The exit code, 0 once the run has stopped.
 * @throws {UsageError} For a bad flag.
 * @throws {Failure} If no service answers, or no run is active.
 *
 * @example Usage
 * ```ts ignore
 * import { stopRunCommand } from "./runs.ts";
 * Deno.exit(await stopRunCommand(["--json"]));
 * ```
 */
export async function stopRunCommand(args: string[]): Promise<number> {
  const { values } = parse("stop-run", args, {
    ...CONNECTION_OPTIONS,
    json: { type: "boolean" },
  }, false);
  if (values.help) return printHelp(STOP_RUN_HELP);
  const conn = connection(values, "stop-run");
  let run: RunRecord;
  try {
    run = await client(conn).stopRun();
  } catch (err) {
    if (err instanceof TelemetryHttpError && err.status === 409) {
      throw new Failure("no run is active");
    }
    throw clientFailure(err, conn);
  }
  if (values.json) printJson(JSON.stringify(run));
  else console.log(runLine(run));
  return 0;
}

/**
 * Runs `obs-utils telemetry runs`: reads `<site_dir>/runs.ndjson` directly.
 *
 * @param args The arguments after `telemetry runs`.
 * @returns The exit code, 0 (an empty or missing log prints that no run was recorded).
 * @throws {UsageError} For a bad flag.
 * @throws {Failure} If the site directory cannot be read.
 *
 * @example Usage
 * ```ts ignore
 * import { runsCommand } from "./runs.ts";
 * Deno.exit(await runsCommand(["--site-dir", "/srv/telemetry"]));
 * ```
 */
export async function runsCommand(args: string[]): Promise<number> {
  const { values, positionals } = parse("runs", args, {
    "site-dir": { type: "string" },
    json: { type: "boolean" },
    ...HELP_OPTION,
  }, true);
  if (values.help) return printHelp(RUNS_HELP);
  if (positionals.length > 0) {
    throw new UsageError(
      `unexpected argument "${positionals[0]}"; name the site directory with --site-dir`,
      "runs",
    );
  }
  const siteDir = resolve(
    values["site-dir"] ?? readEnv("OBS_TELEMETRY_SITE_DIR") ?? DEFAULT_SITE_DIR,
  );
  try {
    const info = await Deno.stat(siteDir);
    if (!info.isDirectory) throw new Failure(`${siteDir} is not a directory; check --site-dir`);
  } catch (err) {
    if (err instanceof Deno.errors.NotFound) {
      throw new Failure(`no site directory at ${siteDir}; check --site-dir`);
    }
    throw err;
  }
  let log;
  try {
    log = await readRunLog(siteDir);
  } catch (err) {
    if (err instanceof Deno.errors.NotCapable) throw err;
    throw new Failure(
      `cannot read the run log in ${siteDir}: ${err instanceof Error ? err.message : err}`,
    );
  }
  await countActiveEvents(siteDir, log.runs);
  if (values.json) {
    printJson(JSON.stringify(log.runs));
    return 0;
  }
  if (log.runs.length === 0) {
    console.log(printable(`no runs recorded in ${siteDir}`));
    return 0;
  }
  console.log(renderRuns(log.runs));
  return 0;
}

/**
 * The run log holds an active run's count as of its start (or resume). The live count is in its
 * stream file: the lines after the seq the run started at (from `.active-run.json`). Read when
 * possible; when not (no permission for a run root elsewhere, a file gone), the logged count stays.
 */
async function countActiveEvents(siteDir: string, runs: RunRecord[]): Promise<void> {
  try {
    const read = await readActiveRun(siteDir);
    if (read.state !== "found" || read.record.seq_at_start === undefined) return;
    const { run_id, run_dir, seq_at_start } = read.record;
    const run = runs.find((r) =>
      r.stopped_at === null && r.run_id === run_id && r.run_dir === run_dir
    );
    if (!run) return;
    const scan = await scanStream(join(run.run_dir, RUN_FILE), seq_at_start);
    run.events = scan.countedAfter;
  } catch {
    // The logged count stands.
  }
}
