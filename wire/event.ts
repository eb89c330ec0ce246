/**
 * The implementation behind the `event.ts` entry point; its module documentation is there.
 *
 * @module
 */

/** A JSON object as it appears in `data` and `meta`. */
export type JsonObject = { [key: string]: unknown };

/**
 * One telemetry event as it travels on the wire and sits on disk (docs/http-api.md).
 *
 * @example Usage
 * ```ts
 * import type { Envelope } from "@obs-utils/telemetry/event";
 * const envelope: Envelope = {
 *   seq: 1,
 *   ts: "2026-11-22T03:00:00.000Z",
 *   type: "status",
 *   data: { dome: "open" },
 *   meta: {},
 * };
 * ```
 */
export interface Envelope {
  /** Sequence number, strictly increasing within its stream (the site stream or one run). */
  seq: number;
  /** UTC timestamp, ISO 8601 with milliseconds and a trailing `Z`. */
  ts: string;
  /** Event type chosen by the caller, for example `"weather"`. */
  type: string;
  /** Event payload. */
  data: JsonObject;
  /** Caller metadata; holds `run_id` when the event was recorded during a run. */
  meta: JsonObject;
}

/**
 * A run as the service reports it (docs/http-api.md): `GET /run`, `POST /run/start`, `POST /run/stop`.
 *
 * @example Usage
 * ```ts
 * import type { RunRecord } from "@obs-utils/telemetry/event";
 * const run: RunRecord = {
 *   run_id: "001",
 *   run_dir: "/srv/telemetry/001",
 *   started_at: "2026-11-21T23:00:00.000Z",
 *   stopped_at: null,
 *   events: 0,
 *   meta: { target: "M31" },
 * };
 * ```
 */
export interface RunRecord {
  /** Identifier of the run, stamped into `meta.run_id` of its events. */
  run_id: string;
  /** Absolute path of the run directory holding `telemetry.ndjson`. */
  run_dir: string;
  /** When the run started (UTC, milliseconds, `Z`). */
  started_at: string;
  /** When it stopped, or `null` while active. */
  stopped_at: string | null;
  /** Events written to the run stream since this start. */
  events: number;
  /** The `meta` object sent to `POST /run/start`, as given. */
  meta: JsonObject;
}

/**
 * The minimal answer of `POST /events` (docs/http-api.md), asked for with
 * `Prefer: return=minimal`: how many events were accepted, and the seqs of the first and the last
 * of them in the stream they went to (the run stream during a run, else the site stream). A
 * batch's events have consecutive seqs, so `last_seq - first_seq + 1 === accepted`; both are
 * `null` for an empty batch.
 *
 * @example Usage
 * ```ts
 * import type { BatchSummary } from "@obs-utils/telemetry/event";
 * const answer: BatchSummary = { accepted: 500, first_seq: 1201, last_seq: 1700 };
 * ```
 */
export interface BatchSummary {
  /** How many events were accepted. */
  accepted: number;
  /** The seq of the first, or `null` when there were none. */
  first_seq: number | null;
  /** The seq of the last, or `null` when there were none. */
  last_seq: number | null;
}

/** The longest event type the service accepts, in UTF-16 code units (docs/http-api.md). */
export const MAX_TYPE_LENGTH = 128;

/**
 * Any field name {@linkcode TelemetryEvent.get} answers for: the five envelope fields and the
 * legacy aliases `_id` and `date`.
 */
export type TelemetryEventField = "seq" | "ts" | "type" | "data" | "meta" | "_id" | "date";

/** Field names of the envelope, in canonical order. */
const ENVELOPE_KEYS: readonly TelemetryEventField[] = ["seq", "ts", "type", "data", "meta"];
/** Legacy aliases kept for code written against the old file database (docs/http-api.md). */
const ALIAS_KEYS: readonly TelemetryEventField[] = ["_id", "date"];

// Unicode Cc: C0 controls, DEL and C1 controls.
// deno-lint-ignore no-control-regex
const CONTROL_CHARS = /[\u0000-\u001f\u007f-\u009f]/;

/**
 * Checks an event type against the service's rules (docs/http-api.md) and explains the first
 * problem found.
 *
 * @param type The candidate event type.
 * @returns `undefined` when the type is acceptable, otherwise a sentence saying what to change.
 *
 * @example Usage
 * ```ts
 * import { checkEventType } from "@obs-utils/telemetry/event";
 * import assert from "node:assert/strict";
 *
 * assert.equal(checkEventType("weather"), undefined);
 * assert.match(checkEventType("")!, /1 to 128 characters/);
 * ```
 */
export function checkEventType(type: unknown): string | undefined {
  if (typeof type !== "string") {
    return `"type" must be a string such as "weather", not ${describe(type)}.`;
  }
  if (type.length === 0 || type.length > MAX_TYPE_LENGTH) {
    return `"type" must be 1 to ${MAX_TYPE_LENGTH} characters long; it has ${type.length}.`;
  }
  if (!type.isWellFormed()) {
    return `"type" contains an unpaired UTF-16 surrogate; send well-formed Unicode.`;
  }
  if (CONTROL_CHARS.test(type)) {
    return `"type" contains a control character; use printable characters only.`;
  }
  if (type === "." || type === "..") {
    // URLs collapse these path segments, so GET /current/{type} could never address them.
    return `"type" cannot be "." or ".."; use a name such as "weather".`;
  }
  return undefined;
}

/** Event types starting with this are the service's own, such as `telemetry.safety` (docs/safety.md). */
export const RESERVED_TYPE_PREFIX = "telemetry.";

/**
 * Why a client may not post, and a migration may not write, an event of a reserved type
 * (docs/safety.md): only the service writes them, so a reader can trust them.
 *
 * @param type The type.
 * @returns The sentence for the problem's `detail`.
 *
 * @example Usage
 * ```ts
 * import { reservedTypeProblem } from "./event.ts";
 * import assert from "node:assert/strict";
 *
 * assert.match(reservedTypeProblem("telemetry.safety"), /is reserved/);
 * ```
 */
export function reservedTypeProblem(type: string): string {
  return `"type" ${
    JSON.stringify(type.slice(0, 140))
  } is reserved: types starting with "${RESERVED_TYPE_PREFIX}" are written by the service itself (such as telemetry.safety); choose another type name.`;
}

/**
 * Parses an ISO 8601 date-time that names its zone (`Z` or `±HH:MM`) and a real calendar date,
 * and returns its instant in epoch milliseconds, truncating extra fraction digits.
 *
 * Stricter than `Date.parse`, which accepts zone-less and impossible dates. The form accepted is
 * `YYYY-MM-DDTHH:MM:SS`, then optionally `.` and 1 to 9 digits, then `Z` or `±HH:MM`, with ASCII
 * digits only; it is read character by character, without a regular expression or a `Date`.
 *
 * @param text The timestamp, for example `"2026-11-22T03:00:00.123456+01:00"`.
 * @returns Milliseconds since the Unix epoch.
 * @throws {SyntaxError} If `text` is not an ISO 8601 date-time with a zone.
 * @throws {RangeError} If a field is out of range (February 30th, hour 24, offset 25:00).
 *
 * @example Usage
 * ```ts
 * import { parseTimestamp } from "@obs-utils/telemetry/event";
 * import assert from "node:assert/strict";
 *
 * assert.equal(parseTimestamp("1970-01-01T01:00:00.0019+01:00"), 1);
 * assert.throws(() => parseTimestamp("2026-02-30T00:00:00Z"), RangeError);
 * assert.throws(() => parseTimestamp("2026-01-01T00:00:00"), SyntaxError);
 * ```
 */
export function parseTimestamp(text: string): number {
  const n = text.length;
  // YYYY-MM-DDTHH:MM:SS: 19 characters, and at least `Z` after them.
  const yHi = n >= 20 ? twoDigits(text, 0) : -1, yLo = n >= 20 ? twoDigits(text, 2) : -1;
  const month = twoDigits(text, 5), day = twoDigits(text, 8);
  const hour = twoDigits(text, 11), minute = twoDigits(text, 14), second = twoDigits(text, 17);
  let at = 19;
  let millis = 0;
  let ok = yHi >= 0 && yLo >= 0 && month >= 0 && day >= 0 && hour >= 0 && minute >= 0 &&
    second >= 0 && text.charCodeAt(4) === 45 /* - */ && text.charCodeAt(7) === 45 &&
    text.charCodeAt(10) === 84 /* T */ && text.charCodeAt(13) === 58 /* : */ &&
    text.charCodeAt(16) === 58;
  if (ok && text.charCodeAt(at) === 46 /* . */) {
    const start = ++at;
    while (at < n && at - start < 9) {
      const digit = text.charCodeAt(at) - 48;
      if (digit < 0 || digit > 9) break;
      if (at - start < 3) millis = millis * 10 + digit;
      at++;
    }
    const count = at - start;
    if (count === 0) ok = false;
    else if (count < 3) millis *= count === 1 ? 100 : 10;
  }
  let sign = 0, offH = 0, offM = 0;
  if (ok) {
    const zone = text.charCodeAt(at);
    if (zone === 90 /* Z */ && at + 1 === n) {
      // UTC
    } else if ((zone === 43 /* + */ || zone === 45 /* - */) && at + 6 === n) {
      sign = zone === 45 ? -1 : 1;
      offH = twoDigits(text, at + 1);
      offM = twoDigits(text, at + 4);
      ok = offH >= 0 && offM >= 0 && text.charCodeAt(at + 3) === 58;
    } else ok = false;
  }
  if (!ok) {
    throw new SyntaxError(
      `Cannot parse timestamp "${
        truncate(text)
      }": expected YYYY-MM-DDTHH:MM:SS[.fff] ending in Z or ±HH:MM`,
    );
  }
  const year = yHi * 100 + yLo;
  if (year < 1 || month < 1 || month > 12 || day < 1 || day > daysInMonth(year, month)) {
    throw new RangeError(
      `Cannot use timestamp "${text}": ${text.slice(0, 4)}-${text.slice(5, 7)}-${
        text.slice(8, 10)
      } is not a calendar date`,
    );
  }
  if (hour > 23 || minute > 59 || second > 59) {
    throw new RangeError(
      `Cannot use timestamp "${text}": ${text.slice(11, 13)}:${text.slice(14, 16)}:${
        text.slice(17, 19)
      } is not a time of day`,
    );
  }
  if (sign !== 0 && (offH > 23 || offM > 59)) {
    throw new RangeError(
      `Cannot use timestamp "${text}": offset ${text.slice(at, at + 3)}:${
        text.slice(at + 4, at + 6)
      } is invalid`,
    );
  }
  const ms = daysFromCivil(year, month, day) * DAY_MS + hour * 3_600_000 + minute * 60_000 +
    second * 1000 + millis;
  return sign === 0 ? ms : ms - sign * (offH * 60 + offM) * 60_000;
}

/**
 * Tells whether `text` is a `ts` exactly as the service writes it (`YYYY-MM-DDTHH:MM:SS.mmmZ`,
 * a real date and time of day, years 0001 to 9999): then it is its own normal form.
 */
function isCanonicalTimestamp(text: string): boolean {
  if (text.length !== 24) return false;
  const yHi = twoDigits(text, 0), yLo = twoDigits(text, 2);
  const month = twoDigits(text, 5), day = twoDigits(text, 8);
  const hour = twoDigits(text, 11), minute = twoDigits(text, 14), second = twoDigits(text, 17);
  const msHi = twoDigits(text, 20), msLo = text.charCodeAt(22) - 48;
  return yHi >= 0 && yLo >= 0 && (yHi > 0 || yLo > 0) && month >= 1 && month <= 12 &&
    day >= 1 && day <= daysInMonth(yHi * 100 + yLo, month) && hour >= 0 && hour <= 23 &&
    minute >= 0 && minute <= 59 && second >= 0 && second <= 59 && msHi >= 0 && msLo >= 0 &&
    msLo <= 9 && text.charCodeAt(4) === 45 && text.charCodeAt(7) === 45 &&
    text.charCodeAt(10) === 84 && text.charCodeAt(13) === 58 && text.charCodeAt(16) === 58 &&
    text.charCodeAt(19) === 46 && text.charCodeAt(23) === 90;
}

/**
 * The envelope's form of a caller's `ts`: `formatTimestamp(parseTimestamp(text))`, with the
 * same errors. A `ts` already in that form (`"2026-11-22T03:00:00.000Z"`, a real date and time)
 * is answered as it is, the same string, without being parsed into a number and formatted back.
 *
 * @param text The timestamp, for example `"2026-11-22T04:00:00.5+01:00"`.
 * @returns UTC with milliseconds and a trailing `Z`, for example `"2026-11-22T03:00:00.500Z"`.
 * @throws {SyntaxError} If `text` is not an ISO 8601 date-time with a zone.
 * @throws {RangeError} If a field is out of range, or the instant is outside the years 0001 to
 *   9999.
 *
 * @example Usage
 * ```ts
 * import { normalizeTimestamp } from "./event.ts";
 * import assert from "node:assert/strict";
 *
 * assert.equal(normalizeTimestamp("2026-11-22T04:00:00.5+01:00"), "2026-11-22T03:00:00.500Z");
 * assert.equal(normalizeTimestamp("2026-11-22T03:00:00.000Z"), "2026-11-22T03:00:00.000Z");
 * assert.throws(() => normalizeTimestamp("2026-13-01T00:00:00.000Z"), RangeError);
 * ```
 */
export function normalizeTimestamp(text: string): string {
  return isCanonicalTimestamp(text) ? text : formatTimestamp(parseTimestamp(text));
}

/**
 * Formats epoch milliseconds as the envelope's `ts`: UTC, milliseconds, trailing `Z`.
 *
 * @param epochMs Milliseconds since the Unix epoch.
 * @returns For example `"2026-11-22T03:00:00.000Z"`.
 * @throws {RangeError} If `epochMs` is outside the years 0001 to 9999.
 *
 * @example Usage
 * ```ts
 * import { formatTimestamp } from "@obs-utils/telemetry/event";
 * import assert from "node:assert/strict";
 *
 * assert.equal(formatTimestamp(0), "1970-01-01T00:00:00.000Z");
 * ```
 */
export function formatTimestamp(epochMs: number): string {
  if (Number.isInteger(epochMs) && epochMs >= MIN_FORMATTED_MS && epochMs <= MAX_FORMATTED_MS) {
    // Date-free, as `toISOString` would write it (the calendar from days, Howard Hinnant's way).
    const days = Math.floor(epochMs / DAY_MS);
    let rest = epochMs - days * DAY_MS;
    const hour = (rest / 3_600_000) | 0;
    rest -= hour * 3_600_000;
    const minute = (rest / 60_000) | 0;
    rest -= minute * 60_000;
    const second = (rest / 1000) | 0;
    const ms = rest - second * 1000;
    const z = days + 719468;
    const era = Math.floor(z / 146097);
    const doe = z - era * 146097;
    const yoe = Math.floor(
      (doe - Math.floor(doe / 1460) + Math.floor(doe / 36524) - Math.floor(doe / 146096)) / 365,
    );
    const doy = doe - (365 * yoe + Math.floor(yoe / 4) - Math.floor(yoe / 100));
    const mp = Math.floor((5 * doy + 2) / 153);
    const day = doy - Math.floor((153 * mp + 2) / 5) + 1;
    const month = mp < 10 ? mp + 3 : mp - 9;
    const year = yoe + era * 400 + (month <= 2 ? 1 : 0);
    return TWO_DIGITS[(year / 100) | 0]! + TWO_DIGITS[year % 100]! + "-" + TWO_DIGITS[month]! +
      "-" + TWO_DIGITS[day]! + "T" + TWO_DIGITS[hour]! + ":" + TWO_DIGITS[minute]! + ":" +
      TWO_DIGITS[second]! + "." + THREE_DIGITS[ms]! + "Z";
  }
  const text = new Date(epochMs).toISOString();
  if (text.length !== 24) {
    throw new RangeError(`Cannot format ${epochMs} as a timestamp: years 0001 to 9999 only`);
  }
  return text;
}

/** `"00"` to `"99"`: the two-digit fields of a formatted timestamp. */
const TWO_DIGITS: readonly string[] = Array.from(
  { length: 100 },
  (_, i) => (i < 10 ? "0" : "") + i,
);
/** `"000"` to `"999"`: the milliseconds of a formatted timestamp. */
const THREE_DIGITS: readonly string[] = Array.from(
  { length: 1000 },
  (_, i) => (i < 10 ? "00" : i < 100 ? "0" : "") + i,
);
/** 0001-01-01T00:00:00.000Z and 9999-12-31T23:59:59.999Z in epoch milliseconds. */
const MIN_FORMATTED_MS = -62135596800000;
const MAX_FORMATTED_MS = 253402300799999;
const DAY_MS = 86_400_000;

/**
 * The value of the ASCII digits `text[at]` and `text[at + 1]`, or -1 when either is not one
 * (or is past the end).
 */
function twoDigits(text: string, at: number): number {
  const a = text.charCodeAt(at) - 48, b = text.charCodeAt(at + 1) - 48;
  return a >= 0 && a <= 9 && b >= 0 && b <= 9 ? a * 10 + b : -1;
}

/** Days from 1970-01-01 to a date of the proleptic Gregorian calendar, year 0 or later. */
function daysFromCivil(year: number, month: number, day: number): number {
  const y = month <= 2 ? year - 1 : year;
  const era = Math.floor(y / 400);
  const yoe = y - era * 400;
  const doy = Math.floor((153 * (month > 2 ? month - 3 : month + 9) + 2) / 5) + day - 1;
  const doe = yoe * 365 + Math.floor(yoe / 4) - Math.floor(yoe / 100) + doy;
  return era * 146097 + doe - 719468;
}

/**
 * Days in a month of the proleptic Gregorian calendar.
 *
 * @param year The year, for example 2024.
 * @param month The month, 1 to 12.
 * @returns 28 to 31.
 *
 * @example Usage
 * ```ts
 * import { daysInMonth } from "@obs-utils/telemetry/event";
 * import assert from "node:assert/strict";
 *
 * assert.equal(daysInMonth(2024, 2), 29);
 * ```
 */
export function daysInMonth(year: number, month: number): number {
  if (month === 2) return (year % 4 === 0 && year % 100 !== 0) || year % 400 === 0 ? 29 : 28;
  return month === 4 || month === 6 || month === 9 || month === 11 ? 30 : 31;
}

function truncate(text: string, max = 60): string {
  return text.length > max ? `${text.slice(0, max)}…` : text;
}

/**
 * Describes a JSON value's kind for error messages: `"an array"`, `"null"`, `"a number"`.
 *
 * @param value Any value.
 * @returns A short noun phrase.
 *
 * @example Usage
 * ```ts
 * import { describe } from "@obs-utils/telemetry/event";
 * import assert from "node:assert/strict";
 *
 * assert.equal(describe([1]), "an array");
 * ```
 */
export function describe(value: unknown): string {
  if (value === null) return "null";
  if (Array.isArray(value)) return "an array";
  const t = typeof value;
  return t === "object" ? "an object" : t === "undefined" ? "nothing" : `a ${t}`;
}

/**
 * Tells whether a value is a plain JSON object (not an array, not null).
 *
 * @param value Any value.
 * @returns `true` for objects such as `{}` and `{ "a": 1 }`.
 *
 * @example Usage
 * ```ts
 * import { isJsonObject } from "@obs-utils/telemetry/event";
 * import assert from "node:assert/strict";
 *
 * assert.equal(isJsonObject({}), true);
 * assert.equal(isJsonObject([]), false);
 * ```
 */
export function isJsonObject(value: unknown): value is JsonObject {
  return typeof value === "object" && value !== null && !Array.isArray(value);
}

function deepFreezeCopy<T>(value: T): T {
  return deepFreeze(structuredClone(value));
}

function deepFreeze<T>(value: T): T {
  if (typeof value === "object" && value !== null) {
    for (const v of Object.values(value)) deepFreeze(v);
    Object.freeze(value);
  }
  return value;
}

/**
 * An immutable telemetry event, as returned by the client (docs/http-api.md).
 *
 * Fields are readable as properties (`event.seq`), through {@linkcode TelemetryEvent.get}, and
 * through the legacy aliases `_id` (the string form of `seq`) and `date` (equal to `ts`) that
 * code written for the old file database expects; `"_id" in event` is `true`. `data` and `meta`
 * are deep-frozen copies, so nothing can change an event after it was received.
 *
 * @example Usage
 * ```ts
 * import { TelemetryEvent } from "@obs-utils/telemetry/event";
 * import assert from "node:assert/strict";
 *
 * const event = new TelemetryEvent({
 *   seq: 3,
 *   ts: "2026-11-22T03:00:00.000Z",
 *   type: "environment",
 *   data: { humidity: 41 },
 *   meta: { run_id: "001" },
 * });
 * assert.equal(event.get("date"), "2026-11-22T03:00:00.000Z");
 * assert.equal(event["_id"], "3");
 * assert.ok("_id" in event);
 * assert.ok(Object.isFrozen(event.data));
 * ```
 */
export class TelemetryEvent implements Envelope {
  /** Sequence number within the event's stream. */
  readonly seq: number;
  /** UTC timestamp with milliseconds and trailing `Z`. */
  readonly ts: string;
  /** Event type. */
  readonly type: string;
  /** Event payload (deep-frozen). */
  readonly data: Readonly<JsonObject>;
  /** Caller metadata (deep-frozen); `run_id` when recorded during a run. */
  readonly meta: Readonly<JsonObject>;

  /**
   * Builds an event from an envelope, validating it and copying `data` and `meta`.
   *
   * @param envelope The envelope, for example one line of an NDJSON file, parsed.
   * @throws {TypeError} If a field is missing or has the wrong type.
   */
  constructor(envelope: Envelope) {
    const problem = checkEnvelope(envelope);
    if (problem) throw new TypeError(`Cannot build a TelemetryEvent: ${problem}`);
    this.seq = envelope.seq;
    this.ts = envelope.ts;
    this.type = envelope.type;
    this.data = deepFreezeCopy(envelope.data);
    this.meta = deepFreezeCopy(envelope.meta);
    Object.freeze(this);
  }

  /**
   * Validates a parsed JSON value and builds an event from it.
   *
   * @param value A parsed envelope, for example `JSON.parse(line)`.
   * @returns A new immutable event.
   * @throws {TypeError} If `value` is not an envelope; the message names the bad field.
   *
   * @example Usage
   * ```ts
   * import { TelemetryEvent } from "@obs-utils/telemetry/event";
   * import assert from "node:assert/strict";
   *
   * assert.throws(() => TelemetryEvent.fromJSON({ seq: 1 }), TypeError);
   * ```
   */
  static fromJSON(value: unknown): TelemetryEvent {
    if (!isJsonObject(value)) {
      throw new TypeError(
        `Cannot build a TelemetryEvent from ${describe(value)}: expected an object`,
      );
    }
    return new TelemetryEvent(value as unknown as Envelope);
  }

  /** Legacy alias: the string form of {@linkcode TelemetryEvent.seq}. */
  get _id(): string {
    return String(this.seq);
  }

  /** Legacy alias: equal to {@linkcode TelemetryEvent.ts}. */
  get date(): string {
    return this.ts;
  }

  /**
   * Reads a field by name, like a dictionary; legacy aliases included.
   *
   * @param name `seq`, `ts`, `type`, `data`, `meta`, `_id` or `date`.
   * @returns The field's value, or `undefined` for any other name.
   *
   * @example Usage
   * ```ts
   * import { TelemetryEvent } from "@obs-utils/telemetry/event";
   * import assert from "node:assert/strict";
   *
   * const event = new TelemetryEvent({ seq: 1, ts: "2026-11-22T03:00:00.000Z", type: "status", data: {}, meta: {} });
   * assert.equal(event.get("_id"), "1");
   * assert.equal(event.get("nope"), undefined);
   * ```
   */
  get(name: string): unknown {
    return this.has(name) ? this[name as TelemetryEventField] : undefined;
  }

  /**
   * Tells whether `name` is a field of the event (the five envelope fields and the legacy aliases).
   *
   * @param name A field name.
   * @returns `true` for `seq`, `ts`, `type`, `data`, `meta`, `_id` and `date`.
   *
   * @example Usage
   * ```ts
   * import { TelemetryEvent } from "@obs-utils/telemetry/event";
   * import assert from "node:assert/strict";
   *
   * const event = new TelemetryEvent({ seq: 1, ts: "2026-11-22T03:00:00.000Z", type: "status", data: {}, meta: {} });
   * assert.equal(event.has("_id"), true);
   * ```
   */
  has(name: string): name is TelemetryEventField {
    return (ENVELOPE_KEYS as readonly string[]).includes(name) ||
      (ALIAS_KEYS as readonly string[]).includes(name);
  }

  /**
   * The envelope in canonical key order, so `JSON.stringify(event)` is the NDJSON line.
   *
   * @returns A plain envelope sharing this event's frozen `data` and `meta`.
   *
   * @example Usage
   * ```ts
   * import { TelemetryEvent } from "@obs-utils/telemetry/event";
   * import assert from "node:assert/strict";
   *
   * const line = '{"seq":1,"ts":"2026-11-22T03:00:00.000Z","type":"status","data":{},"meta":{}}';
   * assert.equal(JSON.stringify(TelemetryEvent.fromJSON(JSON.parse(line))), line);
   * ```
   */
  toJSON(): Envelope {
    return { seq: this.seq, ts: this.ts, type: this.type, data: this.data, meta: this.meta };
  }

  /**
   * A mutable deep copy of the envelope, for code that wants to change it.
   *
   * @returns A new plain object with the five envelope fields.
   *
   * @example Usage
   * ```ts
   * import { TelemetryEvent } from "@obs-utils/telemetry/event";
   * import assert from "node:assert/strict";
   *
   * const event = new TelemetryEvent({ seq: 1, ts: "2026-11-22T03:00:00.000Z", type: "status", data: { a: 1 }, meta: {} });
   * const dict = event.toDict();
   * dict.data.a = 2;
   * assert.equal(event.data.a, 1);
   * ```
   */
  toDict(): Envelope {
    return structuredClone(this.toJSON());
  }

  /**
   * The NDJSON line for this event (without the trailing newline).
   *
   * @returns `JSON.stringify(this)`.
   *
   * @example Usage
   * ```ts
   * import { TelemetryEvent } from "@obs-utils/telemetry/event";
   * import assert from "node:assert/strict";
   *
   * const event = new TelemetryEvent({ seq: 1, ts: "2026-11-22T03:00:00.000Z", type: "status", data: {}, meta: {} });
   * assert.ok(event.toJSONString().startsWith('{"seq":1,'));
   * ```
   */
  toJSONString(): string {
    return JSON.stringify(this);
  }
}

function checkEnvelope(e: Envelope): string | undefined {
  // The constructor is reachable from untyped JavaScript, so `e` may be anything.
  if (!isJsonObject(e)) return `expected an envelope object, not ${describe(e)}`;
  if (!Number.isSafeInteger(e.seq) || e.seq < 0) {
    return `"seq" must be a non-negative integer, not ${describe(e.seq)}`;
  }
  if (typeof e.ts !== "string") return `"ts" must be a string, not ${describe(e.ts)}`;
  if (typeof e.type !== "string") return `"type" must be a string, not ${describe(e.type)}`;
  if (!isJsonObject(e.data)) return `"data" must be an object, not ${describe(e.data)}`;
  if (!isJsonObject(e.meta)) return `"meta" must be an object, not ${describe(e.meta)}`;
  return undefined;
}
