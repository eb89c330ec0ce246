/**
 * One append-only NDJSON file: appends that are whole or rolled back, torn-tail recovery, and
 * fdatasync by the site's fsync mode. Needs `--allow-read` and `--allow-write` for the file.
 *
 * @module
 */

import { errorText, isDiskFull, WriteError } from "./_errors.ts";

/**
 * When the writers call `fdatasync`: before answering (`always`), at most once a second and on
 * rotation, run stop and shutdown (`interval`), or only on close (`never`).
 */
export type FsyncMode = "always" | "interval" | "never";

/** The file mode names accepted by {@linkcode FsyncMode}, for flag validation. */
export const FSYNC_MODES: readonly FsyncMode[] = ["always", "interval", "never"];

const NEWLINE = 0x0a;

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

/**
 * An append-only NDJSON file with one writer. Each {@linkcode NdjsonWriter.append} writes its
 * bytes completely or, on failure, truncates the file back to where it was, so a failed write
 * never leaves a partial line.
 *
 * @example Usage
 * ```ts ignore
 * import { NdjsonWriter } from "./_ndjson_writer.ts";
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
