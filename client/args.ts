/**
 * The client's argument checks and the wire form of an event: every mistake becomes a
 * `TypeError` or `RangeError` naming the method and what to pass, before any request is made.
 *
 * @module
 */

import { checkEventType, describe, isJsonObject, type JsonObject } from "../wire/event.ts";
import type { PostEventOptions } from "./types.ts";

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
