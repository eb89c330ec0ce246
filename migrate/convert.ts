/**
 * Converting legacy lines into the tails of site file lines (docs/migration.md): each line is
 * parsed, its date and type checked, and it becomes a record of one output day or a reject.
 *
 * @module
 */

import { buildTail } from "../wire/ndjson.ts";
import {
  checkEventType,
  describe,
  RESERVED_TYPE_PREFIX,
  reservedTypeProblem,
} from "../wire/event.ts";
import { DEFAULT_BODY_BYTES, valueProblem } from "../wire/event_value.ts";
import { writeFull } from "../store/writer.ts";
import type { DayKeyer } from "../store/day_key.ts";
import { clip } from "./errors.ts";
import { convertDate } from "./legacy_date.ts";
import type { InputFile } from "./discover.ts";
import { MIGRATED_FROM, type MigrateReject, REJECT_SAMPLES } from "./types.ts";

// `meta` of a migrated line up to the value of `original_id`; a closing brace follows it.
const META_HEAD = `{"migrated_from":${JSON.stringify(MIGRATED_FROM)},"original_id":`;

const TYPE_CACHE_LIMIT = 10_000;

const encoder = new TextEncoder();

/**
 * Converted lines on their way to one file. Lines are joined into a short rope and encoded
 * every {@linkcode ENCODE_CHARS} code units: encoding a long rope once is several times cheaper
 * than encoding each line, and short-lived ropes die young instead of growing V8's old
 * generation (which would show as resident memory).
 */
export interface PendingText {
  /** The rope not yet encoded. */
  text: string;
  /** Encoded text not yet written. */
  chunks: Uint8Array[];
}

/**
 * UTF-16 code units a rope of converted lines grows to before it is encoded.
 *
 * @example Usage
 * ```ts
 * import { ENCODE_CHARS } from "./convert.ts";
 * import assert from "node:assert/strict";
 *
 * assert.equal(ENCODE_CHARS, 65_536);
 * ```
 */
export const ENCODE_CHARS = 1 << 16;

/** What one input file contributed so far. */
export interface FileCounts {
  /** Lines read, blank and rejected ones included. */
  lines: number;
  /** Records converted. */
  records: number;
  /** Lines rejected. */
  rejects: number;
  /** Blank lines skipped. */
  blankLines: number;
}

/** A type's JSON text when the service accepts it, else why not. */
export type TypeVerdict = string | { readonly reason: string };

/** What the lines of one input file are converted with, and where its counts and rejects go. */
export interface FileState {
  /** Path relative to the source directory. */
  readonly rel: string;
  /** The collection name's JSON, the type of records that have none; or why it cannot be. */
  readonly collectionType: TypeVerdict;
  /** What the file contributed so far. */
  readonly counts: FileCounts;
  /** The file's rejected lines, on their way to the rejects file. */
  readonly rejects: PendingText;
}

/**
 * The state of an input file about to be converted, its counts at zero.
 *
 * @param input The file.
 * @param rejects Where its rejected lines go.
 * @returns The state to {@linkcode Converter.select}.
 *
 * @example Usage
 * ```ts
 * import { fileState } from "./convert.ts";
 * import assert from "node:assert/strict";
 *
 * const input = { abs: "/db/weather.json", rel: "weather.json", collection: "weather", bytes: 0 };
 * const state = fileState(input, { text: "", chunks: [] });
 * assert.equal(state.collectionType, '"weather"');
 * ```
 */
export function fileState(input: InputFile, rejects: PendingText): FileState {
  const problem = checkEventType(input.collection) ??
    (input.collection.startsWith(RESERVED_TYPE_PREFIX)
      ? reservedTypeProblem(input.collection)
      : undefined);
  return {
    rel: input.rel,
    collectionType: problem === undefined
      ? JSON.stringify(input.collection)
      : { reason: `record has no "type" and the collection name is not a usable type: ${problem}` },
    counts: { lines: 0, records: 0, rejects: 0, blankLines: 0 },
    rejects,
  };
}

/**
 * Converts lines one at a time and counts everything. {@linkcode Converter.line} returns whether
 * the line was a record; if so `day` and `tail` describe it until the next call. Rejects go
 * to the selected file's pending rejects (or are only counted, when tails are not built: a dry
 * run).
 *
 * @example Usage
 * ```ts
 * import { Converter, fileState } from "./convert.ts";
 * import assert from "node:assert/strict";
 *
 * const conv = new Converter(true);
 * const input = { abs: "/db/weather.json", rel: "weather.json", collection: "weather", bytes: 0 };
 * conv.select(fileState(input, { text: "", chunks: [] }));
 * assert.equal(conv.line('{"date":"2026-03-05 22:10:00","data":{"t":1}}', 1), true);
 * assert.equal(conv.day, "2026-03-05");
 * assert.equal(conv.line("not json", 2), false);
 * assert.equal(conv.rejects, 1);
 * ```
 */
export class Converter {
  records = 0;
  rejects = 0;
  blankLines = 0;
  lines = 0;
  bytesRead = 0;
  /** UTF-16 code units appended to pending text since the owner last reset it after a flush. */
  pending = 0;
  /** The last record's written date, `YYYY-MM-DD`. */
  day = "";
  /** The last record's line without its `{"seq":N` head, newline included; "" if not built. */
  tail = "";
  readonly build: boolean;
  /** The first rejected lines, for the summary. */
  readonly samples: MigrateReject[] = [];
  #types: Map<string, TypeVerdict> = new Map();
  #file: FileState | undefined;
  #nights: DayKeyer | undefined;

  /**
   * @param build Whether to build tails and reject lines, or only count (dry run).
   * @param nights Group by the local-noon night of `ts` in this keyer's zone; by written date
   *   when `undefined`.
   */
  constructor(build: boolean, nights?: DayKeyer) {
    this.build = build;
    this.#nights = nights;
  }

  /** Zeroes every count, for a run that starts over. */
  reset(): void {
    this.records =
      this.rejects =
      this.blankLines =
      this.lines =
      this.bytesRead =
      this.pending =
        0;
    this.samples.length = 0;
  }

  /** Sets the file whose lines come next. */
  select(file: FileState): void {
    this.#file = file;
  }

  /**
   * Appends a line to pending text, encoding the rope once it is long enough.
   *
   * @param out Where the line goes.
   * @param line The line, newline included.
   */
  append(out: PendingText, line: string): void {
    out.text += line;
    this.pending += line.length;
    if (out.text.length >= ENCODE_CHARS) {
      out.chunks.push(encoder.encode(out.text));
      out.text = "";
    }
  }

  /**
   * Converts one line of the selected file, counting it.
   *
   * @param text The line without its newline.
   * @param lineNo Its 1-based number in the file.
   * @returns Whether it was a record (then `day` and `tail` describe it).
   */
  line(text: string, lineNo: number): boolean {
    const counts = (this.#file as FileState).counts;
    this.lines++;
    counts.lines++;
    if (isBlank(text)) {
      this.blankLines++;
      counts.blankLines++;
      return false;
    }
    const record = parseRecord(text);
    if (typeof record === "string") return this.#reject(text, lineNo, record);
    const date = record.date;
    if (typeof date !== "string") {
      return this.#reject(
        text,
        lineNo,
        date === undefined ? `record has no "date"` : `"date" is ${describe(date)}, not a string`,
      );
    }
    const ts = convertDate(date);
    if (typeof ts !== "string") return this.#reject(text, lineNo, ts.reason);
    const typeJson = this.#typeJson(record.type);
    if (typeof typeJson !== "string") return this.#reject(text, lineNo, typeJson.reason);
    const data = migratedData(record.data);
    // The service's own rules (docs/migration.md): a line it would refuse is never written, or
    // every snapshot checkpoint and every fleet destination would trip on it later.
    const problem = valueProblem(data, "data") ?? idProblem(record._id);
    if (problem !== undefined) {
      return this.#reject(text, lineNo, `the service would refuse this record: ${problem}`);
    }
    const tail = migratedTail(data, record._id, ts, typeJson);
    const bytes = utf8Bytes(tail);
    if (bytes > DEFAULT_BODY_BYTES) {
      return this.#reject(
        text,
        lineNo,
        `the service would refuse this record: its event is ${
          bytes.toLocaleString("en-US")
        } bytes as JSON, more than the ${
          DEFAULT_BODY_BYTES.toLocaleString("en-US")
        } a request body may have by default (--max-body)`,
      );
    }
    this.records++;
    counts.records++;
    this.day = this.#nights === undefined ? date.slice(0, 10) : nightOf(this.#nights, ts);
    this.tail = this.build ? `${tail}\n` : "";
    return true;
  }

  /** The record's `type` as JSON, the collection's when it has none; or why it is refused. */
  #typeJson(type: unknown): TypeVerdict {
    if (type === undefined || type === null) return (this.#file as FileState).collectionType;
    if (typeof type === "string") return this.#types.get(type) ?? this.#checkType(type);
    return { reason: `"type" is ${describe(type)}, not a string` };
  }

  #checkType(type: string): TypeVerdict {
    // A legacy telemetry.* record would pass for the service's own (docs/migration.md).
    const problem = checkEventType(type) ??
      (type.startsWith(RESERVED_TYPE_PREFIX) ? reservedTypeProblem(type) : undefined);
    const verdict: TypeVerdict = problem === undefined
      ? JSON.stringify(type)
      : { reason: `"type" cannot be used: ${problem}` };
    if (this.#types.size < TYPE_CACHE_LIMIT) this.#types.set(type, verdict);
    return verdict;
  }

  #reject(text: string, lineNo: number, reason: string): false {
    const file = this.#file as FileState;
    this.rejects++;
    file.counts.rejects++;
    if (this.samples.length < REJECT_SAMPLES) {
      this.samples.push({ file: file.rel, line: lineNo, reason });
    }
    if (!this.build) return false;
    this.append(
      file.rejects,
      `{"file":${JSON.stringify(file.rel)},"line":${lineNo},"reason":${
        JSON.stringify(reason)
      },"text":${JSON.stringify(text)}}\n`,
    );
    return false;
  }
}

/** The night of a converted `ts` as `YYYY-MM-DD`, the form the written-date grouping uses. */
function nightOf(keyer: DayKeyer, ts: string): string {
  const key = keyer.keyFor(Date.parse(ts));
  return `${key.slice(0, 4)}-${key.slice(4, 6)}-${key.slice(6, 8)}`;
}

// Blank: empty or whitespace only; the first character decides cheaply for almost every line.
function isBlank(text: string): boolean {
  const first = text.charCodeAt(0);
  return (first <= 32 || first === 0xfeff || Number.isNaN(first)) && text.trim() === "";
}

/** A line's record, or why it is not one (a string). */
function parseRecord(text: string): Record<string, unknown> | string {
  let rec: unknown;
  try {
    rec = JSON.parse(text);
  } catch (err) {
    if (!(err instanceof SyntaxError)) throw err;
    return `line is not valid JSON: ${clip(err.message, 120)}`;
  }
  if (typeof rec !== "object" || rec === null || Array.isArray(rec)) {
    return `record is ${describe(rec)}, not a JSON object`;
  }
  return rec as Record<string, unknown>;
}

/**
 * The UTF-8 size of a line's tail, which is the size of its event sent as JSON (`{` and the same
 * fields); exact whenever it may exceed the limit. A UTF-16 code unit takes at most 3 bytes, so
 * text that surely fits is not encoded (its length is returned instead, also within the limit).
 */
function utf8Bytes(text: string): number {
  return text.length * 3 <= DEFAULT_BODY_BYTES ? text.length : encoder.encode(text).length;
}

/** A record's `data` as the line's `data` object (docs/migration.md): kept, `{}`, or wrapped. */
function migratedData(data: unknown): Record<string, unknown> {
  if (typeof data === "object" && data !== null && !Array.isArray(data)) {
    return data as Record<string, unknown>;
  }
  return data === undefined ? {} : { value: data };
}

/** What the service would refuse in the line's `meta`, which holds the record's `_id`. */
function idProblem(id: unknown): string | undefined {
  // A string, boolean or null `_id` (nearly all) cannot nest or overflow: nothing to walk.
  if (typeof id !== "object" && typeof id !== "number") return undefined;
  return valueProblem({ original_id: id }, "meta");
}

/** The tail of a migrated line (see {@linkcode buildTail}): its `data` and `meta` per docs/migration.md. */
function migratedTail(
  data: Record<string, unknown>,
  id: unknown,
  ts: string,
  typeJson: string,
): string {
  const idJson = id === undefined ? "null" : JSON.stringify(id);
  return buildTail(ts, typeJson, JSON.stringify(data), `${META_HEAD}${idJson}}`);
}

/**
 * Appends pending text to a file (created when missing) and empties it.
 *
 * @param pending The text.
 * @param path The file.
 *
 * @example Usage
 * ```ts ignore
 * import { flushPending } from "./convert.ts";
 *
 * await flushPending({ text: "line\n", chunks: [] }, "/tmp/out.ndjson");
 * ```
 */
export async function flushPending(pending: PendingText, path: string): Promise<void> {
  if (pending.text !== "") {
    pending.chunks.push(encoder.encode(pending.text));
    pending.text = "";
  }
  if (pending.chunks.length === 0) return;
  const chunks = pending.chunks;
  pending.chunks = [];
  await appendBytes(path, chunks);
}

async function appendBytes(path: string, chunks: readonly Uint8Array[]): Promise<void> {
  const file = await Deno.open(path, { append: true, create: true });
  try {
    for (const chunk of chunks) await writeFull(file, chunk);
  } finally {
    file.close();
  }
}
