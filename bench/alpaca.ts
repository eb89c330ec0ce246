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
 * The `SafetyEvents` case runs a second service, as loaded as the safety hub gets: 50 critical
 * types, each in alarm (one internal event each), and the 256 external events a site holds, set
 * through `SetExternalEvents`; then `PUT .../action` `SafetyEvents` (306 events, about 70 KB of
 * JSON per answer) and, for comparison, `issafe` of the same service.
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

/** 10 critical types, `sensor0` feeding ObservingConditions. */
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

/** 50 critical types, each alarmed by `temp_c` above 60. */
function hubTypes(): Record<string, unknown> {
  const file: Record<string, unknown> = {};
  for (let i = 0; i < HUB_TYPES; i++) {
    file[`critical${i}`] = {
      critical: true,
      stale_after_s: 3600,
      fields: { temp_c: { unit: "°C", alarm_above: 60 } },
    };
  }
  return file;
}

const HUB_TYPES = 50;
const HUB_EXTERNAL = 256;

interface Result {
  cpuUs: number;
  p50Ms: number;
  p99Ms: number;
}

/** One request measured: a GET of a URL, or a PUT of a form to it. */
interface Target {
  readonly pid: number;
  readonly url: string;
  readonly form?: string;
}

function send({ url, form }: Target): Promise<Response> {
  return form === undefined ? fetch(url) : fetch(url, {
    method: "PUT",
    headers: { "content-type": "application/x-www-form-urlencoded" },
    body: form,
  });
}

/** `count` sequential requests; the server's CPU per request, and wall percentiles. */
async function measure(target: Target, count: number): Promise<Result> {
  const { pid, url } = target;
  const walls: number[] = [];
  const cpu0 = await cpuOf(pid);
  for (let i = 0; i < count; i++) {
    const t0 = performance.now();
    const res = await send(target);
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

/** Starts a service with an Alpaca port over a types file written in `dir`. */
async function start(dir: string, name: string, file: Record<string, unknown>) {
  const typesFile = join(dir, `${name}.json`);
  await Deno.writeTextFile(typesFile, JSON.stringify(file));
  const alpacaPort = freePort();
  const server = await spawnServer({
    siteDir: join(dir, name),
    host: "127.0.0.1",
    port: 0,
    typesFile,
    alpacaPort,
    alpacaDiscoveryPort: 0,
    output: "null",
  });
  return { server, base: `http://127.0.0.1:${alpacaPort}/api/v1` };
}

async function post(url: string, type: string, data: unknown): Promise<void> {
  const res = await fetch(`${url}/event`, {
    method: "POST",
    headers: { "content-type": "application/json" },
    body: JSON.stringify({ type, data }),
  });
  await res.body?.cancel();
}

/** `SafetyEvents` and `SetExternalEvents` as a client sends them through `PUT action`. */
function actionForm(action: string, parameters: string): string {
  return new URLSearchParams([
    ["Action", action],
    ["Parameters", parameters],
    ["ClientID", "1"],
    ["ClientTransactionID", "1"],
  ]).toString();
}

const dir = await Deno.makeTempDir({ prefix: "bench-alpaca-" });
const plain = await start(dir, "site", types());
const hub = await start(dir, "hub", hubTypes());
try {
  for (let i = 0; i < 10; i++) {
    await post(plain.server.url, `sensor${i}`, { temp_c: 4.5, wind_kmh: 12 });
  }
  for (let i = 0; i < HUB_TYPES; i++) await post(hub.server.url, `critical${i}`, { temp_c: 75 });
  const external = Array.from({ length: HUB_EXTERNAL }, (_, i) => ({
    Source: "bench",
    Name: `rule ${i}`,
    Id: `bench-${i}`,
    Type: "Safety",
    Trigger: "Active",
    Description: `external hold ${i} of the benchmark`,
  }));
  const monitor = `${hub.base}/safetymonitor/0`;
  const set = await (await fetch(`${monitor}/action`, {
    method: "PUT",
    headers: { "content-type": "application/x-www-form-urlencoded" },
    body: actionForm("SetExternalEvents", JSON.stringify(external)),
  })).json();
  if (set.ErrorNumber !== 0) throw new Error(`SetExternalEvents: ${JSON.stringify(set)}`);
  const { base, server } = plain;
  const targets: [string, Target][] = [
    [
      "alpaca issafe",
      { pid: server.pid, url: `${base}/safetymonitor/0/issafe?ClientID=1&ClientTransactionID=1` },
    ],
    [
      "alpaca temperature",
      {
        pid: server.pid,
        url: `${base}/observingconditions/0/temperature?ClientID=1&ClientTransactionID=1`,
      },
    ],
    ["main GET /health", { pid: server.pid, url: `${server.url}/health` }],
    [
      "hub SafetyEvents",
      { pid: hub.server.pid, url: `${monitor}/action`, form: actionForm("SafetyEvents", "") },
    ],
    [
      "hub issafe",
      { pid: hub.server.pid, url: `${monitor}/issafe?ClientID=1&ClientTransactionID=1` },
    ],
  ];
  const safe = await (await send(targets[0]![1])).json();
  if (safe.Value !== true) throw new Error(`issafe is not true: ${JSON.stringify(safe)}`);
  const answer = await (await send(targets[3]![1])).json();
  const listed = JSON.parse(answer.Value).length;
  if (listed !== HUB_TYPES + HUB_EXTERNAL) {
    throw new Error(`SafetyEvents lists ${listed} events, not ${HUB_TYPES + HUB_EXTERNAL}`);
  }
  console.log(
    `SafetyEvents: ${HUB_TYPES} critical types in alarm and ${HUB_EXTERNAL} external events, ${listed} events, ${answer.Value.length} characters per answer`,
  );
  const results = new Map<string, Result[]>();
  for (let round = 0; round < ROUNDS; round++) {
    for (const [name, target] of targets) {
      await measure(target, WARMUP);
      const result = await measure(target, REQUESTS);
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
  const checked: [string, string][] = [
    ["alpaca issafe", "issafe"],
    ["hub SafetyEvents", "SafetyEvents"],
  ];
  for (const [name, label] of checked) {
    const worst = results.get(name)!.map((r) => r.cpuUs).toSorted((a, b) => a - b).at(-1)!;
    console.log(
      `${label}: worst round ${worst.toFixed(1)} µs of service CPU per answer (target < 1000 µs)`,
    );
    if (worst >= 1000) Deno.exitCode = 1;
  }
} finally {
  await plain.server.stop();
  await hub.server.stop();
  await Deno.remove(dir, { recursive: true });
}
