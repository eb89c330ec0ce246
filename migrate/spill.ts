/**
 * The spill path of a migration: every input read in turn, its converted lines spilled to one
 * file per output day in the temporary directory, then each day sorted and written from there.
 * Slower than merging the inputs by date, and the same output (docs/migration.md).
 *
 * @module
 */

import { join } from "node:path";
import { LineSplitter } from "../wire/ndjson.ts";
import {
  type Converter,
  type FileCounts,
  fileState,
  flushPending,
  type PendingText,
} from "./convert.ts";
import { type InputFile, openInput } from "./discover.ts";
import {
  type MigrateFileSummary,
  type MigrateInputSummary,
  REJECTS_FILE,
  type Report,
  type Settings,
} from "./types.ts";
import type { NightSeqs } from "./seq_base.ts";
import { type DayBuffers, fileSummary, Syncer, syncFile, writeSorted } from "./write.ts";

/** One output day's converted lines on their way to its spill file. */
export interface Bucket extends PendingText {
  /** `YYYY-MM-DD` as written in the records' `date`. */
  readonly date: string;
  /** Records of the day so far. */
  lines: number;
}

/**
 * Groups converted lines by written date and spills them to `spill-YYYY-MM-DD.ndjson` files (or
 * only counts, in a dry run). Used when the inputs cannot be merged by date: a dry run, too many
 * inputs to keep open together, or dates that go back to a day before the last one written.
 *
 * @example A converted line lands in its written date's bucket
 * ```ts
 * import { DaySpill } from "./spill.ts";
 * import { Converter } from "./convert.ts";
 * import assert from "node:assert/strict";
 *
 * const spill = new DaySpill(new Converter(false), undefined, 1 << 20);
 * spill.startFile({ abs: "/db/w.json", rel: "w.json", collection: "w", bytes: 0 });
 * spill.line('{"date":"2026-03-05 22:10:00"}', 1);
 * assert.equal(spill.buckets.get("2026-03-05")?.lines, 1);
 * ```
 */
export class DaySpill {
  readonly buckets: Map<string, Bucket> = new Map();
  readonly conv: Converter;
  #spillDir: string | undefined;
  #budget: number;
  #rejects: PendingText = { text: "", chunks: [] };
  #lastDate = "";
  #lastBucket: Bucket | undefined;

  /**
   * Creates the day spill of one migration.
   *
   * @param conv Converts the lines; builds tails only when `spillDir` is set.
   * @param spillDir Where to spill converted lines; `undefined` to count only (dry run).
   * @param budget UTF-16 code units of converted text held before a flush is due.
   */
  constructor(conv: Converter, spillDir: string | undefined, budget: number) {
    this.conv = conv;
    this.#spillDir = spillDir;
    this.#budget = budget;
  }

  /** Whether enough converted text is held to flush it. */
  get flushDue(): boolean {
    return this.conv.pending >= this.#budget;
  }

  /** Appends every day's pending text to its spill file, and the rejects to theirs. */
  async flush(): Promise<void> {
    const dir = this.#spillDir;
    if (dir === undefined) return;
    for (const bucket of this.buckets.values()) {
      await flushPending(bucket, spillPath(dir, bucket.date));
    }
    await flushPending(this.#rejects, join(dir, REJECTS_FILE));
    this.conv.pending = 0;
  }

  /**
   * Starts on the lines of another input file.
   *
   * @param input The file.
   * @returns Its counts, updated as its lines come.
   */
  startFile(input: InputFile): FileCounts {
    const file = fileState(input, this.#rejects);
    this.conv.select(file);
    return file.counts;
  }

  /**
   * Converts one line of the current file into its day's bucket.
   *
   * @param text The line without its newline.
   * @param lineNo Its 1-based number in the file.
   */
  line(text: string, lineNo: number): void {
    const conv = this.conv;
    if (!conv.line(text, lineNo)) return;
    const bucket = this.#bucket(conv.day);
    bucket.lines++;
    if (conv.build) conv.append(bucket, conv.tail);
  }

  /** The bucket of a written date, `YYYY-MM-DD`; consecutive records mostly share one. */
  #bucket(key: string): Bucket {
    let bucket = this.#lastBucket;
    if (key !== this.#lastDate || bucket === undefined) {
      bucket = this.buckets.get(key);
      if (bucket === undefined) {
        bucket = { date: key, lines: 0, text: "", chunks: [] };
        this.buckets.set(key, bucket);
      }
      this.#lastDate = key;
      this.#lastBucket = bucket;
    }
    return bucket;
  }
}

function spillPath(dir: string, date: string): string {
  return join(dir, `spill-${date}.ndjson`);
}

interface ReadContext {
  readonly spill: DaySpill;
  readonly buffer: Uint8Array;
  readonly progress: () => void;
  readonly signal: AbortSignal | undefined;
}

async function readInput(input: InputFile, ctx: ReadContext): Promise<FileCounts> {
  const { spill, buffer } = ctx;
  const counts = spill.startFile(input);
  const file = await openInput(input);
  try {
    // Non-fatal decoding: the legacy writer emitted ASCII-only JSON (Python's ensure_ascii), so a
    // stray invalid byte can only sit in a line that is broken anyway.
    const splitter = new LineSplitter();
    const onLine = (line: string, lineNo: number) => spill.line(line, lineNo);
    while (true) {
      ctx.signal?.throwIfAborted();
      const n = await file.read(buffer);
      if (n === null) break;
      spill.conv.bytesRead += n;
      splitter.push(buffer.subarray(0, n), onLine);
      if (spill.flushDue) await spill.flush();
      ctx.progress();
    }
    splitter.end(onLine);
  } finally {
    file.close();
  }
  return counts;
}

/**
 * The spill path's pass 1 over every input; returns what each contributed.
 *
 * @param inputs The input files, in order.
 * @param spill Converts and spills their lines.
 * @param settings The run's settings (read size, abort signal).
 * @param report Told of the progress after every read.
 * @returns A summary per input, and records per collection.
 *
 * @example Reading every input into the spill
 * ```ts ignore
 * import { DaySpill, readAll } from "./spill.ts";
 *
 * const { inputs: summaries } = await readAll(inputs, spill, settings, () => {});
 * ```
 */
export async function readAll(
  inputs: readonly InputFile[],
  spill: DaySpill,
  settings: Settings,
  report: Report,
): Promise<{ inputs: MigrateInputSummary[]; collections: Map<string, number> }> {
  const ctx: ReadContext = {
    spill,
    buffer: new Uint8Array(settings.chunkBytes),
    progress: () => report("read", 0, 0),
    signal: settings.signal,
  };
  const summaries: MigrateInputSummary[] = [];
  const collections = new Map<string, number>();
  for (const input of inputs) {
    const counts = await readInput(input, ctx);
    summaries.push({
      path: input.rel,
      collection: input.collection,
      bytes: input.bytes,
      ...counts,
    });
    collections.set(input.collection, (collections.get(input.collection) ?? 0) + counts.records);
  }
  await spill.flush();
  return { inputs: summaries, collections };
}

/**
 * The site files to write, one per written date, both sorted.
 *
 * @param spill What was read.
 * @param dst The destination directory.
 * @returns The dates and their files, in the same order.
 *
 * @example One site file per written date
 * ```ts
 * import { DaySpill, planFiles } from "./spill.ts";
 * import { Converter } from "./convert.ts";
 * import assert from "node:assert/strict";
 *
 * const spill = new DaySpill(new Converter(false), undefined, 1 << 20);
 * spill.startFile({ abs: "/db/w.json", rel: "w.json", collection: "w", bytes: 0 });
 * spill.line('{"date":"2026-03-05 22:10:00"}', 1);
 * assert.deepEqual(planFiles(spill, "/dst").dates, ["2026-03-05"]);
 * ```
 */
export function planFiles(
  spill: DaySpill,
  dst: string,
): { dates: string[]; files: MigrateFileSummary[] } {
  const dates = [...spill.buckets.keys()].sort();
  const lines = new Map(dates.map((date) => [date, (spill.buckets.get(date) as Bucket).lines]));
  return { dates, files: dates.map((date) => fileSummary(dst, date, lines)) };
}

async function readInto(path: string, buffers: DayBuffers): Promise<Uint8Array> {
  const file = await Deno.open(path, { read: true });
  try {
    const size = (await file.stat()).size;
    if (buffers.input.length < size) buffers.input = new Uint8Array(Math.ceil(size * 1.25));
    const bytes = buffers.input.subarray(0, size);
    let done = 0;
    while (done < size) {
      const n = await file.read(bytes.subarray(done));
      if (n === null) throw new Error(`Cannot read "${path}": it shrank while being read`);
      done += n;
    }
    return bytes;
  } finally {
    file.close();
  }
}

/**
 * Sorts and writes one day from its spill file (see {@linkcode writeSorted}), then removes it.
 * Returns nothing for a night left as stored.
 */
async function writeDay(
  tmp: string,
  date: string,
  buffers: DayBuffers,
  seqs: NightSeqs,
): Promise<Deno.FsFile | undefined> {
  const spill = spillPath(tmp, date);
  const file = await writeSorted(tmp, date, await readInto(spill, buffers), buffers, seqs);
  await Deno.remove(spill);
  return file;
}

/**
 * Pass 2: sorts and writes every day into `workDir`, fdatasyncing in the background.
 *
 * @param workDir The temporary directory holding the spill files.
 * @param dates The days, sorted.
 * @param signal Aborts between days.
 * @param report Told of each day written.
 * @param seqs Numbers the days' lines, one sequence across nights (docs/migration.md).
 *
 * @example Usage
 * ```ts ignore
 * import { planFiles, writeDays } from "./spill.ts";
 * import { NightSeqs } from "./seq_base.ts";
 *
 * const seqs = new NightSeqs({ seq: 0, mark: 0, nights: new Map() }, false);
 * await writeDays(tmp, planFiles(spill, "/dst").dates, undefined, () => {}, seqs);
 * ```
 */
export async function writeDays(
  workDir: string,
  dates: readonly string[],
  signal: AbortSignal | undefined,
  report: Report,
  seqs: NightSeqs,
): Promise<void> {
  const syncer = new Syncer(4);
  const buffers: DayBuffers = { input: new Uint8Array(0), output: new Uint8Array(0) };
  try {
    for (let i = 0; i < dates.length; i++) {
      signal?.throwIfAborted();
      const file = await writeDay(workDir, dates[i] as string, buffers, seqs);
      if (file !== undefined) await syncer.add(file);
      report("write", i + 1, dates.length);
    }
  } catch (err) {
    // The first failure is the one to report; the files are closed either way.
    await syncer.drain().catch(() => {});
    throw err;
  }
  await syncer.drain();
  await syncFile(join(workDir, REJECTS_FILE));
}
