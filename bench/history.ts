/**
 * The history benchmark of issue 17:
 *
 * 1. `obs-utils telemetry read <one type>` over stored lines (10 types, so one in ten matches),
 *    from `.ndjson` and from `.ndjson.gz`: lines scanned per second and the reader's peak RSS,
 *    for a small and a large file (memory must stay flat in file size). Wall time of the whole
 *    command, Deno's start-up included, output to /dev/null.
 * 2. p99 of `POST /event` (wrk, 16 connections) against the service, without and while it
 *    compresses a large old night at start-up (`--compress-after`).
 *
 * Usage: deno run -A bench/history.ts [--lines 1000000] [--bytes 1000000000] [--seconds 8]
 * @module
 */

// deno-lint-ignore-file no-console
import { parseArgs } from "node:util";
import { join } from "node:path";
import { freePort, ROOT, runWrk, serviceArgs, waitReady } from "./_util.ts";
import { compressFile } from "../store/compress.ts";

const { values: flags } = parseArgs({
  args: Deno.args.filter((a) => a !== "--"),
  options: {
    lines: { type: "string", default: "1000000" },
    bytes: { type: "string", default: "1000000000" },
    seconds: { type: "string", default: "8" },
  },
});
const LINES = Number(flags.lines);
const BIG_BYTES = Number(flags.bytes);
const SECONDS = Number(flags.seconds);
const encoder = new TextEncoder();
const TYPES = [
  "weather",
  "dome",
  "status",
  "focuser",
  "mount",
  "camera",
  "env",
  "power",
  "sky",
  "guider",
];

/** Writes `lines` envelope lines (or until `bytes`) into `path`; returns lines and bytes. */
async function generate(path: string, lines: number, bytes = Infinity) {
  const file = await Deno.open(path, { write: true, create: true, truncate: true });
  let seq = 0;
  let written = 0;
  try {
    while (seq < lines && written < bytes) {
      let block = "";
      for (let i = 0; i < 10_000 && seq < lines; i++) {
        seq++;
        const ms = Date.parse("2026-05-10T12:00:00Z") + seq * 50;
        block += `{"seq":${seq},"ts":"${new Date(ms).toISOString()}","type":"${
          TYPES[seq % TYPES.length]
        }","data":{"n":${seq},"v":${(seq * 7919) % 1000 / 10},"note":"reading ${
          seq % 97
        }"},"meta":{}}\n`;
      }
      const chunk = encoder.encode(block);
      for (let off = 0; off < chunk.length;) off += await file.write(chunk.subarray(off));
      written += chunk.length;
    }
  } finally {
    file.close();
  }
  return { lines: seq, bytes: written };
}

/** Runs `read weather` over a site directory under /usr/bin/time: seconds and peak RSS (KiB). */
async function timedRead(siteDir: string): Promise<{ seconds: number; rssKiB: number }> {
  const t0 = performance.now();
  const out = await new Deno.Command("/usr/bin/time", {
    args: [
      "-f",
      "MAXRSS %M",
      Deno.execPath(),
      "run",
      `--allow-read=${siteDir}`,
      "--allow-env",
      join(ROOT, "cli.ts"),
      "telemetry",
      "read",
      "weather",
      "--site-dir",
      siteDir,
    ],
    env: { OBS_TELEMETRY_TZ: "UTC" },
    stdout: "null",
    stderr: "piped",
  }).output();
  const seconds = (performance.now() - t0) / 1000;
  const err = new TextDecoder().decode(out.stderr);
  const m = /MAXRSS (\d+)/.exec(err);
  if (out.code !== 0 || !m) throw new Error(`read failed: ${err}`);
  return { seconds, rssKiB: Number(m[1]) };
}

function loadavg(): string {
  return Deno.readTextFileSync("/proc/loadavg").split(" ").slice(0, 3).join(" ");
}

const root = await Deno.makeTempDir({ prefix: "history-bench-" });
try {
  console.log(`load average before: ${loadavg()} (2 cores)`);
  console.log("\n## read of one type (1 line in 10 matches)\n");
  console.log("| stored lines | form | file MB | seconds | lines/s | peak RSS MB |");
  console.log("| ---: | --- | ---: | ---: | ---: | ---: |");
  for (const n of [Math.floor(LINES / 4), LINES]) {
    const dir = join(root, `read-${n}`);
    await Deno.mkdir(dir);
    const path = join(dir, "site_20260510.ndjson");
    const { bytes } = await generate(path, n);
    for (const form of ["ndjson", "gz"]) {
      if (form === "gz") await compressFile(path);
      const size = (await Deno.stat(form === "gz" ? path + ".gz" : path)).size;
      const runs = [];
      for (let i = 0; i < 3; i++) runs.push(await timedRead(dir));
      const best = runs.reduce((a, b) => (a.seconds < b.seconds ? a : b));
      const rss = Math.max(...runs.map((r) => r.rssKiB));
      console.log(
        `| ${n.toLocaleString("en")} | .${form} | ${(size / 1e6).toFixed(0)}${
          form === "gz" ? ` (of ${(bytes / 1e6).toFixed(0)})` : ""
        } | ${best.seconds.toFixed(2)} | ${Math.round(n / best.seconds).toLocaleString("en")} | ${
          (rss / 1024).toFixed(0)
        } |`,
      );
    }
    await Deno.remove(dir, { recursive: true });
  }

  console.log(
    `\n## POST /event p99 while a ${(BIG_BYTES / 1e9).toFixed(1)} GB night is compressed\n`,
  );
  const dir = join(root, "ingest");
  await Deno.mkdir(dir);
  const big = join(dir, "site_20200101.ndjson");
  await generate(big, Infinity, BIG_BYTES);
  const script = `wrk.method = "POST"
wrk.body = '{"type":"weather","data":{"wind_mps":2.1}}'
wrk.headers["Content-Type"] = "application/json"`;
  const results: string[] = [];
  for (const compressing of [false, true]) {
    const port = freePort();
    const url = `http://127.0.0.1:${port}`;
    const args = [
      ...serviceArgs({ siteDir: dir, port }),
      "--compress-after",
      compressing ? "2" : "0",
    ];
    const child = new Deno.Command(Deno.execPath(), { args, stdout: "null", stderr: "null" })
      .spawn();
    try {
      await waitReady(url, "service");
      const t0 = performance.now();
      const wrk = await runWrk({ url: `${url}/event`, script, connections: 16, seconds: SECONDS });
      let still = false;
      try {
        await Deno.lstat(big);
        still = compressing;
      } catch { /* done */ }
      results.push(
        `| ${compressing ? "compressing" : "idle"} | ${Math.round(wrk.requests / wrk.seconds)} | ${
          wrk.p50Ms.toFixed(2)
        } | ${wrk.p99Ms.toFixed(2)} | ${wrk.errors} | ${
          compressing
            ? (still
              ? `still running after ${((performance.now() - t0) / 1000).toFixed(1)} s`
              : "finished during the run")
            : "-"
        } |`,
      );
      if (compressing) {
        // How long the whole compression took, for the record.
        while (true) {
          try {
            await Deno.lstat(big);
          } catch {
            break;
          }
          await new Promise((r) => setTimeout(r, 100));
        }
        const gz = (await Deno.stat(big + ".gz")).size;
        results.push(
          `\ncompression finished ${
            ((performance.now() - t0) / 1000).toFixed(1)
          } s after the load began; .gz ${(gz / 1e6).toFixed(0)} MB`,
        );
      }
    } finally {
      child.kill("SIGTERM");
      await child.status;
    }
  }
  console.log("| service | req/s | p50 ms | p99 ms | errors | compression |");
  console.log("| --- | ---: | ---: | ---: | ---: | --- |");
  for (const line of results) console.log(line);
  console.log(`\nload average after: ${loadavg()}`);
} finally {
  await Deno.remove(root, { recursive: true });
}
