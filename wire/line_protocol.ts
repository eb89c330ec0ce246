/**
 * The InfluxDB line protocol (docs/http-api.md): a body of lines
 * `measurement[,tag=value...] field=value[,field=value...] [timestamp]`, each parsed on its own
 * into a point or a refusal that names its line and what is wrong, so that the valid lines of a
 * body are stored and the others answered (`POST /write`, `POST /api/v2/write`).
 *
 * The rules are those of the line-protocol reference: a backslash escapes a comma or a space in a
 * measurement, a comma, an equals sign or a space in a tag key, tag value or field key, and a
 * double quote in a string field value; two backslashes are one backslash everywhere, and a
 * backslash before any other character is itself. Floats, integers (`1i`), unsigned integers
 * (`1u`), double-quoted strings and booleans (`t`, `T`, `true`, `True`, `TRUE` and the same for
 * false). A line starting with `#` is a comment, blank lines are skipped, `\r\n` ends a line as
 * `\n` does. Where this differs from InfluxDB's own parser it is stricter, and says why:
 *
 * - A newline always ends a line, even inside a double-quoted string (the reference: "line
 *   protocol does not support the newline character in tag or field values").
 * - An integer or unsigned integer beyond ±9,007,199,254,740,991 (2^53 - 1) is refused: a JSON
 *   number holds no larger integer exactly, and the event is JSON. Send it as a float, or a string.
 * - A line with a NUL byte, more than {@linkcode MAX_LINE_FIELDS} fields or more than
 *   {@linkcode MAX_LINE_TAGS} tags is refused.
 * - The measurement must be an event type the service accepts (1 to 128 characters, no control
 *   characters, not `telemetry.*`).
 *
 * A timestamp is read at the precision given (nanoseconds by default) and truncated to the
 * millisecond, toward the past (`-1` ns is 1969-12-31T23:59:59.999Z). It must lie in InfluxDB's
 * range, 1677-09-21 to 2262-04-11.
 *
 * Runtime-neutral: web APIs only. One strict UTF-8 decode for the body, then each line is read in
 * place; a point costs its own strings and objects, nothing per line besides.
 *
 * @example Usage
 * ```ts
 * import { parseLines } from "./line_protocol.ts";
 * import assert from "node:assert/strict";
 *
 * const { points, refusals } = parseLines('weather,site=north wind_mps=2.1,ok=t 1700000000123456789\nbad\n');
 * assert.deepEqual(points[0], {
 *   line: 1,
 *   measurement: "weather",
 *   tags: { site: "north" },
 *   fields: { wind_mps: 2.1, ok: true },
 *   timeMs: 1700000000123,
 * });
 * assert.equal(refusals[0]!.line, 2);
 * assert.equal(refusals[0]!.reason, "missing fields");
 * ```
 *
 * @module
 */

import { checkEventType, RESERVED_TYPE_PREFIX, reservedTypeProblem } from "./event.ts";

/**
 * The precisions a timestamp may be written in: nanoseconds (the default), microseconds,
 * milliseconds, seconds, minutes, hours.
 *
 * @example Usage
 * ```ts
 * import type { LinePrecision } from "./line_protocol.ts";
 *
 * const precision: LinePrecision = "s";
 * ```
 */
export type LinePrecision = "ns" | "us" | "ms" | "s" | "m" | "h";

/**
 * A field's value: a float or an integer as a number, a string, a boolean.
 *
 * @example Usage
 * ```ts
 * import type { LineFieldValue } from "./line_protocol.ts";
 *
 * const values: LineFieldValue[] = [2.1, 3, "open", true];
 * ```
 */
export type LineFieldValue = number | string | boolean;

/**
 * One line that parsed: the event it makes is `type` = `measurement`, `data` = `fields`,
 * `meta.tags` = `tags`, `ts` = `timeMs`.
 *
 * @example Usage
 * ```ts
 * import type { LinePoint } from "./line_protocol.ts";
 *
 * const point: LinePoint = { line: 1, measurement: "weather", tags: undefined, fields: { t: 1 }, timeMs: undefined };
 * ```
 */
export interface LinePoint {
  /** The 1-based line of the body (blank lines and comments counted). */
  line: number;
  /** The measurement, unescaped. */
  measurement: string;
  /**
   * The tags in the order written, unescaped; `undefined` when the line has none. Lines of a body
   * that write the same tags the same way share one object: treat it as read-only.
   */
  tags: Readonly<Record<string, string>> | undefined;
  /** The fields in the order written (a repeated key keeps its first place and its last value). */
  fields: Record<string, LineFieldValue>;
  /** The timestamp in epoch milliseconds; `undefined` when the line has none (the receive time). */
  timeMs: number | undefined;
}

/**
 * One line that did not parse, or broke a rule of the service.
 *
 * @example Usage
 * ```ts
 * import type { LineRefusal } from "./line_protocol.ts";
 *
 * const refusal: LineRefusal = { line: 2, text: "bad", reason: "missing fields" };
 * ```
 */
export interface LineRefusal {
  /** The 1-based line of the body. */
  line: number;
  /** The start of the line as sent (at most 80 characters, control characters as `\u0000`). */
  text: string;
  /** What is wrong, in the words of InfluxDB's parser where it has them. */
  reason: string;
}

/** What the lines of a body are handed to, in order. */
export interface LineSink {
  /** Receives a line that parsed. */
  point(point: LinePoint): void;
  /** Receives a line that was refused. */
  refuse(refusal: LineRefusal): void;
}

/** How a body is read. */
export interface LineProtocolOptions {
  /**
   * The precision of the timestamps.
   * @default {"ns"}
   */
  precision?: LinePrecision;
}

/**
 * The most fields a line may have; a line with more is refused.
 *
 * @example Usage
 * ```ts
 * import { MAX_LINE_FIELDS } from "./line_protocol.ts";
 * import assert from "node:assert/strict";
 *
 * assert.equal(MAX_LINE_FIELDS, 1000);
 * ```
 */
export const MAX_LINE_FIELDS = 1000;

/**
 * The most tags a line may have; a line with more is refused.
 *
 * @example Usage
 * ```ts
 * import { MAX_LINE_TAGS } from "./line_protocol.ts";
 * import assert from "node:assert/strict";
 *
 * assert.equal(MAX_LINE_TAGS, 1000);
 * ```
 */
export const MAX_LINE_TAGS = 1000;

/** Milliseconds per unit of each precision, or the units per millisecond (negative). */
const SCALE: Record<LinePrecision, { digitsBelowMs: number; msPerUnit: number }> = {
  ns: { digitsBelowMs: 6, msPerUnit: 1 },
  us: { digitsBelowMs: 3, msPerUnit: 1 },
  ms: { digitsBelowMs: 0, msPerUnit: 1 },
  s: { digitsBelowMs: 0, msPerUnit: 1000 },
  m: { digitsBelowMs: 0, msPerUnit: 60_000 },
  h: { digitsBelowMs: 0, msPerUnit: 3_600_000 },
};

/** InfluxDB's time range, ±(2^63 - 2) ns, in whole milliseconds. */
const MAX_TIME_MS = 9_223_372_036_854;

const strictUtf8 = new TextDecoder("utf-8", { fatal: true });
const lenientUtf8 = new TextDecoder("utf-8");

// Character codes.
const TAB = 9,
  LF = 10,
  CR = 13,
  SPACE = 32,
  QUOTE = 34,
  HASH = 35,
  COMMA = 44,
  MINUS = 45,
  DOT = 46,
  ZERO = 48,
  NINE = 57,
  EQUALS = 61,
  BACKSLASH = 92;

/** Where a name ends: the measurement at a comma or space; keys and tag values also at `=`. */
const MEASUREMENT = 0, KEY = 1;
type NameKind = typeof MEASUREMENT | typeof KEY;

/**
 * Parses a line-protocol body line by line, handing each line's point or refusal to `sink` in
 * order. Never throws for what the body holds: every problem is a line's refusal.
 *
 * @param body The body's bytes (already inflated).
 * @param sink Receives the lines.
 * @param options The precision of the timestamps.
 * @returns How many lines were points and how many were refused.
 *
 * @example Usage
 * ```ts
 * import { type LinePoint, parseLineProtocol } from "./line_protocol.ts";
 * import assert from "node:assert/strict";
 *
 * const points: LinePoint[] = [];
 * const counts = parseLineProtocol(new TextEncoder().encode("# a comment\nroof open=true 1700000000\n"), {
 *   point: (p) => points.push(p),
 *   refuse: () => {},
 * }, { precision: "s" });
 * assert.deepEqual(counts, { points: 1, refused: 0 });
 * assert.equal(points[0]!.timeMs, 1_700_000_000_000);
 * ```
 */
export function parseLineProtocol(
  body: Uint8Array,
  sink: LineSink,
  options: LineProtocolOptions = {},
): { points: number; refused: number } {
  const parser = new LineParser(sink, options.precision ?? "ns");
  let text: string | undefined;
  try {
    text = strictUtf8.decode(body);
  } catch {
    text = undefined;
  }
  if (text !== undefined) parser.text(text, 1);
  else parser.invalidUtf8(body);
  return { points: parser.points, refused: parser.refused };
}

/**
 * Parses a line-protocol body into arrays: {@linkcode parseLineProtocol} for tests and small
 * bodies.
 *
 * @param body The body, as text or bytes.
 * @param options The precision of the timestamps.
 * @returns The points and the refusals, each in line order.
 *
 * @example Usage
 * ```ts
 * import { parseLines } from "./line_protocol.ts";
 * import assert from "node:assert/strict";
 *
 * const { points } = parseLines('my\\ room,door\\=north=a\\,b t=1i,s="say \\"hi\\""');
 * assert.equal(points[0]!.measurement, "my room");
 * assert.deepEqual(points[0]!.tags, { "door=north": "a,b" });
 * assert.deepEqual(points[0]!.fields, { t: 1, s: 'say "hi"' });
 * ```
 */
export function parseLines(
  body: string | Uint8Array,
  options: LineProtocolOptions = {},
): { points: LinePoint[]; refusals: LineRefusal[] } {
  const points: LinePoint[] = [];
  const refusals: LineRefusal[] = [];
  const bytes = typeof body === "string" ? new TextEncoder().encode(body) : body;
  parseLineProtocol(
    bytes,
    { point: (p) => points.push(p), refuse: (r) => refusals.push(r) },
    options,
  );
  return { points, refusals };
}

// deno-lint-ignore no-control-regex
const CONTROL = /[\u0000-\u001f\u007f]/g;

/** The start of a line as a refusal quotes it: at most 80 characters, control characters visible. */
function excerpt(line: string): string {
  // Not between the two halves of a surrogate pair (an emoji), which would quote half a character.
  const at = (line.charCodeAt(79) & 0xfc00) === 0xd800 ? 79 : 80;
  const cut = line.length > 80 ? `${line.slice(0, at)}…` : line;
  return cut.replace(
    CONTROL,
    (c) => `\\u${c.charCodeAt(0).toString(16).padStart(4, "0")}`,
  );
}

/** Sets an own property, `__proto__` included (an assignment would set the prototype). */
function setOwn<T>(object: Record<string, T>, key: string, value: T): void {
  if (key === "__proto__") {
    Object.defineProperty(object, key, {
      value,
      enumerable: true,
      writable: true,
      configurable: true,
    });
  } else object[key] = value;
}

/** 10^0 to 10^15, each an exact double. */
const POWERS_OF_TEN: readonly number[] = [
  1e0,
  1e1,
  1e2,
  1e3,
  1e4,
  1e5,
  1e6,
  1e7,
  1e8,
  1e9,
  1e10,
  1e11,
  1e12,
  1e13,
  1e14,
  1e15,
];

function isDigit(c: number): boolean {
  return c >= ZERO && c <= NINE;
}

/** The parser of one body: the line being read, its position, and the counts. */
class LineParser {
  points = 0;
  refused = 0;
  #sink: LineSink;
  #scale: { digitsBelowMs: number; msPerUnit: number };
  /** The text being read, the position in it, the end of the current line. */
  #s = "";
  #i = 0;
  #end = 0;
  /** Whether the text holds a NUL anywhere: only then is each line searched for one. */
  #hasNul = false;
  /** Why the current line is refused, once known. */
  #reason: string | undefined;
  /** The last measurement that passed the event type's checks. */
  #validMeasurement: string | undefined;
  /** The tags of the last line that had some, and their text as written (from the first comma). */
  #lastTags: Record<string, string> | undefined;
  #lastTagsText: string | undefined;

  constructor(sink: LineSink, precision: LinePrecision) {
    this.#sink = sink;
    this.#scale = SCALE[precision];
  }

  /** Reads every line of `text`, the first being line `firstLine`. */
  text(text: string, firstLine: number): void {
    this.#s = text;
    this.#hasNul = text.indexOf("\0") !== -1;
    let line = firstLine;
    let start = 0;
    while (start < text.length) {
      let end = text.indexOf("\n", start);
      if (end === -1) end = text.length;
      this.#line(start, end, line);
      start = end + 1;
      line++;
    }
  }

  /** A body that is not UTF-8 throughout: each line decoded alone, the bad ones refused. */
  invalidUtf8(body: Uint8Array): void {
    let line = 1;
    let start = 0;
    while (start < body.length) {
      let end = body.indexOf(LF, start);
      if (end === -1) end = body.length;
      const bytes = body.subarray(start, end);
      let text: string | undefined;
      try {
        text = strictUtf8.decode(bytes);
      } catch {
        this.refused++;
        this.#sink.refuse({
          line,
          text: excerpt(lenientUtf8.decode(bytes)),
          reason: "the line is not valid UTF-8; send line protocol as UTF-8 text",
        });
      }
      if (text !== undefined) this.text(text, line);
      start = end + 1;
      line++;
    }
  }

  /** Reads the line `[start, end)` of the text: skips it, or hands on its point or refusal. */
  #line(start: number, end: number, line: number): void {
    const s = this.#s;
    if (end > start && s.charCodeAt(end - 1) === CR) end--;
    let i = start;
    while (i < end && (s.charCodeAt(i) === SPACE || s.charCodeAt(i) === TAB)) i++;
    if (i === end || s.charCodeAt(i) === HASH) return; // blank, or a comment
    this.#i = i;
    this.#end = end;
    this.#reason = undefined;
    const point = this.#hasNul && this.#nulAt(i, end) ? undefined : this.#point(line);
    if (point !== undefined) {
      this.points++;
      this.#sink.point(point);
      return;
    }
    this.refused++;
    this.#sink.refuse({
      line,
      text: excerpt(s.slice(i, end)),
      reason: this.#reason ?? "the line has a NUL byte; line protocol is text",
    });
  }

  #nulAt(start: number, end: number): boolean {
    for (let i = start; i < end; i++) if (this.#s.charCodeAt(i) === 0) return true;
    return false;
  }

  /** Refuses the current line; returns `undefined` for the caller to return. */
  #fail(reason: string): undefined {
    this.#reason = reason;
    return undefined;
  }

  /** Parses the current line from `#i` to `#end`. */
  #point(line: number): LinePoint | undefined {
    const s = this.#s, end = this.#end;
    const measurement = this.#name(MEASUREMENT);
    if (measurement === "") return this.#fail("missing measurement");
    if (this.#i >= end) return this.#fail("missing fields");
    if (measurement !== this.#validMeasurement) {
      // The lines of a body mostly share a measurement: it is checked once while they do.
      const typeProblem = checkEventType(measurement);
      if (typeProblem !== undefined) {
        return this.#fail(
          `the measurement is not a valid event type: ${typeProblem.replace('"type"', "it")}`,
        );
      }
      if (measurement.startsWith(RESERVED_TYPE_PREFIX)) {
        return this.#fail(reservedTypeProblem(measurement));
      }
      this.#validMeasurement = measurement;
    }
    let tags: Record<string, string> | undefined;
    let tagCount = 0;
    const tagsFrom = this.#i;
    const lastTags = this.#lastTagsText;
    if (
      lastTags !== undefined && s.startsWith(lastTags, tagsFrom) &&
      s.charCodeAt(tagsFrom + lastTags.length) === SPACE
    ) {
      // The same tags, written the same way, as the line before: read the same, so given the
      // same (a body's lines mostly share theirs).
      tags = this.#lastTags;
      this.#i = tagsFrom + lastTags.length;
    }
    while (s.charCodeAt(this.#i) === COMMA) {
      this.#i++;
      const key = this.#name(KEY);
      if (key === "") return this.#fail("missing tag key");
      if (s.charCodeAt(this.#i) !== EQUALS) {
        return this.#fail(`missing tag value for tag key "${key}"`);
      }
      this.#i++;
      const value = this.#name(KEY);
      if (s.charCodeAt(this.#i) === EQUALS) {
        return this.#fail(`invalid tag format: an unescaped "=" in the value of tag "${key}"`);
      }
      if (value === "") return this.#fail(`missing tag value for tag key "${key}"`);
      tags ??= {};
      if (Object.hasOwn(tags, key)) return this.#fail(`duplicate tags: "${key}" is given twice`);
      if (++tagCount > MAX_LINE_TAGS) {
        return this.#fail(`the line has more than ${MAX_LINE_TAGS} tags`);
      }
      setOwn(tags, key, value);
    }
    if (this.#i >= end) return this.#fail("missing fields");
    if (tags !== undefined && tags !== this.#lastTags) {
      this.#lastTags = tags;
      this.#lastTagsText = s.slice(tagsFrom, this.#i);
    }
    this.#skipBlanks(); // the space after the measurement and tags, and any more
    if (this.#i >= end) return this.#fail("missing fields");
    const fields: Record<string, LineFieldValue> = {};
    let fieldCount = 0;
    while (true) {
      const key = this.#name(KEY);
      if (key === "") return this.#fail("missing field key");
      if (s.charCodeAt(this.#i) !== EQUALS) {
        return this.#fail(`invalid field format: field key "${key}" has no "=" and value`);
      }
      this.#i++;
      const value = this.#fieldValue(key);
      if (value === undefined) return undefined;
      if (++fieldCount > MAX_LINE_FIELDS) {
        return this.#fail(`the line has more than ${MAX_LINE_FIELDS} fields`);
      }
      setOwn(fields, key, value);
      if (s.charCodeAt(this.#i) !== COMMA) break;
      this.#i++;
    }
    this.#skipBlanks();
    let timeMs: number | undefined;
    if (this.#i < end) {
      timeMs = this.#timestamp();
      if (timeMs === undefined) return undefined;
      this.#skipBlanks();
      if (this.#i < end) return this.#fail("invalid point: text after the timestamp");
    }
    return { line, measurement, tags, fields, timeMs };
  }

  #skipBlanks(): void {
    const s = this.#s, end = this.#end;
    let i = this.#i;
    while (i < end && (s.charCodeAt(i) === SPACE || s.charCodeAt(i) === TAB)) i++;
    this.#i = i;
  }

  /**
   * Reads a name up to its unescaped end (a comma or a space; for keys and tag values also `=`),
   * unescaped; `#i` is left on the character that ended it.
   */
  #name(kind: NameKind): string {
    const s = this.#s, end = this.#end, start = this.#i;
    let i = start;
    let out: string | undefined; // built only when the name has an escape
    let from = start;
    while (i < end) {
      const c = s.charCodeAt(i);
      if (c === COMMA || c === SPACE || (c === EQUALS && kind === KEY)) break;
      if (c === BACKSLASH && i + 1 < end) {
        const next = s.charCodeAt(i + 1);
        if (
          next === BACKSLASH || next === COMMA || next === SPACE ||
          (next === EQUALS && kind === KEY)
        ) {
          out = (out ?? "") + s.slice(from, i);
          from = i + 1; // the escaped character is kept, the backslash dropped
          i += 2;
          continue;
        }
      }
      i++;
    }
    this.#i = i;
    return out === undefined ? s.slice(start, i) : out + s.slice(from, i);
  }

  /** Reads a field value at `#i`: a string, a number or a boolean. */
  #fieldValue(key: string): LineFieldValue | undefined {
    const s = this.#s, end = this.#end, start = this.#i;
    if (start >= end) return this.#fail(`missing field value for field "${key}"`);
    const first = s.charCodeAt(start);
    if (first === QUOTE) return this.#stringValue(key);
    let i = start;
    while (i < end) {
      const c = s.charCodeAt(i);
      if (c === COMMA || c === SPACE || c === TAB) break;
      i++;
    }
    this.#i = i;
    if (i === start) return this.#fail(`missing field value for field "${key}"`);
    if (isDigit(first) || first === MINUS || first === DOT) return this.#number(key, start, i);
    const token = s.slice(start, i);
    switch (token) {
      case "t":
      case "T":
      case "true":
      case "True":
      case "TRUE":
        return true;
      case "f":
      case "F":
      case "false":
      case "False":
      case "FALSE":
        return false;
    }
    return this.#fail(
      `invalid field value ${
        JSON.stringify(token.slice(0, 40))
      } for field "${key}": a string needs double quotes, a boolean is t, true, f or false, a number is written like 1.5, 2i or 3u`,
    );
  }

  /** A double-quoted string: `\"` is a quote, `\\` a backslash, any other backslash itself. */
  #stringValue(key: string): string | undefined {
    const s = this.#s, end = this.#end;
    let i = this.#i + 1;
    let from = i;
    let out: string | undefined;
    while (i < end) {
      const c = s.charCodeAt(i);
      if (c === QUOTE) break;
      if (c === BACKSLASH && i + 1 < end) {
        const next = s.charCodeAt(i + 1);
        if (next === QUOTE || next === BACKSLASH) {
          out = (out ?? "") + s.slice(from, i);
          from = i + 1;
          i += 2;
          continue;
        }
      }
      i++;
    }
    if (i >= end) return this.#fail(`unbalanced quotes in the value of field "${key}"`);
    const value = out === undefined ? s.slice(from, i) : out + s.slice(from, i);
    i++; // the closing quote
    const after = i < end ? s.charCodeAt(i) : COMMA;
    if (after !== COMMA && after !== SPACE && after !== TAB) {
      return this.#fail(`invalid field format: text after the closing quote of field "${key}"`);
    }
    this.#i = i;
    return value;
  }

  /** A float, an integer (`i`) or an unsigned integer (`u`) in `[start, end)`. */
  #number(key: string, start: number, end: number): number | undefined {
    const s = this.#s;
    const last = s.charCodeAt(end - 1);
    if (last === 0x69 /* i */ || last === 0x75 /* u */) {
      const unsigned = last === 0x75;
      let i = start;
      const negative = s.charCodeAt(i) === MINUS;
      if (negative) i++;
      const digitsFrom = i;
      let value = 0;
      for (; i < end - 1; i++) {
        const c = s.charCodeAt(i);
        if (!isDigit(c)) return this.#badNumber(key, start, end);
        value = value * 10 + (c - ZERO);
      }
      if (i === digitsFrom) return this.#badNumber(key, start, end);
      if (unsigned && negative) {
        return this.#fail(
          `invalid number for field "${key}": an unsigned integer (u) cannot be negative`,
        );
      }
      if (Number.isSafeInteger(value)) return negative ? -value : value;
      return this.#fail(
        this.#bigIntegerProblem(key, s.slice(digitsFrom, end - 1), negative, unsigned),
      );
    }
    // A float: -?(digits[.digits]|.digits)([eE][+-]?digits)?
    let i = start;
    const negative = s.charCodeAt(i) === MINUS;
    if (negative) i++;
    let mantissa = 0;
    // The digits as an integer, and how many of them follow the dot.
    let digits = 0;
    let fraction = 0;
    while (i < end && isDigit(s.charCodeAt(i))) {
      digits = digits * 10 + (s.charCodeAt(i) - ZERO);
      i++, mantissa++;
    }
    if (i < end && s.charCodeAt(i) === DOT) {
      i++;
      while (i < end && isDigit(s.charCodeAt(i))) {
        digits = digits * 10 + (s.charCodeAt(i) - ZERO);
        i++, mantissa++, fraction++;
      }
    }
    if (mantissa === 0) return this.#badNumber(key, start, end);
    if (i === end && mantissa <= 15) {
      // Up to 15 digits are an exact integer and 10^fraction an exact power: their quotient is
      // the correctly rounded double, the same as Number() of the text.
      const value = fraction === 0 ? digits : digits / POWERS_OF_TEN[fraction]!;
      return negative ? -value : value;
    }
    if (i < end && (s.charCodeAt(i) | 0x20) === 0x65 /* e */) {
      i++;
      if (i < end && (s.charCodeAt(i) === 0x2b /* + */ || s.charCodeAt(i) === MINUS)) i++;
      const expFrom = i;
      while (i < end && isDigit(s.charCodeAt(i))) i++;
      if (i === expFrom) return this.#badNumber(key, start, end);
    }
    if (i !== end) return this.#badNumber(key, start, end);
    const value = Number(s.slice(start, end));
    if (!Number.isFinite(value)) {
      return this.#fail(
        `invalid float for field "${key}": ${
          s.slice(start, end).slice(0, 40)
        } is beyond a 64-bit float`,
      );
    }
    return value;
  }

  #badNumber(key: string, start: number, end: number): undefined {
    return this.#fail(
      `invalid number ${
        JSON.stringify(this.#s.slice(start, end).slice(0, 40))
      } for field "${key}": write a float like -1.5 or 2e3, an integer like 2i, an unsigned integer like 3u`,
    );
  }

  /** Why an integer beyond 2^53 - 1 is refused: past the 64-bit range, or past JSON's exact one. */
  #bigIntegerProblem(key: string, digits: string, negative: boolean, unsigned: boolean): string {
    const trimmed = digits.replace(/^0+(?=\d)/, "");
    const limit = unsigned
      ? "18446744073709551615"
      : negative
      ? "9223372036854775808"
      : "9223372036854775807";
    const beyond64 = trimmed.length > limit.length ||
      (trimmed.length === limit.length && trimmed > limit);
    const shown = `${negative ? "-" : ""}${trimmed.slice(0, 40)}${unsigned ? "u" : "i"}`;
    return beyond64
      ? `invalid number for field "${key}": ${shown} is out of the range of a 64-bit ${
        unsigned ? "unsigned " : ""
      }integer`
      : `integer field "${key}" is ${shown}, beyond ±9007199254740991, the largest integer a JSON number holds exactly; send it as a float (without the ${
        unsigned ? "u" : "i"
      }) or as a string`;
  }

  /** The timestamp at `#i`, in milliseconds at the body's precision. */
  #timestamp(): number | undefined {
    const s = this.#s, end = this.#end;
    let i = this.#i;
    const negative = s.charCodeAt(i) === MINUS;
    if (negative) i++;
    const from = i;
    while (i < end && isDigit(s.charCodeAt(i))) i++;
    const to = i;
    this.#i = i;
    if (to === from || (i < end && s.charCodeAt(i) !== SPACE && s.charCodeAt(i) !== TAB)) {
      return this.#fail(
        "bad timestamp: write an integer, such as 1700000000000000000 for nanoseconds",
      );
    }
    const { digitsBelowMs, msPerUnit } = this.#scale;
    const whole = Math.max(from, to - digitsBelowMs);
    let lead = from;
    while (lead < whole && s.charCodeAt(lead) === ZERO) lead++;
    if (whole - lead > 16) {
      return this.#fail("timestamp out of range: InfluxDB's range is 1677-09-21 to 2262-04-11");
    }
    let ms = 0;
    for (let k = lead; k < whole; k++) ms = ms * 10 + (s.charCodeAt(k) - ZERO);
    let below = false;
    for (let k = whole; k < to; k++) if (s.charCodeAt(k) !== ZERO) below = true;
    ms *= msPerUnit;
    // Truncated toward the past: -1 ns is the millisecond before the epoch.
    if (negative) ms = -ms - (below ? 1 : 0) + 0;
    if (ms > MAX_TIME_MS || ms < -MAX_TIME_MS - 1) {
      return this.#fail("timestamp out of range: InfluxDB's range is 1677-09-21 to 2262-04-11");
    }
    return ms;
  }
}
