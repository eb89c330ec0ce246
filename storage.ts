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

import { isAbsolute, join, relative, resolve, sep } from "node:path";
import {
  assertStillPlainFile,
  ensurePlainFile,
  exists,
  isStrictlyInside,
  LOCK_FILE,
  readJsonFile,
  realPathOfNearest,
  refuseNonFile,
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
  UnsafeFileError,
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

/** How old a sighting of a file at its path may be before a commit looks again. */
const IN_PLACE_MAX_AGE_MS = 100;

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

/**
 * The names the service keeps for its own files, now and in the features CONTRACT 8, 11-13
 * plan, and what each is, for the advice of a refused run directory. A name is reserved when it
 * starts with one of these, so the files derived from it are reserved too: `<file>.torn`
 * (CONTRACT 4.3), `<file>.gz` (CONTRACT 12), the `.tmp-<uuid>` files of atomic writes. The check
 * ignores case, because on a case-insensitive file system (macOS, Windows) `RUNS.ndjson` is
 * `runs.ndjson`. Not covered, as the service runs on Linux: Windows device names (`NUL`, `CON`),
 * trailing dots and spaces that Windows drops, 8.3 short names, and names that only Unicode
 * normalisation (HFS+) makes equal.
 */
const RESERVED_NAMES: readonly { pattern: RegExp; what: string }[] = [
  {
    // One dot, not two: `..2026` cannot be mistaken for a record, and CONTRACT 2.3 allows it.
    pattern: /^\.(?!\.)/,
    what:
      'names starting with one "." hold the service\'s records (.lock, .active-run.json, .snapshot.json, .seq-mark.json, .forward/, temporary files)',
  },
  { pattern: /^site_\d{8}\.ndjson/i, what: "site_YYYYMMDD.ndjson names the site stream's files" },
  { pattern: /^runs\.ndjson/i, what: "runs.ndjson is the run log" },
  { pattern: /^telemetry\.ndjson/i, what: "telemetry.ndjson is a run's stream file" },
  { pattern: /^run\.json/i, what: "run.json is a run's record" },
];

/**
 * The exact names of the files the service opens at the top of a site directory. At start-up
 * anything else found at one of them (a directory made by a run started there with 0.3, a
 * symbolic link) is moved aside, so it neither stops the start nor leads a write elsewhere.
 */
const SERVICE_FILE =
  /^(?:\.active-run\.json|\.snapshot\.json|\.seq-mark\.json|runs\.ndjson(?:\.torn|\.gz)?|site_\d{8}\.ndjson(?:\.torn|\.gz)?)$/i;

/** Linux's limits: `NAME_MAX` bytes for one name, `PATH_MAX` (with its NUL) for a path. */
const NAME_MAX = 255;
const PATH_MAX = 4096;

/**
 * Why a name cannot be a directory of a run, or `undefined` when it can: every name the service
 * gives its own files, in the site directory and in run directories (CONTRACT 3, 4, 8, 11-13).
 * This is the one rule; run placement asks it of every segment of a run directory's path.
 *
 * @param name One path segment.
 * @returns What the name is kept for, or `undefined`.
 *
 * @example Usage
 * ```ts
 * import { reservedName } from "./storage.ts";
 * import assert from "node:assert/strict";
 *
 * assert.match(reservedName("runs.ndjson") ?? "", /run log/);
 * assert.equal(reservedName("night-1"), undefined);
 * ```
 */
export function reservedName(name: string): string | undefined {
  return RESERVED_NAMES.find(({ pattern }) => pattern.test(name))?.what;
}

function byteLength(text: string): number {
  return encoder.encode(text).length;
}

function quoted(text: string, max = 60): string {
  return JSON.stringify(text.length > max ? `${text.slice(0, max)}...` : text);
}

/** The message of a refused run directory: which field, the value, and what to choose instead. */
function runDirProblem(field: RunDirField, requested: string, problem: string): string {
  const example = field === "run_id" ? `"night-1"` : `"nights/night-1"`;
  return `${field} ${
    quoted(requested)
  } cannot be used: ${problem}; choose another ${field}, for example ${example}.`;
}

/** Which request field named a run directory, for the advice in errors. */
export type RunDirField = "run_id" | "run_dir";

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
 * Where a checkpoint stands in one stream file: the byte offset just after the last line it
 * covers, and that line's seq (0 and 0: an empty file).
 */
export interface StreamCursor {
  /** Bytes of the file the checkpoint covers. */
  offset: number;
  /** The seq of the line that ends at `offset` (0 when `offset` is 0). */
  seq: number;
}

/** The lines of a stream after a point, found by {@linkcode readStreamAfter}. */
export interface StreamTail {
  /** The last line of each type after the point, with its seq, in order of last occurrence. */
  latest: Map<string, { seq: number; line: string }>;
  /** How many lines with a seq came after the point. */
  count: number;
  /** How many bytes were read forwards. */
  bytes: number;
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
    for await (const entry of Deno.readDir(this.siteDir)) {
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
    files.sort((a, b) => a.lastSeq - b.lastSeq || (a.name < b.name ? -1 : 1));
    return {
      lastSeq: files.at(-1)?.lastSeq ?? 0,
      mark: await readSeqMark(this.siteDir),
      files,
    };
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
    try {
      return (await Deno.stat(join(this.siteDir, siteFileName(night)))).size;
    } catch (err) {
      if (err instanceof Deno.errors.NotFound) return 0;
      throw err;
    }
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
        // Off the per-line path: a file deleted or renamed under the writer is recreated before
        // these lines go out (and what it lost is carried over). With --fsync always every group
        // looks (an lstat is nothing beside an fdatasync); otherwise at most every 100 ms.
        if (writer.inPlace(this.fsync === "always" ? 0 : IN_PLACE_MAX_AGE_MS)) {
          this.#problems.delete(writer.path);
        } else this.#noteVerified(writer, await writer.verify());
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
   * root, following symlinks of the part that exists (CONTRACT 2.3). No segment of its path below
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
  async confineRunDir(requested: string, field: RunDirField = "run_dir"): Promise<string> {
    const target = isAbsolute(requested) ? resolve(requested) : resolve(this.siteDir, requested);
    const refuse = (problem: string) =>
      new InvalidRequestError(runDirProblem(field, requested, problem));
    if (byteLength(target) >= PATH_MAX) {
      throw refuse(
        `as the absolute path ${quoted(target)} it is ${
          byteLength(target)
        } bytes long, and the system allows fewer than ${PATH_MAX}`,
      );
    }
    const long = target.split(sep).find((segment) => byteLength(segment) > NAME_MAX);
    if (long !== undefined) {
      throw refuse(
        `its segment ${quoted(long)} is ${
          byteLength(long)
        } bytes long, and a file name may have at most ${NAME_MAX}`,
      );
    }
    if (target === this.siteDir) {
      throw refuse("it is the site directory itself, and a run needs a directory of its own");
    }
    let real: string;
    try {
      real = await realPathOfNearest(target);
    } catch (err) {
      // The path as a whole is the caller's: a file in the way, a loop of links, a name too long.
      if (err instanceof Deno.errors.NotADirectory) throw refuse("a file is in the way");
      const code = (err as { code?: unknown }).code;
      if (code === "ELOOP") throw refuse("it leads through a loop of symbolic links");
      if (code === "ENAMETOOLONG") throw refuse("it is longer than the file system allows");
      throw err;
    }
    for (const root of [this.siteDir, ...this.runRoots]) {
      if (!isStrictlyInside(real, root) || !isStrictlyInside(target, root)) continue;
      // Both the path as written and where its links lead: `latest -> .forward` is refused too.
      for (
        const segment of [...relative(root, target).split(sep), ...relative(root, real).split(sep)]
      ) {
        const reserved = reservedName(segment);
        if (reserved !== undefined) {
          throw refuse(
            `${quoted(segment)} is a name the service keeps for its own files (${reserved})`,
          );
        }
      }
      return target;
    }
    throw new RunDirNotAllowedError(requested, target, this.siteDir, this.runRoots);
  }

  /**
   * The next derived run id: the largest all-digit directory name plus one, at least 3 digits,
   * stepping past files and links with that name, so the derived directory never lands on one.
   *
   * @returns For example `"001"`, `"008"` or `"1000"`.
   */
  async nextNumericRun(): Promise<string> {
    let max = 0;
    const taken = new Set<string>();
    for await (const entry of Deno.readDir(this.siteDir)) {
      if (!/^\d+$/.test(entry.name)) continue;
      if (entry.isDirectory) max = Math.max(max, Number(entry.name));
      else taken.add(entry.name);
    }
    let next = max + 1;
    // A file or link with the next number would refuse a start the client cannot fix.
    while (taken.has(String(next).padStart(3, "0"))) next++;
    return String(next).padStart(3, "0");
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
      const { lastSeq } = await readTail(path, writer.size);
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
 * Opens a stream file's writer only when the file and its `.torn` file are regular files (or
 * missing), and checks afterwards that no link was swapped in while it opened.
 */
async function openPlainWriter(
  path: string,
  fsync: FsyncMode,
  onTorn: (bytes: number) => void,
): Promise<NdjsonWriter> {
  await refuseNonFile(`${path}.torn`);
  const before = await ensurePlainFile(path);
  const writer = await NdjsonWriter.open(path, fsync, onTorn);
  try {
    await assertStillPlainFile(path, before);
  } catch (err) {
    await writer.close().catch(() => {});
    throw err;
  }
  return writer;
}

/**
 * Moves aside whatever is at one of the service's file names in the site directory and is not a
 * regular file: a directory (a run started there by 0.3, which did not reserve the names) would
 * make every later write of that file fail, and a symbolic link would lead writes outside. Moving
 * keeps everything in it; only the name changes.
 */
async function moveAsideSquatters(siteDir: string, warn: (message: string) => void): Promise<void> {
  const found: Deno.DirEntry[] = [];
  for await (const entry of Deno.readDir(siteDir)) {
    if (!entry.isFile && SERVICE_FILE.test(entry.name)) found.push(entry);
  }
  for (const entry of found) {
    const path = join(siteDir, entry.name);
    const what = entry.isSymlink
      ? `a symbolic link (to ${await Deno.readLink(path).catch(() => "?")})`
      : entry.isDirectory
      ? "a directory"
      : "neither a file nor a directory";
    let aside: string;
    for (let n = 0;; n++) {
      // Not a reserved name, so a run directory moved here can be started again by run_dir.
      aside = join(
        siteDir,
        `moved-aside-${Date.now()}${n ? `-${n}` : ""}-${entry.name.replace(/^\./, "")}`,
      );
      // rename() replaces an empty directory at the target: never let it.
      if (!(await exists(aside))) break;
    }
    await Deno.rename(path, aside);
    warn(
      `${path} was ${what} where the service keeps its ${entry.name} file; moved it to ${aside} unchanged.`,
    );
  }
}

/** How much is read per step when reading a file backwards. */
const BACK_CHUNK = 64 * 1024;
const NL = 0x0a;
const decoder = new TextDecoder();

/** A complete line met while reading backwards: `[start, end)` holds it without its `\n`. */
interface BackLine {
  text: string;
  start: number;
  /** The offset just after its `\n`. */
  end: number;
}

async function readAt(file: Deno.FsFile, position: number, length: number): Promise<Uint8Array> {
  const out = new Uint8Array(length);
  await file.seek(position, Deno.SeekMode.Start);
  let filled = 0;
  while (filled < length) {
    const n = await file.read(out.subarray(filled));
    if (n === null) break;
    filled += n;
  }
  return out.subarray(0, filled);
}

/**
 * The complete lines of `[0, end)` from the last to the first, reading 64 KiB steps from the end,
 * so the cost is what the caller consumes, not the file's size. Bytes after the last `\n` (a
 * torn tail) are no line.
 */
async function* linesBackward(file: Deno.FsFile, end: number): AsyncGenerator<BackLine> {
  let pos = end; // buf holds [pos, pos + buf.length)
  let buf = new Uint8Array(0);
  let terminated = false; // buf ends with the "\n" of the next line to hand out
  while (true) {
    const searchEnd = terminated ? buf.length - 1 : buf.length;
    const nl = buf.subarray(0, searchEnd).lastIndexOf(NL);
    if (!terminated) {
      if (nl >= 0) {
        buf = buf.subarray(0, nl + 1);
        terminated = true;
        continue;
      }
    } else if (nl >= 0) {
      yield {
        text: decoder.decode(buf.subarray(nl + 1, buf.length - 1)),
        start: pos + nl + 1,
        end: pos + buf.length,
      };
      buf = buf.subarray(0, nl + 1);
      continue;
    }
    if (pos === 0) {
      if (terminated && buf.length > 0) {
        yield { text: decoder.decode(buf.subarray(0, buf.length - 1)), start: 0, end: buf.length };
      }
      return;
    }
    const step = Math.min(BACK_CHUNK, pos);
    const chunk = await readAt(file, pos - step, step);
    const joined = new Uint8Array(chunk.length + buf.length);
    joined.set(chunk);
    joined.set(buf, chunk.length);
    buf = joined;
    pos -= step;
  }
}

/** What the end of a stream file says, found by {@linkcode readTail}. */
export interface FileTail {
  /** Size in bytes. */
  size: number;
  /** The seq of the last complete line that parses, or 0. */
  lastSeq: number;
  /** The file does not end with `\n`. */
  torn: boolean;
}

/**
 * Reads a stream file's last seq from its end: the cost is the last line, not the file. Lines
 * within one stream file are appended in seq order, so that is the file's highest seq.
 *
 * @param path The NDJSON file; a missing file reads as empty.
 * @param size Bytes to consider (default: the whole file).
 * @returns Its size, last seq and whether its tail is torn.
 */
export async function readTail(path: string, size?: number): Promise<FileTail> {
  let file: Deno.FsFile;
  try {
    file = await Deno.open(path, { read: true });
  } catch (err) {
    if (err instanceof Deno.errors.NotFound) return { size: 0, lastSeq: 0, torn: false };
    throw err;
  }
  try {
    const end = size ?? (await file.stat()).size;
    const last = end > 0 ? await readAt(file, end - 1, 1) : new Uint8Array(0);
    const torn = last.length === 1 && last[0] !== NL;
    for await (const line of linesBackward(file, end)) {
      const parsed = readSeqAndType(line.text);
      if (parsed !== undefined) return { size: end, lastSeq: parsed.seq, torn };
    }
    return { size: end, lastSeq: 0, torn };
  } finally {
    file.close();
  }
}

/**
 * Reads what a stream file holds after a point: from a checkpoint's cursor when it is given
 * (after checking it still matches the file), else from the first line whose seq is above
 * `afterSeq` (found by reading backwards; seq increases within a file).
 *
 * @param path The NDJSON file.
 * @param after The cursor of a checkpoint, or the seq to read past.
 * @returns The latest line per type after the point, or `undefined` when the cursor does not
 *   match the file (shorter than the offset, no `\n` before it, another seq on the line before
 *   it): the file was truncated or replaced.
 */
export async function readStreamAfter(
  path: string,
  after: StreamCursor | { afterSeq: number },
): Promise<StreamTail | undefined> {
  const result: StreamTail = { latest: new Map(), count: 0, bytes: 0 };
  let file: Deno.FsFile;
  try {
    file = await Deno.open(path, { read: true });
  } catch (err) {
    if (err instanceof Deno.errors.NotFound) {
      return "offset" in after && after.offset > 0 ? undefined : result;
    }
    throw err;
  }
  try {
    const size = (await file.stat()).size;
    let start = 0;
    let afterSeq: number;
    if ("offset" in after) {
      if (after.offset > size) return undefined;
      if (after.offset > 0) {
        const before = await linesBackward(file, after.offset).next();
        if (before.done || before.value.end !== after.offset) return undefined;
        if (readSeqAndType(before.value.text)?.seq !== after.seq) return undefined;
      } else if (after.seq !== 0) return undefined;
      start = after.offset;
      afterSeq = after.seq;
    } else {
      afterSeq = after.afterSeq;
      for await (const line of linesBackward(file, size)) {
        const seq = readSeqAndType(line.text)?.seq;
        if (seq !== undefined && seq <= afterSeq) break;
        start = line.start;
      }
    }
    if (start >= size) return result;
    await file.seek(start, Deno.SeekMode.Start);
    const handle = (line: string) => {
      const parsed = line.length > 0 ? readSeqAndType(line) : undefined;
      if (parsed === undefined || parsed.seq <= afterSeq) return;
      result.count++;
      result.latest.delete(parsed.type);
      result.latest.set(parsed.type, { seq: parsed.seq, line });
    };
    const splitter = new LineSplitter({ crlf: false });
    const buf = new Uint8Array(256 * 1024);
    // Only complete lines count: a torn tail was recovered before, and end() is never called.
    while (true) {
      const n = await file.read(buf);
      if (n === null) break;
      result.bytes += n;
      splitter.push(buf.subarray(0, n), handle);
    }
    return result;
  } finally {
    file.close();
  }
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
