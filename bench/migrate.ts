/**
 * Benchmark of {@linkcode migrate} (`deno task bench:migrate`): generates a legacy store of each size (about 300 bytes a
 * record) in a temporary directory, migrates it in a child process and reports records per
 * second and the child's peak resident memory (VmHWM from `/proc/self/status`, Linux only).
 * A larger input should leave the peak RSS about the same.
 *
 * Beside each migration, in the same rounds, runs the floor: a child that reads the same files
 * line by line, parses each record and writes one envelope line per record into one file (no
 * dates, no grouping by day, no sorting, no rejects). The ratio of the two is the figure the
 * performance issue sets (>= 0.85x at 5M records).
 *
 * ```sh
 * deno run -A bench/migrate.ts [--records 1000000,2000000] [--rounds 1] [--keep]
 * ```
 *
 * @module
 */

import { parseArgs } from "node:util";
import { join } from "node:path";
import { migrate } from "../migrate.ts";
import { LineSplitter } from "../wire/ndjson.ts";

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

/** The floor: parse every record and write one envelope line per record, nothing else. */
async function floorChild(source: string, dest: string): Promise<void> {
  const cpuBefore = await cpuSeconds();
  const started = performance.now();
  await Deno.mkdir(dest, { recursive: true });
  const out = await Deno.open(join(dest, "floor.ndjson"), { write: true, create: true });
  const encoder = new TextEncoder();
  let records = 0;
  let text = "";
  const flush = async () => {
    const bytes = encoder.encode(text);
    text = "";
    for (let done = 0; done < bytes.length;) done += await out.write(bytes.subarray(done));
  };
  for (const name of COLLECTIONS) {
    const onLine = (line: string) => {
      if (line.length === 0) return;
      const r = JSON.parse(line);
      text += JSON.stringify({
        seq: ++records,
        ts: r.date,
        type: r.type,
        data: r.data,
        meta: { migrated_from: "PanFileDB", original_id: r._id },
      }) + "\n";
    };
    const splitter = new LineSplitter();
    const file = await Deno.open(join(source, name));
    for await (const chunk of file.readable) {
      splitter.push(chunk, onLine);
      if (text.length >= 1 << 16) await flush();
    }
    splitter.end(onLine);
  }
  await flush();
  await out.sync();
  out.close();
  const elapsedMs = performance.now() - started;
  const result: ChildResult = {
    records,
    files: 1,
    elapsedMs,
    recordsPerSecond: Math.round(records / (elapsedMs / 1000)),
    cpuSeconds: await cpuSeconds() - cpuBefore,
    peakRssKb: await peakRssKb(),
  };
  // deno-lint-ignore no-console
  console.log(JSON.stringify(result));
}

async function runChild(mode: "--child" | "--floor", source: string, dest: string) {
  const out = await new Deno.Command(Deno.execPath(), {
    args: ["run", "-A", import.meta.filename as string, mode, source, dest],
    stdout: "piped",
    stderr: "inherit",
  }).output();
  if (!out.success) throw new Error(`Benchmark child failed with exit code ${out.code}`);
  await Deno.remove(dest, { recursive: true });
  return JSON.parse(new TextDecoder().decode(out.stdout)) as ChildResult;
}

function describeRun(label: string, r: ChildResult, mb: number): string {
  return `${label} ${r.records} records (${mb.toFixed(0)} MB, ${r.files} files): ${
    (r.elapsedMs / 1000).toFixed(2)
  } s wall, ${r.recordsPerSecond} records/s; ${r.cpuSeconds.toFixed(2)} s CPU, ${
    Math.round(r.records / r.cpuSeconds)
  } records/CPU-s; peak RSS ${(r.peakRssKb / 1024).toFixed(0)} MiB`;
}

interface SizeResult {
  records: number;
  mb: number;
  migrate: ChildResult[];
  floor: ChildResult[];
}

async function runSize(records: number, rounds: number, keep: boolean): Promise<SizeResult> {
  const root = await Deno.makeTempDir({ prefix: "migrate-bench-" });
  try {
    const source = join(root, "legacy");
    const mb = (await generate(source, records)) / 1e6;
    const result: SizeResult = { records, mb, migrate: [], floor: [] };
    for (let round = 0; round < rounds; round++) {
      const m = await runChild("--child", source, join(root, "site"));
      // deno-lint-ignore no-console
      console.log(describeRun("migrate", m, mb));
      const f = await runChild("--floor", source, join(root, "floor"));
      // deno-lint-ignore no-console
      console.log(describeRun("floor  ", f, mb));
      result.migrate.push(m);
      result.floor.push(f);
    }
    return result;
  } finally {
    // deno-lint-ignore no-console
    if (keep) console.log(`kept ${root}`);
    else await Deno.remove(root, { recursive: true });
  }
}

function median(values: number[]): number {
  const s = values.toSorted((a, b) => a - b);
  return s[Math.floor(s.length / 2)] ?? NaN;
}

async function main(): Promise<void> {
  const { values, positionals } = parseArgs({
    args: Deno.args,
    options: {
      records: { type: "string", default: "1000000,2000000" },
      rounds: { type: "string", default: "1" },
      child: { type: "boolean", default: false },
      floor: { type: "boolean", default: false },
      keep: { type: "boolean", default: false },
    },
    allowPositionals: true,
    strict: true,
  });
  if (values.child || values.floor) {
    const [source, dest] = positionals;
    if (source === undefined || dest === undefined) throw new Error("--child needs SOURCE DEST");
    await (values.floor ? floorChild(source, dest) : child(source, dest));
    return;
  }
  const sizes = values.records.split(",").map(Number);
  const rounds = Number(values.rounds);
  if (sizes.some((n) => !Number.isSafeInteger(n) || n < 1)) {
    throw new RangeError(`Cannot use --records ${values.records}: expected positive integers`);
  }
  if (!Number.isSafeInteger(rounds) || rounds < 1) {
    throw new RangeError(`Cannot use --rounds ${values.rounds}: expected a positive integer`);
  }
  const rows: string[] = [];
  for (const records of sizes) {
    const r = await runSize(records, rounds, values.keep);
    const m = median(r.migrate.map((x) => x.recordsPerSecond));
    const f = median(r.floor.map((x) => x.recordsPerSecond));
    const mc = median(r.migrate.map((x) => x.records / x.cpuSeconds));
    const fc = median(r.floor.map((x) => x.records / x.cpuSeconds));
    const rss = (runs: ChildResult[]) =>
      Math.max(...runs.map((x) => x.peakRssKb / 1024)).toFixed(0);
    rows.push(
      `| ${records.toLocaleString("en-US")} | ${r.mb.toFixed(0)} MB | ${
        m.toLocaleString("en-US")
      } | ${f.toLocaleString("en-US")} | ${(m / f).toFixed(2)} | ${(mc / fc).toFixed(2)} | ${
        rss(r.migrate)
      } / ${rss(r.floor)} MiB |`,
    );
  }
  // deno-lint-ignore no-console
  console.log(
    [
      "",
      `Medians of ${rounds} round(s):`,
      "",
      "| records | input | migrate records/s | floor records/s | x floor | x floor (CPU) | peak RSS migrate / floor |",
      "| ---: | ---: | ---: | ---: | ---: | ---: | ---: |",
      ...rows,
    ].join("\n"),
  );
}

if (import.meta.main) await main();
