/**
 * The idle cost of a caught-up forwarder (`deno task bench:forward-idle`, docs/fleet.md#idle-cost):
 * a site directory with `--runs` stopped runs in its run log (each a directory with one stored
 * line) and `--nights` site files of one line each; a forwarder child (`cli/forward_main.ts`, as
 * `spawnForwarder()` runs it) sends them all to a real `nats-server -js`, then is left alone, and
 * its CPU time (`/proc/<pid>/stat`, user + system) is read over `--seconds`. The cost must not
 * grow with the number of runs or nights: compare `--runs 10 --nights 10` with the defaults.
 *
 * Usage: deno run -A bench/forward_idle.ts [--runs 4000] [--nights 400] [--seconds 10]
 *   [--checkout DIR] (another checkout's forwarder, for a before/after)
 * @module
 */

// deno-lint-ignore-file no-console
import { parseArgs } from "node:util";
import { join, resolve } from "node:path";
import { natsMissing, NatsServer } from "../tests/_shared/fleet_util.ts";

const { values } = parseArgs({
  args: Deno.args,
  options: {
    runs: { type: "string", default: "4000" },
    nights: { type: "string", default: "400" },
    seconds: { type: "string", default: "10" },
    checkout: { type: "string" },
  },
});
const RUNS = Number(values.runs);
const NIGHTS = Number(values.nights);
const SECONDS = Number(values.seconds);
const CHECKOUT = resolve(values.checkout ?? new URL("..", import.meta.url).pathname);
/** The forwarder's program: `cli/forward_main.ts`, or `fleet/main.ts` in an older checkout. */
const FORWARD_MAIN = [join(CHECKOUT, "cli", "forward_main.ts"), join(CHECKOUT, "fleet", "main.ts")]
  .find((path) => {
    try {
      return Deno.statSync(path).isFile;
    } catch {
      return false;
    }
  }) ?? join(CHECKOUT, "cli", "forward_main.ts");

const missing = natsMissing();
if (missing) {
  console.log(`skipping the idle forwarder benchmark: ${missing}`);
  Deno.exit(0);
}

function line(seq: number, ms: number): string {
  const ts = new Date(ms).toISOString();
  return JSON.stringify({ seq, ts, type: "weather", data: { seq }, meta: {} }) + "\n";
}

/** Writes the site directory: `NIGHTS` site files, `RUNS` stopped runs in the run log. */
async function makeSite(dir: string): Promise<number> {
  const day = 86_400_000;
  const first = Date.UTC(2015, 0, 1, 20);
  for (let n = 0; n < NIGHTS; n++) {
    const key = new Date(first + n * day).toISOString().slice(0, 10).replaceAll("-", "");
    await Deno.writeTextFile(join(dir, `site_${key}.ndjson`), line(n + 1, first + n * day));
  }
  const log: string[] = [];
  for (let r = 0; r < RUNS; r++) {
    const runId = `r${String(r).padStart(5, "0")}`;
    await Deno.mkdir(join(dir, runId));
    const at = first + r * 3_600_000;
    await Deno.writeTextFile(join(dir, runId, "telemetry.ndjson"), line(1, at));
    log.push(JSON.stringify({
      run_id: runId,
      run_dir: join(dir, runId),
      started_at: new Date(at).toISOString(),
      stopped_at: new Date(at + 60_000).toISOString(),
      events: 1,
      meta: {},
    }));
  }
  await Deno.writeTextFile(join(dir, "runs.ndjson"), log.join("\n") + (RUNS ? "\n" : ""));
  return NIGHTS + RUNS;
}

/** User + system CPU time of a process so far, in seconds (`/proc/<pid>/stat`, clock ticks). */
async function cpuSeconds(pid: number): Promise<number> {
  const stat = await Deno.readTextFile(`/proc/${pid}/stat`);
  const fields = stat.slice(stat.lastIndexOf(")") + 2).split(" ");
  return (Number(fields[11]) + Number(fields[12])) / 100; // utime, stime; USER_HZ = 100
}

/** Waits until the forwarder's cursor records every run and the last night (bounded). */
async function waitCaughtUp(dir: string, total: number): Promise<number> {
  const started = Date.now();
  const deadline = started + 300_000;
  while (Date.now() < deadline) {
    try {
      const cursor = JSON.parse(await Deno.readTextFile(join(dir, ".forward", "nats.json")));
      const runs = Object.keys(cursor.runs ?? {}).length;
      if (runs === RUNS && (cursor.site?.seq ?? 0) === NIGHTS) return Date.now() - started;
    } catch { /* not written yet */ }
    await new Promise((r) => setTimeout(r, 200));
  }
  throw new Error(`the forwarder did not send the ${total} lines within 300 s`);
}

const dir = await Deno.makeTempDir({ prefix: "obs-forward-idle-" });
await using nats = await NatsServer.start();
try {
  const total = await makeSite(dir);
  const child = new Deno.Command(Deno.execPath(), {
    args: [
      "run",
      "--allow-all",
      FORWARD_MAIN,
      "forward",
      "--site-dir",
      dir,
      "--to",
      nats.url,
      "--unit",
      "idle",
    ],
    stdout: "null",
    stderr: "null",
  }).spawn();
  try {
    const catchUp = await waitCaughtUp(dir, total);
    await new Promise((r) => setTimeout(r, 2000)); // past the last cursor save
    const before = await cpuSeconds(child.pid);
    const t0 = performance.now();
    await new Promise((r) => setTimeout(r, SECONDS * 1000));
    const used = await cpuSeconds(child.pid) - before;
    const wall = (performance.now() - t0) / 1000;
    console.log(
      `checkout ${CHECKOUT}: ${RUNS} runs, ${NIGHTS} nights: caught up in ${
        (catchUp / 1000).toFixed(1)
      } s; idle CPU ${(used / wall * 100).toFixed(2)} % of a core over ${wall.toFixed(1)} s`,
    );
  } finally {
    child.kill("SIGTERM");
    await child.status;
  }
} finally {
  if (!Deno.env.get("KEEP")) await Deno.remove(dir, { recursive: true });
  else console.log(dir);
}
