/**
 * Everything the service does with the disk: NDJSON append writers with rollback, the local-noon
 * day key of the site files, torn-tail recovery, resuming seq and the snapshot from existing
 * files, the active-run record and the per-site-directory lock.
 *
 * Needs `--allow-read` and `--allow-write` for the site directory (and any `--allow-run-root`).
 *
 * @example Usage
 * ```ts
 * import { dayKey } from "@obs-utils/telemetry/server";
 * import assert from "node:assert/strict";
 *
 * // 11:59 local time still belongs to the previous night's file.
 * assert.equal(dayKey(Date.parse("2026-06-01T09:59:00Z"), "Europe/Berlin"), "20260531");
 * assert.equal(dayKey(Date.parse("2026-06-01T10:00:00Z"), "Europe/Berlin"), "20260601");
 * ```
 *
 * @module
 */

import { basename, dirname, isAbsolute, join, relative, sep } from "node:path";

/**
 * When the writers call `fdatasync`: before answering (`always`), at most once a second and on
 * rotation, run stop and shutdown (`interval`), or only on close (`never`).
 */
export type FsyncMode = "always" | "interval" | "never";

/** The file mode names accepted by {@linkcode FsyncMode}, for flag validation. */
export const FSYNC_MODES: readonly FsyncMode[] = ["always", "interval", "never"];

const NEWLINE = 0x0a;
const encoder = new TextEncoder();
const decoder = new TextDecoder();

/**
 * The site file day key for an instant: the local date in `timeZone`, where a time of day
 * before 12:00 belongs to the previous date (CONTRACT 3). Reads the wall clock, so it is right
 * on DST change days.
 *
 * @param epochMs The instant, in epoch milliseconds.
 * @param timeZone An IANA time zone name such as `"America/Santiago"`.
 * @returns `YYYYMMDD`.
 * @throws {RangeError} If `timeZone` is not a known time zone.
 *
 * @example Usage
 * ```ts
 * import { dayKey } from "@obs-utils/telemetry/server";
 * import assert from "node:assert/strict";
 *
 * assert.equal(dayKey(Date.parse("2026-01-02T11:59:59.999Z"), "UTC"), "20260101");
 * assert.equal(dayKey(Date.parse("2026-01-02T12:00:00.000Z"), "UTC"), "20260102");
 * ```
 */
export function dayKey(epochMs: number, timeZone: string): string {
  return dayWindow(epochMs, timeZone).key;
}

interface DayWindow {
  key: string;
  /** First instant of this key (local noon), epoch ms. */
  start: number;
  /** First instant of the next key, epoch ms. */
  end: number;
}

function dayWindow(epochMs: number, timeZone: string): DayWindow {
  const zoned = Temporal.Instant.fromEpochMilliseconds(epochMs).toZonedDateTimeISO(timeZone);
  const date = zoned.hour < 12 ? zoned.toPlainDate().subtract({ days: 1 }) : zoned.toPlainDate();
  const noon = (d: Temporal.PlainDate) =>
    d.toZonedDateTime({ timeZone, plainTime: "12:00" }).epochMilliseconds;
  const key = `${String(date.year).padStart(4, "0")}${String(date.month).padStart(2, "0")}${
    String(date.day).padStart(2, "0")
  }`;
  return { key, start: noon(date), end: noon(date.add({ days: 1 })) };
}

/**
 * Computes site-file day keys quickly for a stream of instants, recomputing with `Temporal` only
 * when an instant leaves the current local-noon-to-noon window.
 *
 * @example Usage
 * ```ts
 * import { DayKeyer } from "@obs-utils/telemetry/server";
 * import assert from "node:assert/strict";
 *
 * const keyer = new DayKeyer("Pacific/Auckland");
 * assert.equal(keyer.keyFor(Date.parse("2026-11-22T00:00:00Z")), "20261122");
 * ```
 */
export class DayKeyer {
  #timeZone: string;
  #window: DayWindow | undefined;

  /**
   * Creates a keyer for one site time zone.
   *
   * @param timeZone IANA time zone of the site.
   * @throws {RangeError} If the zone is unknown.
   */
  constructor(timeZone: string) {
    this.#timeZone = timeZone;
    this.#window = dayWindow(Date.now(), timeZone);
  }

  /**
   * The day key for an instant.
   *
   * @param epochMs The instant, in epoch milliseconds.
   * @returns `YYYYMMDD`.
   *
   * @example Usage
   * ```ts
   * import { DayKeyer } from "@obs-utils/telemetry/server";
   * import assert from "node:assert/strict";
   *
   * assert.equal(new DayKeyer("UTC").keyFor(0), "19691231");
   * ```
   */
  keyFor(epochMs: number): string {
    const w = this.#window;
    if (w && epochMs >= w.start && epochMs < w.end) return w.key;
    this.#window = dayWindow(epochMs, this.#timeZone);
    return this.#window.key;
  }
}

/**
 * Checks that a name is a time zone `Temporal` knows.
 *
 * @param timeZone The candidate, for example `"Europe/Madrid"`.
 * @returns The zone's canonical identifier.
 * @throws {RangeError} If it is not a known IANA zone.
 *
 * @example Usage
 * ```ts
 * import { checkTimeZone } from "@obs-utils/telemetry/server";
 * import assert from "node:assert/strict";
 *
 * assert.equal(checkTimeZone("UTC"), "UTC");
 * assert.throws(() => checkTimeZone("Mars/Olympus"), RangeError);
 * ```
 */
export function checkTimeZone(timeZone: string): string {
  try {
    return Temporal.Now.zonedDateTimeISO(timeZone).timeZoneId;
  } catch {
    throw new RangeError(
      `Cannot use time zone "${timeZone}": not an IANA zone name such as "America/Santiago" or "UTC"`,
    );
  }
}

/** The name of the site-stream file for a day key. */
export function siteFileName(key: string): string {
  return `site_${key}.ndjson`;
}

/** Names of site-stream files. */
export const SITE_FILE: RegExp = /^site_(\d{8})\.ndjson$/;

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

/**
 * If a file's last byte is not a newline, moves the bytes after its last newline to
 * `<path>.torn` (appended verbatim, nothing is deleted) and truncates the file there
 * (CONTRACT 4.3).
 *
 * @param path The NDJSON file.
 * @returns The number of bytes moved; 0 when the file ends cleanly or does not exist.
 */
export async function recoverTornTail(path: string): Promise<number> {
  let file: Deno.FsFile;
  try {
    file = await Deno.open(path, { read: true, write: true });
  } catch (err) {
    if (err instanceof Deno.errors.NotFound) return 0;
    throw err;
  }
  try {
    const size = (await file.stat()).size;
    if (size === 0) return 0;
    const lastNewline = await findLastNewline(file, size);
    const tailStart = lastNewline + 1;
    if (tailStart === size) return 0;
    const tail = new Uint8Array(size - tailStart);
    await file.seek(tailStart, Deno.SeekMode.Start);
    await readFull(file, tail);
    const torn = await Deno.open(`${path}.torn`, { append: true, create: true });
    try {
      await writeFull(torn, tail);
      await torn.syncData();
    } finally {
      torn.close();
    }
    await file.truncate(tailStart);
    await file.syncData();
    return tail.length;
  } finally {
    file.close();
  }
}

/** Byte offset of the last `\n` in the first `size` bytes of `file`, or -1. */
async function findLastNewline(file: Deno.FsFile, size: number): Promise<number> {
  const chunk = new Uint8Array(64 * 1024);
  let end = size;
  while (end > 0) {
    const start = Math.max(0, end - chunk.length);
    const view = chunk.subarray(0, end - start);
    await file.seek(start, Deno.SeekMode.Start);
    await readFull(file, view);
    const i = view.lastIndexOf(NEWLINE);
    if (i >= 0) return start + i;
    end = start;
  }
  return -1;
}

async function readFull(file: Deno.FsFile, into: Uint8Array): Promise<void> {
  let off = 0;
  while (off < into.length) {
    const n = await file.read(into.subarray(off));
    if (n === null) throw new Error(`Unexpected end of file after ${off} bytes`);
    off += n;
  }
}

/**
 * Writes all of `bytes`, looping over short writes.
 *
 * @param file An open file.
 * @param bytes What to write.
 */
export async function writeFull(file: Deno.FsFile, bytes: Uint8Array): Promise<void> {
  let off = 0;
  while (off < bytes.length) off += await file.write(bytes.subarray(off));
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

const CANONICAL_PREFIX = /^\{"seq":(\d+),"ts":"[^"]{24}","type":"/;

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
    const parsed = fastSeqAndType(line);
    if (parsed === undefined) return;
    const [seq, type] = parsed;
    if (seq > result.lastSeq) result.lastSeq = seq;
    if (seq > countAfter) result.countedAfter++;
    // Delete first so the Map's order follows the latest occurrence, not the first.
    result.latest.delete(type);
    result.latest.set(type, line);
  };
  let rest = "";
  const stream = file.readable.pipeThrough(new TextDecoderStream());
  for await (const chunk of stream) {
    const text = rest + chunk;
    let start = 0;
    for (let nl = text.indexOf("\n"); nl >= 0; nl = text.indexOf("\n", start)) {
      handle(text.slice(start, nl));
      start = nl + 1;
    }
    rest = text.slice(start);
  }
  // A final line without "\n" is a torn tail: callers recover it before scanning.
  return result;
}

/**
 * Extracts seq and type from a line: a fast path for lines in the service's own canonical form,
 * and a full parse for anything else.
 */
function fastSeqAndType(line: string): [number, string] | undefined {
  const m = CANONICAL_PREFIX.exec(line);
  if (m && line.endsWith("}")) {
    const typeStart = m[0].length - 1;
    let i = typeStart + 1;
    while (i < line.length) {
      const c = line.charCodeAt(i);
      if (c === 0x5c) i += 2; // backslash escape
      else if (c === 0x22) break;
      else i++;
    }
    try {
      return [Number(m[1]), JSON.parse(line.slice(typeStart, i + 1)) as string];
    } catch {
      // fall through to the full parse
    }
  }
  try {
    const value = JSON.parse(line);
    if (
      typeof value === "object" && value !== null && Number.isSafeInteger(value.seq) &&
      typeof value.type === "string"
    ) {
      return [value.seq, value.type];
    }
  } catch {
    // not JSON: skipped
  }
  return undefined;
}

/** Raised when a writer could not write; nothing of the failed write remains on disk. */
export class WriteError extends Error {
  /** `true` when the disk (or quota) is full: ENOSPC or EDQUOT. */
  readonly diskFull: boolean;
  /**
   * Creates the error.
   *
   * @param message What failed.
   * @param options `cause` and whether the disk was full.
   */
  constructor(message: string, options: { cause: unknown; diskFull: boolean }) {
    super(message, { cause: options.cause });
    this.name = "WriteError";
    this.diskFull = options.diskFull;
  }
}

/**
 * Tells whether an error means the disk (or a quota) is full: ENOSPC or EDQUOT.
 *
 * @param err Anything thrown by a file operation.
 * @returns `true` for a full disk.
 */
export function isDiskFull(err: unknown): boolean {
  if (err instanceof WriteError) return err.diskFull;
  const e = err as { code?: string; message?: string };
  return e?.code === "ENOSPC" || e?.code === "EDQUOT" ||
    /os error (28|122)\b|No space left|quota exceeded/i.test(String(e?.message));
}

/**
 * An append-only NDJSON file with one writer. Each {@linkcode NdjsonWriter.append} writes its
 * bytes completely or, on failure, truncates the file back to where it was, so a failed write
 * never leaves a partial line.
 *
 * @example Usage
 * ```ts ignore
 * import { NdjsonWriter } from "@obs-utils/telemetry/server";
 * const writer = await NdjsonWriter.open("telemetry/site_20261121.ndjson", "interval");
 * await writer.append(new TextEncoder().encode('{"seq":1}\n'));
 * await writer.close();
 * ```
 */
export class NdjsonWriter {
  /** The file's path. */
  readonly path: string;
  #file: Deno.FsFile;
  #size: number;
  #fsync: FsyncMode;
  #dirty = false;
  #closed = false;
  #sizeUnknown = false;
  #syncing: Promise<void> | undefined;

  private constructor(path: string, file: Deno.FsFile, size: number, fsync: FsyncMode) {
    this.path = path;
    this.#file = file;
    this.#size = size;
    this.#fsync = fsync;
  }

  /**
   * Opens (creating if needed) a file for appending, first recovering a torn tail.
   *
   * @param path The NDJSON file.
   * @param fsync When to fdatasync.
   * @param onTorn Told how many bytes of a torn last line were moved to `<path>.torn`.
   * @returns The writer.
   */
  static async open(
    path: string,
    fsync: FsyncMode,
    onTorn?: (bytes: number) => void,
  ): Promise<NdjsonWriter> {
    const moved = await recoverTornTail(path);
    if (moved > 0) onTorn?.(moved);
    const file = await Deno.open(path, { append: true, create: true });
    try {
      const size = (await file.stat()).size;
      return new NdjsonWriter(path, file, size, fsync);
    } catch (err) {
      file.close();
      throw err;
    }
  }

  /** Bytes in the file, as far as this writer knows. */
  get size(): number {
    return this.#size;
  }

  /**
   * Appends bytes (whole lines). On failure the file is truncated to its previous length and a
   * {@linkcode WriteError} is thrown. With `fsync: "always"` the data is fdatasynced first.
   *
   * @param bytes Complete `\n`-terminated lines.
   * @throws {WriteError} If the write (or the fsync) failed.
   */
  async append(bytes: Uint8Array): Promise<void> {
    if (this.#closed) throw new Error(`Cannot write to ${this.path}: the writer is closed`);
    if (this.#sizeUnknown) {
      // An earlier rollback failed: learn where the file really ends before writing again.
      this.#size = (await this.#file.stat()).size;
      this.#sizeUnknown = false;
    }
    const before = this.#size;
    try {
      // One write almost always takes it all; writeFull only for the rare short write.
      const n = await this.#file.write(bytes);
      if (n < bytes.length) await writeFull(this.#file, bytes.subarray(n));
      if (this.#fsync === "always") await this.#file.syncData();
      else this.#dirty = true;
      this.#size = before + bytes.length;
    } catch (err) {
      await this.truncate(before).catch(() => {
        this.#sizeUnknown = true;
      });
      throw new WriteError(`Cannot write to ${this.path}: ${errorText(err)}`, {
        cause: err,
        diskFull: isDiskFull(err),
      });
    }
  }

  /**
   * Cuts the file back to `size` bytes: rolls back a batch written to this file when another
   * file of the same batch failed.
   *
   * @param size The length to keep.
   */
  async truncate(size: number): Promise<void> {
    try {
      await this.#file.truncate(size);
    } catch (err) {
      this.#sizeUnknown = true;
      throw err;
    }
    this.#size = size;
  }

  /**
   * fdatasyncs if anything was written since the last sync. Concurrent calls share one sync;
   * a failed sync leaves the writer dirty, so the next call (or close) tries again.
   */
  sync(): Promise<void> {
    if (!this.#dirty || this.#closed) return this.#syncing ?? Promise.resolve();
    this.#syncing ??= (async () => {
      this.#dirty = false;
      try {
        await this.#file.syncData();
      } catch (err) {
        this.#dirty = true;
        throw err;
      } finally {
        this.#syncing = undefined;
      }
    })();
    return this.#syncing;
  }

  /** Syncs (unless `fsync` is `never`) and closes the file. Safe to call twice. */
  async close(): Promise<void> {
    if (this.#closed) return;
    try {
      await this.#syncing?.catch(() => {});
      if (this.#fsync !== "never") await this.sync();
    } finally {
      this.#closed = true;
      this.#file.close();
    }
  }
}

/**
 * Describes an error in a few words for a log line or an HTTP `detail`.
 *
 * @param err Anything thrown.
 * @returns Its message without a stack trace.
 */
export function errorText(err: unknown): string {
  return err instanceof Error ? err.message : String(err);
}

/** Raised when another server holds the site directory's lock. */
export class SiteInUseError extends Error {
  /**
   * Creates the error.
   *
   * @param siteDir The locked site directory.
   */
  constructor(siteDir: string) {
    super(`site directory ${siteDir} is in use by another telemetry server`);
    this.name = "SiteInUseError";
  }
}

/**
 * The exclusive lock on `<site_dir>/.lock` that keeps a second server off the same directory
 * (CONTRACT 4.6). The operating system releases it if the process dies.
 */
export class SiteLock {
  #file: Deno.FsFile;

  private constructor(file: Deno.FsFile) {
    this.#file = file;
  }

  /**
   * Takes the lock without waiting.
   *
   * @param siteDir The site directory.
   * @returns The held lock.
   * @throws {SiteInUseError} If another server (or another open in this process) holds it.
   */
  static async acquire(siteDir: string): Promise<SiteLock> {
    const file = await Deno.open(join(siteDir, ".lock"), { read: true, write: true, create: true });
    let locked = false;
    try {
      locked = await file.tryLock(true);
    } finally {
      if (!locked) file.close();
    }
    if (!locked) throw new SiteInUseError(siteDir);
    try {
      await file.truncate(0);
      await writeFull(file, encoder.encode(`${Deno.pid}\n`));
    } catch (err) {
      await file.unlock().catch(() => {});
      file.close();
      throw err;
    }
    return new SiteLock(file);
  }

  /** Releases the lock. Safe to call twice. */
  async release(): Promise<void> {
    try {
      await this.#file.unlock();
      this.#file.close();
    } catch (err) {
      if (!(err instanceof Deno.errors.BadResource)) throw err;
    }
  }
}

/**
 * Writes a JSON file atomically: a temporary file in the same directory, fdatasynced, then
 * renamed over the target, so a crash leaves the old or the new content, never a mix.
 *
 * @param path The target file.
 * @param value Any JSON-serialisable value.
 */
export async function writeJsonAtomic(path: string, value: unknown): Promise<void> {
  const tmp = `${path}.tmp-${crypto.randomUUID()}`;
  const file = await Deno.open(tmp, { write: true, createNew: true });
  try {
    try {
      await writeFull(file, encoder.encode(JSON.stringify(value) + "\n"));
      await file.syncData();
    } finally {
      file.close();
    }
    await Deno.rename(tmp, path);
  } catch (err) {
    // A full disk or a value that cannot be serialised must not leave the temporary file behind.
    await Deno.remove(tmp).catch(() => {});
    throw err;
  }
  await syncDirectory(dirname(path));
}

/** fsyncs a directory so a rename in it survives a power cut (best effort where unsupported). */
async function syncDirectory(dir: string): Promise<void> {
  let handle: Deno.FsFile;
  try {
    handle = await Deno.open(dir, { read: true });
  } catch {
    return; // platforms that cannot open a directory: the rename is still atomic
  }
  try {
    await handle.sync();
  } catch {
    // some file systems refuse fsync on a directory; nothing more can be done
  } finally {
    handle.close();
  }
}

/**
 * Reads a JSON file, answering `undefined` when it does not exist.
 *
 * @param path The file.
 * @returns The parsed value.
 * @throws {SyntaxError} If the file is not JSON.
 */
export async function readJsonFile(path: string): Promise<unknown> {
  try {
    return JSON.parse(decoder.decode(await Deno.readFile(path)));
  } catch (err) {
    if (err instanceof Deno.errors.NotFound) return undefined;
    throw err;
  }
}

/**
 * Removes a file if it exists.
 *
 * @param path The file.
 */
export async function removeIfExists(path: string): Promise<void> {
  try {
    await Deno.remove(path);
  } catch (err) {
    if (!(err instanceof Deno.errors.NotFound)) throw err;
  }
}

/**
 * Tells whether `path` lies strictly inside `root` (not `root` itself), lexically.
 *
 * @param path An absolute, normalised path.
 * @param root An absolute, normalised directory.
 * @returns `true` when `path` is below `root`.
 */
export function isStrictlyInside(path: string, root: string): boolean {
  const rel = relative(root, path);
  // Not `rel.startsWith("..")`: that also refuses a child named like "..2026".
  return rel !== "" && !isAbsolute(rel) && !rel.split(sep).includes("..");
}

/**
 * The real path of `path`, resolving symlinks through its nearest existing ancestor, so a
 * symlink cannot lead a not-yet-created directory outside where it seems to be.
 *
 * @param path An absolute path that may not exist yet.
 * @returns Its real path (or `path` itself where reading is not permitted).
 */
export async function realPathOfNearest(path: string): Promise<string> {
  const missing: string[] = [];
  let current = path;
  while (true) {
    try {
      const real = await Deno.realPath(current);
      return missing.length === 0 ? real : join(real, ...missing.reverse());
    } catch (err) {
      if (!(err instanceof Deno.errors.NotFound)) {
        if (err instanceof Deno.errors.NotCapable || err instanceof Deno.errors.PermissionDenied) {
          return path; // outside what we may read: the containment check rejects it lexically
        }
        throw err;
      }
      const parent = dirname(current);
      if (parent === current) return path;
      missing.push(basename(current));
      current = parent;
    }
  }
}

/**
 * The next derived run id: the largest all-digit directory name plus one, at least 3 digits.
 *
 * @param siteDir The site directory.
 * @returns For example `"001"`, `"008"` or `"1000"`.
 */
export async function nextNumericRun(siteDir: string): Promise<string> {
  let max = 0;
  for await (const entry of Deno.readDir(siteDir)) {
    if (entry.isDirectory && /^\d+$/.test(entry.name)) max = Math.max(max, Number(entry.name));
  }
  return String(max + 1).padStart(3, "0");
}
