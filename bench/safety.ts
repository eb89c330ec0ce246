/**
 * The cost of the safety verdict on ingestion (`deno task bench:safety`, docs/safety.md): the
 * in-process service (no HTTP) fed the same events at a fixed rate (default 5,000 events/s)
 * without a types registry, and with 50 registered types of which 10 are critical (fields with
 * limits, `stale_after_s`, `clear_after_s`), events cycling over the 50 types. The figure is
 * this process's user + system CPU (`process.cpuUsage()`) over the measured window divided by
 * the events recorded in it; the two services alternate for `--rounds`, after `--warmup`
 * seconds of the same load each, and the ratio is "with" over "without". It also counts the
 * saves of each service's safety latch `.safety.json` in the measured rounds (each one an
 * fdatasync on the ingest path, docs/safety.md#across-restarts).
 *
 * Usage: deno run -A bench/safety.ts [--rate 5000] [--seconds 5] [--rounds 3] [--warmup 5]
 *   [--baseline DIR] [--alarm-every N]
 *
 * `--alarm-every N` (a multiple of 5, so of a critical type) makes every Nth event an alarm, which
 * the next event of its type ends: each such event turns its type unsafe (default 0: none).
 * `--baseline DIR` adds the service of another checkout (e.g. `git worktree add /tmp/base
 * <commit>`) with the same 50 types, in the same rounds: "with" over "baseline" is the change's
 * cost on steady ingestion.
 *
 * @module
 */

// deno-lint-ignore-file no-console
import { parseArgs } from "node:util";
import { resolve } from "node:path";
import { pathToFileURL } from "node:url";
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
    baseline: { type: "string" },
    "alarm-every": { type: "string", default: "0" },
  },
  strict: true,
});
const RATE = Number(flags.rate);
const SECONDS = Number(flags.seconds);
const ROUNDS = Number(flags.rounds);
const WARMUP = Number(flags.warmup);
const BASELINE = flags.baseline === undefined ? undefined : resolve(flags.baseline);
const ALARM_EVERY = Number(flags["alarm-every"]);
if (!Number.isSafeInteger(ALARM_EVERY) || ALARM_EVERY < 0 || ALARM_EVERY % 5 !== 0) {
  throw new RangeError(
    `--alarm-every ${
      flags["alarm-every"]
    }: give 0 or a multiple of 5 (every fifth event is of a critical type)`,
  );
}
/** Events submitted per tick of the pacing loop (each its own request, as HTTP hands them over). */
const PER_TICK = 10;

const TYPE_NAMES = Array.from({ length: 50 }, (_, i) => `sensor${i}`);

/** The service and the types parser of this checkout, or of the baseline's. */
interface Code {
  TelemetryService: typeof TelemetryService;
  parseTypes: typeof parseTypes;
}

/** 50 types, every fifth critical, each with two limited fields. */
function registry(code: Code = { TelemetryService, parseTypes }): TypesRegistry {
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
  return code.parseTypes(JSON.stringify(file), "bench-types.json");
}

function event(n: number): Record<string, unknown> {
  const alarm = ALARM_EVERY > 0 && n % ALARM_EVERY === 0;
  return {
    type: TYPE_NAMES[n % TYPE_NAMES.length],
    data: {
      wind_mps: alarm ? 20 : 2 + (n % 7),
      system: { temp_c: -3.5 },
      humidity: 41,
      sky: "clear",
    },
  };
}

/** Saves of each service's latch file so far, counted from the renames that finish them. */
const saves = new Map<TelemetryService, { count: number }>();

/** Counts the atomic renames onto `<siteDir>/.safety.json`. */
function countSaves(siteDir: string): { count: number; watcher: Deno.FsWatcher } {
  const watcher = Deno.watchFs(siteDir, { recursive: false });
  const counter = { count: 0, watcher };
  (async () => {
    for await (const change of watcher) {
      if (change.kind === "rename" && change.paths[1]?.endsWith("/.safety.json")) counter.count++;
    }
  })();
  return counter;
}

/**
 * Feeds `seconds` of events at RATE; returns CPU µs per event over that window, and how many
 * times the latch was saved in it.
 */
async function load(
  service: TelemetryService,
  seconds: number,
): Promise<{ cpu: number; saves: number }> {
  const before = saves.get(service)!.count;
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
  // The watcher hears of the last renames a moment later.
  await new Promise((r) => setTimeout(r, 100));
  return { cpu: (used.user + used.system) / n, saves: saves.get(service)!.count - before };
}

const dirs: string[] = [];
const watchers: Deno.FsWatcher[] = [];
async function open(
  types: TypesRegistry | undefined,
  code: Code = { TelemetryService, parseTypes },
): Promise<TelemetryService> {
  const siteDir = await Deno.makeTempDir({ prefix: "bench-safety-" });
  dirs.push(siteDir);
  const counter = countSaves(siteDir);
  watchers.push(counter.watcher);
  const service = await code.TelemetryService.open({
    siteDir,
    timeZone: "UTC",
    ...(types ? { types } : {}),
  });
  saves.set(service, counter);
  return service;
}

async function baselineCode(dir: string): Promise<Code> {
  const server = await import(pathToFileURL(`${dir}/server.ts`).href);
  const registry = await import(pathToFileURL(`${dir}/core/types_registry.ts`).href);
  return { TelemetryService: server.TelemetryService, parseTypes: registry.parseTypes };
}

const without = await open(undefined);
const withTypes = await open(registry());
const base = BASELINE === undefined ? undefined : await baselineCode(BASELINE);
const baseline = base && await open(registry(base), base);
try {
  console.log(
    `warm-up ${WARMUP} s each, then ${ROUNDS} rounds of ${SECONDS} s at ${RATE} events/s${
      BASELINE ? `, baseline ${BASELINE}` : ""
    }`,
  );
  await load(without, WARMUP);
  await load(withTypes, WARMUP);
  if (baseline) await load(baseline, WARMUP);
  const a: number[] = [], b: number[] = [], c: number[] = [];
  let savesWith = 0, savesBaseline = 0, events = 0;
  for (let round = 0; round < ROUNDS; round++) {
    a.push((await load(without, SECONDS)).cpu);
    const withRound = await load(withTypes, SECONDS);
    b.push(withRound.cpu);
    savesWith += withRound.saves;
    events += Math.round((SECONDS * RATE) / PER_TICK) * PER_TICK;
    let baseRound: { cpu: number; saves: number } | undefined;
    if (baseline) {
      baseRound = await load(baseline, SECONDS);
      c.push(baseRound.cpu);
      savesBaseline += baseRound.saves;
    }
    console.log(
      `round ${round + 1}: without ${a.at(-1)!.toFixed(2)} µs/event, with 50 types (10 critical) ${
        b.at(-1)!.toFixed(2)
      } µs/event, ${withRound.saves} latch saves${
        baseRound
          ? `; baseline with them ${baseRound.cpu.toFixed(2)} µs/event, ${baseRound.saves} saves`
          : ""
      }`,
    );
  }
  const median = (xs: number[]) => [...xs].sort((x, y) => x - y)[Math.floor(xs.length / 2)]!;
  const ratio = median(b) / median(a);
  console.log(
    `median: without ${median(a).toFixed(2)}, with ${median(b).toFixed(2)} µs/event; ratio ${
      ratio.toFixed(3)
    } (target <= 1.05); latch saves: ${savesWith} in ${events} events`,
  );
  if (baseline) {
    console.log(
      `baseline with the types ${
        median(c).toFixed(2)
      } µs/event, latch saves ${savesBaseline}; with over baseline ${
        (median(b) / median(c)).toFixed(3)
      }`,
    );
  }
  console.log(`safe: ${withTypes.safety().safe}, reasons: ${withTypes.safety().reasons.length}`);
} finally {
  await without.close();
  await withTypes.close();
  await baseline?.close();
  for (const watcher of watchers) watcher.close();
  for (const dir of dirs) await Deno.remove(dir, { recursive: true });
}
