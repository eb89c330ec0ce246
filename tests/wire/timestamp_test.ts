/**
 * The Date-free, regex-free `parseTimestamp` and `formatTimestamp`, and the canonical fast path
 * of `normalizeTimestamp`, against the implementations they replaced (a regular expression and
 * `Date`, kept below as the reference): the same answers and the same errors over seeded random
 * and edge inputs.
 */

import assert from "node:assert/strict";
import {
  daysInMonth,
  formatTimestamp,
  normalizeTimestamp,
  parseTimestamp,
} from "../../wire/event.ts";
import { Rng } from "../_shared/fault_util.ts";

// ---------------------------------------------------------------------------------------------
// The reference: wire/event.ts as of 0.6.0, unchanged.

const TIMESTAMP =
  /^(\d{4})-(\d{2})-(\d{2})T(\d{2}):(\d{2}):(\d{2})(?:\.(\d{1,9}))?(?:(Z)|([+-])(\d{2}):(\d{2}))$/;

function truncate(text: string, max = 60): string {
  return text.length > max ? `${text.slice(0, max)}…` : text;
}

function referenceParse(text: string): number {
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
  date.setUTCFullYear(year, month - 1, day);
  date.setUTCHours(hour, minute, second, millis);
  return date.getTime() - offsetMinutes * 60_000;
}

function referenceFormat(epochMs: number): string {
  const text = new Date(epochMs).toISOString();
  if (text.length !== 24) {
    throw new RangeError(`Cannot format ${epochMs} as a timestamp: years 0001 to 9999 only`);
  }
  return text;
}

// ---------------------------------------------------------------------------------------------

/** What a call did: its value, or the class and message of what it threw. */
function outcome(fn: () => unknown): unknown {
  try {
    return { value: fn() };
  } catch (err) {
    return { threw: (err as Error).constructor.name, message: (err as Error).message };
  }
}

function assertSameParse(text: string): void {
  assert.deepEqual(
    outcome(() => parseTimestamp(text)),
    outcome(() => referenceParse(text)),
    `parseTimestamp(${JSON.stringify(text)})`,
  );
  assert.deepEqual(
    outcome(() => normalizeTimestamp(text)),
    outcome(() => referenceFormat(referenceParse(text))),
    `normalizeTimestamp(${JSON.stringify(text)})`,
  );
}

const pad = (n: number, width: number) => String(n).padStart(width, "0");

/** A timestamp-like text with every field drawn around and past its range. */
function randomTimestamp(rng: Rng): string {
  const year = rng.pick([rng.int(0, 9999), rng.int(0, 3), rng.int(9997, 9999), 2024, 2100, 2000]);
  const month = rng.chance(0.9) ? rng.int(1, 12) : rng.int(0, 14);
  const day = rng.chance(0.8) ? rng.int(1, 28) : rng.int(0, 32);
  const hour = rng.chance(0.9) ? rng.int(0, 23) : rng.int(24, 25);
  const minute = rng.chance(0.9) ? rng.int(0, 59) : rng.int(60, 61);
  const second = rng.chance(0.9) ? rng.int(0, 59) : rng.int(60, 61);
  const digits = rng.pick([0, 3, 3, 3, rng.int(0, 11)]);
  const fraction = rng.chance(0.1) && digits === 0
    ? "."
    : digits === 0
    ? ""
    : "." + Array.from({ length: digits }, () => rng.int(0, 9)).join("");
  const zone = rng.pick([
    "Z",
    "Z",
    "z",
    "",
    `${rng.pick(["+", "-"])}${pad(rng.int(0, 25), 2)}:${pad(rng.int(0, 61), 2)}`,
    `+${pad(rng.int(0, 14), 2)}${pad(rng.int(0, 59), 2)}`,
  ]);
  return `${pad(year, 4)}-${pad(month, 2)}-${pad(day, 2)}T${pad(hour, 2)}:${pad(minute, 2)}:${
    pad(second, 2)
  }${fraction}${zone}`;
}

/** Characters a mutation puts in: ASCII digits and separators, and digits that are not ASCII. */
const NOISE = [
  "0",
  "9",
  "-",
  ":",
  ".",
  "T",
  "t",
  "Z",
  "+",
  " ",
  "\n",
  "\u0663", // ARABIC-INDIC DIGIT THREE
  "\uff10", // FULLWIDTH DIGIT ZERO
  "\u{1d7d8}", // MATHEMATICAL DOUBLE-STRUCK DIGIT ZERO
  "\u00b2", // SUPERSCRIPT TWO
  "\u0000",
];

/** The text with one character replaced, removed or added. */
function mutate(rng: Rng, text: string): string {
  const at = rng.int(0, text.length);
  const kind = rng.int(0, 2);
  if (kind === 0) return text.slice(0, at) + rng.pick(NOISE) + text.slice(at + 1);
  if (kind === 1) return text.slice(0, at) + text.slice(at + 1);
  return text.slice(0, at) + rng.pick(NOISE) + text.slice(at);
}

const EDGES = [
  "2026-11-22T03:00:00.000Z",
  "2026-13-01T00:00:00.000Z", // month 13
  "2026-00-01T00:00:00.000Z", // month 0
  "2025-02-29T00:00:00.000Z", // Feb 29 of a common year
  "2024-02-29T00:00:00.000Z", // and of a leap year
  "2100-02-29T00:00:00.000Z", // a century is not a leap year
  "2000-02-29T00:00:00.000Z", // unless it divides by 400
  "2026-02-30T00:00:00.000Z",
  "2026-04-31T00:00:00.000Z",
  "2026-01-00T00:00:00.000Z",
  "2026-01-32T00:00:00.000Z",
  "2026-11-22T24:00:00.000Z", // 24:00
  "2026-11-22T24:00:00Z",
  "2016-12-31T23:59:60.000Z", // a leap second
  "2026-11-22T23:60:00.000Z",
  "0000-01-01T00:00:00.000Z", // year 0
  "0001-01-01T00:00:00.000Z",
  "0001-01-01T00:00:00.000+00:01", // before year 1 once moved to UTC
  "0001-01-01T00:00:00.000-00:01",
  "9999-12-31T23:59:59.999Z",
  "9999-12-31T23:59:59.999-00:01", // after 9999 once moved to UTC
  "9999-12-31T23:59:59.999+00:01",
  "1969-12-31T23:59:59.999Z",
  "1970-01-01T00:00:00.000Z",
  "1970-01-01T00:00:00.000-00:00",
  "1970-01-01T01:00:00.0019+01:00",
  "2026-11-22T03:00:00Z",
  "2026-11-22T03:00:00.5Z",
  "2026-11-22T03:00:00.12Z",
  "2026-11-22T03:00:00.123456789Z", // 9 fraction digits
  "2026-11-22T03:00:00.1234567890Z", // 10
  "2026-11-22T03:00:00.Z",
  "2026-11-22T03:00:00.000+23:59",
  "2026-11-22T03:00:00.000-23:59",
  "2026-11-22T03:00:00.000+24:00",
  "2026-11-22T03:00:00.000+01:60",
  "2026-11-22T03:00:00.000+0100",
  "2026-11-22T03:00:00.000+01",
  "2026-11-22T03:00:00.000",
  "2026-11-22t03:00:00.000Z",
  "2026-11-22T03:00:00.000z",
  "2026-11-22 03:00:00.000Z",
  "2026-11-22T03:00:00.000Z\n",
  "2026-11-22T03:00:00.000Z ",
  " 2026-11-22T03:00:00.000Z",
  "2026-11-22T03:00:00.000ZZ",
  "2026-11-22T03:00:0\u0663.000Z", // a non-ASCII digit
  "2026-11-22T03:00:00.00\u0663Z",
  "\uff12026-11-22T03:00:00.000Z",
  "+02026-11-22T03:00:00.000Z",
  "-002026-11-22T03:00:00.000Z",
  "20261-11-22T03:00:00.000Z",
  "2026-1-22T03:00:00.000Z",
  "",
  "Z",
  "2026",
  "2026-11-22",
  "2026-11-22T03:00:00",
  "x".repeat(200),
];

Deno.test("parseTimestamp and normalizeTimestamp answer and fail like the regex and Date versions on edge inputs", () => {
  for (const text of EDGES) assertSameParse(text);
});

Deno.test("parseTimestamp and normalizeTimestamp answer and fail like the regex and Date versions on 200,000 seeded inputs", () => {
  const rng = new Rng(35);
  for (let i = 0; i < 100_000; i++) {
    const text = randomTimestamp(rng);
    assertSameParse(text);
    let mutated = mutate(rng, text);
    if (rng.chance(0.3)) mutated = mutate(rng, mutated);
    assertSameParse(mutated);
  }
});

Deno.test("normalizeTimestamp keeps a canonical ts as the very string it was given", () => {
  const text = ["2026-11-22T03:00:00", ".000Z"].join("");
  assert.equal(normalizeTimestamp(text), text);
  assert.equal(normalizeTimestamp("2024-02-29T23:59:59.999Z"), "2024-02-29T23:59:59.999Z");
});

Deno.test("normalizeTimestamp refuses the canonical-looking ts a fast path could take for canonical", () => {
  const refused: [string, RegExp][] = [
    ["2026-13-01T00:00:00.000Z", /2026-13-01 is not a calendar date/],
    ["2026-02-30T00:00:00.000Z", /2026-02-30 is not a calendar date/],
    ["2025-02-29T00:00:00.000Z", /2025-02-29 is not a calendar date/],
    ["0000-01-01T00:00:00.000Z", /0000-01-01 is not a calendar date/],
    ["2016-12-31T23:59:60.000Z", /23:59:60 is not a time of day/],
    ["2026-11-22T24:00:00.000Z", /24:00:00 is not a time of day/],
    ["2026-11-22T03:00:0\u0663.000Z", /Cannot parse timestamp/],
    ["2026-11-22T03:00:00.000Z\n", /Cannot parse timestamp/],
    ["2026-11-22T03:00:00.000z", /Cannot parse timestamp/],
  ];
  for (const [text, message] of refused) {
    assert.throws(() => normalizeTimestamp(text), message, JSON.stringify(text));
  }
});

Deno.test("formatTimestamp writes what Date's toISOString wrote, and fails where it failed", () => {
  const rng = new Rng(36);
  const edges = [
    0,
    -0,
    -1,
    1,
    -62135596800000,
    -62135596800001,
    253402300799999,
    253402300800000,
    951782400000, // 2000-02-29
    4107542400000, // 2100-03-01
    1.5,
    -1.5,
    NaN,
    Infinity,
    8.64e15,
    8.64e15 + 1,
  ];
  for (const ms of edges) {
    assert.deepEqual(
      outcome(() => formatTimestamp(ms)),
      outcome(() => referenceFormat(ms)),
      `${ms}`,
    );
  }
  for (let i = 0; i < 100_000; i++) {
    const ms = rng.chance(0.5)
      ? rng.int(-62135596800000 - 1000, 253402300799999 + 1000)
      : rng.int(-5e11, 5e12);
    assert.equal(formatTimestamp(ms), referenceFormat(ms), `${ms}`);
  }
});
