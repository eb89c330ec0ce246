/**
 * The site directory and everything in it: {@linkcode SiteStore} owns the paths and file names,
 * the lock, one writer per night and per run, rotation at local noon, seq marks, the saved
 * records (active run, snapshot) and the start-up scan. Nothing else in the service touches the
 * disk. Its rules live in two internal modules it builds on: the names, reserved names and path
 * safety of the directory in `_site_layout.ts`, the reading of stream files in `_stream_read.ts`;
 * the names other modules import from them are re-exported here.
 *
 * Needs `--allow-read` and `--allow-write` for the site directory (and any `--allow-run-root`).
 *
 * @example Usage
 * ```ts
 * import { dayKey } from "./day_key.ts";
 * import assert from "node:assert/strict";
 *
 * // 11:59 local time still belongs to the previous night's file.
 * assert.equal(dayKey(Date.parse("2026-06-01T09:59:00Z"), "Europe/Berlin"), "20260531");
 * assert.equal(dayKey(Date.parse("2026-06-01T10:00:00Z"), "Europe/Berlin"), "20260601");
 * ```
 *
 * @module
 */

import { join } from "node:path";
import {
  LOCK_FILE,
  readJsonFile,
  refuseNonFile,
  removeIfExists,
  SiteLock,
  writeJsonAtomic,
} from "./fs.ts";
import { DayKeyer } from "./day_key.ts";
import type { RunRecord } from "../wire/event.ts";
import { RUN_LOG_FILE, RUN_RECORD_FILE, runLogLine } from "./run_log.ts";
import {
  errorText,
  InvalidRequestError,
  SiteInUseError,
  StorageError,
  UnsafeFileError,
} from "../core/errors.ts";
import { type FsyncMode, type NdjsonWriter, recoverTornTail } from "./writer.ts";
import {
  readStreamAfter,
  readTail,
  scanStream,
  type StreamCursor,
  type StreamScan,
  type StreamTail,
} from "./stored_read.ts";
import {
  ACTIVE_RUN_FILE,
  confineRunDir,
  GZ_SUFFIX,
  moveAsideSquatters,
  nextNumericRun,
  openPlainWriter,
  readSeqMark,
  RUN_FILE,
  type RunDirField,
  SEQ_MARK_FILE,
  SITE_FILE,
  siteFileName,
  SNAPSHOT_FILE,
  STORED_SITE_FILE,
  writeSeqMark,
} from "./layout.ts";
import { chooseForms, storedFile } from "./site_files.ts";

export { checkTimeZone, dayKey, DayKeyer } from "./day_key.ts";
export { FSYNC_MODES, type FsyncMode, NdjsonWriter, recoverTornTail, writeFull } from "./writer.ts";
export { errorText, isDiskFull, SiteInUseError, WriteError } from "../core/errors.ts";
export { SiteLock } from "./fs.ts";
export {
  type FileTail,
  readStreamAfter,
  readTail,
  scanStream,
  type StreamCursor,
  type StreamScan,
  type StreamTail,
} from "./stored_read.ts";
export {
  readSeqMark,
  reservedName,
  RUN_FILE,
  type RunDirField,
  SEQ_MARK_FILE,
  SITE_FILE,
  siteFileName,
  STORED_SITE_FILE,
  writeSeqMark,
} from "./layout.ts";

const encoder = new TextEncoder();

/** How old a sighting of a file at its path may be before a commit looks again. */
const IN_PLACE_MAX_AGE_MS = 100;

/** Options of {@linkcode SiteStore.open}. */
export interface SiteStoreOptions {
  /** The site telemetry directory; created if missing. */
  siteDir: string;
  /** IANA zone of the local-noon rotation (already checked). */
  timeZone: string;
  /** When to fdatasync. */
  fsync: FsyncMode;
  /** Directories outside the site directory where runs may be placed. */
  allowRunRoots?: readonly string[] | undefined;
  /** Receives warnings about recovered state and failed background syncs. */
  warn: (message: string) => void;
}

/** A run stream opened by {@linkcode SiteStore.openRunStream}. */
export interface RunStream {
  /** The run file's writer. */
  writer: NdjsonWriter;
  /** The seq of the run file's last complete line (read from its end), or 0. */
  lastSeq: number;
  /** The run directory's seq mark (0: none). */
  mark: number;
}

/** One site file as {@linkcode SiteStore.resumeSite} found it, from its end. */
export interface SiteFileTail {
  /** The file name, for example `site_20260510.ndjson`. */
  name: string;
  /** Its size in bytes (after any torn tail was moved aside). */
  size: number;
  /** The seq of its last complete line that parses, or 0. */
  lastSeq: number;
}

/** What the site stream resumes from, found by {@linkcode SiteStore.resumeSite}. */
export interface SiteResume {
  /** The highest last seq of any site file (seq order, never modification times). */
  lastSeq: number;
  /** The site directory's seq mark (0: none). */
  mark: number;
  /** Every site file, by ascending last seq (then name). */
  files: SiteFileTail[];
}

/**
 * One site directory, held exclusively (its `.lock`) from {@linkcode SiteStore.open} to
 * {@linkcode SiteStore.close}.
 *
 * @example Usage
 * ```ts ignore
 * import { SiteStore } from "./site_store.ts";
 * const store = await SiteStore.open({
 *   siteDir: "./telemetry", timeZone: "UTC", fsync: "interval", warn: console.warn,
 * });
 * await store.close();
 * ```
 */
export class SiteStore {
  /** Absolute real path of the site directory. */
  readonly siteDir: string;
  /** The fsync mode of every writer. */
  readonly fsync: FsyncMode;
  /** Real paths of the directories outside the site directory where runs may be placed. */
  readonly runRoots: readonly string[];
  #lock: SiteLock;
  #warn: (message: string) => void;
  #keyer: DayKeyer;
  #siteWriters = new Map<string, NdjsonWriter>();
  #runWriters = new Set<NdjsonWriter>();
  #syncTimer: ReturnType<typeof setInterval> | undefined;
  #syncing: Promise<void> | undefined;
  /** Problems already warned about, by path, so a lasting one is one line, not one a second. */
  #problems = new Map<string, string>();

  private constructor(
    siteDir: string,
    runRoots: string[],
    lock: SiteLock,
    options: SiteStoreOptions,
  ) {
    this.siteDir = siteDir;
    this.runRoots = runRoots;
    this.fsync = options.fsync;
    this.#lock = lock;
    this.#warn = options.warn;
    this.#keyer = new DayKeyer(options.timeZone);
  }

  /**
   * Creates the site directory if needed and takes its lock.
   *
   * @param options Where, which zone and how to sync.
   * @returns The held store.
   * @throws {SiteInUseError} If another server holds the directory.
   * @throws {UnsafeFileError} If its `.lock` is a symbolic link or not a file.
   * @throws {Deno.errors.NotCapable} If read or write permission for the directory is missing.
   */
  static async open(options: SiteStoreOptions): Promise<SiteStore> {
    await Deno.mkdir(options.siteDir, { recursive: true });
    const siteDir = await Deno.realPath(options.siteDir);
    const runRoots: string[] = [];
    for (const root of options.allowRunRoots ?? []) {
      await Deno.mkdir(root, { recursive: true });
      runRoots.push(await Deno.realPath(root));
    }
    const lock = await SiteLock.acquire(siteDir);
    try {
      await moveAsideSquatters(siteDir, options.warn);
    } catch (err) {
      await lock.release();
      throw err;
    }
    const store = new SiteStore(siteDir, runRoots, lock, options);
    // Every second: fdatasync (`interval`), and in every mode check that the open files are
    // still where they belong (deleted, renamed, the lock gone). A slow disk must not pile
    // ticks up behind each other.
    store.#syncTimer = setInterval(() => store.#syncing ??= store.syncAll(), 1000);
    Deno.unrefTimer(store.#syncTimer);
    return store;
  }

  // --- the site stream ------------------------------------------------------------------------

  /**
   * Recovers torn tails and finds where the site stream stands: the last seq of EVERY site file,
   * read from its end (cheap whatever its size), and the seq mark. Modification times are never
   * trusted: a clock stepped back across local noon writes newer lines into an older night's file
   * with an older mtime.
   *
   * @returns The resume point.
   */
  async resumeSite(): Promise<SiteResume> {
    const files: SiteFileTail[] = [];
    const compressed: string[] = [];
    for await (const entry of Deno.readDir(this.siteDir)) {
      if (entry.isFile && STORED_SITE_FILE.exec(entry.name)?.[2]) compressed.push(entry.name);
      if (!entry.isFile || !SITE_FILE.test(entry.name)) continue;
      const path = join(this.siteDir, entry.name);
      let tail = await readTail(path);
      if (tail.torn) {
        const moved = await recoverTornTail(path);
        if (moved > 0) this.#warn(tornMessage(path, moved));
        tail = await readTail(path);
      }
      files.push({ name: entry.name, size: tail.size, lastSeq: tail.lastSeq });
    }
    files.push(...await this.#compressedTails(compressed, files));
    files.sort((a, b) => a.lastSeq - b.lastSeq || (a.name < b.name ? -1 : 1));
    return {
      lastSeq: files.at(-1)?.lastSeq ?? 0,
      mark: await readSeqMark(this.siteDir),
      files,
    };
  }

  /**
   * The site files compressed by the lifecycle (docs/history.md), for the resume. A gzip file cannot
   * be read from its end, so only the nights that can hold the newest lines are read whole: those
   * at or after the newest plain file's night (all of them when every file is compressed). Older
   * compressed nights count with seq 0: their lines came before, and a seq that a stepped clock
   * wrote into one is still covered by the checkpoint's counter and the seq mark. A night found
   * in both forms is read from the form readers choose (`_site_files.ts`).
   */
  async #compressedTails(names: string[], plain: SiteFileTail[]): Promise<SiteFileTail[]> {
    const plainNames = new Set(plain.map((f) => f.name));
    const newestPlain = plain.map((f) => f.name).sort().at(-1) ?? "";
    const out: SiteFileTail[] = [];
    for (const name of names) {
      const base = name.slice(0, -GZ_SUFFIX.length);
      if (plainNames.has(base)) {
        const forms = await chooseForms(
          storedFile(join(this.siteDir, base)),
          storedFile(join(this.siteDir, name)),
        );
        if (forms.length === 1) continue; // the same lines: the plain file stands for both
      }
      if (base < newestPlain && !plainNames.has(base)) {
        out.push({ name, size: 0, lastSeq: 0 });
        continue;
      }
      const tail = await readTail(join(this.siteDir, name));
      out.push({ name, size: tail.size, lastSeq: tail.lastSeq });
    }
    return out;
  }

  /**
   * The nights whose site file is open for writing: the lifecycle never touches them.
   *
   * @returns Night keys.
   */
  openNights(): string[] {
    return [...this.#siteWriters.keys()];
  }

  /**
   * The path of a site file.
   *
   * @param name A name from {@linkcode siteFileName} or {@linkcode SiteResume.files}.
   * @returns The absolute path.
   */
  sitePath(name: string): string {
    return join(this.siteDir, name);
  }

  /**
   * The size of a night's site file as the checkpoint sees it: its writer's size when open (no
   * commit runs during a checkpoint), else its size on disk.
   *
   * @param night A key from {@linkcode SiteStore.nightOf}.
   * @returns Bytes, 0 when the file does not exist.
   */
  async siteFileEnd(night: string): Promise<number> {
    const writer = this.#siteWriters.get(night);
    if (writer) return writer.size;
    const path = join(this.siteDir, siteFileName(night));
    try {
      return (await Deno.stat(path)).size;
    } catch (err) {
      if (!(err instanceof Deno.errors.NotFound)) throw err;
    }
    // Compressed since (the newest night of a directory left alone for days): a cursor counts
    // uncompressed bytes, so read its size from the .gz (rare: once per checkpoint until the
    // next event opens a new night).
    return (await readTail(path + GZ_SUFFIX)).size;
  }

  /**
   * The night an instant belongs to: the key of its site file.
   *
   * @param epochMs The receive time.
   * @returns `YYYYMMDD`.
   */
  nightOf(epochMs: number): string {
    return this.#keyer.keyFor(epochMs);
  }

  /**
   * Opens (creating if needed) a night's site file.
   *
   * @param night A key from {@linkcode SiteStore.nightOf}.
   * @returns The writer, kept open until the night is retired or the store closes.
   */
  async openSiteWriter(night: string): Promise<NdjsonWriter> {
    let writer = this.#siteWriters.get(night);
    if (!writer) {
      const path = join(this.siteDir, siteFileName(night));
      writer = await openPlainWriter(path, this.fsync, (n) => this.#warn(tornMessage(path, n)));
      this.#siteWriters.set(night, writer);
    }
    return writer;
  }

  /**
   * Appends a group of lines, one write per file, all or nothing: when a write fails, every file
   * of the group already written is truncated back (docs/storage.md).
   *
   * @param lines Complete lines (without `\n`) per run writer, or per night (a key from
   *   {@linkcode SiteStore.nightOf}) whose site file is opened if needed.
   * @returns The bytes appended.
   * @throws {WriteError} If a write failed; nothing of the group remains on disk.
   */
  async append(lines: ReadonlyMap<NdjsonWriter | string, readonly string[]>): Promise<number> {
    let bytes = 0;
    /** Each file written so far and its size before: what a failure truncates back. */
    const written: [NdjsonWriter, number][] = new Array(lines.size);
    let count = 0;
    try {
      for (const [target, group] of lines) {
        const writer = typeof target !== "string"
          ? target
          : this.#siteWriters.get(target) ?? await this.openSiteWriter(target);
        // Off the per-line path: a file deleted or renamed under the writer is recreated before
        // these lines go out (and what it lost is carried over). With --fsync always every group
        // looks (an lstat is nothing beside an fdatasync); otherwise at most every 100 ms.
        if (writer.inPlace(this.fsync === "always" ? 0 : IN_PLACE_MAX_AGE_MS)) {
          this.#problems.delete(writer.path);
        } else this.#noteVerified(writer, await writer.verify());
        const chunk = encoder.encode(group.join("\n") + "\n");
        const before = writer.size;
        await writer.append(chunk); // truncates itself back on failure
        written[count++] = [writer, before];
        bytes += chunk.length;
      }
      return bytes;
    } catch (err) {
      for (const [writer, before] of written.slice(0, count).reverse()) {
        await writer.truncate(before).catch((e) =>
          this.#warn(`Cannot roll back ${writer.path} to ${before} bytes: ${errorText(e)}`)
        );
      }
      throw err;
    }
  }

  /**
   * After rotation, keeps only the newest night's site file open; closing fdatasyncs the rest.
   *
   * @returns Whether a night was retired (a rotation happened).
   */
  /** Whether a night before the newest still has its site file open (after a rotation). */
  get hasOldNights(): boolean {
    return this.#siteWriters.size > 1;
  }

  async retireOldNights(): Promise<boolean> {
    if (this.#siteWriters.size < 2) return false;
    const newest = [...this.#siteWriters.keys()].sort().at(-1);
    for (const [night, writer] of this.#siteWriters) {
      if (night === newest) continue;
      this.#siteWriters.delete(night);
      await writer.close().catch((e) =>
        this.#warn(`Cannot close ${writer.path} after rotation: ${errorText(e)}`)
      );
    }
    return true;
  }

  // --- run directories ------------------------------------------------------------------------

  /**
   * The directory of a run named only by its id: below the site directory, confined and checked
   * like any requested run directory (a link named like the run leads nowhere outside).
   *
   * @param runId A valid run id.
   * @returns The absolute path.
   * @throws {InvalidRequestError} If the id is a reserved name or a link leads outside.
   */
  runDirOf(runId: string): Promise<string> {
    return this.confineRunDir(runId, "run_id");
  }

  /**
   * Resolves a requested run directory and confines it to the site directory or an allowed run
   * root, following symlinks of the part that exists (docs/http-api.md). No segment of its path below
   * that root may be a name the service keeps for its own files ({@linkcode reservedName}), and
   * the path must fit the file system's limits.
   *
   * @param requested Relative (to the site directory) or absolute.
   * @param field The request field it came from, named in errors.
   * @returns The absolute path.
   * @throws {RunDirNotAllowedError} If it lies outside every allowed root.
   * @throws {InvalidRequestError} If it names a reserved file, is too long, is the site
   *   directory itself, or a file or a loop of links is in its way.
   */
  confineRunDir(requested: string, field: RunDirField = "run_dir"): Promise<string> {
    return confineRunDir(this.siteDir, this.runRoots, requested, field);
  }

  /**
   * The next derived run id: the largest all-digit directory name plus one, at least 3 digits,
   * stepping past files and links with that name, so the derived directory never lands on one.
   *
   * @returns For example `"001"`, `"008"` or `"1000"`.
   */
  nextNumericRun(): Promise<string> {
    return nextNumericRun(this.siteDir);
  }

  /**
   * Creates a run directory (and its parents).
   *
   * @param runDir The confined absolute path.
   * @throws {InvalidRequestError} If a file is in the way.
   * @throws {StorageError} If it cannot be created for another reason.
   */
  async createRunDir(runDir: string): Promise<void> {
    try {
      await Deno.mkdir(runDir, { recursive: true });
    } catch (err) {
      if (err instanceof Deno.errors.AlreadyExists || err instanceof Deno.errors.NotADirectory) {
        throw new InvalidRequestError(
          `Cannot use run_dir ${runDir}: a file is in the way; choose another run_id or run_dir.`,
        );
      }
      throw new StorageError(`Cannot create run directory ${runDir}: ${errorText(err)}`, {
        cause: err,
      });
    }
  }

  /**
   * Opens a run's stream file for appending and reads its last seq from its end. The directory
   * is confined again (a saved run directory, or a link swapped in since the request was
   * checked), and the run's files must be regular files: a planted link is refused, never
   * written through.
   *
   * @param runDir The run directory (created if missing).
   * @returns The writer, the last seq and the run's seq mark.
   * @throws {InvalidRequestError} If the directory is not allowed, or one of its files is a
   *   symbolic link, a directory or another non-file.
   */
  async openRunStream(runDir: string): Promise<RunStream> {
    await this.confineRunDir(runDir);
    await this.createRunDir(runDir);
    await this.confineRunDir(runDir);
    const path = join(runDir, RUN_FILE);
    let writer: NdjsonWriter;
    try {
      await refuseNonFile(join(runDir, SEQ_MARK_FILE));
      writer = await openPlainWriter(path, this.fsync, (n) => this.#warn(tornMessage(path, n)));
    } catch (err) {
      if (!(err instanceof UnsafeFileError)) throw err;
      throw new InvalidRequestError(
        `Cannot use run_dir ${runDir}: ${err.path} is ${err.found}, not a regular file, and the service never writes through one; choose another run_id or run_dir.`,
        { cause: err },
      );
    }
    try {
      let { lastSeq } = await readTail(path, writer.size);
      // A run directory used again after its file was compressed continues the seq of the .gz.
      if (lastSeq === 0) lastSeq = (await readTail(path + GZ_SUFFIX)).lastSeq;
      const mark = await readSeqMark(runDir);
      this.#runWriters.add(writer);
      return { writer, lastSeq, mark };
    } catch (err) {
      await writer.close();
      throw err;
    }
  }

  /**
   * Reads a run file whole: its latest line per type and how many lines follow a seq.
   *
   * @param runDir The run directory.
   * @param countAfter Count the lines with a seq above this (a resumed run's events).
   * @returns The scan.
   */
  scanRun(runDir: string, countAfter = Infinity): Promise<StreamScan> {
    return scanStream(join(runDir, RUN_FILE), countAfter);
  }

  /**
   * Reads a run file after a checkpoint's cursor, or after a seq.
   *
   * @param runDir The run directory.
   * @param after Where the checkpoint stands in it, or the seq to read past.
   * @returns The lines after it, or `undefined` when the cursor no longer matches the file.
   */
  readRunAfter(
    runDir: string,
    after: StreamCursor | { afterSeq: number },
  ): Promise<StreamTail | undefined> {
    return readStreamAfter(join(runDir, RUN_FILE), after);
  }

  /**
   * Reads a site file after a checkpoint's cursor, or after a seq.
   *
   * @param name The site file's name.
   * @param after The cursor, or the seq to read past.
   * @returns The lines after it, or `undefined` when the cursor no longer matches the file.
   */
  readSiteAfter(
    name: string,
    after: StreamCursor | { afterSeq: number },
  ): Promise<StreamTail | undefined> {
    return readStreamAfter(join(this.siteDir, name), after);
  }

  /**
   * Reads a site file whole: its latest line per type (the rebuild without a checkpoint).
   *
   * @param name The site file's name.
   * @returns The scan.
   */
  scanSite(name: string): Promise<StreamScan> {
    return scanStream(join(this.siteDir, name));
  }

  /**
   * Closes a run's stream file (fdatasyncing it unless `fsync` is `never`).
   *
   * @param writer A writer from {@linkcode SiteStore.openRunStream}.
   */
  async closeRunStream(writer: NdjsonWriter): Promise<void> {
    this.#runWriters.delete(writer);
    await writer.close();
  }

  // --- seq marks and saved records ------------------------------------------------------------

  /**
   * Records a stream's seq high-water mark atomically.
   *
   * @param dir The site directory or a run directory.
   * @param seq No seq at or below it may be handed out again.
   */
  writeSeqMark(dir: string, seq: number): Promise<void> {
    return writeSeqMark(dir, seq);
  }

  /**
   * Reads the active-run record.
   *
   * @returns The parsed record, `undefined` when there is none, `null` when it is not JSON.
   */
  async readActiveRun(): Promise<unknown> {
    try {
      return await readJsonFile(join(this.siteDir, ACTIVE_RUN_FILE));
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
  writeActiveRun(record: unknown): Promise<void> {
    return writeJsonAtomic(join(this.siteDir, ACTIVE_RUN_FILE), record);
  }

  /**
   * Removes the active-run record.
   *
   * @throws {StorageError} If it exists and cannot be removed.
   */
  async clearActiveRun(): Promise<void> {
    try {
      await removeIfExists(join(this.siteDir, ACTIVE_RUN_FILE));
    } catch (err) {
      throw new StorageError(`Cannot clear the active run: ${errorText(err)}`, { cause: err });
    }
  }

  /**
   * Moves an unreadable active-run record aside, so the next start does not trip on it again.
   *
   * @returns Where it went.
   */
  async setAsideActiveRun(): Promise<string> {
    const path = join(this.siteDir, ACTIVE_RUN_FILE);
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
  async appendRunLog(record: RunRecord): Promise<void> {
    const path = join(this.siteDir, RUN_LOG_FILE);
    const writer = await openPlainWriter(path, "always", (n) => this.#warn(tornMessage(path, n)));
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
  writeRunRecord(record: RunRecord): Promise<void> {
    return writeJsonAtomic(join(record.run_dir, RUN_RECORD_FILE), record);
  }

  /**
   * Reads the snapshot saved at the last clean shutdown.
   *
   * @returns The parsed value, `undefined` when there is none or it is not JSON (warned).
   */
  async readSavedSnapshot(): Promise<unknown> {
    try {
      return await readJsonFile(join(this.siteDir, SNAPSHOT_FILE));
    } catch (err) {
      if (!(err instanceof SyntaxError)) throw err;
      this.#warn(
        `The saved snapshot ${SNAPSHOT_FILE} is unreadable; rebuilding from the files alone.`,
      );
      return undefined;
    }
  }

  /**
   * Saves the snapshot for the next start, atomically.
   *
   * @param value The saved-snapshot record.
   */
  writeSavedSnapshot(value: unknown): Promise<void> {
    return writeJsonAtomic(join(this.siteDir, SNAPSHOT_FILE), value);
  }

  // --- syncing and closing --------------------------------------------------------------------

  /**
   * Checks that every open file is still in place (recreating a deleted or renamed one, see
   * {@linkcode NdjsonWriter.verify}) and that the `.lock` still exists; with `fsync: "interval"`
   * fdatasyncs every file that has unsynced writes. A failure is warned (once while it lasts),
   * not thrown.
   *
   * @returns When every sync has finished.
   */
  syncAll(): Promise<void> {
    return (async () => {
      for (const writer of [...this.#siteWriters.values(), ...this.#runWriters]) {
        try {
          this.#noteVerified(writer, await writer.verify());
        } catch (err) {
          this.#noteProblem(writer.path, errorText(err));
        }
        if (this.fsync !== "interval") continue;
        await writer.sync().catch((e) =>
          this.#noteProblem(writer.path, `Cannot fdatasync ${writer.path}: ${errorText(e)}`)
        );
      }
      await this.#checkLock();
    })().finally(() => this.#syncing = undefined);
  }

  #noteVerified(writer: NdjsonWriter, message: string | undefined): void {
    if (message !== undefined) this.#warn(message);
    this.#problems.delete(writer.path);
  }

  #noteProblem(path: string, message: string): void {
    if (this.#problems.get(path) === message) return;
    this.#problems.set(path, message);
    this.#warn(message);
  }

  /**
   * A deleted `.lock` no longer keeps a second server out (docs/storage.md): take a new one, or
   * warn loudly when another server already did. A site directory replaced by a symlink is
   * warned about, not followed.
   */
  async #checkLock(): Promise<void> {
    const lockPath = join(this.siteDir, LOCK_FILE);
    try {
      const dir = await Deno.lstat(this.siteDir);
      if (dir.isSymlink) {
        this.#noteProblem(
          this.siteDir,
          `The site directory ${this.siteDir} was replaced by a symbolic link; it is not followed, so new files cannot be created there. Put the directory back.`,
        );
        return;
      }
      await Deno.lstat(lockPath);
      this.#problems.delete(lockPath);
      return;
    } catch (err) {
      if (!(err instanceof Deno.errors.NotFound)) {
        this.#noteProblem(lockPath, `Cannot check ${lockPath}: ${errorText(err)}`);
        return;
      }
    }
    try {
      await Deno.mkdir(this.siteDir, { recursive: true });
      const lock = await SiteLock.acquire(this.siteDir);
      const old = this.#lock;
      this.#lock = lock;
      await old.release().catch(() => {});
      this.#warn(`${lockPath} was deleted while the service ran; took the lock again.`);
      this.#problems.delete(lockPath);
    } catch (err) {
      this.#noteProblem(
        lockPath,
        err instanceof SiteInUseError
          ? `${lockPath} was deleted while the service ran and another server has taken the new one: two servers now write to ${this.siteDir}; stop one of them.`
          : `${lockPath} was deleted while the service ran and cannot be taken again: ${
            errorText(err)
          }`,
      );
    }
  }

  /**
   * Stops the background sync, closes every file (fdatasyncing it) and releases the lock.
   *
   * @throws {Error} The first failure to close a file; the lock is released anyway.
   */
  async close(): Promise<void> {
    clearInterval(this.#syncTimer);
    await this.#syncing;
    const errors: unknown[] = [];
    for (const writer of [...this.#siteWriters.values(), ...this.#runWriters]) {
      try {
        // A file deleted since the last tick gets its last lines back before it is closed.
        this.#noteVerified(writer, await writer.verify().catch((e) => errorText(e)));
        await writer.close();
      } catch (err) {
        errors.push(err);
      }
    }
    this.#siteWriters.clear();
    this.#runWriters.clear();
    await this.#lock.release();
    if (errors.length > 0) throw errors[0];
  }

  /**
   * Releases the lock without closing anything: for a start-up that failed before any file
   * was opened.
   */
  async abandon(): Promise<void> {
    clearInterval(this.#syncTimer);
    await this.#lock.release();
  }
}

function tornMessage(path: string, bytes: number): string {
  return `Moved a torn last line (${bytes} bytes) of ${path} to ${path}.torn.`;
}
