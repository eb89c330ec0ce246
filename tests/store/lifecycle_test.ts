import assert from "node:assert/strict";
import { join } from "node:path";
import { compressFile } from "../../store/compress.ts";
import { endedMoreThan, runRetentionPass as runLifecycle } from "../../store/retention.ts";
import {
  cursorPath,
  emptyCursor,
  type ForwardCursor,
  parseForwardCursor,
  readCursor,
  writeCursor,
} from "../../store/forward_cursor.ts";
import { openService, tempDir } from "../_shared/util.ts";
import { Rng, seedFromEnv } from "../_shared/fault_util.ts";

const CHILD = new URL("../_shared/compress_child.ts", import.meta.url).pathname;
const encoder = new TextEncoder();

function siteLine(seq: number, ts: string, type = "weather", data: unknown = {}): string {
  return `{"seq":${seq},"ts":"${ts}","type":"${type}","data":${JSON.stringify(data)},"meta":{}}`;
}

/** Writes site files for nights `20260501 + i`, one line each unless told otherwise. */
async function nights(dir: string, keys: string[]): Promise<void> {
  let seq = 0;
  for (const key of keys) {
    const ts = `${key.slice(0, 4)}-${key.slice(4, 6)}-${key.slice(6)}T13:00:00.000Z`;
    await Deno.writeTextFile(join(dir, `site_${key}.ndjson`), siteLine(++seq, ts) + "\n");
  }
}

async function names(dir: string): Promise<string[]> {
  const out: string[] = [];
  for await (const e of Deno.readDir(dir)) out.push(e.name);
  return out.sort();
}

async function gunzip(path: string): Promise<Uint8Array> {
  const file = await Deno.open(path);
  return new Uint8Array(
    await new Response(file.readable.pipeThrough(new DecompressionStream("gzip"))).arrayBuffer(),
  );
}

async function exists(path: string): Promise<boolean> {
  try {
    await Deno.lstat(path);
    return true;
  } catch (err) {
    if (err instanceof Deno.errors.NotFound) return false;
    throw err;
  }
}

const KEYS = ["20260501", "20260502", "20260503", "20260504", "20260505", "20260506", "20260507"];
/** In night 20260507. */
const NOW = () => Date.parse("2026-05-07T20:00:00Z");

Deno.test("endedMoreThan() counts nights by their keys across months", () => {
  assert.equal(endedMoreThan("20260430", "20260503", 2), true);
  assert.equal(endedMoreThan("20260501", "20260503", 2), false);
  assert.equal(endedMoreThan("20260506", "20260507", 0), true);
});

Deno.test("runLifecycle() compresses nights that ended more than N nights ago, not the current night, not the N before it", async () => {
  await using tmp = await tempDir();
  await nights(tmp.path, KEYS);
  const original = await Deno.readFile(join(tmp.path, "site_20260502.ndjson"));
  const report = await runLifecycle({
    siteDir: tmp.path,
    timeZone: "UTC",
    compressAfter: 2,
    now: NOW,
    openNights: () => ["20260503"],
  });
  assert.deepEqual(await names(tmp.path), [
    "site_20260501.ndjson.gz",
    "site_20260502.ndjson.gz",
    "site_20260503.ndjson", // open in the service: never touched
    "site_20260504.ndjson.gz",
    "site_20260505.ndjson",
    "site_20260506.ndjson",
    "site_20260507.ndjson",
  ]);
  assert.equal(report.compressed.length, 3);
  assert.deepEqual(await gunzip(join(tmp.path, "site_20260502.ndjson.gz")), original);
});

Deno.test("runLifecycle() with --compress-after 0 and --retain 0 leaves every file alone", async () => {
  await using tmp = await tempDir();
  await nights(tmp.path, KEYS);
  const before = await names(tmp.path);
  await runLifecycle({ siteDir: tmp.path, timeZone: "UTC", compressAfter: 0, retain: 0, now: NOW });
  assert.deepEqual(await names(tmp.path), before);
});

Deno.test("runLifecycle() keeps everything a forwarding cursor has not passed", async () => {
  await using tmp = await tempDir();
  await nights(tmp.path, KEYS);
  const size = (await Deno.stat(join(tmp.path, "site_20260503.ndjson"))).size;
  const cursor: ForwardCursor = {
    version: 1,
    site: { file: "site_20260503.ndjson", offset: 0, seq: 0 },
    runs: {},
  };
  await writeCursor(tmp.path, "fleet", cursor);
  const options = { siteDir: tmp.path, timeZone: "UTC", compressAfter: 0, retain: 1, now: NOW };
  const report = await runLifecycle(options);
  // Nights 01-05 are due; the cursor stands at the start of 03.
  assert.deepEqual(report.deleted.map((p) => p.slice(tmp.path.length + 1)), [
    "site_20260501.ndjson",
    "site_20260502.ndjson",
  ]);
  assert.equal(report.heldByCursor.length, 3);
  // At the end of 03 it has passed 03, not 04.
  cursor.site = { file: "site_20260503.ndjson", offset: size, seq: 3 };
  await writeCursor(tmp.path, "fleet", cursor);
  await runLifecycle(options);
  assert.deepEqual((await names(tmp.path)).filter((n) => n.startsWith("site_")), [
    "site_20260504.ndjson",
    "site_20260505.ndjson",
    "site_20260506.ndjson",
    "site_20260507.ndjson",
  ]);
  // A second forwarder that has sent nothing holds everything.
  await writeCursor(tmp.path, "backup", emptyCursor());
  cursor.site = { file: "site_20260507.ndjson", offset: 0, seq: 0 };
  await writeCursor(tmp.path, "fleet", cursor);
  assert.deepEqual((await runLifecycle(options)).deleted, []);
});

Deno.test("runLifecycle() deletes nothing while a cursor cannot be read, and says which", async () => {
  await using tmp = await tempDir();
  await nights(tmp.path, KEYS);
  await Deno.mkdir(join(tmp.path, ".forward"));
  await Deno.writeTextFile(join(tmp.path, ".forward", "fleet.json"), '{"version":1,"site":');
  const warnings: string[] = [];
  const report = await runLifecycle({
    siteDir: tmp.path,
    timeZone: "UTC",
    compressAfter: 0,
    retain: 1,
    now: NOW,
    warn: (m) => warnings.push(m),
  });
  assert.deepEqual(report.deleted, []);
  assert.equal(warnings.length, 1);
  assert.match(
    warnings[0]!,
    /^Retention deletes nothing while the forwarding cursor "fleet" cannot be read: Cannot read the forwarding cursor .*fleet\.json/,
  );
});

Deno.test("runLifecycle() removes and compresses through no symbolic link", async () => {
  await using tmp = await tempDir();
  await using outside = await tempDir();
  const target = join(outside.path, "precious.ndjson");
  await Deno.writeTextFile(target, "keep me\n");
  await Deno.symlink(target, join(tmp.path, "site_20260401.ndjson"));
  await runLifecycle({ siteDir: tmp.path, timeZone: "UTC", compressAfter: 1, retain: 2, now: NOW });
  assert.equal(await Deno.readTextFile(target), "keep me\n");
  assert.deepEqual(await names(outside.path), ["precious.ndjson"]);
  assert.ok((await Deno.lstat(join(tmp.path, "site_20260401.ndjson"))).isSymlink);
});

Deno.test("runLifecycle() compresses the files of runs stopped long ago, never the active run's", async () => {
  await using tmp = await tempDir();
  const old = join(tmp.path, "night-1");
  const active = join(tmp.path, "night-2");
  const placed = join(tmp.path, "night-3");
  for (const dir of [old, active, placed]) {
    await Deno.mkdir(dir);
    await Deno.writeTextFile(
      join(dir, "telemetry.ndjson"),
      siteLine(1, "2026-05-01T20:00:00.000Z") + "\n",
    );
    await Deno.utime(
      join(dir, "telemetry.ndjson"),
      new Date("2026-05-01T22:00:00Z"),
      new Date("2026-05-01T22:00:00Z"),
    );
  }
  const record = (dir: string, stopped: string | null) =>
    JSON.stringify({ run_id: dir.split("/").at(-1), run_dir: dir, stopped_at: stopped });
  // night-3 stopped recently according to the log, whatever its file's time says.
  await Deno.writeTextFile(
    join(tmp.path, "runs.ndjson"),
    [
      record(old, null),
      record(old, "2026-05-02T01:00:00.000Z"),
      record(placed, null),
      record(placed, "2026-05-06T20:00:00.000Z"),
    ].join("\n") + "\n",
  );
  await runLifecycle({
    siteDir: tmp.path,
    timeZone: "UTC",
    compressAfter: 2,
    now: NOW,
    activeRunDir: () => active,
  });
  assert.deepEqual(await names(old), ["telemetry.ndjson.gz"]);
  assert.deepEqual(await names(active), ["telemetry.ndjson"]);
  assert.deepEqual(await names(placed), ["telemetry.ndjson"]);
});

Deno.test("runLifecycle() finishes a compression a crash left half-way", async () => {
  await using tmp = await tempDir();
  await nights(tmp.path, KEYS);
  const a = join(tmp.path, "site_20260501.ndjson");
  const b = join(tmp.path, "site_20260502.ndjson");
  const content = await Deno.readFile(a);
  // Killed after the rename, before the removal: both forms.
  await compressFile(a);
  await Deno.writeFile(a, content);
  // Killed while writing: a partial temporary file beside the original.
  const tmpName = join(tmp.path, `.site_20260502.ndjson.gz.tmp-${crypto.randomUUID()}`);
  await Deno.writeFile(tmpName, new Uint8Array([0x1f, 0x8b, 8, 0]));
  await runLifecycle({ siteDir: tmp.path, timeZone: "UTC", compressAfter: 2, now: NOW });
  assert.deepEqual(await gunzip(a + ".gz"), content);
  assert.equal(await exists(a), false);
  assert.equal(await exists(tmpName), false);
  assert.equal(await exists(b), false);
  assert.ok(await exists(b + ".gz"));
});

Deno.test("a kill -9 at random points of a compression leaves the original or the whole .gz (seeded)", async () => {
  await using tmp = await tempDir();
  const rng = new Rng(seedFromEnv(4242));
  // Three old nights of ~1.5 MB each, not too compressible, so a pass takes a while.
  const contents = new Map<string, Uint8Array>();
  for (const key of ["20260501", "20260502", "20260503"]) {
    const lines: string[] = [];
    for (let i = 0; i < 12_000; i++) {
      lines.push(siteLine(i + 1, `2026-05-0${key.at(-1)}T13:00:00.000Z`, "weather", {
        v: rng.next(),
        w: rng.int(0, 1e9),
      }));
    }
    contents.set(`site_${key}.ndjson`, encoder.encode(lines.join("\n") + "\n"));
  }
  // Nights recorded since: a night counts as passed only once later nights hold data.
  const recent = ["20260505", "20260506", "20260507"];
  const setUp = async (dir: string) => {
    await Deno.mkdir(dir);
    for (const [name, bytes] of contents) await Deno.writeFile(join(dir, name), bytes);
    await nights(dir, recent);
  };
  const spawn = (dir: string) =>
    new Deno.Command(Deno.execPath(), {
      args: ["run", "--allow-read", "--allow-write", CHILD, dir, "2026-05-07T20:00:00Z"],
      stdout: "null",
      stderr: "piped",
    }).spawn();
  // How long an uninterrupted pass takes here (start-up included), to spread the kills over it.
  const timed = join(tmp.path, "timed");
  await setUp(timed);
  const t0 = performance.now();
  const whole = await spawn(timed).output();
  assert.equal(whole.code, 0, new TextDecoder().decode(whole.stderr));
  const span = performance.now() - t0;
  const seen = { original: 0, both: 0, gz: 0, temp: 0 };
  for (let round = 0; round < 10; round++) {
    const dir = join(tmp.path, `r${round}`);
    await setUp(dir);
    const child = spawn(dir);
    const delay = rng.next() * span * 1.1;
    await new Promise((r) => setTimeout(r, delay));
    try {
      child.kill("SIGKILL");
    } catch {
      // it finished first
    }
    await child.status;
    await child.stderr.cancel();
    const present = await names(dir);
    if (present.some((n) => n.includes(".tmp-"))) seen.temp++;
    for (const [name, bytes] of contents) {
      const plain = present.includes(name);
      const gz = present.includes(name + ".gz");
      const where = `round ${round} (delay ${delay.toFixed(0)} ms), ${name}: ${present.join(" ")}`;
      assert.ok(plain || gz, `neither form left: ${where}`);
      if (plain) assert.deepEqual(await Deno.readFile(join(dir, name)), bytes, where);
      // The .gz name never holds a half file.
      if (gz) assert.deepEqual(await gunzip(join(dir, name + ".gz")), bytes, where);
      seen[plain && gz ? "both" : plain ? "original" : "gz"]++;
    }
    // The next pass settles whatever the kill left.
    await runLifecycle({ siteDir: dir, timeZone: "UTC", compressAfter: 2, now: NOW });
    assert.deepEqual(
      await names(dir),
      [...contents.keys()].map((n) => n + ".gz").concat(recent.map((k) => `site_${k}.ndjson`))
        .sort(),
    );
    for (const [name, bytes] of contents) {
      assert.deepEqual(await gunzip(join(dir, name + ".gz")), bytes);
    }
  }
  // Where the kills landed (they depend on the machine's speed, so only shown).
  // deno-lint-ignore no-console
  console.log(`kill points: ${JSON.stringify(seen)}`);
});

Deno.test("TelemetryService resumes seq and snapshot when its newest files are compressed", async () => {
  await using tmp = await tempDir();
  const now = { ms: Date.parse("2026-05-01T13:00:00.000Z") };
  let service = await openService(tmp.path, { compressAfter: 0 }, now);
  await service.record([{ type: "weather", data: { n: 1 } }]);
  now.ms += 24 * 3_600_000;
  await service.record([{ type: "weather", data: { n: 2 } }, { type: "status", data: { s: 1 } }]);
  await service.startRun({ runId: "night-1" });
  await service.record([{ type: "dome", data: { open: true } }]);
  await service.stopRun();
  await service.close();
  for (const name of ["site_20260501.ndjson", "site_20260502.ndjson"]) {
    await compressFile(join(tmp.path, name));
  }
  await compressFile(join(tmp.path, "night-1", "telemetry.ndjson"));
  for (const withCheckpoint of [true, false]) {
    if (!withCheckpoint) await Deno.remove(join(tmp.path, ".snapshot.json"));
    service = await openService(tmp.path, { compressAfter: 0 }, now);
    try {
      assert.equal(
        JSON.parse(service.currentLine("weather")!).data.n,
        2,
        `checkpoint ${withCheckpoint}`,
      );
      assert.equal(JSON.parse(service.currentLine("status")!).data.s, 1);
      // A stopped run's events come back from the checkpoint; the rebuild without one reads
      // the newest site file and an active run only (docs/storage.md), compressed or not.
      if (withCheckpoint) assert.equal(JSON.parse(service.currentLine("dome")!).data.open, true);
    } finally {
      await service.close();
    }
  }
  service = await openService(tmp.path, { compressAfter: 0 }, now);
  const [[event]] = [await service.record([{ type: "weather", data: { n: 3 } }])];
  assert.equal(event!.seq, 4);
  // The run's directory used again continues its seq past the compressed file.
  await service.startRun({ runId: "night-1" });
  const [runEvent] = await service.record([{ type: "dome", data: { open: false } }]);
  assert.equal(runEvent!.seq, 2);
  await service.stopRun();
  await service.close();
});

Deno.test("TelemetryService compresses old nights at start-up and after a rotation", async () => {
  await using tmp = await tempDir();
  await nights(tmp.path, ["20260419", "20260420", "20260421"]);
  const now = { ms: Date.parse("2026-04-22T13:00:00.000Z") };
  const info: string[] = [];
  const service = await openService(
    tmp.path,
    { compressAfter: 1, onInfo: (m) => info.push(m) },
    now,
  );
  try {
    await waitFor(() => exists(join(tmp.path, "site_20260419.ndjson.gz")));
    // The newest two nights that hold data are never "passed" (docs/history.md).
    assert.ok(await exists(join(tmp.path, "site_20260420.ndjson")));
    assert.ok(await exists(join(tmp.path, "site_20260421.ndjson")));
    await service.record([{ type: "a", data: {} }]); // night 20260422
    now.ms += 2 * 24 * 3_600_000;
    await service.record([{ type: "a", data: {} }]); // night 20260424: a rotation
    now.ms += 24 * 3_600_000;
    await service.record([{ type: "a", data: {} }]); // night 20260425: a rotation
    await waitFor(() => exists(join(tmp.path, "site_20260422.ndjson.gz")));
    assert.ok(await exists(join(tmp.path, "site_20260421.ndjson.gz")));
    assert.ok(
      info.some((m) =>
        /^Compressed .*site_20260419\.ndjson to .*\.gz \(--compress-after 1\)\.$/.test(m)
      ),
    );
  } finally {
    await service.close();
  }
});

async function waitFor(check: () => Promise<boolean>, timeoutMs = 5000): Promise<void> {
  const deadline = Date.now() + timeoutMs;
  while (!(await check())) {
    if (Date.now() > deadline) throw new Error("timed out waiting for the lifecycle");
    await new Promise((r) => setTimeout(r, 20));
  }
}

Deno.test("writeCursor() and readCursor() round-trip; bad names and shapes are refused", async () => {
  await using tmp = await tempDir();
  assert.equal(await readCursor(tmp.path, "fleet"), undefined);
  const cursor: ForwardCursor = {
    version: 1,
    site: { file: "site_20260510.ndjson", offset: 120, seq: 3 },
    runs: { "night-1": { run_dir: "/x/night-1", file: "telemetry.ndjson", offset: 40, seq: 1 } },
  };
  await writeCursor(tmp.path, "fleet", cursor);
  assert.deepEqual(await readCursor(tmp.path, "fleet"), cursor);
  assert.deepEqual(await names(join(tmp.path, ".forward")), ["fleet.json"]);
  for (const bad of ["../up", ".hidden", "a/b", ""]) {
    assert.throws(() => cursorPath(tmp.path, bad), RangeError);
  }
  for (
    const bad of [
      { version: 1, site: { file: "site_20260510.ndjson.gz", offset: 1, seq: 1 }, runs: {} },
      { version: 1, site: { file: "x", offset: -1, seq: 1 }, runs: {} },
      { version: 1, site: null, runs: { r: { file: "telemetry.ndjson", offset: 1, seq: 1 } } },
    ]
  ) assert.throws(() => parseForwardCursor(bad), SyntaxError, JSON.stringify(bad));
});

Deno.test("compressFile() makes the same .gz content in a worker and on the calling thread", async () => {
  await using tmp = await tempDir();
  const text =
    Array.from({ length: 30_000 }, (_, i) => siteLine(i + 1, "2026-05-01T13:00:00.000Z")).join(
      "\n",
    ) + "\n";
  const a = join(tmp.path, "site_20260501.ndjson");
  const b = join(tmp.path, "site_20260502.ndjson");
  await Deno.writeTextFile(a, text);
  await Deno.writeTextFile(b, text);
  await compressFile(a);
  await compressFile(b, { worker: false });
  assert.deepEqual(await gunzip(a + ".gz"), encoder.encode(text));
  assert.deepEqual(await gunzip(b + ".gz"), encoder.encode(text));
});

Deno.test("TelemetryService.close() stops a compression half-way, keeping the original and no temporary file", async () => {
  await using tmp = await tempDir();
  const path = join(tmp.path, "site_20260401.ndjson");
  const file = await Deno.open(path, { write: true, create: true });
  const block = encoder.encode(
    Array.from(
      { length: 2000 },
      (_, i) => siteLine(i + 1, "2026-04-01T13:00:00.000Z", "w", { r: Math.random() }),
    ).join("\n") + "\n",
  );
  for (let i = 0; i < 150; i++) await file.write(block); // about 30 MB
  file.close();
  const size = (await Deno.stat(path)).size;
  await nights(tmp.path, ["20260419", "20260420", "20260421"]); // recorded since
  const now = { ms: Date.parse("2026-04-22T13:00:00.000Z") };
  const service = await openService(tmp.path, { compressAfter: 2 }, now);
  await waitFor(async () => (await names(tmp.path)).some((n) => n.includes(".tmp-")));
  await service.close();
  const left = await names(tmp.path);
  assert.equal(left.filter((n) => n.includes(".tmp-")).length, 0, left.join(" "));
  if (left.includes("site_20260401.ndjson")) {
    assert.equal((await Deno.stat(path)).size, size);
  } else {
    // It finished just before the close: then the .gz is whole.
    assert.equal((await gunzip(path + ".gz")).length, size);
  }
});

Deno.test("TelemetryService keeps its checkpoint usable when its newest night is compressed under it", async () => {
  await using tmp = await tempDir();
  const now = { ms: Date.parse("2026-04-01T13:00:00.000Z") };
  let service = await openService(tmp.path, { compressAfter: 0 }, now);
  await service.record([{ type: "weather", data: { n: 1 } }, { type: "weather", data: { n: 2 } }]);
  await service.close();
  // Days later, its newest (and only) night compressed under it (retention never compresses the
  // newest night that holds data, docs/history.md; an operator or an older version may).
  now.ms = Date.parse("2026-04-10T13:00:00.000Z");
  const warnings: string[] = [];
  await compressFile(join(tmp.path, "site_20260401.ndjson"));
  service = await openService(
    tmp.path,
    { compressAfter: 2, onWarning: (m) => warnings.push(m) },
    now,
  );
  try {
    assert.deepEqual(warnings, []);
    assert.equal(JSON.parse(service.currentLine("weather")!).data.n, 2);
    const [event] = await service.record([{ type: "weather", data: { n: 3 } }]);
    assert.equal(event!.seq, 3);
  } finally {
    await service.close();
  }
});

Deno.test("runLifecycle() keeps both forms, and says so, when a night was written again after it was compressed", async () => {
  await using tmp = await tempDir();
  const path = join(tmp.path, "site_20260501.ndjson");
  await Deno.writeTextFile(path, siteLine(1, "2026-05-01T13:00:00.000Z") + "\n");
  await compressFile(path);
  // A clock stepped back days: the service wrote that night's file again.
  await Deno.writeTextFile(path, siteLine(9, "2026-05-01T14:00:00.000Z") + "\n");
  await nights(tmp.path, ["20260505", "20260506", "20260507"]); // recorded since
  const warnings: string[] = [];
  await runLifecycle({
    siteDir: tmp.path,
    timeZone: "UTC",
    compressAfter: 2,
    now: NOW,
    warn: (m) => warnings.push(m),
  });
  assert.deepEqual((await names(tmp.path)).filter((n) => n.startsWith("site_20260501")), [
    "site_20260501.ndjson",
    "site_20260501.ndjson.gz",
  ]);
  assert.equal(warnings.length, 1);
  assert.match(warnings[0]!, /hold different lines .* both are kept and read, oldest first/);
});
