/**
 * Tests of TelemetryService without HTTP: seq, snapshot, runs (CONTRACT 2.3, 3, 4.3, 4.5, 4.6).
 * @module
 */

import assert from "node:assert/strict";
import { join } from "node:path";
import {
  type RunStartCommand,
  type ServiceOptions,
  SiteInUseError,
  TelemetryService,
  toProblem,
} from "../server.ts";
import { readLines, readSiteLines, siteFiles, tempDir } from "./_util.ts";

const T0 = Date.parse("2026-05-10T13:00:00.000Z");

/** Opens a service in UTC whose clock stands still at `now.ms` unless the test moves it. */
async function open(
  siteDir: string,
  options: Partial<ServiceOptions> = {},
  now: { ms: number } = { ms: T0 },
): Promise<TelemetryService> {
  return await TelemetryService.open({ siteDir, timeZone: "UTC", clock: () => now.ms, ...options });
}

/**
 * Asserts a promise rejects with a domain error that the HTTP layer answers with the given status
 * and a detail matching `detail`.
 */
async function rejectsWith(promise: Promise<unknown>, status: number, detail: RegExp) {
  const err = await promise.then(() => assert.fail("expected a rejection"), (e: unknown) => e);
  const answer = toProblem(err);
  assert.ok(answer, `expected a domain error, got ${err}`);
  const body = await answer.json();
  assert.equal(answer.status, status, body.detail);
  assert.match(body.detail, detail);
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

async function seqOf(service: TelemetryService, type = "probe"): Promise<number> {
  const [event] = await service.record([{ type, data: {} }]);
  return event!.seq;
}

interface Envelope {
  seq: number;
  ts: string;
  type: string;
  data: unknown;
  meta: Record<string, unknown>;
}

function parse(line: string): Envelope {
  return JSON.parse(line);
}

// --- seq and restarts ---------------------------------------------------------------------------

Deno.test("TelemetryService.open() resumes the site seq after a restart", async () => {
  await using dir = await tempDir();
  {
    await using service = await open(dir.path);
    assert.deepEqual([await seqOf(service), await seqOf(service)], [1, 2]);
  }
  await using service = await open(dir.path);
  assert.equal(await seqOf(service), 3);
});

Deno.test("TelemetryService.open() resumes the site seq after a restart across a day rotation", async () => {
  await using dir = await tempDir();
  const now = { ms: Date.parse("2026-05-10T11:00:00Z") }; // file 20260509
  {
    await using service = await open(dir.path, {}, now);
    assert.equal(await seqOf(service), 1);
    now.ms = Date.parse("2026-05-10T12:00:00Z"); // file 20260510
    assert.equal(await seqOf(service), 2);
  }
  await using service = await open(dir.path, {}, now);
  assert.equal(await seqOf(service), 3);
  now.ms = Date.parse("2026-05-11T12:00:00Z"); // file 20260511
  assert.equal(await seqOf(service), 4);
  assert.deepEqual(await siteFiles(dir.path), [
    "site_20260509.ndjson",
    "site_20260510.ndjson",
    "site_20260511.ndjson",
  ]);
  assert.deepEqual((await readSiteLines(dir.path)).map((l) => parse(l).seq), [1, 2, 3, 4]);
});

Deno.test("TelemetryService.open() continues seq when the newest site file is empty", async () => {
  await using dir = await tempDir();
  await Deno.writeTextFile(
    join(dir.path, "site_20260508.ndjson"),
    '{"seq":7,"ts":"2026-05-08T13:00:00.000Z","type":"probe","data":{},"meta":{}}\n',
  );
  await Deno.writeTextFile(join(dir.path, "site_20260509.ndjson"), "");
  await using service = await open(dir.path);
  assert.equal(await seqOf(service), 8);
});

Deno.test("TelemetryService.open() rebuilds the snapshot from the last lines when the newest site file is empty", async () => {
  await using dir = await tempDir();
  const line = '{"seq":7,"ts":"2026-05-08T13:00:00.000Z","type":"probe","data":{"v":1},"meta":{}}';
  await Deno.writeTextFile(join(dir.path, "site_20260508.ndjson"), line + "\n");
  await Deno.writeTextFile(join(dir.path, "site_20260509.ndjson"), "");
  await using service = await open(dir.path);
  assert.equal(service.currentLine("probe"), line);
});

Deno.test("TelemetryService.open() moves a torn site tail to .torn and resumes from the last whole line", async () => {
  await using dir = await tempDir();
  const path = join(dir.path, "site_20260510.ndjson");
  const whole = [1, 2].map((seq) =>
    `{"seq":${seq},"ts":"2026-05-10T13:00:00.000Z","type":"probe","data":{},"meta":{}}\n`
  ).join("");
  const torn = '{"seq":3,"ts":"2026-05-10T13:00:00.000Z","type":"pro';
  await Deno.writeTextFile(path, whole + torn);
  const warnings: string[] = [];
  await using service = await open(dir.path, { onWarning: (m) => warnings.push(m) });
  assert.equal(await Deno.readTextFile(`${path}.torn`), torn);
  assert.equal(await Deno.readTextFile(path).then((t) => t.slice(0, whole.length)), whole);
  assert.equal(await seqOf(service), 3);
  assert.equal((await readLines(path)).length, 3);
  assert.match(warnings.join("\n"), /torn/);
});

Deno.test("TelemetryService.open() throws SiteInUseError while another service holds the directory", async () => {
  await using dir = await tempDir();
  await using _first = await open(dir.path);
  await assert.rejects(open(dir.path), (err: unknown) => {
    assert.ok(err instanceof SiteInUseError);
    assert.equal(
      err.message,
      `site directory ${dir.path} is in use by another telemetry server`,
    );
    return true;
  });
});

Deno.test("TelemetryService.close() releases the lock so another open succeeds", async () => {
  await using dir = await tempDir();
  const first = await open(dir.path);
  await first.close();
  await using second = await open(dir.path);
  assert.equal(await seqOf(second), 1);
});

Deno.test("TelemetryService.close() writes every event accepted before it", async () => {
  await using dir = await tempDir();
  const service = await open(dir.path);
  const pending = Array.from(
    { length: 50 },
    (_, i) => service.record([{ type: "p", data: { i } }]),
  );
  await service.close();
  const answered = (await Promise.all(pending)).map(([e]) => e!.line);
  assert.deepEqual(await readSiteLines(dir.path), answered);
});

Deno.test("TelemetryService.record() rejects with 503 after close()", async () => {
  await using dir = await tempDir();
  const service = await open(dir.path);
  await service.close();
  await rejectsWith(service.record([{ type: "p", data: {} }]), 503, /shutting down/);
});

// --- snapshot ----------------------------------------------------------------------------------

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

// --- events: validation and envelope -----------------------------------------------------------

Deno.test("TelemetryService.record() writes the envelope with keys in order and ts normalised to UTC", async () => {
  await using dir = await tempDir();
  await using service = await open(dir.path);
  const [event] = await service.record([
    { type: "t", data: { x: 1 }, ts: "2026-05-10T15:00:00.123456+02:00", extra: "ignored" },
  ]);
  assert.equal(
    event!.line,
    '{"seq":1,"ts":"2026-05-10T13:00:00.123Z","type":"t","data":{"x":1},"meta":{}}',
  );
  assert.deepEqual(await readSiteLines(dir.path), [event!.line]);
});

Deno.test("TelemetryService.record() writes a batch all or nothing, naming the bad 0-based index", async () => {
  await using dir = await tempDir();
  await using service = await open(dir.path);
  await rejectsWith(
    service.record([{ type: "a", data: {} }, { type: "b", data: [] }, { type: "c", data: {} }]),
    400,
    /^Item 1: /,
  );
  assert.deepEqual(await readSiteLines(dir.path), []);
  assert.equal(await seqOf(service), 1);
});

Deno.test("TelemetryService.record() with batch true names index 0 of a one-item batch", async () => {
  await using dir = await tempDir();
  await using service = await open(dir.path);
  await rejectsWith(service.record([{ type: "", data: {} }], { batch: true }), 400, /^Item 0: /);
});

Deno.test("TelemetryService.record() rejects a meta.run_id that differs from the active run", async () => {
  await using dir = await tempDir();
  await using service = await open(dir.path);
  await service.startRun({ runId: "r1" });
  await rejectsWith(
    service.record([{ type: "t", data: {}, meta: { run_id: "r2" } }]),
    400,
    /differs from the active run "r1"/,
  );
  const [same] = await service.record([{ type: "t", data: {}, meta: { run_id: "r1" } }]);
  assert.equal(same!.seq, 1);
});

// --- runs (CONTRACT 2.3) ---------------------------------------------------------------------

Deno.test("TelemetryService.startRun() with run_id creates <site>/<run_id> and returns the record", async () => {
  await using dir = await tempDir();
  await using service = await open(dir.path);
  const { run, created } = await service.startRun({ runId: "m31-1", meta: { target: "M31" } });
  assert.equal(created, true);
  assert.deepEqual(run, {
    run_id: "m31-1",
    run_dir: join(dir.path, "m31-1"),
    started_at: "2026-05-10T13:00:00.000Z",
    stopped_at: null,
    events: 0,
    meta: { target: "M31" },
  });
  assert.ok((await Deno.stat(join(dir.path, "m31-1"))).isDirectory);
});

Deno.test("TelemetryService.startRun() rejects run_ids that are not one safe path segment", async () => {
  await using dir = await tempDir();
  await using service = await open(dir.path);
  for (const run_id of ["", "../x", ".hidden", "a/b", "x".repeat(129), 5]) {
    await rejectsWith(service.startRun({ runId: run_id as string }), 400, /run_id/);
  }
  assert.equal(service.run, undefined);
});

Deno.test("TelemetryService.startRun() resolves a relative run_dir under the site dir, run_id its last segment", async () => {
  await using dir = await tempDir();
  await using service = await open(dir.path);
  const { run } = await service.startRun({ runDir: "2026/m31" });
  assert.equal(run.run_dir, join(dir.path, "2026", "m31"));
  assert.equal(run.run_id, "m31");
});

Deno.test("TelemetryService.startRun() accepts a run_dir whose first segment starts with two dots", async () => {
  await using dir = await tempDir();
  await using service = await open(dir.path);
  const { run } = await service.startRun({ runDir: "..2026/m31" });
  assert.equal(run.run_dir, join(dir.path, "..2026", "m31"));
});

Deno.test("TelemetryService.startRun() rejects an absolute run_dir outside the site dir and creates nothing", async () => {
  await using site = await tempDir();
  await using outside = await tempDir();
  await using service = await open(site.path);
  const target = join(outside.path, "run1");
  await rejectsWith(service.startRun({ runDir: target }), 400, /not inside the site directory/);
  assert.equal(await exists(target), false);
  assert.equal(await exists(join(site.path, ".active-run.json")), false);
});

Deno.test("TelemetryService.startRun() rejects a run_dir that climbs out with .. and creates nothing", async () => {
  await using site = await tempDir();
  await using service = await open(join(site.path, "telemetry"));
  await rejectsWith(service.startRun({ runDir: "a/../../escaped" }), 400, /not inside/);
  assert.equal(await exists(join(site.path, "escaped")), false);
});

Deno.test("TelemetryService.startRun() rejects the site directory itself as run_dir", async () => {
  await using dir = await tempDir();
  await using service = await open(dir.path);
  await rejectsWith(service.startRun({ runDir: dir.path, runId: "x" }), 400, /not inside/);
  await rejectsWith(service.startRun({ runDir: "a/..", runId: "x" }), 400, /not inside/);
});

Deno.test("TelemetryService.startRun() rejects a run_dir through a symlink leading outside", async () => {
  await using site = await tempDir();
  await using outside = await tempDir();
  await Deno.symlink(outside.path, join(site.path, "link"));
  await using service = await open(site.path);
  await rejectsWith(service.startRun({ runDir: "link/run1" }), 400, /not inside/);
  assert.equal(await exists(join(outside.path, "run1")), false);
});

Deno.test("TelemetryService.startRun() accepts a run_dir inside an allowed run root", async () => {
  await using site = await tempDir();
  await using root = await tempDir();
  await using service = await open(site.path, { allowRunRoots: [root.path] });
  const { run } = await service.startRun({ runDir: join(root.path, "cam", "night-1") });
  assert.equal(run.run_id, "night-1");
  await service.record([{ type: "t", data: {} }]);
  assert.equal((await readLines(join(root.path, "cam", "night-1", "telemetry.ndjson"))).length, 1);
});

Deno.test("TelemetryService.startRun() without id or dir numbers runs 001, 002", async () => {
  await using dir = await tempDir();
  await using service = await open(dir.path);
  assert.equal((await service.startRun()).run.run_id, "001");
  await service.stopRun();
  assert.equal((await service.startRun({})).run.run_id, "002");
  assert.equal((await service.stopRun()).run_dir, join(dir.path, "002"));
});

Deno.test("TelemetryService.startRun() without id or dir follows the largest numeric directory", async () => {
  await using dir = await tempDir();
  await Deno.mkdir(join(dir.path, "007"));
  await Deno.mkdir(join(dir.path, "3"));
  await Deno.writeTextFile(join(dir.path, "050"), "a file, not a run directory");
  await using service = await open(dir.path);
  assert.equal((await service.startRun()).run.run_id, "008");
});

Deno.test("TelemetryService.startRun() without id or dir goes from 999 to 1000", async () => {
  await using dir = await tempDir();
  await Deno.mkdir(join(dir.path, "999"));
  await using service = await open(dir.path);
  assert.equal(
    (await service.startRun({ runId: null, runDir: null } as unknown as RunStartCommand)).run
      .run_id,
    "1000",
  );
});

Deno.test("TelemetryService.startRun() of the active run again returns the same record, not created", async () => {
  await using dir = await tempDir();
  await using service = await open(dir.path);
  const first = await service.startRun({ runId: "r1", meta: { a: 1 } });
  await service.record([{ type: "t", data: {} }]);
  const again = await service.startRun({ runId: "r1" });
  assert.equal(again.created, false);
  assert.deepEqual(again.run, { ...first.run, events: 1 });
});

Deno.test("TelemetryService.startRun() of a different run while one is active is 409", async () => {
  await using dir = await tempDir();
  await using service = await open(dir.path);
  await service.startRun({ runId: "r1" });
  await rejectsWith(service.startRun({ runId: "r2" }), 409, /"r1" is active/);
  assert.equal(await exists(join(dir.path, "r2")), false);
});

Deno.test("TelemetryService.startRun() without id or dir while a run is active is 409", async () => {
  await using dir = await tempDir();
  await using service = await open(dir.path);
  await service.startRun({ runId: "r1" });
  await rejectsWith(service.startRun(), 409, /POST \/run\/stop/);
});

Deno.test("TelemetryService.stopRun() without an active run is 409", async () => {
  await using dir = await tempDir();
  await using service = await open(dir.path);
  await rejectsWith(service.stopRun(), 409, /No run is active/);
});

Deno.test("TelemetryService.stopRun() returns the record with stopped_at and the events count", async () => {
  await using dir = await tempDir();
  const now = { ms: T0 };
  await using service = await open(dir.path, {}, now);
  await service.startRun({ runId: "r1" });
  await service.record([{ type: "a", data: {} }, { type: "b", data: {} }]);
  await service.record([{ type: "c", data: {}, store_permanently: false }]);
  assert.equal(service.run?.events, 2);
  now.ms = T0 + 60_000;
  const stopped = await service.stopRun();
  assert.equal(stopped.stopped_at, "2026-05-10T13:01:00.000Z");
  assert.equal(stopped.events, 2);
  assert.equal(service.run, undefined);
  assert.equal(await exists(join(dir.path, ".active-run.json")), false);
});

Deno.test("TelemetryService.startRun() on an existing run directory continues its seq", async () => {
  await using dir = await tempDir();
  await using service = await open(dir.path);
  await service.startRun({ runId: "r1" });
  await service.record([{ type: "a", data: {} }, { type: "a", data: {} }]);
  await service.stopRun();
  await service.startRun({ runId: "r1" });
  assert.equal(await seqOf(service), 3);
  assert.equal(service.run?.events, 1);
  const lines = await readLines(join(dir.path, "r1", "telemetry.ndjson"));
  assert.deepEqual(lines.map((l) => parse(l).seq), [1, 2, 3]);
});

Deno.test("TelemetryService.startRun() moves a torn tail of the run file to .torn and continues its seq", async () => {
  await using dir = await tempDir();
  const file = join(dir.path, "r1", "telemetry.ndjson");
  await Deno.mkdir(join(dir.path, "r1"));
  const whole = '{"seq":4,"ts":"2026-05-10T13:00:00.000Z","type":"a","data":{},"meta":{}}\n';
  await Deno.writeTextFile(file, whole + '{"seq":5,"ts":"20');
  await using service = await open(dir.path);
  await service.startRun({ runId: "r1" });
  assert.equal(await Deno.readTextFile(`${file}.torn`), '{"seq":5,"ts":"20');
  assert.equal(await seqOf(service), 5);
  assert.deepEqual((await readLines(file)).map((l) => parse(l).seq), [4, 5]);
});

Deno.test("TelemetryService.startRun() with the active run_id but another run_dir is 409", async () => {
  await using dir = await tempDir();
  await using service = await open(dir.path);
  await service.startRun({ runId: "r1" });
  await rejectsWith(service.startRun({ runId: "r1", runDir: "elsewhere/r1" }), 409, /active/);
});

Deno.test("TelemetryService.open() sets an unreadable active-run file aside and starts without a run", async () => {
  await using dir = await tempDir();
  await Deno.writeTextFile(join(dir.path, ".active-run.json"), "{not json");
  const warnings: string[] = [];
  await using service = await open(dir.path, { onWarning: (m) => warnings.push(m) });
  assert.equal(service.run, undefined);
  assert.match(warnings.join("\n"), /moved to .*\.active-run\.json\.corrupt-/);
  const names = (await Array.fromAsync(Deno.readDir(dir.path))).map((e) => e.name);
  assert.ok(names.some((n) => n.startsWith(".active-run.json.corrupt-")));
  assert.ok(!names.includes(".active-run.json"));
});

Deno.test("TelemetryService.open() resumes an active run with its seq and events count", async () => {
  await using dir = await tempDir();
  let started;
  {
    await using service = await open(dir.path);
    await service.startRun({ runId: "r1" });
    await service.record([{ type: "a", data: {} }]);
    await service.stopRun();
    started = (await service.startRun({ runId: "r1", meta: { m: 1 } })).run;
    await service.record([{ type: "a", data: {} }, { type: "b", data: {} }]);
  }
  await using service = await open(dir.path);
  assert.deepEqual(service.run, { ...started, events: 2 });
  assert.equal(await seqOf(service), 4);
  assert.equal(service.run?.events, 3);
});

Deno.test("TelemetryService.record() stamps run_id into meta and writes to the run file during a run", async () => {
  await using dir = await tempDir();
  await using service = await open(dir.path);
  await service.startRun({ runId: "r1" });
  const [event] = await service.record([{ type: "cam", data: {}, meta: { who: "x" } }]);
  assert.equal(event!.stream, "run");
  assert.deepEqual(parse(event!.line).meta, { who: "x", run_id: "r1" });
  assert.deepEqual(await readLines(join(dir.path, "r1", "telemetry.ndjson")), [event!.line]);
  assert.deepEqual(await readSiteLines(dir.path), []);
});

Deno.test("TelemetryService.record() writes a site type during a run to both streams with own seqs", async () => {
  await using dir = await tempDir();
  await using service = await open(dir.path);
  await seqOf(service, "before"); // site seq 1
  await service.startRun({ runId: "r1" });
  await seqOf(service, "cam"); // run seq 1
  const [weather] = await service.record([{ type: "weather", data: { wind: 3 }, meta: { s: 1 } }]);
  const runLine = (await readLines(join(dir.path, "r1", "telemetry.ndjson"))).at(-1)!;
  const siteLine = (await readSiteLines(dir.path)).at(-1)!;
  assert.equal(weather!.line, runLine);
  assert.equal(service.currentLine("weather"), runLine);
  const run = parse(runLine), site = parse(siteLine);
  assert.equal(run.seq, 2);
  assert.equal(site.seq, 2);
  assert.deepEqual({ ...run, seq: 0 }, { ...site, seq: 0 });
  assert.deepEqual(run.meta, { s: 1, run_id: "r1" });
});

Deno.test("TelemetryService.subscribe() delivers telemetry and run messages in order", async () => {
  await using dir = await tempDir();
  await using service = await open(dir.path);
  const kinds: string[] = [];
  const stop = service.subscribe((m) => kinds.push(m.kind === "run" ? `run:${m.active}` : m.kind));
  await service.startRun({ runId: "r1" });
  await service.record([{ type: "a", data: {} }]);
  await service.stopRun();
  stop();
  await service.record([{ type: "a", data: {} }]);
  assert.deepEqual(kinds, ["run:true", "telemetry", "run:false"]);
});

// --- seqs that never reach a file ---------------------------------------------------------------

Deno.test("TelemetryService.open() never hands out an ephemeral event's seq again after a restart", async () => {
  await using tmp = await tempDir();
  const first = await open(tmp.path);
  await seqOf(first);
  const [ephemeral] = await first.record([{ type: "status", data: {}, store_permanently: false }]);
  await first.close();
  await using second = await open(tmp.path);
  assert.equal(await seqOf(second), ephemeral!.seq + 1);
});

Deno.test("TelemetryService.record() reserves an ephemeral seq on disk before acknowledging it", async () => {
  await using tmp = await tempDir();
  await using service = await open(tmp.path);
  const [ephemeral] = await service.record([{
    type: "status",
    data: {},
    store_permanently: false,
  }]);
  // What a crash right now would leave: the reservation must already cover the seq.
  const mark = JSON.parse(await Deno.readTextFile(join(tmp.path, ".seq-mark.json")));
  assert.ok(mark.seq >= ephemeral!.seq, `mark ${mark.seq} < seq ${ephemeral!.seq}`);
});

Deno.test("TelemetryService.startRun() continues a run directory's seq past its ephemeral events", async () => {
  await using tmp = await tempDir();
  await using service = await open(tmp.path);
  await service.startRun({ runId: "night-1" });
  await seqOf(service);
  const [ephemeral] = await service.record([{
    type: "status",
    data: {},
    store_permanently: false,
  }]);
  await service.stopRun();
  await service.startRun({ runId: "night-1" });
  assert.equal(await seqOf(service), ephemeral!.seq + 1);
});

Deno.test("TelemetryService.open() resumes the site seq after the clock was stepped back across noon", async () => {
  await using tmp = await tempDir();
  const now = { ms: Date.parse("2026-04-05T13:00:00Z") };
  const first = await open(tmp.path, {}, now);
  await seqOf(first); // site_20260405, seq 1
  now.ms = Date.parse("2026-04-05T11:00:00Z"); // an NTP step back: site_20260404
  await seqOf(first); // seq 2, in the older-named file
  await first.close();
  await using second = await open(tmp.path, {}, now);
  assert.equal(await seqOf(second), 3);
});

/** Runs one service session in a child process; returns the snapshot it saw on opening. */
async function session(dir: string, mode: "close" | "crash", ops: unknown[] = []) {
  const out = await new Deno.Command(Deno.execPath(), {
    args: [
      "run",
      "-A",
      new URL("./_session_child.ts", import.meta.url).pathname,
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

Deno.test("TelemetryService.open() restores a reused run id's new directory after a crash", async () => {
  await using dir = await tempDir();
  await session(dir.path, "close", [
    { start: { run_id: "night", run_dir: "a/night" } },
    { type: "T", data: { v: 1 } },
    { type: "T", data: { v: 2 } },
  ]);
  await session(dir.path, "crash", [
    { stop: true },
    { start: { run_id: "night", run_dir: "b/night" } },
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

Deno.test("TelemetryService.startRun() warns when it moves a torn last line of the run file", async () => {
  await using dir = await tempDir();
  await Deno.mkdir(join(dir.path, "r1"));
  await Deno.writeTextFile(
    join(dir.path, "r1", "telemetry.ndjson"),
    '{"seq":1,"ts":"2026-05-10T13:00:00.000Z","type":"a","data":{},"meta":{}}\n{"seq":2,"ts',
  );
  const warnings: string[] = [];
  await using service = await open(dir.path, { onWarning: (m) => warnings.push(m) });
  await service.startRun({ runId: "r1" });
  assert.equal(warnings.length, 1);
  assert.match(warnings[0]!, /Moved a torn last line \(12 bytes\) of .*r1\/telemetry\.ndjson/);
});
