/**
 * The records of runs (docs/cli.md, docs/storage.md): the active-run record
 * `<site_dir>/.active-run.json` a restart resumes a run from, the run log
 * `<site_dir>/runs.ndjson` (one line per start and stop) and `<run_dir>/run.json`, the latest
 * record of one run. This module writes them all, and is the one reader of the active-run record
 * ({@linkcode readActiveRun}); the log is read by `run_log.ts`.
 *
 * @example Usage
 * ```ts ignore
 * import { RunRecords } from "./run_records.ts";
 * const records = new RunRecords("/srv/telemetry", console.warn);
 * const run = { run_id: "m31-1", run_dir: "/srv/telemetry/m31-1",
 *   started_at: "2026-11-21T23:00:00.000Z", stopped_at: null, events: 0, meta: {} };
 * await records.writeRecord(run);
 * await records.appendLog(run);
 * ```
 *
 * @module
 */

import { join } from "node:path";
import { isJsonObject, type JsonObject, type RunRecord } from "../wire/event.ts";
import { errorText, StorageError } from "../core/errors.ts";
import { removeIfExists, writeJsonAtomic } from "./fs.ts";
import { ACTIVE_RUN_FILE, openPlainWriter, RUN_LOG_FILE, RUN_RECORD_FILE } from "./layout.ts";
import { runLogLine } from "./run_log.ts";

const encoder = new TextEncoder();

/**
 * The active-run record `<site_dir>/.active-run.json` as the service writes it at a run's start:
 * what a restart resumes the run from.
 *
 * @example The record of a run started at seq 41 of its stream
 * ```ts
 * import type { ActiveRunRecord } from "./run_records.ts";
 * import assert from "node:assert/strict";
 *
 * const saved: ActiveRunRecord = { run_id: "m31-1", run_dir: "/srv/telemetry/m31-1",
 *   started_at: "2026-11-21T23:00:00.000Z", meta: {}, seq_at_start: 41 };
 * assert.equal(saved.seq_at_start, 41);
 * ```
 */
export interface ActiveRunRecord {
  /** The run id. */
  run_id: string;
  /** The run directory, as recorded (absolute when the service wrote it). */
  run_dir: string;
  /** When this start of the run began. */
  started_at: string;
  /** The run's metadata (`{}` when the record holds no object there). */
  meta: JsonObject;
  /** The seq of the run's stream when the run started; absent when the record holds no number. */
  seq_at_start?: number;
}

/**
 * What {@linkcode readActiveRun} found at `.active-run.json`: no record (no file, or something
 * other than a regular file, which is not followed), a damaged one (not JSON, or without a text
 * `run_id`, `run_dir` and `started_at`), or the record.
 *
 * @example Telling the three apart
 * ```ts ignore
 * import { readActiveRun } from "./run_records.ts";
 * const saved = await readActiveRun("/srv/telemetry");
 * if (saved.state === "found") console.log("active:", saved.record.run_id);
 * else if (saved.state === "damaged") console.log("unreadable: no run resumes");
 * ```
 */
export type ActiveRunRead =
  | { readonly state: "none" }
  | { readonly state: "damaged" }
  | { readonly state: "found"; readonly record: ActiveRunRecord };

/**
 * Reads the active-run record `<siteDir>/.active-run.json`: the one reader of that file, for the
 * service's resume, the history reader, the forwarder and `obs-utils telemetry runs`. The
 * service's records are regular files: a link or a directory in its place is not followed and
 * reads as no record.
 *
 * @param siteDir The site directory.
 * @returns No record, a damaged one, or the record.
 * @throws {Deno.errors.NotCapable} Without read permission for the site directory (and any other
 *   error of the file system but a missing file).
 *
 * @example A record that is not JSON reads as damaged
 * ```ts
 * import { readActiveRun } from "./run_records.ts";
 * import assert from "node:assert/strict";
 *
 * const dir = await Deno.makeTempDir();
 * assert.deepEqual(await readActiveRun(dir), { state: "none" });
 * await Deno.writeTextFile(`${dir}/.active-run.json`, "{not json");
 * assert.deepEqual(await readActiveRun(dir), { state: "damaged" });
 * await Deno.remove(dir, { recursive: true });
 * ```
 */
export async function readActiveRun(siteDir: string): Promise<ActiveRunRead> {
  const path = join(siteDir, ACTIVE_RUN_FILE);
  let value: unknown;
  try {
    if (!(await Deno.lstat(path)).isFile) return { state: "none" };
    value = JSON.parse(await Deno.readTextFile(path));
  } catch (err) {
    if (err instanceof Deno.errors.NotFound) return { state: "none" };
    if (err instanceof SyntaxError) return { state: "damaged" };
    throw err;
  }
  if (
    !isJsonObject(value) || typeof value.run_id !== "string" ||
    typeof value.run_dir !== "string" || typeof value.started_at !== "string"
  ) return { state: "damaged" };
  return {
    state: "found",
    record: {
      run_id: value.run_id,
      run_dir: value.run_dir,
      started_at: value.started_at,
      meta: isJsonObject(value.meta) ? value.meta : {},
      ...(typeof value.seq_at_start === "number" ? { seq_at_start: value.seq_at_start } : {}),
    },
  };
}

/**
 * The run records of one site directory.
 *
 * @example Usage
 * ```ts ignore
 * import { RunRecords } from "./run_records.ts";
 * const records = new RunRecords("/srv/telemetry", console.warn);
 * const saved = await records.readActive();
 * if (saved.state === "damaged") console.log("moved aside:", await records.setAsideActive());
 * ```
 */
export class RunRecords {
  #siteDir: string;
  #warn: (message: string) => void;

  /**
   * Creates the records of a site directory; nothing is read yet.
   *
   * @param siteDir The site directory (its real path).
   * @param warn Told about a torn line of the run log moved aside.
   */
  constructor(siteDir: string, warn: (message: string) => void) {
    this.#siteDir = siteDir;
    this.#warn = warn;
  }

  /**
   * Reads the active-run record of this site directory, by {@linkcode readActiveRun}.
   *
   * @returns No record, a damaged one, or the record.
   *
   * @example A damaged record is moved aside
   * ```ts ignore
   * import { RunRecords } from "./run_records.ts";
   * const records = new RunRecords("/srv/telemetry", console.warn);
   * if ((await records.readActive()).state === "damaged") await records.setAsideActive();
   * ```
   */
  readActive(): Promise<ActiveRunRead> {
    return readActiveRun(this.#siteDir);
  }

  /**
   * Writes the active-run record atomically.
   *
   * @param record What a restart resumes from.
   */
  writeActive(record: unknown): Promise<void> {
    return writeJsonAtomic(join(this.#siteDir, ACTIVE_RUN_FILE), record);
  }

  /**
   * Removes the active-run record.
   *
   * @throws {StorageError} If it exists and cannot be removed.
   */
  async clearActive(): Promise<void> {
    try {
      await removeIfExists(join(this.#siteDir, ACTIVE_RUN_FILE));
    } catch (err) {
      throw new StorageError(`Cannot clear the active run: ${errorText(err)}`, { cause: err });
    }
  }

  /**
   * Moves an unreadable active-run record aside, so the next start does not trip on it again.
   *
   * @returns Where it went.
   */
  async setAsideActive(): Promise<string> {
    const path = join(this.#siteDir, ACTIVE_RUN_FILE);
    const aside = `${path}.corrupt-${Date.now()}`;
    await Deno.rename(path, aside);
    return aside;
  }

  /**
   * Appends a run record to the run log `runs.ndjson` (docs/cli.md) and fdatasyncs it, whatever
   * the fsync mode: the log is written once per run start and stop, before the answer. A torn
   * last line left by a crash is first moved to `runs.ndjson.torn` (docs/storage.md); a failed
   * append leaves no partial line.
   *
   * @param record The run record.
   * @throws {WriteError} If the line cannot be written (nothing is left of it).
   */
  async appendLog(record: RunRecord): Promise<void> {
    const path = join(this.#siteDir, RUN_LOG_FILE);
    const writer = await openPlainWriter(path, "always", this.#warn);
    try {
      await writer.append(encoder.encode(runLogLine(record)));
    } finally {
      await writer.close().catch(() => {});
    }
  }

  /**
   * Writes `<run_dir>/run.json`, the latest record of a run, by temporary file and rename. A
   * symbolic link planted at `run.json` is replaced, never written through.
   *
   * @param record The run record.
   */
  writeRecord(record: RunRecord): Promise<void> {
    return writeJsonAtomic(join(record.run_dir, RUN_RECORD_FILE), record);
  }
}
