/**
 * Benchmark of {@linkcode migrate}: generates a legacy store of N and 2N records (about 300 bytes
 * each) in a temporary directory, migrates each in a child process and reports records per
 * second and the child's peak resident memory (VmHWM from `/proc/self/status`, Linux only).
 * Doubling the input should leave the peak RSS about the same.
 *
 * ```sh
 * deno run -A bench/migrate_bench.ts [--records 1000000] [--keep]
 * ```
 *
 * @module
 */

import { parseArgs } from "node:util";
import { join } from "node:path";
import { migrate } from "../migrate.ts";

const COLLECTIONS = ["weather.json", "environment.json", "status.json", "dome/dome.json"];
const START = Date.UTC(2023, 0, 1);

function pad(n: number, width = 2): string {
  return String(n).padStart(width, "0");
}

// A date as the legacy Python writer produced it: isoformat() with microseconds, or str() with
// a space, naive (UTC).
function legacyDate(ms: number, micro: number, space: boolean): string {
  const d = new Date(ms);
  return `${d.getUTCFullYear()}-${pad(d.getUTCMonth() + 1)}-${pad(d.getUTCDate())}${
    space ? " " : "T"
  }${pad(d.getUTCHours())}:${pad(d.getUTCMinutes())}:${pad(d.getUTCSeconds())}.${pad(micro, 6)}`;
}

function record(collection: string, i: number, ms: number): string {
  const type = collection.replace(/^.*\//, "").replace(/\.json$/, "");
  const t = (i % 400) / 10;
  // Python json.dumps separators (", " and ": "), as the legacy writer wrote them.
  return `{"_id": "${crypto.randomUUID()}", "type": "${type}", "date": "${
    legacyDate(ms, (i * 7919) % 1_000_000, i % 5 === 0)
  }", "data": {"temperature": "${t} deg", "humidity": ${(i % 1000) / 10}, "wind": {"speed_mps": ${
    (i % 170) / 10
  }, "direction": "${i % 360} deg", "gust_mps": ${(i % 230) / 10}}, "pressure_hpa": ${
    900 + (i % 2000) / 10
  }, "sky_quality": [${t}, ${(i % 21) / 10}, ${(i % 13) / 10}], "dome": "${
    i % 2 ? "open" : "closed"
  }", "station": "site-a"}}\n`;
}

async function generate(dir: string, records: number): Promise<number> {
  const encoder = new TextEncoder();
  let bytes = 0;
  const perCollection = Math.ceil(records / COLLECTIONS.length);
  let left = records;
  for (let c = 0; c < COLLECTIONS.length; c++) {
    const name = COLLECTIONS[c] as string;
    const path = join(dir, name);
    await Deno.mkdir(join(path, ".."), { recursive: true });
    const file = await Deno.open(path, { write: true, createNew: true });
    const count = Math.min(perCollection, left);
    left -= count;
    let parts: string[] = [];
    for (let i = 0; i < count; i++) {
      // One reading a minute per collection, so N and 2N differ in days, not in density.
      parts.push(record(name, i, START + i * 60_000 + c * 7_000));
      if (parts.length === 20_000 || i === count - 1) {
        const chunk = encoder.encode(parts.join(""));
        bytes += chunk.length;
        let done = 0;
        while (done < chunk.length) done += await file.write(chunk.subarray(done));
        parts = [];
      }
    }
    file.close();
    await Deno.writeTextFile(join(path, "..", `current_${name.replace(/^.*\//, "")}`), "{}\n");
  }
  return bytes;
}

async function peakRssKb(): Promise<number> {
  const status = await Deno.readTextFile("/proc/self/status");
  return Number(/VmHWM:\s+(\d+)/.exec(status)?.[1] ?? NaN);
}

// User + system CPU seconds of this process so far (fields 14 and 15 of /proc/self/stat, in
// clock ticks of 1/100 s): on a shared machine, records per CPU second is the steadier number.
async function cpuSeconds(): Promise<number> {
  const stat = await Deno.readTextFile("/proc/self/stat");
  const fields = stat.slice(stat.lastIndexOf(")") + 2).split(" ");
  return (Number(fields[11]) + Number(fields[12])) / 100;
}

interface ChildResult {
  records: number;
  files: number;
  elapsedMs: number;
  recordsPerSecond: number;
  cpuSeconds: number;
  peakRssKb: number;
}

async function child(source: string, dest: string): Promise<void> {
  const cpuBefore = await cpuSeconds();
  const summary = await migrate(source, dest);
  const result: ChildResult = {
    records: summary.records,
    files: summary.files.length,
    elapsedMs: summary.elapsedMs,
    recordsPerSecond: summary.recordsPerSecond,
    cpuSeconds: await cpuSeconds() - cpuBefore,
    peakRssKb: await peakRssKb(),
  };
  // deno-lint-ignore no-console
  console.log(JSON.stringify(result));
}

async function runOnce(records: number, keep: boolean): Promise<ChildResult & { mb: number }> {
  const root = await Deno.makeTempDir({ prefix: "migrate-bench-" });
  try {
    const source = join(root, "legacy");
    const bytes = await generate(source, records);
    const out = await new Deno.Command(Deno.execPath(), {
      args: ["run", "-A", import.meta.filename as string, "--child", source, join(root, "site")],
      stdout: "piped",
      stderr: "inherit",
    }).output();
    if (!out.success) throw new Error(`Benchmark child failed with exit code ${out.code}`);
    const result = JSON.parse(new TextDecoder().decode(out.stdout)) as ChildResult;
    return { ...result, mb: bytes / 1e6 };
  } finally {
    // deno-lint-ignore no-console
    if (keep) console.log(`kept ${root}`);
    else await Deno.remove(root, { recursive: true });
  }
}

async function main(): Promise<void> {
  const { values, positionals } = parseArgs({
    args: Deno.args,
    options: {
      records: { type: "string", default: "1000000" },
      child: { type: "boolean", default: false },
      keep: { type: "boolean", default: false },
    },
    allowPositionals: true,
    strict: true,
  });
  if (values.child) {
    const [source, dest] = positionals;
    if (source === undefined || dest === undefined) throw new Error("--child needs SOURCE DEST");
    await child(source, dest);
    return;
  }
  const n = Number(values.records);
  if (!Number.isSafeInteger(n) || n < 1) {
    throw new RangeError(`Cannot use --records ${values.records}: expected a positive integer`);
  }
  for (const records of [n, 2 * n]) {
    const r = await runOnce(records, values.keep);
    // deno-lint-ignore no-console
    console.log(
      `${r.records} records (${r.mb.toFixed(0)} MB, ${r.files} days): ${
        (r.elapsedMs / 1000).toFixed(2)
      } s wall, ${r.recordsPerSecond} records/s; ${r.cpuSeconds.toFixed(2)} s CPU, ${
        Math.round(r.records / r.cpuSeconds)
      } records/CPU-s; peak RSS ${(r.peakRssKb / 1024).toFixed(0)} MiB`,
    );
  }
}

if (import.meta.main) await main();
