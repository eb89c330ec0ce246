/**
 * One append-only NDJSON file: appends that are whole or rolled back, torn-tail recovery, and
 * fdatasync by the site's fsync mode. Needs `--allow-read` and `--allow-write` for the file.
 *
 * @module
 */

import { dirname } from "node:path";
import { errorText, isDiskFull, WriteError } from "../core/errors.ts";

/**
 * When the writers call `fdatasync`: before answering (`always`), at most once a second and on
 * rotation, run stop and shutdown (`interval`), or only on close (`never`).
 */
export type FsyncMode = "always" | "interval" | "never";

/** The file mode names accepted by {@linkcode FsyncMode}, for flag validation. */
export const FSYNC_MODES: readonly FsyncMode[] = ["always", "interval", "never"];

/** The fsync mode when none is given: `--fsync` shows it, the service applies it (docs/storage.md). */
export const DEFAULT_FSYNC: FsyncMode = "interval";

const NEWLINE = 0x0a;

/** What a stream file's name gains for the file its torn tails are moved to (docs/storage.md). */
export const TORN_SUFFIX = ".torn";

/**
 * The warning that a torn tail was moved aside by {@linkcode recoverTornTail}.
 *
 * @param path The stream file.
 * @param bytes The bytes moved.
 * @returns One line naming both files.
 *
 * @example Usage
 * ```ts
 * import { tornMessage } from "./writer.ts";
 * import assert from "node:assert/strict";
 *
 * assert.equal(tornMessage("/t/a.ndjson", 7), "Moved a torn last line (7 bytes) of /t/a.ndjson to /t/a.ndjson.torn.");
 * ```
 */
export function tornMessage(path: string, bytes: number): string {
  return `Moved a torn last line (${bytes} bytes) of ${path} to ${path}${TORN_SUFFIX}.`;
}

/**
 * If a file's last byte is not a newline, moves the bytes after its last newline to
 * `<path>.torn` (appended verbatim, nothing is deleted) and truncates the file there
 * (docs/storage.md).
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
    await file.seek(tailStart, Deno.SeekMode.Start);
    const torn = await Deno.open(`${path}${TORN_SUFFIX}`, { append: true, create: true });
    try {
      // Copied a chunk at a time: a tail of damage (a file filled with zeros, no "\n" in a
      // gigabyte) must not be held in memory whole (docs/storage.md).
      const chunk = new Uint8Array(64 * 1024);
      for (let at = tailStart; at < size; at += chunk.length) {
        const piece = chunk.subarray(0, Math.min(chunk.length, size - at));
        await readFull(file, piece);
        await writeFull(torn, piece);
      }
      await torn.syncData();
    } finally {
      torn.close();
    }
    await file.truncate(tailStart);
    await file.syncData();
    return size - tailStart;
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

/**
 * More appends than this within a millisecond mean load: the write then goes to the blocking pool,
 * so that requests gather into larger groups meanwhile (one write and one hop for many events).
 * Below it, one write(2) on the main thread costs far less than a hop to the pool and back.
 */
const BUSY_APPENDS_PER_MS = 16;
/** How long load, once seen, keeps the writes on the pool (milliseconds). */
const LOAD_HOLD_MS = 20;

/** {@linkcode writeFull} on the calling thread, for appends to the page cache. */
function writeFullSync(file: Deno.FsFile, bytes: Uint8Array): void {
  let off = file.writeSync(bytes);
  while (off < bytes.length) off += file.writeSync(bytes.subarray(off));
}

/**
 * An append-only NDJSON file with one writer. Each {@linkcode NdjsonWriter.append} writes its
 * bytes completely or, on failure, truncates the file back to where it was, so a failed write
 * never leaves a partial line.
 *
 * The writer also notices when its file was deleted, renamed or replaced under it
 * ({@linkcode NdjsonWriter.verify}): it opens the path again (recreating the directory) and,
 * when the old file is no longer linked anywhere, copies into the new one what it wrote since
 * the path was last seen holding it, so no acknowledged line stays only in a deleted inode.
 *
 * @example Usage
 * ```ts ignore
 * import { NdjsonWriter } from "./writer.ts";
 * const writer = await NdjsonWriter.open("telemetry/site_20261121.ndjson", "interval");
 * await writer.append(new TextEncoder().encode('{"seq":1}\n'));
 * await writer.close();
 * ```
 */
export class NdjsonWriter {
  /** The file's path. */
  readonly path: string;
  #file: Deno.FsFile;
  #id: FileId;
  #size: number;
  /** Bytes the file held when the path was last seen to be this file. */
  #verified: number;
  #fsync: FsyncMode;
  #dirty = false;
  #closed = false;
  #sizeUnknown = false;
  #syncing: Promise<void> | undefined;
  /** Appends, rollbacks and checks take turns: a check may swap the file under them. */
  #turn: Promise<unknown> = Promise.resolve();
  /** Turns queued or running: appends take the synchronous fast path only when there are none. */
  #busy = 0;
  /** Start of the current 1 ms window of appends (`performance.now()`), and appends in it. */
  #windowStart = -Infinity;
  #windowAppends = 0;
  /** Until when appends count as under load (`performance.now()`). */
  #loadedUntil = -Infinity;
  /** When {@linkcode NdjsonWriter.inPlace} last saw the path name this file (`performance.now()`). */
  #seenAt = -Infinity;

  private constructor(path: string, file: Deno.FsFile, info: Deno.FileInfo, fsync: FsyncMode) {
    this.path = path;
    this.#file = file;
    this.#id = idOf(info);
    this.#size = info.size;
    this.#verified = info.size;
    this.#fsync = fsync;
  }

  /**
   * Opens (creating if needed) a file for appending, first recovering a torn tail.
   *
   * @param path The NDJSON file.
   * @param fsync When to fdatasync.
   * @param onTorn Told how many bytes of a torn last line were moved to `<path>.torn`.
   * @returns The writer.
   * @throws {WriteError} If the file cannot be opened (out of descriptors, a directory in the
   *   way...); a missing permission stays `Deno.errors.NotCapable`.
   */
  static async open(
    path: string,
    fsync: FsyncMode,
    onTorn?: (bytes: number) => void,
  ): Promise<NdjsonWriter> {
    try {
      const moved = await recoverTornTail(path);
      if (moved > 0) onTorn?.(moved);
      const file = await openForAppend(path);
      try {
        return new NdjsonWriter(path, file, await file.stat(), fsync);
      } catch (err) {
        file.close();
        throw err;
      }
    } catch (err) {
      if (err instanceof WriteError || err instanceof Deno.errors.NotCapable) throw err;
      throw await writeError(`Cannot open ${path} for appending: ${errorText(err)}`, path, err);
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
  append(bytes: Uint8Array): Promise<void> {
    if (
      this.#quiet() && this.#busy === 0 && !this.#closed && !this.#sizeUnknown &&
      this.#fsync !== "always"
    ) {
      // A quiet moment: the bytes go to the page cache right here with one write(2) on this
      // thread, without a hop to the blocking pool and back (about half the CPU of an event at a
      // few thousand a second). Under load the write goes to the pool instead: while it is out,
      // the requests that arrive gather into the next group, which then shares one write.
      const before = this.#size;
      try {
        writeFullSync(this.#file, bytes);
      } catch (err) {
        return this.#exclusive(() => this.#rollBack(before, err));
      }
      this.#size = before + bytes.length;
      this.#dirty = true;
      return Promise.resolve();
    }
    return this.#exclusive(() => this.#append(bytes));
  }

  /**
   * Whether appends come slowly enough to write on this thread: more than
   * {@linkcode BUSY_APPENDS_PER_MS} appends within a millisecond mean load, which lasts
   * {@linkcode LOAD_HOLD_MS} (so that larger groups, which need fewer appends, do not flip it back
   * at once).
   */
  #quiet(): boolean {
    const now = performance.now();
    if (now - this.#windowStart >= 1) {
      this.#windowStart = now;
      this.#windowAppends = 0;
    }
    if (++this.#windowAppends > BUSY_APPENDS_PER_MS) this.#loadedUntil = now + LOAD_HOLD_MS;
    return now >= this.#loadedUntil;
  }

  async #append(bytes: Uint8Array): Promise<void> {
    if (this.#closed) throw new Error(`Cannot write to ${this.path}: the writer is closed`);
    if (this.#sizeUnknown) {
      // An earlier rollback failed: learn where the file really ends before writing again.
      this.#size = (await this.#file.stat()).size;
      this.#sizeUnknown = false;
    }
    const before = this.#size;
    try {
      await writeFull(this.#file, bytes);
      this.#size = before + bytes.length;
      if (this.#fsync === "always") await this.#file.syncData();
      else this.#dirty = true;
    } catch (err) {
      await this.#rollBack(before, err);
    }
  }

  /** After a failed append: cuts the file back to `before` and throws the write error. */
  async #rollBack(before: number, err: unknown): Promise<never> {
    await this.#truncate(before).catch(() => {
      this.#sizeUnknown = true;
    });
    throw await writeError(`Cannot write to ${this.path}: ${errorText(err)}`, this.path, err);
  }

  /**
   * Cuts the file back to `size` bytes: rolls back a batch written to this file when another
   * file of the same batch failed.
   *
   * @param size The length to keep.
   */
  truncate(size: number): Promise<void> {
    return this.#exclusive(() => this.#truncate(size));
  }

  async #truncate(size: number): Promise<void> {
    try {
      await this.#file.truncate(size);
    } catch (err) {
      this.#sizeUnknown = true;
      throw err;
    }
    this.#size = size;
    this.#verified = Math.min(this.#verified, size);
  }

  /**
   * Checks that the path still names this writer's file (one `lstat`; call it once per commit
   * group or timer tick, not per line). When the file was deleted, renamed or replaced by
   * another file, opens the path again (recreating its directory) and, if the old file is
   * linked nowhere any more, copies into the new file every byte written since the last check
   * that found it in place; later appends go to the new file.
   *
   * @returns One line saying what was found and done, or `undefined` when all was in place.
   * @throws {WriteError} If the path cannot be restored: a directory or symlink is in its way,
   *   its directory was replaced by a symlink (not followed), or the open or copy failed.
   */
  verify(): Promise<string | undefined> {
    return this.#exclusive(() => this.#verify());
  }

  /**
   * The cheap form of {@linkcode NdjsonWriter.verify} for every commit group: `true` when the
   * path was seen naming this writer's file less than `maxAgeMs` ago, or is seen so now (one
   * synchronous `lstat`), and nothing else is under way. On `false`, call
   * {@linkcode NdjsonWriter.verify}, which repairs what it finds. An `lstat` costs about as
   * much as the append itself, so busy writers look at most once per `maxAgeMs`; whatever went
   * into a deleted file in that window is copied over when the check finds it.
   *
   * @param maxAgeMs How old a sighting may be; 0 looks every time.
   * @returns Whether the file is in place.
   */
  inPlace(maxAgeMs: number): boolean {
    if (this.#closed || this.#busy > 0) return false;
    const now = performance.now();
    if (now - this.#seenAt < maxAgeMs) return true;
    let info: Deno.FileInfo;
    try {
      info = Deno.lstatSync(this.path);
    } catch {
      return false; // missing or unreadable: verify() finds out which
    }
    if (!info.isFile || !sameFile(idOf(info), this.#id)) return false;
    this.#verified = this.#size;
    this.#seenAt = now;
    return true;
  }

  async #verify(): Promise<string | undefined> {
    if (this.#closed) return undefined;
    const size = this.#size;
    const now = await lstatOrUndefined(this.path);
    if (now?.isFile && sameFile(idOf(now), this.#id)) {
      this.#verified = size;
      this.#seenAt = performance.now();
      return undefined;
    }
    return await this.#reopen(now);
  }

  async #reopen(now: Deno.FileInfo | undefined): Promise<string> {
    const fail = (why: string, cause?: unknown) =>
      new WriteError(`Cannot write to ${this.path}: ${why}`, {
        cause,
        diskFull: isDiskFull(cause),
        path: this.path,
      });
    if (now !== undefined && !now.isFile) {
      throw fail(
        `it was replaced by a ${
          now.isDirectory ? "directory" : "symbolic link or special file"
        }; move that away so the file can be recreated`,
      );
    }
    const dir = dirname(this.path);
    const dirInfo = await lstatOrUndefined(dir);
    if (dirInfo?.isSymlink) {
      throw fail(
        `its directory ${dir} was replaced by a symbolic link, which is not followed; put the directory back`,
      );
    }
    let old: Deno.FileInfo;
    let file: Deno.FsFile;
    try {
      old = await this.#file.stat();
      if (dirInfo === undefined) await Deno.mkdir(dir, { recursive: true });
      if (now !== undefined) await recoverTornTail(this.path);
      file = await openForAppend(this.path);
    } catch (err) {
      throw fail(`it vanished and cannot be opened again (${errorText(err)})`, err);
    }
    // Deleted (linked nowhere): what it got since the path last held it exists only here.
    // Renamed (still linked): those bytes are safe under the new name and are not duplicated.
    const orphaned = old.nlink === 0;
    const from = this.#verified;
    const carried = orphaned ? this.#size - from : 0;
    let info: Deno.FileInfo;
    try {
      if (carried > 0) {
        const bytes = new Uint8Array(carried);
        await this.#file.seek(from, Deno.SeekMode.Start);
        await readFull(this.#file, bytes);
        await writeFull(file, bytes);
      }
      if (this.#fsync !== "never") await file.syncData();
      info = await file.stat();
    } catch (err) {
      file.close();
      throw fail(`it vanished and cannot be recreated (${errorText(err)})`, err);
    }
    await this.#syncing?.catch(() => {});
    this.#file.close();
    this.#file = file;
    this.#id = idOf(info);
    this.#size = info.size;
    this.#verified = info.size;
    this.#dirty = false;
    this.#sizeUnknown = false;
    const found = now !== undefined
      ? "was replaced by another file"
      : orphaned
      ? "was deleted"
      : "was renamed or moved away";
    const made = dirInfo === undefined ? `recreated ${dir} and the file` : "reopened the path";
    const kept = orphaned
      ? `copied the ${carried} bytes written since it was last seen there`
      : "the old file keeps what was written to it";
    return `${this.path} ${found} while the service had it open: ${made}, ${kept}; new events go to ${this.path}.`;
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
  close(): Promise<void> {
    return this.#exclusive(async () => {
      if (this.#closed) return;
      try {
        await this.#syncing?.catch(() => {});
        if (this.#fsync !== "never") await this.sync();
      } finally {
        this.#closed = true;
        this.#file.close();
      }
    });
  }

  #exclusive<T>(fn: () => Promise<T>): Promise<T> {
    this.#busy++;
    const result = this.#turn.then(fn).finally(() => this.#busy--);
    this.#turn = result.catch(() => {});
    return result;
  }
}

/** Where a file lives: equal for two names of one file. */
interface FileId {
  dev: number | null;
  ino: number | null;
}

function idOf(info: Deno.FileInfo): FileId {
  return { dev: info.dev, ino: info.ino };
}

/** Without inode numbers (Windows) a file that still exists counts as the same. */
function sameFile(a: FileId, b: FileId): boolean {
  return a.ino === null || b.ino === null || (a.ino === b.ino && a.dev === b.dev);
}

async function lstatOrUndefined(path: string): Promise<Deno.FileInfo | undefined> {
  try {
    return await Deno.lstat(path);
  } catch (err) {
    if (err instanceof Deno.errors.NotFound) return undefined;
    throw err;
  }
}

/** Read access too: a deleted file's last lines are copied out of it (see `verify`). */
function openForAppend(path: string): Promise<Deno.FsFile> {
  return Deno.open(path, { read: true, append: true, create: true });
}

/** A failure as a {@linkcode WriteError} naming the file and, for a full disk, its mount. */
async function writeError(message: string, path: string, cause: unknown): Promise<WriteError> {
  const diskFull = isDiskFull(cause);
  const mountPoint = diskFull ? await mountPointOf(path) : undefined;
  return new WriteError(message, { cause, diskFull, path, mountPoint });
}

/**
 * The mount point of the file system holding `path`, from `/proc/self/mountinfo` (Linux): the
 * longest mount point that contains it. `undefined` where that file cannot be read (another
 * system, or no read permission for it), so callers fall back to naming the path.
 *
 * @param path An absolute path.
 * @returns The mount point, or `undefined`.
 */
export async function mountPointOf(path: string): Promise<string | undefined> {
  if (Deno.build.os !== "linux") return undefined;
  const table = "/proc/self/mountinfo";
  // Never prompt: the scoped permissions of `run` may not include /proc.
  const state = (await Deno.permissions.query({ name: "read", path: table })).state;
  if (state !== "granted") return undefined;
  let text: string;
  try {
    text = await Deno.readTextFile(table);
  } catch {
    return undefined;
  }
  let best: string | undefined;
  for (const line of text.split("\n")) {
    const field = line.split(" ")[4];
    if (field === undefined) continue;
    // mountinfo escapes space, tab, newline and backslash as \ooo.
    const mount = field.replace(/\\([0-7]{3})/g, (_, o) => String.fromCharCode(parseInt(o, 8)));
    const inside = mount === "/" || path === mount || path.startsWith(mount + "/");
    if (inside && (best === undefined || mount.length > best.length)) best = mount;
  }
  return best;
}
