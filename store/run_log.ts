/**
 * The run log (docs/cli.md): `<site_dir>/runs.ndjson` holds one run record (docs/http-api.md) per
 * line, appended when a run starts (`stopped_at: null`) and when it stops (filled), and
 * `<run_dir>/run.json` the latest record of one run. This module is the one reader and parser of
 * the log (docs/architecture.md); the service writes it through `RunRecords` (`run_records.ts`).
 * Every reader calls {@linkcode readRunLog}: `obs-utils telemetry runs`, the service's runs,
 * retention, the history reader (which finds a run's directory here) and the forwarder (which
 * reads only what was appended since its previous poll).
 *
 * A reader must tolerate what a crash or an operator can leave: a torn last line (skipped, the
 * writer moves it to `runs.ndjson.torn` at its next append), lines that are not run records
 * (skipped and counted), a line longer than the service ever writes (damage, docs/storage.md),
 * something other than a regular file in the log's place (not followed: no log), and several
 * lines for the same `run_id` (the latest wins).
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
import { isJsonObject, type JsonObject, type RunRecord } from "../wire/event.ts";
import { RUN_LOG_FILE } from "./layout.ts";
import { type DamagedFileError, OffsetMismatchError, readLines, storedFile } from "./site_files.ts";

/**
 * One line of the run log as far as it names a run: the readers that need only part of a record
 * (a run's directory, whether it stopped) go by these, so a line with a field missing still
 * counts for them.
 *
 * @example A line without `started_at` still names its run's directory
 * ```ts
 * import { parseRunLog } from "./run_log.ts";
 * import assert from "node:assert/strict";
 *
 * const log = parseRunLog('{"run_id":"n1","run_dir":"/t/n1","stopped_at":null}\n');
 * assert.deepEqual(log.lines, [{ runId: "n1", runDir: "/t/n1", stoppedAt: undefined }]);
 * assert.equal(log.runs.length, 0);
 * ```
 */
export interface RunLogLine {
  /** The run id, when the line has one as text. */
  readonly runId: string | undefined;
  /** The run directory (a line without one names no run and is not listed). */
  readonly runDir: string;
  /** When the run stopped, when the line says so as text; `undefined` for `null` or nothing. */
  readonly stoppedAt: string | undefined;
}

/**
 * What {@linkcode parseRunLog} and {@linkcode readRunLog} found.
 *
 * @example A stop record replaces its start record
 * ```ts
 * import { parseRunLog } from "./run_log.ts";
 * import assert from "node:assert/strict";
 *
 * const start = { run_id: "a", run_dir: "/t/a", started_at: "2026-11-21T23:00:00.000Z",
 *   stopped_at: null, events: 0, meta: {} };
 * const stop = { ...start, stopped_at: "2026-11-22T05:00:00.000Z", events: 7 };
 * const log = parseRunLog(`${JSON.stringify(start)}\ngarbage\n${JSON.stringify(stop)}\n`);
 * assert.deepEqual(log.runs.map((r) => r.events), [7]);
 * assert.equal(log.skipped, 1);
 * assert.equal(log.lines.length, 2);
 * ```
 */
export interface RunLog {
  /** Every run, the latest record of each `run_id`, newest start first. */
  runs: RunRecord[];
  /** Complete lines that are not run records, and damaged lines (skipped). */
  skipped: number;
  /** Whether the log ends in a torn line (skipped). */
  torn: boolean;
  /**
   * Every run directory each run id was started in, in the order first logged. A run id names one
   * run directory (docs/http-api.md), so a log written since that rule holds has one directory
   * per id; a log from before may have more, and every one of them counts.
   */
  runDirs: Map<string, string[]>;
  /** Every line that names a run directory, in the order of the log. */
  lines: RunLogLine[];
}

/**
 * Where a read of the run log ended, to continue from with {@linkcode ReadRunLogOptions.after}.
 *
 * @example Polling the run log
 * ```ts ignore
 * import { readRunLog, type RunLogEnd } from "./run_log.ts";
 * let end: RunLogEnd | undefined;
 * const read = await readRunLog("./telemetry", { after: end });
 * end = read.end;
 * ```
 */
export interface RunLogEnd {
  /** The inode of the file read; `null` when there was none (or the platform has none). */
  readonly ino: number | null;
  /** The byte just after the last whole line read. */
  readonly offset: number;
}

/**
 * What {@linkcode readRunLog} read: the log, and where the read ended.
 *
 * @example Only what was appended since
 * ```ts ignore
 * import { readRunLog } from "./run_log.ts";
 * const first = await readRunLog("./telemetry");
 * const next = await readRunLog("./telemetry", { after: first.end });
 * if (next.continued) console.log("appended:", next.runs.map((r) => r.run_id));
 * ```
 */
export interface RunLogRead extends RunLog {
  /** Where this read ended: pass it as `after` to read only what is appended next. */
  end: RunLogEnd;
  /**
   * Whether this read continued the `after` it was given, so that its runs are only those of the
   * lines appended since; `false` when it read the whole file (no `after`, or the file was
   * replaced, shortened or removed since).
   */
  continued: boolean;
}

/**
 * Options of {@linkcode readRunLog}.
 *
 * @example Damage reported rather than counted
 * ```ts ignore
 * import { readRunLog } from "./run_log.ts";
 * await readRunLog("./telemetry", { onDamage: (damage) => console.warn(damage.message) });
 * ```
 */
export interface ReadRunLogOptions {
  /** Where a previous read ended: read only what was appended since, if it is the same file. */
  after?: RunLogEnd | undefined;
  /**
   * Told about a damaged line (longer than the service ever writes, docs/storage.md), after which
   * reading goes on. Without it the line counts as skipped.
   */
  onDamage?: ((damage: DamagedFileError) => void) | undefined;
}

/** The JSON object of a line, or `undefined` when the line is none. */
function parseObject(line: string): JsonObject | undefined {
  try {
    const value: unknown = JSON.parse(line);
    return isJsonObject(value) ? value : undefined;
  } catch {
    return undefined;
  }
}

/** The run record a line's object is, or `undefined` when a field is missing or wrong. */
function recordOf(value: JsonObject): RunRecord | undefined {
  if (
    typeof value.run_id !== "string" || value.run_id === "" ||
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

/** The log's lines taken one at a time, in order, into a {@linkcode RunLog}. */
class RunLogFold {
  readonly #latest = new Map<string, RunRecord>();
  readonly #runDirs = new Map<string, string[]>();
  readonly #lines: RunLogLine[] = [];
  skipped = 0;

  /** Takes one complete line, without its `\n`. */
  add(text: string): void {
    if (text.trim() === "") return;
    const value = parseObject(text);
    if (value !== undefined && typeof value.run_dir === "string") {
      this.#lines.push({
        runId: typeof value.run_id === "string" ? value.run_id : undefined,
        runDir: value.run_dir,
        stoppedAt: typeof value.stopped_at === "string" ? value.stopped_at : undefined,
      });
    }
    const record = value === undefined ? undefined : recordOf(value);
    if (!record) {
      this.skipped++;
      return;
    }
    // Delete first, so that the map's order is that of each run's latest line.
    this.#latest.delete(record.run_id);
    this.#latest.set(record.run_id, record);
    const known = this.#runDirs.get(record.run_id);
    if (!known) this.#runDirs.set(record.run_id, [record.run_dir]);
    else if (!known.includes(record.run_dir)) known.push(record.run_dir);
  }

  /** The log of the lines taken. */
  log(torn: boolean): RunLog {
    const runs = [...this.#latest.values()];
    // Newest start first; ISO timestamps in UTC compare as text. Equal starts: the later line first.
    const order = new Map(runs.map((run, i) => [run, i]));
    runs.sort((a, b) =>
      a.started_at < b.started_at
        ? 1
        : a.started_at > b.started_at
        ? -1
        : order.get(b)! - order.get(a)!
    );
    return { runs, skipped: this.skipped, torn, runDirs: this.#runDirs, lines: this.#lines };
  }
}

/**
 * Parses the run log's text: the latest record of each `run_id` (a later line wins, so a stop
 * record replaces its start record), newest start first. A last line without its `\n` is torn
 * (the append was cut short) and skipped.
 *
 * @param text The whole file.
 * @returns The runs, and what was skipped.
 *
 * @example A torn last line is skipped
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
 * assert.deepEqual(log.runDirs.get("a"), ["/t/a"]);
 * assert.equal(log.torn, true);
 * ```
 */
export function parseRunLog(text: string): RunLog {
  const lines = text.split("\n");
  // After the last `\n`: "" for a clean end, else a torn line.
  const last = lines.pop() ?? "";
  const fold = new RunLogFold();
  for (const line of lines) fold.add(line);
  return fold.log(last !== "");
}

/**
 * Reads `<siteDir>/runs.ndjson` directly (no service needed): the one reader of the run log. A
 * missing file, or anything but a regular file in its place (a link is not followed), is an
 * empty log. Lines are read as every stored file is (docs/storage.md): none longer than the
 * service ever writes is held in memory. With `after`, only the lines appended since that read
 * are read, when the file is still the one read then and no shorter.
 *
 * @param siteDir The site directory.
 * @param options Where a previous read ended, and who is told about damaged lines.
 * @returns The runs, newest start first, the latest record of each, and where the read ended.
 * @throws {Deno.errors.NotCapable} Without read permission for the site directory.
 *
 * @example The whole log, then what was appended
 * ```ts ignore
 * import { readRunLog } from "./run_log.ts";
 * const first = await readRunLog("./telemetry");
 * console.log(first.runs.find((r) => r.run_id === "m31-1")?.run_dir);
 * const appended = await readRunLog("./telemetry", { after: first.end });
 * console.log(appended.continued ? appended.runs : "read again from its start");
 * ```
 */
export async function readRunLog(
  siteDir: string,
  options: ReadRunLogOptions = {},
): Promise<RunLogRead> {
  const path = join(siteDir, RUN_LOG_FILE);
  let info: Deno.FileInfo;
  try {
    info = await Deno.lstat(path);
  } catch (err) {
    if (err instanceof Deno.errors.NotFound) return emptyRead();
    throw err;
  }
  // The service's records are regular files; a link in their place is not followed.
  if (!info.isFile) return emptyRead();
  const { after } = options;
  const continued = after !== undefined && after.ino === info.ino && after.offset <= info.size;
  try {
    return await readFrom(path, info, continued ? after.offset : 0, options.onDamage);
  } catch (err) {
    if (err instanceof Deno.errors.NotFound) return emptyRead();
    // Rewritten in place since `after`: its lines are other lines now.
    if (continued && err instanceof OffsetMismatchError) {
      return await readFrom(path, info, 0, options.onDamage);
    }
    throw err;
  }
}

/**
 * Where the run log ends now, without reading it: a later {@linkcode readRunLog} given this as
 * `after` reads only the lines appended since (the safety latch keeps it, docs/safety.md).
 *
 * @param siteDir The site directory.
 * @returns The log's inode and size; `{ino: null, offset: 0}` when there is no log (or
 *   something other than a regular file is in its place).
 *
 * @example Usage
 * ```ts ignore
 * import { readRunLog, runLogEnd } from "./run_log.ts";
 * const end = await runLogEnd("./telemetry");
 * const since = await readRunLog("./telemetry", { after: end });
 * ```
 */
export async function runLogEnd(siteDir: string): Promise<RunLogEnd> {
  try {
    const info = await Deno.lstat(join(siteDir, RUN_LOG_FILE));
    if (info.isFile) return { ino: info.ino, offset: info.size };
  } catch (err) {
    if (!(err instanceof Deno.errors.NotFound)) throw err;
  }
  return { ino: null, offset: 0 };
}

function emptyRead(): RunLogRead {
  return { ...new RunLogFold().log(false), end: { ino: null, offset: 0 }, continued: false };
}

async function readFrom(
  path: string,
  info: Deno.FileInfo,
  offset: number,
  onDamage: ((damage: DamagedFileError) => void) | undefined,
): Promise<RunLogRead> {
  const fold = new RunLogFold();
  let end = offset;
  if (info.size > offset) {
    const lines = readLines(storedFile(path), {
      offset,
      onDamage: onDamage ?? (() => fold.skipped++),
    });
    for await (const batch of lines) {
      for (const line of batch) fold.add(line.text);
      end = batch.at(-1)?.end ?? end;
    }
  }
  return {
    ...fold.log(info.size > end),
    end: { ino: info.ino, offset: end },
    continued: offset > 0,
  };
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
