/**
 * Tests of `storage.ts`, the site directory: the start-up scan of a stream file and the lock.
 * Day keys are tested in day_key_test.ts, the NDJSON writer in ndjson_writer_test.ts.
 * @module
 */

import assert from "node:assert/strict";
import { join } from "node:path";
import { scanStream, SiteInUseError, SiteLock } from "../storage.ts";
import { tempDir } from "./_util.ts";

Deno.test("scanStream() returns the last seq, the latest line per type and the count after a seq", async () => {
  await using dir = await tempDir();
  const path = join(dir.path, "t.ndjson");
  const line = (seq: number, type: string) =>
    `{"seq":${seq},"ts":"2026-01-01T00:00:00.000Z","type":${
      JSON.stringify(type)
    },"data":{"n":${seq}},"meta":{}}`;
  await Deno.writeTextFile(
    path,
    [line(1, "a"), line(2, 'b"q'), "not json", line(3, "a")].join("\n") + "\n",
  );
  const scan = await scanStream(path, 1);
  assert.equal(scan.lastSeq, 3);
  assert.equal(scan.countedAfter, 2);
  assert.deepEqual([...scan.latest.entries()], [['b"q', line(2, 'b"q')], ["a", line(3, "a")]]);
});

Deno.test("SiteLock.acquire() refuses a second holder with SiteInUseError", async () => {
  await using dir = await tempDir();
  const lock = await SiteLock.acquire(dir.path);
  try {
    await assert.rejects(SiteLock.acquire(dir.path), (err: unknown) => {
      assert.ok(err instanceof SiteInUseError);
      assert.equal(err.message, `site directory ${dir.path} is in use by another telemetry server`);
      return true;
    });
  } finally {
    await lock.release();
  }
});

Deno.test("SiteLock.release() lets the next acquire() succeed", async () => {
  await using dir = await tempDir();
  await (await SiteLock.acquire(dir.path)).release();
  const again = await SiteLock.acquire(dir.path);
  await again.release();
});
