/**
 * The cost of the safety verdict on ingestion (`deno task bench:safety`, docs/safety.md): the
 * in-process service (no HTTP) fed the same events at a fixed rate (default 5,000 events/s)
 * without a types registry, and with 50 registered types of which 10 are critical (fields with
 * limits, `stale_after_s`, `clear_after_s`), events cycling over the 50 types. The figure is
 * this process's user + system CPU (`process.cpuUsage()`) over the measured window divided by
 * the events recorded in it; the two services alternate for `--rounds`, after `--warmup`
 * seconds of the same load each, and the ratio is "with" over "without".
 *
 * Usage: deno run -A bench/safety.ts [--rate 5000] [--seconds 5] [--rounds 3] [--warmup 5]
 *
 * @module
 */

// deno-lint-ignore-file no-console
import { parseArgs } from "node:util";
import process from "node:process";
import { TelemetryService } from "../server.ts";
import { parseTypes, type TypesRegistry } from "../core/types_registry.ts";

const { values: flags } = parseArgs({
  args: Deno.args.filter((a) => a !== "--"),
  options: {
    rate: { type: "string", default: "5000" },
    seconds: { type: "string", default: "5" },
    rounds: { type: "string", default: "3" },
    warmup: { type: "string", default: "5" },
  },
  strict: true,
});
const RATE = Number(flags.rate);
const SECONDS = Number(flags.seconds);
const ROUNDS = Number(flags.rounds);
const WARMUP = Number(flags.warmup);
/** Events submitted per tick of the pacing loop (each its own request, as HTTP hands them over). */
const PER_TICK = 10;

const TYPE_NAMES = Array.from({ length: 50 }, (_, i) => `sensor${i}`);

/** 50 types, every fifth critical, each with two limited fields. */
function registry(): TypesRegistry {
  const file: Record<string, unknown> = {};
  TYPE_NAMES.forEach((type, i) => {
    file[type] = {
      critical: i % 5 === 0,
      stale_after_s: 600,
      clear_after_s: 900,
      fields: {
        wind_mps: { unit: "m/s", warn_above: 10, alarm_above: 15 },
        "system.temp_c": { unit: "°C", alarm_below: -40 },
      },
    };
  });
  return parseTypes(JSON.stringify(file), "bench-types.json");
}

function event(n: number): Record<string, unknown> {
  return {
    type: TYPE_NAMES[n % TYPE_NAMES.length],
    data: { wind_mps: 2 + (n % 7), system: { temp_c: -3.5 }, humidity: 41, sky: "clear" },
  };
}

/** Feeds `seconds` of events at RATE; returns CPU µs per event over that window. */
async function load(service: TelemetryService, seconds: number): Promise<number> {
  const ticks = Math.round((seconds * RATE) / PER_TICK);
  const tickMs = (1000 * PER_TICK) / RATE;
  const started = performance.now();
  const cpu = process.cpuUsage();
  let n = 0;
  const pending: Promise<unknown>[] = [];
  for (let t = 0; t < ticks; t++) {
    for (let i = 0; i < PER_TICK; i++) pending.push(service.record([event(n++)]));
    const due = started + (t + 1) * tickMs;
    const wait = due - performance.now();
    if (wait > 0) await new Promise((r) => setTimeout(r, wait));
    if (pending.length > 5_000) await Promise.all(pending.splice(0));
  }
  await Promise.all(pending);
  const used = process.cpuUsage(cpu);
  return (used.user + used.system) / n;
}

const dirs: string[] = [];
async function open(types: TypesRegistry | undefined): Promise<TelemetryService> {
  const siteDir = await Deno.makeTempDir({ prefix: "bench-safety-" });
  dirs.push(siteDir);
  return await TelemetryService.open({ siteDir, timeZone: "UTC", ...(types ? { types } : {}) });
}

const without = await open(undefined);
const withTypes = await open(registry());
try {
  console.log(
    `warm-up ${WARMUP} s each, then ${ROUNDS} rounds of ${SECONDS} s at ${RATE} events/s`,
  );
  await load(without, WARMUP);
  await load(withTypes, WARMUP);
  const a: number[] = [], b: number[] = [];
  for (let round = 0; round < ROUNDS; round++) {
    a.push(await load(without, SECONDS));
    b.push(await load(withTypes, SECONDS));
    console.log(
      `round ${round + 1}: without ${a.at(-1)!.toFixed(2)} µs/event, with 50 types (10 critical) ${
        b.at(-1)!.toFixed(2)
      } µs/event`,
    );
  }
  const median = (xs: number[]) => [...xs].sort((x, y) => x - y)[Math.floor(xs.length / 2)]!;
  const ratio = median(b) / median(a);
  console.log(
    `median: without ${median(a).toFixed(2)}, with ${median(b).toFixed(2)} µs/event; ratio ${
      ratio.toFixed(3)
    } (target <= 1.05)`,
  );
  console.log(`safe: ${withTypes.safety().safe}, reasons: ${withTypes.safety().reasons.length}`);
} finally {
  await without.close();
  await withTypes.close();
  for (const dir of dirs) await Deno.remove(dir, { recursive: true });
}
