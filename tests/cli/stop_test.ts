/**
 * `stop` and `run` when a port is held by another program, and a clean stop's log: no advice that
 * cannot work, no warning for a shutdown that went as asked (docs/cli.md). @module
 */

import assert from "node:assert/strict";
import { CLI, cliRunArgs, freePort, tempDir } from "../_shared/util.ts";
import { permissionFlags } from "../../cli/spawn.ts";

const decoder = new TextDecoder();

async function cli(
  args: string[],
  flags: readonly string[] = ["--allow-all"],
): Promise<{ code: number; stdout: string; stderr: string }> {
  const out = await new Deno.Command(Deno.execPath(), {
    args: ["run", "--no-prompt", ...flags, CLI, ...args],
    stdout: "piped",
    stderr: "piped",
  }).output();
  return { code: out.code, stdout: decoder.decode(out.stdout), stderr: decoder.decode(out.stderr) };
}

/** A web server that is not a telemetry service: 404 for GET, 501 for POST, as many are. */
function otherProgram(): Deno.HttpServer<Deno.NetAddr> {
  return Deno.serve(
    { hostname: "127.0.0.1", port: 0, onListen: () => {} },
    (req) =>
      req.method === "GET"
        ? new Response("<h1>Not Found</h1>", {
          status: 404,
          headers: { "content-type": "text/html" },
        })
        : new Response("Unsupported method", { status: 501 }),
  );
}

Deno.test("stop against a program that is not a telemetry service says so, and sends it no shutdown", async () => {
  let posts = 0;
  const server = Deno.serve({ hostname: "127.0.0.1", port: 0, onListen: () => {} }, (req) => {
    if (req.method === "POST") posts++;
    return new Response(req.method === "GET" ? "nope" : "Unsupported method", {
      status: req.method === "GET" ? 404 : 501,
    });
  });
  try {
    const url = `http://127.0.0.1:${server.addr.port}`;
    const r = await cli([
      "telemetry",
      "stop",
      "--host",
      "127.0.0.1",
      "--port",
      String(server.addr.port),
    ]);
    assert.equal(r.code, 1);
    assert.equal(
      r.stderr,
      `error: the program at ${url} is not a telemetry service; nothing was stopped (check --host and --port)\n`,
    );
    assert.equal(posts, 0);
  } finally {
    await server.shutdown();
  }
});

Deno.test("run on a port another program holds says so in one line, without advising stop", async () => {
  await using dir = await tempDir();
  const server = otherProgram();
  try {
    const port = server.addr.port;
    const r = await cli(
      ["telemetry", "run", "--site-dir", dir.path, "--host", "127.0.0.1", "--port", String(port)],
      permissionFlags({ siteDir: dir.path, host: "127.0.0.1", port }),
    );
    assert.equal(r.code, 1);
    assert.equal(
      r.stderr,
      `error: Cannot listen on 127.0.0.1:${port}: the port is in use by another program, not a telemetry service (it answered HTTP 404); choose another --port or stop that program\n`,
    );
  } finally {
    await server.shutdown();
  }
});

/** Starts `run` as a child and waits for its ready line. */
async function runService(siteDir: string, port: number) {
  const child = new Deno.Command(Deno.execPath(), {
    args: cliRunArgs(siteDir, port),
    stdout: "piped",
    stderr: "piped",
  }).spawn();
  const stdout = child.stdout.pipeThrough(new TextDecoderStream()).getReader();
  const stderr = new Response(child.stderr).text();
  let out = "";
  const deadline = Date.now() + 20_000;
  while (!out.includes("listening on") && Date.now() < deadline) {
    const { value, done } = await stdout.read();
    if (done) break;
    out += value;
  }
  assert.match(out, /listening on/);
  const rest = (async () => {
    while (true) {
      const { value, done } = await stdout.read();
      if (done) return out;
      out += value;
    }
  })();
  return { child, stdout: rest, stderr };
}

Deno.test("run on a port a telemetry service holds names the stop command that reaches it", async () => {
  await using first = await tempDir();
  await using second = await tempDir();
  const port = freePort();
  const service = await runService(first.path, port);
  try {
    const r = await cli(
      [
        "telemetry",
        "run",
        "--site-dir",
        second.path,
        "--host",
        "127.0.0.1",
        "--port",
        String(port),
      ],
      permissionFlags({ siteDir: second.path, host: "127.0.0.1", port }),
    );
    assert.equal(r.code, 1);
    assert.equal(
      r.stderr,
      `error: Cannot listen on 127.0.0.1:${port}: the port is in use by another telemetry service; stop it with 'obs-utils telemetry stop --host 127.0.0.1 --port ${port}' or choose another --port\n`,
    );
  } finally {
    service.child.kill("SIGTERM");
    await service.child.status;
    await service.stdout;
    await service.stderr;
  }
});

Deno.test("a clean stop logs no warn line, though stop polls /health while the service drains", async () => {
  await using dir = await tempDir();
  const port = freePort();
  const service = await runService(dir.path, port);
  const stop = await cli(["telemetry", "stop", "--host", "127.0.0.1", "--port", String(port)]);
  assert.equal(stop.code, 0, stop.stderr);
  assert.equal((await service.child.status).code, 0);
  const log = (await service.stdout) + (await service.stderr);
  assert.doesNotMatch(log, / warn /, log);
});
