/**
 * The command line, driven as a user drives it: subprocesses of `cli.ts` with the scoped
 * permissions of docs/cli.md, against real servers on 127.0.0.1.
 * @module
 */

import assert from "node:assert/strict";
import { join } from "node:path";
import { HELP_TEXT } from "../../cli.ts";
import { permissionFlags, spawnServer, VERSION } from "../../server.ts";
import { CLI, cliRunArgs, freePort, readSiteLines, tempDir, testServer } from "../_shared/util.ts";

const decoder = new TextDecoder();

interface Result {
  code: number;
  stdout: string;
  stderr: string;
}

/** Runs `cli.ts` with the given Deno flags and program arguments. */
async function cli(
  args: string[],
  options: { flags?: string[]; env?: Record<string, string>; stdin?: string } = {},
): Promise<Result> {
  const child = new Deno.Command(Deno.execPath(), {
    args: ["run", "--no-prompt", ...(options.flags ?? ["--allow-all"]), CLI, ...args],
    env: { NO_COLOR: "1", ...options.env },
    stdin: options.stdin === undefined ? "null" : "piped",
    stdout: "piped",
    stderr: "piped",
  }).spawn();
  if (options.stdin !== undefined) {
    const writer = child.stdin.getWriter();
    await writer.write(new TextEncoder().encode(options.stdin));
    await writer.close();
  }
  const out = await child.output();
  return { code: out.code, stdout: decoder.decode(out.stdout), stderr: decoder.decode(out.stderr) };
}

/** Starts `cli.ts telemetry run` as a child and resolves once its ready line is printed. */
async function runServer(siteDir: string, port: number, extra: string[] = [], flags?: string[]) {
  const child = new Deno.Command(Deno.execPath(), {
    args: cliRunArgs(siteDir, port, extra, flags),
    stdout: "piped",
    stderr: "piped",
  }).spawn();
  const lines = child.stdout.pipeThrough(new TextDecoderStream()).getReader();
  let seen = "";
  while (!seen.includes("listening on")) {
    const { value, done } = await lines.read();
    if (done) break;
    seen += value;
  }
  const stderr = new Response(child.stderr).text();
  return {
    child,
    firstOutput: seen,
    url: `http://127.0.0.1:${port}`,
    /** Sends SIGTERM and collects the rest of the output. */
    async stop(): Promise<{ code: number; stdout: string; stderr: string }> {
      try {
        child.kill("SIGTERM");
      } catch {
        // already exited
      }
      let rest = "";
      while (true) {
        const { value, done } = await lines.read();
        if (done) break;
        rest += value;
      }
      const status = await child.status;
      return { code: status.code, stdout: seen + rest, stderr: await stderr };
    },
  };
}

function conn(port: number): string[] {
  return ["--host", "127.0.0.1", "--port", String(port)];
}

Deno.test("obs-utils --help prints the program help", async () => {
  const r = await cli(["--help"]);
  assert.equal(r.code, 0);
  assert.equal(r.stdout, HELP_TEXT[""]!.trimEnd() + "\n");
});

Deno.test("obs-utils --version prints the package version", async () => {
  const r = await cli(["--version"]);
  assert.equal(r.code, 0);
  assert.equal(r.stdout.trim(), `obs-utils ${VERSION}`);
});

Deno.test("obs-utils telemetry <command> --help prints that command's help", async () => {
  for (
    const command of [
      "run",
      "stop",
      "current",
      "post",
      "migrate",
      "forget",
      "start-run",
      "stop-run",
      "runs",
    ]
  ) {
    const r = await cli(["telemetry", command, "--help"]);
    assert.equal(r.code, 0, command);
    assert.equal(r.stdout, HELP_TEXT[command]!.trimEnd() + "\n", command);
  }
});

Deno.test("obs-utils telemetry run rejects an unknown option with exit code 2 and one line", async () => {
  const r = await cli(["telemetry", "run", "--colour"]);
  assert.equal(r.code, 2);
  assert.equal(r.stdout, "");
  assert.equal(r.stderr.trimEnd().split("\n").length, 1);
  assert.match(r.stderr, /--colour/);
  assert.match(r.stderr, /obs-utils telemetry run --help/);
});

Deno.test("obs-utils rejects an unknown command with exit code 2", async () => {
  const r = await cli(["telemetry", "explode"]);
  assert.equal(r.code, 2);
  assert.match(r.stderr, /unknown command "explode"/);
});

Deno.test("obs-utils telemetry run rejects a bad --fsync value with exit code 2", async () => {
  const r = await cli(["telemetry", "run", "--fsync", "sometimes"]);
  assert.equal(r.code, 2);
  assert.match(r.stderr, /--fsync must be always, interval or never/);
});

Deno.test("obs-utils telemetry run rejects an unknown time zone with exit code 2", async () => {
  const r = await cli(["telemetry", "run", "--tz", "Mars/Olympus"]);
  assert.equal(r.code, 2);
  assert.match(r.stderr, /Mars\/Olympus/);
});

Deno.test("obs-utils telemetry run serves under the scoped permissions and logs one ready line", async () => {
  await using tmp = await tempDir();
  const port = freePort();
  const server = await runServer(tmp.path, port);
  assert.match(
    server.firstOutput,
    new RegExp(
      `listening on http://127\\.0\\.0\\.1:${port} \\(site dir .+, zone UTC, fsync interval\\)`,
    ),
  );
  const res = await fetch(`${server.url}/health`);
  assert.deepEqual(await res.json(), { ok: true });
  const done = await server.stop();
  assert.equal(done.code, 0);
  assert.equal(done.stderr, "");
});

Deno.test("obs-utils telemetry run --verbose logs one debug line per event", async () => {
  await using tmp = await tempDir();
  const port = freePort();
  const server = await runServer(tmp.path, port, ["--verbose"]);
  for (const wind of [1, 2]) {
    const post = await cli([
      "telemetry",
      "post",
      "weather",
      "--data",
      `{"wind":${wind}}`,
      ...conn(port),
    ]);
    assert.equal(post.code, 0, post.stderr);
  }
  const done = await server.stop();
  const debug = done.stdout.split("\n").filter((l) => /^\S+Z debug event /.test(l));
  assert.equal(debug.length, 2);
  assert.match(debug[1]!, /site#2 weather .*"wind":2/);
});

Deno.test("obs-utils telemetry run names the flag to add when net permission is missing", async () => {
  await using tmp = await tempDir();
  const port = freePort();
  const granted = permissionFlags({
    siteDir: tmp.path,
    host: "127.0.0.1",
    port: port === 1 ? 2 : 1,
  });
  const r = await cli(
    ["telemetry", "run", "--site-dir", tmp.path, "--host", "127.0.0.1", "--port", String(port)],
    { flags: granted },
  );
  assert.equal(r.code, 1);
  assert.equal(r.stdout, "");
  assert.equal(
    r.stderr.trim(),
    `error: Permission denied: requires net access to 127.0.0.1:${port}; add --allow-net=127.0.0.1:${port}`,
  );
});

Deno.test("obs-utils telemetry run exits 1 with one line when the port is in use", async () => {
  await using tmp = await tempDir();
  const listener = Deno.listen({ hostname: "127.0.0.1", port: 0 });
  const port = (listener.addr as Deno.NetAddr).port;
  try {
    const r = await cli(
      ["telemetry", "run", "--site-dir", tmp.path, "--host", "127.0.0.1", "--port", String(port)],
      { flags: permissionFlags({ siteDir: tmp.path, host: "127.0.0.1", port }) },
    );
    assert.equal(r.code, 1);
    assert.equal(r.stdout, "");
    assert.equal(r.stderr.trimEnd().split("\n").length, 1);
    assert.match(r.stderr, /the port is in use/);
  } finally {
    listener.close();
  }
});

Deno.test("obs-utils telemetry run exits 1 when another server holds the site directory", async () => {
  await using tmp = await tempDir();
  await using first = await testServer({ siteDir: tmp.path });
  const port = freePort();
  const r = await cli(
    ["telemetry", "run", "--site-dir", tmp.path, "--host", "127.0.0.1", "--port", String(port)],
    { flags: permissionFlags({ siteDir: tmp.path, host: "127.0.0.1", port }) },
  );
  assert.equal(r.code, 1);
  const real = await Deno.realPath(tmp.path);
  // docs/cli.md: the holder's pid and address, and the command that stops it.
  assert.equal(
    r.stderr.trim(),
    `error: site directory ${real} is in use by another telemetry server (pid ${Deno.pid} at ${first.url}); stop it with 'obs-utils telemetry stop --host 127.0.0.1 --port ${first.addr.port}' or choose another --site-dir`,
  );
});

Deno.test("obs-utils telemetry run refuses a non-loopback host without a token", async () => {
  await using tmp = await tempDir();
  const r = await cli([
    "telemetry",
    "run",
    "--site-dir",
    tmp.path,
    "--host",
    "0.0.0.0",
    "--port",
    "0",
  ]);
  assert.equal(r.code, 1);
  assert.match(r.stderr, /without a token.*--token.*--insecure/);
});

Deno.test("obs-utils telemetry post prints the envelope that was written", async () => {
  await using tmp = await tempDir();
  await using server = await testServer({ siteDir: tmp.path });
  const port = server.addr.port;
  const r = await cli([
    "telemetry",
    "post",
    "weather",
    "--data",
    '{"wind_mps": 2.1}',
    "--meta",
    '{"source":"cron"}',
    ...conn(port),
  ]);
  assert.equal(r.code, 0, r.stderr);
  const lines = await readSiteLines(tmp.path);
  assert.deepEqual([r.stdout.trim()], lines);
  assert.deepEqual(JSON.parse(r.stdout).meta, { source: "cron" });
});

Deno.test("obs-utils telemetry post reads --data - from stdin", async () => {
  await using tmp = await tempDir();
  await using server = await testServer({ siteDir: tmp.path });
  const r = await cli(["telemetry", "post", "status", "--data", "-", ...conn(server.addr.port)], {
    stdin: '{"dome":"open"}',
  });
  assert.equal(r.code, 0, r.stderr);
  assert.deepEqual(JSON.parse(r.stdout).data, { dome: "open" });
});

Deno.test("obs-utils telemetry post rejects --data that is not a JSON object with exit code 2", async () => {
  const r = await cli(["telemetry", "post", "weather", "--data", "[1,2]"]);
  assert.equal(r.code, 2);
  assert.match(r.stderr, /--data must be a JSON object/);
});

Deno.test("obs-utils telemetry post reports the server's detail when it refuses the event", async () => {
  await using tmp = await tempDir();
  await using server = await testServer({ siteDir: tmp.path });
  const r = await cli([
    "telemetry",
    "post",
    "weather",
    "--ts",
    "2026-02-30T00:00:00Z",
    ...conn(server.addr.port),
  ]);
  assert.equal(r.code, 1);
  assert.match(r.stderr, /^error: The service answered 400: .*calendar date/);
});

Deno.test("obs-utils telemetry current --json prints the snapshot object", async () => {
  await using tmp = await tempDir();
  await using server = await testServer({ siteDir: tmp.path });
  await server.service.record([{ type: "weather", data: { wind_mps: 2.1 } }]);
  const r = await cli(["telemetry", "current", "--json", ...conn(server.addr.port)]);
  assert.equal(r.code, 0, r.stderr);
  assert.deepEqual(Object.keys(JSON.parse(r.stdout)), ["weather"]);
  assert.equal(JSON.parse(r.stdout).weather.data.wind_mps, 2.1);
});

Deno.test("obs-utils telemetry current prints an aligned table with one row per type", async () => {
  await using tmp = await tempDir();
  await using server = await testServer({ siteDir: tmp.path });
  await server.service.record([
    { type: "weather", data: { wind_mps: 2.1 } },
    { type: "status", data: { dome: "open" } },
  ]);
  const r = await cli(["telemetry", "current", ...conn(server.addr.port)]);
  assert.equal(r.code, 0, r.stderr);
  const [header, ...rows] = r.stdout.trimEnd().split("\n");
  assert.match(header!, /^TYPE\s+STREAM:SEQ\s+TS\s+AGE\s+DATA$/);
  assert.equal(rows.length, 2);
  assert.match(rows[0]!, /^weather\s+site:1\s+\S+Z\s+\d+s\s+wind_mps=2\.1$/);
  assert.match(rows[1]!, /^status\s+site:2\s+\S+Z\s+\d+s\s+dome=open$/);
  assert.equal(header!.indexOf("STREAM:SEQ"), rows[1]!.indexOf("site:2"));
});

Deno.test("obs-utils telemetry current TYPE exits 1 when that type was never recorded", async () => {
  await using tmp = await tempDir();
  await using server = await testServer({ siteDir: tmp.path });
  const r = await cli(["telemetry", "current", "rain", ...conn(server.addr.port)]);
  assert.equal(r.code, 1);
  assert.match(r.stderr, /No event of type "rain"/);
});

Deno.test("obs-utils telemetry current exits 1 with a hint when no server answers", async () => {
  const port = freePort();
  const r = await cli(["telemetry", "current", ...conn(port)]);
  assert.equal(r.code, 1);
  assert.match(r.stderr, /No telemetry service answers at http:\/\/127\.0\.0\.1:\d+; start it/);
});

Deno.test("obs-utils telemetry stop shuts the server down and waits for it", async () => {
  await using tmp = await tempDir();
  const port = freePort();
  const server = await runServer(tmp.path, port);
  const r = await cli(["telemetry", "stop", ...conn(port)]);
  assert.equal(r.code, 0, r.stderr);
  assert.match(r.stdout, /stopped/);
  const status = await server.child.status;
  assert.equal(status.code, 0);
  await server.stop();
});

Deno.test("obs-utils telemetry stop exits 1 when nothing is running", async () => {
  const port = freePort();
  const r = await cli(["telemetry", "stop", ...conn(port)]);
  assert.equal(r.code, 1);
  assert.match(r.stderr, /nothing to stop/);
});

Deno.test("obs-utils telemetry run exits 0 on SIGTERM with every acknowledged event on disk", async () => {
  await using tmp = await tempDir();
  const port = freePort();
  const server = await runServer(tmp.path, port);
  const posts = await Promise.all(
    Array.from({ length: 50 }, (_, i) =>
      fetch(`${server.url}/event`, {
        method: "POST",
        headers: { "content-type": "application/json" },
        body: JSON.stringify({ type: "status", data: { i } }),
      }).then((r) => r.text())),
  );
  const done = await server.stop();
  assert.equal(done.code, 0);
  // Concurrent posts are stamped in arrival order, not in the order they were sent.
  const bySeq = posts.toSorted((a, b) => JSON.parse(a).seq - JSON.parse(b).seq);
  assert.deepEqual(await readSiteLines(tmp.path), bySeq);
});

/** Runs `current --follow` under a pseudo-terminal (util-linux `script`), as an operator would. */
function followInPty(port: number) {
  const command = [Deno.execPath(), "run", "--allow-all", CLI, "telemetry", "current", "--follow"]
    .concat(conn(port)).map((a) => `'${a}'`).join(" ");
  const child = new Deno.Command("script", {
    args: ["-qfec", command, "/dev/null"],
    env: { NO_COLOR: "1", TERM: "xterm" },
    stdin: "piped",
    stdout: "piped",
    stderr: "piped",
  }).spawn();
  const reader = child.stdout.pipeThrough(new TextDecoderStream()).getReader();
  let screen = "";
  return {
    get screen(): string {
      return screen;
    },
    /** Reads the terminal until `pattern` appears in what arrived after `from`. */
    async waitFor(pattern: RegExp, from = 0): Promise<number> {
      const deadline = Date.now() + 10_000;
      while (!pattern.test(screen.slice(from))) {
        if (Date.now() > deadline) throw new Error(`timed out waiting for ${pattern}: ${screen}`);
        const { value, done } = await reader.read();
        if (done) throw new Error(`follow exited early: ${screen}`);
        screen += value;
      }
      return screen.length;
    },
    /** Ctrl-C, then the exit status. */
    async stop(): Promise<Deno.CommandStatus> {
      child.kill("SIGINT");
      // Keep reading until it exits: closing the pipe first would kill it with SIGPIPE.
      while (!(await reader.read()).done) { /* drain */ }
      await child.stdin.close().catch(() => {});
      await child.stderr.cancel().catch(() => {});
      return await child.status;
    },
  };
}

const noPty = await hasScript()
  ? false
  : "util-linux 'script' is not installed, so no pseudo-terminal";
if (noPty) {
  // deno-lint-ignore no-console
  console.log(`skipping the current --follow tests: ${noPty}`);
}

Deno.test({
  name: "obs-utils telemetry current --follow redraws when the reading changes",
  ignore: noPty !== false,
  async fn() {
    await using tmp = await tempDir();
    await using server = await testServer({ siteDir: tmp.path });
    const follow = followInPty(server.addr.port);
    try {
      await follow.waitFor(/live|polling/);
      await server.service.record([{ type: "weather", data: { wind_mps: 1.5 } }]);
      await follow.waitFor(/wind_mps=1\.5/);
      await server.service.record([{ type: "weather", data: { wind_mps: 7.25 } }]);
      await follow.waitFor(/wind_mps=7\.25/);
      assert.ok(follow.screen.includes("\x1b[2J")); // redrawn in place, not appended
    } finally {
      await follow.stop();
    }
  },
});

Deno.test({
  name:
    "obs-utils telemetry current --follow shows reconnecting across a server restart and exits 0 on Ctrl-C",
  ignore: noPty !== false,
  async fn() {
    await using tmp = await tempDir();
    const first = await testServer({ siteDir: tmp.path });
    const port = first.addr.port;
    const follow = followInPty(port);
    try {
      await follow.waitFor(/live/);
      await first.service.record([{ type: "weather", data: { wind_mps: 1.5 } }]);
      let mark = await follow.waitFor(/wind_mps=1\.5/);
      await first.shutdown();
      mark = await follow.waitFor(/reconnecting/, mark);
      await using second = await testServer({ siteDir: tmp.path, port });
      await second.service.record([{ type: "weather", data: { wind_mps: 9.5 } }]);
      await follow.waitFor(/live[\s\S]*wind_mps=9\.5/, mark);
    } finally {
      const status = await follow.stop();
      assert.equal(status.code, 0);
    }
  },
});

async function hasScript(): Promise<boolean> {
  try {
    const out = await new Deno.Command("script", {
      args: ["--version"],
      stdout: "null",
      stderr: "null",
    })
      .output();
    return out.success;
  } catch {
    return false;
  }
}

Deno.test("spawnServer() starts a detached server with scoped permissions and stops it cleanly", async () => {
  await using tmp = await tempDir();
  const server = await spawnServer({
    siteDir: tmp.path,
    host: "127.0.0.1",
    port: 0,
    output: "null",
  });
  try {
    const res = await fetch(`${server.url}/ready`);
    const body = await res.json();
    assert.equal(body.ready, true);
    assert.ok(server.pid > 0);
    const cmdline = await Deno.readTextFile(`/proc/${server.pid}/cmdline`);
    const args = cmdline.split("\0");
    assert.ok(args.includes(`--allow-write=${join(tmp.path)}`), args.join(" "));
    assert.ok(!args.includes("--allow-all") && !args.includes("-A"));
  } finally {
    const status = await server.stop();
    assert.equal(status.code, 0);
  }
});

/** Writes a tiny legacy store: two collections, one broken line, one snapshot file. */
async function legacyStore(dir: string): Promise<void> {
  await Deno.mkdir(join(dir, "sub"), { recursive: true });
  await Deno.writeTextFile(
    join(dir, "weather.json"),
    [
      '{"_id": "6f1c2d9e-1111-4c1a-9d1e-000000000001", "type": "weather", "date": "2024-03-01T22:15:03.123456", "data": {"wind": "12.5 deg"}}',
      '{"_id": "6f1c2d9e-1111-4c1a-9d1e-000000000002", "type": "weather", "date": "2024-03-02 01:00:00", "data": {"wind": "10 deg"}}',
      "not json",
    ].join("\n") + "\n",
  );
  await Deno.writeTextFile(
    join(dir, "sub", "status.json"),
    '{"_id": "6f1c2d9e-1111-4c1a-9d1e-000000000003", "date": "2024-03-01T23:00:00Z", "data": 5}\n',
  );
  await Deno.writeTextFile(join(dir, "current_weather.json"), '{"x": 1}\n');
}

Deno.test("obs-utils telemetry migrate converts a legacy store and prints a summary", async () => {
  await using src = await tempDir();
  await using dest = await tempDir();
  await legacyStore(src.path);
  const out = join(dest.path, "out");
  const r = await cli(["telemetry", "migrate", "--source", src.path, "--dest", out]);
  assert.equal(r.code, 0, r.stderr);
  assert.match(r.stdout, /^migrated 3 records from 2 collections into 2 site files/);
  assert.match(r.stdout, /rejects: 1 \(see .*migrate-rejects\.ndjson\)/);
  const day = (await Deno.readTextFile(join(out, "site_20240301.ndjson"))).trimEnd().split("\n");
  assert.equal(day.length, 2);
  assert.deepEqual(JSON.parse(day[1]!).data, { value: 5 });
});

Deno.test("obs-utils telemetry migrate exits 1 naming the files it would overwrite", async () => {
  await using src = await tempDir();
  await using dest = await tempDir();
  await legacyStore(src.path);
  const first = await cli(["telemetry", "migrate", "--source", src.path, "--dest", dest.path]);
  assert.equal(first.code, 0, first.stderr);
  const before = await Deno.readTextFile(join(dest.path, "site_20240301.ndjson"));
  const again = await cli(["telemetry", "migrate", "--source", src.path, "--dest", dest.path]);
  assert.equal(again.code, 1);
  assert.match(again.stderr, /site_20240301\.ndjson.*--force/);
  assert.equal(await Deno.readTextFile(join(dest.path, "site_20240301.ndjson")), before);
  const forced = await cli([
    "telemetry",
    "migrate",
    "--source",
    src.path,
    "--dest",
    dest.path,
    "--force",
  ]);
  assert.equal(forced.code, 0, forced.stderr);
  assert.match(forced.stdout, /replaced: 3 files/);
});

Deno.test("obs-utils telemetry migrate without --dest is a usage error", async () => {
  const r = await cli(["telemetry", "migrate", "--source", "/nonexistent"]);
  assert.equal(r.code, 2);
  assert.match(r.stderr, /--source and --dest are both required/);
});

Deno.test("obs-utils telemetry stop returns only once the site directory is free again", async () => {
  await using tmp = await tempDir();
  const port = freePort();
  const server = await runServer(tmp.path, port);
  // A client stuck halfway through its upload keeps a request in flight during shutdown.
  const stuck = await Deno.connect({ hostname: "127.0.0.1", port });
  await stuck.write(
    new TextEncoder().encode(
      `POST /event HTTP/1.1\r\nHost: 127.0.0.1:${port}\r\nContent-Type: application/json\r\nContent-Length: 100\r\n\r\n{"type":`,
    ),
  );
  try {
    const stop = await cli(["telemetry", "stop", ...conn(port)]);
    assert.equal(stop.code, 0, stop.stderr);
    const next = await runServer(tmp.path, freePort());
    const done = await next.stop();
    assert.match(next.firstOutput, /listening on/, done.stderr);
  } finally {
    stuck.close();
    await server.stop();
  }
});

Deno.test("obs-utils telemetry run --max-types caps the types in the snapshot", async () => {
  await using tmp = await tempDir();
  const port = freePort();
  const server = await runServer(tmp.path, port, ["--max-types", "1"]);
  try {
    const ok = await cli(["telemetry", "post", "weather", ...conn(port)]);
    assert.equal(ok.code, 0, ok.stderr);
    const refused = await cli(["telemetry", "post", "status", ...conn(port)]);
    assert.equal(refused.code, 1);
    assert.match(refused.stderr, /holds 1 event types, the limit; .*--max-types/);
  } finally {
    await server.stop();
  }
});

Deno.test("obs-utils telemetry run exits 1 with one line when the site directory is a file", async () => {
  await using tmp = await tempDir();
  const file = join(tmp.path, "not-a-dir");
  await Deno.writeTextFile(file, "x");
  const r = await cli([
    "telemetry",
    "run",
    "--site-dir",
    file,
    "--host",
    "127.0.0.1",
    "--port",
    "0",
  ]);
  assert.equal(r.code, 1);
  assert.equal(r.stdout, "");
  assert.equal(
    r.stderr.trim(),
    `error: Cannot use site directory ${file}: a file is in the way; choose another --site-dir`,
  );
});

// --- conveniences (issue 14 item 7) and messages (item 5, the CLI half) -------------------------

Deno.test("obs-utils alone prints the usage on stderr and exits 2", async () => {
  const r = await cli([]);
  assert.equal(r.code, 2);
  assert.equal(r.stdout, "");
  assert.equal(r.stderr, HELP_TEXT[""]!.trimEnd() + "\n");
  const group = await cli(["telemetry"]);
  assert.equal(group.code, 2);
  assert.equal(group.stderr, HELP_TEXT.telemetry!.trimEnd() + "\n");
});

Deno.test("obs-utils telemetry --version and obs-utils telemetry help work", async () => {
  const version = await cli(["telemetry", "--version"]);
  assert.equal(version.code, 0);
  assert.equal(version.stdout, `obs-utils ${VERSION}\n`);
  const help = await cli(["telemetry", "help"]);
  assert.equal(help.code, 0);
  assert.equal(help.stdout, HELP_TEXT.telemetry!.trimEnd() + "\n");
  const one = await cli(["telemetry", "help", "start-run"]);
  assert.equal(one.code, 0);
  assert.equal(one.stdout, HELP_TEXT["start-run"]!.trimEnd() + "\n");
  const top = await cli(["help", "telemetry", "runs"]);
  assert.equal(top.stdout, HELP_TEXT.runs!.trimEnd() + "\n");
  const unknown = await cli(["telemetry", "help", "strat-run"]);
  assert.equal(unknown.code, 2);
  assert.match(unknown.stderr, /no command "strat-run"; did you mean start-run\?/);
});

Deno.test("obs-utils suggests the command or flag that was meant, in one line with exit code 2", async () => {
  const cases: [string[], string][] = [
    [
      ["telemetry", "strat-run"],
      'obs-utils telemetry: unknown command "strat-run"; did you mean start-run?',
    ],
    [["telemetry", "stpo"], 'obs-utils telemetry: unknown command "stpo"; did you mean stop?'],
    [["telemtry", "run"], 'obs-utils: unknown command "telemtry"; did you mean telemetry?'],
    [
      ["telemetry", "migrate", "--sorce", "x"],
      "obs-utils telemetry migrate: Unknown option '--sorce'; did you mean --source?",
    ],
    [
      ["telemetry", "post", "x", "--dta", "{}"],
      "obs-utils telemetry post: Unknown option '--dta'; did you mean --data?",
    ],
    [
      ["telemetry", "runs", "--site_dir", "x"],
      "obs-utils telemetry runs: Unknown option '--site_dir'; did you mean --site-dir?",
    ],
  ];
  for (const [args, line] of cases) {
    const r = await cli(args);
    assert.equal(r.code, 2, args.join(" "));
    const [where] = line.split(":");
    assert.equal(r.stderr, `${line} Run '${where} --help' for usage.\n`, args.join(" "));
  }
  // Nothing close: no guess, the list instead.
  const far = await cli(["telemetry", "xyzzy"]);
  assert.match(
    far.stderr,
    /unknown command "xyzzy"; use run, stop, current, post, migrate, forget/,
  );
});

Deno.test("obs-utils telemetry post --file sends an NDJSON file as one batch and prints each envelope", async () => {
  await using tmp = await tempDir();
  await using server = await testServer({ siteDir: tmp.path });
  const file = join(tmp.path, "events.ndjson");
  await Deno.writeTextFile(
    file,
    '{"type":"weather","data":{"wind_mps":2.1}}\n\n{"type":"dome","data":{"open":true},"meta":{"by":"cron"}}\n',
  );
  const r = await cli(["telemetry", "post", "--file", file, ...conn(server.addr.port)]);
  assert.equal(r.code, 0, r.stderr);
  const lines = await readSiteLines(tmp.path);
  assert.deepEqual(r.stdout.trimEnd().split("\n"), lines);
  assert.equal(lines.length, 2);
  assert.deepEqual(JSON.parse(lines[1]!).meta, { by: "cron" });
});

Deno.test("obs-utils telemetry post --file names the bad line and sends nothing", async () => {
  await using tmp = await tempDir();
  await using server = await testServer({ siteDir: tmp.path });
  const file = join(tmp.path, "events.ndjson");
  const cases: [string, string][] = [
    ['{"type":"a","data":{}}\n{"type":"b",\n', `error: ${file} line 2 is not valid JSON`],
    ['{"type":"a","data":{}}\n[1]\n', `error: ${file} line 2 must be a JSON object`],
    [
      '{"type":"a","data":{},"date":"2026-01-01"}\n',
      `error: ${file} line 1 has the field "date"; an event accepts only type, data, meta, ts, store_permanently, make_current`,
    ],
    [
      '[{"type":"a","data":{}},{"type":"b","data":5}]',
      `error: ${file} item 1 (0-based): "data" must be a plain JSON object`,
    ],
    ['{"type":"a","data":{}}\n\n{"type":"","data":{}}\n', `error: ${file} line 3: `],
    // What only the server checks (a real calendar date) comes back with its detail.
    ['{"type":"a","data":{},"ts":"2026-02-30T00:00:00Z"}\n', "error: The service answered 400: "],
    ["\n\n", `error: ${file} holds no events`],
  ];
  for (const [text, start] of cases) {
    await Deno.writeTextFile(file, text);
    const r = await cli(["telemetry", "post", "--file", file, ...conn(server.addr.port)]);
    assert.equal(r.code, 1, text);
    assert.equal(r.stderr.split("\n").length, 2, r.stderr);
    assert.ok(r.stderr.startsWith(start), `${r.stderr} should start with ${start}`);
  }
  assert.deepEqual(await readSiteLines(tmp.path), []);
  const clash = await cli(["telemetry", "post", "x", "--file", file]);
  assert.equal(clash.code, 2);
  assert.match(clash.stderr, /--file takes each event's type.*drop a TYPE/);
});

Deno.test("obs-utils telemetry post --no-current writes the event but leaves the snapshot", async () => {
  await using tmp = await tempDir();
  await using server = await testServer({ siteDir: tmp.path });
  const r = await cli(["telemetry", "post", "calib", "--no-current", ...conn(server.addr.port)]);
  assert.equal(r.code, 0, r.stderr);
  assert.equal((await readSiteLines(tmp.path)).length, 1);
  const res = await fetch(`${server.url}/current/calib`);
  await res.body?.cancel();
  assert.equal(res.status, 404);
});

Deno.test("obs-utils telemetry post gives the same token advice as stop on 401", async () => {
  await using tmp = await tempDir();
  await using server = await testServer({ siteDir: tmp.path, token: "s3cret" });
  const port = server.addr.port;
  const post = await cli(["telemetry", "post", "a", ...conn(port)]);
  const stop = await cli(["telemetry", "stop", ...conn(port)]);
  const advice =
    `error: The service at http://127.0.0.1:${port} requires a token; pass --token or set OBS_TELEMETRY_TOKEN\n`;
  assert.equal(post.code, 1);
  assert.equal(post.stderr, advice);
  assert.equal(stop.stderr, advice);
  const wrong = await cli(["telemetry", "post", "a", "--token", "nope", ...conn(port)]);
  assert.equal(
    wrong.stderr,
    `error: The service at http://127.0.0.1:${port} refused the token given; pass its token with --token or OBS_TELEMETRY_TOKEN\n`,
  );
});

Deno.test("echo garbage | obs-utils telemetry post x --data - fails with one line", async () => {
  for (const stdin of ["garbage\n", "{\n\n", "", "[1,\n2]\n"]) {
    const r = await cli(["telemetry", "post", "x", "--data", "-"], { stdin });
    assert.equal(r.code, 2, JSON.stringify(stdin));
    assert.equal(r.stdout, "");
    assert.equal(r.stderr.split("\n").length, 2, JSON.stringify(r.stderr));
    assert.match(r.stderr, /^obs-utils telemetry post: --data - \(stdin\) /);
  }
});
