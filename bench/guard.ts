/**
 * The network-bind benchmark (`deno task bench:guard`, issue 35 item 5): single events on a
 * network bind, where the connection guard stands in front (docs/operations.md, "Connections"),
 * against the same service on a loopback bind, where `Deno.serve` accepts by itself. In one run,
 * rounds interleaved, each measurement a fresh service process (`cli.ts telemetry run` under the
 * permissions `deno task start` gives it) sent `--warmup` seconds of the load first, then
 * measured for `--seconds`:
 *
 * - `loopback`: `--host 127.0.0.1`, wrk on this machine;
 * - `network`: `--host` this machine's own non-loopback IPv4 address (`--insecure`), wrk on this
 *   machine: the same kernel path as loopback, so the ratio is the guard's cost alone;
 * - `veth` (with `--netns`): `--host` the host end of a veth pair into a network namespace the
 *   benchmark creates, wrk inside the namespace: a peer on another interface, so the ratio also
 *   holds the veth hop's cost;
 * - `baseline` (with `--baseline DIR`, a checkout of another version): DIR's service on the
 *   `network` address, for a before/after ratio from the same rounds;
 *
 * each with `--fsync always` and `--fsync interval`: 32 keep-alive connections posting
 * `POST /event`. After each run the site files must hold every acknowledged event.
 *
 * Usage: deno run -A bench/guard.ts [--seconds 5] [--rounds 3] [--warmup 2] [--connections 32]
 *   [--fsync always,interval] [--netns] [--baseline DIR]
 * @module
 */

// deno-lint-ignore-file no-console
import { parseArgs } from "node:util";
import { join, resolve } from "node:path";
import { freePort, luaString, ROOT, runWrk, serviceArgs, waitReady } from "./_util.ts";
import { type Netns, netns, netnsUnavailable } from "../tests/_shared/net.ts";

const { values: flags } = parseArgs({
  args: Deno.args.filter((a) => a !== "--"), // `deno task bench:guard -- --seconds 2` passes the "--"
  options: {
    seconds: { type: "string", default: "5" },
    rounds: { type: "string", default: "3" },
    warmup: { type: "string", default: "2" },
    connections: { type: "string", default: "32" },
    fsync: { type: "string", default: "always,interval" },
    netns: { type: "boolean", default: false },
    baseline: { type: "string" },
  },
  strict: true,
});
const SECONDS = Number(flags.seconds);
const WARMUP = Number(flags.warmup);
const ROUNDS = Number(flags.rounds);
const CONNECTIONS = Number(flags.connections);
const FSYNC = flags.fsync.split(",");
const BASELINE = flags.baseline === undefined ? undefined : resolve(flags.baseline);
const EVENT_JSON = JSON.stringify({
  type: "weather",
  data: { wind_mps: 2.1, temp_c: -3.5, humidity: 41, sky: "clear" },
});

type Target = "loopback" | "network" | "veth" | "baseline";

/** Where a target's service listens and where its load comes from. */
interface Place {
  host: string;
  /** The namespace wrk runs in, if not this machine's. */
  ns?: string;
  root: string;
}

interface Sample {
  target: Target;
  fsync: string;
  perSec: number;
  /** CPU time of the service process per request answered, in microseconds. */
  cpuUs: number;
  p50Ms: number;
  p99Ms: number;
  errors: number;
  /** The errors by kind, when there were some. */
  kinds: string;
  files: string;
}

/** This machine's first non-loopback IPv4 address, from `ip -4 addr`. */
async function ownAddress(): Promise<string | undefined> {
  const out = await new Deno.Command("ip", { args: ["-o", "-4", "addr", "show"], stdout: "piped" })
    .output();
  for (const line of new TextDecoder().decode(out.stdout).split("\n")) {
    const m = /\sinet\s+([\d.]+)\//.exec(line);
    if (m && !m[1]!.startsWith("127.")) return m[1];
  }
  return undefined;
}

/** User and system CPU time a process has used, in seconds (`/proc/<pid>/stat`, 100 Hz ticks). */
async function cpuSeconds(pid: number): Promise<number> {
  const stat = await Deno.readTextFile(`/proc/${pid}/stat`);
  const fields = stat.slice(stat.lastIndexOf(")") + 2).split(" ");
  return (Number(fields[11]) + Number(fields[12])) / 100;
}

/** The events in a site directory's files: one line each. */
async function storedLines(siteDir: string): Promise<number> {
  let lines = 0;
  for await (const entry of Deno.readDir(siteDir)) {
    if (!entry.name.startsWith("site_")) continue;
    const bytes = await Deno.readFile(join(siteDir, entry.name));
    for (const b of bytes) if (b === 10) lines++;
  }
  return lines;
}

async function measure(target: Target, place: Place, fsync: string): Promise<Sample> {
  const siteDir = await Deno.makeTempDir({ prefix: `bench-guard-${target}-` });
  const port = freePort();
  const args = serviceArgs({ root: place.root, siteDir, port, fsync, host: place.host });
  const child = new Deno.Command(Deno.execPath(), { args, stdout: "null", stderr: "inherit" })
    .spawn();
  try {
    const url = `http://${place.host}:${port}`;
    await waitReady(url, target);
    const load = (seconds: number) =>
      runWrk({
        url: `${url}/event`,
        script: `wrk.method = "POST"\nwrk.body = ${
          luaString(EVENT_JSON)
        }\nwrk.headers["Content-Type"] = "application/json"\n`,
        connections: CONNECTIONS,
        seconds,
        ...(place.ns ? { netns: place.ns } : {}),
      });
    const warm = WARMUP > 0 ? await load(WARMUP) : undefined;
    // The warm-up's connections go before the measured ones come: 32 of each from one address
    // would near --max-conns-per-peer (64), where the guard closes the newest not yet served.
    await new Promise((r) => setTimeout(r, 500));
    const cpu0 = await cpuSeconds(child.pid);
    const run = await load(SECONDS);
    const cpu = await cpuSeconds(child.pid) - cpu0;
    child.kill("SIGTERM");
    await child.status;
    const acked = (warm ? warm.requests - warm.errors : 0) + run.requests - run.errors;
    const stored = await storedLines(siteDir);
    // wrk stops with up to one request per connection answered but not counted, per load.
    const files = stored < acked || stored > acked + 2 * CONNECTIONS
      ? `FAIL: ${stored} stored, ${acked} acknowledged`
      : `ok (${stored - acked} in flight at stop)`;
    return {
      target,
      fsync,
      perSec: (run.requests - run.errors) / run.seconds,
      cpuUs: cpu / (run.requests - run.errors) * 1e6,
      p50Ms: run.p50Ms,
      p99Ms: run.p99Ms,
      errors: run.errors + (warm?.errors ?? 0),
      kinds: [warm, run].filter((r) => r && r.errors > 0).map((r) => `(${r!.errorKinds})`).join(
        " ",
      ),
      files,
    };
  } finally {
    try {
      child.kill("SIGTERM");
    } catch {
      // Already stopped.
    }
    await child.status;
    await Deno.remove(siteDir, { recursive: true });
  }
}

function median(xs: number[]): number {
  const s = xs.toSorted((a, b) => a - b);
  return s.length % 2 ? s[(s.length - 1) / 2]! : (s[s.length / 2 - 1]! + s[s.length / 2]!) / 2;
}

const fmt = (n: number, d = 0) =>
  n.toLocaleString("en-US", { maximumFractionDigits: d, minimumFractionDigits: d });

async function main(): Promise<void> {
  const places = new Map<Target, Place>([["loopback", { host: "127.0.0.1", root: ROOT }]]);
  const own = await ownAddress();
  if (own) places.set("network", { host: own, root: ROOT });
  else console.log("no non-loopback address on this machine: no `network` target");
  let ns: Netns | undefined;
  if (flags.netns) {
    const why = netnsUnavailable();
    if (why) console.log(`no \`veth\` target: ${why}`);
    else {
      ns = await netns();
      places.set("veth", { host: ns.hostAddr, ns: ns.name, root: ROOT });
    }
  }
  if (BASELINE) {
    const at = places.get("network") ?? places.get("veth");
    if (at) places.set("baseline", { ...at, root: BASELINE });
  }
  const targets = [...places.keys()];
  console.log(`# network bind against loopback bind, ${new Date().toISOString()}`);
  console.log(
    `deno ${Deno.version.deno}; load average ${await Deno.readTextFile("/proc/loadavg")}`,
  );
  console.log(
    `wrk -t2 -c${CONNECTIONS} POST /event; ${ROUNDS} rounds x ${SECONDS} s after ${WARMUP} s of warm-up; ${
      targets.map((t) => `${t} ${places.get(t)!.host}${places.get(t)!.ns ? " (wrk in ns)" : ""}`)
        .join(", ")
    }${BASELINE ? `; baseline ${BASELINE}` : ""}\n`,
  );
  const samples: Sample[] = [];
  try {
    for (let round = 1; round <= ROUNDS; round++) {
      for (const fsync of FSYNC) {
        // Every other round in reverse: no target always runs right after the same one.
        for (const target of round % 2 ? targets : targets.toReversed()) {
          const s = await measure(target, places.get(target)!, fsync);
          samples.push(s);
          console.log(
            `round ${round} fsync ${fsync.padEnd(8)} ${target.padEnd(8)} ${
              fmt(s.perSec).padStart(8)
            } req/s  CPU ${fmt(s.cpuUs, 1)} µs/req  p50 ${fmt(s.p50Ms, 2)} ms  p99 ${
              fmt(s.p99Ms, 2)
            } ms  errors ${s.errors}${s.kinds ? ` ${s.kinds}` : ""}  files ${s.files}  load ${
              (await Deno.readTextFile("/proc/loadavg")).split(" ")[0]
            }`,
          );
        }
      }
    }
  } finally {
    await ns?.[Symbol.asyncDispose]();
  }
  console.log(`\nload average at the end: ${await Deno.readTextFile("/proc/loadavg")}`);
  console.log(
    "| fsync | target | req/s (median) | x loopback | CPU µs/req | x loopback | p50 ms | p99 ms | errors |",
  );
  console.log("|---|---|---:|---:|---:|---:|---:|---:|---:|");
  for (const fsync of FSYNC) {
    const of = (t: Target) => samples.filter((s) => s.target === t && s.fsync === fsync);
    const loop = median(of("loopback").map((s) => s.perSec));
    const loopCpu = median(of("loopback").map((s) => s.cpuUs));
    for (const target of targets) {
      const group = of(target);
      const perSec = median(group.map((s) => s.perSec));
      const cpuUs = median(group.map((s) => s.cpuUs));
      console.log(
        `| ${fsync} | ${target} | ${fmt(perSec)} | ${fmt(perSec / loop, 2)} | ${fmt(cpuUs, 1)} | ${
          fmt(cpuUs / loopCpu, 2)
        } | ${fmt(median(group.map((s) => s.p50Ms)), 2)} | ${
          fmt(median(group.map((s) => s.p99Ms)), 2)
        } | ${group.reduce((n, s) => n + s.errors, 0)} |`,
      );
    }
  }
  if (samples.some((s) => s.files.startsWith("FAIL"))) Deno.exit(1);
}

if (import.meta.main) await main();
