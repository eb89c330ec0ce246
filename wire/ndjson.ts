/**
 * THE NDJSON line of a stream file, in one place: how a line is built (`{"seq":N` head, then
 * `,"ts":"…","type":…,"data":…,"meta":…}`), how `run_id` is stamped into `meta`, how seq and type
 * are peeked from a line without parsing all of it, and how text or bytes are split into lines.
 * Ingest (`core/service.ts`), the start-up scan (`store/stored_read.ts`), request bodies (`http/problems.ts`) and the
 * migrator (`migrate.ts`) all use it.
 *
 * Web APIs only (no `Deno.*`, no `node:`): Deno, Node and browsers can import it.
 *
 * @module
 */

/** Every line starts with this; the seq's digits follow it, then the line's tail. */
export const LINE_HEAD = '{"seq":';

const TAIL_TS = ',"ts":"';

/**
 * Where the 24-character `ts` starts in a tail built by {@linkcode buildTail}, for readers that
 * sort tails by time without parsing them.
 */
export const TAIL_TS_OFFSET: number = TAIL_TS.length;

/**
 * Builds the part of a line after its seq: `,"ts":"…","type":…,"data":…,"meta":…}`. Built once
 * per event and shared by its run and site copies, which differ only in their seq.
 *
 * Four positional strings rather than an options object: this runs once per event on ingest and
 * once per record in the migrator, and an object argument measured about 15 % slower there.
 *
 * @param ts The timestamp, `YYYY-MM-DDTHH:MM:SS.mmmZ` (24 characters), unquoted.
 * @param typeJson The type as JSON, quotes included, for example `'"weather"'`.
 * @param dataJson The `data` object as JSON.
 * @param metaJson The `meta` object as JSON.
 * @returns The tail, without a trailing newline.
 *
 * @example Usage
 * ```ts
 * import { buildTail } from "./ndjson.ts";
 * import assert from "node:assert/strict";
 *
 * const tail = buildTail("2026-11-22T03:00:00.000Z", '"status"', "{}", "{}");
 * assert.equal(tail, ',"ts":"2026-11-22T03:00:00.000Z","type":"status","data":{},"meta":{}}');
 * ```
 */
export function buildTail(
  ts: string,
  typeJson: string,
  dataJson: string,
  metaJson: string,
): string {
  return `${TAIL_TS}${ts}","type":${typeJson},"data":${dataJson},"meta":${metaJson}}`;
}

const TS_LENGTH = 24;
const TAIL_TYPE = '","type":';

/**
 * What follows the type in a line {@linkcode buildTail} builds: the `data` key, then the data
 * object. For readers that take a line apart without parsing all of it (`core/bucket_scan.ts`).
 *
 * @example Usage
 * ```ts
 * import { buildTail, DATA_KEY } from "./ndjson.ts";
 * import assert from "node:assert/strict";
 *
 * assert.ok(buildTail("2026-11-22T03:00:00.000Z", '"a"', "{}", "{}").includes(`"a"${DATA_KEY}{}`));
 * ```
 */
export const DATA_KEY = ',"data":';

/**
 * What follows the data object in a line {@linkcode buildTail} builds: the `meta` key, then the
 * meta object and the line's closing `}`.
 *
 * @example Usage
 * ```ts
 * import { buildTail, META_KEY } from "./ndjson.ts";
 * import assert from "node:assert/strict";
 *
 * assert.ok(buildTail("2026-11-22T03:00:00.000Z", '"a"', "{}", "{}").endsWith(`{}${META_KEY}{}}`));
 * ```
 */
export const META_KEY = ',"meta":';

/**
 * Where the type starts in a line in the form {@linkcode buildLine} writes
 * (`{"seq":N,"ts":"<24 characters>","type":…`), found without parsing it: the fast path of readers
 * that pick lines by type and time. The `ts` is the 24 characters that end 9 before it.
 *
 * @param line One line, without its newline.
 * @returns The index of the type's opening quote, or -1 when the line is not in that form.
 *
 * @example Usage
 * ```ts
 * import { canonicalTypeAt } from "./ndjson.ts";
 * import assert from "node:assert/strict";
 *
 * const line = '{"seq":7,"ts":"2026-11-22T03:00:00.000Z","type":"status","data":{},"meta":{}}';
 * const at = canonicalTypeAt(line);
 * assert.ok(line.startsWith('"status"', at));
 * assert.equal(line.slice(at - 33, at - 9), "2026-11-22T03:00:00.000Z");
 * assert.equal(canonicalTypeAt('{"type":"status","seq":7}'), -1);
 * ```
 */
export function canonicalTypeAt(line: string): number {
  const tsKey = line.startsWith(LINE_HEAD) ? line.indexOf(TAIL_TS, LINE_HEAD.length) : -1;
  const typeKey = tsKey + TAIL_TS.length + TS_LENGTH;
  return tsKey > LINE_HEAD.length && tsKey < 24 && line.startsWith(TAIL_TYPE, typeKey)
    ? typeKey + TAIL_TYPE.length
    : -1;
}

/**
 * Builds a whole line from its seq and a tail from {@linkcode buildTail}.
 *
 * @param seq The seq of the line's stream.
 * @param tail The rest of the line.
 * @returns The line, without a trailing newline.
 *
 * @example Usage
 * ```ts
 * import { buildLine } from "./ndjson.ts";
 * import assert from "node:assert/strict";
 *
 * assert.equal(buildLine(7, ',"ts":"…"}'), '{"seq":7,"ts":"…"}');
 * ```
 */
export function buildLine(seq: number, tail: string): string {
  return `${LINE_HEAD}${seq}${tail}`;
}

/**
 * Stamps a run id into a serialised `meta` object, as its last field.
 *
 * @param metaJson The `meta` object as JSON, without a `run_id` field.
 * @param runId The active run's id.
 * @returns The `meta` object with `"run_id"` added.
 *
 * @example Usage
 * ```ts
 * import { withRunId } from "./ndjson.ts";
 * import assert from "node:assert/strict";
 *
 * assert.equal(withRunId("{}", "001"), '{"run_id":"001"}');
 * assert.equal(withRunId('{"a":1}', "001"), '{"a":1,"run_id":"001"}');
 * ```
 */
export function withRunId(metaJson: string, runId: string): string {
  const field = `"run_id":${JSON.stringify(runId)}`;
  return metaJson === "{}" ? `{${field}}` : `${metaJson.slice(0, -1)},${field}}`;
}

/** The seq and type of a line, from {@linkcode peekSeqAndType} or {@linkcode readSeqAndType}. */
export interface SeqAndType {
  /** The line's seq. */
  seq: number;
  /** The line's event type. */
  type: string;
}

// The head of a line as buildLine() writes it, up to the opening quote of the type.
const CANONICAL_HEAD = /^\{"seq":(\d+),"ts":"[^"]{24}","type":"/;
const BACKSLASH = 0x5c;
const QUOTE = 0x22;

/**
 * Reads seq and type from a line in the form {@linkcode buildLine} writes, without parsing the
 * rest of it: the fast path of the start-up scan.
 *
 * @param line One line, without its newline.
 * @returns Seq and type, or `undefined` if the line is not in the canonical form.
 *
 * @example Usage
 * ```ts
 * import { peekSeqAndType } from "./ndjson.ts";
 * import assert from "node:assert/strict";
 *
 * const line = '{"seq":7,"ts":"2026-11-22T03:00:00.000Z","type":"status","data":{},"meta":{}}';
 * assert.deepEqual(peekSeqAndType(line), { seq: 7, type: "status" });
 * assert.equal(peekSeqAndType('{"type":"status","seq":7}'), undefined);
 * ```
 */
export function peekSeqAndType(line: string): SeqAndType | undefined {
  const m = CANONICAL_HEAD.exec(line);
  if (m === null || !line.endsWith("}")) return undefined;
  const typeStart = m[0].length - 1;
  let i = typeStart + 1;
  while (i < line.length) {
    const c = line.charCodeAt(i);
    if (c === BACKSLASH) i += 2;
    else if (c === QUOTE) break;
    else i++;
  }
  try {
    return { seq: Number(m[1]), type: JSON.parse(line.slice(typeStart, i + 1)) as string };
  } catch {
    return undefined;
  }
}

/**
 * Reads seq and type from any line: {@linkcode peekSeqAndType} for canonical lines, a full
 * parse for anything else (a hand-edited file, fields in another order).
 *
 * @param line One line, without its newline.
 * @returns Seq and type, or `undefined` if the line is not a JSON object with a safe-integer
 * `seq` and a string `type`.
 *
 * @example Usage
 * ```ts
 * import { readSeqAndType } from "./ndjson.ts";
 * import assert from "node:assert/strict";
 *
 * assert.deepEqual(readSeqAndType('{"type":"status","seq":7}'), { seq: 7, type: "status" });
 * assert.equal(readSeqAndType("not json"), undefined);
 * ```
 */
export function readSeqAndType(line: string): SeqAndType | undefined {
  const peeked = peekSeqAndType(line);
  if (peeked !== undefined) return peeked;
  try {
    const value = JSON.parse(line);
    if (
      typeof value === "object" && value !== null && Number.isSafeInteger(value.seq) &&
      typeof value.type === "string"
    ) {
      return { seq: value.seq, type: value.type };
    }
  } catch {
    // not JSON: no seq, no type
  }
  return undefined;
}

/** Options of {@linkcode LineSplitter} and {@linkcode LineSplitStream}. */
export interface LineSplitterOptions {
  /**
   * Whether a `"\r"` before `"\n"` is part of the line break (`true`) or of the line (`false`,
   * for readers that must see a line's bytes exactly as stored).
   * @default {true}
   */
  crlf?: boolean | undefined;
  /**
   * The longest line, in characters, that is gathered; a longer one is never held whole: its
   * characters are dropped as they come and `onOverlong` is told its number. For readers of
   * input that may be hostile (a file without a newline in a gigabyte).
   * @default {Infinity}
   */
  maxLine?: number | undefined;
  /** Told the number of each line longer than `maxLine`, which is skipped. */
  onOverlong?: ((lineNo: number) => void) | undefined;
}

/** Receives each line (without its line break) and its 1-based number. */
export type LineHandler = (line: string, lineNo: number) => void;

const CR = 13;

/**
 * Splits text or UTF-8 bytes, fed in chunks of any size, into lines ended by `"\n"`. Chunks may
 * end anywhere, also inside a multi-byte character or between `"\r"` and `"\n"`. Synchronous and
 * callback-based, for hot loops; {@linkcode LineSplitStream} wraps it as a `TransformStream`.
 *
 * Bytes are decoded leniently (an invalid byte becomes U+FFFD) and a leading byte order mark is
 * dropped, as `TextDecoder` does by default.
 *
 * @example Usage
 * ```ts
 * import { LineSplitter } from "./ndjson.ts";
 * import assert from "node:assert/strict";
 *
 * const lines: string[] = [];
 * const splitter = new LineSplitter();
 * splitter.push("a\nb", (line) => lines.push(line));
 * splitter.push("c\r\nd", (line) => lines.push(line));
 * splitter.end((line) => lines.push(line));
 * assert.deepEqual(lines, ["a", "bc", "d"]);
 * ```
 */
export class LineSplitter {
  #crlf: boolean;
  #decoder: TextDecoder | undefined;
  // Pieces of a line begun in earlier chunks: joined once when its "\n" arrives, so a very long
  // line costs linear time and only the new chunk is ever searched.
  #carry: string[] = [];
  #carryLength = 0;
  #lines = 0;
  #maxLine: number;
  #onOverlong: (lineNo: number) => void;
  /** Inside an over-long line: dropped up to its "\n". */
  #skipping = false;

  /**
   * Creates a splitter.
   *
   * @param options Whether `"\r\n"` counts as a line break.
   */
  constructor(options: LineSplitterOptions = {}) {
    this.#crlf = options.crlf ?? true;
    this.#maxLine = options.maxLine ?? Infinity;
    this.#onOverlong = options.onOverlong ?? (() => {});
  }

  /** Lines handed out so far: the number of the last one. */
  get lines(): number {
    return this.#lines;
  }

  /**
   * Feeds a chunk and hands out every line it completes.
   *
   * @param chunk Text, or UTF-8 bytes.
   * @param onLine Called for each complete line, in order.
   */
  push(chunk: Uint8Array | string, onLine: LineHandler): void {
    const text = typeof chunk === "string"
      ? chunk
      : (this.#decoder ??= new TextDecoder()).decode(chunk, { stream: true });
    const crlf = this.#crlf;
    let start = 0;
    let nl = text.indexOf("\n");
    while (nl !== -1) {
      if (this.#skipping || this.#carryLength + nl - start > this.#maxLine) {
        // The end of an over-long line: told once, never handed out.
        if (!this.#skipping) this.#onOverlong(this.#lines + 1);
        this.#skipping = false;
        this.#carry = [];
        this.#carryLength = 0;
        this.#lines++;
        start = nl + 1;
        nl = text.indexOf("\n", start);
        continue;
      }
      let line = text.slice(start, nl);
      if (this.#carry.length > 0) {
        this.#carry.push(line);
        line = this.#carry.join("");
        this.#carry = [];
        this.#carryLength = 0;
      }
      if (crlf && line.charCodeAt(line.length - 1) === CR) line = line.slice(0, -1);
      onLine(line, ++this.#lines);
      start = nl + 1;
      nl = text.indexOf("\n", start);
    }
    if (start < text.length && !this.#skipping) {
      this.#carry.push(text.slice(start));
      this.#carryLength += text.length - start;
      if (this.#carryLength > this.#maxLine) {
        this.#onOverlong(this.#lines + 1);
        this.#skipping = true;
        this.#carry = [];
        this.#carryLength = 0;
      }
    }
  }

  /**
   * Ends the input: hands out the last line if it has no `"\n"`. Readers of files that may have
   * a torn tail simply never call it.
   *
   * @param onLine Called once for a non-empty last line, not at all otherwise.
   */
  end(onLine: LineHandler): void {
    const rest = this.#decoder?.decode() ?? "";
    if (this.#skipping) {
      this.#skipping = false;
      this.#lines++;
      return;
    }
    if (rest !== "") this.#carry.push(rest);
    let line = this.#carry.join("");
    this.#carry = [];
    this.#carryLength = 0;
    if (line.length > this.#maxLine) {
      this.#onOverlong(++this.#lines);
      return;
    }
    if (line === "") return;
    if (this.#crlf && line.charCodeAt(line.length - 1) === CR) line = line.slice(0, -1);
    onLine(line, ++this.#lines);
  }
}

/**
 * A `TransformStream` from text or UTF-8 bytes to lines, built on {@linkcode LineSplitter}:
 * yields each line without its line break, and a last line that has no `"\n"`.
 *
 * @example Usage
 * ```ts
 * import { LineSplitStream } from "./ndjson.ts";
 * import assert from "node:assert/strict";
 *
 * const lines = await Array.fromAsync(
 *   ReadableStream.from(["a\nb", "c\r\n"]).pipeThrough(new LineSplitStream()),
 * );
 * assert.deepEqual(lines, ["a", "bc"]);
 * ```
 */
export class LineSplitStream extends TransformStream<Uint8Array | string, string> {
  /**
   * Creates the stream.
   *
   * @param options Whether `"\r\n"` counts as a line break.
   */
  constructor(options: LineSplitterOptions = {}) {
    const splitter = new LineSplitter(options);
    super({
      transform(chunk, controller) {
        splitter.push(chunk, (line) => controller.enqueue(line));
      },
      flush(controller) {
        splitter.end((line) => controller.enqueue(line));
      },
    });
  }
}

const CANONICAL_TS = /^\{"seq":\d+,"ts":"([^"\\]{1,40})"/;

/**
 * Reads `ts` from a line without parsing the rest of it when the line is canonical (seq, then
 * ts), with a full parse for anything else: freshness and `/metrics` need only the time.
 *
 * @param line One line, without its newline.
 * @returns The `ts` text, or `undefined` if the line has no string `ts`.
 *
 * @example Usage
 * ```ts
 * import { readTs } from "./ndjson.ts";
 * import assert from "node:assert/strict";
 *
 * const line = '{"seq":7,"ts":"2026-11-22T03:00:00.000Z","type":"status","data":{},"meta":{}}';
 * assert.equal(readTs(line), "2026-11-22T03:00:00.000Z");
 * assert.equal(readTs('{"ts":"2026-11-22T03:00:00.000Z","seq":7}'), "2026-11-22T03:00:00.000Z");
 * assert.equal(readTs("not json"), undefined);
 * ```
 */
export function readTs(line: string): string | undefined {
  const m = CANONICAL_TS.exec(line);
  if (m) return m[1];
  try {
    const value = JSON.parse(line) as { ts?: unknown } | null;
    return typeof value?.ts === "string" ? value.ts : undefined;
  } catch {
    return undefined;
  }
}
