/**
 * Disk-full behaviour (docs/http-api.md 507, 4.1) on a real, small tmpfs. Needs root (mount); when
 * the mount is not possible the tests are ignored and the reason is printed.
 * @module
 */

import assert from "node:assert/strict";
import { join } from "node:path";
import type { ServerHandle } from "../../server.ts";
import { TelemetryService } from "../../core/service.ts";
import { toProblem, WriteError } from "../../server.ts";
import { mountPointOf } from "../../store/writer.ts";
import { getJson, readLines, readSiteLines, tempDir, testServer } from "../_shared/util.ts";

const decoder = new TextDecoder();

async function run(cmd: string, args: string[]): Promise<string | undefined> {
  try {
    const out = await new Deno.Command(cmd, { args, stdout: "null", stderr: "piped" }).output();
    return out.success
      ? undefined
      : `${cmd} ${args.join(" ")}: ${decoder.decode(out.stderr).trim()}`;
  } catch (err) {
    return `${cmd} ${args.join(" ")}: ${err instanceof Error ? err.message : String(err)}`;
  }
}

/** A 256 KiB tmpfs mounted on a fresh temp dir; unmounted and removed on disposal. */
async function smallTmpfs(): Promise<AsyncDisposable & { path: string }> {
  const path = await Deno.makeTempDir({ prefix: "obs-telemetry-tmpfs-" });
  const problem = await run("mount", ["-t", "tmpfs", "-o", "size=256k", "tmpfs", path]);
  if (problem !== undefined) {
    await Deno.remove(path);
    throw new Error(problem);
  }
  return {
    path,
    async [Symbol.asyncDispose]() {
      const failed = await run("umount", [path]);
      if (failed !== undefined) throw new Error(failed);
      await Deno.remove(path);
    },
  };
}

/** Why the tmpfs tests cannot run here, or `undefined` when they can. */
async function whyNoTmpfs(): Promise<string | undefined> {
  if (Deno.build.os !== "linux") return `tmpfs mounts need Linux, this is ${Deno.build.os}`;
  try {
    await using _ = await smallTmpfs();
    return undefined;
  } catch (err) {
    return `cannot mount a tmpfs (needs root): ${err instanceof Error ? err.message : err}`;
  }
}

const skipReason = await whyNoTmpfs();
if (skipReason !== undefined) {
  // deno-lint-ignore no-console
  console.log(`diskfull_test.ts: ignoring the disk-full tests: ${skipReason}`);
}

/** Fills the file system holding `dir` with a filler file until a write fails with ENOSPC. */
async function fill(dir: string, name = "filler"): Promise<string> {
  const path = join(dir, name);
  const file = await Deno.open(path, { write: true, create: true });
  const block = new Uint8Array(4096);
  try {
    while (true) await file.write(block);
  } catch (err) {
    if (!/No space left|os error 28/.test(String(err))) throw err;
  } finally {
    file.close();
  }
  return path;
}

/** Frees about `bytes` from the filler file (whole pages on tmpfs). */
async function free(filler: string, bytes: number): Promise<void> {
  const size = (await Deno.stat(filler)).size;
  await Deno.truncate(filler, Math.max(0, size - bytes));
}

function post(server: ServerHandle, body: unknown): Promise<Response> {
  return fetch(`${server.url}/event`, {
    method: "POST",
    headers: { "content-type": "application/json" },
    body: JSON.stringify(body),
  });
}

Deno.test({
  name: "POST /event answers 507 on a full disk and leaves no partial line",
  ignore: skipReason !== undefined,
  async fn() {
    await using mnt = await smallTmpfs();
    const siteDir = join(mnt.path, "site");
    await free(await fill(mnt.path), 64 * 1024);
    {
      await using server = await testServer({ siteDir });
      assert.equal((await post(server, { type: "w", data: { n: 1 } })).status, 200);
      const before = await readSiteLines(siteDir);
      const more = await fill(mnt.path, "more");
      await free(more, 4096); // room for part of the next line, not all of it
      const res = await post(server, { type: "w", data: { pad: "x".repeat(16 * 1024) } });
      assert.equal(res.status, 507);
      assert.match(res.headers.get("content-type") ?? "", /^application\/problem\+json/);
      const problem = await res.json();
      assert.equal(problem.status, 507);
      assert.match(problem.detail, /disk is full/);
      assert.deepEqual(await readSiteLines(siteDir), before);
      const text = await Deno.readTextFile(join(
        siteDir,
        (await Array.fromAsync(
          Deno.readDir(siteDir),
        )).find((e) => e.name.startsWith("site_"))!.name,
      ));
      assert.ok(text.endsWith("\n"), "the site file must end with a whole line");
    }
  },
});

Deno.test({
  name: "POST /event on a full disk consumes no seq, keeps the snapshot and the server alive",
  ignore: skipReason !== undefined,
  async fn() {
    await using mnt = await smallTmpfs();
    const siteDir = join(mnt.path, "site");
    {
      await using server = await testServer({ siteDir });
      await post(server, { type: "w", data: { n: 1 } }).then((r) => r.body?.cancel());
      const current = (await getJson(`${server.url}/current`)).body;
      const filler = await fill(mnt.path);
      const failed = await post(server, { type: "w", data: { pad: "x".repeat(16 * 1024) } });
      assert.equal(failed.status, 507);
      await failed.body?.cancel();
      assert.deepEqual((await getJson(`${server.url}/current`)).body, current);
      assert.equal((await getJson(`${server.url}/health`)).status, 200);
      await Deno.remove(filler);
      const next = await post(server, { type: "w", data: { n: 2 } });
      assert.equal(next.status, 200);
      assert.equal((await next.json()).seq, 2);
      assert.deepEqual((await readSiteLines(siteDir)).map((l) => JSON.parse(l).seq), [1, 2]);
    }
  },
});

Deno.test({
  name: "TelemetryService.record() rolls back the run copy when the site copy hits a full disk",
  ignore: skipReason !== undefined,
  async fn() {
    await using mnt = await smallTmpfs();
    await using root = await tempDir();
    const siteDir = join(mnt.path, "site");
    const runDir = join(root.path, "r1");
    {
      await using service = await TelemetryService.open({
        siteDir,
        timeZone: "UTC",
        allowRunRoots: [root.path],
      });
      await service.startRun({ runDir: runDir });
      await service.record([{ type: "weather", data: { n: 1 } }]);
      await fill(mnt.path);
      await assert.rejects(
        service.record([{ type: "weather", data: { pad: "x".repeat(16 * 1024) } }]),
        (err: unknown) => err instanceof WriteError && err.diskFull,
      );
      const runLines = await readLines(join(runDir, "telemetry.ndjson"));
      assert.deepEqual(runLines.map((l) => JSON.parse(l).seq), [1]);
      assert.equal(service.run?.events, 1);
      assert.equal(service.currentLine("weather"), runLines[0]);
    }
  },
});

Deno.test({
  name:
    "POST /event on a full disk names the full file system's mount point and the file in its 507 detail",
  ignore: skipReason !== undefined,
  async fn() {
    await using mnt = await smallTmpfs();
    const siteDir = join(mnt.path, "site");
    {
      await using server = await testServer({ siteDir });
      await post(server, { type: "w", data: { n: 1 } }).then((r) => r.body?.cancel());
      await fill(mnt.path);
      const res = await post(server, { type: "w", data: { pad: "x".repeat(16 * 1024) } });
      assert.equal(res.status, 507);
      const { detail } = await res.json();
      const file = (await Array.fromAsync(Deno.readDir(siteDir))).find((e) =>
        e.name.startsWith("site_")
      )!.name;
      assert.ok(detail.includes(`mounted at ${mnt.path} (writing ${join(siteDir, file)})`), detail);
      assert.match(detail, /Free space there/);
    }
  },
});

Deno.test({
  name: "mountPointOf() finds the innermost mount holding a path",
  ignore: skipReason !== undefined,
  async fn() {
    await using mnt = await smallTmpfs();
    assert.equal(await mountPointOf(join(mnt.path, "site", "site_20260101.ndjson")), mnt.path);
    assert.equal(await mountPointOf(mnt.path), mnt.path);
    assert.notEqual(await mountPointOf(`${mnt.path}-sibling/x`), mnt.path);
  },
});

Deno.test("toProblem() names the file in a 507 detail when the mount point is unknown", async () => {
  const err = new WriteError("Cannot write to /srv/t/site_20260101.ndjson: No space left", {
    cause: undefined,
    diskFull: true,
    path: "/srv/t/site_20260101.ndjson",
  });
  const res = toProblem(err)!;
  assert.equal(res.status, 507);
  const { detail } = await res.json();
  assert.equal(
    detail,
    "The disk is full: the file system holding /srv/t/site_20260101.ndjson has no space left; nothing was written and no seq was used. Free space there (or raise the quota) and retry.",
  );
});
