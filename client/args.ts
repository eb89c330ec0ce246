/**
 * The client's argument checks and the wire form of an event: every mistake becomes a
 * `TypeError` or `RangeError` naming the method and what to pass, before any request is made.
 *
 * @module
 */

import { checkEventType, describe, isJsonObject, type JsonObject } from "../wire/event.ts";
import type { EventInput, PostEventOptions, StartRunOptions } from "./types.ts";
import type { FetchFunction } from "./transport.ts";

function noPeriod(sentence: string): string {
  return sentence.replace(/\.$/, "");
}

/** Builds the wire body of one event, throwing TypeError for bad arguments. */
export function toWire(
  type: unknown,
  data: unknown,
  options: Omit<PostEventOptions, "signal">,
  action: string,
): JsonObject {
  const typeProblem = checkEventType(type);
  if (typeProblem) throw new TypeError(`${action}: ${noPeriod(typeProblem)}`);
  if (!isJsonObject(data)) {
    throw new TypeError(
      `${action}: "data" must be a plain JSON object such as {"wind_mps": 2.1}, not ${
        describe(data)
      }`,
    );
  }
  const body: JsonObject = { type, data };
  const { meta, ts, storePermanently, makeCurrent } = options;
  if (meta !== undefined) {
    if (!isJsonObject(meta)) {
      throw new TypeError(`${action}: "meta" must be a plain JSON object, not ${describe(meta)}`);
    }
    body.meta = meta;
  }
  if (ts !== undefined) {
    if (ts instanceof Date) {
      if (Number.isNaN(ts.getTime())) {
        throw new RangeError(`${action}: "ts" is an invalid Date; pass a valid Date or string`);
      }
      body.ts = ts.toISOString();
    } else if (typeof ts === "string") {
      body.ts = ts;
    } else {
      throw new TypeError(
        `${action}: "ts" must be an ISO 8601 string or a Date, not ${describe(ts)}`,
      );
    }
  }
  if (storePermanently !== undefined) {
    if (typeof storePermanently !== "boolean") {
      throw new TypeError(
        `${action}: "storePermanently" must be a boolean, not ${describe(storePermanently)}`,
      );
    }
    body.store_permanently = storePermanently;
  }
  if (makeCurrent !== undefined) {
    if (typeof makeCurrent !== "boolean") {
      throw new TypeError(
        `${action}: "makeCurrent" must be a boolean, not ${describe(makeCurrent)}`,
      );
    }
    body.make_current = makeCurrent;
  }
  return body;
}

export function stringifyBody(value: unknown, action: string): string {
  try {
    return JSON.stringify(value);
  } catch (err) {
    // JSON.stringify throws TypeError for BigInt values and cycles.
    if (err instanceof TypeError) {
      throw new TypeError(`${action}: the value cannot be serialised as JSON (${err.message})`, {
        cause: err,
      });
    }
    throw err;
  }
}

export function checkOptionsObject(options: unknown, action: string): void {
  if (options !== undefined && (typeof options !== "object" || options === null)) {
    throw new TypeError(`${action}: the options must be an object, not ${describe(options)}`);
  }
}

export function checkSignal(signal: unknown, action: string): AbortSignal | undefined {
  if (signal === undefined) return undefined;
  if (!(signal instanceof AbortSignal)) {
    throw new TypeError(`${action}: "signal" must be an AbortSignal, not ${describe(signal)}`);
  }
  return signal;
}

export function checkType(type: unknown, action: string, argument: string): string {
  const problem = checkEventType(type);
  if (problem) throw new TypeError(`${action}: ${noPeriod(problem).replace(/^"type"/, argument)}`);
  return type as string;
}

export function checkDelay(value: unknown, name: string, fallback: number): number {
  if (value === undefined) return fallback;
  if (typeof value !== "number" || Number.isNaN(value) || value < 0) {
    throw new RangeError(
      `Cannot follow the event stream: "${name}" must be a non-negative number of milliseconds, not ${
        String(value)
      }`,
    );
  }
  return value;
}

/** Checks the constructor's token: a header value `fetch` refuses would read like a network error. */
export function checkToken(token: string | undefined): string | undefined {
  if (token !== undefined && (typeof token !== "string" || !/^[\x21-\x7e]+$/.test(token))) {
    throw new TypeError(
      `Cannot create a TelemetryClient: "token" must be a non-empty string of printable ASCII without spaces`,
    );
  }
  return token;
}

/** Checks the constructor's `timeoutMs`: positive, `Infinity` for no limit. */
export function checkTimeout(timeoutMs: unknown): number {
  if (typeof timeoutMs !== "number" || Number.isNaN(timeoutMs) || timeoutMs <= 0) {
    throw new RangeError(
      `Cannot create a TelemetryClient: "timeoutMs" must be a positive number (Infinity for no limit), not ${
        String(timeoutMs)
      }`,
    );
  }
  return timeoutMs;
}

/** Checks the constructor's `fetch`. */
export function checkFetch(fetch: unknown): FetchFunction | undefined {
  if (fetch !== undefined && typeof fetch !== "function") {
    throw new TypeError(
      `Cannot create a TelemetryClient: "fetch" must be a function, not ${describe(fetch)}`,
    );
  }
  return fetch as FetchFunction | undefined;
}

/** The body of `POST /run/start` (docs/http-api.md), throwing TypeError for a bad option. */
export function runStartBody(options: StartRunOptions, action: string): string {
  const body: JsonObject = {};
  const { runId, runDir, meta } = options;
  if (runId !== undefined) {
    if (typeof runId !== "string") {
      throw new TypeError(`${action}: "runId" must be a string, not ${describe(runId)}`);
    }
    body.run_id = runId;
  }
  if (runDir !== undefined) {
    if (typeof runDir !== "string") {
      throw new TypeError(`${action}: "runDir" must be a string, not ${describe(runDir)}`);
    }
    body.run_dir = runDir;
  }
  if (meta !== undefined) {
    if (!isJsonObject(meta)) {
      throw new TypeError(`${action}: "meta" must be a plain JSON object, not ${describe(meta)}`);
    }
    body.meta = meta;
  }
  return stringifyBody(body, action);
}

/** The body of `POST /events`, each item checked; the message names the bad item's index. */
export function eventsBody(items: readonly EventInput[], action: string): string {
  if (!Array.isArray(items)) {
    throw new TypeError(`${action}: "items" must be an array of events, not ${describe(items)}`);
  }
  const wire = items.map((item: unknown, i) => {
    const where = `${action}: items[${i}]`;
    if (!isJsonObject(item)) {
      throw new TypeError(`${where} must be an object {type, data}, not ${describe(item)}`);
    }
    return toWire(item.type, item.data, item as Omit<PostEventOptions, "signal">, where);
  });
  return stringifyBody(wire, action);
}

/** The path of `GET /stream` with its `?type=` filter (docs/http-api.md). */
export function streamPath(types: readonly string[] | undefined, action: string): string {
  let path = "/stream";
  if (types !== undefined) {
    if (!Array.isArray(types)) {
      throw new TypeError(
        `${action}: "types" must be an array of event types, not ${describe(types)}`,
      );
    }
    for (const [i, type] of types.entries()) {
      checkType(type, action, `"types[${i}]"`);
      if (type.includes(",")) {
        throw new TypeError(
          `${action}: "types[${i}]" ${
            JSON.stringify(type)
          } contains a comma, which the ?type= filter cannot carry; follow all types and filter in your code`,
        );
      }
    }
    if (types.length > 0) {
      path += `?type=${types.map((t) => encodeURIComponent(t)).join(",")}`;
    }
  }
  return path;
}

/** The most times a post is sent again when no answer came back. */
const MAX_RETRIES = 10;

/**
 * Checks a `retries` option: how many times a post is sent again after no answer came back.
 *
 * @param value The option as given.
 * @param action What was being done, for the message.
 * @param fallback The value when it is not given.
 * @returns A whole number from 0 to 10.
 * @throws {RangeError} For anything else.
 *
 * @example Usage
 * ```ts
 * import { checkRetries } from "./args.ts";
 * import assert from "node:assert/strict";
 *
 * assert.equal(checkRetries(undefined, "Cannot post", 2), 2);
 * assert.throws(() => checkRetries(-1, "Cannot post", 2), RangeError);
 * ```
 */
export function checkRetries(value: unknown, action: string, fallback: number): number {
  if (value === undefined) return fallback;
  if (typeof value !== "number" || !Number.isInteger(value) || value < 0 || value > MAX_RETRIES) {
    throw new RangeError(
      `${action}: "retries" must be a whole number from 0 to ${MAX_RETRIES}, not ${String(value)}`,
    );
  }
  return value;
}

/**
 * Checks a caller's `idempotencyKey`: 1 to 200 printable ASCII characters, as the service
 * accepts it (docs/http-api.md).
 *
 * @param value The option as given.
 * @param action What was being done, for the message.
 * @returns The key, or `undefined` when none was given.
 * @throws {TypeError} For anything else.
 *
 * @example Usage
 * ```ts
 * import { checkIdempotencyKey } from "./args.ts";
 * import assert from "node:assert/strict";
 *
 * assert.equal(checkIdempotencyKey("batch-17", "Cannot post"), "batch-17");
 * assert.throws(() => checkIdempotencyKey("", "Cannot post"), TypeError);
 * ```
 */
export function checkIdempotencyKey(value: unknown, action: string): string | undefined {
  if (value === undefined) return undefined;
  if (typeof value !== "string" || !/^[\x20-\x7e]{1,200}$/.test(value)) {
    throw new TypeError(
      `${action}: "idempotencyKey" must be 1 to 200 printable ASCII characters, not ${
        describe(value)
      }; leave it out and the client makes one`,
    );
  }
  return value;
}

/**
 * A new idempotency key: `crypto.randomUUID()`, or where a runtime lacks it (a browser page
 * served over plain HTTP) a version 4 UUID made from `crypto.getRandomValues()`.
 *
 * @returns A UUID such as `"3f2c9a4e-5b1d-4c6e-9f0a-7d8e2b1c4a5f"`.
 *
 * @example Usage
 * ```ts
 * import { newIdempotencyKey } from "./args.ts";
 * import assert from "node:assert/strict";
 *
 * assert.match(newIdempotencyKey(), /^[0-9a-f]{8}-[0-9a-f]{4}-4[0-9a-f]{3}-[89ab][0-9a-f]{3}-[0-9a-f]{12}$/);
 * ```
 */
export function newIdempotencyKey(): string {
  if (typeof crypto.randomUUID === "function") return crypto.randomUUID();
  const bytes = crypto.getRandomValues(new Uint8Array(16));
  bytes[6] = (bytes[6]! & 0x0f) | 0x40;
  bytes[8] = (bytes[8]! & 0x3f) | 0x80;
  const hex = Array.from(bytes, (b) => b.toString(16).padStart(2, "0")).join("");
  return `${hex.slice(0, 8)}-${hex.slice(8, 12)}-${hex.slice(12, 16)}-${hex.slice(16, 20)}-${
    hex.slice(20)
  }`;
}
