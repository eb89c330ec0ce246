/**
 * The `GET /history` benchmark of issue 29 (docs/history.md):
 * - a scan of a whole night through `/history` next to `read` of the same night (ratio);
 * - a 1 Hz night (43,200 lines) bucketed to 720 points: service CPU time of the request;
 * - the service's resident memory while a large night streams through `/history`;
 * - `POST /event` p99 with 16 looping history readers (buckets at the cell budget, `limit=1`
 *   over a night, CSV) against none, and the service's peak memory with 64 (hardening 0.6,
 *   docs/history.md, "Readers at once").
 *
 * Usage: deno run -A bench/history_http.ts [--mb 200] [--readers-seconds 20]
 *
 * @module
 */

// deno-lint-ignore-file no-console

import { join } from "node:path";
import { startServer } from "../server.ts";
import {
  latencyLine,
  latencyUnderReaders,
  memoryUnderReaders,
  READER_FIELDS,
  readerUrls,
  spawnSite,
  writeNight,
} from "../tests/_shared/history_util.ts";

const mbArg = Deno.args.indexOf("--mb");
const bigMb = mbArg >= 0 ? Number(Deno.args[mbArg + 1]) : 200;
const secondsArg = Deno.args.indexOf("--readers-seconds");
const readersMs = (secondsArg >= 0 ? Number(Deno.args[secondsArg + 1]) : 20) * 1000;
const CLI = new URL("../cli.ts", import.meta.url).pathname;
const root = await Deno.makeTempDir({ prefix: "history-http-bench-" });

function cpuMs(): number {
  // user + system CPU of this process (the service runs in it), from /proc.
  const stat = Deno.readTextFileSync("/proc/self/stat").split(") ")[1]!.split(" ");
  return (Number(stat[11]) + Number(stat[12])) * 10;
}

async function curl(url: string): Promise<{ ms: number; bytes: number }> {
  const t0 = performance.now();
  const out = await new Deno.Command("curl", {
    args: ["-sS", "-o", "/dev/null", "-w", "%{size_download}", url],
    stdout: "piped",
  }).output();
  return { ms: performance.now() - t0, bytes: Number(new TextDecoder().decode(out.stdout)) };
}

try {
  // 1. scan speed: /history against read, the same 3 x 43,200-line night
  const scanDir = join(root, "scan");
  await Deno.mkdir(scanDir);
  const lines = await writeNight(scanDir, {
    types: ["weather", "mount", "dome"],
    lines: 3 * 43_200,
  });
  const server = await startServer({
    siteDir: scanDir,
    hostname: "127.0.0.1",
    port: 0,
    timeZone: "UTC",
  });
  const q = "since=2026-05-10&until=2026-05-11&limit=1000000";
  const http = [], cli = [], startup = [];
  const readCli = async (since: string, until: string) => {
    const t0 = performance.now();
    await new Deno.Command(Deno.execPath(), {
      args: [
        "run",
        "-A",
        CLI,
        "telemetry",
        "read",
        "--site-dir",
        scanDir,
        "--tz",
        "UTC",
        "--since",
        since,
        "--until",
        until,
      ],
      stdout: "null",
    }).output();
    return performance.now() - t0;
  };
  for (let i = 0; i < 3; i++) {
    http.push((await curl(`${server.url}/history?${q}`)).ms);
    cli.push(await readCli("2026-05-10", "2026-05-11"));
    // The same command over a range without files: its start-up alone.
    startup.push(await readCli("2020-01-01", "2020-01-02"));
  }
  const best = (a: number[]) => Math.min(...a);
  const scanRead = best(cli) - best(startup);
  console.log(
    `scan ${lines} lines: GET /history ${best(http).toFixed(0)} ms (curl, incl. its start), read ${
      best(cli).toFixed(0)
    } ms of which start-up ${best(startup).toFixed(0)} ms: read's scan ${
      scanRead.toFixed(0)
    } ms, ratio read/history ${(scanRead / best(http)).toFixed(2)}`,
  );
  // 2. CPU of a 1 Hz night bucketed to 720 points (every=1m)
  await server.shutdown();
  const hzDir = join(root, "hz");
  await Deno.mkdir(hzDir);
  const hz = await writeNight(hzDir, { types: ["weather"], lines: 43_200 });
  const s2 = await startServer({ siteDir: hzDir, hostname: "127.0.0.1", port: 0, timeZone: "UTC" });
  const cpus = [];
  for (let i = 0; i < 5; i++) {
    const c0 = cpuMs();
    const r = await curl(`${s2.url}/history?${q}&every=1m`);
    cpus.push(cpuMs() - c0);
    if (i === 0) console.log(`buckets: ${hz} lines -> ${r.bytes} bytes of buckets`);
  }
  console.log(
    `1 Hz night (${hz} lines) to 720 buckets: service CPU ${Math.min(...cpus)} ms best, ${
      cpus.join(", ")
    } ms (10 ms ticks)`,
  );
  await s2.shutdown();
  // 3. memory while a large night streams
  const bigDir = join(root, "big");
  await Deno.mkdir(bigDir);
  // About 160 bytes a line.
  const bigLines = await writeNight(bigDir, {
    types: ["weather", "mount", "dome"],
    lines: Math.round(bigMb * 1e6 / 160),
  });
  const s3 = await startServer({
    siteDir: bigDir,
    hostname: "127.0.0.1",
    port: 0,
    timeZone: "UTC",
  });
  const rss0 = Deno.memoryUsage().rss;
  let peak = rss0;
  const timer = setInterval(() => peak = Math.max(peak, Deno.memoryUsage().rss), 50);
  const r = await curl(`${s3.url}/history?${q}`);
  clearInterval(timer);
  console.log(
    `large night ${bigLines} lines (${(r.bytes / 1e6).toFixed(0)} MB answered${
      r.bytes < bigMb * 1e6 ? ", limit reached" : ""
    }) in ${r.ms.toFixed(0)} ms: RSS ${(rss0 / 1e6).toFixed(0)} MB before, peak ${
      (peak / 1e6).toFixed(0)
    } MB`,
  );
  await s3.shutdown();
  await readersUnderLoad();
} finally {
  await Deno.remove(root, { recursive: true });
}

/**
 * 4. and 5.: the service spawned as `run` over a 1 Hz night of 3 types with 14 numeric fields,
 * readers in another process looping on the three kinds of the hardening issue.
 */
async function readersUnderLoad(): Promise<void> {
  const dir = join(root, "readers");
  await Deno.mkdir(dir);
  const lines = await writeNight(dir, { fields: READER_FIELDS });
  {
    await using server = await spawnSite(dir);
    const result = await latencyUnderReaders(server.url, readerUrls(server.url, 16), readersMs);
    console.log(
      `16 looping readers over ${lines} lines for ${readersMs / 1000} s: ${latencyLine(result)}`,
    );
  }
  await using server = await spawnSite(dir);
  const { idle, peak, report } = await memoryUnderReaders(
    server.url,
    server.pid,
    readerUrls(server.url, 64),
    readersMs,
  );
  const mb = (n: number) => (n / 1048576).toFixed(0);
  console.log(
    `64 looping readers for ${readersMs / 1000} s: answers ${
      JSON.stringify(report.statuses)
    }; service RSS ${mb(idle)} MB idle, ${mb(peak)} MB at peak (+${mb(peak - idle)} MB)`,
  );
}
