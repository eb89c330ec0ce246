/**
 * CPU per event at a fixed load (`deno run -A bench/commit.ts`): the service with
 * `--fsync interval` against `bench/writesync_server.ts`, a bare Deno server that `writeSync`s
 * each event, both fed the same single `POST /event` requests at a fixed rate (default
 * 5,000 events/s over 16 keep-alive connections) by a raw-TCP load generator in this process.
 * The figure is the server process's user + system CPU (from `/proc/<pid>/stat`) over the
 * measured window divided by the events answered in it; targets alternate for `--rounds`.
 *
 * It measures a steady load, as an observatory's service runs all night: every server starts
 * once and first takes `--warmup` seconds of the same load, unmeasured. Until V8 has compiled the
 * hot code (15 to 30 s for the service, under a second for the small `writeSync` server) its
 * compiler threads add several µs per event, which a cold measurement charges to the larger code.
 * The heap's allocation per event comes from `--trace-gc` and does not depend on the warm-up.
 *
 * Usage: deno run -A bench/commit.ts [--rate 5000] [--seconds 8] [--rounds 3] [--warmup 20]
 *   [--connections 16] [--baseline DIR]
 *
 * `--baseline DIR` adds the service of another checkout (e.g. `git worktree add /tmp/base
 * <commit>`), for before/after ratios from the same rounds.
 *
 * @module
 */

// deno-lint-ignore-file no-console
import { parseArgs } from "node:util";
import { join, resolve } from "node:path";
import {
  cpuSeconds,
  freePort,
  GcTrace,
  KeepAliveConnection,
  pacedLoad,
  ROOT,
  serviceArgs,
  waitReady,
} from "./_util.ts";

const { values: flags } = parseArgs({
  args: Deno.args.filter((a) => a !== "--"),
  options: {
    rate: { type: "string", default: "5000" },
    seconds: { type: "string", default: "8" },
    rounds: { type: "string", default: "3" },
    warmup: { type: "string", default: "20" },
    connections: { type: "string", default: "16" },
    baseline: { type: "string" },
  },
  strict: true,
});
const RATE = Number(flags.rate);
const SECONDS = Number(flags.seconds);
const ROUNDS = Number(flags.rounds);
const WARMUP = Number(flags.warmup);
const CONNECTIONS = Number(flags.connections);
const BASELINE = flags.baseline === undefined ? undefined : resolve(flags.baseline);

type Target = "writesync" | "service" | "baseline";

const REQUEST = {
  path: "/event",
  body: JSON.stringify({
    type: "weather",
    data: { wind_mps: 2.1, temp_c: -3.5, humidity: 41, sky: "clear" },
  }),
  contentType: "application/json",
};

interface Running {
  child: Deno.ChildProcess;
  port: number;
  dir: string;
  gc: GcTrace;
}

async function start(target: Target): Promise<Running> {
  const port = freePort();
  const dir = await Deno.makeTempDir({ prefix: `bench-commit-${target}-` });
  const args = target === "writesync"
    ? [
      "run",
      "--v8-flags=--trace-gc",
      "--allow-net",
      `--allow-write=${dir}`,
      join(ROOT, "bench/writesync_server.ts"),
      String(port),
      join(dir, "writesync.ndjson"),
    ]
    : serviceArgs({
      root: target === "baseline" ? BASELINE! : ROOT,
      siteDir: dir,
      port,
      traceGc: true,
    });
  const child = new Deno.Command(Deno.execPath(), { args, stdout: "piped", stderr: "inherit" })
    .spawn();
  const gc = new GcTrace(child.stdout);
  try {
    await waitReady(`http://127.0.0.1:${port}`, target, 10_000);
  } catch (err) {
    child.kill("SIGKILL");
    throw err;
  }
  return { child, port, dir, gc };
}

async function stop(running: Running): Promise<void> {
  running.child.kill("SIGTERM");
  await running.child.status;
  await running.gc.done;
  await Deno.remove(running.dir, { recursive: true });
}

interface Measured {
  events: number;
  cpuUsPerEvent: number;
  /** Of which on the main (JavaScript and event loop) thread. */
  mainUsPerEvent: number;
  achievedRate: number;
  /** Bytes the JavaScript heap allocated per event (from `--trace-gc`). */
  allocatedPerEvent: number;
  errors: number;
}

/** Sends at `RATE` for `window` seconds (after a 1 s lead-in) and measures the server's CPU. */
async function load(running: Running, window: number): Promise<Measured> {
  const conns = await Promise.all(
    Array.from({ length: CONNECTIONS }, () => KeepAliveConnection.open(running.port, REQUEST)),
  );
  const pid = running.child.pid;
  let cpuStart = 0, mainStart = 0, gcStart = 0;
  const paced = await pacedLoad(conns, {
    rate: RATE,
    seconds: window,
    onWindow: async () => {
      cpuStart = await cpuSeconds(pid);
      mainStart = await cpuSeconds(pid, pid);
      gcStart = running.gc.mark();
    },
  });
  const cpu = await cpuSeconds(pid) - cpuStart;
  const main = await cpuSeconds(pid, pid) - mainStart;
  const { events, seconds } = paced;
  const allocated = running.gc.allocationRate(gcStart, running.gc.mark()) * 2 ** 20;
  for (const conn of conns) conn.close();
  return {
    events,
    cpuUsPerEvent: (cpu / events) * 1e6,
    mainUsPerEvent: (main / events) * 1e6,
    achievedRate: events / seconds,
    allocatedPerEvent: allocated / (events / seconds),
    errors: paced.errors,
  };
}

/** The median of the rounds that gave a figure (a window too short for two collections gives none). */
function median(values: number[]): number {
  const s = values.filter((v) => !Number.isNaN(v)).sort((a, b) => a - b);
  return s[Math.floor(s.length / 2)] ?? NaN;
}

async function main(): Promise<void> {
  const targets: Target[] = ["writesync", "service", ...(BASELINE ? ["baseline" as const] : [])];
  const results = new Map<Target, Measured[]>(targets.map((t) => [t, []]));
  console.log(
    `# CPU per event at ${RATE} events/s, ${CONNECTIONS} connections, ${ROUNDS} rounds x ${SECONDS}s, after ${WARMUP}s of warm-up`,
  );
  const running = new Map<Target, Running>();
  try {
    for (const target of targets) {
      const server = await start(target);
      running.set(target, server);
      if (WARMUP > 0) await load(server, WARMUP);
    }
    for (let round = 1; round <= ROUNDS; round++) {
      // Every other round in reverse: no target always runs right after the same one.
      for (const target of round % 2 ? targets : targets.toReversed()) {
        const m = await load(running.get(target)!, SECONDS);
        results.get(target)!.push(m);
        console.log(
          `round ${round} ${target.padEnd(9)} ${
            m.cpuUsPerEvent.toFixed(1)
          } µs CPU/event (main thread ${m.mainUsPerEvent.toFixed(1)}) at ${
            Math.round(m.achievedRate)
          } events/s, ${Math.round(m.allocatedPerEvent)} B allocated/event, errors ${m.errors}`,
        );
      }
    }
  } finally {
    for (const server of running.values()) await stop(server);
  }
  const floor = median(results.get("writesync")!.map((m) => m.cpuUsPerEvent));
  console.log(
    "\n| target | µs CPU per event | x writeSync floor | of which main thread | events/s | bytes allocated per event |",
  );
  console.log("| --- | ---: | ---: | ---: | ---: | ---: |");
  for (const target of targets) {
    const runs = results.get(target)!;
    const cpu = median(runs.map((m) => m.cpuUsPerEvent));
    console.log(
      `| ${target} | ${cpu.toFixed(1)} | ${(cpu / floor).toFixed(2)} | ${
        median(runs.map((m) => m.mainUsPerEvent)).toFixed(1)
      } | ${Math.round(median(runs.map((m) => m.achievedRate)))} | ${
        Math.round(median(runs.map((m) => m.allocatedPerEvent)))
      } |`,
    );
  }
}

if (import.meta.main) await main();
