/**
 * The site directory and everything in it: {@linkcode SiteStore} holds the directory (its lock,
 * `lock.ts`) from open to close, one writer per night and per run, rotation at local noon, the
 * run directories, and the background check that keeps the open files in place. It composes
 * the owners of the saved records: the run records (`run_records.ts`), the saved snapshot
 * (`saved_snapshot.ts`) and the seq marks (`seq_marks.ts`). The names and path rules of the
 * directory are `layout.ts`'s, the reading of stream files `stored_read.ts`'s, where the site
 * stream resumes `site_resume.ts`'s. Nothing else in the service touches the disk.
 *
 * Needs `--allow-read` and `--allow-write` for the site directory (and any `--allow-run-root`).
 *
 * @example Usage
 * ```ts ignore
 * import { SiteStore } from "./site_store.ts";
 * const store = await SiteStore.open({
 *   siteDir: "./telemetry", timeZone: "UTC", fsync: "interval", warn: console.warn,
 * });
 * const writer = await store.openSiteWriter(store.nightOf(Date.now()));
 * console.log(writer.path);
 * await store.close();
 * ```
 *
 * @module
 */

import { join } from "node:path";
import { DayKeyer } from "./day_key.ts";
import { errorText, InvalidRequestError, StorageError, UnsafeFileError } from "../core/errors.ts";
import type { FsyncMode, NdjsonWriter } from "./writer.ts";
import {
  type EachLine,
  readStreamAfter,
  readTail,
  scanStream,
  type StreamCursor,
  type StreamScan,
  type StreamTail,
} from "./stored_read.ts";
import {
  confineRunDir,
  GZ_SUFFIX,
  moveAsideSquatters,
  nextNumericRun,
  openPlainWriter,
  RUN_FILE,
  type RunDirField,
  SEQ_MARK_FILE,
  siteFileName,
} from "./layout.ts";
import { refuseNonFile } from "./fs.ts";
import { LockKeeper } from "./lock.ts";
import { ProblemLog } from "./problem_log.ts";
import { RunRecords } from "./run_records.ts";
import { SafetyLatchFile } from "./safety_latch.ts";
import { SavedSnapshotFile } from "./saved_snapshot.ts";
import { readSeqMark, writeSeqMark } from "./seq_marks.ts";
import { resumeSite, type SiteResume } from "./site_resume.ts";
import { establishSiteIdentity, type SiteIdentity } from "./site_identity.ts";
import { KeyJournal, type KeyStored, type LoadedKey } from "./key_journal.ts";

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
  /** The active-run record, the run log and each run's `run.json`. */
  readonly runRecords: RunRecords;
  /** The snapshot checkpoint a start restores from. */
  readonly savedSnapshot: SavedSnapshotFile;
  /** The safety latch file `.safety.json` (docs/safety.md). */
  readonly safetyLatch: SafetyLatchFile;
  /** The safety hub's file `.safety-hub.json`: external events and waivers (docs/safety.md). */
  readonly safetyHub: SafetyLatchFile;
  /** The site's identity (`.site.json`), established when the store opened. */
  readonly identity: SiteIdentity;
  #lock: LockKeeper;
  #warn: (message: string) => void;
  /** Lasting problems of the open files and the lock: one line each, not one a second. */
  #problems: ProblemLog;
  #keyer: DayKeyer;
  #siteWriters = new Map<string, NdjsonWriter>();
  #runWriters = new Set<NdjsonWriter>();
  #syncTimer: ReturnType<typeof setInterval> | undefined;
  #syncing: Promise<void> | undefined;
  /** Damage already reported (docs/storage.md): a damaged file is named once, not per read. */
  #damageSeen = new Set<string>();
  #keys: KeyJournal | undefined;

  private constructor(
    siteDir: string,
    runRoots: string[],
    lock: LockKeeper,
    problems: ProblemLog,
    identity: SiteIdentity,
    options: SiteStoreOptions,
  ) {
    this.siteDir = siteDir;
    this.identity = identity;
    this.runRoots = runRoots;
    this.fsync = options.fsync;
    this.runRecords = new RunRecords(siteDir, options.warn);
    this.savedSnapshot = new SavedSnapshotFile(siteDir, options.warn);
    this.safetyLatch = new SafetyLatchFile(siteDir, options.warn);
    this.safetyHub = new SafetyLatchFile(siteDir, options.warn, "hub");
    this.#lock = lock;
    this.#warn = options.warn;
    this.#problems = problems;
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
    const problems = new ProblemLog(options.warn);
    const lock = await LockKeeper.take(siteDir, problems);
    let identity: SiteIdentity;
    try {
      await moveAsideSquatters(siteDir, options.warn);
      identity = await establishSiteIdentity(siteDir, {
        zone: options.timeZone,
        warn: options.warn,
      });
    } catch (err) {
      await lock.release();
      throw err;
    }
    const store = new SiteStore(siteDir, runRoots, lock, problems, identity, options);
    // Every second: fdatasync (`interval`), and in every mode check that the open files are
    // still where they belong (deleted, renamed, the lock gone). A slow disk must not pile
    // ticks up behind each other.
    store.#syncTimer = setInterval(() => store.#syncing ??= store.syncAll(), 1000);
    Deno.unrefTimer(store.#syncTimer);
    return store;
  }

  /** Warns about damage in a stored file once per service (a checkpoint may read it often). */
  #damage = (message: string): void => {
    if (this.#damageSeen.has(message)) return;
    if (this.#damageSeen.size < 1000) this.#damageSeen.add(message);
    this.#warn(message);
  };

  // --- the site stream ------------------------------------------------------------------------

  /**
   * Recovers torn tails and finds where the site stream stands (see {@linkcode resumeSite}).
   *
   * @returns The resume point.
   */
  resumeSite(): Promise<SiteResume> {
    return resumeSite(this.siteDir, this.#warn, this.#damage);
  }

  /**
   * The nights whose site file is open for writing: compression and retention never touch them.
   *
   * @returns Night keys.
   */
  openNights(): string[] {
    return [...this.#siteWriters.keys()];
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
    return (await readTail(path + GZ_SUFFIX, undefined, this.#damage)).size;
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
      writer = await openPlainWriter(path, this.fsync, this.#warn);
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
          this.#problems.clear(writer.path);
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

  /** Whether a night before the newest still has its site file open (after a rotation). */
  get hasOldNights(): boolean {
    return this.#siteWriters.size > 1;
  }

  /**
   * After rotation, keeps only the newest night's site file open; closing fdatasyncs the rest.
   *
   * @returns Whether a night was retired (a rotation happened).
   */
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
      writer = await openPlainWriter(path, this.fsync, this.#warn);
    } catch (err) {
      if (!(err instanceof UnsafeFileError)) throw err;
      throw new InvalidRequestError(
        `Cannot use run_dir ${runDir}: ${err.path} is ${err.found}, not a regular file, and the service never writes through one; choose another run_id or run_dir.`,
        { cause: err },
      );
    }
    try {
      let { lastSeq } = await readTail(path, writer.size, this.#damage);
      // A run directory used again after its file was compressed continues the seq of the .gz.
      if (lastSeq === 0) {
        lastSeq = (await readTail(path + GZ_SUFFIX, undefined, this.#damage)).lastSeq;
      }
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
    return scanStream(join(runDir, RUN_FILE), countAfter, this.#damage);
  }

  /**
   * Reads a run file after a checkpoint's cursor, or after a seq.
   *
   * @param runDir The run directory.
   * @param after Where the checkpoint stands in it, or the seq to read past.
   * @param each Told about every line after it, in order.
   * @returns The lines after it, or `undefined` when the cursor no longer matches the file.
   */
  readRunAfter(
    runDir: string,
    after: StreamCursor | { afterSeq: number },
    each?: EachLine,
  ): Promise<StreamTail | undefined> {
    return readStreamAfter(join(runDir, RUN_FILE), after, this.#damage, each);
  }

  /**
   * Reads a site file after a checkpoint's cursor, or after a seq.
   *
   * @param name The site file's name.
   * @param after The cursor, or the seq to read past.
   * @param each Told about every line after it, in order.
   * @returns The lines after it, or `undefined` when the cursor no longer matches the file.
   */
  readSiteAfter(
    name: string,
    after: StreamCursor | { afterSeq: number },
    each?: EachLine,
  ): Promise<StreamTail | undefined> {
    return readStreamAfter(join(this.siteDir, name), after, this.#damage, each);
  }

  /**
   * Reads a site file whole: its latest line per type (the rebuild without a checkpoint).
   *
   * @param name The site file's name.
   * @returns The scan.
   */
  scanSite(name: string): Promise<StreamScan> {
    return scanStream(join(this.siteDir, name), Infinity, this.#damage);
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

  // --- idempotency keys ---------------------------------------------------------------------

  /**
   * Opens the journal of idempotency keys (docs/storage.md, "Idempotency keys"), dropping the key
   * lines whose events never reached their file; call it once, before the first append.
   *
   * @param now Now, epoch milliseconds (the service's clock).
   * @param maxAgeMs How long keys are kept.
   * @returns The keys of the last `maxAgeMs`, oldest first.
   */
  async openKeyJournal(now: number, maxAgeMs: number): Promise<LoadedKey[]> {
    const { journal, records } = await KeyJournal.open(this.siteDir, {
      fsync: this.fsync,
      warn: this.#warn,
      now,
      maxAgeMs,
      lastSeq: (stored) => this.#lastSeqOf(stored),
    });
    this.#keys = journal;
    return records;
  }

  /**
   * The journal of idempotency keys.
   *
   * @returns The journal opened by {@linkcode SiteStore.openKeyJournal}.
   * @throws {Error} If it was not opened.
   */
  get keys(): KeyJournal {
    if (!this.#keys) throw new Error("The key journal is not open: call openKeyJournal() first.");
    return this.#keys;
  }

  /** The last seq on disk of the file a key line's events went to; 0 when it cannot be read. */
  async #lastSeqOf(stored: KeyStored): Promise<number> {
    let path: string;
    if ("night" in stored) {
      if (!/^\d{8}$/.test(stored.night)) return 0;
      path = join(this.siteDir, siteFileName(stored.night));
    } else path = join(stored.run, RUN_FILE);
    try {
      const plain = await readTail(path, undefined, this.#damage);
      if (plain.lastSeq > 0) return plain.lastSeq;
      return (await readTail(path + GZ_SUFFIX, undefined, this.#damage)).lastSeq;
    } catch {
      return 0; // gone or out of reach: the key's events cannot be shown to be there
    }
  }

  // --- seq marks ------------------------------------------------------------------------------

  /**
   * Records a stream's seq high-water mark atomically (see `seq_marks.ts`).
   *
   * @param dir The site directory or a run directory.
   * @param seq No seq at or below it may be handed out again.
   */
  writeSeqMark(dir: string, seq: number): Promise<void> {
    return writeSeqMark(dir, seq);
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
      for (const writer of this.#writers()) {
        try {
          this.#noteVerified(writer, await writer.verify());
        } catch (err) {
          this.#problems.note(writer.path, errorText(err));
        }
        if (this.fsync !== "interval") continue;
        await writer.sync().catch((e) =>
          this.#problems.note(writer.path, `Cannot fdatasync ${writer.path}: ${errorText(e)}`)
        );
      }
      await this.#lock.check();
    })().finally(() => this.#syncing = undefined);
  }

  /** Every open file: the site files, the runs' files and the key journal's. */
  #writers(): NdjsonWriter[] {
    return [...this.#siteWriters.values(), ...this.#runWriters, ...(this.#keys?.writers ?? [])];
  }

  #noteVerified(writer: NdjsonWriter, message: string | undefined): void {
    if (message !== undefined) this.#warn(message);
    this.#problems.clear(writer.path);
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
    for (const writer of this.#writers()) {
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
    await this.#keys?.close().catch((err) => errors.push(err));
    await this.#lock.release();
    if (errors.length > 0) throw errors[0];
  }
}
