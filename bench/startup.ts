/**
 * The start-up benchmark of the performance issue: time from spawning `cli.ts telemetry run` to
 * the first 200 on `/ready` with a large newest site file, after a clean shutdown and after a
 * kill -9, beside a plain streaming read of the same file.
 *
 * The site file is generated fast: blocks of valid envelope lines with increasing seq. The
 * first start has no checkpoint (a 0.3 directory): it rebuilds from the file and saves one. Then
 * (a) a clean shutdown and a restart, (b) 2,000 more events, a kill -9 and a restart.
 *
 * Usage: deno run -A bench/startup.ts [--bytes 1000000000] [--keep]
 * @module
 */

// deno-lint-ignore-file no-console
import { parseArgs } from "node:util";
import { join } from "node:path";
import { cliRunArgs, freePort } from "../tests/_shared/util.ts";

const { values: flags } = parseArgs({
  args: Deno.args.filter((a) => a !== "--"),
  options: {
    bytes: { type: "string", default: "1000000000" },
    keep: { type: "boolean", default: false },
  },
});
const target = Number(flags.bytes);
const encoder = new TextEncoder();

/** Writes `bytes` of envelope lines (seq 1, 2, …) into a site file; returns the last seq. */
async function generate(path: string, bytes: number): Promise<number> {
  const file = await Deno.open(path, { write: true, create: true, truncate: true });
  const pad = "x".repeat(120);
  let seq = 0;
  let written = 0;
  try {
    while (written < bytes) {
      let block = "";
      for (let i = 0; i < 20_000 && written + block.length < bytes; i++) {
        const type = i % 3 === 0 ? "weather" : i % 3 === 1 ? "dome" : "status";
        block += `{"seq":${++seq},"ts":"2026-05-10T13:00:00.000Z","type":"${type}",` +
          `"data":{"n":${seq},"pad":"${pad}"},"meta":{}}\n`;
      }
      const chunk = encoder.encode(block);
      let off = 0;
      while (off < chunk.length) off += await file.write(chunk.subarray(off));
      written += chunk.length;
    }
  } finally {
    file.close();
  }
  return seq;
}

/** Spawns the server and returns it with the milliseconds until `/ready` answered 200. */
async function start(
  siteDir: string,
): Promise<{ child: Deno.ChildProcess; url: string; ms: number }> {
  const port = freePort();
  const url = `http://127.0.0.1:${port}`;
  const began = performance.now();
  const child = new Deno.Command(Deno.execPath(), {
    args: cliRunArgs(siteDir, port, []),
    stdin: "null",
    stdout: "null",
    stderr: "inherit",
  }).spawn();
  while (true) {
    try {
      const res = await fetch(`${url}/ready`);
      await res.body?.cancel();
      if (res.status === 200) break;
    } catch {
      // not listening yet
    }
    await new Promise((r) => setTimeout(r, 2));
  }
  return { child, url, ms: performance.now() - began };
}

async function post(url: string, n: number): Promise<void> {
  for (let i = 0; i < n; i += 100) {
    const body = Array.from(
      { length: 100 },
      (_, j) => JSON.stringify({ type: j % 2 ? "weather" : "camera", data: { i: i + j } }),
    ).join("\n");
    const res = await fetch(`${url}/events`, {
      method: "POST",
      headers: { "content-type": "application/x-ndjson" },
      body,
    });
    await res.body?.cancel();
  }
}

async function shutdown(url: string, child: Deno.ChildProcess): Promise<void> {
  const res = await fetch(`${url}/shutdown`, { method: "POST" });
  await res.body?.cancel();
  await child.status;
}

const dir = await Deno.makeTempDir({ prefix: "obs-startup-bench-" });
try {
  const path = join(dir, "site_20260510.ndjson");
  let t = performance.now();
  const lastSeq = await generate(path, target);
  const size = (await Deno.stat(path)).size;
  console.error(
    `generated ${size} bytes (${lastSeq} lines) in ${(performance.now() - t).toFixed(0)} ms`,
  );

  t = performance.now();
  const file = await Deno.open(path, { read: true });
  let read = 0;
  for await (const chunk of file.readable) read += chunk.length;
  const streamMs = performance.now() - t;

  const cold = await start(dir); // no checkpoint yet: the 0.3 rebuild, then one is saved
  await post(cold.url, 1000);
  await shutdown(cold.url, cold.child);

  const clean = await start(dir);
  await post(clean.url, 2000);
  clean.child.kill("SIGKILL");
  await clean.child.status;

  const killed = await start(dir);
  await shutdown(killed.url, killed.child);

  const mb = (size / 1e6).toFixed(0);
  console.log(`| Start-up to /ready, newest site file ${mb} MB | ms |`);
  console.log("| --- | ---: |");
  console.log(
    `| baseline: plain streaming read of the file (${read} bytes) | ${streamMs.toFixed(0)} |`,
  );
  console.log(
    `| first start, no checkpoint (0.3 directory: full rebuild) | ${cold.ms.toFixed(0)} |`,
  );
  console.log(`| (a) after a clean shutdown | ${clean.ms.toFixed(0)} |`);
  console.log(
    `| (b) after a kill -9 (2,000 events after the checkpoint) | ${killed.ms.toFixed(0)} |`,
  );
} finally {
  if (!flags.keep) await Deno.remove(dir, { recursive: true });
  else console.error(`kept ${dir}`);
}
