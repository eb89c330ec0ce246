/**
 * Runs (docs/http-api.md): starting one (deriving its id, confining its directory), stopping it,
 * and resuming the one that was active when the service last stopped. The service calls these
 * from its queue, so they never race each other or a commit.
 *
 * @module
 */

import { basename } from "node:path";
import { formatTimestamp, type RunRecord } from "../wire/event.ts";
import {
  InvalidRequestError,
  NoActiveRunError,
  RunConflictError,
  RunIdReusedError,
  WriteError,
} from "./errors.ts";
import type { RunStartCommand } from "./commands.ts";
import { RUN_ID_PATTERN } from "../store/layout.ts";
import type { NdjsonWriter } from "../store/writer.ts";
import type { SiteStore } from "../store/site_store.ts";
import type { RunRecords } from "../store/run_records.ts";
import type { StreamScan, StreamTail } from "../store/stored_read.ts";
import type { CheckpointCursor } from "./snapshot.ts";
import { errorText, isDiskFull } from "./errors.ts";
import { readRunLog } from "../store/run_log.ts";
import { settledMark } from "../store/seq_marks.ts";

/** The active run and its stream's seq accounting. */
export interface ActiveRun {
  record: RunRecord;
  writer: NdjsonWriter;
  lastSeq: number;
  /** The persisted high-water mark of the run stream (0: none). */
  mark: number;
  /** The highest seq of the run stream that is on disk. */
  lastWritten: number;
  /** Seq of the run stream when this start happened; persisted to count `events` on resume. */
  seqAtStart: number;
}

/** What {@linkcode Runs.resume} read of the resumed run's file. */
export interface RunResume {
  /** The lines after the checkpoint's cursor, when it was given and still matches the file. */
  after?: StreamTail;
  /** The whole file, when no cursor was given or it no longer matched. */
  scan?: StreamScan;
  /** A cursor was given but no longer matches the file (truncated or replaced). */
  mismatch: boolean;
}

/** What {@linkcode Runs.start} did. */
export interface RunStart {
  /** The run record. */
  run: RunRecord;
  /** `false` when the same run was already active (an idempotent retry). */
  created: boolean;
}

/**
 * Starting, stopping and resuming runs over a {@linkcode SiteStore}.
 */
export class Runs {
  #store: SiteStore;
  #records: RunRecords;
  #clock: () => number;
  #warn: (message: string) => void;
  /** The active run, if any. */
  active: ActiveRun | undefined;

  /**
   * Creates the runs; nothing is active until {@linkcode Runs.start} or
   * {@linkcode Runs.resume}.
   *
   * @param store The site directory.
   * @param clock Epoch milliseconds.
   * @param warn Receives warnings.
   */
  constructor(store: SiteStore, clock: () => number, warn: (message: string) => void) {
    this.#store = store;
    this.#records = store.runRecords;
    this.#clock = clock;
    this.#warn = warn;
  }

  /**
   * Starts a run. Starting the run that is already active is an idempotent retry.
   *
   * @param command What to start.
   * @returns The record, and whether it was created.
   * @throws {InvalidRequestError} For a directory that cannot hold a run.
   * @throws {RunConflictError} When another run is active.
   * @throws {RunIdReusedError} When the run log knows the run id for another directory.
   */
  async start(command: RunStartCommand): Promise<RunStart> {
    const { runId, runDir } = await this.#place(command);
    const active = this.active;
    if (active) {
      // A retry that names the same run is idempotent; naming another directory is not.
      if (
        active.record.run_id === runId &&
        (command.runDir === undefined || active.record.run_dir === runDir)
      ) {
        return { run: { ...active.record }, created: false };
      }
      throw new RunConflictError(active.record.run_id, runId);
    }
    // A run id names one run directory (docs/http-api.md): the fleet keys a run's events by run
    // id and seq, and another directory would number them from 1 again. The same directory
    // continues its seq below.
    const used = (await readRunLog(this.#store.siteDir)).runDirs.get(runId);
    if (used !== undefined && !used.includes(runDir)) {
      throw new RunIdReusedError(runId, used[0]!, runDir);
    }
    await this.#store.createRunDir(runDir);
    // A directory that held a run before continues its seq, past any unwritten seqs too.
    const { writer, lastSeq: lastWritten, mark } = await this.#store.openRunStream(runDir);
    const lastSeq = Math.max(lastWritten, mark);
    const record: RunRecord = {
      run_id: runId,
      run_dir: runDir,
      started_at: formatTimestamp(this.#clock()),
      stopped_at: null,
      events: 0,
      meta: command.meta ?? {},
    };
    try {
      await this.#records.writeActive({ ...record, seq_at_start: lastSeq });
    } catch (err) {
      await this.#store.closeRunStream(writer);
      throw toWriteError(err);
    }
    // The run log after the active-run record: a crash in between leaves a run that resumes
    // and is logged then (see resume), never a log entry of a run that did not start.
    try {
      await this.#log(record);
    } catch (err) {
      await this.#records.clearActive().catch((e) =>
        this.#warn(`Cannot take back the start of run ${runId}: ${errorText(e)}`)
      );
      await this.#store.closeRunStream(writer);
      throw toWriteError(err);
    }
    this.active = { record, writer, lastSeq, mark, lastWritten, seqAtStart: lastSeq };
    return { run: { ...record }, created: true };
  }

  /** Where a run start puts the run: its id and directory. */
  async #place(command: RunStartCommand): Promise<{ runId: string; runDir: string }> {
    if (command.runDir !== undefined) {
      const runDir = await this.#store.confineRunDir(command.runDir);
      const runId = command.runId ?? basename(runDir);
      if (command.runId === undefined && !RUN_ID_PATTERN.test(runId)) {
        throw new InvalidRequestError(
          `The last segment of run_dir, "${runId}", is not a usable run id; send run_id too, matching ${RUN_ID_PATTERN.source}.`,
        );
      }
      return { runId, runDir };
    }
    if (command.runId !== undefined) {
      return { runId: command.runId, runDir: await this.#store.runDirOf(command.runId) };
    }
    if (this.active) throw new RunConflictError(this.active.record.run_id, undefined);
    return await this.#derive();
  }

  /**
   * The next derived run id and its directory, stepping past ids the run log knows for another
   * directory (a run started with run_id "005" and a run_dir elsewhere), which a start would
   * refuse (docs/http-api.md). Bounded by the number of logged ids.
   */
  async #derive(): Promise<{ runId: string; runDir: string }> {
    const logged = (await readRunLog(this.#store.siteDir)).runDirs;
    let runId = await this.#store.nextNumericRun();
    for (let i = 0; i <= logged.size; i++) {
      const runDir = await this.#store.runDirOf(runId);
      const used = logged.get(runId);
      if (used === undefined || used.includes(runDir)) return { runId, runDir };
      runId = String(BigInt(runId) + 1n).padStart(runId.length, "0");
    }
    // Unreachable: each turn steps past one logged id, and there are only so many.
    throw new Error(`No derived run id is free after ${logged.size + 1} tries`);
  }

  /**
   * Stops the active run: clears its record, settles its seq mark and closes its file.
   *
   * @returns The final record, with `stopped_at` and `events`.
   * @throws {NoActiveRunError} When no run is active.
   */
  async stop(): Promise<RunRecord> {
    const active = this.active;
    if (!active) throw new NoActiveRunError();
    const stopped = { ...active.record, stopped_at: formatTimestamp(this.#clock()) };
    // The run log before the active-run record goes: a crash in between resumes the run, and
    // resuming logs it as active again (see resume); the stop was never acknowledged.
    try {
      await this.#log(stopped, active.record);
    } catch (err) {
      throw toWriteError(err);
    }
    await this.#records.clearActive();
    this.active = undefined;
    active.record = stopped;
    await this.settleMark(active).catch((e) =>
      this.#warn(`Cannot record the last seq of run ${active.record.run_id}: ${errorText(e)}`)
    );
    await this.#store.closeRunStream(active.writer).catch((e) =>
      this.#warn(`Cannot close ${active.writer.path}: ${errorText(e)}`)
    );
    return { ...active.record };
  }

  /**
   * Resumes the run that was active when the service stopped, if any. Its seq continues above
   * the last line of its file (read from the end), its seq mark and the checkpoint's counter.
   *
   * @param checkpoint The checkpoint's run, when one was read: its directory, counter and cursor.
   * @returns What was read of its file (its lines restore the snapshot), or `undefined`.
   */
  async resume(
    checkpoint?: {
      runDir: string;
      runSeq: number;
      cursor?: (CheckpointCursor & { events: number }) | undefined;
    },
  ): Promise<RunResume | undefined> {
    const read = await this.#records.readActive();
    if (read.state === "none") return undefined;
    if (read.state === "damaged") {
      const aside = await this.#records.setAsideActive();
      this.#warn(`The active-run record was unreadable and was moved to ${aside}; no run resumed.`);
      return undefined;
    }
    const saved = read.record;
    const seqAtStart = saved.seq_at_start ?? 0;
    const runDir = saved.run_dir;
    let opened;
    try {
      opened = await this.#store.openRunStream(runDir);
    } catch (err) {
      // The record names a place no run may use (a reserved name, a link leading outside the
      // allowed roots): resuming would write there, and failing would stop every start.
      if (!(err instanceof InvalidRequestError)) throw err;
      const aside = await this.#records.setAsideActive();
      this.#warn(
        `Run ${saved.run_id} was not resumed: ${
          errorText(err)
        } Its record was moved to ${aside}; start the run again under another name.`,
      );
      return undefined;
    }
    const { writer, lastSeq: lastWritten, mark } = opened;
    const same = checkpoint?.runDir === runDir ? checkpoint : undefined;
    const resumed: RunResume = { mismatch: false };
    let events: number;
    try {
      const after = same?.cursor && await this.#store.readRunAfter(runDir, same.cursor);
      if (after) {
        resumed.after = after;
        events = same!.cursor!.events + after.count;
      } else {
        resumed.mismatch = same?.cursor !== undefined;
        resumed.scan = await this.#store.scanRun(runDir, seqAtStart);
        events = resumed.scan.countedAfter;
      }
    } catch (err) {
      await this.#store.closeRunStream(writer);
      throw err;
    }
    this.active = {
      record: {
        run_id: saved.run_id,
        run_dir: runDir,
        started_at: saved.started_at,
        stopped_at: null,
        events,
        meta: saved.meta,
      },
      writer,
      lastSeq: Math.max(lastWritten, mark, same?.runSeq ?? 0),
      mark,
      lastWritten,
      seqAtStart,
    };
    await this.#catchUpLog(this.active.record);
    return resumed;
  }

  /**
   * Writes a run record to `<run_dir>/run.json` and the run log, both before the start or stop
   * is answered (docs/cli.md). When the log refuses the line, `run.json` is put back to
   * `previous` (best effort), so the two do not disagree.
   */
  async #log(record: RunRecord, previous?: RunRecord): Promise<void> {
    await this.#records.writeRecord(record);
    try {
      await this.#records.appendLog(record);
    } catch (err) {
      if (previous) await this.#records.writeRecord(previous).catch(() => {});
      throw err;
    }
  }

  /**
   * After a resume: makes sure the run log shows the resumed run as active. A crash between a
   * start's active-run record and its log line, or between a stop's log line and the removal of
   * the active-run record, leaves the log behind what the service does; this catches it up.
   * A failure is warned: the run still resumes.
   */
  async #catchUpLog(record: RunRecord): Promise<void> {
    try {
      const logged = (await readRunLog(this.#store.siteDir)).runs.find((r) =>
        r.run_id === record.run_id
      );
      // run.json is rewritten whatever the log says: a stop may have crashed between the two.
      await this.#records.writeRecord({ ...record });
      if (
        logged?.stopped_at === null && logged.run_dir === record.run_dir &&
        logged.started_at === record.started_at
      ) return;
      await this.#records.appendLog({ ...record });
    } catch (err) {
      this.#warn(`Cannot record resumed run ${record.run_id} in the run log: ${errorText(err)}`);
    }
  }

  /**
   * On stop or close, records the exact run counter when seqs above the last line were handed
   * out (or a reservation exists), so a restart neither reuses them nor skips a reservation.
   *
   * @param run The run.
   */
  async settleMark(run: ActiveRun): Promise<void> {
    const mark = settledMark(run.lastSeq, run.lastWritten, run.mark);
    if (mark !== undefined) {
      await this.#store.writeSeqMark(run.record.run_dir, mark);
      run.mark = mark;
    }
  }
}

/**
 * A failed write as the domain reports it.
 *
 * @param err What the file operation threw.
 * @returns A {@linkcode WriteError} whose message is the original's.
 */
export function toWriteError(err: unknown): WriteError {
  if (err instanceof WriteError) return err;
  return new WriteError(errorText(err), { cause: err, diskFull: isDiskFull(err) });
}
