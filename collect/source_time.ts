/**
 * The measurement time a source states (docs/collect.md, "Measurement time"): the value the `ts`
 * key names, read as `ts_format` says.
 *
 * @module
 */

/** How a source writes its measurement time: the config's `ts_format`. */
export type TsFormat = "iso" | "unix" | "unix_ms";

/** The `ts_format` values, in the order the docs list them. */
export const TS_FORMATS: readonly TsFormat[] = ["iso", "unix", "unix_ms"];

/**
 * Reads a source's measurement time.
 *
 * @param value The value found at `ts`.
 * @param format How it is written: ISO 8601 text with an offset or `Z` (`iso`), seconds since
 *   the epoch (`unix`, a number or numeric text), milliseconds (`unix_ms`).
 * @returns Epoch milliseconds.
 * @throws {RangeError} When the value is not a time in that format; the message says what was found.
 *
 * @example Usage
 * ```ts
 * import { readSourceTime } from "./source_time.ts";
 * import assert from "node:assert/strict";
 *
 * assert.equal(readSourceTime("2026-11-27T01:00:00Z", "iso"), Date.parse("2026-11-27T01:00:00Z"));
 * assert.equal(readSourceTime(1700000000, "unix"), 1_700_000_000_000);
 * assert.throws(() => readSourceTime("yesterday", "iso"), RangeError);
 * ```
 */
export function readSourceTime(value: unknown, format: TsFormat): number {
  let ms: number;
  if (format === "iso") {
    // A time without an offset would be read in whatever zone the collector runs in: refused.
    if (typeof value !== "string" || !/(Z|[+-]\d\d:?\d\d)$/i.test(value)) {
      throw new RangeError(
        `expected ISO 8601 text with Z or an offset, such as "2026-11-27T01:00:00Z", not ${
          show(value)
        }`,
      );
    }
    ms = Date.parse(value);
  } else {
    const n = typeof value === "string" && value.trim() !== "" ? Number(value) : value;
    if (typeof n !== "number") {
      throw new RangeError(`expected a number of ${unit(format)} since 1970, not ${show(value)}`);
    }
    ms = format === "unix" ? n * 1000 : n;
  }
  if (!Number.isFinite(ms) || Math.abs(ms) > 8.64e15) {
    throw new RangeError(`expected a time, not ${show(value)}`);
  }
  return Math.round(ms);
}

function unit(format: TsFormat): string {
  return format === "unix" ? "seconds" : "milliseconds";
}

function show(value: unknown): string {
  const text = JSON.stringify(value) ?? String(value);
  return text.length > 60 ? `${text.slice(0, 57)}...` : text;
}
