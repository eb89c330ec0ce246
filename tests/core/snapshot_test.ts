/**
 * Tests of the snapshot through TelemetryService (`core/snapshot.ts`): the latest event per type, its
 * cap, and how it is saved and restored across clean and crashed restarts (docs/storage.md).
 * @module
 */

import assert from "node:assert/strict";
import { join } from "node:path";
import { InvalidRequestError, SnapshotLimitError, TypeLimitError } from "../../core/errors.ts";
import { Snapshot, utf8Length } from "../../core/snapshot.ts";
import { Rng, seedFromEnv } from "../_shared/fault_util.ts";
import {
  type Envelope,
  openService as open,
  parseEnvelope as parse,
  readSiteLines,
  rejectsWith,
  seqOf,
  siteFiles,
  tempDir,
} from "../_shared/util.ts";

Deno.test("TelemetryService.open() rebuilds the snapshot from the last lines when the newest site file is empty", async () => {
  await using dir = await tempDir();
  const line = '{"seq":7,"ts":"2026-05-08T13:00:00.000Z","type":"probe","data":{"v":1},"meta":{}}';
  await Deno.writeTextFile(join(dir.path, "site_20260508.ndjson"), line + "\n");
  await Deno.writeTextFile(join(dir.path, "site_20260509.ndjson"), "");
  await using service = await open(dir.path);
  assert.equal(service.currentLine("probe"), line);
});

Deno.test("TelemetryService.open() rebuilds the snapshot from the newest site file and the run file", async () => {
  await using dir = await tempDir();
  const now = { ms: Date.parse("2026-05-10T11:00:00Z") };
  let expected: Record<string, unknown>;
  {
    await using service = await open(dir.path, {}, now);
    await service.record([{ type: "old", data: { n: 1 } }]); // file 20260509: not the newest
    now.ms = Date.parse("2026-05-10T13:00:00Z");
    await service.record([{ type: "dome", data: { n: 2 } }, { type: "dome", data: { n: 3 } }]);
    await service.startRun({ runId: "night" });
    await service.record([{ type: "camera", data: { n: 4 } }, { type: "weather", data: {} }]);
    expected = JSON.parse(service.currentJson());
    delete expected.old;
  }
  await Deno.remove(join(dir.path, ".snapshot.json")); // as after a crash: no saved snapshot
  await using service = await open(dir.path, {}, now);
  assert.deepEqual(JSON.parse(service.currentJson()), expected);
});

Deno.test("TelemetryService.open() keeps every type of the snapshot across a clean restart", async () => {
  await using dir = await tempDir();
  const now = { ms: Date.parse("2026-05-10T11:00:00Z") };
  let expected: string;
  {
    await using service = await open(dir.path, {}, now);
    await service.record([{ type: "old", data: { n: 1 } }]); // yesterday's site file
    now.ms = Date.parse("2026-05-10T13:00:00Z");
    await service.record([{ type: "dome", data: { n: 2 } }]);
    await service.record([{ type: "status", data: { n: 3 }, store_permanently: false }]);
    expected = service.currentJson();
  }
  await using service = await open(dir.path, {}, now);
  assert.equal(service.currentJson(), expected);
});

Deno.test("TelemetryService.open() keeps a make_current false event out of the snapshot after a restart", async () => {
  await using dir = await tempDir();
  {
    await using service = await open(dir.path);
    await service.record([{ type: "weather", data: { wind: 1 } }]);
    await service.record([{ type: "weather", data: { wind: 99 }, make_current: false }]);
  }
  await using service = await open(dir.path);
  assert.deepEqual(JSON.parse(service.currentLine("weather")!).data, { wind: 1 });
});

Deno.test("TelemetryService.open() lets a line written after the saved snapshot replace its entry", async () => {
  await using dir = await tempDir();
  {
    await using service = await open(dir.path);
    await service.record([{ type: "weather", data: { wind: 1 } }]);
  }
  // A later session wrote seq 2 and then crashed before it could save a new snapshot.
  const [file] = await siteFiles(dir.path);
  await Deno.writeTextFile(
    join(dir.path, file!),
    '{"seq":2,"ts":"2026-05-10T13:05:00.000Z","type":"weather","data":{"wind":7},"meta":{}}\n',
    { append: true },
  );
  await using service = await open(dir.path);
  assert.deepEqual(JSON.parse(service.currentLine("weather")!).data, { wind: 7 });
});

Deno.test("TelemetryService.record() keeps the snapshot across run start and stop", async () => {
  await using dir = await tempDir();
  await using service = await open(dir.path);
  await service.record([{ type: "dome", data: { open: true } }]);
  const before = service.currentJson();
  await service.startRun({ runId: "r1" });
  assert.equal(service.currentJson(), before);
  await service.stopRun();
  assert.equal(service.currentJson(), before);
});

Deno.test("TelemetryService.record() with store_permanently false updates the snapshot, writes nothing, consumes a seq", async () => {
  await using dir = await tempDir();
  await using service = await open(dir.path);
  assert.equal(await seqOf(service), 1);
  const [ephemeral] = await service.record([
    { type: "probe", data: { e: 1 }, store_permanently: false },
  ]);
  assert.equal(ephemeral!.seq, 2);
  assert.equal(service.currentLine("probe"), ephemeral!.line);
  assert.equal(await seqOf(service, "other"), 3);
  assert.deepEqual((await readSiteLines(dir.path)).map((l) => parse(l).seq), [1, 3]);
});

Deno.test("TelemetryService.record() with make_current false writes the event and leaves the snapshot", async () => {
  await using dir = await tempDir();
  await using service = await open(dir.path);
  await service.record([{ type: "probe", data: { v: 1 } }]);
  const before = service.currentJson();
  const [quiet] = await service.record([{ type: "probe", data: { v: 2 }, make_current: false }]);
  assert.equal(service.currentJson(), before);
  assert.equal((await readSiteLines(dir.path)).at(-1), quiet!.line);
});

Deno.test("TelemetryService.record() refuses a new type beyond maxTypes with 400", async () => {
  await using dir = await tempDir();
  await using service = await open(dir.path, { maxTypes: 2 });
  await service.record([{ type: "a", data: {} }, { type: "b", data: {} }]);
  await rejectsWith(service.record([{ type: "c", data: {} }]), 400, /2 event types, the limit/);
  await service.record([{ type: "a", data: {} }]); // an existing type is still fine
  assert.equal(service.snapshotSize, 2);
  assert.equal((await readSiteLines(dir.path)).length, 3);
});

/** The outcome of each of several record() calls made in one turn, so one group commits them. */
async function recordTogether(
  service: Awaited<ReturnType<typeof open>>,
  requests: unknown[][],
): Promise<(Error | "ok")[]> {
  const settled = await Promise.allSettled(requests.map((items) => service.record(items)));
  return settled.map((s) => s.status === "fulfilled" ? "ok" : s.reason as Error);
}

Deno.test("TelemetryService.record() counts the new types of requests committed together against maxTypes", async () => {
  await using dir = await tempDir();
  await using service = await open(dir.path, { maxTypes: 2 });
  const outcomes = await recordTogether(service, [
    [{ type: "a", data: {} }],
    [{ type: "b", data: {} }],
    [{ type: "c", data: {} }],
  ]);
  assert.deepEqual(outcomes.slice(0, 2), ["ok", "ok"]);
  assert.ok(outcomes[2] instanceof TypeLimitError, String(outcomes[2]));
  assert.deepEqual(Object.keys(JSON.parse(service.currentJson())).sort(), ["a", "b"]);
});

Deno.test("TelemetryService.record() gives back the new types of a refused request to the requests committed with it", async () => {
  await using dir = await tempDir();
  await using service = await open(dir.path, { maxTypes: 2 });
  const outcomes = await recordTogether(service, [
    // "x" counts until the second item is refused: no run is active.
    [{ type: "x", data: {} }, { type: "y", data: {}, meta: { run_id: "none" } }],
    [{ type: "z", data: {} }],
    [{ type: "w", data: {} }],
  ]);
  assert.ok(outcomes[0] instanceof InvalidRequestError, String(outcomes[0]));
  assert.deepEqual(outcomes.slice(1), ["ok", "ok"]);
  assert.deepEqual(Object.keys(JSON.parse(service.currentJson())).sort(), ["w", "z"]);
});

Deno.test("TelemetryService.record() counts requests committed together against maxSnapshotBytes, a type once", async () => {
  await using dir = await tempDir();
  // Each event is about 1.1 kB at most in the snapshot: one type fits, two do not.
  await using service = await open(dir.path, { maxSnapshotBytes: 2_000 });
  const big = (type: string) => [{ type, data: { text: "x".repeat(800) } }];
  assert.deepEqual(await recordTogether(service, [big("img"), big("img")]), ["ok", "ok"]);
  const outcomes = await recordTogether(service, [big("img"), big("other")]);
  assert.equal(outcomes[0], "ok");
  assert.ok(outcomes[1] instanceof SnapshotLimitError, String(outcomes[1]));
  assert.deepEqual(Object.keys(JSON.parse(service.currentJson())), ["img"]);
});

Deno.test("TelemetryService.record() refuses growth past maxSnapshotBytes while the snapshot's entries are not measured yet", async () => {
  await using dir = await tempDir();
  await using service = await open(dir.path, { maxSnapshotBytes: 10_000 });
  // Set, never measured: nothing has asked for the snapshot's size since.
  await service.record([{ type: "a", data: { text: "x".repeat(9_000) } }]);
  await assert.rejects(
    service.record([{ type: "b", data: { text: "x".repeat(1_000) } }]),
    SnapshotLimitError,
  );
  assert.deepEqual(Object.keys(JSON.parse(service.currentJson())), ["a"]);
});

Deno.test("TelemetryService.record() counts characters outside ASCII at their UTF-8 size against maxSnapshotBytes", async () => {
  await using dir = await tempDir();
  // 1,000 euro signs are 1,000 UTF-16 units but 3,000 bytes: two such entries do not fit 5,000.
  await using service = await open(dir.path, { maxSnapshotBytes: 5_000 });
  await service.record([{ type: "a", data: { text: "\u20ac".repeat(1_000) } }]);
  await assert.rejects(
    service.record([{ type: "b", data: { text: "\u20ac".repeat(700) } }]),
    SnapshotLimitError,
  );
  // Replacing the entry with one of the same size grows nothing: accepted, though a bound of
  // 3 bytes per unit over both would not fit.
  await service.record([{ type: "a", data: { text: "\u20ac".repeat(1_000) } }]);
  assert.deepEqual(Object.keys(JSON.parse(service.currentJson())), ["a"]);
});

Deno.test("TelemetryService.record() accepts a single request that fits maxSnapshotBytes only by its exact UTF-8 size", async () => {
  await using dir = await tempDir();
  await using service = await open(dir.path, { maxSnapshotBytes: 2_000 });
  // 1,500 ASCII bytes: fits, though 3 bytes per character would not.
  await service.record([{ type: "big", data: { text: "x".repeat(1_500) } }]);
  assert.deepEqual(Object.keys(JSON.parse(service.currentJson())), ["big"]);
});

/** Runs one service session in a child process; returns the snapshot it saw on opening. */
async function session(dir: string, mode: "close" | "crash", ops: unknown[] = []) {
  const out = await new Deno.Command(Deno.execPath(), {
    args: [
      "run",
      "-A",
      new URL("../_shared/session_child.ts", import.meta.url).pathname,
      dir,
      mode,
      JSON.stringify(ops),
    ],
    stdout: "piped",
    stderr: "piped",
  }).output();
  assert.equal(out.code, 0, new TextDecoder().decode(out.stderr));
  const first = new TextDecoder().decode(out.stdout).split("\n")[0]!;
  return JSON.parse(first) as Record<string, Envelope>;
}

Deno.test("TelemetryService.open() restores a new run's directory after a crash, though the checkpoint named another", async () => {
  await using dir = await tempDir();
  await session(dir.path, "close", [
    { start: { run_id: "night", run_dir: "a/night" } },
    { type: "T", data: { v: 1 } },
    { type: "T", data: { v: 2 } },
  ]);
  // A run id names one directory (docs/http-api.md): the next night is another run.
  await session(dir.path, "crash", [
    { stop: true },
    { start: { run_id: "night-2", run_dir: "b/night" } },
    { type: "T", data: { v: "new" } },
    { type: "U", data: {} },
  ]);
  const current = await session(dir.path, "close");
  assert.deepEqual(current.T?.data, { v: "new" });
  assert.ok(current.U);
});

Deno.test("TelemetryService.open() keeps a saved entry newer than an uncovered run file's line", async () => {
  await using dir = await tempDir();
  await session(dir.path, "close", [
    { start: { run_id: "R" } },
    { type: "T", data: { v: "old-run" } },
    { stop: true },
    { type: "T", data: { v: "newer-site" }, ts: "2099-01-01T00:00:00Z" },
  ]);
  await session(dir.path, "crash", [{ start: { run_id: "R" } }, { type: "other", data: {} }]);
  const current = await session(dir.path, "close");
  assert.deepEqual(current.T?.data, { v: "newer-site" });
});

Deno.test("utf8Length() counts the bytes TextEncoder writes, for ASCII, accents, emoji and lone surrogates", () => {
  const encoder = new TextEncoder();
  for (const text of ["", "weather", "12 °C", "🔭 M31", "a\ud800b", "\udc00", "ß".repeat(1000)]) {
    assert.equal(utf8Length(text), encoder.encode(text).length, JSON.stringify(text));
  }
});

Deno.test("Snapshot.bytes and bytesOf() follow the body's UTF-8 size through any order of sets, reads and forgets", async () => {
  const seed = seedFromEnv(1125);
  const rng = new Rng(seed);
  const snapshot = new Snapshot();
  const types = ["a", "wind", "dôme", "🔭 scope", 'q"uote', "t\\back"];
  const undo: (() => void)[] = [];
  const size = (text: string) => new TextEncoder().encode(text).byteLength;
  for (let step = 0; step < 3000; step++) {
    const type = rng.pick(types);
    const op = rng.int(0, 9);
    if (op <= 5) {
      const text = rng.pick(["x", "é", "🌙", "\u2028", "plain ascii"]).repeat(rng.int(0, 40));
      const line = JSON.stringify({
        seq: step,
        ts: "2026-11-25T20:00:00.000Z",
        type,
        data: { text },
      });
      snapshot.set(type, line, "2026-11-25T20:00:00.000Z", { text });
    } else if (op === 6) {
      const back = snapshot.forget(type);
      if (back) undo.push(back);
    } else if (op === 7 && undo.length > 0) {
      undo.splice(rng.int(0, undo.length - 1), 1)[0]!();
    } else if (op === 8) {
      const line = snapshot.line(type);
      const expected = line === undefined ? 0 : size(JSON.stringify(type) + ":" + line) + 1;
      assert.equal(snapshot.bytesOf(type), expected, `seed ${seed}, step ${step}, bytesOf`);
    } else {
      // Each member counts its comma, the first one too: one byte over a non-empty body.
      const over = snapshot.size > 0 ? 1 : 0;
      assert.equal(snapshot.bytes, size(snapshot.json()) + over, `seed ${seed}, step ${step}`);
    }
  }
  const body = await new Response(snapshot.body()).bytes();
  assert.equal(new TextDecoder().decode(body), snapshot.json());
});
