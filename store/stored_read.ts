/**
 * Reading NDJSON stream files (a night's site file, a run's `telemetry.ndjson`) without writing
 * them: backwards from the end ({@linkcode readTail}, the last seq whatever the file's size),
 * forwards from a point ({@linkcode readStreamAfter}, after a checkpoint's cursor or a seq) and
 * whole ({@linkcode scanStream}, the start-up scan). Lines are peeked with `wire/ndjson.ts` and
 * read forwards with `site_files.ts`; bytes after the last `\n` (a torn tail) are never a line.
 * Damage (a `.gz` cut short, a line longer than `MAX_LINE_BYTES`) is told to the caller's `warn`
 * and passed over (docs/storage.md, "Damaged files"). `SiteStore` (`site_store.ts`) reads its
 * files through this module; it uses `Deno.*` file APIs.
 *
 * @module
 */

import { readSeqAndType } from "../wire/ndjson.ts";
import { DamagedFileError, MAX_LINE_BYTES, readLines, storedFile } from "./site_files.ts";
import { GZ_SUFFIX } from "./layout.ts";
import { readAt } from "./fs.ts";

/**
 * The lines of a compressed (`.gz`) stream file from its start, with their end offsets in its
 * uncompressed bytes. A gzip file cannot be read backwards, so a compressed file (an old night,
 * or a file compressed while the service was down) is read forwards whole.
 */
async function* gzLines(
  path: string,
  warn: Warn | undefined,
): AsyncGenerator<{ text: string; end: number }> {
  yield* forwardLines(path, 0, warn);
}

/**
 * Told about damage in a stored file (an over-long line, a broken `.gz`), after which reading
 * goes on (docs/storage.md); without it the damage is thrown as a `DamagedFileError`.
 */
export type Warn = (message: string) => void;

/** Reports an over-long line met reading backwards, as `readLines` reports one forwards. */
function overlongWarn(path: string, warn: Warn | undefined): (lineEnd: number) => void {
  return (lineEnd) => {
    const damage = new DamagedFileError(
      path,
      lineEnd,
      `the line ending there is longer than ${MAX_LINE_BYTES} bytes, more than the service ever writes; skipped`,
    );
    if (!warn) throw damage;
    warn(damageMessage(damage));
  };
}

/** What a reader says about damage it skipped. */
function damageMessage(damage: DamagedFileError): string {
  return `${damage.message}; what can be read of it is read (docs/storage.md, "Damaged files").`;
}

/** The complete lines of a file, plain or gzip, from a line's start, reading forwards. */
async function* forwardLines(
  path: string,
  offset: number,
  warn: Warn | undefined,
): AsyncGenerator<{ text: string; end: number }> {
  const onDamage = warn && ((damage: DamagedFileError) => warn(damageMessage(damage)));
  try {
    for await (const batch of readLines(storedFile(path), { offset, onDamage })) yield* batch;
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

/**
 * Told about every line after the point, in order, by {@linkcode readStreamAfter} (the start-up
 * replay of the safety latch judges each one, not only the latest of each type).
 */
export type EachLine = (type: string, line: string) => void;

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

/**
 * Bytes of a file gathered backwards: `[pos, pos + length)` lies at the end of a buffer that
 * grows by doubling (never past what one line may take), so a long line costs linear time.
 */
class BackWindow {
  #store = new Uint8Array(0);
  #from = 0;
  #to = 0;
  pos: number;

  constructor(end: number) {
    this.pos = end;
  }

  get bytes(): Uint8Array {
    return this.#store.subarray(this.#from, this.#to);
  }

  /** Keeps only the first `length` bytes. */
  cut(length: number): void {
    this.#to = this.#from + length;
  }

  /** Drops everything, moving to `pos`. */
  reset(pos: number): void {
    this.#from = this.#to = 0;
    this.#store = new Uint8Array(0);
    this.pos = pos;
  }

  /** Reads the `step` bytes before `pos` in front of what is held. */
  async prepend(file: Deno.FsFile, step: number): Promise<void> {
    const length = this.#to - this.#from;
    if (this.#from < step) {
      const cap = Math.min(
        Math.max(2 * length, length + step, 2 * BACK_CHUNK),
        MAX_LINE_BYTES + 2 + 2 * BACK_CHUNK,
      );
      const store = new Uint8Array(Math.max(cap, length + step));
      store.set(this.bytes, store.length - length);
      this.#store = store;
      this.#to = store.length;
      this.#from = store.length - length;
    }
    const into = this.#store.subarray(this.#from - step, this.#from);
    const got = await readAt(file, this.pos - step, step);
    into.set(got);
    this.#from -= step;
    this.pos -= step;
  }
}

/**
 * The complete lines of `[0, end)` from the last to the first, reading 64 KiB steps from the end,
 * so the cost is what the caller consumes, not the file's size. Bytes after the last `\n` (a
 * torn tail) are no line. A line longer than {@linkcode MAX_LINE_BYTES} is never gathered: it is
 * reported to `overlong` (its end offset) and passed over.
 */
async function* linesBackward(
  file: Deno.FsFile,
  end: number,
  overlong: (lineEnd: number) => void = () => {},
): AsyncGenerator<BackLine> {
  const win = new BackWindow(end); // holds [win.pos, win.pos + bytes.length)
  let terminated = false; // the window ends with the "\n" of the next line to hand out
  // The window's first bytes not yet searched for "\n": the rest is known to hold none, so a
  // long line is searched once, not once per step.
  let unsearched = 0;
  while (true) {
    const buf = win.bytes;
    if (buf.length > MAX_LINE_BYTES + 1) {
      // No "\n" in more bytes than a line may hold: drop them and find where the line began.
      if (terminated) overlong(win.pos + buf.length);
      let found = false;
      let pos = win.pos;
      while (pos > 0 && !found) {
        const step = Math.min(BACK_CHUNK, pos);
        const chunk = await readAt(file, pos - step, step);
        pos -= step;
        const nl = chunk.lastIndexOf(NL);
        if (nl >= 0) {
          found = true;
          // Just after the "\n" that ends the line before: the next step finds it again.
          win.reset(pos + nl + 1);
          terminated = false;
          unsearched = 0;
        }
      }
      if (!found) return;
      continue;
    }
    const searchEnd = terminated ? buf.length - 1 : buf.length;
    const nl = buf.subarray(0, Math.min(searchEnd, unsearched)).lastIndexOf(NL);
    unsearched = Math.max(nl, 0); // [0, nl) is still to search; after a miss, nothing is
    if (!terminated) {
      if (nl >= 0) {
        win.cut(nl + 1);
        terminated = true;
        continue;
      }
    } else if (nl >= 0) {
      yield {
        text: decoder.decode(buf.subarray(nl + 1, buf.length - 1)),
        start: win.pos + nl + 1,
        end: win.pos + buf.length,
      };
      win.cut(nl + 1);
      continue;
    }
    if (win.pos === 0) {
      if (terminated && buf.length > 0) {
        yield { text: decoder.decode(buf.subarray(0, buf.length - 1)), start: 0, end: buf.length };
      }
      return;
    }
    const step = Math.min(BACK_CHUNK, win.pos);
    await win.prepend(file, step);
    unsearched += step;
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
 * @param warn Told about damage, which is then passed over (default: thrown).
 * @returns Its size, last seq and whether its tail is torn.
 */
export async function readTail(path: string, size?: number, warn?: Warn): Promise<FileTail> {
  if (isGz(path)) {
    const tail: FileTail = { size: 0, lastSeq: 0, torn: false };
    for await (const line of gzLines(path, warn)) {
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
    for await (const line of linesBackward(file, end, overlongWarn(path, warn))) {
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
 * @param warn Told about damage, which is then passed over (default: thrown).
 * @param each Told about every line after the point, in order.
 * @returns The latest line per type after the point, or `undefined` when the cursor does not
 *   match the file (shorter than the offset, no `\n` before it, another seq on the line before
 *   it): the file was truncated or replaced.
 */
export async function readStreamAfter(
  path: string,
  after: StreamCursor | { afterSeq: number },
  warn?: Warn,
  each?: EachLine,
): Promise<StreamTail | undefined> {
  const result: StreamTail = { latest: new Map(), count: 0, bytes: 0 };
  if (isGz(path)) return await readGzAfter(path, after, result, warn, each);
  const overlong = overlongWarn(path, warn);
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
        const before = await linesBackward(file, after.offset, overlong).next();
        if (before.done || before.value.end !== after.offset) return undefined;
        if (readSeqAndType(before.value.text)?.seq !== after.seq) return undefined;
      } else if (after.seq !== 0) return undefined;
      start = after.offset;
      afterSeq = after.seq;
    } else {
      afterSeq = after.afterSeq;
      for await (const line of linesBackward(file, size, overlong)) {
        const seq = readSeqAndType(line.text)?.seq;
        if (seq !== undefined && seq <= afterSeq) break;
        start = line.start;
      }
    }
    if (start >= size) return result;
    // Only complete lines count: a torn tail was recovered before.
    for await (const { text, end } of forwardLines(path, start, warn)) {
      result.bytes = end - start;
      const parsed = text.length > 0 ? readSeqAndType(text) : undefined;
      if (parsed === undefined || parsed.seq <= afterSeq) continue;
      result.count++;
      result.latest.delete(parsed.type);
      result.latest.set(parsed.type, { seq: parsed.seq, line: text });
      each?.(parsed.type, text);
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
 * @param warn Told about damage, which is then passed over (default: thrown).
 * @returns The scan result.
 */
export async function scanStream(
  path: string,
  countAfter = Infinity,
  warn?: Warn,
): Promise<StreamScan> {
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
  // The snapshot keeps lines exactly as stored, so a "\r" stays part of its line. A final line
  // without "\n" is a torn tail: callers recover it before scanning, and it is never a line.
  for await (const line of forwardLines(path, 0, warn)) handle(line.text);
  return result;
}

/** {@linkcode readStreamAfter} for a compressed file: read forwards from its start. */
async function readGzAfter(
  path: string,
  after: StreamCursor | { afterSeq: number },
  result: StreamTail,
  warn: Warn | undefined,
  each: EachLine | undefined,
): Promise<StreamTail | undefined> {
  const cursor = "offset" in after ? after : undefined;
  const afterSeq = cursor ? cursor.seq : (after as { afterSeq: number }).afterSeq;
  // A cursor's offset counts uncompressed bytes, so it holds across compression; check it.
  let matched = cursor === undefined || (cursor.offset === 0 && cursor.seq === 0);
  for await (const line of gzLines(path, warn)) {
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
    each?.(parsed.type, line.text);
  }
  return matched ? result : undefined;
}
