/**
 * Paths of the site directory under attack and misuse (hardening issue, docs/http-api.md, docs/storage.md): run
 * directories named like the service's own files, inputs past the file system's limits, and
 * symbolic links planted where the service writes. Each test checks on the file system that
 * nothing was written where it must not be. Fuzzing is seeded (`FAULT_SEED` replays a run) and
 * bounded in count and time.
 * @module
 */

import assert from "node:assert/strict";
import { join } from "node:path";
import { createHandler, TelemetryService } from "../server.ts";
import { dayKey } from "../store/day_key.ts";
import { unexpectedErrorLine } from "../cli/serve.ts";
import {
  assertProblem,
  freePort,
  listTree,
  rawHttp,
  Rng,
  seedFromEnv,
  send,
  spawnCliServer,
} from "./_shared/fault_util.ts";
import { cliRunArgs, openService, T0, tempDir, testServer } from "./_shared/util.ts";

/**
 * The site directory's entries, without the snapshot checkpoint (`.snapshot.json` and its temp
 * files), which the service rewrites on its own schedule after accepted events.
 */
async function filesOf(dir: string): Promise<string[]> {
  return (await listTree(dir)).filter((entry) => !entry.startsWith(".snapshot.json"));
}

const JSON_HEADERS = { "content-type": "application/json" };
const NIGHT_T0 = dayKey(T0, "UTC");

/** POSTs a run start; a started run is stopped again, so every body is tried on its own. */
async function startRun(url: string, body: unknown): Promise<{ status: number; text: string }> {
  const res = await send(`${url}/run/start`, {
    method: "POST",
    headers: JSON_HEADERS,
    body: JSON.stringify(body),
  });
  if (res.status < 300) {
    const stop = await send(`${url}/run/stop`, { method: "POST" });
    assert.equal(stop.status, 200, stop.text);
  }
  return res;
}

/** A server on 127.0.0.1:0 whose unexpected errors are collected instead of logged. */
async function serverCollectingErrors(siteDir: string, hostname = "127.0.0.1") {
  const errors: unknown[] = [];
  const service = await openService(siteDir);
  const server = Deno.serve(
    { hostname: "127.0.0.1", port: 0, onListen() {} },
    createHandler(service, { hostname, onError: (err) => errors.push(err) }),
  );
  return {
    errors,
    service,
    url: `http://127.0.0.1:${server.addr.port}`,
    port: server.addr.port,
    async [Symbol.asyncDispose]() {
      await server.shutdown();
      await service.close();
    },
  };
}

/** Runs `cli.ts telemetry run` expecting it to fail at start-up; its exit code and stderr. */
async function failedStart(siteDir: string): Promise<{ code: number; stderr: string }> {
  const child = new Deno.Command(Deno.execPath(), {
    args: cliRunArgs(siteDir, freePort()),
    stdin: "null",
    stdout: "piped",
    stderr: "piped",
  }).spawn();
  const timer = setTimeout(() => child.kill("SIGKILL"), 15_000);
  const { code, stderr, stdout } = await child.output();
  clearTimeout(timer);
  const out = new TextDecoder().decode(stdout);
  assert.ok(!out.includes("listening on"), `the server started: ${out}`);
  return { code, stderr: new TextDecoder().decode(stderr) };
}

// --- 1. reserved names ---------------------------------------------------------------------------

/** Every name the service gives its files, now or in docs/cli.md, docs/types.md, docs/history.md and docs/fleet.md, and derived names. */
function reservedRunDirs(night: string): string[] {
  return [
    ".active-run.json",
    ".snapshot.json",
    ".seq-mark.json",
    ".lock",
    "runs.ndjson",
    `site_${night}.ndjson`, // today's: the writer is open on it
    "site_20991231.ndjson", // a future night's
    "site_20250101.ndjson.gz",
    "site_20250101.ndjson.torn",
    "runs.ndjson.torn",
    ".active-run.json.tmp-0b2c7f0e-2f7e-4c43-9d62-4e0c7c3f7a10",
    ".active-run.json.corrupt-1",
    ".types.json",
    ".forward",
    ".forward/site.json",
    "001/telemetry.ndjson",
    "001/telemetry.ndjson.torn",
    "001/.seq-mark.json",
    "001/run.json",
    "nights/runs.ndjson/a",
    "RUNS.NDJSON", // the same file on a case-insensitive file system
    `Site_${night}.NDJSON`,
    "Telemetry.ndjson",
    "./runs.ndjson",
    "x/../runs.ndjson",
  ];
}

Deno.test("POST /run/start refuses every reserved name as run_dir with advice and creates nothing", async () => {
  await using tmp = await tempDir();
  await using server = await testServer({ siteDir: tmp.path });
  await send(`${server.url}/event`, {
    method: "POST",
    headers: JSON_HEADERS,
    body: JSON.stringify({ type: "probe", data: {} }),
  });
  await Deno.mkdir(join(tmp.path, "001"));
  const before = await filesOf(tmp.path);
  for (const run_dir of reservedRunDirs(dayKey(Date.now(), "UTC"))) {
    const res = await startRun(server.url, { run_id: "fine", run_dir });
    const what = `run_dir ${JSON.stringify(run_dir)}`;
    assert.equal(res.status, 400, `${what}: ${res.text}`);
    const { detail } = assertProblem(400, "application/problem+json", res.text, what);
    assert.match(detail, /keeps for its own files .*; choose another run_dir, for example/, what);
  }
  assert.deepEqual(await filesOf(tmp.path), before);
});

Deno.test("POST /run/start refuses a run_id that names a file of the site directory", async () => {
  await using tmp = await tempDir();
  await using server = await testServer({ siteDir: tmp.path });
  const before = await filesOf(tmp.path);
  const night = dayKey(Date.now(), "UTC");
  for (
    const run_id of [
      "runs.ndjson",
      `site_${night}.ndjson`,
      "site_20991231.ndjson",
      "site_20250101.ndjson.gz",
      "telemetry.ndjson",
      "run.json",
      "RUNS.ndjson",
    ]
  ) {
    const res = await startRun(server.url, { run_id });
    assert.equal(res.status, 400, `run_id ${run_id}: ${res.text}`);
    assert.match(JSON.parse(res.text).detail, /choose another run_id, for example "night-1"/);
  }
  assert.deepEqual(await filesOf(tmp.path), before);
});

Deno.test("POST /run/start refuses the site directory itself as run_dir, however it is spelled", async () => {
  await using tmp = await tempDir();
  await using server = await testServer({ siteDir: tmp.path });
  const site = await Deno.realPath(tmp.path);
  const before = await filesOf(tmp.path);
  for (const run_dir of [".", "./", "a/..", "a/b/../..", site, `${site}/`, `${site}/.`]) {
    const res = await startRun(server.url, { run_id: "fine", run_dir });
    assert.equal(res.status, 400, `run_dir ${run_dir}: ${res.text}`);
    assert.match(JSON.parse(res.text).detail, /it is the site directory itself/);
  }
  assert.deepEqual(await filesOf(tmp.path), before);
});

Deno.test("the service starts where 0.3 made run directories of its file names, moving them aside whole", async () => {
  await using tmp = await tempDir();
  const night = dayKey(Date.now(), "UTC");
  const squatted = [".active-run.json", ".snapshot.json", ".seq-mark.json", "runs.ndjson"];
  squatted.push(`site_${night}.ndjson`, `site_${night}.ndjson.torn`);
  const line = '{"seq":1,"ts":"2025-01-01T00:00:00.000Z","type":"old","data":{},"meta":{}}\n';
  for (const name of squatted) {
    await Deno.mkdir(join(tmp.path, name));
    await Deno.writeTextFile(join(tmp.path, name, "telemetry.ndjson"), line);
  }
  await using server = await spawnCliServer({ siteDir: tmp.path, port: freePort() });
  const event = await send(`${server.url}/event`, {
    method: "POST",
    headers: JSON_HEADERS,
    body: JSON.stringify({ type: "probe", data: {} }),
  });
  assert.equal(event.status, 200, event.text);
  assert.equal((await startRun(server.url, { run_id: "after" })).status, 201);
  const tree = await listTree(tmp.path);
  for (const name of squatted) {
    const moved = tree.find((p) =>
      p ===
        `moved-aside-${p.split("-")[2]}-${
          name.replace(/^\./, "")
        }/telemetry.ndjson (${line.length})`
    );
    assert.ok(moved, `${name} was not kept whole: ${tree.join(", ")}`);
    assert.equal(await Deno.readTextFile(join(tmp.path, moved.split(" ")[0]!)), line);
    assert.match(
      server.output(),
      new RegExp(`Z warn .*/${name.replaceAll(".", "\\.")} was a directory`),
    );
  }
  assert.equal((await Deno.stat(join(tmp.path, `site_${night}.ndjson`))).isFile, true);
});

Deno.test("the service does not resume a saved run whose directory has a reserved name, and starts", async () => {
  await using tmp = await tempDir();
  const site = await Deno.realPath(tmp.path);
  await Deno.mkdir(join(site, "runs.ndjson"));
  await Deno.writeTextFile(
    join(site, ".active-run.json"),
    JSON.stringify({
      run_id: "runs.ndjson",
      run_dir: join(site, "runs.ndjson"),
      started_at: "2025-01-01T00:00:00.000Z",
      stopped_at: null,
      events: 0,
      meta: {},
      seq_at_start: 0,
    }),
  );
  await using server = await spawnCliServer({ siteDir: site, port: freePort() });
  assert.equal((await send(`${server.url}/run`, {})).status, 404);
  assert.match(server.output(), /Z warn Run runs\.ndjson was not resumed: .*reserved|keeps/);
  assert.equal((await startRun(server.url, {})).status, 201);
  // The directory squatting on the run log's name was moved aside; the run log is a file again.
  assert.ok((await Deno.lstat(join(site, "runs.ndjson"))).isFile);
});

// --- 2. bad input is a 4xx, never a 500 ---------------------------------------------------------

Deno.test("POST /run/start answers 400, never 500, to run_dir values past the file system's limits", async () => {
  await using tmp = await tempDir();
  await using server = await serverCollectingErrors(tmp.path);
  await Deno.writeTextFile(join(tmp.path, "plain-file"), "x");
  await Deno.symlink("loop", join(tmp.path, "loop"));
  const values = [
    "a".repeat(256),
    "é".repeat(128), // 256 bytes in UTF-8, 128 characters
    "night/" + "b".repeat(300),
    Array.from({ length: 20 }, () => "c".repeat(250)).join("/"), // > 4096 bytes in all
    "d/".repeat(2100),
    "/".repeat(5000),
    "plain-file/run",
    "loop/run",
    "x\u0000y",
    "x\ny",
    "x\u0085y",
    "\ud800",
    "a/\udfffb",
  ];
  for (const run_dir of values) {
    for (const body of [{ run_dir }, { run_id: "fine", run_dir }]) {
      const res = await startRun(server.url, body);
      const what = `run start ${JSON.stringify(body).slice(0, 80)}`;
      assert.equal(res.status, 400, `${what}: ${res.text.slice(0, 300)}`);
      assertProblem(400, "application/problem+json", res.text, what);
    }
  }
  assert.deepEqual(server.errors, []);
});

Deno.test("POST /run/start never answers 500 to fuzzed run_id and run_dir values", async () => {
  const seed = seedFromEnv(0x9a7e5);
  const rng = new Rng(seed);
  await using tmp = await tempDir();
  await using server = await serverCollectingErrors(tmp.path);
  await Deno.mkdir(join(tmp.path, "001"));
  await Deno.symlink("/", join(tmp.path, "root-link"));
  const parts = [
    "a",
    "night-1",
    ".",
    "..",
    "/",
    "//",
    "\\",
    "\u0000",
    "\u0007",
    "\ud800",
    "\udc00",
    "é",
    "🔭",
    "runs.ndjson",
    ".lock",
    "telemetry.ndjson",
    "site_20260101.ndjson",
    "001",
    "root-link",
    "%2F",
    " ",
    "x".repeat(255),
    "y".repeat(256),
  ];
  const deadline = Date.now() + 15_000;
  for (let i = 0; i < 300 && Date.now() < deadline; i++) {
    const piece = () => {
      let s = "";
      for (let n = rng.int(1, 8); n > 0; n--) s += rng.pick(parts);
      return rng.chance(0.05) ? s.repeat(rng.int(10, 40)) : s;
    };
    const body: Record<string, string> = {};
    if (rng.chance(0.6)) body.run_dir = piece();
    if (rng.chance(0.5) || body.run_dir === undefined) body.run_id = piece();
    const res = await startRun(server.url, body);
    const what = `seed ${seed} #${i}: ${JSON.stringify(body).slice(0, 120)}`;
    assert.ok([201, 400].includes(res.status), `${what}: ${res.status} ${res.text.slice(0, 300)}`);
    if (res.status === 400) assertProblem(400, "application/problem+json", res.text, what);
  }
  assert.deepEqual(server.errors, [], `seed ${seed}`);
  await assert.rejects(Deno.lstat("/telemetry.ndjson"), Deno.errors.NotFound);
});

Deno.test("the server answers a Host header with a bad port with 400 problem+json, bound to loopback or not", async () => {
  for (const bound of ["127.0.0.1", "0.0.0.0"]) {
    await using tmp = await tempDir();
    await using server = await serverCollectingErrors(tmp.path, bound);
    const hosts = [
      "localhost:99999",
      "localhost:65536",
      "127.0.0.1:100000",
      "[::1]:123456",
      "localhost:99999999999",
    ];
    if (bound === "0.0.0.0") hosts.push("[::1", "a b", "%", "localhost:+1", "[::1]x");
    for (const host of hosts) {
      const res = await rawHttp(
        server.port,
        `GET /health HTTP/1.1\r\nHost: ${host}\r\nConnection: close\r\n\r\n`,
      );
      const what = `bound to ${bound}, Host ${JSON.stringify(host)}`;
      assert.equal(res.status, 400, `${what}: ${res.body}`);
      assertProblem(400, res.headers.get("content-type"), res.body, what);
    }
    assert.deepEqual(server.errors, [], bound);
  }
});

Deno.test("the server answers fuzzed loopback Host forms with 200, 400 or 403, never 500", async () => {
  await using tmp = await tempDir();
  await using server = await serverCollectingErrors(tmp.path);
  const seed = seedFromEnv(0x4057);
  const rng = new Rng(seed);
  const heads = [
    "localhost",
    "127.0.0.1",
    "[::1]",
    "[0:0:0:0:0:0:0:1]",
    "[::ffff:127.0.0.1]",
    "LOCALHOST",
  ];
  const tails = ["", ":", ":0", ":6562", ":65535", ":65536", ":-1", ":0x10", ":６５", "."];
  for (let i = 0; i < 60; i++) {
    const host = rng.pick(heads) + rng.pick(tails);
    const res = await rawHttp(
      server.port,
      `GET /health HTTP/1.1\r\nHost: ${host}\r\nConnection: close\r\n\r\n`,
    );
    assert.ok([200, 400, 403].includes(res.status), `seed ${seed}, Host ${host}: ${res.status}`);
  }
  assert.deepEqual(server.errors, [], `seed ${seed}`);
});

Deno.test("an unexpected error is answered with a generic 500 detail that leaks no internals", async () => {
  await using tmp = await tempDir();
  await using server = await serverCollectingErrors(tmp.path);
  const secret = `${tmp.path}/internal-state: token=abc`;
  // A fault below the service that no domain error describes.
  server.service.startRun = () => Promise.reject(new RangeError(secret));
  const res = await startRun(server.url, {});
  assert.equal(res.status, 500);
  const { detail } = assertProblem(500, "application/problem+json", res.text, "500");
  assert.ok(!detail.includes(secret) && !detail.includes(tmp.path), detail);
  assert.equal(server.errors.length, 1);
});

Deno.test("unexpectedErrorLine() logs an error's class and message on one line, without a stack trace", () => {
  const err = new TypeError("first line\n    at secret (file:///x.ts:1:1)\nlast");
  const line = unexpectedErrorLine(err);
  assert.equal(
    line,
    "unexpected TypeError while answering a request: first line at secret (file:///x.ts:1:1) last",
  );
  assert.ok(!line.includes("\n"));
  assert.equal(unexpectedErrorLine("text"), "unexpected string while answering a request: text");
});

// --- 3. symbolic links never lead a write outside -----------------------------------------------

Deno.test("POST /run/start refuses a run_id whose directory is a symlink leading outside", async () => {
  await using tmp = await tempDir();
  await using outside = await tempDir();
  await Deno.symlink(outside.path, join(tmp.path, "evil"));
  await using server = await serverCollectingErrors(tmp.path);
  const res = await startRun(server.url, { run_id: "evil" });
  assert.equal(res.status, 400, res.text);
  assertProblem(400, "application/problem+json", res.text, "run_id evil");
  assert.deepEqual(await listTree(outside.path), []);
});

Deno.test("POST /run/start without id or dir steps past a numbered symlink instead of following it", async () => {
  await using tmp = await tempDir();
  await using outside = await tempDir();
  await Deno.mkdir(join(tmp.path, "001"));
  await Deno.symlink(outside.path, join(tmp.path, "002"));
  await Deno.writeTextFile(join(tmp.path, "003"), "a file");
  await using server = await serverCollectingErrors(tmp.path);
  const res = await startRun(server.url, {});
  assert.equal(res.status, 201, res.text);
  assert.equal(JSON.parse(res.text).run_id, "004");
  assert.deepEqual(await listTree(outside.path), []);
});

Deno.test("POST /run/start refuses a run directory whose own files are symlinks, and writes through none", async () => {
  await using tmp = await tempDir();
  await using outside = await tempDir();
  await Deno.writeTextFile(join(outside.path, "victim"), "precious\n");
  const names = ["telemetry.ndjson", "telemetry.ndjson.torn", ".seq-mark.json"];
  for (const [i, name] of names.entries()) {
    for (const target of ["victim", `missing-${i}`]) {
      const runId = `r-${i}-${target}`;
      await Deno.mkdir(join(tmp.path, runId));
      await Deno.symlink(join(outside.path, target), join(tmp.path, runId, name));
    }
  }
  const before = await listTree(outside.path);
  await using server = await serverCollectingErrors(tmp.path);
  for (const [i, name] of names.entries()) {
    for (const target of ["victim", `missing-${i}`]) {
      const res = await startRun(server.url, { run_id: `r-${i}-${target}` });
      const what = `${name} -> ${target}`;
      assert.equal(res.status, 400, `${what}: ${res.text}`);
      assert.match(JSON.parse(res.text).detail, /is a symbolic link, not a regular file/, what);
    }
  }
  assert.deepEqual(await listTree(outside.path), before);
  assert.equal(await Deno.readTextFile(join(outside.path, "victim")), "precious\n");
});

Deno.test("POST /run/start refuses a run directory whose telemetry.ndjson is a directory, with 400", async () => {
  await using tmp = await tempDir();
  await Deno.mkdir(join(tmp.path, "001", "telemetry.ndjson"), { recursive: true });
  await using server = await serverCollectingErrors(tmp.path);
  const res = await startRun(server.url, { run_id: "001" });
  assert.equal(res.status, 400, res.text);
  assert.match(JSON.parse(res.text).detail, /is a directory, not a regular file/);
  assert.deepEqual(server.errors, []);
});

Deno.test("the service refuses to start on a .lock that is a symlink, in one line, and leaves its target alone", async () => {
  await using tmp = await tempDir();
  await using outside = await tempDir();
  await Deno.writeTextFile(join(outside.path, "victim"), "precious\n");
  for (const target of ["victim", "missing"]) {
    await Deno.remove(join(tmp.path, ".lock")).catch(() => {});
    await Deno.symlink(join(outside.path, target), join(tmp.path, ".lock"));
    const { code, stderr } = await failedStart(tmp.path);
    assert.notEqual(code, 0);
    assert.equal(stderr.trim().split("\n").length, 1, stderr);
    assert.match(stderr, /\.lock is a symbolic link, not a regular file/);
    assert.deepEqual(await listTree(outside.path), ["victim (9)"]);
  }
});

Deno.test("the service moves aside symlinks planted at its file names at start-up and writes through none", async () => {
  await using tmp = await tempDir();
  await using outside = await tempDir();
  const night = dayKey(Date.now(), "UTC");
  const planted = [".seq-mark.json", ".snapshot.json", ".active-run.json", "runs.ndjson"];
  planted.push(`site_${night}.ndjson`, `site_${night}.ndjson.torn`);
  for (const [i, name] of planted.entries()) {
    await Deno.writeTextFile(join(outside.path, `victim-${i}`), "precious\n");
    await Deno.symlink(join(outside.path, `victim-${i}`), join(tmp.path, name));
  }
  const before = await listTree(outside.path);
  const server = await spawnCliServer({ siteDir: tmp.path, port: freePort() });
  try {
    for (let i = 0; i < 3; i++) {
      const res = await send(`${server.url}/event`, {
        method: "POST",
        headers: JSON_HEADERS,
        body: JSON.stringify({ type: "probe", data: { i }, store_permanently: i !== 1 }),
      });
      assert.equal(res.status, 200, res.text);
    }
    assert.equal((await startRun(server.url, { run_id: "n1" })).status, 201);
    assert.equal((await send(`${server.url}/shutdown`, { method: "POST" })).status, 202);
    assert.equal((await server.child.status).code, 0, server.output());
  } finally {
    await server.kill("SIGKILL");
  }
  assert.deepEqual(await listTree(outside.path), before);
  for (const name of planted) {
    assert.match(server.output(), new RegExp(`${name.replaceAll(".", "\\.")} was a symbolic link`));
  }
  assert.equal((await Deno.lstat(join(tmp.path, `site_${night}.ndjson`))).isFile, true);
});

Deno.test("a site file planted as a symlink while the service runs is refused, not written through", async () => {
  await using tmp = await tempDir();
  await using outside = await tempDir();
  await Deno.writeTextFile(join(outside.path, "victim"), "precious\n");
  await using service = await openService(tmp.path);
  await Deno.symlink(join(outside.path, "victim"), join(tmp.path, `site_${NIGHT_T0}.ndjson`));
  await assert.rejects(service.record([{ type: "probe", data: {} }]), /symbolic link/);
  assert.equal(await Deno.readTextFile(join(outside.path, "victim")), "precious\n");
});

Deno.test("the service does not resume a saved run whose directory is a symlink leading outside", async () => {
  await using tmp = await tempDir();
  await using outside = await tempDir();
  const site = await Deno.realPath(tmp.path);
  await Deno.symlink(outside.path, join(site, "link"));
  await Deno.writeTextFile(
    join(site, ".active-run.json"),
    JSON.stringify({
      run_id: "link",
      run_dir: join(site, "link"),
      started_at: "2025-01-01T00:00:00.000Z",
      stopped_at: null,
      events: 0,
      meta: {},
    }),
  );
  const warnings: string[] = [];
  await using service = await TelemetryService.open({
    siteDir: site,
    timeZone: "UTC",
    onWarning: (m) => warnings.push(m),
  });
  assert.equal(service.run, undefined);
  assert.match(warnings.join("\n"), /Run link was not resumed: .*not inside the site directory/);
  await service.record([{ type: "probe", data: {} }]);
  assert.deepEqual(await listTree(outside.path), []);
});
