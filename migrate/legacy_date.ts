/**
 * Legacy `date` strings turned into the envelope's `ts` (docs/migration.md), on the hot path
 * without `Temporal` or exceptions.
 *
 * @module
 */

import { daysInMonth } from "../wire/event.ts";
import { clip } from "./errors.ts";

const LEGACY_DATE = /^\d{4}-\d{2}-\d{2}[T ]\d{2}:\d{2}:\d{2}(?:\.\d{1,9})?(?:Z|[+-]\d{2}:\d{2})?$/;

/** Why a legacy date cannot be converted; `syntax` when it does not even have the shape. */
export interface DateProblem {
  readonly syntax: boolean;
  readonly reason: string;
}

function digits2(s: string, i: number): number {
  return (s.charCodeAt(i) - 48) * 10 + s.charCodeAt(i + 1) - 48;
}

/**
 * Days since 1970-01-01 of a proleptic Gregorian date (H. Hinnant's days_from_civil).
 *
 * @param year The year, for example 2026.
 * @param month The month, 1 to 12.
 * @param day The day of the month, from 1.
 * @returns Days since the epoch, negative before it.
 *
 * @example Usage
 * ```ts
 * import { daysFromCivil } from "./legacy_date.ts";
 * import assert from "node:assert/strict";
 *
 * assert.equal(daysFromCivil(1970, 1, 2), 1);
 * assert.equal(daysFromCivil(2026, 3, 5) * 86_400_000, Date.parse("2026-03-05T00:00:00Z"));
 * ```
 */
export function daysFromCivil(year: number, month: number, day: number): number {
  const y = month <= 2 ? year - 1 : year;
  const era = Math.floor(y / 400);
  const yoe = y - era * 400;
  const doy = Math.floor((153 * (month + (month > 2 ? -3 : 9)) + 2) / 5) + day - 1;
  const doe = yoe * 365 + Math.floor(yoe / 4) - Math.floor(yoe / 100) + doy;
  return era * 146097 + doe - 719468;
}

/**
 * {@linkcode legacyDateToTs} for the hot path: returns the problem instead of throwing. No
 * `Temporal`, and no `Date` for zone-less and UTC dates.
 *
 * @param s The legacy date.
 * @returns The UTC timestamp, or why there is none.
 *
 * @example Usage
 * ```ts
 * import { convertDate } from "./legacy_date.ts";
 * import assert from "node:assert/strict";
 *
 * assert.equal(convertDate("2026-03-05 22:10:00Z"), "2026-03-05T22:10:00.000Z");
 * assert.equal(typeof convertDate("2026-02-30 00:00:00"), "object");
 * ```
 */
export function convertDate(s: string): string | DateProblem {
  if (!LEGACY_DATE.test(s)) {
    return {
      syntax: true,
      reason: `date "${
        clip(s)
      }" is not YYYY-MM-DD[T ]HH:MM:SS[.fffffffff], optionally ending in Z or ±HH:MM`,
    };
  }
  const year = digits2(s, 0) * 100 + digits2(s, 2);
  const month = digits2(s, 5);
  const day = digits2(s, 8);
  if (year < 1 || month < 1 || month > 12 || day < 1 || day > daysInMonth(year, month)) {
    return { syntax: false, reason: `date "${s}" is not a calendar date` };
  }
  const hour = digits2(s, 11), minute = digits2(s, 14), second = digits2(s, 17);
  if (hour > 23 || minute > 59 || second > 59) {
    return { syntax: false, reason: `date "${s}" has no such time of day` };
  }
  let end = 19;
  let millis = "000";
  if (s.charCodeAt(19) === 46) {
    end = 20;
    while (end < s.length && s.charCodeAt(end) >= 48 && s.charCodeAt(end) <= 57) end++;
    const fraction = s.slice(20, end);
    millis = fraction.length >= 3 ? fraction.slice(0, 3) : fraction.padEnd(3, "0");
  }
  const sign = s.charCodeAt(end); // NaN (no zone), Z, + or -
  if (sign === 43 || sign === 45) {
    const offH = digits2(s, end + 1), offM = digits2(s, end + 4);
    if (offH > 23 || offM > 59) {
      return { syntax: false, reason: `date "${s}" has an impossible UTC offset` };
    }
    const offset = (offH * 60 + offM) * 60_000;
    if (offset !== 0) {
      const epoch = daysFromCivil(year, month, day) * 86_400_000 + hour * 3_600_000 +
        minute * 60_000 + second * 1000 + Number(millis) - (sign === 45 ? -offset : offset);
      const ts = new Date(epoch).toISOString();
      if (ts.length !== 24 || ts < "0001") {
        return { syntax: false, reason: `date "${s}" is outside the years 0001 to 9999 in UTC` };
      }
      return ts;
    }
  }
  return `${s.slice(0, 10)}T${s.slice(11, 19)}.${millis}Z`;
}

/**
 * Converts a legacy `date` string into the envelope's `ts`: UTC, milliseconds, trailing `Z`.
 * Accepts `YYYY-MM-DDTHH:MM:SS[.f{1,9}]` with `T` or a space, optionally ending in `Z` or
 * `±HH:MM`; a date without a zone is UTC. Extra fraction digits are truncated.
 *
 * @param text The legacy date, for example `"2026-03-05 22:10:00.123456"`.
 * @returns The UTC timestamp, for example `"2026-03-05T22:10:00.123Z"`.
 * @throws {SyntaxError} If `text` does not have the legacy date shape.
 * @throws {RangeError} If it names a date, time of day or offset that does not exist
 * (February 30th, 24:00, +25:00) or falls outside the years 0001 to 9999 in UTC.
 *
 * @example Usage
 * ```ts
 * import { legacyDateToTs } from "@obs-utils/telemetry/migrate";
 * import assert from "node:assert/strict";
 *
 * assert.equal(legacyDateToTs("2026-03-05 22:10:00.123456"), "2026-03-05T22:10:00.123Z");
 * assert.equal(legacyDateToTs("2026-03-05T23:30:00-05:00"), "2026-03-06T04:30:00.000Z");
 * assert.throws(() => legacyDateToTs("2026-02-30T00:00:00"), RangeError);
 * ```
 */
export function legacyDateToTs(text: string): string {
  const result = convertDate(text);
  if (typeof result === "string") return result;
  const message = `Cannot convert legacy ${result.reason}`;
  throw result.syntax ? new SyntaxError(message) : new RangeError(message);
}
