/**
 * Line protocol against JSON (`deno task bench:line-protocol`, issue 37): the same events in
 * batches of 500, side by side in one run, rounds interleaved (each round in another order):
 *
 * - `events`: `POST /events` of a JSON array of 500 events (`Prefer: return=minimal`, so the
 *   answer is as small as `/write`'s 204);
 * - `write`: `POST /write?db=site` of the same 500 events as line protocol (docs/influx.md), to
 *   the same service;
 * - `influxdb`: the same lines, byte for byte, to InfluxDB 1.6's `POST /write` (Debian's
 *   `influxdb`, an `influxd` of our own on free loopback ports in a temp dir, bench/_util.ts),
 *   for the record.
 *
 * Each event is a weather reading: six float fields (a seeded random walk), one tag
 * (`station=ws1`; the JSON event carries it as `meta.tags`), and the caller's time, 2 ms apart
 * in a second of the request's own (so no request repeats an earlier one's points). The service
 * runs as `deno task start` runs it (bench/_util.ts), with `--fsync interval` (its default;
 * `--fsync always` to change); InfluxDB with its WAL fsynced per write (its default). wrk sends
 * the load over 4 keep-alive connections, `--warmup` seconds of each first, then `--rounds`
 * rounds of `--seconds` each (many short rounds: the load of a shared machine moves within
 * seconds, and the median of the rounds' ratios steadies with their number). Beside the events per second, the server's CPU per event (user +
 * system of all its threads, `/proc/<pid>/task/*\/schedstat`), which the load of a shared
 * machine moves less. The ratios are medians of each round's ratio. Before the load, one batch
 * of each kind is checked to be stored as the same events; after it, the site files must hold
 * every acknowledged event.
 *
 * Usage: deno task bench:line-protocol [-- --rounds 8] [--seconds 2] [--warmup 2]
 *   [--fsync interval|always] [--seed 37] [--no-influxdb]
 *
 * @module
 */

// deno-lint-ignore-file no-console
import { parseArgs } from "node:util";
import { join } from "node:path";
import {
  cpuNanos,
  freePort,
  influxdMissing,
  type InfluxServer,
  runWrk,
  SECOND_SLOT,
  secondSlotScript,
  serviceArgs,
  startInfluxd,
  stopChild,
  waitReady,
  WEATHER_FIELDS,
  weatherReadings,
} from "./_util.ts";

const USAGE = `Usage: deno task bench:line-protocol [-- options]

  --rounds N       Measured rounds [default 8]
  --seconds S      Each measured wrk run [default 2]
  --warmup S       Unmeasured load of each kind first [default 2]
  --fsync MODE     The service's --fsync: interval or always [default interval]
  --seed N         Seed of the readings [default 37]
  --no-influxdb    Leave InfluxDB 1.6 out`;

function usageError(message: string): never {
  console.error(`bench/line_protocol.ts: ${message}\n\n${USAGE}`);
  Deno.exit(2);
}

const { values: flags } = (() => {
  try {
    return parseArgs({
      args: Deno.args.filter((a) => a !== "--"), // `deno task bench:line-protocol -- --rounds 3`
      options: {
        rounds: { type: "string", default: "8" },
        seconds: { type: "string", default: "2" },
        warmup: { type: "string", default: "2" },
        fsync: { type: "string", default: "interval" },
        seed: { type: "string", default: "37" },
        "no-influxdb": { type: "boolean", default: false },
        help: { type: "boolean", short: "h", default: false },
      },
      strict: true,
    });
  } catch (err) {
    usageError((err as Error).message);
  }
})();
if (flags.help) {
  console.log(USAGE);
  Deno.exit(0);
}

function positive(name: string, text: string): number {
  const n = Number(text);
  if (!(n > 0) || !Number.isFinite(n)) usageError(`--${name} must be a positive number`);
  return n;
}

const ROUNDS = Math.round(positive("rounds", flags.rounds));
const SECONDS = positive("seconds", flags.seconds);
const WARMUP = positive("warmup", flags.warmup);
const SEED = Math.round(positive("seed", flags.seed));
if (flags.fsync !== "interval" && flags.fsync !== "always") {
  usageError(`--fsync must be interval or always, not "${flags.fsync}"`);
}
const FSYNC = flags.fsync;

const BATCH = 500;
const CONNECTIONS = 4;
const TYPE = "weather";
const TAGS = { station: "ws1" };
const FIELDS = WEATHER_FIELDS;

type Kind = "events" | "write" | "influxdb";
const NAME: Record<Kind, string> = {
  events: "POST /events (JSON)",
  write: "POST /write (line protocol)",
  influxdb: "InfluxDB 1.6 /write",
};

const READINGS = weatherReadings(BATCH, SEED);

const SLOT = SECOND_SLOT;

/**
 * A batch body of the 500 readings, the second of each time left as {@linkcode SLOT}: item i at
 * `i * 2` ms into it.
 */
function batchBody(kind: Kind): string {
  const mmm = (i: number) => String(i * 2).padStart(3, "0");
  if (kind === "events") {
    return `[${
      READINGS.map((v, i) =>
        JSON.stringify({
          type: TYPE,
          ts: `${SLOT}${mmm(i)}Z`,
          data: Object.fromEntries(FIELDS.map((f, k) => [f, v[k]!])),
          meta: { tags: TAGS },
        })
      ).join(",")
    }]`;
  }
  const tags = Object.entries(TAGS).map(([k, v]) => `,${k}=${v}`).join("");
  return READINGS.map((v, i) =>
    `${TYPE}${tags} ${FIELDS.map((f, k) => `${f}=${v[k]}`).join(",")} ${SLOT}${mmm(i)}000000`
  ).join("\n") + "\n";
}

/** One batch with its second filled in: the service's check before the load. */
function fillBody(kind: Kind, second: number): string {
  const text = kind === "events"
    ? new Date(second * 1000).toISOString().slice(0, 20) // 2026-12-07T08:00:00.
    : String(second);
  return batchBody(kind).replaceAll(SLOT, text);
}

/**
 * The wrk script of a kind: the batch whose second wrk fills in per request
 * (`base + n * 8 + thread`, wrk's threads numbered from 1, at most 8).
 */
function requestScript(kind: Kind, base: number): string {
  return secondSlotScript(batchBody(kind), base, kind === "events" ? "events" : "lines");
}

// ---------------------------------------------------------------------------------------------

interface Target {
  url: string;
  pid: number;
}

function loadAverage(): string {
  return Deno.readTextFileSync("/proc/loadavg").split(" ").slice(0, 3).join(" ");
}

const fmt = (n: number, d = 0) =>
  Number.isFinite(n)
    ? n.toLocaleString("en-US", { maximumFractionDigits: d, minimumFractionDigits: d })
    : "-";

function median(xs: readonly number[]): number {
  const s = [...xs].sort((a, b) => a - b);
  if (s.length === 0) return NaN;
  const mid = Math.floor(s.length / 2);
  return s.length % 2 ? s[mid]! : (s[mid - 1]! + s[mid]!) / 2;
}

/** The site files of `dir`. */
async function siteFiles(dir: string): Promise<string[]> {
  const files: string[] = [];
  for await (const entry of Deno.readDir(dir)) {
    if (/^site_\d+\.ndjson$/.test(entry.name)) files.push(join(dir, entry.name));
  }
  return files.sort();
}

/** The lines of the site files of `dir` (a few thousand: the check's). */
async function siteLines(dir: string): Promise<string[]> {
  const lines: string[] = [];
  for (const file of await siteFiles(dir)) {
    for (const line of (await Deno.readTextFile(file)).split("\n")) {
      if (line !== "") lines.push(line);
    }
  }
  return lines;
}

/** How many lines the site files of `dir` hold, read in chunks (millions, after the load). */
async function countSiteLines(dir: string): Promise<number> {
  let lines = 0;
  for (const path of await siteFiles(dir)) {
    using file = await Deno.open(path);
    for await (const chunk of file.readable) {
      for (let at = chunk.indexOf(10); at >= 0; at = chunk.indexOf(10, at + 1)) lines++;
    }
  }
  return lines;
}

/**
 * Posts one batch of each kind to the service, a second apart, and checks that both are stored
 * as the same 500 events (time, type, data, tags), a second apart.
 *
 * @throws {Error} When a post fails or the stored events differ.
 */
async function checkSameEvents(url: string, siteDir: string, second: number): Promise<void> {
  for (const kind of ["events", "write"] as const) {
    const res = await fetch(kind === "events" ? `${url}/events` : `${url}/write?db=site`, {
      method: "POST",
      headers: kind === "events"
        ? { "content-type": "application/json", prefer: "return=minimal" }
        : { "content-type": "text/plain; charset=utf-8" },
      body: fillBody(kind, kind === "events" ? second : second + 1),
    });
    const text = await res.text();
    if (!res.ok) throw new Error(`${NAME[kind]}: ${res.status} ${text}`);
  }
  const stored = (await siteLines(siteDir)).map((l) => JSON.parse(l))
    .filter((e) => e.type === TYPE)
    .map((e) => ({ ms: Date.parse(e.ts), type: e.type, data: e.data, tags: e.meta?.tags }));
  if (stored.length !== 2 * BATCH) {
    throw new Error(`the check batches stored ${stored.length} events, not ${2 * BATCH}`);
  }
  for (let i = 0; i < BATCH; i++) {
    const a = stored[i]!, b = stored[BATCH + i]!;
    const same = JSON.stringify({ ...a, ms: a.ms + 1000 }) === JSON.stringify(b);
    if (!same) {
      throw new Error(
        `event ${i} of the JSON batch and of the line-protocol batch differ: ${
          JSON.stringify(a)
        } and ${JSON.stringify(b)}`,
      );
    }
  }
}

async function main(): Promise<void> {
  const wrkMissing = (() => {
    try {
      new Deno.Command("wrk", { args: ["-v"], stdout: "null", stderr: "null" }).outputSync();
      return false;
    } catch (err) {
      if (err instanceof Deno.errors.NotFound) return true;
      throw err;
    }
  })();
  if (wrkMissing) usageError("wrk is not installed: apt-get install wrk");
  const noInflux = flags["no-influxdb"] ? "--no-influxdb" : influxdMissing();
  const kinds: Kind[] = noInflux === undefined ? ["events", "write", "influxdb"] : [
    "events",
    "write",
  ];
  const t0 = performance.now();
  const loadBefore = loadAverage();
  console.log(`# line protocol against JSON, ${new Date().toISOString()}`);
  console.log(
    `${Deno.build.target}, ${navigator.hardwareConcurrency} cores, deno ${Deno.version.deno}; ` +
      `batches of ${BATCH} over ${CONNECTIONS} connections; ${ROUNDS} rounds of ${SECONDS} s ` +
      `after ${WARMUP} s of warm-up; the service with --fsync ${FSYNC}; seed ${SEED}` +
      (noInflux === undefined ? "" : `; without InfluxDB (${noInflux})`),
  );
  console.log(`load average before: ${loadBefore}\n`);

  const siteDir = await Deno.makeTempDir({ prefix: "bench-line-protocol-service-" });
  const influxDir = await Deno.makeTempDir({ prefix: "bench-line-protocol-influxdb-" });
  const port = freePort();
  const child = new Deno.Command(Deno.execPath(), {
    args: serviceArgs({ siteDir, port, fsync: FSYNC }),
    stdout: "null",
    stderr: "inherit",
  }).spawn();
  let influx: InfluxServer | undefined;
  try {
    const service: Target = { url: `http://127.0.0.1:${port}`, pid: child.pid };
    await waitReady(service.url, "the service");
    if (kinds.includes("influxdb")) influx = await startInfluxd(influxDir, "site");
    const targets: Record<Kind, Target | undefined> = {
      events: service,
      write: service,
      influxdb: influx && { url: influx.url, pid: influx.pid },
    };
    // Times from 60 days ago; each run takes a block of seconds of its own.
    let base = Math.floor(Date.now() / 1000) - 60 * 86_400;
    await checkSameEvents(service.url, siteDir, base);
    base += 2;
    const acked: Record<Kind, number> = { events: 2 * BATCH, write: 0, influxdb: 0 };
    const rates: Record<Kind, number[]> = { events: [], write: [], influxdb: [] };
    const cpu: Record<Kind, number[]> = { events: [], write: [], influxdb: [] };
    const run = async (kind: Kind, seconds: number, round?: number) => {
      const target = targets[kind]!;
      const cpu0 = await cpuNanos(target.pid);
      const r = await runWrk({
        url: kind === "events" ? `${target.url}/events` : `${target.url}/write?db=site`,
        script: requestScript(kind, base),
        connections: CONNECTIONS,
        seconds,
      });
      const cpuNs = await cpuNanos(target.pid) - cpu0;
      base += (r.requests + CONNECTIONS + 1) * 8 + 8;
      if (r.errors > 0) {
        throw new Error(
          `${NAME[kind]}: ${r.errors} of ${r.requests} requests failed (${r.errorKinds})`,
        );
      }
      acked[kind] += r.requests * BATCH;
      if (round === undefined) return;
      const rate = r.requests * BATCH / r.seconds;
      const usPerEvent = cpuNs / 1000 / (r.requests * BATCH);
      rates[kind].push(rate);
      cpu[kind].push(usPerEvent);
      console.log(
        `round ${round} ${NAME[kind].padEnd(28)} ${fmt(rate).padStart(8)} events/s  CPU ${
          fmt(usPerEvent, 2)
        } µs/event  p50 ${fmt(r.p50Ms, 1)} ms  p99 ${fmt(r.p99Ms, 1)} ms`,
      );
    };
    for (const kind of kinds) await run(kind, WARMUP);
    for (let round = 1; round <= ROUNDS; round++) {
      // Each round starts with another kind, so none always runs first.
      const order = kinds.map((_, i) => kinds[(i + round - 1) % kinds.length]!);
      for (const kind of order) await run(kind, SECONDS, round);
    }
    const stored = await countSiteLines(siteDir);
    const wanted = acked.events + acked.write;
    console.log(`\nthe site files hold ${fmt(stored)} events of ${fmt(wanted)} acknowledged`);
    if (stored < wanted) throw new Error("the service acknowledged events its files do not hold");

    const ratio = (a: Kind, b: Kind, of: Record<Kind, number[]>) =>
      median(of[a].map((v, i) => v / of[b][i]!));
    console.log("\nMedians of the rounds; each ratio is the median of the rounds' ratios.\n");
    console.log(
      "| batches of 500 | events/s | CPU µs/event | events/s ÷ /events | CPU ÷ /events |",
    );
    console.log("|---|---:|---:|---:|---:|");
    for (const kind of kinds) {
      console.log(
        `| ${NAME[kind]} | ${fmt(median(rates[kind]))} | ${fmt(median(cpu[kind]), 2)} | ${
          fmt(ratio(kind, "events", rates), 2)
        } | ${fmt(ratio(kind, "events", cpu), 2)} |`,
      );
    }
    const met = ratio("write", "events", rates);
    console.log(
      `\nTarget of issue 37: /write at 0.8x or more of /events events/s: ${fmt(met, 2)}: ${
        met >= 0.8 ? "met" : "not met"
      }`,
    );
    for (const kind of kinds.filter((k) => k !== "events")) {
      console.log(
        `${NAME[kind]} ÷ /events in each round: ${
          rates[kind].map((v, i) => fmt(v / rates.events[i]!, 2)).join(", ")
        }`,
      );
    }
    console.log(
      `\nload average before ${loadBefore}, after ${loadAverage()}; ${
        fmt((performance.now() - t0) / 1000)
      } s in all`,
    );
  } finally {
    await influx?.stop();
    await stopChild(child);
    await Deno.remove(siteDir, { recursive: true });
    await Deno.remove(influxDir, { recursive: true });
  }
}

await main();
