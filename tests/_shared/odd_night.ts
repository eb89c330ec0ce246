/**
 * A seeded night of stored lines for the readers of a range (`store/night_index.ts`,
 * `core/bucket_scan.ts`): mostly lines in the service's layout, with every kind of line that only
 * looks like one mixed in (a clock stepped back, another type with the same fields, unicode, a
 * `ts` in another offset form, fields in another order, a nested `data`, blank and broken lines).
 */

import { join } from "node:path";
import { formatTimestamp } from "../../wire/event.ts";
import { buildLine, buildTail } from "../../wire/ndjson.ts";
import { Rng } from "./fault_util.ts";

/** Where the seeded nights begin: 13:00 UTC of the night 2026-05-10 (UTC nights). */
export const ODD_T0: number = Date.parse("2026-05-10T13:00:00Z");
/** The night file the seeded lines are written to, in a site directory of UTC nights. */
export const ODD_NIGHT_FILE = "site_20260510.ndjson";

/** A number as a station might send it: short decimals, long ones, exponents, integers. */
export function seededNumber(rng: Rng): number {
  const r = rng.next();
  if (r < 0.4) return Math.round((rng.next() - 0.5) * 2e5) / 100;
  if (r < 0.55) return (rng.next() - 0.5) * 10 ** Math.floor(rng.next() * 30 - 10);
  if (r < 0.7) return Math.floor((rng.next() - 0.5) * 2 ** 60);
  if (r < 0.8) return Math.round(rng.next() * 1e6) / 1e6;
  if (r < 0.85) return 0;
  return Math.round((rng.next() - 0.5) * 2e4) / 10;
}

/** One stored line in the service's layout. */
export function layoutLine(
  seq: number,
  ms: number,
  type: string,
  data: object,
  meta = "{}",
): string {
  return buildLine(
    seq,
    buildTail(formatTimestamp(ms), JSON.stringify(type), JSON.stringify(data), meta),
  );
}

/**
 * Seeded lines about `step` ms apart on average from {@linkcode ODD_T0}.
 *
 * @param seed The seed.
 * @param count How many lines.
 * @param step The mean time between two lines, ms.
 * @returns The lines, without newlines.
 */
export function oddLines(seed: number, count: number, step = 2000): string[] {
  const rng = new Rng(seed);
  const out: string[] = [];
  let ms = ODD_T0;
  for (let seq = 1; seq <= count; seq++) {
    ms += Math.floor(rng.next() * 2 * step);
    if (rng.next() < 0.004) ms -= 120_000; // a clock stepped back
    const r = rng.next();
    const flat = {
      temp: seededNumber(rng),
      hum: seededNumber(rng),
      wind: rng.next() < 0.5 ? `${seededNumber(rng)} m/s` : seededNumber(rng),
      rain: rng.next() < 0.5,
      note: rng.next() < 0.5 ? null : "clear",
    };
    const line = layoutLine(seq, ms, "weather", flat);
    if (r < 0.6) out.push(line);
    else if (r < 0.7) out.push(layoutLine(seq, ms, "dome", flat)); // another type, same fields
    else if (r < 0.73) out.push(layoutLine(seq, ms, "weather", { ...flat, wind: { mps: 3 } }));
    else if (r < 0.75) out.push(layoutLine(seq, ms, "weather", flat, '{"run_id":"n-1","x":[1]}'));
    else if (r < 0.77) {
      out.push(layoutLine(seq, ms, "weather", { "é": 2, temp: seededNumber(rng) }));
    } else if (r < 0.78) out.push(layoutLine(seq, ms, "weather", { "2": 5, temp: 1, "1": 7 }));
    else if (r < 0.79) out.push(layoutLine(seq, ms, "wéather", flat));
    else if (r < 0.8) out.push(layoutLine(seq, ms, 'we"ather', flat));
    else if (r < 0.81) out.push(line.replace('"hum":', '"temp":')); // a key twice
    else if (r < 0.82) {
      out.push(JSON.stringify({ type: "weather", ts: formatTimestamp(ms), data: flat, seq }));
    } else if (r < 0.83) {
      const local = new Date(ms + 2 * 3_600_000).toISOString().slice(0, 19) + "+02:00";
      out.push(JSON.stringify({ seq, ts: local, type: "weather", data: flat, meta: {} }));
    } else if (r < 0.84) out.push(line.replace(":", ": "));
    else if (r < 0.85) out.push(line.replace(`"seq":${seq}`, `"seq":0${seq}`));
    else if (r < 0.86) out.push(line.slice(0, -1)); // not JSON
    else if (r < 0.87) out.push(line + " ");
    else if (r < 0.875) out.push("");
    else if (r < 0.88) out.push("garbage");
    else if (r < 0.89) {
      out.push(layoutLine(seq, ms, "weather", { temp: 1 }).replace(":1}", ":1e400}"));
    } else if (r < 0.9) {
      out.push(layoutLine(seq, ms, "weather", { temp: 1 }).replace(":1}", ":01}"));
    } else if (r < 0.91) out.push("\uFEFF" + line); // a byte order mark: no JSON
    else if (r < 0.93) {
      const deep = { a: { b: { c: seededNumber(rng), d: "1.5 m/s" }, e: {} }, temp: 2 };
      out.push(layoutLine(seq, ms, "weather", rng.next() < 0.5 ? deep : { ...deep, a: 1 }));
    } else {
      out.push(layoutLine(seq, ms, "weather", { temp: seededNumber(rng), hum: seededNumber(rng) }));
    }
  }
  return out;
}

/**
 * Writes seeded lines as the night file of a site directory, with a torn tail after them.
 *
 * @param dir The site directory.
 * @param lines The lines.
 * @param torn Bytes after the last newline (a torn tail).
 * @returns The night file's path.
 */
export async function writeOddNight(
  dir: string,
  lines: readonly string[],
  torn = '{"seq":99999,"ts":"2026-05-1',
): Promise<string> {
  const path = join(dir, ODD_NIGHT_FILE);
  await Deno.writeTextFile(path, lines.join("\n") + "\n" + torn);
  return path;
}
