/**
 * The merge path of a migration: the inputs read together, in order of written date, each output
 * day sorted and written as soon as every input has moved past it, with nothing spilled. Legacy
 * collections are appended in time order, so this is the usual way (docs/migration.md).
 *
 * @module
 */

import { join } from "node:path";
import { writeFull } from "../store/writer.ts";
import { LineSplitter } from "../wire/ndjson.ts";
import {
  type Converter,
  ENCODE_CHARS,
  type FileState,
  fileState,
  flushPending,
} from "./convert.ts";
import { type InputFile, openInput } from "./discover.ts";
import { type MigrateInputSummary, REJECTS_FILE } from "./types.ts";
import type { NightSeqs } from "./seq_base.ts";
import { type DayBuffers, type Syncer, writeSorted } from "./write.ts";

const encoder = new TextEncoder();

/**
 * Inputs merged at most: each holds an open file and up to one read of decoded lines. A store
 * with more collections takes the spill path.
 *
 * @example Usage
 * ```ts
 * import { MERGE_MAX_INPUTS } from "./input_merge.ts";
 * import assert from "node:assert/strict";
 *
 * assert.equal(MERGE_MAX_INPUTS, 64);
 * ```
 */
export const MERGE_MAX_INPUTS = 64;
/**
 * Bytes read from a merged input at a time, at most. The lines of a read wait until the merge
 * reaches their day; small reads let them die young instead of being promoted to V8's old
 * generation, which kept peak RSS 60 MiB higher with 1 MiB reads.
 *
 * @example Usage
 * ```ts
 * import { MERGE_READ_BYTES } from "./input_merge.ts";
 * import assert from "node:assert/strict";
 *
 * assert.equal(MERGE_READ_BYTES, 65_536);
 * ```
 */
export const MERGE_READ_BYTES = 64 << 10;

/**
 * One day's converted lines in input order (sorted file path, then line number), encoded as they
 * come: a rope of tails is encoded every {@linkcode ENCODE_CHARS} code units into a buffer reused
 * from day to day, so the tails die young instead of piling up in V8's old generation.
 */
interface DayText {
  text: string;
  bytes: Uint8Array;
  length: number;
  lines: number;
}

function appendToDay(day: DayText, tail: string): void {
  day.text += tail;
  day.lines++;
  if (day.text.length >= ENCODE_CHARS) encodeDay(day);
}

function encodeDay(day: DayText): Uint8Array {
  // encodeInto writes at most 3 bytes per UTF-16 code unit.
  const need = day.length + day.text.length * 3;
  if (day.bytes.length < need) {
    const grown = new Uint8Array(Math.ceil(need * 1.25));
    grown.set(day.bytes.subarray(0, day.length));
    day.bytes = grown;
  }
  day.length += encoder.encodeInto(day.text, day.bytes.subarray(day.length)).written;
  day.text = "";
  return day.bytes.subarray(0, day.length);
}

/** What the inputs of a merge are read with. */
export interface MergeContext {
  /** Converts every input's lines. */
  readonly conv: Converter;
  /** Bytes each input reads at a time. */
  readonly readBytes: number;
  /** Called after every read. */
  readonly progress: () => void;
  /** Aborts between reads and days. */
  readonly signal: AbortSignal | undefined;
  /** Numbers the days' lines, one sequence across nights (docs/migration.md). */
  readonly seqs: NightSeqs;
}

/**
 * One input of the merge: its lines of the last read, converted on demand, and its next record
 * (the head). The next read is always under way while the last one is converted, so the merge
 * rarely waits for the disk. The file is closed as soon as it is read to the end.
 */
class InputReader {
  readonly input: InputFile;
  readonly state: FileState;
  /** Where this input's rejects were spilled, if they outgrew the buffer. */
  readonly rejectsPart: string;
  rejectsSpilled = false;
  hasHead = false;
  day = "";
  #tail = "";
  #file: Deno.FsFile | undefined;
  #buffer = new Uint8Array(0);
  #reading: Promise<number | null> | undefined;
  #splitter = new LineSplitter();
  #lines: string[] = [];
  #pos = 0;
  #firstLineNo = 1;
  #onLine = (line: string) => {
    this.#lines.push(line);
  };

  constructor(input: InputFile, index: number, tmp: string) {
    this.input = input;
    this.state = fileState(input, { text: "", chunks: [] });
    this.rejectsPart = join(tmp, `rejects-${index}.part`);
  }

  async open(ctx: MergeContext): Promise<void> {
    this.#file = await openInput(this.input);
    this.#buffer = new Uint8Array(ctx.readBytes);
    this.#read();
  }

  /** Closes the file once its read under way, if any, has ended. */
  async close(): Promise<void> {
    const reading = this.#reading;
    this.#reading = undefined;
    await reading?.catch(() => {});
    this.#file?.close();
    this.#file = undefined;
  }

  #read(): void {
    const reading = (this.#file as Deno.FsFile).read(this.#buffer);
    // Awaited by #fill or close; until then a failure must not count as unhandled.
    reading.catch(() => {});
    this.#reading = reading;
  }

  /** Moves to the next record, reading as needed; `hasHead` is false at the end. */
  async next(ctx: MergeContext): Promise<void> {
    ctx.conv.select(this.state);
    while (!this.#advance(ctx.conv)) {
      if (this.#file === undefined) {
        this.hasHead = false;
        return;
      }
      await this.#fill(ctx);
    }
  }

  /** Moves every record of `day` from here on into `out`, up to the first of another day. */
  async take(day: string, out: DayText, ctx: MergeContext): Promise<void> {
    const conv = ctx.conv;
    conv.select(this.state);
    while (this.hasHead && this.day === day) {
      appendToDay(out, this.#tail);
      if (!this.#advance(conv)) await this.next(ctx);
    }
  }

  // Converts the lines already read up to the next record; false when they ran out first.
  #advance(conv: Converter): boolean {
    const lines = this.#lines;
    while (this.#pos < lines.length) {
      const i = this.#pos++;
      if (conv.line(lines[i] as string, this.#firstLineNo + i)) {
        this.hasHead = true;
        this.day = conv.day;
        this.#tail = conv.tail;
        return true;
      }
    }
    return false;
  }

  async #fill(ctx: MergeContext): Promise<void> {
    ctx.signal?.throwIfAborted();
    this.#lines.length = 0;
    this.#pos = 0;
    this.#firstLineNo = this.#splitter.lines + 1;
    const n = await this.#reading;
    this.#reading = undefined;
    if (n === null || n === undefined) {
      await this.close();
      this.#splitter.end(this.#onLine);
      return;
    }
    ctx.conv.bytesRead += n;
    // The splitter decodes (copies) the bytes, so the buffer is free for the next read.
    this.#splitter.push(this.#buffer.subarray(0, n), this.#onLine);
    this.#read();
    ctx.progress();
  }
}

function smallestDay(readers: readonly InputReader[]): string | undefined {
  let day: string | undefined;
  for (const r of readers) if (r.hasHead && (day === undefined || r.day < day)) day = r.day;
  return day;
}

/** Appends each reader's buffered rejects to its part file. */
async function spillRejects(readers: readonly InputReader[]): Promise<void> {
  for (const r of readers) {
    const pending = r.state.rejects;
    if (pending.text === "" && pending.chunks.length === 0) continue;
    r.rejectsSpilled = true;
    await flushPending(pending, r.rejectsPart);
  }
}

/** Builds the rejects file from every reader's part file and buffer, in input order. */
async function writeRejects(tmp: string, readers: readonly InputReader[]): Promise<void> {
  const out = await Deno.open(join(tmp, REJECTS_FILE), { append: true });
  try {
    const buffer = new Uint8Array(1 << 20);
    for (const r of readers) {
      if (r.rejectsSpilled) {
        const part = await Deno.open(r.rejectsPart, { read: true });
        try {
          for (let n = await part.read(buffer); n !== null; n = await part.read(buffer)) {
            await writeFull(out, buffer.subarray(0, n));
          }
        } finally {
          part.close();
        }
        await Deno.remove(r.rejectsPart);
      }
      const { text, chunks } = r.state.rejects;
      for (const chunk of chunks) await writeFull(out, chunk);
      if (text !== "") await writeFull(out, encoder.encode(text));
    }
  } finally {
    out.close();
  }
}

/** What the merge read and wrote. */
export interface MergeResult {
  /** A summary per input, in input order. */
  readonly inputs: MigrateInputSummary[];
  /** Records per collection name. */
  readonly collections: Map<string, number>;
  /** Lines of each day written, by written date. */
  readonly days: Map<string, number>;
}

/**
 * Reads every input together, in order of written date: takes the smallest date any input is
 * at, moves every input's records of that date (in input order) into one day, and writes it,
 * with no spill. Returns `undefined`, having written the days it could, as soon as an input goes
 * back to a day before the last one written (whether that day was written or not: its seqs
 * would come after a later night's, docs/migration.md): the caller then starts over on the
 * spill path.
 *
 * @param inputs The input files, in order.
 * @param ctx What they are read with.
 * @param tmp The temporary directory the days and the rejects file are written into.
 * @param bufferBytes Code units of rejected lines held before they are spilled.
 * @param syncer fdatasyncs the days written.
 * @returns What was read and written, or `undefined` to start over.
 *
 * @example Usage
 * ```ts ignore
 * import { mergeAll, MERGE_READ_BYTES } from "./input_merge.ts";
 * import { Converter } from "./convert.ts";
 * import { NightSeqs } from "./seq_base.ts";
 * import { Syncer } from "./write.ts";
 *
 * const conv = new Converter(true);
 * const ctx = {
 *   conv,
 *   readBytes: MERGE_READ_BYTES,
 *   progress: () => {},
 *   signal: undefined,
 *   seqs: new NightSeqs({ seq: 0, mark: 0, nights: new Map() }, false),
 * };
 * const merged = await mergeAll(inputs, ctx, tmp, 4 << 20, new Syncer(4));
 * ```
 */
export async function mergeAll(
  inputs: readonly InputFile[],
  ctx: MergeContext,
  tmp: string,
  bufferBytes: number,
  syncer: Syncer,
): Promise<MergeResult | undefined> {
  const readers = inputs.map((input, index) => new InputReader(input, index, tmp));
  const days = new Map<string, number>();
  const day: DayText = { text: "", bytes: new Uint8Array(0), length: 0, lines: 0 };
  const buffers: DayBuffers = { input: new Uint8Array(0), output: new Uint8Array(0) };
  try {
    for (const r of readers) await r.open(ctx);
    for (const r of readers) await r.next(ctx);
    let last = "";
    for (let date = smallestDay(readers); date !== undefined; date = smallestDay(readers)) {
      // The smallest date only goes down when an input goes back (YYYY-MM-DD sorts as a string).
      if (date <= last) return undefined;
      last = date;
      for (const r of readers) await r.take(date, day, ctx);
      ctx.signal?.throwIfAborted();
      const file = await writeSorted(tmp, date, encodeDay(day), buffers, ctx.seqs);
      if (file !== undefined) await syncer.add(file);
      days.set(date, day.lines);
      day.length = day.lines = 0;
      if (ctx.conv.pending >= bufferBytes) {
        await spillRejects(readers);
        ctx.conv.pending = 0;
      }
    }
  } finally {
    for (const r of readers) await r.close();
  }
  await writeRejects(tmp, readers);
  const collections = new Map<string, number>();
  const summaries = readers.map(({ input, state }) => {
    const c = state.counts;
    collections.set(input.collection, (collections.get(input.collection) ?? 0) + c.records);
    return { path: input.rel, collection: input.collection, bytes: input.bytes, ...c };
  });
  return { inputs: summaries, collections, days };
}
