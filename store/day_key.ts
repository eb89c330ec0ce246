/**
 * The night a moment belongs to: the local date in the site's zone, where a time of day before
 * 12:00 belongs to the previous date (docs/storage.md), so one observing night is one site file.
 *
 * @module
 */

/**
 * The site file day key for an instant: the local date in `timeZone`, where a time of day
 * before 12:00 belongs to the previous date (docs/storage.md). Reads the wall clock, so it is right
 * on DST change days.
 *
 * @param epochMs The instant, in epoch milliseconds.
 * @param timeZone An IANA time zone name such as `"America/Santiago"`.
 * @returns `YYYYMMDD`.
 * @throws {RangeError} If `timeZone` is not a known time zone.
 *
 * @example Usage
 * ```ts
 * import { dayKey } from "./day_key.ts";
 * import assert from "node:assert/strict";
 *
 * assert.equal(dayKey(Date.parse("2026-01-02T11:59:59.999Z"), "UTC"), "20260101");
 * assert.equal(dayKey(Date.parse("2026-01-02T12:00:00.000Z"), "UTC"), "20260102");
 * ```
 */
export function dayKey(epochMs: number, timeZone: string): string {
  return dayWindow(epochMs, timeZone).key;
}

interface DayWindow {
  key: string;
  /** First instant of this key (local noon), epoch ms. */
  start: number;
  /** First instant of the next key, epoch ms. */
  end: number;
}

function dayWindow(epochMs: number, timeZone: string): DayWindow {
  const zoned = Temporal.Instant.fromEpochMilliseconds(epochMs).toZonedDateTimeISO(timeZone);
  const date = zoned.hour < 12 ? zoned.toPlainDate().subtract({ days: 1 }) : zoned.toPlainDate();
  const noon = (d: Temporal.PlainDate) =>
    d.toZonedDateTime({ timeZone, plainTime: "12:00" }).epochMilliseconds;
  return { key: keyOfDate(date), start: noon(date), end: noon(date.add({ days: 1 })) };
}

/**
 * The key of the night that begins at local noon of a date.
 *
 * @param date The calendar date.
 * @returns `YYYYMMDD`.
 *
 * @example Usage
 * ```ts
 * import { keyOfDate } from "./day_key.ts";
 * import assert from "node:assert/strict";
 *
 * assert.equal(keyOfDate(Temporal.PlainDate.from("2026-05-09")), "20260509");
 * ```
 */
export function keyOfDate(date: Temporal.PlainDate): string {
  return `${String(date.year).padStart(4, "0")}${String(date.month).padStart(2, "0")}${
    String(date.day).padStart(2, "0")
  }`;
}

/**
 * The calendar date whose local noon begins a night, from the night's key.
 *
 * @param key `YYYYMMDD`.
 * @returns The date.
 * @throws {RangeError} If the key is not a date.
 *
 * @example Usage
 * ```ts
 * import { dateOfKey } from "./day_key.ts";
 * import assert from "node:assert/strict";
 *
 * assert.equal(dateOfKey("20260509").add({ days: 1 }).toString(), "2026-05-10");
 * ```
 */
export function dateOfKey(key: string): Temporal.PlainDate {
  return Temporal.PlainDate.from(`${key.slice(0, 4)}-${key.slice(4, 6)}-${key.slice(6)}`);
}

/**
 * Computes site-file day keys quickly for a stream of instants, recomputing with `Temporal` only
 * when an instant leaves the current local-noon-to-noon window.
 *
 * @example Usage
 * ```ts
 * import { DayKeyer } from "./day_key.ts";
 * import assert from "node:assert/strict";
 *
 * const keyer = new DayKeyer("Pacific/Auckland");
 * assert.equal(keyer.keyFor(Date.parse("2026-11-22T00:00:00Z")), "20261122");
 * ```
 */
export class DayKeyer {
  #timeZone: string;
  #window: DayWindow | undefined;

  /**
   * Creates a keyer for one site time zone.
   *
   * @param timeZone IANA time zone of the site.
   * @throws {RangeError} If the zone is unknown.
   */
  constructor(timeZone: string) {
    this.#timeZone = timeZone;
    this.#window = dayWindow(Date.now(), timeZone);
  }

  /**
   * The day key for an instant.
   *
   * @param epochMs The instant, in epoch milliseconds.
   * @returns `YYYYMMDD`.
   *
   * @example Usage
   * ```ts
   * import { DayKeyer } from "./day_key.ts";
   * import assert from "node:assert/strict";
   *
   * assert.equal(new DayKeyer("UTC").keyFor(0), "19691231");
   * ```
   */
  keyFor(epochMs: number): string {
    const w = this.#window;
    if (w && epochMs >= w.start && epochMs < w.end) return w.key;
    this.#window = dayWindow(epochMs, this.#timeZone);
    return this.#window.key;
  }
}

/**
 * Checks that a name is a time zone `Temporal` knows.
 *
 * @param timeZone The candidate, for example `"Europe/Madrid"`.
 * @returns The zone's canonical identifier.
 * @throws {RangeError} If it is not a known IANA zone.
 *
 * @example Usage
 * ```ts
 * import { checkTimeZone } from "./day_key.ts";
 * import assert from "node:assert/strict";
 *
 * assert.equal(checkTimeZone("UTC"), "UTC");
 * assert.throws(() => checkTimeZone("Mars/Olympus"), RangeError);
 * ```
 */
export function checkTimeZone(timeZone: string): string {
  try {
    return Temporal.Now.zonedDateTimeISO(timeZone).timeZoneId;
  } catch {
    throw new RangeError(
      `Cannot use time zone "${timeZone}": not an IANA zone name such as "America/Santiago" or "UTC"`,
    );
  }
}
