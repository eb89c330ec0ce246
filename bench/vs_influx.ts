/**
 * The service against InfluxDB 1.6 (`deno task bench:vs-influx`, issue 35): the store an
 * observatory would pick instead, side by side in one run on this machine. InfluxDB is Debian's
 * `influxdb` (`apt-get install influxdb`); the benchmark starts its own `influxd` on free loopback
 * ports in a temp dir (the config `influxd config` prints, with its directories and addresses
 * moved there and `wal-fsync-delay = "0s"`: its write-ahead log fsynced per write) and stops it.
 * The service runs as `deno task start` runs it (bench/_util.ts), with `--fsync always`, so
 * durability is like for like: nothing is acknowledged before it is on disk in either.
 *
 * Six rows, each the service against InfluxDB with the ratio, rounds interleaved (service,
 * InfluxDB, then the other way round), medians:
 *
 * 1. Single events over 32 keep-alive connections, requests/s: `POST /event` of one event
 *    against `POST /write` of one line (6 fields, no time: each server stamps it), by wrk.
 * 2. Batches of 500 with the caller's time, events/s over 4 connections, by wrk: `POST /events`
 *    with a JSON array (and `Prefer: return=minimal`) against `POST /write` of 500 lines. Each
 *    request has times of its own (a second of its own, 500 events 2 ms apart), so neither store
 *    is handed the same points again.
 * 3. A 1 Hz night (43,200 points of 6 fields, seeded, ending now) read as 1-minute means, ms:
 *    `GET /history?type=weather&since=&until=&every=1m&agg=mean` (docs/history.md) against
 *    `SELECT mean(*) FROM weather WHERE time >= ... AND time < ... GROUP BY time(1m)`.
 * 4. The whole night raw, ms: `GET /history?type=weather&since=&until=` against `SELECT *`.
 * 5. The last hour raw, ms, and what fraction of row 4's time it costs, for each.
 * 6. Server CPU (user + system of the whole process, `/proc/<pid>/stat`) per 100,000 single
 *    events sent at a steady 5,000 events/s over 32 connections (the requests of row 1).
 *
 * Rows 1, 2 and 6 start a fresh service and `influxd` each, warm both up with `--warmup` seconds
 * of the row's load at full speed (row 6 three times as long: V8 compiles the service's hot code
 * by the number of calls), then measure `--rounds` rounds of `--seconds` each; afterwards the
 * service's files must hold every acknowledged event (InfluxDB's count is printed beside it).
 * For rows 3 to 5 the night is first loaded into a fresh service and a fresh `influxd` the same
 * way (batches of 500 over HTTP, the service's JSON, InfluxDB's lines), both are stopped and
 * started again over their data, each query is asked once of each unmeasured (and the two answers
 * compared: the same buckets, the same means, the same number of points), then 3 times `--rounds`
 * in turn. A night this size stays in InfluxDB's in-memory cache, as it does through a night with
 * its defaults.
 *
 * Time is wall time from the request to the last byte of the answer, in this process (`fetch`);
 * a second table gives the read rows as the server's CPU time per query (all its threads, from
 * `/proc/<pid>/task/<tid>/schedstat`), which the load of a shared machine moves far less.
 * The table gives the medians of the rounds, and as the ratio the median of each round's ratio
 * (the two figures of a round ran seconds apart, under the same load: steadier than the ratio of
 * the medians on a shared machine); below it, each round's ratio, and the load average before and
 * after. The whole run takes about 3 minutes on 2 cores (`--quick`: about one).
 *
 * `--profile DIR` runs each service with `--cpu-prof` and writes the CPU profile behind each row
 * to `DIR/row<N>/` (open it in Chrome's DevTools, Performance, or speedscope), and prints each
 * one's functions with the most self time; each read row then gets a service of its own, so that
 * its profile holds its queries alone (and the service's start). Figures measured under the
 * profiler run slower: take the table from a run without it.
 *
 * Usage: deno task bench:vs-influx [-- --rows 1,2,3-6] [--quick] [--rounds 5] [--seconds 3]
 *   [--warmup 3] [--seed 35] [--profile DIR]
 *
 * @module
 */

// deno-lint-ignore-file no-console
import { parseArgs } from "node:util";
import { join, resolve } from "node:path";
import {
  cpuNanos,
  cpuSeconds,
  freePort,
  influxQuery as sharedQuery,
  influxQueryUrl as sharedQueryUrl,
  KeepAliveConnection,
  luaString,
  pacedLoad,
  type PostRequest,
  ROOT,
  runWrk,
  SECOND_SLOT,
  secondSlotScript,
  serviceArgs,
  startInfluxd,
  stopChild,
  waitReady,
  WEATHER_FIELDS,
  weatherReadings,
  type WrkResult,
} from "./_util.ts";

const USAGE = `Usage: deno task bench:vs-influx [-- options]

  --rows R        Rows to run: numbers and ranges, e.g. 1,2 or 3-5 [default 1-6]; row 5 brings
                  row 4 (its fraction of the whole night)
  --quick         A short run (about a minute): --rounds 3, --seconds 2, --warmup 1, one
                  query of each read row per round
  --rounds N      Rounds of each row [default 5]
  --seconds S     Each measured load of rows 1, 2 and 6 [default 3]
  --warmup S      Unmeasured load before a write row's rounds [default 3]
  --seed N        Seed of the night's readings [default 35]
  --profile DIR   Write the service's CPU profile behind each row to DIR/row<N>/`;

function usageError(message: string): never {
  console.error(`bench/vs_influx.ts: ${message}\n\n${USAGE}`);
  Deno.exit(2);
}

const { values: flags } = (() => {
  try {
    return parseArgs({
      args: Deno.args.filter((a) => a !== "--"), // `deno task bench:vs-influx -- --quick`
      options: {
        rows: { type: "string", default: "1-6" },
        quick: { type: "boolean", default: false },
        rounds: { type: "string" },
        seconds: { type: "string" },
        warmup: { type: "string" },
        seed: { type: "string", default: "35" },
        profile: { type: "string" },
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

function numberFlag(name: string, text: string | undefined, fallback: number): number {
  if (text === undefined) return fallback;
  const n = Number(text);
  if (!(n > 0) || !Number.isFinite(n)) {
    usageError(`--${name} must be a positive number, not "${text}"`);
  }
  return n;
}

const ROUNDS = Math.round(numberFlag("rounds", flags.rounds, flags.quick ? 3 : 5));
const SECONDS = numberFlag("seconds", flags.seconds, flags.quick ? 2 : 3);
const WARMUP = numberFlag("warmup", flags.warmup, flags.quick ? 1 : 3);
const SEED = Math.round(numberFlag("seed", flags.seed, 35));
/** Each read row is asked this many times per round (a query takes milliseconds). */
const QUERIES_PER_ROUND = flags.quick ? 1 : 3;
const PROFILE = flags.profile === undefined ? undefined : resolve(flags.profile);

/** The rows `--rows` names, in order. */
function parseRows(text: string): number[] {
  const rows = new Set<number>();
  for (const part of text.split(",")) {
    const m = /^\s*([1-6])\s*(?:-\s*([1-6])\s*)?$/.exec(part);
    if (!m) usageError(`--rows: "${part}" is not a row; rows are 1 to 6 (e.g. --rows 1,3-5)`);
    for (let r = Number(m[1]); r <= Number(m[2] ?? m[1]); r++) rows.add(r);
  }
  if (rows.has(5)) rows.add(4);
  return [...rows].sort((a, b) => a - b);
}
const ROWS = parseRows(flags.rows);

type Store = "service" | "influx";
const STORES: readonly Store[] = ["service", "influx"];
const STORE_NAME: Record<Store, string> = { service: "service", influx: "InfluxDB" };

const FIGURES: Record<number, string> = {
  1: "single events, 32 connections, req/s",
  2: "batches of 500 with the caller's `ts`, events/s",
  3: "a 1 Hz night (43,200 x 6 fields) as 1-minute means, ms",
  4: "the whole night raw, ms",
  5: "the last hour raw, ms",
  6: "CPU per 100k events at 5,000/s",
};

const SINGLE_CONNECTIONS = 32;
const BATCH = 500;
const BATCH_CONNECTIONS = 4;
const NIGHT_POINTS = 43_200;
const RATE = 5000;
const DB = "bench";
const TYPE = "weather";

// ---------------------------------------------------------------------------------------------
// The data: six numeric fields of a weather station, seeded.

const FIELDS = WEATHER_FIELDS;

const NIGHT = weatherReadings(NIGHT_POINTS, SEED);

function dataOf(values: readonly number[]): Record<string, number> {
  return Object.fromEntries(FIELDS.map((f, k) => [f, values[k]!]));
}

/** One event as the service takes it; without `ts` the service stamps it. */
function serviceEvent(values: readonly number[], ts?: string): string {
  return JSON.stringify(
    ts === undefined ? { type: TYPE, data: dataOf(values) } : {
      type: TYPE,
      ts,
      data: dataOf(values),
    },
  );
}

/** One point in InfluxDB's line protocol (floats); without a time InfluxDB stamps it. */
function influxLine(values: readonly number[], timeNs?: string): string {
  const fields = FIELDS.map((f, k) => `${f}=${values[k]}`).join(",");
  return `${TYPE} ${fields}${timeNs === undefined ? "" : ` ${timeNs}`}`;
}

/** A batch body for each store: `ts(i)` gives item i's time as ISO 8601 and as ns. */
function batchBody(
  store: Store,
  values: readonly (readonly number[])[],
  ts: (i: number) => { iso: string; ns: string },
): string {
  return store === "service"
    ? `[${values.map((v, i) => serviceEvent(v, ts(i).iso)).join(",")}]`
    : values.map((v, i) => influxLine(v, ts(i).ns)).join("\n") + "\n";
}

// ---------------------------------------------------------------------------------------------
// The two servers.

interface Server {
  readonly store: Store;
  readonly url: string;
  readonly port: number;
  readonly pid: number;
  stop(): Promise<void>;
}

/** The service over `siteDir` as `deno task start` runs it, with `--fsync always`. */
async function startService(siteDir: string, profileDir?: string): Promise<Server> {
  const port = freePort();
  const denoFlags = profileDir === undefined ? [] : ["--cpu-prof", `--cpu-prof-dir=${profileDir}`];
  const child = new Deno.Command(Deno.execPath(), {
    args: serviceArgs({ siteDir, port, fsync: "always", denoFlags }),
    stdout: "null",
    stderr: "inherit",
  }).spawn();
  const url = `http://127.0.0.1:${port}`;
  try {
    await waitReady(url, "the service");
  } catch (err) {
    child.kill("SIGKILL");
    await child.status;
    throw err;
  }
  return { store: "service", url, port, pid: child.pid, stop: () => stopChild(child) };
}

/** `influxd` over `dir` (bench/_util.ts), with the database `bench`. */
async function startInflux(dir: string): Promise<Server> {
  const influx = await startInfluxd(dir, DB);
  return {
    store: "influx",
    url: influx.url,
    port: influx.port,
    pid: influx.pid,
    stop: influx.stop,
  };
}

function influxQueryUrl(url: string, q: string): string {
  return sharedQueryUrl(url, DB, q);
}

// deno-lint-ignore no-explicit-any
function influxQuery(url: string, q: string): Promise<any> {
  return sharedQuery(url, DB, q);
}

/** Starts both servers over `dirs`; `label` names the service's profile dir under `--profile`. */
async function startPair(
  dirs: Record<Store, string>,
  label?: string,
): Promise<Record<Store, Server>> {
  const service = await startService(
    dirs.service,
    PROFILE === undefined || label === undefined ? undefined : join(PROFILE, label),
  );
  try {
    return { service, influx: await startInflux(dirs.influx) };
  } catch (err) {
    await service.stop();
    throw err;
  }
}

async function tempDirs(prefix: string): Promise<Record<Store, string>> {
  return {
    service: await Deno.makeTempDir({ prefix: `vs-influx-${prefix}-service-` }),
    influx: await Deno.makeTempDir({ prefix: `vs-influx-${prefix}-influxdb-` }),
  };
}

async function removeDirs(dirs: Record<Store, string>): Promise<void> {
  for (const dir of Object.values(dirs)) await Deno.remove(dir, { recursive: true });
}

/** What each store holds: the service's lines in its site files, InfluxDB's count of points. */
async function storedCount(server: Server, siteDir: string): Promise<number> {
  if (server.store === "influx") {
    const json = await influxQuery(server.url, `SELECT count(${FIELDS[0]}) FROM ${TYPE}`);
    return json.results[0].series?.[0]?.values?.[0]?.[1] ?? 0;
  }
  let lines = 0;
  for await (const entry of Deno.readDir(siteDir)) {
    if (!/^site_\d+\.ndjson$/.test(entry.name)) continue;
    using file = await Deno.open(join(siteDir, entry.name));
    for await (const chunk of file.readable) {
      for (let at = chunk.indexOf(10); at >= 0; at = chunk.indexOf(10, at + 1)) lines++;
    }
  }
  return lines;
}

// ---------------------------------------------------------------------------------------------
// Results.

type Samples = Record<Store, number[]>;
/** Each row's figures, in round order. */
const results = new Map<number, Samples>();
/** The read rows' server CPU per query, ms, in round order. */
const readCpu = new Map<number, Samples>();
const notes: string[] = [];

function record(row: number, store: Store, value: number, into = results): void {
  if (!into.has(row)) into.set(row, { service: [], influx: [] });
  into.get(row)![store].push(value);
}

/** Every other round the other way round: neither store always runs first. */
function order(round: number): readonly Store[] {
  return round % 2 ? STORES : STORES.toReversed();
}

const fmt = (n: number, d = 0) =>
  Number.isFinite(n)
    ? n.toLocaleString("en-US", { maximumFractionDigits: d, minimumFractionDigits: d })
    : "-";

function loadAverage(): string {
  return Deno.readTextFileSync("/proc/loadavg").split(" ").slice(0, 3).join(" ");
}

// ---------------------------------------------------------------------------------------------
// Rows 1 and 2: wrk against both.

/** The wrk script of row 1: the same single event (or line) on every request. */
function singleScript(store: Store): string {
  const body = store === "service" ? serviceEvent(NIGHT[0]!) : influxLine(NIGHT[0]!);
  const type = store === "service" ? "application/json" : "text/plain; charset=utf-8";
  return `wrk.method = "POST"\nwrk.body = ${
    luaString(body)
  }\nwrk.headers["Content-Type"] = "${type}"\n`;
}

const SLOT = SECOND_SLOT;

/**
 * The wrk script of row 2: a batch of 500 readings whose times wrk fills in per request, a
 * second of their own (`base + n * 8 + thread`, wrk's threads numbered from 1, at most 8), the
 * 500 items 2 ms apart in it, so that no request repeats an earlier one's points.
 */
function batchScript(store: Store, base: number): string {
  const mmm = (i: number) => String(i * 2).padStart(3, "0");
  const body = batchBody(
    store,
    NIGHT.slice(0, BATCH),
    (i) => ({ iso: `${SLOT}${mmm(i)}Z`, ns: `${SLOT}${mmm(i)}000000` }),
  );
  return secondSlotScript(body, base, store === "service" ? "events" : "lines");
}

async function wrkRows(row: 1 | 2): Promise<void> {
  const dirs = await tempDirs(`row${row}`);
  const servers = await startPair(dirs, `row${row}`);
  const perRequest = row === 1 ? 1 : BATCH;
  const connections = row === 1 ? SINGLE_CONNECTIONS : BATCH_CONNECTIONS;
  // Row 2's times: from 60 days ago, a block of seconds per wrk run, the same for both stores.
  const base: Record<Store, number> = {
    service: Math.floor(Date.now() / 1000) - 60 * 86_400,
    influx: Math.floor(Date.now() / 1000) - 60 * 86_400,
  };
  const acked: Record<Store, number> = { service: 0, influx: 0 };
  const run = async (store: Store, seconds: number): Promise<WrkResult> => {
    const server = servers[store];
    const r = await runWrk({
      url: store === "service"
        ? `${server.url}${row === 1 ? "/event" : "/events"}`
        : `${server.url}/write?db=${DB}`,
      script: row === 1 ? singleScript(store) : batchScript(store, base[store]),
      connections,
      seconds,
    });
    // Past every second a request of this run could have used (answered or in flight).
    base[store] += (r.requests + connections + 1) * 8 + 8;
    acked[store] += (r.requests - r.errors) * perRequest;
    return r;
  };
  try {
    for (const store of STORES) await run(store, WARMUP);
    for (let round = 1; round <= ROUNDS; round++) {
      for (const store of order(round)) {
        const r = await run(store, SECONDS);
        if (r.errors > r.requests / 100) {
          throw new Error(
            `row ${row}: ${STORE_NAME[store]} failed ${r.errors} of ${r.requests} requests`,
          );
        }
        const rate = (r.requests - r.errors) * perRequest / r.seconds;
        record(row, store, rate);
        console.log(
          `row ${row} round ${round} ${STORE_NAME[store].padEnd(8)} ${fmt(rate).padStart(9)} ${
            row === 1 ? "req/s" : "events/s"
          }  p50 ${fmt(r.p50Ms, 2)} ms  p99 ${fmt(r.p99Ms, 2)} ms  errors ${r.errors}`,
        );
      }
    }
    for (const store of STORES) {
      const stored = await storedCount(servers[store], dirs.service);
      console.log(
        `row ${row} ${STORE_NAME[store]} holds ${fmt(stored)} points of ${
          fmt(acked[store])
        } acknowledged`,
      );
      if (store === "service" && stored < acked[store]) {
        throw new Error(`row ${row}: the service acknowledged events its files do not hold`);
      }
    }
  } finally {
    for (const server of Object.values(servers)) await server.stop();
    await removeDirs(dirs);
  }
}

// ---------------------------------------------------------------------------------------------
// Row 6: CPU at a steady 5,000 events/s.

async function cpuRow(): Promise<void> {
  const dirs = await tempDirs("row6");
  const servers = await startPair(dirs, "row6");
  const requests: Record<Store, PostRequest> = {
    service: { path: "/event", body: serviceEvent(NIGHT[0]!), contentType: "application/json" },
    influx: {
      path: `/write?db=${DB}`,
      body: influxLine(NIGHT[0]!),
      contentType: "text/plain; charset=utf-8",
    },
  };
  try {
    // Warm up at full speed, three times as long as the other rows: V8 compiles the service's
    // hot code by the number of calls, and until it has, its compiler threads add CPU per event
    // (bench/commit.ts).
    for (const store of STORES) {
      await runWrk({
        url: `${servers[store].url}${requests[store].path}`,
        script: singleScript(store),
        connections: SINGLE_CONNECTIONS,
        seconds: 3 * WARMUP,
      });
    }
    for (let round = 1; round <= ROUNDS; round++) {
      for (const store of order(round)) {
        const server = servers[store];
        const conns = await Promise.all(
          Array.from(
            { length: SINGLE_CONNECTIONS },
            () => KeepAliveConnection.open(server.port, requests[store]),
          ),
        );
        let cpuStart = 0;
        const paced = await pacedLoad(conns, {
          rate: RATE,
          seconds: SECONDS,
          onWindow: async () => {
            cpuStart = await cpuSeconds(server.pid);
          },
        });
        const cpu = await cpuSeconds(server.pid) - cpuStart;
        for (const conn of conns) conn.close();
        const per100k = cpu / paced.events * 100_000;
        record(6, store, per100k);
        console.log(
          `row 6 round ${round} ${STORE_NAME[store].padEnd(8)} ${
            fmt(per100k, 2)
          } s CPU per 100k events (${fmt(cpu, 2)} s for ${fmt(paced.events)} at ${
            fmt(paced.events / paced.seconds)
          } events/s)  errors ${paced.errors}`,
        );
      }
    }
  } finally {
    for (const server of Object.values(servers)) await server.stop();
    await removeDirs(dirs);
  }
}

// ---------------------------------------------------------------------------------------------
// Rows 3 to 5: the night, loaded the same way into both, read back.

interface Night {
  since: number;
  until: number;
}

/** Loads the 1 Hz night ending at the last whole minute into both stores, in batches of 500. */
async function loadNight(dirs: Record<Store, string>): Promise<Night> {
  const until = Math.floor(Date.now() / 60_000) * 60_000;
  const since = until - NIGHT_POINTS * 1000;
  const servers = await startPair(dirs);
  try {
    for (const store of STORES) {
      const server = servers[store];
      const t0 = performance.now();
      for (let k = 0; k < NIGHT_POINTS; k += BATCH) {
        const body = batchBody(store, NIGHT.slice(k, k + BATCH), (i) => {
          const ms = since + (k + i) * 1000;
          return { iso: new Date(ms).toISOString(), ns: `${ms}000000` };
        });
        const res = await fetch(
          store === "service" ? `${server.url}/events` : `${server.url}/write?db=${DB}`,
          {
            method: "POST",
            headers: {
              "content-type": store === "service" ? "application/json" : "text/plain",
            },
            body,
          },
        );
        const text = await res.text();
        if (!res.ok) throw new Error(`loading the night into ${store}: ${res.status} ${text}`);
      }
      console.log(
        `night loaded into ${STORE_NAME[store]}: ${fmt(NIGHT_POINTS)} points in ${
          fmt(performance.now() - t0)
        } ms (batches of ${BATCH})`,
      );
    }
  } finally {
    for (const server of Object.values(servers)) await server.stop();
  }
  return { since, until };
}

/** The URL of read row `row` for a store. */
function readUrl(server: Server, row: number, night: Night): string {
  const since = new Date(row === 5 ? night.until - 3_600_000 : night.since).toISOString();
  const until = new Date(night.until).toISOString();
  if (server.store === "service") {
    const q = new URLSearchParams({ type: TYPE, since, until });
    if (row === 3) {
      q.set("every", "1m");
      q.set("agg", "mean");
    }
    return `${server.url}/history?${q}`;
  }
  const where = `WHERE time >= '${since}' AND time < '${until}'`;
  return influxQueryUrl(
    server.url,
    row === 3
      ? `SELECT mean(*) FROM ${TYPE} ${where} GROUP BY time(1m)`
      : `SELECT * FROM ${TYPE} ${where}`,
  );
}

async function timedGet(url: string): Promise<{ ms: number; body: Uint8Array }> {
  const t0 = performance.now();
  const res = await fetch(url);
  const body = new Uint8Array(await res.arrayBuffer());
  const ms = performance.now() - t0;
  if (!res.ok) throw new Error(`${url}: ${res.status} ${new TextDecoder().decode(body)}`);
  return { ms, body };
}

/**
 * The two answers of read row `row` hold the same: as many points (or 1-minute buckets) as the
 * range has, and, for the means, the same bucket starts and means.
 */
function checkAnswers(row: number, service: Uint8Array, influx: Uint8Array): void {
  const lines = new TextDecoder().decode(service).split("\n").filter((l) => l !== "");
  const series = JSON.parse(new TextDecoder().decode(influx)).results[0].series?.[0];
  const values: unknown[][] = series?.values ?? [];
  const expected = row === 3 ? NIGHT_POINTS / 60 : row === 4 ? NIGHT_POINTS : 3600;
  if (lines.length !== expected || values.length !== expected) {
    throw new Error(
      `row ${row}: the service answered ${lines.length} lines and InfluxDB ${values.length} rows, not ${expected}`,
    );
  }
  if (row !== 3) return;
  const columns: string[] = series.columns;
  for (let b = 0; b < expected; b++) {
    const bucket = JSON.parse(lines[b]!);
    const rowValues = values[b]!;
    if (Date.parse(bucket.t) !== Date.parse(rowValues[0] as string)) {
      throw new Error(`row 3: bucket ${b} starts at ${bucket.t} and at ${rowValues[0]}`);
    }
    for (const field of FIELDS) {
      const a = bucket.fields[field].mean as number;
      const b2 = rowValues[columns.indexOf(`mean_${field}`)] as number;
      if (Math.abs(a - b2) > 1e-9 * Math.max(1, Math.abs(a))) {
        throw new Error(`row 3: the mean of ${field} at ${bucket.t} is ${a} and ${b2}`);
      }
    }
  }
}

async function readRows(rows: readonly number[]): Promise<void> {
  const dirs = await tempDirs("night");
  try {
    const night = await loadNight(dirs);
    // With --profile each read row has servers of its own, so each profile holds one row.
    const groups = PROFILE === undefined ? [rows] : rows.map((r) => [r]);
    for (const group of groups) {
      const servers = await startPair(dirs, `row${group.join("-")}`);
      try {
        const bytes = new Map<string, number>();
        for (const row of group) {
          const service = await timedGet(readUrl(servers.service, row, night));
          const influx = await timedGet(readUrl(servers.influx, row, night));
          checkAnswers(row, service.body, influx.body);
          bytes.set(`${row} service`, service.body.length);
          bytes.set(`${row} influx`, influx.body.length);
        }
        for (let round = 1; round <= ROUNDS * QUERIES_PER_ROUND; round++) {
          for (const row of group) {
            const line: string[] = [];
            for (const store of order(round)) {
              const cpu0 = await cpuNanos(servers[store].pid);
              const { ms } = await timedGet(readUrl(servers[store], row, night));
              const cpuMs = (await cpuNanos(servers[store].pid) - cpu0) / 1e6;
              record(row, store, ms);
              record(row, store, cpuMs, readCpu);
              line.push(`${STORE_NAME[store]} ${fmt(ms, 1)} ms (CPU ${fmt(cpuMs, 1)} ms)`);
            }
            console.log(`row ${row} query ${round} ${line.join(", ")}`);
          }
        }
        for (const row of group) {
          notes.push(
            `row ${row}: answers of ${
              fmt(bytes.get(`${row} service`)! / 1e6, 2)
            } MB (service) and ${fmt(bytes.get(`${row} influx`)! / 1e6, 2)} MB (InfluxDB)`,
          );
        }
      } finally {
        for (const server of Object.values(servers)) await server.stop();
      }
    }
  } finally {
    await removeDirs(dirs);
  }
}

// ---------------------------------------------------------------------------------------------
// The table.

function median(xs: readonly number[]): number {
  const s = [...xs].sort((a, b) => a - b);
  if (s.length === 0) return NaN;
  const mid = Math.floor(s.length / 2);
  return s.length % 2 ? s[mid]! : (s[mid - 1]! + s[mid]!) / 2;
}

/** Each round's `a[i] / b[i]`: the two figures of a round ran seconds apart, on the same load. */
function roundRatios(a: readonly number[], b: readonly number[]): number[] {
  return a.map((v, i) => v / b[i]!);
}

/**
 * A row's medians, and the median of its rounds' ratios (steadier than the ratio of the medians
 * on a shared machine whose load drifts between rounds).
 */
function medians(
  row: number,
  from = results,
): { service: number; influx: number; ratio: number } {
  const { service, influx } = from.get(row) ?? { service: [], influx: [] };
  return {
    service: median(service),
    influx: median(influx),
    ratio: median(roundRatios(service, influx)),
  };
}

/** The median, over the rounds, of what the last hour costs of the whole night, for a store. */
function lastHourShare(store: Store): number {
  return median(roundRatios(results.get(5)?.[store] ?? [], results.get(4)?.[store] ?? []));
}

/** The targets of issue 35 this benchmark measures. */
const TARGETS: {
  row: number;
  what: string;
  value: () => number;
  atLeast?: number;
  atMost?: number;
}[] = [
  {
    row: 2,
    what: "batches, service / InfluxDB events/s",
    value: () => medians(2).ratio,
    atLeast: 1.2,
  },
  {
    row: 1,
    what: "single events, service / InfluxDB req/s",
    value: () => medians(1).ratio,
    atLeast: 1.5,
  },
  {
    row: 3,
    what: "1-minute means, service / InfluxDB time",
    value: () => medians(3).ratio,
    atMost: 1,
  },
  {
    row: 5,
    what: "the last hour, the service's fraction of its whole night's time",
    value: () => lastHourShare("service"),
    atMost: 0.15,
  },
];

function printTable(): void {
  console.log("\nMedians of the rounds; the ratio is the median of each round's ratio.");
  console.log("\n| figure | service | InfluxDB | service / InfluxDB |");
  console.log("|---|---:|---:|---|");
  for (const row of ROWS) {
    const { service, influx, ratio } = medians(row);
    const higherIsBetter = row === 1 || row === 2;
    const ahead = higherIsBetter ? ratio >= 1 : ratio <= 1;
    const value = (n: number) => row <= 2 ? fmt(n) : row === 6 ? `${fmt(n, 2)} s` : fmt(n, 1);
    let verdict = `${fmt(ratio, 2)} (${ahead ? "ahead" : "behind"})`;
    if (row === 5) {
      verdict += `; it costs ${
        fmt(100 * lastHourShare("service"))
      } % of the whole night (InfluxDB ${fmt(100 * lastHourShare("influx"))} %)`;
    }
    console.log(`| ${FIGURES[row]} | ${value(service)} | ${value(influx)} | ${verdict} |`);
  }
  const reads = ROWS.filter((row) => readCpu.has(row));
  if (reads.length > 0) {
    console.log(
      "\nThe read rows as the server's CPU per query (all its threads, from " +
        "/proc/<pid>/task/*/schedstat), which a loaded machine moves least:\n",
    );
    console.log("| figure | service | InfluxDB | service / InfluxDB |");
    console.log("|---|---:|---:|---|");
    for (const row of reads) {
      const { service, influx, ratio } = medians(row, readCpu);
      console.log(
        `| ${FIGURES[row]!.replace(", ms", ", CPU ms")} | ${fmt(service, 1)} | ${
          fmt(influx, 1)
        } | ${fmt(ratio, 2)} |`,
      );
    }
  }
  const targets = TARGETS.filter((t) => ROWS.includes(t.row)).map((t) => {
    const value = t.value();
    const met = t.atMost === undefined ? value >= t.atLeast! : value <= t.atMost;
    const bound = t.atMost === undefined ? `${t.atLeast} or more` : `at most ${t.atMost}`;
    return `- ${t.what}: ${fmt(value, 2)} (target ${bound}): ${met ? "met" : "not met"}`;
  });
  if (targets.length > 0) console.log(`\nTargets of issue 35 in this run:\n${targets.join("\n")}`);
}

// ---------------------------------------------------------------------------------------------

/** The first line a command prints when asked its version, or `undefined` if it is not installed. */
function versionOf(command: string, args: string[]): string | undefined {
  let out: Deno.CommandOutput;
  try {
    out = new Deno.Command(command, { args, stdout: "piped", stderr: "piped" }).outputSync();
  } catch (err) {
    if (err instanceof Deno.errors.NotFound) return undefined;
    throw err;
  }
  const text = new TextDecoder().decode(out.stdout) + new TextDecoder().decode(out.stderr);
  return text.trim().split("\n")[0]!.replace(/\s+Copyright.*$/, "");
}

async function main(): Promise<void> {
  const influxVersion = versionOf("influxd", ["version"]);
  if (influxVersion === undefined) {
    usageError("influxd is not installed: apt-get install influxdb (Debian's InfluxDB 1.6)");
  }
  const wrkVersion = versionOf("wrk", ["-v"]);
  if (wrkVersion === undefined && ROWS.some((row) => row === 1 || row === 2 || row === 6)) {
    usageError("wrk is not installed: apt-get install wrk (rows 1, 2 and 6 use it)");
  }
  const t0 = performance.now();
  const loadBefore = loadAverage();
  console.log(`# the service against InfluxDB, ${new Date().toISOString()}`);
  console.log(
    `${Deno.build.target}, ${navigator.hardwareConcurrency} cores, deno ${Deno.version.deno}, ${influxVersion}, ${
      wrkVersion ?? "no wrk"
    }`,
  );
  console.log(
    `rows ${
      ROWS.join(",")
    }; ${ROUNDS} rounds of ${SECONDS} s after ${WARMUP} s of warm-up, reads asked ${
      ROUNDS * QUERIES_PER_ROUND
    } times; seed ${SEED}; the service with --fsync always, InfluxDB's WAL fsynced per write${
      PROFILE === undefined ? "" : `; profiles to ${PROFILE}`
    }`,
  );
  console.log(`load average before: ${loadBefore}\n`);
  if (PROFILE !== undefined) await Deno.mkdir(PROFILE, { recursive: true });
  for (const row of ROWS) {
    if (row === 1 || row === 2) await wrkRows(row);
  }
  const reads = ROWS.filter((r) => r >= 3 && r <= 5);
  if (reads.length > 0) await readRows(reads);
  if (ROWS.includes(6)) await cpuRow();
  const loadAfter = loadAverage();
  printTable();
  for (const row of ROWS) {
    const { service, influx } = results.get(row)!;
    const ratios = roundRatios(service, influx).map((r) => fmt(r, 2)).join(", ");
    notes.push(`row ${row}: service / InfluxDB in each round: ${ratios}`);
  }
  console.log(`\n${notes.join("\n")}`);
  console.log(
    `\nload average before ${loadBefore}, after ${loadAfter}; ${
      fmt((performance.now() - t0) / 1000)
    } s in all`,
  );
  if (PROFILE !== undefined) await printProfiles(PROFILE);
}

/** A `.cpuprofile` as V8 writes it (the parts read here). */
interface CpuProfile {
  nodes: { id: number; callFrame: { functionName: string; url: string; lineNumber: number } }[];
  samples: number[];
  timeDeltas: number[];
}

/**
 * Where each row's service spent its CPU: the functions with the most self time in its profile,
 * as a share of the time not idle.
 */
async function printProfiles(dir: string): Promise<void> {
  console.log(
    `\nCPU profiles of the service (Chrome DevTools, Performance, or speedscope open them):`,
  );
  const rows = (await Array.fromAsync(Deno.readDir(dir))).filter((e) => e.isDirectory)
    .map((e) => e.name).sort();
  for (const row of rows) {
    for await (const file of Deno.readDir(join(dir, row))) {
      const path = join(dir, row, file.name);
      const profile: CpuProfile = JSON.parse(await Deno.readTextFile(path));
      const frames = new Map(profile.nodes.map((n) => [n.id, n.callFrame]));
      const self = new Map<string, number>();
      let busy = 0;
      profile.samples.forEach((id, i) => {
        const frame = frames.get(id)!;
        if (frame.functionName === "(idle)") return;
        const where = frame.url === ""
          ? ""
          : ` ${frame.url.replace(`file://${ROOT}`, "")}:${frame.lineNumber + 1}`;
        const key = `${frame.functionName || "(anonymous)"}${where}`;
        const us = profile.timeDeltas[i] ?? 0;
        self.set(key, (self.get(key) ?? 0) + us);
        busy += us;
      });
      console.log(`\n${path}: ${fmt(busy / 1e6, 2)} s busy; most self time:`);
      for (const [key, us] of [...self].sort((a, b) => b[1] - a[1]).slice(0, 12)) {
        console.log(`  ${fmt(100 * us / busy, 1).padStart(5)} %  ${key}`);
      }
    }
  }
}

await main();
