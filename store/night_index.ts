/**
 * The time index of a night's site file (docs/storage.md, "Time index"): `.site_YYYYMMDD.idx.json`
 * beside `site_YYYYMMDD.ndjson`, the file cut into blocks of about {@linkcode INDEX_STEP} bytes
 * (each starts at a line), each with the earliest and the latest `ts` of its lines. A range read
 * ({@linkcode readNightRange}) reads only the blocks that may hold the range, and whatever the
 * file holds past the index, so the last hour of a night costs what it returns, not the night.
 * `ts` need not grow through the file (a caller's own `ts`, a clock stepped back): a block is read
 * whenever its earliest and latest `ts` do not rule it out.
 *
 * The index is built the first time a night is read whole (closed or still being written), kept,
 * and extended when a read finds the file grown by more than an eighth. It is a cache, never
 * trusted blindly: it is used only when its own checksum holds, it names this file (the same
 * inode and device), the file is at least as long as the index covers, the file has not changed
 * in place (the same size and modification time, or longer), and the last bytes it covers hash as
 * recorded. Anything else (a truncated, stale, hand-edited or garbage index file) is ignored and
 * the night read whole, then indexed again: a wrong index costs speed, never a line of an answer.
 * It is written only where the reader may write (`--allow-write` granted, no prompt), through a
 * temporary file renamed into place and without fsync; deleting it is always safe.
 *
 * @module
 */

import { basename, dirname, join } from "node:path";
import { formatTimestamp, isJsonObject } from "../wire/event.ts";
import { canonicalTypeAt, LINE_HEAD } from "../wire/ndjson.ts";
import {
  type DamagedFileError,
  OffsetMismatchError,
  readRegions,
  type StoredFile,
  type StoredRegion,
} from "./site_files.ts";
import { readAt } from "./fs.ts";

/** Bytes per block of the index (a block ends at the first line end past it). */
export const INDEX_STEP = 32 * 1024;
/** The version of the index file's form. */
const VERSION = 1;
/** Bytes before the end of what the index covers whose hash it records. */
const TAIL_BYTES = 4096;
/** A file grown by more than this fraction of what the index covers has its index written again. */
const REWRITE_FRACTION = 1 / 8;

/** One block: its start offset, and the earliest and latest `ts` of its lines (`""`: none). */
type Block = [start: number, min: string, max: string];

/** The index file's content. */
interface IndexFile {
  v: number;
  /** The night file's name. */
  file: string;
  /** The end of the last complete line covered. */
  size: number;
  /** The file's size, modification time, inode and device when the index was written. */
  fileSize: number;
  mtimeMs: number | null;
  ino: number | null;
  dev: number | null;
  step: number;
  blocks: Block[];
  /** The hash of the `TAIL_BYTES` before `size`. */
  tail: string;
  /** The hash of all of the above. */
  sum: string;
}

/** A night's index as a reader uses it, checked against the file. */
export interface NightIndex {
  /** The end of the last complete line covered: the file is read whole from here on. */
  size: number;
  /** The blocks: start offset, earliest and latest `ts`. */
  blocks: readonly (readonly [number, string, string])[];
}

/**
 * The path of the index of a plain night file: `.site_YYYYMMDD.idx.json` beside it.
 *
 * @param night The night key `YYYYMMDD`.
 * @param dir The directory of the night's file.
 * @returns The path.
 *
 * @example Usage
 * ```ts
 * import { nightIndexPath } from "./night_index.ts";
 * import assert from "node:assert/strict";
 *
 * assert.equal(nightIndexPath("20261206", "/srv/telemetry"), "/srv/telemetry/.site_20261206.idx.json");
 * ```
 */
export function nightIndexPath(night: string, dir: string): string {
  return join(dir, `.site_${night}.idx.json`);
}

/** The names of index files (and their temporary files) and the night each belongs to. */
export const NIGHT_INDEX_FILE: RegExp = /^\.site_(\d{8})\.idx\.json(?:\.tmp-[0-9a-f-]+)?$/;

/** FNV-1a, 32 bits, of bytes, as 8 hex digits. */
function fnv(bytes: Uint8Array): string {
  let h = 0x811c9dc5;
  for (let i = 0; i < bytes.length; i++) {
    h ^= bytes[i]!;
    h = Math.imul(h, 0x01000193);
  }
  return (h >>> 0).toString(16).padStart(8, "0");
}

const encoder = new TextEncoder();
const decoder = new TextDecoder("utf-8", { ignoreBOM: true });

function sumOf(index: Omit<IndexFile, "sum">): string {
  const { v, file, size, fileSize, mtimeMs, ino, dev, step, blocks, tail } = index;
  return fnv(
    encoder.encode(
      JSON.stringify([v, file, size, fileSize, mtimeMs, ino, dev, step, blocks, tail]),
    ),
  );
}

/** Reads `length` bytes of the file at `path` at `position` (fewer where the file ends). */
async function readPathAt(path: string, position: number, length: number): Promise<Uint8Array> {
  using file = await Deno.open(path, { read: true });
  return await readAt(file, position, length);
}

async function tailHash(path: string, size: number): Promise<string | undefined> {
  const from = Math.max(0, size - TAIL_BYTES);
  const bytes = await readPathAt(path, from, size - from);
  if (bytes.length !== size - from || (size > 0 && bytes[bytes.length - 1] !== 0x0a)) {
    return undefined;
  }
  return fnv(bytes);
}

/** Whether a parsed index file has the form written, and its checksum holds. */
function wellFormed(value: unknown, name: string): value is IndexFile {
  if (!isJsonObject(value)) return false;
  const v = value as Partial<IndexFile>;
  const nat = (n: unknown) => Number.isSafeInteger(n) && (n as number) >= 0;
  const orNull = (n: unknown) => n === null || typeof n === "number";
  if (
    v.v !== VERSION || v.file !== name || !nat(v.size) || !nat(v.fileSize) || !nat(v.step) ||
    !orNull(v.mtimeMs) || !orNull(v.ino) || !orNull(v.dev) || typeof v.tail !== "string" ||
    typeof v.sum !== "string" || !Array.isArray(v.blocks)
  ) return false;
  let last = -1;
  for (const block of v.blocks) {
    if (
      !Array.isArray(block) || block.length !== 3 || !nat(block[0]) || block[0] <= last ||
      block[0] >= v.size! || typeof block[1] !== "string" || typeof block[2] !== "string" ||
      (block[1] === "") !== (block[2] === "") || block[1] > block[2]
    ) return false;
    last = block[0];
  }
  if (v.size! > 0 && (v.blocks.length === 0 || v.blocks[0]![0] !== 0)) return false;
  return sumOf(v as IndexFile) === v.sum;
}

/**
 * The index of a plain night file, when its file is there, well formed and still matches the
 * night file; otherwise `undefined` (the night is then read whole).
 *
 * @param file The night's plain site file.
 * @returns The checked index, or `undefined`.
 *
 * @example Usage
 * ```ts ignore
 * import { readNightIndex } from "./night_index.ts";
 * import { storedFile } from "./site_files.ts";
 * console.log(await readNightIndex(storedFile("./telemetry/site_20261206.ndjson")));
 * ```
 */
export async function readNightIndex(file: StoredFile): Promise<NightIndex | undefined> {
  const loaded = await loadIndex(file);
  return loaded && { size: loaded.size, blocks: loaded.blocks };
}

/**
 * Indexes checked in this process, by night file, with the state of the night file and of the
 * index file they were checked against: both in exactly that state again (the same inode, device,
 * size and time) need no second check. A few nights only: an entry is dropped when the file changes or past the bound.
 */
const checked = new Map<string, { state: string; index: IndexFile }>();
const CHECKED_MAX = 16;

function stateOf(info: Deno.FileInfo): string {
  return `${info.ino}:${info.dev}:${info.size}:${info.mtime?.getTime()}`;
}

/** {@linkcode loadIndex}, or an index checked before against the file in the state `info`. */
async function checkedIndex(file: StoredFile, info: Deno.FileInfo): Promise<IndexFile | undefined> {
  // The index file's own state too: one deleted, edited or written again is read again.
  const indexPath = nightIndexPath(file.night!, dirname(file.path));
  const state = stateOf(info) + "/" + await Deno.lstat(indexPath).then(stateOf, () => "none");
  const memo = checked.get(file.path);
  if (memo?.state === state) return memo.index;
  const index = await loadIndex(file);
  checked.delete(file.path);
  const now = (await Deno.lstat(file.path).then(stateOf, () => "")) + "/" +
    await Deno.lstat(indexPath).then(stateOf, () => "none");
  if (index !== undefined && now === state) {
    if (checked.size >= CHECKED_MAX) checked.delete(checked.keys().next().value!);
    checked.set(file.path, { state, index });
  }
  return index;
}

async function loadIndex(file: StoredFile): Promise<IndexFile | undefined> {
  if (file.compressed || file.night === undefined) return undefined;
  let value: unknown;
  try {
    value = JSON.parse(await Deno.readTextFile(nightIndexPath(file.night, dirname(file.path))));
  } catch {
    return undefined; // none, unreadable, or not JSON: read whole, index again
  }
  if (!wellFormed(value, file.name)) return undefined;
  let info: Deno.FileInfo;
  try {
    info = await Deno.lstat(file.path);
  } catch {
    return undefined;
  }
  if (!info.isFile || info.size < value.size) return undefined;
  if (value.ino !== null && info.ino !== null && value.ino !== info.ino) return undefined;
  if (value.dev !== null && info.dev !== null && value.dev !== info.dev) return undefined;
  // Changed in place (the same size, another time) or cut shorter than when it was indexed.
  const mtimeMs = info.mtime?.getTime() ?? null;
  if (info.size < value.fileSize || (info.size === value.fileSize && mtimeMs !== value.mtimeMs)) {
    return undefined;
  }
  try {
    if (await tailHash(file.path, value.size) !== value.tail) return undefined;
  } catch {
    return undefined;
  }
  return value;
}

/** Whether writing `path` is granted without asking. */
function mayWrite(path: string): boolean {
  try {
    return Deno.permissions.querySync({ name: "write", path }).state === "granted";
  } catch {
    return false;
  }
}

/** Writes an index file: a temporary file renamed into place, no fsync (a cache). */
async function writeIndex(path: string, index: IndexFile): Promise<void> {
  if (!mayWrite(dirname(path))) return;
  const tmp = `${path}.tmp-${crypto.randomUUID()}`;
  try {
    await Deno.writeTextFile(tmp, JSON.stringify(index) + "\n", { createNew: true });
    await Deno.rename(tmp, path);
  } catch {
    await Deno.remove(tmp).catch(() => {}); // a full disk, a read-only directory: no index
  }
}

const HEAD = encoder.encode(LINE_HEAD);
const TS_KEY = encoder.encode(',"ts":"');
const TYPE_KEY = encoder.encode('","type":');

/**
 * The `ts` text a range read compares for a line, as `store/history.ts` tests it: the 24
 * characters of a canonical line's `ts` as they stand, else the parsed line's `ts` written
 * canonically, or `undefined` for a line no range keeps (not an event).
 *
 * @param line One stored line.
 * @returns The `ts` text, or `undefined`.
 *
 * @example Usage
 * ```ts
 * import { lineTsKey } from "./night_index.ts";
 * import assert from "node:assert/strict";
 *
 * assert.equal(lineTsKey('{"type":"a","ts":"2026-05-10T05:00:00+02:00","seq":1}'), "2026-05-10T03:00:00.000Z");
 * assert.equal(lineTsKey("not json"), undefined);
 * ```
 */
export function lineTsKey(line: string): string | undefined {
  const typeAt = canonicalTypeAt(line);
  if (typeAt > 0) return line.slice(typeAt - 33, typeAt - 9);
  let value: unknown;
  try {
    value = JSON.parse(line);
  } catch {
    return undefined;
  }
  if (!isJsonObject(value) || typeof value.ts !== "string" || typeof value.type !== "string") {
    return undefined;
  }
  const ms = Date.parse(value.ts);
  return Number.isNaN(ms) ? undefined : formatTimestamp(ms);
}

/**
 * Where a line's `ts` stands when its head is in the canonical layout in ASCII (then its bytes
 * are its text), or -1: the line is then decoded and read by {@linkcode lineTsKey}.
 */
function asciiTsAt(b: Uint8Array, s: number, e: number): number {
  if (e - s < HEAD.length + 1 + TS_KEY.length + 24 + TYPE_KEY.length) return -1;
  for (let i = 0; i < HEAD.length; i++) if (b[s + i] !== HEAD[i]) return -1;
  // canonicalTypeAt(): the first `,"ts":"` after the head, before the 24th character.
  for (let k = s + HEAD.length + 1; k < s + 24; k++) {
    const c = b[k - 1]!;
    if (c > 0x7f) return -1;
    let found = true;
    for (let i = 0; i < TS_KEY.length && found; i++) found = b[k + i] === TS_KEY[i];
    if (!found) continue;
    const at = k + TS_KEY.length;
    for (let i = 0; i < 24; i++) if (b[at + i]! > 0x7f) return -1;
    for (let i = 0; i < TYPE_KEY.length; i++) if (b[at + 24 + i] !== TYPE_KEY[i]) return -1;
    return at;
  }
  return -1;
}

/** Builds the blocks of a file from its regions, read in order from a block's start. */
class IndexBuilder {
  blocks: Block[];
  /** The end of the last complete line fed. */
  end: number;
  #blockStart: number;

  constructor(blocks: Block[], end: number) {
    this.blocks = blocks;
    this.end = end;
    this.#blockStart = blocks.at(-1)?.[0] ?? 0;
  }

  feed({ bytes, start: base }: StoredRegion): void {
    let block = this.blocks.at(-1);
    // The earliest and latest `ts` of the block met in this region, by where they stand: made
    // text once per block and region, not once per line.
    let minAt = -1, maxAt = -1;
    const flush = () => {
      if (block === undefined) return;
      if (minAt >= 0) {
        const min = String.fromCharCode(...bytes.subarray(minAt, minAt + 24));
        if (block[1] === "" || min < block[1]) block[1] = min;
      }
      if (maxAt >= 0) {
        const max = String.fromCharCode(...bytes.subarray(maxAt, maxAt + 24));
        if (block[2] === "" || max > block[2]) block[2] = max;
      }
      minAt = maxAt = -1;
    };
    let s = 0;
    while (s < bytes.length) {
      const e = bytes.indexOf(0x0a, s);
      if (e < 0) break;
      const start = base + s;
      if (block === undefined || start - this.#blockStart >= INDEX_STEP) {
        flush();
        block = [start, "", ""];
        this.blocks.push(block);
        this.#blockStart = start;
      }
      const at = asciiTsAt(bytes, s, e);
      if (at >= 0) {
        if (minAt < 0 || compareBytes(bytes, at, minAt) < 0) minAt = at;
        if (maxAt < 0 || compareBytes(bytes, at, maxAt) > 0) maxAt = at;
      } else if (e > s) {
        const key = lineTsKey(decoder.decode(bytes.subarray(s, e)));
        if (key !== undefined) {
          if (block[1] === "" || key < block[1]) block[1] = key;
          if (block[2] === "" || key > block[2]) block[2] = key;
        }
      }
      s = e + 1;
      this.end = base + s;
    }
    flush();
  }
}

/** The 24 bytes at `a` against the 24 at `b` of the same bytes, as their texts compare. */
function compareBytes(bytes: Uint8Array, a: number, b: number): number {
  for (let i = 0; i < 24; i++) {
    const d = bytes[a + i]! - bytes[b + i]!;
    if (d !== 0) return d;
  }
  return 0;
}

/** Writes the index of what a builder covers, with the file's state from `info`. */
async function saveIndex(file: StoredFile, builder: IndexBuilder, info: Deno.FileInfo) {
  const size = builder.end;
  // An empty file, or one grown past what was read since: indexed on a later read.
  if (size === 0 || info.size < size) return;
  let tail: string | undefined;
  try {
    tail = await tailHash(file.path, size);
  } catch {
    return;
  }
  if (tail === undefined) return;
  const index: Omit<IndexFile, "sum"> = {
    v: VERSION,
    file: file.name,
    size,
    fileSize: info.size,
    mtimeMs: info.mtime?.getTime() ?? null,
    ino: info.ino,
    dev: info.dev,
    step: INDEX_STEP,
    blocks: builder.blocks,
    tail,
  };
  await writeIndex(nightIndexPath(file.night!, dirname(file.path)), {
    ...index,
    sum: sumOf(index),
  });
}

/** Options of {@linkcode readNightRange}. */
export interface NightRangeOptions {
  /** As `readRegions()`'s: told about damage, which is then passed over. */
  onDamage?: ((damage: DamagedFileError) => void) | undefined;
  /** As `readRegions()`'s: bytes read per step. */
  chunkSize?: number | undefined;
}

/**
 * Reads the regions of a site file that may hold lines with `since <= ts < until`: through the
 * night's time index for a plain night file that has a valid one (the blocks it cannot rule out,
 * then everything past it), else the whole file, which is then indexed. Every line of the range
 * is in what it yields, with other lines around it: the caller still tests each line.
 *
 * @param file A site file from `listSiteFiles()` (a `.gz` or a run's file is read whole).
 * @param since The earliest `ts` text kept, or `""`.
 * @param until The `ts` text kept lines are before, or `undefined`.
 * @param options Damage and the size of a read.
 * @returns The regions, in file order.
 *
 * @example Usage
 * ```ts ignore
 * import { readNightRange } from "./night_index.ts";
 * import { storedFile } from "./site_files.ts";
 * const file = storedFile("./telemetry/site_20261206.ndjson");
 * for await (const { bytes } of readNightRange(file, "2026-12-07T03:00:00.000Z", undefined)) {
 *   console.log(bytes.length);
 * }
 * ```
 */
export async function* readNightRange(
  file: StoredFile,
  since: string,
  until: string | undefined,
  options: NightRangeOptions = {},
): AsyncGenerator<StoredRegion> {
  const read = { onDamage: options.onDamage, chunkSize: options.chunkSize ?? 64 * 1024 };
  if (file.compressed || file.night === undefined || (since === "" && until === undefined)) {
    yield* readRegions(file, read);
    return;
  }
  let info: Deno.FileInfo;
  try {
    info = await Deno.lstat(file.path);
  } catch (err) {
    if (err instanceof Deno.errors.NotFound) return;
    throw err;
  }
  const index = await checkedIndex(file, info);
  const spans = index && await spansOf(file, index, since, until);
  if (index === undefined || spans === undefined) {
    // Read whole, and indexed on the way when it was read to its end (by a reader that may
    // write the index: else the work would be lost).
    const builder = mayWrite(dirname(file.path)) ? new IndexBuilder([], 0) : undefined;
    for await (const region of readRegions(file, read)) {
      builder?.feed(region);
      yield region;
    }
    if (builder) await saveIndex(file, builder, info);
    return;
  }
  try {
    for (const [start, end] of spans) {
      if (end === index.size) break; // read on into the part past the index
      yield* readRegions(file, { ...read, offset: start, end });
    }
    const last = spans.at(-1);
    const from = last !== undefined && last[1] === index.size ? last[0] : index.size;
    const grown = info.size - index.size > index.size * REWRITE_FRACTION &&
      mayWrite(dirname(file.path));
    const builder = grown
      ? new IndexBuilder(index.blocks.map((b) => [...b] as Block), index.size)
      : undefined;
    for await (const region of readRegions(file, { ...read, offset: from })) {
      if (builder && region.start + region.bytes.length > index.size) {
        const skip = Math.max(0, index.size - region.start);
        builder.feed({ bytes: region.bytes.subarray(skip), start: region.start + skip });
      }
      yield region;
    }
    if (builder) await saveIndex(file, builder, info);
  } catch (err) {
    // Cut shorter while being read: it ends where it was cut, as a file read whole would.
    if (!(err instanceof OffsetMismatchError)) throw err;
  }
}

/**
 * The blocks of an index that may hold the range, as spans of bytes, each checked to begin and
 * end at a line end of the file; `undefined` when one does not (the index does not fit the file).
 */
async function spansOf(
  file: StoredFile,
  index: IndexFile,
  since: string,
  until: string | undefined,
): Promise<[number, number][] | undefined> {
  const spans: [number, number][] = [];
  index.blocks.forEach(([start, min, max], i) => {
    if (min === "" || max < since || (until !== undefined && min >= until)) return;
    const end = index.blocks[i + 1]?.[0] ?? index.size;
    const last = spans.at(-1);
    if (last && last[1] === start) last[1] = end;
    else spans.push([start, end]);
  });
  try {
    for (const edge of new Set(spans.flat())) {
      if (edge === 0) continue;
      const before = await readPathAt(file.path, edge - 1, 1);
      if (before[0] !== 0x0a) return undefined;
    }
  } catch {
    return undefined;
  }
  return spans;
}

/**
 * Removes the index of a night (its plain file was compressed or deleted by retention); a
 * missing one is no error.
 *
 * @param dir The site directory.
 * @param night The night key `YYYYMMDD`.
 *
 * @example Usage
 * ```ts ignore
 * import { removeNightIndex } from "./night_index.ts";
 * await removeNightIndex("./telemetry", "20261206");
 * ```
 */
export async function removeNightIndex(dir: string, night: string): Promise<void> {
  await Deno.remove(nightIndexPath(night, dir)).catch((err) => {
    if (!(err instanceof Deno.errors.NotFound)) throw err;
  });
}

/**
 * The night of an index file's name (or of its temporary file), or `undefined`.
 *
 * @param name A file name.
 * @returns The night key, or `undefined` for any other name.
 *
 * @example Usage
 * ```ts
 * import { nightOfIndexFile } from "./night_index.ts";
 * import assert from "node:assert/strict";
 *
 * assert.equal(nightOfIndexFile(".site_20261206.idx.json"), "20261206");
 * assert.equal(nightOfIndexFile("site_20261206.ndjson"), undefined);
 * ```
 */
export function nightOfIndexFile(name: string): string | undefined {
  return NIGHT_INDEX_FILE.exec(basename(name))?.[1];
}
