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

const TIMESTAMP =
  /^(\d{4})-(\d{2})-(\d{2})T(\d{2}):(\d{2}):(\d{2})(?:\.(\d{1,9}))?(?:(Z)|([+-])(\d{2}):(\d{2}))$/;

/**
 * Parses an ISO 8601 date-time that names its zone (`Z` or `±HH:MM`) and a real calendar date,
 * and returns its instant in epoch milliseconds, truncating extra fraction digits.
 *
 * Stricter than `Date.parse`, which accepts zone-less and impossible dates.
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
  const m = TIMESTAMP.exec(text);
  if (!m) {
    throw new SyntaxError(
      `Cannot parse timestamp "${
        truncate(text)
      }": expected YYYY-MM-DDTHH:MM:SS[.fff] ending in Z or ±HH:MM`,
    );
  }
  const [, y, mo, d, h, mi, s, frac, , sign, oh, om] = m;
  const year = Number(y), month = Number(mo), day = Number(d);
  const hour = Number(h), minute = Number(mi), second = Number(s);
  if (year < 1 || month < 1 || month > 12 || day < 1 || day > daysInMonth(year, month)) {
    throw new RangeError(`Cannot use timestamp "${text}": ${y}-${mo}-${d} is not a calendar date`);
  }
  if (hour > 23 || minute > 59 || second > 59) {
    throw new RangeError(`Cannot use timestamp "${text}": ${h}:${mi}:${s} is not a time of day`);
  }
  let offsetMinutes = 0;
  if (sign !== undefined) {
    const offH = Number(oh), offM = Number(om);
    if (offH > 23 || offM > 59) {
      throw new RangeError(`Cannot use timestamp "${text}": offset ${sign}${oh}:${om} is invalid`);
    }
    offsetMinutes = (sign === "-" ? -1 : 1) * (offH * 60 + offM);
  }
  const millis = frac === undefined ? 0 : Number(frac.slice(0, 3).padEnd(3, "0"));
  const date = new Date(0);
  date.setUTCFullYear(year, month - 1, day); // Date.UTC maps years 0-99 to 1900-1999
  date.setUTCHours(hour, minute, second, millis);
  return date.getTime() - offsetMinutes * 60_000;
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
  const text = new Date(epochMs).toISOString();
  if (text.length !== 24) {
    throw new RangeError(`Cannot format ${epochMs} as a timestamp: years 0001 to 9999 only`);
  }
  return text;
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
