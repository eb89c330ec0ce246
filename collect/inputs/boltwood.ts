/**
 * The one-line data file of a Boltwood Cloud Sensor II (Clarity II), for the `file` input's
 * `boltwood` format (docs/collect.md, "The Boltwood columns"). One line of space-separated
 * columns: local date and time, units, temperatures, wind, humidity, flags and the sky, wind,
 * rain and daylight conditions; Boltwood II adds the roof-close and alert flags.
 *
 * @module
 */

/**
 * The data columns after date and time, in the file's order, named after the documented column
 * headings (docs/collect.md lists what each holds).
 */
export const BOLTWOOD_COLUMNS: readonly string[] = [
  "temp_unit", // T: C or F
  "wind_unit", // V: K (km/h), M (mph) or m (m/s)
  "sky_minus_ambient", // SkyT: sky minus ambient temperature; 999/-999 saturated, -998 wet
  "ambient_temp", // AmbT
  "sensor_temp", // SenT: sensor case temperature
  "wind_speed", // Wind: negative values are the probe's states
  "humidity", // Hum: relative humidity, %
  "dew_point", // DewPt
  "heater_pct", // Hea: heater setting, %
  "rain_flag", // R: 0 dry, 1 rain in the last minute, 2 rain now
  "wet_flag", // W: 0 dry, 1 wet in the last minute, 2 wet now
  "since_s", // Since: seconds since the last valid data
  "now_days", // Now() Day's: when the file was written, in days (VB6 Now())
  "cloud_cond", // c: 0 unknown, 1 clear, 2 cloudy, 3 very cloudy
  "wind_cond", // w: 0 unknown, 1 calm, 2 windy, 3 very windy
  "rain_cond", // r: 0 unknown, 1 dry, 2 wet, 3 rain
  "day_cond", // d: 0 unknown, 1 dark, 2 light, 3 very light
  "roof_close", // Boltwood II: 1 when the roof should close
  "alert", // Boltwood II: 1 on alert
];

/** The columns a line must have: date, time and the Clarity II columns up to `day_cond`. */
const MIN_COLUMNS = 2 + 17;

/** A parsed Boltwood line. */
export interface BoltwoodLine {
  /** The columns by name; numbers as numbers, the unit letters as text. */
  readonly data: Record<string, number | string>;
  /**
   * The measurement time, epoch milliseconds: the line's date and time, read in its zone, less
   * `since_s` (Clarity rewrites the line of a dead sensor with a new time and a growing `since_s`).
   */
  readonly ts: number;
  /** The line's `since_s`: seconds since the last valid data (whole seconds). */
  readonly sinceS: number;
}

/**
 * The measurement time of a line given the previous line's: while `since_s` is above 0 (no new
 * valid data), a time within a second of the previous one is that one. The line's time has
 * hundredths but `since_s` whole seconds, so a dead sensor's rewrites differ by a fraction.
 *
 * @param line The parsed line.
 * @param previousTs The measurement time of the previous line read, if any.
 * @returns The line's measurement time.
 *
 * @example Usage
 * ```ts
 * import { boltwoodTime, parseBoltwood } from "./boltwood.ts";
 * import assert from "node:assert/strict";
 *
 * const cols = "C K -28.5 12.1 13.0 3.2 78 8.4 0 0 0";
 * const a = parseBoltwood(`2026-11-26 22:51:45.37 ${cols} 00004 0 1 1 1 1 0 0`, "UTC");
 * const b = parseBoltwood(`2026-11-26 22:51:50.12 ${cols} 00009 0 1 1 1 1 0 0`, "UTC");
 * assert.equal(boltwoodTime(b, a.ts), a.ts);
 * ```
 */
export function boltwoodTime(line: BoltwoodLine, previousTs: number | undefined): number {
  if (line.sinceS > 0 && previousTs !== undefined && Math.abs(line.ts - previousTs) < 1000) {
    return previousTs;
  }
  return line.ts;
}

/**
 * Parses a Boltwood II / Clarity II one-line data file.
 *
 * @param text The file's text (its first non-empty line is read).
 * @param timeZone The IANA zone its local date and time are in.
 * @param mtimeMs The file's modification time (epoch ms): of the two instants a local time in the
 *   repeated autumn hour names, the one nearest it is taken. Without it, the earlier.
 * @returns The columns and the measurement time.
 * @throws {Error} When the line does not have the documented columns.
 *
 * @example Usage
 * ```ts
 * import { parseBoltwood } from "./boltwood.ts";
 * import assert from "node:assert/strict";
 *
 * const line = "2026-11-26 22:51:45.00 C K -28.5 12.1 13.0 3.2 78 8.4 0 0 0 00004 046352.95260 1 1 1 1 0 0";
 * const { data, ts } = parseBoltwood(line, "UTC");
 * assert.equal(data.sky_minus_ambient, -28.5);
 * assert.equal(data.temp_unit, "C");
 * assert.equal(ts, Date.parse("2026-11-26T22:51:41Z")); // less since_s, 4 s
 * ```
 */
export function parseBoltwood(text: string, timeZone: string, mtimeMs?: number): BoltwoodLine {
  const line = text.split(/\r?\n/).find((l) => l.trim() !== "") ?? "";
  const cols = line.trim().split(/\s+/);
  if (cols.length < MIN_COLUMNS) {
    throw new Error(
      `the line has ${cols.length} columns, not the ${MIN_COLUMNS} or more of a Boltwood II / Clarity II data file`,
    );
  }
  const [date, time] = cols;
  const written = localTime(date!, time!, timeZone, mtimeMs);
  const data: Record<string, number | string> = {};
  BOLTWOOD_COLUMNS.forEach((name, i) => {
    const raw = cols[2 + i];
    if (raw === undefined) return;
    if (i < 2) {
      data[name] = raw;
      return;
    }
    const n = Number(raw);
    if (!Number.isFinite(n)) {
      throw new Error(`column ${3 + i} (${name}) is ${JSON.stringify(raw)}, not a number`);
    }
    data[name] = n;
  });
  const sinceS = data.since_s as number;
  return { data, ts: written - sinceS * 1000, sinceS };
}

/**
 * `yyyy-mm-dd` and `hh:mm:ss.ss` in `timeZone` as epoch milliseconds; in the repeated autumn
 * hour, the instant nearest `mtimeMs` (the file was written just after the line's time).
 */
function localTime(date: string, time: string, timeZone: string, mtimeMs?: number): number {
  const d = /^(\d{4})-(\d{2})-(\d{2})$/.exec(date);
  const t = /^(\d{1,2}):(\d{2}):(\d{2})(?:\.(\d{1,3}))?$/.exec(time);
  if (!d || !t) {
    throw new Error(
      `the line starts with ${
        JSON.stringify(`${date} ${time}`)
      }, not a date and time such as 2026-11-26 22:51:45.00`,
    );
  }
  let local: Temporal.PlainDateTime;
  try {
    local = Temporal.PlainDateTime.from({
      year: Number(d[1]),
      month: Number(d[2]),
      day: Number(d[3]),
      hour: Number(t[1]),
      minute: Number(t[2]),
      second: Number(t[3]),
      millisecond: Number((t[4] ?? "0").padEnd(3, "0")),
    }, { overflow: "reject" });
  } catch {
    throw new Error(`the line's date and time ${JSON.stringify(`${date} ${time}`)} do not exist`);
  }
  const earlier = local.toZonedDateTime(timeZone, { disambiguation: "earlier" }).epochMilliseconds;
  const later = local.toZonedDateTime(timeZone, { disambiguation: "later" }).epochMilliseconds;
  if (mtimeMs === undefined || !Number.isFinite(mtimeMs) || earlier === later) return earlier;
  return Math.abs(later - mtimeMs) < Math.abs(earlier - mtimeMs) ? later : earlier;
}
