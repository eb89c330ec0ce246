/**
 * The cost of an ASCOM Alpaca answer (`deno task bench:alpaca`, docs/safety.md): the service
 * started as `spawnServer()` starts it (scoped permissions, the service's V8 flags) with
 * `--alpaca-port`, a types file of 10 critical types (one of them feeding ObservingConditions),
 * each type recorded once; then `--requests` sequential `GET .../issafe` over one kept-alive
 * connection, as N.I.N.A. polls. The figure is the server process's user + system CPU (from
 * `/proc/<pid>/stat`, all threads) over the measured requests divided by their number; the same
 * is measured for `observingconditions/0/temperature`, and for `GET /health` of the main
 * listener as the floor of one HTTP exchange. Wall latency (p50, p99) is the client's view.
 *
 * Usage: deno run -A bench/alpaca.ts [--requests 20000] [--warmup 2000] [--rounds 3]
 *
 * @module
 */

// deno-lint-ignore-file no-console
import { parseArgs } from "node:util";
import { join } from "node:path";
import { spawnServer } from "../server.ts";
import { freePort } from "./_util.ts";

const { values: flags } = parseArgs({
  args: Deno.args.filter((a) => a !== "--"),
  options: {
    requests: { type: "string", default: "20000" },
    warmup: { type: "string", default: "2000" },
    rounds: { type: "string", default: "3" },
  },
  strict: true,
});
const REQUESTS = Number(flags.requests);
const WARMUP = Number(flags.warmup);
const ROUNDS = Number(flags.rounds);
/** Clock ticks per second of `/proc/<pid>/stat` on Linux. */
const CLK_TCK = 100;

/** User + system CPU seconds of a process (all its threads) so far. */
async function cpuOf(pid: number): Promise<number> {
  const stat = await Deno.readTextFile(`/proc/${pid}/stat`);
  const fields = stat.slice(stat.lastIndexOf(")") + 2).split(" ");
  return (Number(fields[11]) + Number(fields[12])) / CLK_TCK;
}

function types(): Record<string, unknown> {
  const file: Record<string, unknown> = {};
  for (let i = 0; i < 10; i++) {
    file[`sensor${i}`] = {
      critical: true,
      stale_after_s: 3600,
      fields: {
        temp_c: { unit: "°C", alarm_above: 60, ...(i === 0 ? { alpaca: "temperature" } : {}) },
        wind_kmh: { unit: "km/h", alarm_above: 60, ...(i === 0 ? { alpaca: "windspeed" } : {}) },
      },
    };
  }
  return file;
}

interface Result {
  cpuUs: number;
  p50Ms: number;
  p99Ms: number;
}

/** `count` sequential GETs of one URL; the server's CPU per request, and wall percentiles. */
async function measure(pid: number, url: string, count: number): Promise<Result> {
  const walls: number[] = [];
  const cpu0 = await cpuOf(pid);
  for (let i = 0; i < count; i++) {
    const t0 = performance.now();
    const res = await fetch(url);
    const body = await res.text();
    walls.push(performance.now() - t0);
    if (res.status !== 200 || body.includes('"ErrorNumber":10')) {
      throw new Error(`${url} answered ${res.status}: ${body}`);
    }
  }
  const cpu = await cpuOf(pid) - cpu0;
  walls.sort((a, b) => a - b);
  return {
    cpuUs: cpu / count * 1e6,
    p50Ms: walls[Math.floor(count * 0.5)]!,
    p99Ms: walls[Math.floor(count * 0.99)]!,
  };
}

const dir = await Deno.makeTempDir({ prefix: "bench-alpaca-" });
const typesFile = join(dir, "types.json");
await Deno.writeTextFile(typesFile, JSON.stringify(types()));
const alpacaPort = freePort();
const server = await spawnServer({
  siteDir: join(dir, "site"),
  host: "127.0.0.1",
  port: 0,
  typesFile,
  alpacaPort,
  alpacaDiscoveryPort: 0,
  output: "null",
});
try {
  for (let i = 0; i < 10; i++) {
    const res = await fetch(`${server.url}/event`, {
      method: "POST",
      headers: { "content-type": "application/json" },
      body: JSON.stringify({ type: `sensor${i}`, data: { temp_c: 4.5, wind_kmh: 12 } }),
    });
    await res.body?.cancel();
  }
  const base = `http://127.0.0.1:${alpacaPort}/api/v1`;
  const targets: [string, string][] = [
    ["alpaca issafe", `${base}/safetymonitor/0/issafe?ClientID=1&ClientTransactionID=1`],
    [
      "alpaca temperature",
      `${base}/observingconditions/0/temperature?ClientID=1&ClientTransactionID=1`,
    ],
    ["main GET /health", `${server.url}/health`],
  ];
  const safe = await (await fetch(targets[0]![1])).json();
  if (safe.Value !== true) throw new Error(`issafe is not true: ${JSON.stringify(safe)}`);
  const results = new Map<string, Result[]>();
  for (let round = 0; round < ROUNDS; round++) {
    for (const [name, url] of targets) {
      await measure(server.pid, url, WARMUP);
      const result = await measure(server.pid, url, REQUESTS);
      results.set(name, [...results.get(name) ?? [], result]);
    }
  }
  console.log(
    `${REQUESTS} sequential requests per round, ${ROUNDS} rounds (after ${WARMUP} warm-up each); ` +
      `server CPU per request (user + system, /proc), client wall p50 / p99`,
  );
  for (const [name, rounds] of results) {
    const cpu = rounds.map((r) => r.cpuUs.toFixed(1)).join(" / ");
    const median = rounds.map((r) => r.cpuUs).toSorted((a, b) =>
      a - b
    )[Math.floor(rounds.length / 2)]!;
    const p50 = rounds.map((r) => r.p50Ms.toFixed(3)).join(" / ");
    const p99 = rounds.map((r) => r.p99Ms.toFixed(3)).join(" / ");
    console.log(
      `${name.padEnd(20)} CPU ${cpu} µs (median ${
        median.toFixed(1)
      } µs)  wall p50 ${p50} ms  p99 ${p99} ms`,
    );
  }
  const issafe = results.get("alpaca issafe")!.map((r) => r.cpuUs).toSorted((a, b) => a - b);
  const worst = issafe.at(-1)!;
  console.log(
    `issafe: worst round ${worst.toFixed(1)} µs of service CPU per answer (target < 1000 µs)`,
  );
  if (worst >= 1000) Deno.exitCode = 1;
} finally {
  await server.stop();
  await Deno.remove(dir, { recursive: true });
}
