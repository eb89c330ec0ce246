/**
 * Tests of `store/site_store.ts`, the site directory: the start-up scan of a stream file, the lock, and
 * SiteStore (one holder, confined run directories, derived run ids, seq marks, group appends).
 * Day keys are tested in day_key_test.ts, the NDJSON writer in ndjson_writer_test.ts.
 * @module
 */

import assert from "node:assert/strict";
import { join } from "node:path";
import { RunDirNotAllowedError, SiteInUseError } from "../../core/errors.ts";
import { SiteLock } from "../../store/lock.ts";
import { SiteStore, type SiteStoreOptions } from "../../store/site_store.ts";
import { scanStream } from "../../store/stored_read.ts";
import { readLines, tempDir } from "../_shared/util.ts";

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

/** Opens a SiteStore in UTC without fsync; warnings go to `warnings`. */
function openStore(
  siteDir: string,
  options: Partial<SiteStoreOptions> = {},
  warnings: string[] = [],
): Promise<SiteStore> {
  return SiteStore.open({
    siteDir,
    timeZone: "UTC",
    fsync: "never",
    warn: (m) => warnings.push(m),
    ...options,
  });
}

Deno.test("SiteStore.open() refuses a second open of the same directory with SiteInUseError", async () => {
  await using dir = await tempDir();
  const first = await openStore(dir.path);
  try {
    await assert.rejects(openStore(dir.path), (err: unknown) => {
      assert.ok(err instanceof SiteInUseError);
      assert.equal(err.siteDir, first.siteDir);
      return true;
    });
  } finally {
    await first.close();
  }
  const second = await openStore(dir.path);
  await second.close();
});

Deno.test("SiteStore.confineRunDir() resolves a relative run_dir below the site directory", async () => {
  await using dir = await tempDir();
  const store = await openStore(dir.path);
  try {
    assert.equal(await store.confineRunDir("2026/m31"), join(store.siteDir, "2026", "m31"));
  } finally {
    await store.close();
  }
});

Deno.test("SiteStore.confineRunDir() refuses a run_dir through a symlink that leads outside", async () => {
  await using site = await tempDir();
  await using outside = await tempDir();
  const store = await openStore(site.path);
  try {
    await Deno.symlink(outside.path, join(store.siteDir, "link"));
    await assert.rejects(store.confineRunDir("link/run1"), (err: unknown) => {
      assert.ok(err instanceof RunDirNotAllowedError);
      assert.equal(err.requested, "link/run1");
      assert.equal(err.resolved, join(store.siteDir, "link", "run1"));
      return true;
    });
  } finally {
    await store.close();
  }
});

Deno.test("SiteStore.confineRunDir() accepts a run_dir through a symlink that stays inside", async () => {
  await using site = await tempDir();
  const store = await openStore(site.path);
  try {
    await Deno.mkdir(join(store.siteDir, "nights"));
    await Deno.symlink(join(store.siteDir, "nights"), join(store.siteDir, "latest"));
    assert.equal(await store.confineRunDir("latest/r1"), join(store.siteDir, "latest", "r1"));
  } finally {
    await store.close();
  }
});

Deno.test("SiteStore.confineRunDir() refuses a symlinked run root's escape but accepts the root itself", async () => {
  await using site = await tempDir();
  await using root = await tempDir();
  await using outside = await tempDir();
  const store = await openStore(site.path, { allowRunRoots: [root.path] });
  try {
    const realRoot = store.runRoots[0]!;
    assert.equal(
      await store.confineRunDir(join(realRoot, "cam", "n1")),
      join(realRoot, "cam", "n1"),
    );
    await Deno.symlink(outside.path, join(realRoot, "out"));
    await assert.rejects(store.confineRunDir(join(realRoot, "out", "n1")), RunDirNotAllowedError);
  } finally {
    await store.close();
  }
});

Deno.test("SiteStore.nextNumericRun() answers 001 in a site directory without numbered runs", async () => {
  await using dir = await tempDir();
  await Deno.mkdir(join(dir.path, "m31"));
  const store = await openStore(dir.path);
  try {
    assert.equal(await store.nextNumericRun(), "001");
  } finally {
    await store.close();
  }
});

Deno.test("SiteStore.nextNumericRun() follows the largest all-digit directory, ignoring files", async () => {
  await using dir = await tempDir();
  for (const name of ["007", "3", "12a"]) await Deno.mkdir(join(dir.path, name));
  await Deno.writeTextFile(join(dir.path, "050"), "a file, not a run directory");
  const store = await openStore(dir.path);
  try {
    assert.equal(await store.nextNumericRun(), "008");
    await Deno.mkdir(join(dir.path, "1234"));
    assert.equal(await store.nextNumericRun(), "1235");
  } finally {
    await store.close();
  }
});

Deno.test("SiteStore.writeSeqMark() marks of the site and of a run survive a reopen", async () => {
  await using dir = await tempDir();
  const runDir = join(dir.path, "r1");
  {
    const store = await openStore(dir.path);
    await store.writeSeqMark(store.siteDir, 41);
    const run = await store.openRunStream(runDir);
    assert.equal(run.mark, 0);
    await store.writeSeqMark(runDir, 17);
    await store.close();
  }
  const store = await openStore(dir.path);
  try {
    assert.equal((await store.resumeSite()).mark, 41);
    assert.equal((await store.openRunStream(runDir)).mark, 17);
  } finally {
    await store.close();
  }
});

Deno.test("SiteStore.resumeSite() reads an unreadable seq mark as none", async () => {
  await using dir = await tempDir();
  await Deno.writeTextFile(join(dir.path, ".seq-mark.json"), "{torn");
  const store = await openStore(dir.path);
  try {
    assert.equal((await store.resumeSite()).mark, 0);
  } finally {
    await store.close();
  }
});

Deno.test("SiteStore.append() writes each night's lines to its site file in one group", async () => {
  await using dir = await tempDir();
  const store = await openStore(dir.path);
  try {
    const bytes = await store.append(new Map([["20260509", ["a", "b"]], ["20260510", ["c"]]]));
    assert.equal(bytes, "a\nb\nc\n".length);
    assert.deepEqual(await readLines(join(store.siteDir, "site_20260509.ndjson")), ["a", "b"]);
    assert.deepEqual(await readLines(join(store.siteDir, "site_20260510.ndjson")), ["c"]);
  } finally {
    await store.close();
  }
});

Deno.test("SiteStore.append() truncates every file of the group back when one write fails", async () => {
  await using dir = await tempDir();
  const store = await openStore(dir.path);
  try {
    await store.append(new Map([["20260510", ["before"]]]));
    const run = await store.openRunStream(join(store.siteDir, "r1"));
    await store.closeRunStream(run.writer); // its next write fails
    await assert.rejects(
      store.append(
        new Map<string | typeof run.writer, string[]>([
          ["20260510", ["lost 1"]],
          [run.writer, ["lost 2"]],
        ]),
      ),
    );
    assert.deepEqual(await readLines(join(store.siteDir, "site_20260510.ndjson")), ["before"]);
    assert.deepEqual(await readLines(join(store.siteDir, "r1", "telemetry.ndjson")), []);
  } finally {
    await store.close();
  }
});
