/**
 * The records of runs (docs/cli.md, docs/storage.md): the active-run record
 * `<site_dir>/.active-run.json` a restart resumes a run from, the run log
 * `<site_dir>/runs.ndjson` (one line per start and stop) and `<run_dir>/run.json`, the latest
 * record of one run. The log is read by `run_log.ts`; this module writes them all.
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
import type { RunRecord } from "../wire/event.ts";
import { errorText, StorageError } from "../core/errors.ts";
import { readJsonFile, removeIfExists, writeJsonAtomic } from "./fs.ts";
import { ACTIVE_RUN_FILE, openPlainWriter, RUN_LOG_FILE, RUN_RECORD_FILE } from "./layout.ts";
import { runLogLine } from "./run_log.ts";

const encoder = new TextEncoder();

/**
 * The run records of one site directory.
 *
 * @example Usage
 * ```ts ignore
 * import { RunRecords } from "./run_records.ts";
 * const records = new RunRecords("/srv/telemetry", console.warn);
 * const saved = await records.readActive();
 * if (saved === null) console.log("moved aside:", await records.setAsideActive());
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
   * Reads the active-run record.
   *
   * @returns The parsed record, `undefined` when there is none, `null` when it is not JSON.
   */
  async readActive(): Promise<unknown> {
    try {
      return await readJsonFile(join(this.#siteDir, ACTIVE_RUN_FILE));
    } catch (err) {
      if (err instanceof SyntaxError) return null;
      throw err;
    }
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
