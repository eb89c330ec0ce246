/**
 * Runs and forget from the command line (docs/cli.md, docs/http-api.md): `start-run`, `stop-run`, `runs`,
 * `forget`, the note of `stop` while a run is active, the "resumed run" line, and the run log
 * across kill -9 between a start (or stop) and its answer. Subprocesses of `cli.ts` against real
 * servers on 127.0.0.1, real temp dirs.
 * @module
 */

import assert from "node:assert/strict";
import { join } from "node:path";
import { permissionFlags } from "../../server.ts";
import { readRunLog } from "../../store/run_log.ts";
import { CLI, freePort, getJson, postJson, tempDir, testServer } from "../_shared/util.ts";
import { Rng, seedFromEnv, spawnCliServer } from "../_shared/fault_util.ts";

const decoder = new TextDecoder();

interface Result {
  code: number;
  stdout: string;
  stderr: string;
}

/** Runs `cli.ts` with the given arguments, by default with every permission. */
async function cli(args: string[], flags: string[] = ["--allow-all"]): Promise<Result> {
  const out = await new Deno.Command(Deno.execPath(), {
    args: ["run", "--no-prompt", ...flags, CLI, ...args],
    env: { NO_COLOR: "1" },
    stdin: "null",
    stdout: "piped",
    stderr: "piped",
  }).output();
  return { code: out.code, stdout: decoder.decode(out.stdout), stderr: decoder.decode(out.stderr) };
}

function at(url: string): string[] {
  const port = new URL(url).port;
  return ["--host", "127.0.0.1", "--port", port];
}

Deno.test("obs-utils telemetry start-run, stop-run and runs: one readable line each, and the table newest first", async () => {
  await using dir = await tempDir();
  await using server = await testServer({ siteDir: dir.path });
  const site = await Deno.realPath(dir.path);
  const started = await cli([
    "telemetry",
    "start-run",
    "m31-1",
    "--meta",
    '{"target": "M31"}',
    ...at(server.url),
  ]);
  assert.equal(started.code, 0, started.stderr);
  const run = (await getJson(`${server.url}/run`)).body as { started_at: string };
  assert.equal(
    started.stdout,
    `run m31-1 active since ${run.started_at}, 0 events, dir ${join(site, "m31-1")}, target M31\n`,
  );
  await postJson(`${server.url}/event`, { type: "a", data: {} });
  await postJson(`${server.url}/event`, { type: "b", data: {} });
  const stopped = await cli(["telemetry", "stop-run", "--json", ...at(server.url)]);
  assert.equal(stopped.code, 0, stopped.stderr);
  const record = JSON.parse(stopped.stdout);
  assert.equal(record.events, 2);
  assert.notEqual(record.stopped_at, null);
  const second = await cli(["telemetry", "start-run", "--json", ...at(server.url)]);
  assert.equal(second.code, 0, second.stderr);
  assert.equal(JSON.parse(second.stdout).run_id, "001");
  // The log holds the count at the start; `runs` counts an active run's lines in its file.
  await postJson(`${server.url}/event`, { type: "a", data: {} });
  await postJson(`${server.url}/event`, { type: "a", data: {}, store_permanently: false });

  // `runs` reads the files: the server need not answer (it still runs here, holding the lock).
  const table = await cli(["telemetry", "runs", "--site-dir", dir.path], [
    `--allow-read=${dir.path}`,
  ]);
  assert.equal(table.code, 0, table.stderr);
  const lines = table.stdout.trimEnd().split("\n");
  assert.equal(lines.length, 3);
  assert.match(lines[0]!, /^RUN_ID +STARTED +STOPPED +EVENTS +DIR +TARGET$/);
  assert.match(lines[1]!, new RegExp(`^001 +\\S+Z +active +1 +${join(site, "001")}$`));
  assert.match(
    lines[2]!,
    new RegExp(`^m31-1 +${run.started_at} +\\S+Z +2 +${join(site, "m31-1")} +M31$`),
  );
  const json = await cli(["telemetry", "runs", "--json", "--site-dir", dir.path]);
  assert.deepEqual(JSON.parse(json.stdout).map((r: { run_id: string }) => r.run_id), [
    "001",
    "m31-1",
  ]);
});

Deno.test("obs-utils telemetry start-run while another run is active exits 1 naming it and the command that stops it", async () => {
  await using dir = await tempDir();
  await using server = await testServer({ siteDir: dir.path });
  await postJson(`${server.url}/run/start`, { run_id: "night-1" });
  const r = await cli(["telemetry", "start-run", "night-2", ...at(server.url)]);
  assert.equal(r.code, 1);
  assert.equal(r.stdout, "");
  assert.equal(
    r.stderr,
    "error: run night-1 is active; end it with 'obs-utils telemetry stop-run' before starting another\n",
  );
  // The same run again is an idempotent retry, not a conflict.
  const again = await cli(["telemetry", "start-run", "night-1", ...at(server.url)]);
  assert.equal(again.code, 0, again.stderr);
});

Deno.test("obs-utils telemetry stop-run without an active run exits 1: no run is active", async () => {
  await using dir = await tempDir();
  await using server = await testServer({ siteDir: dir.path });
  const r = await cli(["telemetry", "stop-run", ...at(server.url)]);
  assert.equal(r.code, 1);
  assert.equal(r.stderr, "error: no run is active\n");
});

Deno.test("obs-utils telemetry start-run refuses bad input before any request, and passes the server's detail on", async () => {
  await using dir = await tempDir();
  await using server = await testServer({ siteDir: dir.path });
  const meta = await cli(["telemetry", "start-run", "--meta", "[1]", ...at(server.url)]);
  assert.equal(meta.code, 2);
  assert.match(meta.stderr, /^obs-utils telemetry start-run: --meta must be a JSON object/);
  const two = await cli(["telemetry", "start-run", "a", "b", ...at(server.url)]);
  assert.equal(two.code, 2);
  const bad = await cli(["telemetry", "start-run", "../escape", ...at(server.url)]);
  assert.equal(bad.code, 1);
  assert.equal(bad.stderr.split("\n").length, 2, bad.stderr);
  assert.match(bad.stderr, /^error: The service answered 400: .*run_id/);
  assert.equal((await getJson(`${server.url}/run`)).status, 404);
});

Deno.test("obs-utils telemetry runs works without a service, skips a torn last line, and says when there is nothing", async () => {
  await using dir = await tempDir();
  const empty = await cli(["telemetry", "runs", "--site-dir", dir.path]);
  assert.equal(empty.code, 0);
  assert.equal(empty.stdout, `no runs recorded in ${dir.path}\n`);
  const rec = (id: string, started: string, stopped: string | null) =>
    JSON.stringify({
      run_id: id,
      run_dir: `/x/${id}`,
      started_at: started,
      stopped_at: stopped,
      events: 4,
      meta: { target: "bell\u0007" },
    });
  await Deno.writeTextFile(
    join(dir.path, "runs.ndjson"),
    [
      rec("a", "2026-05-01T20:00:00.000Z", null),
      rec("a", "2026-05-01T20:00:00.000Z", "2026-05-02T04:00:00.000Z"),
      rec("b", "2026-05-02T20:00:00.000Z", null),
    ].join("\n") + '\n{"run_id":"c","run_d',
  );
  const r = await cli(["telemetry", "runs", "--site-dir", dir.path]);
  assert.equal(r.code, 0, r.stderr);
  const lines = r.stdout.trimEnd().split("\n");
  assert.deepEqual(lines.map((l) => l.split(/ +/)[0]), ["RUN_ID", "b", "a"]);
  // A control character is shown as its escape, as in every human output (docs/cli.md).
  assert.match(lines[2]!, /2026-05-02T04:00:00\.000Z +4 +\/x\/a +bell\\u0007$/);
  const missing = await cli(["telemetry", "runs", "--site-dir", join(dir.path, "nope")]);
  assert.equal(missing.code, 1);
  assert.equal(
    missing.stderr,
    `error: no site directory at ${join(dir.path, "nope")}; check --site-dir\n`,
  );
});

Deno.test("obs-utils telemetry forget TYPE removes the type; an absent one exits 1; no TYPE is a usage error", async () => {
  await using dir = await tempDir();
  await using server = await testServer({ siteDir: dir.path });
  await postJson(`${server.url}/event`, { type: "old sensor", data: { v: 1 } });
  const r = await cli(["telemetry", "forget", "old sensor", ...at(server.url)]);
  assert.equal(r.code, 0, r.stderr);
  assert.equal(r.stdout, 'forgot "old sensor"; it returns with its next event\n');
  assert.deepEqual((await getJson(`${server.url}/current`)).body, {});
  const again = await cli(["telemetry", "forget", "old sensor", ...at(server.url)]);
  assert.equal(again.code, 1);
  assert.equal(
    again.stderr,
    `error: the current snapshot has no type "old sensor"; 'obs-utils telemetry current' lists the types it has\n`,
  );
  const none = await cli(["telemetry", "forget", ...at(server.url)]);
  assert.equal(none.code, 2);
  assert.match(none.stderr, /missing TYPE/);
});

Deno.test("obs-utils telemetry forget against a token-protected service without the token gives the token advice", async () => {
  await using dir = await tempDir();
  await using server = await testServer({ siteDir: dir.path, token: "s3cret" });
  const r = await cli(["telemetry", "forget", "a", ...at(server.url)]);
  assert.equal(r.code, 1);
  assert.equal(
    r.stderr,
    `error: The service at http://127.0.0.1:${
      new URL(server.url).port
    } requires a token; pass --token or set OBS_TELEMETRY_TOKEN\n`,
  );
});

Deno.test("obs-utils telemetry stop notes the active run, and the next start says it resumed it", async () => {
  await using dir = await tempDir();
  const port = freePort();
  const first = await spawnCliServer({ siteDir: dir.path, port });
  await postJson(`${first.url}/run/start`, { run_id: "m31-1" });
  await postJson(`${first.url}/event`, { type: "a", data: {} });
  const run = (await getJson(`${first.url}/run`)).body as { started_at: string };
  const flags = permissionFlags({ siteDir: dir.path, host: "127.0.0.1", port });
  const stop = await cli(
    ["telemetry", "stop", "--host", "127.0.0.1", "--port", String(port)],
    flags,
  );
  assert.equal(stop.code, 0, stop.stderr);
  assert.equal(
    stop.stderr,
    "note: run m31-1 is still active; it resumes when the service starts (end it with obs-utils telemetry stop-run)\n",
  );
  await first.kill("SIGKILL");
  await using second = await spawnCliServer({ siteDir: dir.path, port });
  // The ready line is printed first; the resumed line follows it.
  for (let i = 0; i < 50 && !second.output().includes("resumed run"); i++) {
    await new Promise((r) => setTimeout(r, 20));
  }
  const lines = second.output().split("\n");
  const ready = lines.findIndex((l) => l.includes("listening on"));
  // Like every line of the running service, it carries a timestamp and a level (docs/operations.md).
  assert.match(lines[ready + 1]!, /^\d{4}-\d\d-\d\dT[\d:.]+Z info resumed run m31-1 \(started /);
  assert.ok(
    lines[ready + 1]!.endsWith(` info resumed run m31-1 (started ${run.started_at}, 1 event)`),
  );
  // Without a run, stop prints no note.
  await postJson(`${second.url}/run/stop`, undefined);
  const quiet = await cli(["telemetry", "stop", "--host", "127.0.0.1", "--port", String(port)]);
  assert.equal(quiet.code, 0, quiet.stderr);
  assert.equal(quiet.stderr, "");
});

Deno.test("The run log agrees with the active run after kill -9 between a start or stop and its answer (seeded)", async () => {
  const seed = seedFromEnv(0x8_2026);
  const rng = new Rng(seed);
  await using dir = await tempDir();
  const port = freePort();
  let server = await spawnCliServer({ siteDir: dir.path, port });
  try {
    for (let round = 0; round < 8; round++) {
      const context = `seed ${seed} round ${round}`;
      const active = (await getJson(`${server.url}/run`)).body as { run_id?: string } | undefined;
      const request = active?.run_id
        ? fetch(`${server.url}/run/stop`, { method: "POST" })
        : fetch(`${server.url}/run/start`, {
          method: "POST",
          headers: { "content-type": "application/json" },
          body: JSON.stringify({ run_id: `r${round}`, meta: { target: `t${round}` } }),
        });
      const answered = request.then((res) => res.status, () => 0);
      await new Promise((r) => setTimeout(r, rng.int(0, 12)));
      await server.kill("SIGKILL");
      const status = await answered;

      server = await spawnCliServer({ siteDir: dir.path, port });
      const now = await getJson(`${server.url}/run`);
      const log = await readRunLog(dir.path);
      assert.equal(log.torn, false, context);
      const logged = log.runs.filter((r) => r.stopped_at === null).map((r) => r.run_id);
      if (now.status === 200) {
        const run = now.body as { run_id: string; run_dir: string };
        assert.deepEqual(logged, [run.run_id], context);
        const saved = JSON.parse(await Deno.readTextFile(join(run.run_dir, "run.json")));
        assert.equal(saved.stopped_at, null, context);
        assert.equal(saved.run_id, run.run_id, context);
      } else {
        assert.deepEqual(logged, [], context);
      }
      // Every run.json agrees with the log on what the run is.
      for (const logged of log.runs) {
        const saved = JSON.parse(await Deno.readTextFile(join(logged.run_dir, "run.json")));
        assert.deepEqual(
          [saved.run_id, saved.started_at, saved.stopped_at],
          [logged.run_id, logged.started_at, logged.stopped_at],
          context,
        );
      }
      // What was acknowledged holds: an answered start is active, an answered stop is not.
      if (status === 201) assert.equal(now.status, 200, context);
      if (status === 200 && active?.run_id) assert.equal(now.status, 404, context);
    }
  } finally {
    await server.kill("SIGKILL");
  }
});
