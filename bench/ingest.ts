/**
 * The ingestion benchmark (`deno task bench:ingest`, the first of `deno task bench`). In one run,
 * with alternating rounds on the same machine, it measures:
 *
 * - the floor: a bare `Deno.serve` handler that parses the body and answers an envelope;
 * - the service with `--fsync interval` (default), `always` and `never`;
 * - single `POST /event` over 16 keep-alive connections, and batch `POST /events` with 1,000
 *   events per NDJSON body;
 *
 * and prints events/s, p50/p99 latency, the ratio to the floor, peak RSS and start-up time to the
 * first 200 on `/ready`. After each service run it checks that the files hold exactly the
 * acknowledged events (every line parses, seq strictly increases, no line is missing).
 *
 * Load comes from `wrk` when installed (`apt-get install wrk`), else from a fetch-based
 * generator in this script (slower: the figures are then lower for every target alike).
 *
 * It ends with the memory check of issue 7: RSS after 10,000 and after 1,000,000 events.
 *
 * With `--baseline DIR` (a checkout of another version, e.g. made by `git worktree add`), the
 * service from DIR runs too, with `--fsync interval`, as target `baseline`: before/after ratios
 * come from the same rounds.
 *
 * With `--keyed`, two more targets run with `--fsync interval` (docs/http-api.md, "Retrying
 * safely"): `key`, whose every request (every batch) carries a new `Idempotency-Key`, and
 * `nokey`, loaded by the same wrk script with the same values sent as `X-Request-Id`, which the
 * service ignores: the two differ only in what the service does with the key.
 *
 * Every measurement starts a fresh process (so each file check counts only its own events) and
 * first sends it `--warmup` seconds of the same load, unmeasured but checked in the files: a
 * service runs for hours, and until V8 has compiled its hot code the larger program pays more
 * of its start than the few lines of the floor do.
 *
 * Usage: deno run -A bench/ingest.ts [--seconds 5] [--rounds 3] [--warmup 3] [--connections 16]
 *   [--skip-memory]
 *   [--baseline DIR] [--keyed] [--targets interval,key,nokey,baseline]
 * @module
 */

// deno-lint-ignore-file no-console
import { parseArgs } from "node:util";
import { join, resolve } from "node:path";
import { LineSplitter } from "../wire/ndjson.ts";
import {
  freePort,
  luaString,
  ROOT,
  runWrk,
  serviceArgs,
  waitReady,
  type WrkResult,
} from "./_util.ts";

const { values: flags } = parseArgs({
  args: Deno.args.filter((a) => a !== "--"), // `deno task bench:ingest -- --seconds 2` passes the "--"
  options: {
    seconds: { type: "string", default: "5" },
    rounds: { type: "string", default: "3" },
    warmup: { type: "string", default: "3" },
    connections: { type: "string", default: "16" },
    "batch-size": { type: "string", default: "1000" },
    "skip-memory": { type: "boolean", default: false },
    "memory-events": { type: "string", default: "1000000" },
    "no-wrk": { type: "boolean", default: false },
    baseline: { type: "string" },
    keyed: { type: "boolean", default: false },
    targets: { type: "string" },
  },
  strict: true,
});
const SECONDS = Number(flags.seconds);
const WARMUP = Number(flags.warmup);
const ROUNDS = Number(flags.rounds);
const CONNECTIONS = Number(flags.connections);
const BATCH = Number(flags["batch-size"]);
const EVENT = {
  type: "weather",
  data: { wind_mps: 2.1, temp_c: -3.5, humidity: 41, sky: "clear" },
};
const EVENT_JSON = JSON.stringify(EVENT);
const BATCH_BODY = Array.from({ length: BATCH }, () => EVENT_JSON).join("\n") + "\n";

type Target = "floor" | "interval" | "always" | "never" | "baseline" | "key" | "nokey";
const BASELINE = flags.baseline === undefined ? undefined : resolve(flags.baseline);
type Mode = "single" | "batch";

interface Sample {
  target: Target;
  mode: Mode;
  eventsPerSec: number;
  p50Ms: number;
  p99Ms: number;
  acked: number;
  errors: number;
  startupMs: number;
  peakRssMb: number;
  verified: string;
}

function hasWrk(): boolean {
  if (flags["no-wrk"]) return false;
  try {
    return new Deno.Command("wrk", { args: ["--version"], stdout: "null", stderr: "null" })
      .outputSync().code <= 1;
  } catch {
    return false;
  }
}

interface Running {
  child: Deno.ChildProcess;
  url: string;
  startupMs: number;
  siteDir: string | undefined;
}

async function start(target: Target): Promise<Running> {
  const port = freePort();
  let args: string[];
  let siteDir: string | undefined;
  if (target === "floor") {
    args = ["run", "--allow-net", join(ROOT, "bench/floor_server.ts"), String(port)];
  } else {
    siteDir = await Deno.makeTempDir({ prefix: `bench-${target}-` });
    args = serviceArgs({
      root: target === "baseline" ? BASELINE! : ROOT,
      siteDir,
      port,
      fsync: target === "always" || target === "never" ? target : "interval",
    });
  }
  const t0 = performance.now();
  const child = new Deno.Command(Deno.execPath(), { args, stdout: "null", stderr: "inherit" })
    .spawn();
  const url = `http://127.0.0.1:${port}`;
  await waitReady(url, target);
  return { child, url, startupMs: performance.now() - t0, siteDir };
}

function peakRssMb(pid: number): number {
  const status = Deno.readTextFileSync(`/proc/${pid}/status`);
  const m = /VmHWM:\s+(\d+) kB/.exec(status);
  return m ? Number(m[1]) / 1024 : NaN;
}

function currentRssMb(pid: number): number {
  const status = Deno.readTextFileSync(`/proc/${pid}/status`);
  const m = /VmRSS:\s+(\d+) kB/.exec(status);
  return m ? Number(m[1]) / 1024 : NaN;
}

async function stop(run: Running): Promise<void> {
  try {
    run.child.kill("SIGTERM");
  } catch {
    // gone
  }
  await run.child.status;
}

/**
 * The Lua lines that give every request a header of its own value, unique across wrk's threads
 * and across runs: `Idempotency-Key` for target `key`, `X-Request-Id` (ignored) for `nokey`.
 */
function perRequestHeader(target: Target): string {
  if (target !== "key" && target !== "nokey") return "";
  const header = target === "key" ? "Idempotency-Key" : "X-Request-Id";
  const run = crypto.randomUUID();
  return `local threads = 0
function setup(thread)
  threads = threads + 1
  thread:set("tid", threads)
end
local counter = 0
function request()
  counter = counter + 1
  wrk.headers["${header}"] = "${run}-" .. tid .. "-" .. counter
  return wrk.format()
end
`;
}

async function loadWithWrk(
  url: string,
  mode: Mode,
  seconds: number,
  target: Target,
): Promise<WrkResult> {
  const body = mode === "single" ? EVENT_JSON : BATCH_BODY;
  const contentType = mode === "single" ? "application/json" : "application/x-ndjson";
  return await runWrk({
    url: `${url}${mode === "single" ? "/event" : "/events"}`,
    script: `wrk.method = "POST"\nwrk.body = ${
      luaString(body)
    }\nwrk.headers["Content-Type"] = "${contentType}"\n${perRequestHeader(target)}`,
    connections: mode === "single" ? CONNECTIONS : 4,
    seconds,
  });
}

async function loadWithFetch(
  url: string,
  mode: Mode,
  seconds: number,
  target: Target,
): Promise<WrkResult> {
  const header = target === "key" ? "idempotency-key" : target === "nokey" ? "x-request-id" : "";
  const latencies: number[] = [];
  let requests = 0, errors = 0;
  const end = performance.now() + seconds * 1000;
  const t0 = performance.now();
  const connections = mode === "single" ? CONNECTIONS : 4;
  await Promise.all(Array.from({ length: connections }, async () => {
    while (performance.now() < end) {
      const s = performance.now();
      try {
        const res = await fetch(`${url}${mode === "single" ? "/event" : "/events"}`, {
          method: "POST",
          headers: {
            "content-type": mode === "single" ? "application/json" : "application/x-ndjson",
            ...(header ? { [header]: crypto.randomUUID() } : {}),
          },
          body: mode === "single" ? EVENT_JSON : BATCH_BODY,
        });
        await res.arrayBuffer();
        if (res.ok) requests++;
        else errors++;
      } catch {
        errors++;
      }
      latencies.push(performance.now() - s);
    }
  }));
  latencies.sort((a, b) => a - b);
  const pct = (p: number) =>
    latencies[Math.min(latencies.length - 1, Math.floor(p * latencies.length))] ?? NaN;
  return {
    requests: requests + errors,
    errors,
    seconds: (performance.now() - t0) / 1000,
    p50Ms: pct(0.5),
    p99Ms: pct(0.99),
  };
}

/**
 * Every line parses, seq strictly increases across the nights' files, and the count matches what
 * was acknowledged. Files are streamed: a warm-up and a window of batches pass 500 MB.
 */
async function verify(siteDir: string, acked: number, inFlightMax: number): Promise<string> {
  let lines = 0;
  let last = 0;
  let problem: string | undefined;
  const onLine = (line: string) => {
    if (line === "" || problem) return;
    const env = JSON.parse(line);
    if (env.seq <= last) problem = `FAIL: seq ${env.seq} after ${last}`;
    last = env.seq;
    lines++;
  };
  const names = (await Array.fromAsync(Deno.readDir(siteDir)))
    .map((e) => e.name).filter((n) => n.startsWith("site_")).sort(); // nights in order
  for (const name of names) {
    const splitter = new LineSplitter();
    using file = await Deno.open(join(siteDir, name));
    for await (const chunk of file.readable) splitter.push(chunk, onLine);
    splitter.end(onLine);
  }
  if (problem) return problem;
  // wrk stops with requests in flight: the server may have written up to one per connection
  // (a batch each, for /events) that wrk never counted.
  if (lines < acked) return `FAIL: ${lines} lines < ${acked} acknowledged`;
  if (lines > acked + inFlightMax) {
    return `FAIL: ${lines} lines > ${acked} acknowledged + in-flight`;
  }
  return lines === acked ? "ok (exact)" : `ok (+${lines - acked} in flight at stop)`;
}

async function measure(target: Target, mode: Mode, useWrk: boolean): Promise<Sample> {
  const run = await start(target);
  try {
    const loadFor = (seconds: number) =>
      useWrk
        ? loadWithWrk(run.url, mode, seconds, target)
        : loadWithFetch(run.url, mode, seconds, target);
    const warm = WARMUP > 0 ? await loadFor(WARMUP) : undefined;
    const load = await loadFor(SECONDS);
    const perRequest = mode === "single" ? 1 : BATCH;
    const acked = (load.requests - load.errors) * perRequest;
    const warmAcked = warm ? (warm.requests - warm.errors) * perRequest : 0;
    const peak = peakRssMb(run.child.pid);
    await stop(run);
    let verified = "n/a (no disk)";
    if (run.siteDir) {
      // Each load can stop with one request per connection answered but not counted.
      const inFlight = (mode === "single" ? CONNECTIONS : 4) * perRequest * (warm ? 2 : 1);
      verified = await verify(run.siteDir, warmAcked + acked, inFlight);
      await Deno.remove(run.siteDir, { recursive: true });
    }
    return {
      target,
      mode,
      eventsPerSec: acked / load.seconds,
      p50Ms: load.p50Ms,
      p99Ms: load.p99Ms,
      acked,
      errors: load.errors + (warm?.errors ?? 0),
      startupMs: run.startupMs,
      peakRssMb: peak,
      verified,
    };
  } finally {
    await stop(run);
  }
}

/** One fdatasync per event, sequentially: what group commit is compared against. */
async function fsyncPerEvent(): Promise<number> {
  const dir = await Deno.makeTempDir({ prefix: "bench-fsync-" });
  const file = await Deno.open(join(dir, "x.ndjson"), { append: true, create: true });
  const line = new TextEncoder().encode(EVENT_JSON + "\n");
  const n = 300;
  const t0 = performance.now();
  for (let i = 0; i < n; i++) {
    await file.write(line);
    await file.syncData();
  }
  const secs = (performance.now() - t0) / 1000;
  file.close();
  await Deno.remove(dir, { recursive: true });
  return n / secs;
}

/** RSS after 10,000 events and after `total` events, posted in batches (issue 7.3). */
async function memoryRun(total: number): Promise<{ after10k: number; afterAll: number }> {
  const run = await start("interval");
  try {
    let sent = 0;
    let after10k = NaN;
    const body = BATCH_BODY;
    const post = () =>
      fetch(`${run.url}/events`, {
        method: "POST",
        headers: { "content-type": "application/x-ndjson" },
        body,
      }).then(async (r) => {
        await r.arrayBuffer();
        if (!r.ok) throw new Error(`batch failed: ${r.status}`);
      });
    while (sent < total) {
      await Promise.all([post(), post(), post(), post()]);
      sent += 4 * BATCH;
      if (Number.isNaN(after10k) && sent >= 10_000) after10k = currentRssMb(run.child.pid);
    }
    const afterAll = currentRssMb(run.child.pid);
    return { after10k, afterAll };
  } finally {
    await stop(run);
    if (run.siteDir) await Deno.remove(run.siteDir, { recursive: true });
  }
}

function median(xs: number[]): number {
  const s = [...xs].sort((a, b) => a - b);
  return s[Math.floor(s.length / 2)] ?? NaN;
}

const fmt = (n: number, d = 0) =>
  Number.isFinite(n)
    ? n.toLocaleString("en-US", { maximumFractionDigits: d, minimumFractionDigits: d })
    : "-";

async function main() {
  const useWrk = hasWrk();
  const cpu = (await Deno.readTextFile("/proc/cpuinfo")).match(/model name\s*:\s*(.*)/)?.[1] ?? "?";
  console.log(`# telemetry ingestion benchmark, ${new Date().toISOString()}`);
  console.log(
    `machine: ${Deno.build.target}, ${navigator.hardwareConcurrency} cores (${cpu}), deno ${Deno.version.deno}`,
  );
  console.log(
    `load: ${
      useWrk ? "wrk" : "built-in fetch generator (install wrk for higher figures)"
    }; ${ROUNDS} rounds x ${SECONDS}s, each after ${WARMUP}s of warm-up; single: ${CONNECTIONS} connections; batch: ${BATCH} events/body, 4 connections\n`,
  );
  const targets: Target[] = ["floor", "interval", "always", "never"];
  if (BASELINE) targets.push("baseline");
  if (flags.keyed) targets.push("key", "nokey");
  // `--targets` keeps only those named (in this order): a comparison of two need not run all.
  if (flags.targets !== undefined) {
    const only = flags.targets.split(",") as Target[];
    targets.splice(0, targets.length, ...only.filter((t) => targets.includes(t)));
  }
  const samples: Sample[] = [];
  for (let round = 1; round <= ROUNDS; round++) {
    for (const mode of ["single", "batch"] as Mode[]) {
      // Every other round in reverse: no target always runs right after the same one.
      for (const target of round % 2 ? targets : targets.toReversed()) {
        const s = await measure(target, mode, useWrk);
        samples.push(s);
        console.log(
          `round ${round} ${mode.padEnd(6)} ${target.padEnd(8)} ${
            fmt(s.eventsPerSec).padStart(10)
          } ev/s  p50 ${fmt(s.p50Ms, 2)} ms  p99 ${
            fmt(s.p99Ms, 2)
          } ms  errors ${s.errors}  files ${s.verified}`,
        );
      }
    }
  }
  const perEventFsync = await fsyncPerEvent();
  console.log("\n## Medians over rounds\n");
  console.log(
    "| mode | target | events/s | x floor | p50 ms | p99 ms | peak RSS MB | start-up ms | files |",
  );
  console.log("|---|---|---:|---:|---:|---:|---:|---:|---|");
  const floor: Record<Mode, number> = { single: 0, batch: 0 };
  for (const mode of ["single", "batch"] as Mode[]) {
    for (const target of targets) {
      const group = samples.filter((s) => s.target === target && s.mode === mode);
      const eps = median(group.map((s) => s.eventsPerSec));
      if (target === "floor") floor[mode] = eps;
      const verified = group.every((s) => !s.verified.startsWith("FAIL")) ? "ok" : "FAIL";
      console.log(
        `| ${mode} | ${target} | ${fmt(eps)} | ${fmt(eps / floor[mode], 2)} | ${
          fmt(median(group.map((s) => s.p50Ms)), 2)
        } | ${fmt(median(group.map((s) => s.p99Ms)), 2)} | ${
          fmt(Math.max(...group.map((s) => s.peakRssMb)), 1)
        } | ${fmt(median(group.map((s) => s.startupMs)))} | ${verified} |`,
      );
    }
  }
  const always = median(
    samples.filter((s) => s.target === "always" && s.mode === "single").map((s) => s.eventsPerSec),
  );
  console.log(
    `\nOne fdatasync per event (sequential appends): ${
      fmt(perEventFsync)
    } ev/s; --fsync always with group commit: ${fmt(always)} ev/s = ${
      fmt(always / perEventFsync, 1)
    }x`,
  );
  if (!flags["skip-memory"]) {
    const total = Number(flags["memory-events"]);
    const mem = await memoryRun(total);
    console.log(
      `\nMemory: RSS ${fmt(mem.after10k, 1)} MB after 10,000 events, ${
        fmt(mem.afterAll, 1)
      } MB after ${fmt(total)} (growth ${fmt(mem.afterAll - mem.after10k, 1)} MB)`,
    );
  }
  if (samples.some((s) => s.verified.startsWith("FAIL"))) {
    console.error("\nFAIL: a run's files did not hold exactly the acknowledged events");
    Deno.exit(1);
  }
}

await main();
