/**
 * Writes the sample site directory that docs/history.md and docs/storage.md read: five nights,
 * 22 to 26 November 2026, of a site in `America/Santiago`, in exactly the files a service writes.
 * A service files each event by the time it receives it, so past nights cannot be posted to one:
 * this script writes them itself, with the store's own names, night keys and run-log lines.
 *
 * - `weather` every 30 minutes from local noon of the 22nd (`wind_mps`, `temp_c`) and
 *   `environment` every hour (`humidity`), both site-wide;
 * - a run `m31-1` on the night of the 24th, 21:00 to 05:00 local, which also records `status`
 *   (`dome`, `note`) every 30 minutes; the site-wide events of its time go to both streams, each
 *   copy with its own stream's seq, as the service does;
 * - no `.site.json`: the readers take the zone from `--tz` or `OBS_TELEMETRY_TZ`.
 *
 * The values follow fixed rules (no randomness), so every run writes the same bytes.
 *
 * Usage: deno run --allow-read=DIR --allow-write=DIR scripts/sample_night.ts DIR [--until TS]
 *
 * `DIR` must be missing or empty. `--until` (ISO 8601 with a zone) ends the data before that moment,
 * as if the service had recorded until then; by default the five nights are whole.
 *
 * @module
 */
// deno-lint-ignore-file no-console
import { join, resolve } from "node:path";
import { parseArgs } from "node:util";
import { dayKey } from "../store/day_key.ts";
import { RUN_FILE, RUN_LOG_FILE, RUN_RECORD_FILE, siteFileName } from "../store/layout.ts";
import { runLogLine } from "../store/run_log.ts";
import { writeJsonAtomic } from "../store/fs.ts";

const ZONE = "America/Santiago";
/** Local noon of 22 November 2026 in Santiago (UTC-3 in summer), where the first night begins. */
const START_MS = Date.parse("2026-11-22T15:00:00.000Z");
/** Local noon of 27 November, where the fifth night ends. */
const END_MS = Date.parse("2026-11-27T15:00:00.000Z");
const HALF_HOUR_MS = 30 * 60_000;
const RUN_ID = "m31-1";
/** 21:00 on the 24th to 05:00 on the 25th, local time. */
const RUN_START_MS = Date.parse("2026-11-25T00:00:00.000Z");
const RUN_STOP_MS = Date.parse("2026-11-25T08:00:00.000Z");
const SITE_WIDE = new Set(["weather", "environment"]);

interface Sample {
  ts: number;
  type: string;
  data: Record<string, unknown>;
}

/** The events of half-hour step `i` since the start, in the order they are written. */
function samplesAt(i: number, runStop: number): Sample[] {
  const ts = START_MS + i * HALF_HOUR_MS;
  // The wind climbs by 0.7 m/s a step through 1.0 to 5.9; the air cools by 0.3 °C a step from
  // 14 °C at noon; the humidity climbs by 6 % an hour through 40 to 94.
  const out: Sample[] = [{
    ts,
    type: "weather",
    data: { wind_mps: 1 + ((7 * i) % 50) / 10, temp_c: Math.round(140 - 3 * (i % 48)) / 10 },
  }];
  if (i % 2 === 0) out.push({ ts, type: "environment", data: { humidity: 40 + ((3 * i) % 60) } });
  if (ts >= RUN_START_MS && ts < runStop) {
    out.push({ ts, type: "status", data: { dome: "open", note: "ok" } });
  }
  return out;
}

function line(seq: number, s: Sample, meta: Record<string, unknown>): string {
  return JSON.stringify({
    seq,
    ts: new Date(s.ts).toISOString(),
    type: s.type,
    data: s.data,
    meta,
  }) +
    "\n";
}

async function emptyOrMissing(dir: string): Promise<boolean> {
  try {
    for await (const _ of Deno.readDir(dir)) return false;
    return true;
  } catch (err) {
    if (err instanceof Deno.errors.NotFound) return true;
    throw err;
  }
}

const { values, positionals } = parseArgs({
  args: Deno.args,
  options: { until: { type: "string" } },
  allowPositionals: true,
});
if (positionals.length !== 1) {
  console.error(
    "usage: deno run --allow-read=DIR --allow-write=DIR scripts/sample_night.ts DIR [--until TS]",
  );
  Deno.exit(2);
}
const dir = resolve(positionals[0]!);
const until = values.until === undefined ? END_MS : Date.parse(values.until);
if (Number.isNaN(until) || until <= START_MS) {
  console.error(
    `--until must be a time after 2026-11-22T15:00:00Z with a zone, such as 2026-11-27T06:20:00Z, not ${
      JSON.stringify(values.until)
    }`,
  );
  Deno.exit(2);
}
if (!await emptyOrMissing(dir)) {
  console.error(`${dir} is not empty: give a new directory, so no site is written over`);
  Deno.exit(1);
}

// A --until inside the run stops the run there: the files hold no active run to resume.
const runStop = Math.min(RUN_STOP_MS, until);
const nights = new Map<string, string[]>();
const runLines: string[] = [];
let siteSeq = 0;
let runSeq = 0;
for (let i = 0; START_MS + i * HALF_HOUR_MS < Math.min(until, END_MS); i++) {
  for (const sample of samplesAt(i, runStop)) {
    const inRun = sample.ts >= RUN_START_MS && sample.ts < runStop;
    const meta = inRun ? { run_id: RUN_ID } : {};
    if (SITE_WIDE.has(sample.type) || !inRun) {
      const key = dayKey(sample.ts, ZONE);
      if (!nights.has(key)) nights.set(key, []);
      nights.get(key)!.push(line(++siteSeq, sample, meta));
    }
    if (inRun) runLines.push(line(++runSeq, sample, meta));
  }
}

await Deno.mkdir(dir, { recursive: true });
for (const [key, lines] of nights) {
  await Deno.writeTextFile(join(dir, siteFileName(key)), lines.join(""));
}
if (runLines.length > 0) {
  const runDir = join(dir, RUN_ID);
  const started = {
    run_id: RUN_ID,
    run_dir: runDir,
    started_at: new Date(RUN_START_MS).toISOString(),
    stopped_at: null,
    events: 0,
    meta: { target: "M31" },
  };
  const stopped = { ...started, stopped_at: new Date(runStop).toISOString(), events: runSeq };
  await Deno.mkdir(runDir);
  await Deno.writeTextFile(join(runDir, RUN_FILE), runLines.join(""));
  await writeJsonAtomic(join(runDir, RUN_RECORD_FILE), stopped);
  await Deno.writeTextFile(join(dir, RUN_LOG_FILE), runLogLine(started) + runLogLine(stopped));
}
console.log(
  `wrote ${dir}: ${nights.size} nights, ${siteSeq} site events, run ${RUN_ID} with ${runSeq} events (zone ${ZONE}: set OBS_TELEMETRY_TZ=${ZONE} or --tz to read it)`,
);
