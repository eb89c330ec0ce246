/**
 * `readRunLog()` (store/run_log.ts), the one reader of the run log `<site_dir>/runs.ndjson`
 * (docs/cli.md): what a missing, planted, damaged or growing log reads as. Real temp dirs.
 *
 * @module
 */

import assert from "node:assert/strict";
import { join } from "node:path";
import { tempDir } from "../_shared/util.ts";
import { readRunLog, runLogLine } from "../../store/run_log.ts";
import type { DamagedFileError } from "../../store/site_files.ts";

const START = {
  run_id: "m31",
  run_dir: "/srv/telemetry/m31",
  started_at: "2026-11-21T23:00:00.000Z",
  stopped_at: null as string | null,
  events: 0,
  meta: {},
};
const STOP = { ...START, stopped_at: "2026-11-22T05:00:00.000Z", events: 7 };

Deno.test("readRunLog() reads a missing runs.ndjson as an empty log", async () => {
  await using tmp = await tempDir();
  const log = await readRunLog(tmp.path);
  assert.deepEqual([log.runs, log.lines, log.skipped, log.torn], [[], [], 0, false]);
});

Deno.test("readRunLog() does not follow a link at runs.ndjson out of the site directory", async () => {
  await using tmp = await tempDir();
  await using outside = await tempDir();
  await Deno.writeTextFile(join(outside.path, "planted.ndjson"), runLogLine(START));
  await Deno.symlink(join(outside.path, "planted.ndjson"), join(tmp.path, "runs.ndjson"));
  assert.deepEqual((await readRunLog(tmp.path)).runs, []);
});

Deno.test("readRunLog() keeps a line without started_at among the lines but not among the runs", async () => {
  await using tmp = await tempDir();
  await Deno.writeTextFile(
    join(tmp.path, "runs.ndjson"),
    '{"run_id":"m31","run_dir":"/t/m31","stopped_at":"2026-11-22T05:00:00.000Z"}\n',
  );
  const log = await readRunLog(tmp.path);
  assert.deepEqual(log.lines, [
    { runId: "m31", runDir: "/t/m31", stoppedAt: "2026-11-22T05:00:00.000Z" },
  ]);
  assert.deepEqual([log.runs, log.skipped], [[], 1]);
});

Deno.test("readRunLog() after a previous read's end reads only the lines appended since", async () => {
  await using tmp = await tempDir();
  const path = join(tmp.path, "runs.ndjson");
  await Deno.writeTextFile(path, runLogLine(START));
  const first = await readRunLog(tmp.path);
  await Deno.writeTextFile(path, runLogLine(STOP), { append: true });
  const next = await readRunLog(tmp.path, { after: first.end });
  assert.equal(next.continued, true);
  assert.deepEqual(next.runs, [STOP]);
  assert.equal(next.end.offset, (await Deno.stat(path)).size);
});

Deno.test("readRunLog() after the end of a log since shortened reads it again from its start", async () => {
  await using tmp = await tempDir();
  const path = join(tmp.path, "runs.ndjson");
  await Deno.writeTextFile(path, runLogLine(START) + runLogLine(STOP));
  const first = await readRunLog(tmp.path);
  await Deno.writeTextFile(path, runLogLine({ ...START, run_id: "m33" }));
  const again = await readRunLog(tmp.path, { after: first.end });
  assert.equal(again.continued, false);
  assert.deepEqual(again.runs.map((r) => r.run_id), ["m33"]);
});

Deno.test("readRunLog() skips a torn last line and says the log is torn", async () => {
  await using tmp = await tempDir();
  await Deno.writeTextFile(join(tmp.path, "runs.ndjson"), runLogLine(START) + '{"run_id":"b');
  const log = await readRunLog(tmp.path);
  assert.deepEqual([log.runs, log.torn], [[START], true]);
});

Deno.test("readRunLog() counts a line longer than the service writes as skipped without onDamage", async () => {
  await using tmp = await tempDir();
  const long = `{"run_id":"x","pad":"${"a".repeat(33 * 1024 * 1024)}"}\n`;
  await Deno.writeTextFile(join(tmp.path, "runs.ndjson"), long + runLogLine(STOP));
  const log = await readRunLog(tmp.path);
  assert.deepEqual([log.runs, log.skipped], [[STOP], 1]);
});

Deno.test("readRunLog() tells onDamage about a line longer than the service writes", async () => {
  await using tmp = await tempDir();
  const long = `{"run_id":"x","pad":"${"a".repeat(33 * 1024 * 1024)}"}\n`;
  await Deno.writeTextFile(join(tmp.path, "runs.ndjson"), long + runLogLine(STOP));
  const damaged: DamagedFileError[] = [];
  const log = await readRunLog(tmp.path, { onDamage: (d) => damaged.push(d) });
  assert.deepEqual(damaged.map((d) => d.offset), [0]);
  assert.deepEqual(log.runs, [STOP]);
});
