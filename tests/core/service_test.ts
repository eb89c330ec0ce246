/**
 * Tests of TelemetryService without HTTP: seq, restarts, closing, the envelope and validation,
 * events during a run, pub/sub (docs/storage.md). Runs are in runs_test.ts, the snapshot in
 * snapshot_test.ts.
 * @module
 */

import assert from "node:assert/strict";
import { join } from "node:path";
import { SiteInUseError } from "../../server.ts";
import {
  openService as open,
  parseEnvelope as parse,
  readLines,
  readSiteLines,
  rejectsWith,
  seqOf,
  siteFiles,
  tempDir,
} from "../_shared/util.ts";

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

// --- events: validation and envelope -----------------------------------------------------------

Deno.test("TelemetryService.record() writes the envelope with keys in order and ts normalised to UTC", async () => {
  await using dir = await tempDir();
  await using service = await open(dir.path);
  const [event] = await service.record([
    { type: "t", data: { x: 1 }, ts: "2026-05-10T15:00:00.123456+02:00" },
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
    /^Item 1 \(0-based\): /,
  );
  assert.deepEqual(await readSiteLines(dir.path), []);
  assert.equal(await seqOf(service), 1);
});

Deno.test("TelemetryService.record() with batch true names index 0 of a one-item batch", async () => {
  await using dir = await tempDir();
  await using service = await open(dir.path);
  await rejectsWith(
    service.record([{ type: "", data: {} }], { batch: true }),
    400,
    /^Item 0 \(0-based\): /,
  );
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

// --- events during a run -----------------------------------------------------------------------

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
