/**
 * The fleet benchmark (`deno task bench:forward`, part of `deno task bench`). Against a real
 * `nats-server -js` and a real PostgreSQL on loopback, in one run:
 *
 * 1. Catch-up after an outage: a stored night of `--lines` events is forwarded from the files,
 *    to JetStream and to PostgreSQL, measured in events/s from start to the last acknowledged
 *    batch. Beside each, the floor: the same lines sent by the same client with the same batch
 *    size straight from memory (no files, no cursor), so the ratio is what forwarding costs.
 * 2. Live lag: the service (a child process) receives 1,000 events/s for `--live-seconds`; a
 *    forwarder child sends them to JetStream; a NATS subscriber measures, per event, the time
 *    from its `ts` (stamped by the service on receipt) to its arrival. p50/p99.
 * 3. Ingestion with and without a forwarder: wrk drives `POST /event` for `--seconds`, in
 *    alternating rounds with a forwarder child running (to JetStream) and without.
 *
 * Usage: deno run -A bench/forward.ts [--lines 200000] [--live-seconds 10] [--seconds 5]
 *   [--rounds 2] [--only catch-up|lag|cpu|ingest]
 * @module
 */

// deno-lint-ignore-file no-console
import { parseArgs } from "node:util";
import { join } from "node:path";
import { connect } from "npm:@nats-io/transport-node@^3.4.0";
import { forward, spawnForwarder } from "../forward.ts";
import { toRow } from "../fleet/item.ts";
import { NatsSink } from "../fleet/sinks/nats.ts";
import { PostgresSink } from "../fleet/sinks/postgres.ts";
import {
  giveSiteIdentity,
  natsMissing,
  NatsServer,
  postgresMissing,
  PostgresServer,
} from "../tests/_shared/fleet_util.ts";
import { freePort, luaString, runWrk, serviceArgs, waitReady } from "./_util.ts";

const { values } = parseArgs({
  args: Deno.args,
  options: {
    lines: { type: "string", default: "200000" },
    only: { type: "string" },
    "live-seconds": { type: "string", default: "10" },
    seconds: { type: "string", default: "5" },
    rounds: { type: "string", default: "2" },
  },
});
const LINES = Number(values.lines);
const LIVE_SECONDS = Number(values["live-seconds"]);
const SECONDS = Number(values.seconds);
const ROUNDS = Number(values.rounds);
const BATCH = 1000;

const missing = natsMissing() ?? postgresMissing();
if (missing) {
  console.log(`skipping the fleet benchmark: ${missing}`);
  Deno.exit(0);
}

function storedLine(seq: number): string {
  const ts = new Date(Date.UTC(2026, 10, 1, 20, 0, 0) + seq).toISOString();
  return JSON.stringify({
    seq,
    ts,
    type: ["weather", "power", "environment"][seq % 3],
    data: { wind_mps: (seq % 170) / 10, sky_temp_c: -20 + (seq % 13), rain: false, safe: true },
    meta: {},
  });
}

async function makeSite(lines: number): Promise<{ dir: string; lines: string[] }> {
  const dir = await Deno.makeTempDir({ prefix: "obs-fleet-bench-" });
  const all = Array.from({ length: lines }, (_, i) => storedLine(i + 1));
  await Deno.writeTextFile(join(dir, "site_20261101.ndjson"), all.join("\n") + "\n");
  await giveSiteIdentity(dir); // the forwarder claims its unit for this site id
  return { dir, lines: all };
}

/** Forwards the whole site directory once; events/s from start to the last acknowledgement. */
async function catchUp(siteDir: string, to: string, total: number): Promise<number> {
  const stop = new AbortController();
  let sent = 0;
  const t0 = performance.now();
  let t1 = t0;
  await forward({
    siteDir,
    to,
    unit: "bench",
    batch: BATCH,
    signal: stop.signal,
    onSent: (b) => {
      sent += b.count;
      if (sent >= total) {
        t1 = performance.now();
        stop.abort();
      }
    },
  });
  return total / ((t1 - t0) / 1000);
}

async function floorNats(url: string, lines: string[]): Promise<number> {
  const sink = await NatsSink.open(
    { url: new URL(url), stream: "FLOOR", subjectPrefix: "floor" },
    "bench",
  );
  const t0 = performance.now();
  for (let i = 0; i < lines.length; i += BATCH) {
    await sink.send(
      lines.slice(i, i + BATCH).map((line, j) => ({
        stream: "site" as const,
        runId: "",
        seq: i + j + 1,
        line,
      })),
    );
  }
  const rate = lines.length / ((performance.now() - t0) / 1000);
  await sink.close();
  return rate;
}

async function floorPostgres(url: string, lines: string[]): Promise<number> {
  const sink = await PostgresSink.open(url);
  const t0 = performance.now();
  for (let i = 0; i < lines.length; i += BATCH) {
    await sink.insert(
      lines.slice(i, i + BATCH).map((line, j) =>
        toRow("floor", { stream: "site", runId: "", seq: i + j + 1, line })
      ),
    );
  }
  const rate = lines.length / ((performance.now() - t0) / 1000);
  await sink.close();
  return rate;
}

function percentile(sorted: number[], p: number): number {
  return sorted[Math.min(sorted.length - 1, Math.floor((p / 100) * sorted.length))] ?? NaN;
}

async function startService(siteDir: string): Promise<{ url: string; child: Deno.ChildProcess }> {
  const port = freePort();
  const child = new Deno.Command(Deno.execPath(), {
    args: serviceArgs({ siteDir, port }),
    stdout: "null",
    stderr: "null",
  }).spawn();
  const url = `http://127.0.0.1:${port}`;
  await waitReady(url, "service");
  return { url, child };
}

async function stopService(s: { child: Deno.ChildProcess }): Promise<void> {
  s.child.kill("SIGTERM");
  await s.child.status;
}

/** Live lag at 1,000 events/s: ts (service receipt) to arrival at a NATS subscriber. */
async function liveLag(natsUrl: string): Promise<{ p50: number; p99: number; count: number }> {
  const siteDir = await Deno.makeTempDir({ prefix: "obs-fleet-live-" });
  const service = await startService(siteDir);
  const nc = await connect({ servers: natsUrl.replace("nats://", "") });
  const lags: number[] = [];
  const sub = nc.subscribe("telemetry.live.site");
  const collecting = (async () => {
    for await (const m of sub) {
      lags.push(Date.now() - Date.parse(JSON.parse(m.string()).ts));
    }
  })();
  const forwarder = spawnForwarder({ siteDir, to: natsUrl, unit: "live", output: "null" });
  await new Promise((r) => setTimeout(r, 1500)); // the forwarder connects
  const total = 1000 * LIVE_SECONDS;
  const t0 = performance.now();
  const pending: Promise<unknown>[] = [];
  for (let i = 0; i < total; i++) {
    const due = t0 + i; // one per millisecond
    const wait = due - performance.now();
    if (wait > 1) await new Promise((r) => setTimeout(r, wait));
    pending.push(
      fetch(`${service.url}/event`, {
        method: "POST",
        headers: { "content-type": "application/json" },
        body: JSON.stringify({ type: "weather", data: { i } }),
      }).then((r) => r.body?.cancel()),
    );
    if (pending.length >= 64) await Promise.all(pending.splice(0));
  }
  await Promise.all(pending);
  const deadline = Date.now() + 10_000;
  while (lags.length < total && Date.now() < deadline) await new Promise((r) => setTimeout(r, 50));
  await forwarder.stop();
  sub.unsubscribe();
  await collecting;
  await nc.close();
  await stopService(service);
  await Deno.remove(siteDir, { recursive: true });
  const sorted = lags.toSorted((a, b) => a - b);
  return { p50: percentile(sorted, 50), p99: percentile(sorted, 99), count: lags.length };
}

/** events/s of POST /event under wrk, with or without a forwarder child to JetStream. */
async function ingest(natsUrl: string, withForwarder: boolean): Promise<number> {
  const siteDir = await Deno.makeTempDir({ prefix: "obs-fleet-ingest-" });
  const service = await startService(siteDir);
  const forwarder = withForwarder
    ? spawnForwarder({ siteDir, to: natsUrl, unit: `ingest${Date.now()}`, output: "null" })
    : undefined;
  const body = JSON.stringify({ type: "weather", data: { wind_mps: 4.2, rain: false } });
  const r = await runWrk({
    url: `${service.url}/event`,
    script: `wrk.method = "POST"\nwrk.body = ${luaString(body)}\n` +
      `wrk.headers["Content-Type"] = "application/json"\n`,
    connections: 16,
    seconds: SECONDS,
  });
  await forwarder?.stop();
  await stopService(service);
  await Deno.remove(siteDir, { recursive: true });
  return r.requests / r.seconds;
}

/** CPU seconds (user + system) a process has used so far, from /proc. */
async function cpuSeconds(pid: number): Promise<number> {
  const stat = await Deno.readTextFile(`/proc/${pid}/stat`);
  const fields = stat.slice(stat.lastIndexOf(")") + 2).split(" ");
  return (Number(fields[11]) + Number(fields[12])) / 100; // utime, stime in clock ticks
}

/**
 * CPU per event at a fixed, unsaturated rate: the service's and the forwarder's, measured on
 * their own processes. What the forwarder costs does not depend on how busy the machine is.
 */
async function cpuPerEvent(natsUrl: string, rate: number, seconds: number, withForwarder = true) {
  const siteDir = await Deno.makeTempDir({ prefix: "obs-fleet-cpu-" });
  const service = await startService(siteDir);
  let sent = 0;
  const forwarder = withForwarder
    ? spawnForwarder({ siteDir, to: natsUrl, unit: `cpu${Date.now()}`, output: "null" })
    : undefined;
  await new Promise((r) => setTimeout(r, 1500)); // connected and idle
  const s0 = await cpuSeconds(service.child.pid);
  const f0 = forwarder ? await cpuSeconds(forwarder.pid) : 0;
  const total = rate * seconds;
  const t0 = performance.now();
  const pending: Promise<unknown>[] = [];
  for (let i = 0; i < total; i++) {
    const wait = t0 + (i * 1000) / rate - performance.now();
    if (wait > 1) await new Promise((r) => setTimeout(r, wait));
    pending.push(
      fetch(`${service.url}/event`, {
        method: "POST",
        headers: { "content-type": "application/json" },
        body: JSON.stringify({ type: "weather", data: { wind_mps: 4.2, rain: false, i } }),
      }).then((r) => r.body?.cancel()).then(() => sent++),
    );
    if (pending.length >= 32) await Promise.all(pending.splice(0));
  }
  await Promise.all(pending);
  await new Promise((r) => setTimeout(r, 1000)); // the forwarder catches up
  const serviceUs = ((await cpuSeconds(service.child.pid)) - s0) / sent * 1e6;
  const forwarderUs = forwarder ? ((await cpuSeconds(forwarder.pid)) - f0) / sent * 1e6 : 0;
  await forwarder?.stop();
  await stopService(service);
  await Deno.remove(siteDir, { recursive: true });
  return { serviceUs, forwarderUs, sent };
}

const nats = await NatsServer.start();
const pg = await PostgresServer.start();
try {
  console.log(`fleet benchmark: ${LINES} stored lines, batch ${BATCH}, ${Deno.build.target}`);
  const only = values.only;
  if (only === undefined || only === "catch-up") {
    const site = await makeSite(LINES);
    const natsFloor = await floorNats(nats.url, site.lines);
    const natsRate = await catchUp(site.dir, nats.url, LINES);
    const pgFloor = await floorPostgres(pg.url, site.lines);
    const pgRate = await catchUp(site.dir, pg.url, LINES);
    await Deno.remove(site.dir, { recursive: true });
    const row = (what: string, rate: number, floor: number, target: number) =>
      console.log(
        `${what.padEnd(34)} ${Math.round(rate).toString().padStart(8)} ev/s  floor ${
          Math.round(floor).toString().padStart(8)
        } ev/s  ratio ${(rate / floor).toFixed(2)}  target ${target} ev/s ${
          rate >= target ? "met" : "NOT met"
        }`,
      );
    row("catch-up to JetStream", natsRate, natsFloor, 50_000);
    row("catch-up to PostgreSQL", pgRate, pgFloor, 20_000);
  }
  if (only === undefined || only === "lag") {
    const live = await liveLag(nats.url);
    console.log(
      `live lag at 1000 ev/s (${live.count} events): p50 ${live.p50} ms, p99 ${live.p99} ms ` +
        `(target p99 < 1000 ms: ${live.p99 < 1000 ? "met" : "NOT met"})`,
    );
  }
  if (only === undefined || only === "cpu") {
    // Alternating rounds without and with a forwarder, at a rate the machine sustains.
    const alone: number[] = [];
    const beside: number[] = [];
    const fwd: number[] = [];
    for (let r = 0; r < ROUNDS; r++) {
      alone.push((await cpuPerEvent(nats.url, 2000, 5, false)).serviceUs);
      const cost = await cpuPerEvent(nats.url, 2000, 5, true);
      beside.push(cost.serviceUs);
      fwd.push(cost.forwarderUs);
    }
    const mean = (xs: number[]) => xs.reduce((a, b) => a + b, 0) / xs.length;
    console.log(
      `CPU per event at 2000 ev/s: service alone ${mean(alone).toFixed(1)} µs, service beside a ` +
        `forwarder ${mean(beside).toFixed(1)} µs (ratio ${
          (mean(alone) / mean(beside)).toFixed(2)
        }), ` +
        `the forwarder itself ${mean(fwd).toFixed(1)} µs`,
    );
  }
  if (only === undefined || only === "ingest") {
    // Twice: with JetStream competing for these cores at the service's priority, and with it
    // at nice 19, the stand-in for a destination on another machine (a hub, or a leaf node's
    // link): the second isolates what the forwarder itself costs the service.
    const remote = await NatsServer.start({ nice: 19 });
    try {
      for (const [what, url] of [["on these cores", nats.url], ["niced (remote)", remote.url]]) {
        const without: number[] = [];
        const withFwd: number[] = [];
        for (let r = 0; r < ROUNDS; r++) {
          without.push(await ingest(url!, false));
          withFwd.push(await ingest(url!, true));
        }
        const mean = (xs: number[]) => xs.reduce((a, b) => a + b, 0) / xs.length;
        const ratio = mean(withFwd) / mean(without);
        console.log(
          `POST /event, JetStream ${what}: without a forwarder ${
            Math.round(mean(without))
          } ev/s, with ${Math.round(mean(withFwd))} ev/s: ratio ${ratio.toFixed(2)} ` +
            `(target >= 0.90: ${ratio >= 0.9 ? "met" : "NOT met"})`,
        );
      }
    } finally {
      await remote[Symbol.asyncDispose]();
    }
  }
} finally {
  await nats[Symbol.asyncDispose]();
  await pg[Symbol.asyncDispose]();
}
