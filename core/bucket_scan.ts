/**
 * Stored lines counted into a {@linkcode BucketSet} without decoding or parsing each whole line
 * (docs/history.md, "Buckets"). A line in the exact layout the service writes
 * (`{"seq":N,"ts":"<24>","type":"…","data":{…},"meta":…}`, `wire/ndjson.ts`) is read as bytes:
 * its type and `ts` tested against the range where they always stand (other types' lines end
 * there), and when it is kept, the keys of its `data` (nested objects too) compared with the last
 * line's of its type and its numbers read digit by digit; nothing of the line is built but the
 * values (a string's text only for a field with a unit). Any other line (fields in another order,
 * an array, an escape or a non-ASCII byte in a string, a `ts` not in the canonical form,
 * whitespace) is decoded, tested and parsed whole, as before: both
 * paths keep and count exactly the same events the same way. `GET /history?every=` and
 * `read --every` both count through it.
 *
 * @example Usage
 * ```ts
 * import { BucketScan } from "./bucket_scan.ts";
 * import { BucketSet } from "./buckets.ts";
 * import assert from "node:assert/strict";
 *
 * const set = new BucketSet({ everyMs: 60_000, aggregates: ["mean"] });
 * const scan = new BucketScan(set, { everyMs: 60_000 });
 * const lines = '{"seq":1,"ts":"2026-05-10T03:00:10.000Z","type":"w","data":{"t":2},"meta":{}}\n' +
 *   '{"type":"w","ts":"2026-05-10T03:00:20Z","data":{"t":4},"seq":2}\n';
 * const all = { typeHeads: [], since: "", until: undefined, keep: () => true };
 * scan.addRegion(new TextEncoder().encode(lines), all);
 * assert.deepEqual([...set.drain()][0]!.fields, { t: { mean: 3 } });
 * ```
 *
 * @module
 */

import { formatTimestamp } from "../wire/event.ts";
import { DATA_KEY, LINE_HEAD, META_KEY } from "../wire/ndjson.ts";
import type { RawLineFilter } from "../store/history.ts";
import type { BucketSet, FlatRow } from "./buckets.ts";

/** Options of a {@linkcode BucketScan}. */
export interface BucketScanOptions {
  /** The bucket width in milliseconds, as the set's. */
  everyMs: number;
  /**
   * Whether string values are read: the set's `unitOf` makes `"<number> <unit>"` strings count
   * (without it a string never counts, and the scan does not build it).
   * @default {false}
   */
  strings?: boolean | undefined;
}

const QUOTE = 0x22;
const BACKSLASH = 0x5c;
const COLON = 0x3a;
const COMMA = 0x2c;
const OPEN = 0x7b;
const CLOSE = 0x7d;
const MINUS = 0x2d;
const DOT = 0x2e;
const ZERO = 0x30;
const NINE = 0x39;
const NL = 0x0a;
/** Exact powers of ten: a mantissa below 2^53 divided by one is correctly rounded. */
const POW10 = Array.from({ length: 23 }, (_, k) => 10 ** k);
/** The most digits read by hand: their integer stays below 2^53, so the division is exact. */
const MAX_DIGITS = 15;
const DAYS = [31, 28, 31, 30, 31, 30, 31, 31, 30, 31, 30, 31];
const encoder = new TextEncoder();
const decoder = new TextDecoder("utf-8", { ignoreBOM: true });
/** The layout's fixed parts as bytes (`wire/ndjson.ts`). */
const HEAD = encoder.encode(LINE_HEAD);
const TS_KEY = encoder.encode(',"ts":"');
const TYPE_KEY = encoder.encode('","type":');
const DATA = encoder.encode(DATA_KEY);
const META = encoder.encode(META_KEY);
/** The most digits of a seq in the layout `canonicalTypeAt()` reads (its `ts` key before 24). */
const MAX_SEQ_DIGITS = 16;

function isDigit(c: number): boolean {
  return c >= ZERO && c <= NINE;
}

/** Whether `bytes` holds `part` at `at`. */
function holds(bytes: Uint8Array, at: number, part: Uint8Array): boolean {
  if (at + part.length > bytes.length) return false;
  for (let i = 0; i < part.length; i++) if (bytes[at + i] !== part[i]) return false;
  return true;
}

/** Two digits at `at` as a number, or -1. */
function two(bytes: Uint8Array, at: number): number {
  const a = bytes[at]! - ZERO, b = bytes[at + 1]! - ZERO;
  return a >= 0 && a <= 9 && b >= 0 && b <= 9 ? a * 10 + b : -1;
}

/** {@linkcode isCanonicalTs} of the 24 bytes at `at`. */
function canonicalTsAt(bytes: Uint8Array, at: number): boolean {
  if (
    at + 24 > bytes.length || bytes[at + 4] !== MINUS || bytes[at + 7] !== MINUS ||
    bytes[at + 10] !== 0x54 || bytes[at + 13] !== COLON || bytes[at + 16] !== COLON ||
    bytes[at + 19] !== DOT || bytes[at + 23] !== 0x5a
  ) return false;
  const century = two(bytes, at), yy = two(bytes, at + 2);
  const month = two(bytes, at + 5), day = two(bytes, at + 8);
  if (century < 0 || yy < 0 || month < 1 || month > 12 || day < 1) return false;
  const year = century * 100 + yy;
  const leap = year % 4 === 0 && (year % 100 !== 0 || year % 400 === 0);
  if (day > (month === 2 && leap ? 29 : DAYS[month - 1]!)) return false;
  const h = two(bytes, at + 11), m = two(bytes, at + 14), sec = two(bytes, at + 17);
  if (h < 0 || h > 23 || m < 0 || m > 59 || sec < 0 || sec > 59) return false;
  return isDigit(bytes[at + 20]!) && isDigit(bytes[at + 21]!) && isDigit(bytes[at + 22]!);
}

/**
 * Whether a `ts` is exactly as `formatTimestamp()` writes one (`YYYY-MM-DDTHH:MM:SS.mmmZ`, a real
 * date and time): only such text is compared as text, as it sorts as time does.
 *
 * @param ts The `ts` text.
 * @returns Whether it is canonical.
 *
 * @example Usage
 * ```ts
 * import { isCanonicalTs } from "./bucket_scan.ts";
 * import assert from "node:assert/strict";
 *
 * assert.equal(isCanonicalTs("2028-02-29T23:59:59.999Z"), true);
 * assert.equal(isCanonicalTs("2026-02-29T00:00:00.000Z"), false);
 * assert.equal(isCanonicalTs("2026-05-10T24:00:00.000Z"), false);
 * ```
 */
export function isCanonicalTs(ts: string): boolean {
  if (ts.length !== 24) return false;
  const scratch = TS_SCRATCH;
  for (let i = 0; i < 24; i++) {
    const c = ts.charCodeAt(i);
    if (c > 0x7f) return false;
    scratch[i] = c;
  }
  return canonicalTsAt(scratch, 0);
}

/** The bytes of a `ts` tested by {@linkcode isCanonicalTs} (one at a time: it is synchronous). */
const TS_SCRATCH = new Uint8Array(24);

/**
 * The 24 bytes at `at` against a canonical `ts` as bytes: negative, zero or positive, as the
 * texts compare (ASCII sorts by its bytes).
 */
function compareTs(bytes: Uint8Array, at: number, ts: Uint8Array): number {
  for (let i = 0; i < 24; i++) {
    const d = bytes[at + i]! - ts[i]!;
    if (d !== 0) return d;
  }
  return 0;
}

/** The deepest objects of `data` read in place (deeper ones are parsed whole). */
const MAX_NESTING = 8;
/** The most types the scan keeps apart (more are read each time they come back). */
const MAX_TYPES = 64;

/** A type met by the byte path: its head, the filter's verdict, its last keys and its row. */
interface TypeEntry {
  /** Its JSON and the `,` after it, as bytes. */
  head: Uint8Array;
  type: string;
  /** Whether the current filter keeps it. */
  wanted: boolean;
  /** The keys of its last flat `data` (distinct), each with its JSON and colon as bytes. */
  keys: string[];
  keyHeads: Uint8Array[];
  /** The object of each key (its index among the keys), or -1 for a key of `data`. */
  parents: number[];
  /** How many of `keys` are known (a prefix of one line's keys). */
  shape: number;
  /** The objects around the key being read (kept to be reused). */
  stack: number[];
  /** The row handed to the set: its keys are `keys`. */
  row: FlatRow & { numbers: Float64Array };
  /** Where each key's string value begins and ends in the bytes of the line (-1: no string). */
  spans: Int32Array;
}

/** How a line was taken by the byte path. */
const enum Took {
  /** Not in the layout: the line is decoded and tested whole. */
  Other,
  /** Tested and left out by the filter. */
  Left,
  /** Tested, kept and counted. */
  Counted,
}

/**
 * Counts stored lines into a {@linkcode BucketSet}: lines in the service's own layout read as
 * bytes in place, any other line parsed whole (see the module documentation).
 *
 * @example Usage
 * ```ts
 * import { BucketScan } from "./bucket_scan.ts";
 * import { BucketSet } from "./buckets.ts";
 * import assert from "node:assert/strict";
 *
 * const set = new BucketSet({ everyMs: 60_000, aggregates: ["max"] });
 * const scan = new BucketScan(set, { everyMs: 60_000 });
 * assert.equal(scan.add("not json"), false);
 * assert.equal(scan.add('{"type":"w","ts":"2026-05-10T03:00:20Z","data":{"t":4},"seq":2}'), true);
 * ```
 */
export class BucketScan {
  #set: BucketSet;
  #every: number;
  // The bucket of the last event, as canonical ts text: a canonical ts between these two strings
  // (they sort as time does) is in the same bucket without parsing the date again.
  #from = "";
  #to = "";
  #start = 0;
  /** `#from` and `#to` as bytes (none before the first bucket). */
  #fromBytes = new Uint8Array(0);
  #toBytes = new Uint8Array(0);
  /** The filter of the last region, its bounds as bytes, and whether the bucket lies within them. */
  #filter: RawLineFilter | undefined;
  #sinceBytes: Uint8Array | undefined;
  #untilBytes: Uint8Array | undefined;
  #inside = false;
  /** The types read in place, each with its keys and row. */
  #types: TypeEntry[] = [];
  /** The last shape number handed out (each list of keys of each type gets its own). */
  #shapes = 0;
  #strings: boolean;
  /** The bytes of the line being counted, for the text of its strings. */
  #bytes: Uint8Array = new Uint8Array(0);
  /** The region being counted, and its text once it was needed (`""`: not one byte a character). */
  #region: Uint8Array = new Uint8Array(0);
  #regionText: string | undefined;
  #kept = 0;

  /**
   * Creates a scan that counts into `set`.
   *
   * @param set The buckets to count into.
   * @param options The width of a bucket, and whether strings may count.
   */
  constructor(set: BucketSet, options: BucketScanOptions) {
    this.#set = set;
    this.#every = options.everyMs;
    this.#strings = options.strings ?? false;
  }

  /**
   * The ASCII text of `[from, to)` of the region being counted: a slice of the region decoded
   * once, when every character of it is one byte; else made of these bytes alone.
   */
  #textOf(b: Uint8Array, from: number, to: number): string {
    const text = b === this.#region ? this.#text() : "";
    return text !== "" ? text.slice(from, to) : String.fromCharCode(...b.subarray(from, to));
  }

  /** The line `[from, to)` of the region being counted, decoded. */
  #lineOf(from: number, to: number): string {
    const text = this.#text();
    return text !== "" ? text.slice(from, to) : decoder.decode(this.#region.subarray(from, to));
  }

  /** The region being counted decoded once, or `""` when a character of it is not one byte. */
  #text(): string {
    if (this.#regionText === undefined) {
      const text = decoder.decode(this.#region);
      this.#regionText = text.length === this.#region.length ? text : "";
    }
    return this.#regionText;
  }

  /** The entry of the type whose JSON stands at `typeAt`, read and kept when it is new. */
  #typeAt(b: Uint8Array, typeAt: number, e: number): TypeEntry | undefined {
    const types = this.#types;
    for (let i = 0; i < types.length; i++) {
      const entry = types[i]!;
      if (holds(b, typeAt, entry.head)) return entry;
    }
    if (b[typeAt] !== QUOTE) return undefined;
    const end = asciiStringEnd(b, typeAt + 1, e);
    if (end < 0 || b[end + 1] !== COMMA) return undefined;
    const head = b.slice(typeAt, end + 2);
    const entry: TypeEntry = {
      head,
      type: decoder.decode(b.subarray(typeAt + 1, end)),
      wanted: this.#wanted(head),
      keys: [],
      keyHeads: [],
      parents: [],
      shape: 0,
      stack: [],
      spans: new Int32Array(32),
      row: {
        keys: [],
        parents: [],
        numbers: new Float64Array(16),
        text: undefined,
        n: 0,
        shape: ++this.#shapes,
      },
    };
    entry.row.keys = entry.keys;
    if (this.#strings) {
      entry.row.text = (i) => {
        const from = entry.spans[2 * i]!;
        return from < 0
          ? undefined
          : decoder.decode(this.#bytes.subarray(from, entry.spans[2 * i + 1]));
      };
    }
    entry.row.parents = entry.parents;
    if (types.length >= MAX_TYPES) types.shift();
    types.push(entry);
    return entry;
  }

  /** Whether the filter keeps a type, by its head. */
  #wanted(head: Uint8Array): boolean {
    const heads = this.#filter?.typeHeads ?? [];
    return heads.length === 0 ||
      heads.some((h) => h.length === head.length && holds(head, 0, h));
  }

  /** The lines {@linkcode addRegion} kept (the filter's), counted or not. */
  get kept(): number {
    return this.#kept;
  }

  /**
   * Counts one stored line into its bucket, parsed whole.
   *
   * @param line The line, without its newline.
   * @returns Whether it is an event (a JSON object with a string `ts` that is a time and a string
   *   `type`); a line that is not is passed over.
   */
  add(line: string): boolean {
    let event: { ts?: unknown; type?: unknown; data?: unknown };
    try {
      event = JSON.parse(line);
    } catch {
      return false; // a hand-damaged line: not an event
    }
    const ts = event?.ts;
    if (typeof ts !== "string" || typeof event.type !== "string") return false;
    const start = isCanonicalTs(ts) ? this.#canonicalStart(ts) : this.#startOf(ts);
    if (start === undefined) return false;
    this.#set.add(start, event.type, event.data);
    return true;
  }

  /**
   * Counts the lines of a region of whole stored lines that `filter` keeps: those in the layout
   * the service writes read in place, any other decoded, tested and parsed whole.
   *
   * @param bytes Whole lines, each ended by `\n`.
   * @param filter What a line must be to count (`store/history.ts`).
   * @param from Where to begin in `bytes` (the start of a line).
   * @param maxLines The most lines kept before stopping.
   * @param stopOnCut Stop after the line that first makes the set give buckets up.
   * @returns Where it stopped: the start of the next line, `bytes.length` at the end.
   */
  addRegion(
    bytes: Uint8Array,
    filter: RawLineFilter,
    from = 0,
    maxLines = Infinity,
    stopOnCut = false,
  ): number {
    const set = this.#set;
    if (filter !== this.#filter) {
      this.#filter = filter;
      this.#sinceBytes = filter.since === "" ? undefined : encoder.encode(filter.since);
      this.#untilBytes = filter.until === undefined ? undefined : encoder.encode(filter.until);
      this.#inside = this.#within();
      for (const entry of this.#types) entry.wanted = this.#wanted(entry.head);
    }
    let budget = maxLines;
    let start = from;
    // The region as text, decoded once when a line must be parsed whole; its positions are the
    // bytes' when every character is one byte (else each such line is decoded on its own).
    if (bytes !== this.#region) {
      this.#region = bytes;
      this.#regionText = undefined;
    }
    while (start < bytes.length && budget > 0) {
      const nl = bytes.indexOf(NL, start);
      if (nl < 0) return bytes.length;
      if (nl > start) {
        let took = this.#inPlace(bytes, start, nl);
        if (took === Took.Other) {
          const line = this.#lineOf(start, nl);
          if (filter.keep(line)) {
            this.add(line);
            took = Took.Counted;
          }
        }
        if (took === Took.Counted) {
          this.#kept++;
          budget--;
          if (stopOnCut && set.truncatedAt !== undefined) return nl + 1;
        }
      }
      start = nl + 1;
    }
    return start;
  }

  /** The bucket start of a canonical `ts`. */
  #canonicalStart(ts: string): number | undefined {
    if (ts >= this.#from && ts < this.#to) return this.#start;
    return this.#startOf(ts, true);
  }

  /** The bucket start of a `ts`, or `undefined` when it is no time. */
  #startOf(ts: string, canonical = false): number | undefined {
    const ms = Date.parse(ts);
    if (Number.isNaN(ms)) return undefined;
    const start = Math.floor(ms / this.#every) * this.#every;
    if (canonical) {
      this.#start = start;
      this.#from = formatTimestamp(start);
      this.#to = formatTimestamp(start + this.#every);
      this.#fromBytes = encoder.encode(this.#from);
      this.#toBytes = encoder.encode(this.#to);
      this.#inside = this.#within();
    }
    return start;
  }

  /** Whether every canonical `ts` of the last bucket lies within the filter's bounds. */
  #within(): boolean {
    const filter = this.#filter;
    return filter !== undefined && this.#from !== "" &&
      (filter.since === "" || this.#from >= filter.since) &&
      (filter.until === undefined || this.#to <= filter.until);
  }

  /**
   * The byte path: a line `[s, e)` in the exact canonical layout, tested by `filter` and, when
   * kept, counted with its flat `data`, without decoding it. {@linkcode Took.Other} (nothing
   * counted) for anything else.
   */
  #inPlace(b: Uint8Array, s: number, e: number): Took {
    if (!holds(b, s, HEAD)) return Took.Other;
    // The seq: digits without a leading zero, then the `ts` key.
    let pos = s + HEAD.length;
    while (pos < e && isDigit(b[pos]!)) pos++;
    const digits = pos - s - HEAD.length;
    if (digits < 1 || digits > MAX_SEQ_DIGITS || (digits > 1 && b[s + HEAD.length] === ZERO)) {
      return Took.Other;
    }
    if (!holds(b, pos, TS_KEY)) return Took.Other;
    const tsAt = pos + TS_KEY.length;
    if (!canonicalTsAt(b, tsAt) || !holds(b, tsAt + 24, TYPE_KEY)) return Took.Other;
    const typeAt = tsAt + 24 + TYPE_KEY.length;
    // The type (ASCII, no escapes) as one met before, and the filter's test of it: as the line
    // filter of the store tests a canonical line.
    const entry = this.#typeAt(b, typeAt, e);
    if (entry === undefined) return Took.Other;
    if (!entry.wanted) return Took.Left;
    pos = typeAt + entry.head.length - 1;
    // The `ts`: in the last bucket, and that bucket within the range, needs no other test.
    const inBucket = this.#fromBytes.length > 0 && compareTs(b, tsAt, this.#fromBytes) >= 0 &&
      compareTs(b, tsAt, this.#toBytes) < 0;
    if (!inBucket || !this.#inside) {
      const since = this.#sinceBytes, until = this.#untilBytes;
      if (since !== undefined && compareTs(b, tsAt, since) < 0) return Took.Left;
      if (until !== undefined && compareTs(b, tsAt, until) >= 0) return Took.Left;
    }
    // Kept: from here on anything unexpected is parsed whole, which counts it the same way.
    if (!holds(b, pos, DATA)) return Took.Other;
    pos += DATA.length;
    if (b[pos] !== OPEN) return Took.Other;
    pos++;
    const { keys, keyHeads, parents, row, stack } = entry;
    let spans = entry.spans;
    this.#bytes = b;
    let n = 0;
    let changed = false;
    // The object the next key is in (-1: `data` itself), and those around it.
    let parent = -1;
    stack.length = 0;
    if (b[pos] === CLOSE) pos++;
    else {
      members: while (true) {
        if (n < entry.shape && parents[n] === parent && holds(b, pos, keyHeads[n]!)) {
          pos += keyHeads[n]!.length;
        } else {
          if (b[pos] !== QUOTE) return Took.Other;
          const end = asciiStringEnd(b, pos + 1, e);
          // An array-index key is enumerated first by an object: such data is parsed whole.
          if (end <= pos + 1 || isDigit(b[pos + 1]!) || b[end + 1] !== COLON) return Took.Other;
          // The kept keys stay a prefix of a line's distinct keys, whatever this line turns out.
          if (entry.shape > n) entry.shape = n;
          keys[n] = decoder.decode(b.subarray(pos + 1, end));
          keyHeads[n] = b.slice(pos, end + 2);
          parents[n] = parent;
          changed = true;
          pos = end + 2;
        }
        if (n === row.numbers.length) {
          const grown = new Float64Array(2 * n);
          grown.set(row.numbers);
          row.numbers = grown;
          const wider = new Int32Array(4 * n);
          wider.set(spans);
          entry.spans = spans = wider;
        }
        const c = b[pos]!;
        if (c === OPEN) {
          // An object: its keys follow, each naming it as its parent.
          row.numbers[n] = NaN;
          spans[2 * n] = -1;
          n++;
          if (stack.length >= MAX_NESTING) return Took.Other;
          stack.push(parent);
          parent = n - 1;
          pos++;
          if (b[pos] !== CLOSE) continue members;
          pos++;
          parent = stack.pop()!;
        } else {
          if (c === MINUS || isDigit(c)) {
            inexactFrom = -1;
            pos = readNumber(b, pos, row.numbers, n);
            if (pos < 0) return Took.Other;
            // Past 15 digits or with an exponent: V8 reads the text, correctly rounded.
            if (inexactFrom >= 0) row.numbers[n] = Number(this.#textOf(b, inexactFrom, pos));
            spans[2 * n] = -1;
          } else if (c === QUOTE) {
            const end = asciiStringEnd(b, pos + 1, e);
            if (end < 0) return Took.Other;
            row.numbers[n] = NaN;
            spans[2 * n] = pos + 1;
            spans[2 * n + 1] = end;
            pos = end + 1;
          } else {
            const word = c === 0x74 ? TRUE : c === 0x66 ? FALSE : c === 0x6e ? NULL : undefined;
            if (word === undefined || !holds(b, pos, word)) return Took.Other; // an array
            row.numbers[n] = NaN;
            spans[2 * n] = -1;
            pos += word.length;
          }
          n++;
        }
        // After a value: the next key of its object, or the end of objects.
        while (true) {
          const next = b[pos++];
          if (next === COMMA) continue members;
          if (next !== CLOSE) return Took.Other;
          if (stack.length === 0) break members;
          parent = stack.pop()!;
        }
      }
    }
    if (changed) {
      // JSON.parse keeps the last of a repeated key
      if (!distinct(keys, parents, n)) return Took.Other;
      entry.shape = n;
      row.shape = ++this.#shapes;
    }
    // The rest: `,"meta":` and any JSON value, then the line's `}`.
    if (!holds(b, pos, META) || b[e - 1] !== CLOSE) return Took.Other;
    pos += META.length;
    if (!(e === pos + 3 && b[pos] === OPEN && b[pos + 1] === CLOSE)) {
      try {
        JSON.parse(decoder.decode(b.subarray(pos, e - 1)));
      } catch {
        return Took.Other;
      }
    }
    // The bucket: the last one when the `ts` lies in it, compared as bytes.
    let start = this.#start;
    if (!inBucket) {
      const ts = String.fromCharCode(...b.subarray(tsAt, tsAt + 24));
      const found = this.#startOf(ts, true);
      if (found === undefined) return Took.Other;
      start = found;
    }
    row.n = n;
    this.#set.addFlat(start, entry.type, row);
    return Took.Counted;
  }
}

/**
 * Reads the JSON number at `pos` into `out[n]`: digit by digit when it has at most 15 digits and
 * no exponent, else by `Number()` of its text (after checking JSON's grammar).
 *
 * @returns Where the number ends, or -1 when it is not a JSON number.
 */
function readNumber(b: Uint8Array, pos: number, out: Float64Array, n: number): number {
  const begin = pos;
  const negative = b[pos] === MINUS;
  if (negative) pos++;
  let c = b[pos]!;
  if (!isDigit(c)) return -1;
  let mantissa = 0, digits = 0, scale = 0;
  if (c === ZERO) {
    pos++;
    digits = 1;
    c = b[pos]!;
    if (isDigit(c)) return -1; // a leading zero
  } else {
    while (c >= ZERO && c <= NINE) {
      mantissa = mantissa * 10 + (c - ZERO);
      digits++;
      c = b[++pos]!;
    }
  }
  if (c === DOT) {
    c = b[++pos]!;
    if (!isDigit(c)) return -1;
    while (c >= ZERO && c <= NINE) {
      mantissa = mantissa * 10 + (c - ZERO);
      digits++;
      scale++;
      c = b[++pos]!;
    }
  }
  let exact = digits <= MAX_DIGITS;
  if (c === 0x65 || c === 0x45) {
    exact = false;
    c = b[++pos]!;
    if (c === 0x2b || c === MINUS) c = b[++pos]!;
    if (!isDigit(c)) return -1;
    while (isDigit(b[pos]!)) pos++;
  }
  if (exact) {
    const value = scale === 0 ? mantissa : mantissa / POW10[scale]!;
    out[n] = negative ? -value : value;
  } else {
    out[n] = NaN;
    inexactFrom = begin;
  }
  return pos;
}

/** Where the last number {@linkcode readNumber} could not read by hand begins, or -1. */
let inexactFrom = -1;

const TRUE = encoder.encode("true");
const FALSE = encoder.encode("false");
const NULL = encoder.encode("null");

/**
 * The index of the quote that ends a string starting at `from`, before `end`, or -1: an escape,
 * a control character or a byte that is not ASCII (such a line is decoded and parsed whole).
 */
function asciiStringEnd(b: Uint8Array, from: number, end: number): number {
  for (let i = from; i < end; i++) {
    const c = b[i]!;
    if (c === QUOTE) return i;
    if (c === BACKSLASH || c < 0x20 || c > 0x7e) return -1;
  }
  return -1;
}

/** Whether the first `n` keys are all different within their objects. */
function distinct(keys: readonly string[], parents: readonly number[], n: number): boolean {
  if (n > 32) {
    const seen = new Set<string>();
    for (let i = 0; i < n; i++) seen.add(`${parents[i]}\u0000${keys[i]}`);
    return seen.size === n;
  }
  for (let i = 1; i < n; i++) {
    for (let j = 0; j < i; j++) if (keys[i] === keys[j] && parents[i] === parents[j]) return false;
  }
  return true;
}
