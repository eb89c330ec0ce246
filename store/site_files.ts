/**
 * The stored files of a site directory as every reader sees them: `read`, `readHistory()`, the
 * start-up resume and the forwarder (docs/history.md, docs/fleet.md). It lists the site stream's files by night
 * in either stored form (`site_YYYYMMDD.ndjson` or `.ndjson.gz`, and the right one when a
 * compression was interrupted half-way), finds a run's file, and reads complete lines from a
 * file, plain or gzip, from a byte offset of its uncompressed content, giving each line's end
 * offset: a cursor `(file, offset, seq)` stays valid when its file is compressed under it,
 * because offsets always count uncompressed bytes. Bytes after the last `\n` (a torn tail, or a
 * line being written right now) are never a line. Damage (a `.gz` cut short, a line longer than
 * {@linkcode MAX_LINE_BYTES}) is named with its file and offset and passed over, or thrown
 * (docs/storage.md, "Damaged files"): no single line takes more memory than the bound.
 *
 * Symbolic links are never followed: a link in the site directory named like a stream file is no
 * stored file, so nothing outside the directory is read through one. Needs `--allow-read` for the
 * site directory only.
 *
 * @example Usage
 * ```ts ignore
 * import { listSiteFiles, readLines } from "./site_files.ts";
 * for (const file of await listSiteFiles("./telemetry")) {
 *   for await (const batch of readLines(file)) {
 *     for (const line of batch) console.log(file.name, line.end, line.text);
 *   }
 * }
 * ```
 *
 * @module
 */

import { basename, join } from "node:path";
import { GZ_SUFFIX, RUN_FILE, STORED_SITE_FILE } from "./layout.ts";

/** One stored stream file. */
export interface StoredFile {
  /** Absolute (or as given) path of the file. */
  path: string;
  /** Its name, for example `site_20260510.ndjson.gz`. */
  name: string;
  /** The file is gzip (its name ends with `.gz`). */
  compressed: boolean;
  /** The night key `YYYYMMDD` of a site file; `undefined` for a run file. */
  night: string | undefined;
}

/** One complete line of a stored file and where it ends. */
export interface StoredLine {
  /** The line without its `\n` (a `\r` before it is kept, as stored). */
  text: string;
  /** The offset just after its `\n`, in the file's uncompressed bytes: a cursor's offset. */
  end: number;
}

/** Options of {@linkcode readLines}. */
export interface ReadLinesOptions {
  /**
   * Where to start, in the file's uncompressed bytes: 0 or the end of a line (a cursor's offset).
   * @default {0}
   */
  offset?: number;
  /**
   * Bytes handled per step (after decompression). Kept under V8's large-object size: text
   * decoded from larger steps made memory grow with the file.
   * @default {65536}
   */
  chunkSize?: number;
  /**
   * The longest line, in bytes without its `\n`, that is read as a line; a longer one is damage
   * (see {@linkcode MAX_LINE_BYTES}).
   * @default {MAX_LINE_BYTES}
   */
  maxLine?: number;
  /**
   * Told about damage (an over-long line, a `.gz` that is not gzip or ends early), after which
   * reading goes on: past the over-long line, or with the next file after a broken `.gz`. Without
   * it the damage is thrown as a {@linkcode DamagedFileError}.
   */
  onDamage?: ((damage: DamagedFileError) => void) | undefined;
}

/**
 * The longest line the service ever writes, in bytes (docs/storage.md): a stored line is one
 * event of a request body (`--max-body`, 1 MiB by default) with its envelope, and numbers such as
 * `1e20` can grow a few times when written back. Readers take a longer line for damage (a gzip
 * bomb, a file overwritten with zeros), so no single line can make a reader's memory grow
 * without bound.
 *
 * @example Usage
 * ```ts
 * import { MAX_LINE_BYTES } from "./site_files.ts";
 * import assert from "node:assert/strict";
 *
 * assert.equal(MAX_LINE_BYTES, 32 * 1024 * 1024);
 * ```
 */
export const MAX_LINE_BYTES: number = 32 * 1024 * 1024;

/**
 * Damage in a stored file (docs/storage.md): a line longer than any the service writes, or a
 * `.gz` that is not gzip or ends early (a truncated copy, a full disk). It names the file and
 * the offset, in uncompressed bytes, where the damage begins.
 *
 * @example Usage
 * ```ts
 * import { DamagedFileError } from "./site_files.ts";
 * import assert from "node:assert/strict";
 *
 * const err = new DamagedFileError("/srv/t/site_20260510.ndjson.gz", 4096, "it ends early");
 * assert.equal(err.offset, 4096);
 * assert.match(err.message, /site_20260510\.ndjson\.gz is damaged at byte 4096: it ends early/);
 * ```
 */
export class DamagedFileError extends Error {
  /** The file. */
  readonly path: string;
  /** Where the damage begins, in the file's uncompressed bytes. */
  readonly offset: number;
  /**
   * Creates the error.
   *
   * @param path The file.
   * @param offset Where the damage begins, in uncompressed bytes.
   * @param what What is wrong there.
   */
  constructor(path: string, offset: number, what: string) {
    super(`${path} is damaged at byte ${offset}: ${what}`);
    this.name = "DamagedFileError";
    this.path = path;
    this.offset = offset;
  }
}

/** A cursor's offset that does not fall at the end of a line of its file (docs/fleet.md). */
export class OffsetMismatchError extends Error {
  /** The file. */
  readonly path: string;
  /** The offset asked for. */
  readonly offset: number;
  /**
   * Creates the error.
   *
   * @param path The file.
   * @param offset The offset asked for.
   * @param found What is there instead.
   */
  constructor(path: string, offset: number, found: string) {
    super(`Cannot read ${path} from byte ${offset}: ${found}; the file was truncated or replaced`);
    this.name = "OffsetMismatchError";
    this.path = path;
    this.offset = offset;
  }
}

const NL = 0x0a;
// Lines keep every character as stored, a byte order mark included, so lengths map to bytes.
const decoder = new TextDecoder("utf-8", { ignoreBOM: true });

/**
 * The plain name of a stored file: its name without `.gz`.
 *
 * @param name A stored file's name.
 * @returns For example `site_20260510.ndjson` for `site_20260510.ndjson.gz`.
 *
 * @example Usage
 * ```ts
 * import { plainName } from "./site_files.ts";
 * import assert from "node:assert/strict";
 *
 * assert.equal(plainName("site_20260510.ndjson.gz"), "site_20260510.ndjson");
 * assert.equal(plainName("telemetry.ndjson"), "telemetry.ndjson");
 * ```
 */
export function plainName(name: string): string {
  return name.endsWith(GZ_SUFFIX) ? name.slice(0, -GZ_SUFFIX.length) : name;
}

/** A regular file (never a link) at `path`, or `undefined`. */
async function regularFile(path: string): Promise<boolean> {
  try {
    return (await Deno.lstat(path)).isFile;
  } catch (err) {
    if (err instanceof Deno.errors.NotFound || err instanceof Deno.errors.NotADirectory) {
      return false;
    }
    throw err;
  }
}

function stored(dir: string, name: string, night: string | undefined): StoredFile {
  return { path: join(dir, name), name, compressed: name.endsWith(GZ_SUFFIX), night };
}

/** The first complete line of a file, or `undefined` (empty, torn, unreadable gzip). */
async function firstLine(file: StoredFile): Promise<string | undefined> {
  try {
    for await (const batch of readLines(file, { chunkSize: 16 * 1024 })) {
      if (batch.length > 0) return batch[0]!.text;
    }
  } catch (err) {
    if (err instanceof Deno.errors.NotFound) return undefined;
    if (err instanceof DamagedFileError) return undefined; // not gzip, or cut short
    throw err;
  }
  return undefined;
}

/**
 * Which forms of one night to read when both `site_K.ndjson` and `site_K.ndjson.gz` exist.
 * Compression renames the complete `.gz` into place and then removes the original, so a crash
 * between the two leaves both with the same lines: the plain file is read (it is the original,
 * and if the service wrote to it again it holds more). Different first lines mean the night was
 * written again after it was compressed (a clock stepped back days): both are read, the `.gz`
 * first, as the older part.
 *
 * @param plain The plain form.
 * @param gz The compressed form.
 * @returns The files to read, in order.
 */
export async function chooseForms(plain: StoredFile, gz: StoredFile): Promise<StoredFile[]> {
  const [a, b] = await Promise.all([firstLine(plain), firstLine(gz)]);
  if (a === undefined) return b === undefined ? [plain] : [gz];
  if (b === undefined || a === b) return [plain];
  return [gz, plain];
}

/**
 * Lists the site stream's files, oldest night first: regular files named
 * `site_YYYYMMDD.ndjson` or `site_YYYYMMDD.ndjson.gz` (never a link), one form per night unless
 * both hold lines of their own (see {@linkcode chooseForms}).
 *
 * @param siteDir The site directory.
 * @param options `nights` keeps only the nights it accepts, without opening the others.
 * @returns The files to read, in order.
 * @throws {Deno.errors.NotFound} If the site directory does not exist.
 *
 * @example Usage
 * ```ts ignore
 * import { listSiteFiles } from "./site_files.ts";
 * const files = await listSiteFiles("./telemetry", { nights: (key) => key >= "20260501" });
 * ```
 */
export async function listSiteFiles(
  siteDir: string,
  options: { nights?: (night: string) => boolean } = {},
): Promise<StoredFile[]> {
  const byNight = new Map<string, { plain?: StoredFile; gz?: StoredFile }>();
  for await (const entry of Deno.readDir(siteDir)) {
    // A link is no stored file (entry.isFile is false for it): never read outside the directory.
    if (!entry.isFile) continue;
    const m = STORED_SITE_FILE.exec(entry.name);
    if (!m) continue;
    const night = m[1]!;
    if (options.nights && !options.nights(night)) continue;
    const forms = byNight.get(night) ?? {};
    forms[m[2] ? "gz" : "plain"] = stored(siteDir, entry.name, night);
    byNight.set(night, forms);
  }
  const out: StoredFile[] = [];
  for (const night of [...byNight.keys()].sort()) {
    const { plain, gz } = byNight.get(night)!;
    if (plain && gz) out.push(...await chooseForms(plain, gz));
    else out.push((plain ?? gz)!);
  }
  return out;
}

/**
 * Finds a stored file by its plain name in a directory: the plain form when it is there (a
 * cursor's file, before or while it is compressed), else the `.gz` form.
 *
 * @param dir The site directory or a run directory.
 * @param name The plain name, for example `site_20260510.ndjson` or `telemetry.ndjson`.
 * @returns The file, or `undefined` when neither form is a regular file.
 *
 * @example Usage
 * ```ts ignore
 * import { findStored } from "./site_files.ts";
 * const file = await findStored("./telemetry/night-1", "telemetry.ndjson");
 * ```
 */
export async function findStored(dir: string, name: string): Promise<StoredFile | undefined> {
  const plain = plainName(name);
  const night = STORED_SITE_FILE.exec(plain)?.[1];
  const hasPlain = await regularFile(join(dir, plain));
  const hasGz = await regularFile(join(dir, plain + GZ_SUFFIX));
  if (hasPlain && hasGz) {
    const forms = await chooseForms(
      stored(dir, plain, night),
      stored(dir, plain + GZ_SUFFIX, night),
    );
    return forms.at(-1);
  }
  if (hasPlain) return stored(dir, plain, night);
  if (hasGz) return stored(dir, plain + GZ_SUFFIX, night);
  return undefined;
}

/**
 * The files of a run's stream in its directory: `telemetry.ndjson` or `telemetry.ndjson.gz`.
 *
 * @param runDir The run directory.
 * @returns The files to read, in order (empty when the run stored nothing).
 *
 * @example Usage
 * ```ts ignore
 * import { listRunFiles } from "./site_files.ts";
 * const files = await listRunFiles("./telemetry/night-1");
 * ```
 */
export async function listRunFiles(runDir: string): Promise<StoredFile[]> {
  const plain = stored(runDir, RUN_FILE, undefined);
  const gz = stored(runDir, RUN_FILE + GZ_SUFFIX, undefined);
  const [hasPlain, hasGz] = [await regularFile(plain.path), await regularFile(gz.path)];
  if (hasPlain && hasGz) return await chooseForms(plain, gz);
  return hasPlain ? [plain] : hasGz ? [gz] : [];
}

/**
 * Complete lines of a stored file as its bytes, from {@linkcode readRegions}: one or more whole
 * lines, each ended by `\n`, never an over-long one.
 */
export interface StoredRegion {
  /**
   * The bytes, ending with `\n`. They may be a view of a buffer that the next step of the reader
   * reads into: use them (or copy them) before asking for the next region.
   */
  bytes: Uint8Array;
  /** The offset of the first byte, in the file's uncompressed bytes. */
  start: number;
}

/**
 * Splits bytes into regions of complete lines, counting offsets in bytes. A line longer than
 * `maxLine` is never gathered: its bytes are dropped as they come, and it is reported as damage
 * once (its start offset).
 */
class ByteLineSplitter {
  #carry: Uint8Array[] = [];
  #carryLength = 0;
  /** The offset of the first byte not yet handed out in a line (the carry's start). */
  #pos: number;
  #maxLine: number;
  #overlong: (start: number) => void;
  /** Inside an over-long line: its bytes are dropped up to its `\n`. */
  #skipping = false;

  constructor(start: number, maxLine: number, overlong: (start: number) => void) {
    this.#pos = start;
    this.#maxLine = maxLine;
    this.#overlong = overlong;
  }

  push(chunk: Uint8Array, out: StoredRegion[]): void {
    if (this.#skipping) {
      const nl = chunk.indexOf(NL);
      if (nl < 0) {
        this.#pos += chunk.length;
        return;
      }
      this.#pos += nl + 1;
      this.#skipping = false;
      chunk = chunk.subarray(nl + 1);
    }
    const last = chunk.lastIndexOf(NL);
    if (last < 0) {
      if (this.#carryLength + chunk.length > this.#maxLine) {
        this.#overlong(this.#pos);
        this.#pos += this.#carryLength + chunk.length;
        this.#carry = [];
        this.#carryLength = 0;
        this.#skipping = true;
        return;
      }
      this.#carry.push(chunk.slice());
      this.#carryLength += chunk.length;
      return;
    }
    let region = chunk.subarray(0, last + 1);
    if (this.#carryLength > 0) {
      // Only the line the carry begins is joined: the rest of the chunk is handed out in place.
      const first = region.indexOf(NL) + 1;
      const joined = new Uint8Array(this.#carryLength + first);
      let at = 0;
      for (const piece of this.#carry) {
        joined.set(piece, at);
        at += piece.length;
      }
      joined.set(region.subarray(0, first), at);
      this.#carry = [];
      this.#carryLength = 0;
      this.#emit(joined, out);
      region = region.subarray(first);
    }
    if (region.length > 0) this.#emit(region, out);
    if (last + 1 < chunk.length) {
      const rest = chunk.slice(last + 1);
      this.#carry.push(rest);
      this.#carryLength = rest.length;
    }
  }

  /** Hands out the lines of `region`, which ends with `\n`, less any over-long one. */
  #emit(region: Uint8Array, out: StoredRegion[]): void {
    const base = this.#pos;
    const max = this.#maxLine;
    this.#pos += region.length;
    // No line of a region this short can be over-long.
    if (region.length <= max + 1) {
      out.push({ bytes: region, start: base });
      return;
    }
    let from = 0, start = 0;
    let nl = region.indexOf(NL);
    while (nl !== -1) {
      if (nl - start > max) {
        if (start > from) out.push({ bytes: region.subarray(from, start), start: base + from });
        this.#overlong(base + start);
        from = nl + 1;
      }
      start = nl + 1;
      nl = region.indexOf(NL, start);
    }
    if (start > from) out.push({ bytes: region.subarray(from, start), start: base + from });
  }
}

/**
 * The lines of a region with their end offsets, added to `out`. One decode per region: when the
 * decoded text has as many characters as bytes, every character is one byte and the text's
 * positions are byte offsets; otherwise each line is decoded on its own.
 *
 * @param region A region from {@linkcode readRegions}.
 * @param out Where the lines are added, in order.
 *
 * @example Usage
 * ```ts
 * import { linesOf, type StoredLine } from "./site_files.ts";
 * import assert from "node:assert/strict";
 *
 * const out: StoredLine[] = [];
 * linesOf({ bytes: new TextEncoder().encode("a\nbc\n"), start: 10 }, out);
 * assert.deepEqual(out, [{ text: "a", end: 12 }, { text: "bc", end: 15 }]);
 * ```
 */
export function linesOf(region: StoredRegion, out: StoredLine[]): void {
  const { bytes, start: base } = region;
  const text = decoder.decode(bytes);
  if (text.length === bytes.length) {
    let start = 0;
    let nl = text.indexOf("\n");
    while (nl !== -1) {
      out.push({ text: text.slice(start, nl), end: base + nl + 1 });
      start = nl + 1;
      nl = text.indexOf("\n", start);
    }
  } else {
    let start = 0;
    let nl = bytes.indexOf(NL);
    while (nl !== -1) {
      out.push({ text: decoder.decode(bytes.subarray(start, nl)), end: base + nl + 1 });
      start = nl + 1;
      nl = bytes.indexOf(NL, start);
    }
  }
}

/**
 * Compressed bytes handed to the decompressor at once. Deflate expands at most about 1032 times,
 * so one step yields at most about 4 MiB: fed the 64 KiB a file read gives, a gzip bomb's step
 * came out as 64 MiB at once, whatever the line bound (docs/storage.md, "Damaged files").
 */
const GZ_INPUT_STEP = 4096;

/** A stream that cuts chunks into pieces of at most `size` bytes. */
function slicer(size: number): TransformStream<Uint8Array, BufferSource> {
  return new TransformStream<Uint8Array, BufferSource>({
    transform(chunk, controller) {
      for (let at = 0; at < chunk.length; at += size) {
        controller.enqueue(chunk.subarray(at, at + size) as Uint8Array<ArrayBuffer>);
      }
    },
  });
}

/**
 * The bytes of a file as chunks: read directly, or decompressed from gzip. A plain file is read
 * from `start` (a seek: following a growing file costs what was added, not its whole size); a
 * gzip file always from its beginning.
 */
async function* fileChunks(
  file: StoredFile,
  chunkSize: number,
  start = 0,
): AsyncGenerator<Uint8Array> {
  const handle = await Deno.open(file.path, { read: true });
  if (!file.compressed && start > 0) await handle.seek(start, Deno.SeekMode.Start);
  if (file.compressed) {
    // The readable closes the handle when it ends or is cancelled.
    const reader = handle.readable.pipeThrough(slicer(GZ_INPUT_STEP))
      .pipeThrough(new DecompressionStream("gzip")).getReader();
    let total = 0;
    try {
      while (true) {
        let next: ReadableStreamReadResult<Uint8Array>;
        try {
          next = await reader.read();
        } catch (err) {
          // Not gzip, or cut short: what came before is whole, nothing after it can be read.
          if (!(err instanceof TypeError)) throw err;
          throw new DamagedFileError(file.path, total, `it is not whole gzip (${err.message})`);
        }
        const { value, done } = next;
        if (done) return;
        total += value.length;
        // Decompressed pieces can be large; text decoded from more than about 128 KiB at once
        // lands in V8's large-object space, which grew the process with the file's size.
        for (let at = 0; at < value.length; at += chunkSize) {
          yield value.subarray(at, at + chunkSize);
        }
      }
    } finally {
      await reader.cancel().catch(() => {});
      reader.releaseLock();
    }
  }
  // Two buffers in turn: the next read runs on the file system's thread while the consumer works
  // on the chunk before it. A buffer is read into again two steps later, once the consumer asked
  // for the chunk after the one it held (consumers copy what they keep: the splitter its carry).
  const bufs = [new Uint8Array(chunkSize), new Uint8Array(chunkSize)];
  let turn = 0;
  let pending: Promise<number | null> | undefined = handle.read(bufs[0]!);
  try {
    while (true) {
      const n = await pending;
      pending = undefined;
      if (n === null) return;
      const buf = bufs[turn]!;
      turn ^= 1;
      pending = handle.read(bufs[turn]!);
      yield buf.subarray(0, n);
    }
  } finally {
    // A read still under way when the reader stops: its end (or failure) is nobody's.
    if (pending) await pending.catch(() => null);
    handle.close();
  }
}

/**
 * Reads the complete lines of a stored file, plain or gzip, from a byte offset of its
 * uncompressed content, in batches (one per chunk read). Bytes after the last `\n` are not a
 * line: a torn tail, or a line the service is writing right now, which a later read from the
 * last line's `end` will see whole.
 *
 * @param file A file from {@linkcode listSiteFiles}, {@linkcode listRunFiles} or
 *   {@linkcode findStored}.
 * @param options Where to start and how much to read per step.
 * @returns Batches of lines with their end offsets.
 * @throws {OffsetMismatchError} If `offset` is past the end or not just after a `\n`.
 * @throws {DamagedFileError} Without `onDamage`: if a `.gz` file is not gzip or ends early, or
 *   a line is longer than `maxLine` (a damaged file).
 *
 * @example Usage
 * ```ts ignore
 * import { findStored, readLines } from "./site_files.ts";
 * const file = await findStored("./telemetry", "site_20260510.ndjson");
 * for await (const batch of readLines(file!, { offset: 4096 })) console.log(batch.at(-1)?.end);
 * ```
 */
export async function* readLines(
  file: StoredFile,
  options: ReadLinesOptions = {},
): AsyncGenerator<StoredLine[]> {
  for await (const regions of readRegionBatches(file, options)) {
    const out: StoredLine[] = [];
    for (const region of regions) linesOf(region, out);
    if (out.length > 0) yield out;
  }
}

/** Options of {@linkcode readRegions}: those of {@linkcode readLines}, and where to stop. */
export interface ReadRegionsOptions extends ReadLinesOptions {
  /**
   * Where to stop, in the file's uncompressed bytes: the end of a line (the byte before it a
   * `\n`); the lines that end there or before are read.
   * @default {the end of the file}
   */
  end?: number | undefined;
}

/**
 * Reads the complete lines of a stored file as their bytes, in regions of whole lines, from a
 * byte offset to another: {@linkcode readLines} for readers that look at a line's bytes before
 * (or instead of) decoding it (`GET /history?every=`, docs/history.md). A region's bytes may be
 * reused by the next step: use them before asking for the next.
 *
 * @param file A file from {@linkcode listSiteFiles}, {@linkcode listRunFiles} or
 *   {@linkcode findStored}.
 * @param options Where to start and to stop, how much to read per step, what to do with damage.
 * @returns The regions, in file order.
 * @throws {OffsetMismatchError} If `offset` or `end` is past the end or not just after a `\n`.
 * @throws {DamagedFileError} As {@linkcode readLines} does.
 *
 * @example Usage
 * ```ts ignore
 * import { findStored, readRegions } from "./site_files.ts";
 * const file = await findStored("./telemetry", "site_20260510.ndjson");
 * for await (const { bytes, start } of readRegions(file!, { offset: 4096, end: 8192 })) {
 *   console.log(start, bytes.length);
 * }
 * ```
 */
export async function* readRegions(
  file: StoredFile,
  options: ReadRegionsOptions = {},
): AsyncGenerator<StoredRegion> {
  for await (const regions of readRegionBatches(file, options)) yield* regions;
}

/** The regions of {@linkcode readRegions}, one batch per chunk read. */
async function* readRegionBatches(
  file: StoredFile,
  options: ReadRegionsOptions,
): AsyncGenerator<StoredRegion[]> {
  const offset = options.offset ?? 0;
  if (!Number.isSafeInteger(offset) || offset < 0) {
    throw new RangeError(`Cannot read ${file.path} from byte ${offset}: not a byte offset`);
  }
  const end = options.end ?? Infinity;
  if (end !== Infinity && (!Number.isSafeInteger(end) || end < offset)) {
    throw new RangeError(`Cannot read ${file.path} up to byte ${end}: not a byte offset`);
  }
  if (end === offset) return;
  const maxLine = options.maxLine ?? MAX_LINE_BYTES;
  const damaged: DamagedFileError[] = [];
  const splitter = new ByteLineSplitter(offset, maxLine, (start) => {
    damaged.push(
      new DamagedFileError(
        file.path,
        start,
        `a line longer than ${maxLine} bytes, more than the service ever writes; skipped`,
      ),
    );
  });
  // Reported after the lines before it were handed out; thrown without `onDamage`.
  const report = (damage: DamagedFileError) => {
    if (!options.onDamage) throw damage;
    options.onDamage(damage);
  };
  // A plain file seeks to the byte before the offset (which must be a line end); a gzip file
  // is decompressed from its start and the bytes before the offset skipped.
  const seekTo = file.compressed || offset === 0 ? 0 : offset - 1;
  let skip = offset - seekTo;
  let lastSkipped = NL;
  let reached = offset; // the end of the last region handed out
  try {
    for await (let chunk of fileChunks(file, options.chunkSize ?? 64 * 1024, seekTo)) {
      if (skip > 0) {
        const n = Math.min(skip, chunk.length);
        if (n > 0) lastSkipped = chunk[n - 1]!;
        skip -= n;
        chunk = chunk.subarray(n);
        if (skip > 0) continue;
        if (lastSkipped !== NL) {
          throw new OffsetMismatchError(file.path, offset, "the byte before it is not a line end");
        }
        if (chunk.length === 0) continue;
      }
      let out: StoredRegion[] = [];
      splitter.push(chunk, out);
      let done = false;
      if (end !== Infinity) {
        const kept: StoredRegion[] = [];
        for (const region of out) {
          if (region.start >= end) {
            done = true;
            break;
          }
          const stop = region.start + region.bytes.length;
          if (stop > end) {
            if (region.bytes[end - region.start - 1] !== NL) {
              throw new OffsetMismatchError(file.path, end, "the byte before it is not a line end");
            }
            kept.push({ bytes: region.bytes.subarray(0, end - region.start), start: region.start });
            done = true;
            break;
          }
          kept.push(region);
          if (stop === end) done = true;
        }
        out = kept;
      }
      const last = out.at(-1);
      if (last) reached = last.start + last.bytes.length;
      if (out.length > 0) yield out;
      for (const damage of damaged.splice(0)) report(damage);
      if (done) return;
    }
  } catch (err) {
    // A broken .gz ends the file: its lines so far were handed out, nothing after can be read.
    if (!(err instanceof DamagedFileError) || !options.onDamage || damaged.includes(err)) throw err;
    options.onDamage(err);
    return;
  }
  if (skip > 0) {
    throw new OffsetMismatchError(file.path, offset, `the file holds ${offset - skip} bytes`);
  }
  if (end !== Infinity && reached < end) {
    throw new OffsetMismatchError(file.path, end, `the file holds its lines up to byte ${reached}`);
  }
}

/**
 * A stored file for a path given directly (tests, tools).
 *
 * @param path The file's path.
 * @returns The file; `.gz` names are read as gzip.
 *
 * @example Usage
 * ```ts
 * import { storedFile } from "./site_files.ts";
 * import assert from "node:assert/strict";
 *
 * const file = storedFile("/srv/telemetry/site_20260510.ndjson.gz");
 * assert.equal(file.compressed, true);
 * assert.equal(file.night, "20260510");
 * ```
 */
export function storedFile(path: string): StoredFile {
  const name = basename(path);
  return {
    path,
    name,
    compressed: name.endsWith(GZ_SUFFIX),
    night: STORED_SITE_FILE.exec(name)?.[1],
  };
}
