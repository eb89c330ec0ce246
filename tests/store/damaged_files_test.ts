import assert from "node:assert/strict";
import { join } from "node:path";
import { compressFile } from "../../store/compress.ts";
import { MAX_LINE_BYTES, readLines, storedFile } from "../../store/site_files.ts";
import { readTail, scanStream } from "../../store/stored_read.ts";
import { openService, tempDir } from "../_shared/util.ts";

const CLI = new URL("../../cli.ts", import.meta.url).pathname;
const CHILD = new URL("../_shared/damage_child.ts", import.meta.url).pathname;
const encoder = new TextEncoder();
const decoder = new TextDecoder();
/**
 * A process reading a gzip bomb (256 MiB of one line) stays under this: its base (about 50 MB),
 * one line's bound (`MAX_LINE_BYTES`) and the decompressed chunks not yet collected. Before the
 * bound it held the whole line, several times over (over 1.2 GB for 1 GiB).
 */
const PEAK_LIMIT_KB = 256 * 1024;

function siteLine(seq: number, ts: string, type = "weather"): string {
  return `{"seq":${seq},"ts":"${ts}","type":"${type}","data":{"n":${seq}},"meta":{}}`;
}

/** Writes a night's plain site file holding lines `from..to`. */
async function night(dir: string, key: string, from: number, to: number): Promise<string> {
  const ts = `${key.slice(0, 4)}-${key.slice(4, 6)}-${key.slice(6)}T13:00:00.000Z`;
  const lines = [];
  for (let seq = from; seq <= to; seq++) lines.push(siteLine(seq, ts) + "\n");
  const path = join(dir, `site_${key}.ndjson`);
  await Deno.writeTextFile(path, lines.join(""));
  return path;
}

/** Cuts `bytes` off the end of a file (a copy or a disk that stopped short). */
async function cut(path: string, bytes: number): Promise<void> {
  const size = (await Deno.stat(path)).size;
  await Deno.truncate(path, size - bytes);
}

/**
 * A gzip bomb: a `.gz` night whose one line between two good ones is `mib` MiB of "a" without a
 * newline, written in 1 MiB steps (the file itself is a few hundred KiB).
 */
async function gzipBomb(path: string, mib: number): Promise<void> {
  const file = await Deno.open(path, { write: true, createNew: true });
  const gzip = new CompressionStream("gzip");
  const written = gzip.readable.pipeTo(file.writable);
  const writer = gzip.writable.getWriter();
  await writer.write(encoder.encode(siteLine(1, "2026-05-10T13:00:00.000Z") + "\n"));
  const block = new Uint8Array(1024 * 1024).fill(0x61);
  for (let i = 0; i < mib; i++) await writer.write(block);
  await writer.write(encoder.encode("\n" + siteLine(2, "2026-05-10T14:00:00.000Z") + "\n"));
  await writer.close();
  await written;
}

async function runChild(args: string[]): Promise<{ code: number; out: string; err: string }> {
  const { code, stdout, stderr } = await new Deno.Command(Deno.execPath(), {
    args,
    stdout: "piped",
    stderr: "piped",
    env: { NO_COLOR: "1", OBS_TELEMETRY_TZ: "UTC" },
  }).output();
  return { code, out: decoder.decode(stdout), err: decoder.decode(stderr) };
}

function peakKb(stderr: string): number {
  const m = /peak-kb (\d+)/.exec(stderr);
  assert.ok(m, `no peak reported: ${stderr}`);
  return Number(m[1]);
}

Deno.test("start-up names a .gz night whose trailer was cut off, reads what it holds, and keeps recording", async () => {
  await using tmp = await tempDir();
  const path = await night(tmp.path, "20260510", 1, 500);
  await compressFile(path);
  await cut(path + ".gz", 6); // the gzip trailer (CRC and size) is 8 bytes
  const warnings: string[] = [];
  const now = { ms: Date.parse("2026-05-11T13:00:00.000Z") };
  const service = await openService(
    tmp.path,
    { compressAfter: 0, onWarning: (m) => warnings.push(m) },
    now,
  );
  try {
    const damaged = warnings.filter((m) => m.includes("site_20260510.ndjson.gz"));
    assert.equal(damaged.length, 1, warnings.join("\n"));
    assert.match(damaged[0]!, /is damaged at byte \d+: it is not whole gzip/);
    // Its lines were read: seq goes on after them, and the snapshot holds the last one.
    assert.equal(JSON.parse(service.currentLine("weather")!).seq, 500);
    const [event] = await service.record([{ type: "weather", data: {} }]);
    assert.equal(event!.seq, 501);
  } finally {
    await service.close();
  }
});

Deno.test("read warns naming a damaged .gz night and prints the other nights", async () => {
  await using tmp = await tempDir();
  await night(tmp.path, "20260509", 1, 3);
  const damaged = await night(tmp.path, "20260510", 4, 2000);
  await night(tmp.path, "20260511", 2001, 2003);
  await compressFile(damaged);
  const size = (await Deno.stat(damaged + ".gz")).size;
  await cut(damaged + ".gz", Math.floor(size / 2)); // cut mid-way
  const { code, out, err } = await runChild([
    "run",
    "-A",
    CLI,
    "telemetry",
    "read",
    "--site-dir",
    tmp.path,
  ]);
  assert.equal(code, 0, err);
  const seqs = out.trim().split("\n").map((l) => JSON.parse(l).seq as number);
  assert.deepEqual(seqs.slice(0, 4), [1, 2, 3, 4]);
  assert.deepEqual(seqs.slice(-3), [2001, 2002, 2003]);
  assert.ok(seqs.length < 2000, "the lines after the cut cannot be read");
  assert.equal(err.trim().split("\n").length, 1, err);
  assert.match(err, /^warning: .*site_20260510\.ndjson\.gz is damaged at byte \d+: /);
});

Deno.test("read skips a line of a gzip bomb, naming the file and offset, within 256 MB", async () => {
  await using tmp = await tempDir();
  await gzipBomb(join(tmp.path, "site_20260510.ndjson.gz"), 256);
  const { code, out, err } = await runChild(["run", "-A", CHILD, "read", tmp.path]);
  assert.equal(code, 0, err);
  assert.deepEqual(out.trim().split("\n").map((l) => JSON.parse(l).seq), [1, 2]);
  const first = siteLine(1, "2026-05-10T13:00:00.000Z").length + 1;
  assert.match(
    err,
    new RegExp(
      `warning: .*site_20260510\\.ndjson\\.gz is damaged at byte ${first}: a line longer than ${MAX_LINE_BYTES} bytes`,
    ),
  );
  const peak = peakKb(err);
  assert.ok(peak < PEAK_LIMIT_KB, `read peaked at ${peak} kB`);
});

Deno.test("start-up over a gzip bomb night resumes within 256 MB and keeps recording", async () => {
  await using tmp = await tempDir();
  await gzipBomb(join(tmp.path, "site_20260510.ndjson.gz"), 256);
  const { code, out, err } = await runChild(["run", "-A", CHILD, "start", tmp.path]);
  assert.equal(code, 0, err);
  assert.match(out, /^recorded seq 3$/m);
  assert.match(err, /site_20260510\.ndjson\.gz is damaged at byte \d+: a line longer than/);
  const peak = peakKb(err);
  assert.ok(peak < PEAK_LIMIT_KB, `start-up peaked at ${peak} kB`);
});

Deno.test("readLines() skips an over-long line of a plain file and reads on", async () => {
  await using tmp = await tempDir();
  const path = join(tmp.path, "site_20260510.ndjson");
  await Deno.writeTextFile(path, `a\n${"x".repeat(300_000)}\nb\n${"y".repeat(50)}\nc\n`);
  for (const chunkSize of [7, 4096, 65536]) {
    const damage: number[] = [];
    const lines: string[] = [];
    for await (
      const batch of readLines(storedFile(path), {
        chunkSize,
        maxLine: 100_000,
        onDamage: (d) => damage.push(d.offset),
      })
    ) lines.push(...batch.map((l) => l.text));
    assert.deepEqual(lines, ["a", "b", "y".repeat(50), "c"], `chunk ${chunkSize}`);
    assert.deepEqual(damage, [2], `chunk ${chunkSize}`);
  }
});

Deno.test("the start-up readers pass over a plain file's over-long line without holding it", async () => {
  await using tmp = await tempDir();
  const path = join(tmp.path, "site_20260510.ndjson");
  const file = await Deno.open(path, { write: true, createNew: true });
  await file.write(encoder.encode(siteLine(1, "2026-05-10T13:00:00.000Z") + "\n"));
  const block = new Uint8Array(1024 * 1024); // zeros: what a crash can leave in a file
  for (let i = 0; i < MAX_LINE_BYTES / block.length + 2; i++) await file.write(block);
  await file.write(encoder.encode("\n" + siteLine(2, "2026-05-10T14:00:00.000Z") + "\n"));
  file.close();
  const warnings: string[] = [];
  const warn = (m: string) => warnings.push(m);
  const scan = await scanStream(path, 0, warn);
  assert.deepEqual([scan.lastSeq, scan.countedAfter], [2, 2]);
  assert.equal(warnings.length, 1);
  assert.match(warnings[0]!, /site_20260510\.ndjson is damaged at byte \d+: a line longer than/);
  // Backwards: a last line longer than any line is passed over to the one before it.
  await Deno.truncate(path, (await Deno.stat(path)).size - siteLine(2, "").length - 20);
  await Deno.writeTextFile(path, "\n", { append: true });
  assert.equal((await readTail(path, undefined, warn)).lastSeq, 1);
  assert.equal(warnings.length, 2);
  assert.match(warnings[1]!, /the line ending there is longer than/);
});

Deno.test("a damaged .gz beside its plain twin is passed over, and retention compresses the night again", async () => {
  await using tmp = await tempDir();
  const path = await night(tmp.path, "20260505", 1, 300);
  const original = await Deno.readFile(path);
  await compressFile(path);
  await Deno.writeFile(path, original); // a pass killed between the rename and the removal
  await cut(path + ".gz", 100); // and the .gz damaged since
  for (const [key, seq] of [["20260508", 301], ["20260509", 302], ["20260510", 303]] as const) {
    await night(tmp.path, key, seq, seq);
  }
  const warnings: string[] = [];
  const now = { ms: Date.parse("2026-05-10T20:00:00.000Z") };
  const service = await openService(
    tmp.path,
    { compressAfter: 2, onWarning: (m) => warnings.push(m) },
    now,
  );
  try {
    assert.equal((await service.record([{ type: "weather", data: {} }]))[0]!.seq, 304);
    const gz = path + ".gz";
    const deadline = Date.now() + 10_000;
    while (await Deno.lstat(path).then(() => true, () => false)) {
      assert.ok(Date.now() < deadline, "the night was not compressed again");
      await new Promise((r) => setTimeout(r, 20));
    }
    const restored = await new Response(
      (await Deno.open(gz)).readable.pipeThrough(new DecompressionStream("gzip")),
    ).bytes();
    assert.deepEqual(restored, original);
    assert.deepEqual(warnings, []);
  } finally {
    await service.close();
  }
});
