/**
 * `readActiveRun()` (store/run_records.ts), the one reader of `<site_dir>/.active-run.json`
 * (docs/storage.md): what the service resumes from, and what the history reader, the forwarder
 * and `obs-utils telemetry runs` take for the active run. Real temp dirs.
 *
 * @module
 */

import assert from "node:assert/strict";
import { join } from "node:path";
import { tempDir } from "../_shared/util.ts";
import { readActiveRun } from "../../store/run_records.ts";

const RECORD = {
  run_id: "m31-1",
  run_dir: "/srv/telemetry/m31-1",
  started_at: "2026-11-21T23:00:00.000Z",
  stopped_at: null,
  events: 0,
  meta: { target: "M31" },
  seq_at_start: 41,
};

Deno.test("readActiveRun() reads a missing .active-run.json as no record", async () => {
  await using tmp = await tempDir();
  assert.deepEqual(await readActiveRun(tmp.path), { state: "none" });
});

Deno.test("readActiveRun() reads a .active-run.json that is not JSON as damaged", async () => {
  await using tmp = await tempDir();
  await Deno.writeTextFile(join(tmp.path, ".active-run.json"), '{"run_id":"m31-1","run_d');
  assert.deepEqual(await readActiveRun(tmp.path), { state: "damaged" });
});

Deno.test("readActiveRun() reads a .active-run.json without a text started_at as damaged", async () => {
  await using tmp = await tempDir();
  const { started_at: _, ...partial } = RECORD;
  await Deno.writeTextFile(join(tmp.path, ".active-run.json"), JSON.stringify(partial));
  assert.deepEqual(await readActiveRun(tmp.path), { state: "damaged" });
});

Deno.test("readActiveRun() reads a valid .active-run.json as the record with its seq_at_start", async () => {
  await using tmp = await tempDir();
  await Deno.writeTextFile(join(tmp.path, ".active-run.json"), JSON.stringify(RECORD));
  assert.deepEqual(await readActiveRun(tmp.path), {
    state: "found",
    record: {
      run_id: "m31-1",
      run_dir: "/srv/telemetry/m31-1",
      started_at: "2026-11-21T23:00:00.000Z",
      meta: { target: "M31" },
      seq_at_start: 41,
    },
  });
});

Deno.test("readActiveRun() leaves out a seq_at_start that is not a number", async () => {
  await using tmp = await tempDir();
  await Deno.writeTextFile(
    join(tmp.path, ".active-run.json"),
    JSON.stringify({ ...RECORD, seq_at_start: "41" }),
  );
  const read = await readActiveRun(tmp.path);
  assert.equal(read.state === "found" && "seq_at_start" in read.record, false);
  assert.equal(read.state, "found");
});

Deno.test("readActiveRun() reads a meta that is not an object as {}", async () => {
  await using tmp = await tempDir();
  await Deno.writeTextFile(
    join(tmp.path, ".active-run.json"),
    JSON.stringify({ ...RECORD, meta: [1] }),
  );
  const read = await readActiveRun(tmp.path);
  assert.deepEqual(read.state === "found" && read.record.meta, {});
});

Deno.test("readActiveRun() does not follow a link at .active-run.json out of the site directory", async () => {
  await using tmp = await tempDir();
  await using outside = await tempDir();
  const planted = join(outside.path, "planted.json");
  await Deno.writeTextFile(planted, JSON.stringify(RECORD));
  await Deno.symlink(planted, join(tmp.path, ".active-run.json"));
  assert.deepEqual(await readActiveRun(tmp.path), { state: "none" });
});
