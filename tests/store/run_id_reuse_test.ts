/**
 * A run id names one run directory forever (docs/http-api.md): starting it again in another
 * directory is refused with 409, so the fleet keys `<unit>/run/<run_id>/<seq>` never repeat;
 * starting it again in its own directory continues its seq. Real servers on 127.0.0.1, real
 * temp dirs, the command line as a subprocess.
 * @module
 */

import assert from "node:assert/strict";
import { join } from "node:path";
import { CLI, postJson, tempDir, testServer } from "../_shared/util.ts";
import { readRunLog } from "../../store/run_log.ts";

const decoder = new TextDecoder();

async function start(url: string, body: unknown): Promise<{ status: number; body: unknown }> {
  return await postJson(`${url}/run/start`, body);
}

async function stop(url: string): Promise<void> {
  const { status } = await postJson(`${url}/run/stop`, undefined);
  assert.equal(status, 200);
}

Deno.test("a run id started again with another run_dir is refused with 409 naming the id, its directory and the fix", async () => {
  await using dir = await tempDir();
  const site = await Deno.realPath(dir.path);
  {
    await using server = await testServer({ siteDir: dir.path });
    assert.equal((await start(server.url, { run_id: "m31", run_dir: "a/m31" })).status, 201);
    await postJson(`${server.url}/event`, { type: "focuser", data: { position: 1 } });
    await stop(server.url);
  }
  // A restart in between: the rule comes from the run log, not from memory.
  await using server = await testServer({ siteDir: dir.path });
  const refused = await start(server.url, { run_id: "m31", run_dir: "b/m31" });
  assert.equal(refused.status, 409);
  assert.equal(
    (refused.body as { detail: string }).detail,
    `run_id "m31" was used for run_dir ${
      join(site, "a", "m31")
    }, and a run id names one run directory; choose another run_id, or start "m31" again with run_dir ${
      join(site, "a", "m31")
    } to continue it.`,
  );
  // Nothing of the refused start exists: no directory, no log line, no active run.
  await assert.rejects(Deno.stat(join(site, "b", "m31")), Deno.errors.NotFound);
  assert.deepEqual((await readRunLog(site)).runs.map((r) => r.run_dir), [join(site, "a", "m31")]);
  assert.equal((await postJson(`${server.url}/run/stop`, undefined)).status, 409);
});

Deno.test("a run id started again without run_dir after it used another directory is refused with 409", async () => {
  await using dir = await tempDir();
  await using server = await testServer({ siteDir: dir.path });
  assert.equal((await start(server.url, { run_id: "m31", run_dir: "2026/m31" })).status, 201);
  await stop(server.url);
  const refused = await start(server.url, { run_id: "m31" });
  assert.equal(refused.status, 409);
  assert.match((refused.body as { detail: string }).detail, /^run_id "m31" was used for run_dir /);
});

Deno.test("a run id started again with its own run_dir continues its seq", async () => {
  await using dir = await tempDir();
  await using server = await testServer({ siteDir: dir.path });
  assert.equal((await start(server.url, { run_id: "m31", run_dir: "a/m31" })).status, 201);
  const first = await postJson(`${server.url}/event`, { type: "focuser", data: { position: 1 } });
  assert.equal((first.body as { seq: number }).seq, 1);
  await stop(server.url);
  assert.equal((await start(server.url, { run_id: "m31", run_dir: "a/m31" })).status, 201);
  const second = await postJson(`${server.url}/event`, { type: "focuser", data: { position: 2 } });
  assert.equal((second.body as { seq: number }).seq, 2);
  await stop(server.url);
  // The same directory named by run_id alone continues it too.
  assert.equal((await start(server.url, { run_id: "n1" })).status, 201);
  await stop(server.url);
  assert.equal((await start(server.url, { run_dir: "n1" })).status, 201);
});

Deno.test("a derived run id steps past an id the run log knows for another directory", async () => {
  await using dir = await tempDir();
  await using server = await testServer({ siteDir: dir.path });
  // "001" lives elsewhere: the next derived id must not be it.
  assert.equal((await start(server.url, { run_id: "001", run_dir: "elsewhere/x" })).status, 201);
  await stop(server.url);
  const derived = await start(server.url, {});
  assert.equal(derived.status, 201);
  assert.equal((derived.body as { run_id: string }).run_id, "002");
});

Deno.test("obs-utils telemetry start-run of a run id used in another directory exits 1 with the service's reason", async () => {
  await using dir = await tempDir();
  await using server = await testServer({ siteDir: dir.path });
  assert.equal((await start(server.url, { run_id: "m31", run_dir: "a/m31" })).status, 201);
  await stop(server.url);
  const out = await new Deno.Command(Deno.execPath(), {
    args: [
      "run",
      "--allow-all",
      CLI,
      "telemetry",
      "start-run",
      "m31",
      "--run-dir",
      "b/m31",
      "--host",
      "127.0.0.1",
      "--port",
      new URL(server.url).port,
    ],
    env: { NO_COLOR: "1" },
    stdin: "null",
    stdout: "piped",
    stderr: "piped",
  }).output();
  assert.equal(out.code, 1);
  assert.equal(decoder.decode(out.stdout), "");
  const stderr = decoder.decode(out.stderr);
  assert.equal(stderr.trimEnd().split("\n").length, 1, stderr);
  assert.match(
    stderr,
    /run_id "m31" was used for run_dir .*a\/m31, and a run id names one run directory; choose another run_id/,
  );
});
