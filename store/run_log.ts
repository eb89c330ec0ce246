/**
 * The run log (docs/cli.md): `<site_dir>/runs.ndjson` holds one run record (docs/http-api.md) per
 * line, appended when a run starts (`stopped_at: null`) and when it stops (filled), and
 * `<run_dir>/run.json` the latest record of one run. This module reads the log; the service
 * writes it through `RunRecords` (`run_records.ts`). Readers: `obs-utils telemetry runs`, and the
 * history reader, which finds a run's directory here.
 *
 * A reader must tolerate what a crash or an operator can leave: a torn last line (skipped, the
 * writer moves it to `runs.ndjson.torn` at its next append), lines that are not run records
 * (skipped and counted), and several lines for the same `run_id` (the latest wins).
 *
 * @example Usage
 * ```ts ignore
 * import { readRunLog } from "./run_log.ts";
 * const { runs } = await readRunLog("./telemetry");
 * for (const run of runs) console.log(run.run_id, run.stopped_at ?? "active");
 * ```
 *
 * @module
 */

import { join } from "node:path";
import { isJsonObject, type RunRecord } from "../wire/event.ts";
import { RUN_LOG_FILE } from "./layout.ts";

/** What {@linkcode readRunLog} found. */
export interface RunLog {
  /** Every run, the latest record of each `run_id`, newest start first. */
  runs: RunRecord[];
  /** Complete lines that are not run records (skipped). */
  skipped: number;
  /** Whether the file ends in a torn line (skipped). */
  torn: boolean;
}

/**
 * Parses one line of the run log.
 *
 * @param line One line, without its `\n`.
 * @returns The record, or `undefined` when the line is not a run record.
 *
 * @example Usage
 * ```ts
 * import { parseRunRecord } from "./run_log.ts";
 * import assert from "node:assert/strict";
 *
 * assert.equal(parseRunRecord("{not json"), undefined);
 * const line = '{"run_id":"001","run_dir":"/t/001","started_at":"2026-11-21T23:00:00.000Z",' +
 *   '"stopped_at":null,"events":0,"meta":{}}';
 * assert.equal(parseRunRecord(line)?.run_id, "001");
 * ```
 */
export function parseRunRecord(line: string): RunRecord | undefined {
  let value: unknown;
  try {
    value = JSON.parse(line);
  } catch {
    return undefined;
  }
  if (
    !isJsonObject(value) || typeof value.run_id !== "string" || value.run_id === "" ||
    typeof value.run_dir !== "string" || typeof value.started_at !== "string" ||
    !(value.stopped_at === null || typeof value.stopped_at === "string")
  ) return undefined;
  return {
    run_id: value.run_id,
    run_dir: value.run_dir,
    started_at: value.started_at,
    stopped_at: value.stopped_at,
    events: typeof value.events === "number" && Number.isSafeInteger(value.events) &&
        value.events >= 0
      ? value.events
      : 0,
    meta: isJsonObject(value.meta) ? value.meta : {},
  };
}

/**
 * Reads the run log text: the latest record of each `run_id` (a later line wins, so a stop
 * record replaces its start record), newest start first. A last line without its `\n` is torn
 * (the append was cut short) and skipped.
 *
 * @param text The whole file.
 * @returns The runs, and what was skipped.
 *
 * @example Usage
 * ```ts
 * import { parseRunLog } from "./run_log.ts";
 * import assert from "node:assert/strict";
 *
 * const start = { run_id: "a", run_dir: "/t/a", started_at: "2026-11-21T23:00:00.000Z",
 *   stopped_at: null, events: 0, meta: {} };
 * const stop = { ...start, stopped_at: "2026-11-22T05:00:00.000Z", events: 7 };
 * const log = parseRunLog(`${JSON.stringify(start)}\n${JSON.stringify(stop)}\n{"run_id":"b`);
 * assert.equal(log.runs.length, 1);
 * assert.equal(log.runs[0]!.events, 7);
 * assert.equal(log.torn, true);
 * ```
 */
export function parseRunLog(text: string): RunLog {
  const lines = text.split("\n");
  // After the last `\n`: "" for a clean end, else a torn line.
  const last = lines.pop() ?? "";
  const latest = new Map<string, RunRecord>();
  let skipped = 0;
  for (const line of lines) {
    if (line.trim() === "") continue;
    const record = parseRunRecord(line);
    if (!record) {
      skipped++;
      continue;
    }
    // Delete first, so that the map's order is that of each run's latest line.
    latest.delete(record.run_id);
    latest.set(record.run_id, record);
  }
  const runs = [...latest.values()];
  // Newest start first; ISO timestamps in UTC compare as text. Equal starts: the later line first.
  const order = new Map(runs.map((run, i) => [run, i]));
  runs.sort((a, b) =>
    a.started_at < b.started_at
      ? 1
      : a.started_at > b.started_at
      ? -1
      : order.get(b)! - order.get(a)!
  );
  return { runs, skipped, torn: last !== "" };
}

/**
 * Reads `<siteDir>/runs.ndjson` directly (no service needed). A missing file is an empty log.
 *
 * @param siteDir The site directory.
 * @returns The runs, newest start first, the latest record of each.
 * @throws {Deno.errors.NotCapable} Without read permission for the site directory.
 *
 * @example Usage
 * ```ts ignore
 * import { readRunLog } from "./run_log.ts";
 * const run = (await readRunLog("./telemetry")).runs.find((r) => r.run_id === "m31-1");
 * console.log(run?.run_dir);
 * ```
 */
export async function readRunLog(siteDir: string): Promise<RunLog> {
  let text: string;
  try {
    text = new TextDecoder().decode(await Deno.readFile(join(siteDir, RUN_LOG_FILE)));
  } catch (err) {
    if (err instanceof Deno.errors.NotFound) return { runs: [], skipped: 0, torn: false };
    throw err;
  }
  return parseRunLog(text);
}

/**
 * Every run directory each run id of the run log was started in, in the order first logged. A
 * run id names one run directory (docs/http-api.md), so a log written since that rule holds has
 * one directory per id; a log from before may have more, and every one of them counts.
 *
 * @param text The whole run log (a torn last line is skipped, as by {@linkcode parseRunLog}).
 * @returns The directories by run id.
 *
 * @example Usage
 * ```ts
 * import { runDirsByRunId } from "./run_log.ts";
 * import assert from "node:assert/strict";
 *
 * const start = { run_id: "m31", run_dir: "/t/m31", started_at: "2026-11-21T23:00:00.000Z",
 *   stopped_at: null, events: 0, meta: {} };
 * const stop = { ...start, stopped_at: "2026-11-22T05:00:00.000Z", events: 7 };
 * const dirs = runDirsByRunId(`${JSON.stringify(start)}\n${JSON.stringify(stop)}\n`);
 * assert.deepEqual(dirs.get("m31"), ["/t/m31"]);
 * ```
 */
export function runDirsByRunId(text: string): Map<string, string[]> {
  const lines = text.split("\n");
  lines.pop(); // "" after the last "\n", or a torn line
  const dirs = new Map<string, string[]>();
  for (const line of lines) {
    if (line.trim() === "") continue;
    const record = parseRunRecord(line);
    if (!record) continue;
    const known = dirs.get(record.run_id);
    if (!known) dirs.set(record.run_id, [record.run_dir]);
    else if (!known.includes(record.run_dir)) known.push(record.run_dir);
  }
  return dirs;
}

/**
 * Reads `<siteDir>/runs.ndjson` for {@linkcode runDirsByRunId}. A missing file is an empty log.
 *
 * @param siteDir The site directory.
 * @returns The run directories by run id.
 *
 * @example Usage
 * ```ts ignore
 * import { readRunDirs } from "./run_log.ts";
 * console.log((await readRunDirs("./telemetry")).get("m31"));
 * ```
 */
export async function readRunDirs(siteDir: string): Promise<Map<string, string[]>> {
  try {
    return runDirsByRunId(
      new TextDecoder().decode(await Deno.readFile(join(siteDir, RUN_LOG_FILE))),
    );
  } catch (err) {
    if (err instanceof Deno.errors.NotFound) return new Map();
    throw err;
  }
}

/**
 * The run log line of a record: the record's fields in docs/http-api.md's order, compact, with `\n`.
 *
 * @param record The run record.
 * @returns The line.
 *
 * @example Usage
 * ```ts
 * import { runLogLine } from "./run_log.ts";
 * import assert from "node:assert/strict";
 *
 * const line = runLogLine({ run_id: "a", run_dir: "/t/a", started_at: "2026-11-21T23:00:00.000Z",
 *   stopped_at: null, events: 0, meta: {} });
 * assert.ok(line.startsWith('{"run_id":"a",') && line.endsWith("}\n"));
 * ```
 */
export function runLogLine(record: RunRecord): string {
  const { run_id, run_dir, started_at, stopped_at, events, meta } = record;
  return JSON.stringify({ run_id, run_dir, started_at, stopped_at, events, meta }) + "\n";
}
