/**
 * Reading NDJSON stream files (a night's site file, a run's `telemetry.ndjson`) without writing
 * them: backwards from the end ({@linkcode readTail}, the last seq whatever the file's size),
 * forwards from a point ({@linkcode readStreamAfter}, after a checkpoint's cursor or a seq) and
 * whole ({@linkcode scanStream}, the start-up scan). Lines are split and peeked with `wire/ndjson.ts`;
 * bytes after the last `\n` (a torn tail) are never a line. `SiteStore` (`site_store.ts`) reads its
 * files through this module; it uses `Deno.*` file APIs.
 *
 * @module
 */

import { LineSplitter, readSeqAndType } from "../wire/ndjson.ts";
import { readLines, storedFile } from "./site_files.ts";
import { GZ_SUFFIX } from "./layout.ts";

/**
 * The lines of a compressed (`.gz`) stream file from its start, with their end offsets in its
 * uncompressed bytes. A gzip file cannot be read backwards, so a compressed file (an old night,
 * or a file compressed while the service was down) is read forwards whole.
 */
async function* gzLines(path: string): AsyncGenerator<{ text: string; end: number }> {
  try {
    for await (const batch of readLines(storedFile(path))) yield* batch;
  } catch (err) {
    if (err instanceof Deno.errors.NotFound) return;
    throw err;
  }
}

function isGz(path: string): boolean {
  return path.endsWith(GZ_SUFFIX);
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

/** Reads `length` bytes at `position`, fewer only where the file ends. */
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
  if (isGz(path)) {
    const tail: FileTail = { size: 0, lastSeq: 0, torn: false };
    for await (const line of gzLines(path)) {
      tail.size = line.end;
      tail.lastSeq = readSeqAndType(line.text)?.seq ?? tail.lastSeq;
    }
    return tail;
  }
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
  if (isGz(path)) return await readGzAfter(path, after, result);
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
  if (isGz(path)) {
    for await (const line of gzLines(path)) handle(line.text);
    return result;
  }
  let file: Deno.FsFile;
  try {
    file = await Deno.open(path, { read: true });
  } catch (err) {
    if (err instanceof Deno.errors.NotFound) return result;
    throw err;
  }
  // The snapshot keeps lines exactly as stored, so a "\r" stays part of its line.
  const splitter = new LineSplitter({ crlf: false });
  for await (const chunk of file.readable) splitter.push(chunk, handle);
  // A final line without "\n" is a torn tail: callers recover it before scanning, and the
  // splitter's end() is not called, so it is never handed out.
  return result;
}

/** {@linkcode readStreamAfter} for a compressed file: read forwards from its start. */
async function readGzAfter(
  path: string,
  after: StreamCursor | { afterSeq: number },
  result: StreamTail,
): Promise<StreamTail | undefined> {
  const cursor = "offset" in after ? after : undefined;
  const afterSeq = cursor ? cursor.seq : (after as { afterSeq: number }).afterSeq;
  // A cursor's offset counts uncompressed bytes, so it holds across compression; check it.
  let matched = cursor === undefined || (cursor.offset === 0 && cursor.seq === 0);
  for await (const line of gzLines(path)) {
    const parsed = line.text.length > 0 ? readSeqAndType(line.text) : undefined;
    if (cursor && line.end <= cursor.offset) {
      if (line.end === cursor.offset) matched = parsed?.seq === cursor.seq;
      continue;
    }
    if (!matched) return undefined;
    result.bytes += line.text.length + 1;
    if (parsed === undefined || parsed.seq <= afterSeq) continue;
    result.count++;
    result.latest.delete(parsed.type);
    result.latest.set(parsed.type, { seq: parsed.seq, line: line.text });
  }
  return matched ? result : undefined;
}
