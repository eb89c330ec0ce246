/**
 * The site directory and everything in it: {@linkcode SiteStore} owns the paths and file names,
 * the lock, one writer per night and per run, rotation at local noon, seq marks, the saved
 * records (active run, snapshot) and the start-up scan. Nothing else in the service touches the
 * disk.
 *
 * Needs `--allow-read` and `--allow-write` for the site directory (and any `--allow-run-root`).
 *
 * @example Usage
 * ```ts
 * import { dayKey } from "./_day_key.ts";
 * import assert from "node:assert/strict";
 *
 * // 11:59 local time still belongs to the previous night's file.
 * assert.equal(dayKey(Date.parse("2026-06-01T09:59:00Z"), "Europe/Berlin"), "20260531");
 * assert.equal(dayKey(Date.parse("2026-06-01T10:00:00Z"), "Europe/Berlin"), "20260601");
 * ```
 *
 * @module
 */

import { isAbsolute, join, resolve } from "node:path";
import {
  isStrictlyInside,
  LOCK_FILE,
  readJsonFile,
  realPathOfNearest,
  removeIfExists,
  SiteLock,
  writeJsonAtomic,
} from "./_fs.ts";
import { DayKeyer } from "./_day_key.ts";
import {
  errorText,
  InvalidRequestError,
  RunDirNotAllowedError,
  SiteInUseError,
  StorageError,
} from "./_errors.ts";
import { type FsyncMode, NdjsonWriter, recoverTornTail } from "./_ndjson_writer.ts";
import { LineSplitter, readSeqAndType } from "./_ndjson.ts";

export { checkTimeZone, dayKey, DayKeyer } from "./_day_key.ts";
export {
  FSYNC_MODES,
  type FsyncMode,
  NdjsonWriter,
  recoverTornTail,
  writeFull,
} from "./_ndjson_writer.ts";
export { errorText, isDiskFull, SiteInUseError, WriteError } from "./_errors.ts";
export { SiteLock } from "./_fs.ts";

const encoder = new TextEncoder();

// --- the layout of a site directory (CONTRACT 3) ---------------------------------------------

/** The name of the site-stream file for a day key. */
export function siteFileName(key: string): string {
  return `site_${key}.ndjson`;
}

/** Names of site-stream files. */
export const SITE_FILE: RegExp = /^site_(\d{8})\.ndjson$/;
/** The run stream's file inside a run directory. */
export const RUN_FILE = "telemetry.ndjson";
/** The active run, while one is active; a run resumes from it after a restart. */
const ACTIVE_RUN_FILE = ".active-run.json";
/** The snapshot as it was at the last clean shutdown, with the seqs it reflects. */
const SNAPSHOT_FILE = ".snapshot.json";

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
  /** What the existing run file holds. */
  scan: StreamScan;
  /** The run directory's seq mark (0: none). */
  mark: number;
}

/** What the site stream resumes from, found by {@linkcode SiteStore.resumeSite}. */
export interface SiteResume extends StreamScan {
  /** The site directory's seq mark (0: none). */
  mark: number;
}

/**
 * One site directory, held exclusively (its `.lock`) from {@linkcode SiteStore.open} to
 * {@linkcode SiteStore.close}.
 *
 * @example Usage
 * ```ts ignore
 * import { SiteStore } from "./storage.ts";
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
   * Recovers torn tails and finds where the site stream stands: its last seq, the latest line of
   * each type in the file that holds that seq, and the seq mark.
   *
   * @returns The resume point.
   */
  async resumeSite(): Promise<SiteResume> {
    const candidates = await latestSiteFiles(this.siteDir);
    let best: StreamScan = { lastSeq: 0, latest: new Map(), countedAfter: 0 };
    for (const path of candidates) {
      const moved = await recoverTornTail(path);
      if (moved > 0) this.#warn(tornMessage(path, moved));
      const scan = await scanStream(path);
      if (scan.lastSeq > best.lastSeq) best = scan;
    }
    if (candidates.length > 0 && best.lastSeq === 0) {
      // The newest files are empty (a rolled-back first write): seq must still continue, and
      // the snapshot comes from the file that holds the last seq.
      for await (const entry of Deno.readDir(this.siteDir)) {
        if (SITE_FILE.test(entry.name)) {
          const other = await scanStream(join(this.siteDir, entry.name));
          if (other.lastSeq > best.lastSeq) best = other;
        }
      }
    }
    return { ...best, mark: await readSeqMark(this.siteDir) };
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
      writer = await NdjsonWriter.open(path, this.fsync, (n) => this.#warn(tornMessage(path, n)));
      this.#siteWriters.set(night, writer);
    }
    return writer;
  }

  /**
   * Appends a group of lines, one write per file, all or nothing: when a write fails, every file
   * of the group already written is truncated back (CONTRACT 4.1).
   *
   * @param lines Complete lines (without `\n`) per run writer, or per night (a key from
   *   {@linkcode SiteStore.nightOf}) whose site file is opened if needed.
   * @returns The bytes appended.
   * @throws {WriteError} If a write failed; nothing of the group remains on disk.
   */
  async append(lines: ReadonlyMap<NdjsonWriter | string, readonly string[]>): Promise<number> {
    let bytes = 0;
    const written: [NdjsonWriter, number][] = [];
    try {
      for (const [target, group] of lines) {
        const writer = typeof target !== "string"
          ? target
          : this.#siteWriters.get(target) ?? await this.openSiteWriter(target);
        // Once per file and group, off the per-line path: a file deleted or renamed under the
        // writer is recreated before these lines go out (and what it lost is carried over).
        this.#noteVerified(writer, await writer.verify());
        const chunk = encoder.encode(group.join("\n") + "\n");
        const before = writer.size;
        await writer.append(chunk); // truncates itself back on failure
        written.push([writer, before]);
        bytes += chunk.length;
      }
      return bytes;
    } catch (err) {
      for (const [writer, before] of written.reverse()) {
        await writer.truncate(before).catch((e) =>
          this.#warn(`Cannot roll back ${writer.path} to ${before} bytes: ${errorText(e)}`)
        );
      }
      throw err;
    }
  }

  /** After rotation, keeps only the newest night's site file open; closing fdatasyncs the rest. */
  async retireOldNights(): Promise<void> {
    if (this.#siteWriters.size < 2) return;
    const newest = [...this.#siteWriters.keys()].sort().at(-1);
    for (const [night, writer] of this.#siteWriters) {
      if (night === newest) continue;
      this.#siteWriters.delete(night);
      await writer.close().catch((e) =>
        this.#warn(`Cannot close ${writer.path} after rotation: ${errorText(e)}`)
      );
    }
  }

  // --- run directories ------------------------------------------------------------------------

  /**
   * The directory of a run named only by its id: below the site directory.
   *
   * @param runId A valid run id.
   * @returns The absolute path.
   */
  runDirOf(runId: string): string {
    return join(this.siteDir, runId);
  }

  /**
   * Resolves a requested run directory and confines it to the site directory or an allowed run
   * root, following symlinks of the part that exists (CONTRACT 2.3).
   *
   * @param requested Relative (to the site directory) or absolute.
   * @returns The absolute path.
   * @throws {RunDirNotAllowedError} If it lies outside every allowed root.
   */
  async confineRunDir(requested: string): Promise<string> {
    const target = isAbsolute(requested) ? resolve(requested) : resolve(this.siteDir, requested);
    const real = await realPathOfNearest(target);
    for (const root of [this.siteDir, ...this.runRoots]) {
      if (isStrictlyInside(real, root) && isStrictlyInside(target, root)) return target;
    }
    throw new RunDirNotAllowedError(requested, target, this.siteDir, this.runRoots);
  }

  /**
   * The next derived run id: the largest all-digit directory name plus one, at least 3 digits.
   *
   * @returns For example `"001"`, `"008"` or `"1000"`.
   */
  async nextNumericRun(): Promise<string> {
    let max = 0;
    for await (const entry of Deno.readDir(this.siteDir)) {
      if (entry.isDirectory && /^\d+$/.test(entry.name)) max = Math.max(max, Number(entry.name));
    }
    return String(max + 1).padStart(3, "0");
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
   * Opens a run's stream file for appending and reads what it already holds.
   *
   * @param runDir The run directory (created if missing).
   * @param countAfter Count the lines with a seq above this (a resumed run's events).
   * @returns The writer, the scan and the run's seq mark.
   */
  async openRunStream(runDir: string, countAfter = Infinity): Promise<RunStream> {
    await Deno.mkdir(runDir, { recursive: true });
    const path = join(runDir, RUN_FILE);
    const writer = await NdjsonWriter.open(
      path,
      this.fsync,
      (n) => this.#warn(tornMessage(path, n)),
    );
    try {
      const scan = await scanStream(path, countAfter);
      const mark = await readSeqMark(runDir);
      this.#runWriters.add(writer);
      return { writer, scan, mark };
    } catch (err) {
      await writer.close();
      throw err;
    }
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
   * A deleted `.lock` no longer keeps a second server out (CONTRACT 4.6): take a new one, or
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

/**
 * Finds the site files that may hold the site stream's last seq: the newest by day key and the
 * most recently modified (they differ after the clock was stepped back across local noon).
 *
 * @param siteDir The site directory.
 * @returns One or two paths, the newest by name first; none when there is no site file.
 */
export async function latestSiteFiles(siteDir: string): Promise<string[]> {
  let byName: string | undefined;
  let byTime: string | undefined;
  let newestTime = -Infinity;
  for await (const entry of Deno.readDir(siteDir)) {
    if (!entry.isFile || !SITE_FILE.test(entry.name)) continue;
    if (byName === undefined || entry.name > byName) byName = entry.name;
    const mtime = (await Deno.stat(join(siteDir, entry.name))).mtime?.getTime() ?? -Infinity;
    if (mtime > newestTime) {
      newestTime = mtime;
      byTime = entry.name;
    }
  }
  return [...new Set([byName, byTime])].filter((n) => n !== undefined).map((n) => join(siteDir, n));
}

/**
 * The file beside a stream's NDJSON files that records the highest seq it has handed out, for
 * seqs that never reached a file (events posted with `store_permanently: false`).
 */
export const SEQ_MARK_FILE = ".seq-mark.json";

/**
 * Reads a stream's seq high-water mark.
 *
 * @param dir The site directory or a run directory.
 * @returns The mark, or 0 when there is none (or it is unreadable).
 */
export async function readSeqMark(dir: string): Promise<number> {
  try {
    const value = await readJsonFile(join(dir, SEQ_MARK_FILE));
    const seq = (value as { seq?: unknown } | undefined)?.seq;
    return typeof seq === "number" && Number.isSafeInteger(seq) && seq > 0 ? seq : 0;
  } catch (err) {
    if (err instanceof SyntaxError) return 0;
    throw err;
  }
}

/**
 * Records a stream's seq high-water mark atomically.
 *
 * @param dir The site directory or a run directory.
 * @param seq No seq at or below it may be handed out again.
 */
export async function writeSeqMark(dir: string, seq: number): Promise<void> {
  await writeJsonAtomic(join(dir, SEQ_MARK_FILE), { seq });
}

/** What {@linkcode scanStream} learns from an existing stream file. */
export interface StreamScan {
  /** The seq of the last complete line, or 0 for an empty or missing file. */
  lastSeq: number;
  /** The last line of each type, keyed by type, in first-seen order. */
  latest: Map<string, string>;
  /** How many lines have a seq greater than `countAfter`. */
  countedAfter: number;
}

/**
 * Reads a whole NDJSON stream file once and returns its last seq, its latest line per type, and
 * how many lines come after a given seq. Used on start-up to resume counters and rebuild the
 * snapshot. Lines that do not parse are skipped (they were never acknowledged as such).
 *
 * @param path The NDJSON file; a missing file scans as empty.
 * @param countAfter Count lines whose seq is greater than this.
 * @returns The scan result.
 */
export async function scanStream(path: string, countAfter = Infinity): Promise<StreamScan> {
  const result: StreamScan = { lastSeq: 0, latest: new Map(), countedAfter: 0 };
  let file: Deno.FsFile;
  try {
    file = await Deno.open(path, { read: true });
  } catch (err) {
    if (err instanceof Deno.errors.NotFound) return result;
    throw err;
  }
  const handle = (line: string) => {
    if (line.length === 0) return;
    const parsed = readSeqAndType(line);
    if (parsed === undefined) return;
    const { seq, type } = parsed;
    if (seq > result.lastSeq) result.lastSeq = seq;
    if (seq > countAfter) result.countedAfter++;
    // Delete first so the Map's order follows the latest occurrence, not the first.
    result.latest.delete(type);
    result.latest.set(type, line);
  };
  // The snapshot keeps lines exactly as stored, so a "\r" stays part of its line.
  const splitter = new LineSplitter({ crlf: false });
  for await (const chunk of file.readable) splitter.push(chunk, handle);
  // A final line without "\n" is a torn tail: callers recover it before scanning, and the
  // splitter's end() is not called, so it is never handed out.
  return result;
}
