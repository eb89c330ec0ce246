/**
 * Tests of runs through TelemetryService (`core/runs.ts`): starting with derived or given ids,
 * confined run directories, stopping, conflicts, and resuming after a restart (docs/http-api.md, docs/storage.md).
 * @module
 */

import assert from "node:assert/strict";
import { join } from "node:path";
import type { RunStartCommand } from "../../server.ts";
import {
  openService as open,
  parseEnvelope as parse,
  readLines,
  rejectsWith,
  seqOf,
  T0,
  tempDir,
} from "../_shared/util.ts";

async function exists(path: string): Promise<boolean> {
  try {
    await Deno.lstat(path);
    return true;
  } catch (err) {
    if (err instanceof Deno.errors.NotFound) return false;
    throw err;
  }
}

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
  await rejectsWith(
    service.startRun({ runDir: dir.path, runId: "x" }),
    400,
    /site directory itself/,
  );
  await rejectsWith(service.startRun({ runDir: "a/..", runId: "x" }), 400, /site directory itself/);
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

// --- the run log: runs.ndjson and run.json (docs/cli.md) ------------------------------------------

async function logLines(siteDir: string): Promise<Record<string, unknown>[]> {
  return (await readLines(join(siteDir, "runs.ndjson"))).map((l) => JSON.parse(l));
}

async function runJson(runDir: string): Promise<unknown> {
  return JSON.parse(await Deno.readTextFile(join(runDir, "run.json")));
}

Deno.test("TelemetryService.startRun() and stopRun() append the run record to runs.ndjson and write run.json before answering", async () => {
  await using dir = await tempDir();
  const now = { ms: T0 };
  await using service = await open(dir.path, {}, now);
  const { run } = await service.startRun({ runId: "m31-1", meta: { target: "M31" } });
  assert.deepEqual(await logLines(dir.path), [run]);
  assert.deepEqual(await runJson(run.run_dir), run);
  await service.record([{ type: "a", data: {} }, { type: "b", data: {} }]);
  now.ms += 60_000;
  const stopped = await service.stopRun();
  assert.equal(stopped.stopped_at, "2026-05-10T13:01:00.000Z");
  assert.equal(stopped.events, 2);
  assert.deepEqual(await logLines(dir.path), [run, stopped]);
  assert.deepEqual(await runJson(run.run_dir), stopped);
  const { readRunLog } = await import("../../store/run_log.ts");
  assert.deepEqual((await readRunLog(dir.path)).runs, [stopped]);
});

Deno.test("TelemetryService logs a run placed under an allowed run root in the site's runs.ndjson", async () => {
  await using dir = await tempDir();
  await using root = await tempDir();
  await using service = await open(dir.path, { allowRunRoots: [root.path] });
  const runDir = join(await Deno.realPath(root.path), "night-7");
  const { run } = await service.startRun({ runDir });
  assert.equal(run.run_dir, runDir);
  await service.stopRun();
  const lines = await logLines(dir.path);
  assert.deepEqual(lines.map((l) => [l.run_id, l.run_dir]), [["night-7", runDir], [
    "night-7",
    runDir,
  ]]);
  assert.equal(((await runJson(runDir)) as { stopped_at: unknown }).stopped_at !== null, true);
});

Deno.test("The run log reader skips a torn last line and the next start moves it to runs.ndjson.torn", async () => {
  await using dir = await tempDir();
  const { readRunLog } = await import("../../store/run_log.ts");
  {
    await using service = await open(dir.path);
    await service.startRun({ runId: "r1" });
    await service.stopRun();
  }
  const torn = '{"run_id":"r2","run_dir":"/x","started_at":"2026-05-1';
  await Deno.writeTextFile(join(dir.path, "runs.ndjson"), torn, { append: true });
  const before = await readRunLog(dir.path);
  assert.equal(before.torn, true);
  assert.deepEqual(before.runs.map((r) => r.run_id), ["r1"]);
  const warnings: string[] = [];
  await using service = await open(dir.path, { onWarning: (m) => warnings.push(m) });
  await service.startRun({ runId: "r3" });
  assert.equal(await Deno.readTextFile(join(dir.path, "runs.ndjson.torn")), torn);
  assert.match(warnings.join("\n"), /torn last line .*runs\.ndjson/);
  const after = await readRunLog(dir.path);
  assert.equal(after.torn, false);
  assert.deepEqual(after.runs.map((r) => [r.run_id, r.stopped_at]), [["r3", null], [
    "r1",
    after.runs[1]!.stopped_at,
  ]]);
  assert.notEqual(after.runs[1]!.stopped_at, null);
});

Deno.test("The run log reader keeps the latest line of a run_id and skips lines that are not records", async () => {
  const { parseRunLog } = await import("../../store/run_log.ts");
  const rec = (run_id: string, started_at: string, stopped_at: string | null, events = 0) =>
    JSON.stringify({ run_id, run_dir: `/t/${run_id}`, started_at, stopped_at, events, meta: {} });
  const text = [
    rec("a", "2026-05-10T13:00:00.000Z", null),
    "garbage",
    '{"run_id":5}',
    rec("b", "2026-05-11T13:00:00.000Z", null),
    rec("a", "2026-05-10T13:00:00.000Z", "2026-05-10T14:00:00.000Z", 9),
    "",
  ].join("\n");
  const log = parseRunLog(text);
  assert.equal(log.skipped, 2);
  assert.equal(log.torn, false);
  assert.deepEqual(log.runs.map((r) => [r.run_id, r.stopped_at, r.events]), [
    ["b", null, 0],
    ["a", "2026-05-10T14:00:00.000Z", 9],
  ]);
});

Deno.test("TelemetryService.open() logs a resumed run whose start crashed before its log line", async () => {
  await using dir = await tempDir();
  // What a kill -9 after the active-run record and before the run log leaves behind.
  await Deno.mkdir(join(dir.path, "r1"));
  const record = {
    run_id: "r1",
    run_dir: join(await Deno.realPath(dir.path), "r1"),
    started_at: "2026-05-10T12:00:00.000Z",
    stopped_at: null,
    events: 0,
    meta: { target: "M31" },
    seq_at_start: 0,
  };
  await Deno.writeTextFile(join(dir.path, ".active-run.json"), JSON.stringify(record));
  await using service = await open(dir.path);
  const { seq_at_start: _, ...run } = record;
  assert.deepEqual(service.run, run);
  assert.deepEqual(await logLines(dir.path), [run]);
  assert.deepEqual(await runJson(run.run_dir), run);
});

Deno.test("TelemetryService.open() logs a run active again when its stop crashed before the active-run record went", async () => {
  await using dir = await tempDir();
  {
    await using service = await open(dir.path);
    await service.startRun({ runId: "r1" });
    await service.record([{ type: "a", data: {} }]);
  }
  const active = await Deno.readTextFile(join(dir.path, ".active-run.json"));
  {
    await using service = await open(dir.path);
    await service.stopRun();
  }
  // The stop's log line is out, but the crash came before .active-run.json was removed.
  await Deno.writeTextFile(join(dir.path, ".active-run.json"), active);
  await using service = await open(dir.path);
  assert.equal(service.run?.run_id, "r1");
  const lines = await logLines(dir.path);
  assert.deepEqual(lines.map((l) => l.stopped_at === null), [true, false, true]);
  assert.equal(lines.at(-1)!.events, 1);
  const { readRunLog } = await import("../../store/run_log.ts");
  assert.equal((await readRunLog(dir.path)).runs[0]!.stopped_at, null);
  // A clean restart with the log in step adds nothing.
  await service.close();
  await using again = await open(dir.path);
  assert.equal(again.run?.run_id, "r1");
  assert.equal((await logLines(dir.path)).length, 3);
});

Deno.test("TelemetryService.startRun() refuses to log through a symlink at runs.ndjson and starts nothing", async () => {
  await using dir = await tempDir();
  await using outside = await tempDir();
  await using service = await open(dir.path);
  const target = join(outside.path, "victim");
  await Deno.writeTextFile(target, "keep\n");
  await Deno.symlink(target, join(dir.path, "runs.ndjson"));
  await rejectsWith(service.startRun({ runId: "r1" }), 500, /runs\.ndjson/);
  assert.equal(service.run, undefined);
  assert.equal(await exists(join(dir.path, ".active-run.json")), false);
  assert.equal(await Deno.readTextFile(target), "keep\n");
  // After the operator removes the link, the same start works.
  await Deno.remove(join(dir.path, "runs.ndjson"));
  const { run } = await service.startRun({ runId: "r1" });
  assert.deepEqual(await logLines(dir.path), [run]);
});

Deno.test("TelemetryService replaces a symlink planted at run.json instead of writing through it", async () => {
  await using dir = await tempDir();
  await using outside = await tempDir();
  const victim = join(outside.path, "victim");
  await Deno.writeTextFile(victim, "keep\n");
  await Deno.mkdir(join(dir.path, "r1"));
  await Deno.symlink(victim, join(dir.path, "r1", "run.json"));
  await using service = await open(dir.path);
  const { run } = await service.startRun({ runId: "r1" });
  assert.equal(await Deno.readTextFile(victim), "keep\n");
  assert.ok((await Deno.lstat(join(run.run_dir, "run.json"))).isFile);
  assert.deepEqual(await runJson(run.run_dir), run);
  const names = [...Deno.readDirSync(run.run_dir)].map((e) => e.name).sort();
  assert.deepEqual(names, ["run.json", "telemetry.ndjson"], "no temporary file is left behind");
});
