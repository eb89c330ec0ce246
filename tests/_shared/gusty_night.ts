/**
 * A recorded night, seeded: the real service (`TelemetryService`, in this process) on a clock the
 * script moves one second at a time, fed a 1 Hz `weather` station (`wind_mps`, gusts from a
 * seeded random walk, and outages long enough to go stale) and a `sky` sensor every 10 s
 * (`cloud_pct`), its verdict asked every second as the live timer would wake, so that its
 * `telemetry.safety` events are recorded as a live night records them. Optionally a run, an
 * external event and a waiver, set through the service's safety hub. The tests of `safety replay`
 * run it as a child, and docs/safety.md#replay made its example site directory with it.
 *
 * ```sh
 * deno run -A tests/_shared/gusty_night.ts --site-dir DIR --types FILE [--seed 7] [--hours 10]
 *   [--start 2026-11-26T22:00:00Z] [--run 60-120] [--external 30-90] [--waive 200:3600:weather]
 * ```
 *
 * Times of `--run`, `--external` (set-clear) and `--waive` (start:seconds:type) are minutes after
 * `--start`. Prints one line: the seed, the events posted and the changes recorded.
 *
 * @module
 */

// deno-lint-ignore-file no-console
import { parseArgs } from "node:util";
import { TelemetryService } from "../../server.ts";
import { loadTypes } from "../../core/types_registry.ts";
import { Rng } from "./fault_util.ts";
import { safetyEvent } from "./util.ts";

/** `A-B` as two minutes, or undefined. */
function span(text: string | undefined): [number, number] | undefined {
  if (text === undefined) return undefined;
  const m = /^(\d+)-(\d+)$/.exec(text);
  if (!m) throw new Error(`expected MINUTES-MINUTES, not ${text}`);
  return [Number(m[1]), Number(m[2])];
}

const { values } = parseArgs({
  args: Deno.args,
  options: {
    "site-dir": { type: "string" },
    types: { type: "string" },
    seed: { type: "string", default: "7" },
    hours: { type: "string", default: "10" },
    start: { type: "string", default: "2026-11-26T22:00:00Z" },
    run: { type: "string" },
    external: { type: "string" },
    waive: { type: "string" },
  },
});
if (values["site-dir"] === undefined || values.types === undefined) {
  throw new Error("usage: gusty_night.ts --site-dir DIR --types FILE [--seed N] [--hours H]");
}
const seed = Number(values.seed);
const rng = new Rng(seed);
const next = () => rng.next();
const start = Date.parse(values.start);
const seconds = Math.round(Number(values.hours) * 3600);
const run = span(values.run);
const external = span(values.external);
const waive = values.waive?.split(":");
const now = { wall: start, mono: 0 };
const service = await TelemetryService.open({
  siteDir: values["site-dir"],
  timeZone: "UTC",
  types: await loadTypes(values.types),
  clock: () => now.wall,
  monotonicClock: () => now.mono,
});
const actor = { via: "cli", peer: "gusty_night" } as const;
const ups = { ...safetyEvent("ups-mains"), EventTimeUtc: new Date(start).toISOString() };
let posted = 0, wind = 6, gustLeft = 0, weatherOutage = 0, skyOutage = 0, cloud = 20;
try {
  for (let s = 0; s < seconds; s++) {
    now.wall += 1000;
    now.mono += 1000;
    const minute = s / 60;
    if (run && minute === run[0]) await service.startRun({ runId: "night-run" });
    if (run && minute === run[1]) await service.stopRun();
    if (external && minute === external[0]) {
      await service.safetyHub.setExternal([ups], "site", actor);
    }
    if (external && minute === external[1]) {
      await service.safetyHub.clearExternal([ups.Id], "site", actor);
    }
    if (waive && minute === Number(waive[0])) {
      await service.safetyHub.waive(waive[2]!, Number(waive[1]), "anemometer checked", actor);
    }
    // Gusts: a burst of 20 to 150 s above 15 m/s now and then, over a slow random walk.
    if (gustLeft > 0) gustLeft--;
    else if (next() < 1 / 900) gustLeft = 20 + Math.floor(next() * 130);
    wind = Math.min(12, Math.max(1, wind + (next() - 0.5) * 0.6));
    const speed = gustLeft > 0 ? 15.5 + next() * 6 : wind;
    // Outages: now and then the station is silent for 3 to 10 minutes.
    if (weatherOutage > 0) weatherOutage--;
    else if (next() < 1 / 5400) weatherOutage = 180 + Math.floor(next() * 420);
    if (skyOutage > 0) skyOutage--;
    else if (next() < 1 / 7200) skyOutage = 180 + Math.floor(next() * 420);
    // A sender's latency: the event's own ts is up to half a second before it arrives.
    const ts = (latency: number) => new Date(now.wall - Math.floor(latency * 500)).toISOString();
    if (weatherOutage === 0) {
      await service.record([{
        type: "weather",
        ts: ts(next()),
        data: { wind_mps: Math.round(speed * 10) / 10 },
      }]);
      posted++;
    }
    cloud = Math.min(100, Math.max(0, cloud + (next() - 0.5) * 8));
    if (s % 10 === 0 && skyOutage === 0) {
      await service.record([{
        type: "sky",
        ts: ts(next()),
        data: { cloud_pct: Math.round(cloud) },
      }]);
      posted++;
    }
    // As the live timer wakes: every change by time alone is judged within the second.
    service.safety();
  }
  console.log(`seed ${seed}: ${posted} events posted, ${service.safetyChanges} changes recorded`);
} finally {
  await service.close();
}
