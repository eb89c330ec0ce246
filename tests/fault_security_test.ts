/**
 * Browser and network attacks (issue 6, docs/http-api.md): DNS rebinding, cross-origin
 * pages, browser "simple requests", remote shutdown, path traversal through `run_id`/`run_dir`,
 * the bearer token, and the Deno sandbox of docs/cli.md. Each test checks on the file system that
 * nothing was created where it must not be. tests/server/server_test.ts holds the single-case checks;
 * these run the attack shapes.
 * @module
 */

import assert from "node:assert/strict";
import { join } from "node:path";
import { ConfigError, createHandler, startServer, TelemetryService } from "../server.ts";
import {
  assertProblem,
  freePort,
  listTree,
  rawHttp,
  send,
  spawnCliServer,
} from "./_shared/fault_util.ts";
import { tempDir, testServer } from "./_shared/util.ts";

const VALID = JSON.stringify({ type: "status", data: { dome: "open" } });

/** Paths an attacker would aim at, with a method and body that would succeed from a local tool. */
const TARGETS: [string, string, string][] = [
  ["GET", "/health", ""],
  ["GET", "/current", ""],
  ["GET", "/stream", ""],
  ["POST", "/event", VALID],
  ["POST", "/events", `[${VALID}]`],
  ["POST", "/run/start", '{"run_id":"evil"}'],
  ["POST", "/shutdown", ""],
];

function rawRequest(method: string, path: string, headers: string, body: string): string {
  const length = new TextEncoder().encode(body).length;
  return `${method} ${path} HTTP/1.1\r\n${headers}Content-Type: application/json\r\nContent-Length: ${length}\r\nConnection: close\r\n\r\n${body}`;
}

/** The site directory's files and sizes plus the snapshot: what an attack must not change. */
async function stateOf(
  url: string,
  siteDir: string,
  headers: Record<string, string> = {},
): Promise<string> {
  const current = await send(`${url}/current`, { headers });
  assert.equal(current.status, 200, current.text);
  // The snapshot checkpoint is rewritten on the service's own schedule after accepted events;
  // /current compares what it holds.
  const files = (await listTree(siteDir)).filter((e) => !e.startsWith(".snapshot.json"));
  return JSON.stringify({ files, current: current.text });
}

Deno.test("the server refuses DNS-rebinding Host headers on every path and stores nothing", async () => {
  await using tmp = await tempDir();
  await using server = await testServer({ siteDir: tmp.path });
  const before = await stateOf(server.url, tmp.path);
  const hosts = [
    "evil.example",
    "localhost.evil.example",
    "127.0.0.1.nip.io",
    "",
    "evil.example:6562",
    "localhost@evil.example",
    "localhost.",
    "2130706433", // 127.0.0.1 as one decimal number: resolvers accept it, the check must not
    "127.1",
    "0.0.0.0",
  ];
  for (const host of hosts) {
    for (const [method, path, body] of TARGETS) {
      const what = `${method} ${path} with Host ${JSON.stringify(host)}`;
      const res = await rawHttp(
        server.addr.port,
        rawRequest(method, path, `Host: ${host}\r\n`, body),
      );
      assert.equal(res.status, 403, `${what}: ${res.body}`);
      assertProblem(403, res.headers.get("content-type"), res.body, what);
    }
  }
  assert.equal(await stateOf(server.url, tmp.path), before);
});

Deno.test("the server refuses cross-origin pages, lookalike and null origins, on every path", async () => {
  await using tmp = await tempDir();
  await using server = await testServer({ siteDir: tmp.path });
  const before = await stateOf(server.url, tmp.path);
  const origins = [
    "http://localhost.evil.example",
    "null",
    "http://evil.example",
    "https://127.0.0.1.nip.io",
    "http://localhost@evil.example",
    "http://127.0.0.1.evil.example:6562",
    "file://",
    "chrome-extension://abcdefghijklmnop",
    "",
  ];
  for (const origin of origins) {
    for (const [method, path, body] of TARGETS) {
      const what = `${method} ${path} from Origin ${JSON.stringify(origin)}`;
      const res = await rawHttp(
        server.addr.port,
        rawRequest(method, path, `Host: localhost\r\nOrigin: ${origin}\r\n`, body),
      );
      assert.equal(res.status, 403, `${what}: ${res.body}`);
      assertProblem(403, res.headers.get("content-type"), res.body, what);
      assert.equal(res.headers.get("access-control-allow-origin"), null, what);
    }
  }
  assert.equal(await stateOf(server.url, tmp.path), before);
});

Deno.test("a browser simple request (a text/plain or form post) cannot record an event or start a run", async () => {
  await using tmp = await tempDir();
  await using server = await testServer({ siteDir: tmp.path });
  const before = await stateOf(server.url, tmp.path);
  // A page on another local port passes the Origin check; the content type is what stops it.
  const origin = "http://localhost:8080";
  const simple = [
    "text/plain",
    "text/plain;charset=UTF-8",
    "application/x-www-form-urlencoded",
    "multipart/form-data; boundary=----x",
  ];
  for (const contentType of simple) {
    for (
      const [path, body] of [["/event", VALID], ["/events", `[${VALID}]`], [
        "/run/start",
        '{"run_id":"evil"}',
      ]]
    ) {
      const what = `POST ${path} as ${contentType}`;
      const res = await send(`${server.url}${path!}`, {
        method: "POST",
        headers: { "content-type": contentType, origin },
        body: body!,
      });
      assert.equal(res.status, 415, `${what}: ${res.text}`);
      assertProblem(415, res.contentType, res.text, what);
    }
  }
  // The same form aimed at the body-less endpoints from a foreign site is stopped by its Origin.
  for (const path of ["/shutdown", "/run/stop", "/run/start"]) {
    const res = await send(`${server.url}${path}`, {
      method: "POST",
      headers: { "content-type": "text/plain", origin: "http://evil.example" },
    });
    assert.equal(res.status, 403, `${path}: ${res.text}`);
  }
  assert.equal(await stateOf(server.url, tmp.path), before);
  assert.equal((await send(`${server.url}/health`, {})).status, 200);
});

Deno.test("createHandler() refuses /shutdown from every non-loopback peer address shape", async () => {
  await using tmp = await tempDir();
  await using service = await TelemetryService.open({ siteDir: tmp.path, timeZone: "UTC" });
  let shutdowns = 0;
  const handler = createHandler(service, { onShutdown: () => shutdowns++ });
  const shutdownFrom = async (hostname: string) => {
    const info = {
      remoteAddr: { transport: "tcp", hostname, port: 40000 },
      completed: Promise.resolve(),
    } as Deno.ServeHandlerInfo<Deno.NetAddr>;
    const req = new Request("http://localhost/shutdown", {
      method: "POST",
      headers: { host: "localhost" },
    });
    const res = await handler(req, info);
    return {
      status: res.status,
      contentType: res.headers.get("content-type"),
      text: await res.text(),
    };
  };
  for (
    const peer of [
      "10.0.0.7",
      "192.168.1.10",
      "0.0.0.0",
      "2001:db8::1",
      "::ffff:192.0.2.1",
      "fe80::1",
      "::",
    ]
  ) {
    const res = await shutdownFrom(peer);
    assert.equal(res.status, 403, `peer ${peer}: ${res.text}`);
    assertProblem(403, res.contentType, res.text, `peer ${peer}`);
  }
  await new Promise((resolve) => setTimeout(resolve, 0)); // onShutdown runs on a timer
  assert.equal(shutdowns, 0);
  // The same request from a loopback peer (IPv4-mapped here) is honoured: the check is by peer.
  assert.equal((await shutdownFrom("::ffff:127.0.0.1")).status, 202);
  await new Promise((resolve) => setTimeout(resolve, 0));
  assert.equal(shutdowns, 1);
});

/** `run_id` values that are not one safe path segment (docs/http-api.md). */
const BAD_RUN_IDS = [
  "../x",
  "..%2Fx",
  "/tmp/x",
  "a/b",
  "x\u0000y",
  "r".repeat(200),
  "..",
  ".",
  "x\\y",
  " x",
];

/** An absolute path outside any temp dir, of this run only (the suite may run twice at once). */
const ESCAPE = `/tmp/obs-fault-escape-${Deno.pid}-${crypto.randomUUID()}`;

/** `run_dir` values that lead outside the site directory; `outside` and `site` are absolute. */
function badRunDirs(site: string, outside: string): string[] {
  return [
    "../x",
    "..%2Fx", // inside the site dir literally, but its last segment is not a safe run id
    "../outside/run",
    `${outside}/run`,
    outside,
    ESCAPE,
    "link/run", // link -> ../outside
    "link",
    "sub/../../x",
    "a/b/../../..",
    ".",
    "",
    site,
    `${site}/../outside/run`,
    "x\u0000y",
  ];
}

Deno.test("POST /run/start cannot reach outside the site directory through run_id or run_dir", async () => {
  await using parent = await tempDir();
  const site = join(parent.path, "site");
  const outside = join(parent.path, "outside");
  await Deno.mkdir(site);
  await Deno.mkdir(outside);
  await Deno.symlink("../outside", join(site, "link"));
  await using server = await testServer({ siteDir: site });
  const before = await listTree(parent.path);
  const bodies = [
    ...BAD_RUN_IDS.map((run_id) => ({ run_id })),
    ...badRunDirs(site, outside).map((run_dir) => ({ run_dir })),
    ...badRunDirs(site, outside).filter((d) => d !== "..%2Fx").map((run_dir) => ({
      run_id: "fine",
      run_dir,
    })),
  ];
  for (const body of bodies) {
    const res = await send(`${server.url}/run/start`, {
      method: "POST",
      headers: { "content-type": "application/json" },
      body: JSON.stringify(body),
    });
    const what = `run start ${JSON.stringify(body)}`;
    assert.equal(res.status, 400, `${what}: ${res.text}`);
    assertProblem(400, res.contentType, res.text, what);
  }
  assert.deepEqual(await listTree(parent.path), before);
  await assert.rejects(Deno.stat(ESCAPE), Deno.errors.NotFound);
  assert.equal((await send(`${server.url}/run`, {})).status, 404);
  // Percent-encoding is never decoded: "..%2Fx" is a plain directory name inside the site dir.
  const literal = await send(`${server.url}/run/start`, {
    method: "POST",
    headers: { "content-type": "application/json" },
    body: JSON.stringify({ run_id: "fine", run_dir: "..%2Fx" }),
  });
  assert.equal(literal.status, 201, literal.text);
  assert.equal(JSON.parse(literal.text).run_dir, join(await Deno.realPath(site), "..%2Fx"));
});

Deno.test("startServer() refuses every non-loopback or lookalike address without a token", async () => {
  await using parent = await tempDir();
  const siteDir = join(parent.path, "site");
  for (
    const hostname of ["0.0.0.0", "::", "192.0.2.1", "localhost.evil.example", "127.0.0.1.nip.io"]
  ) {
    for (const token of [undefined, ""]) {
      await assert.rejects(
        startServer({ siteDir, hostname, port: 0, token }),
        (err: unknown) => err instanceof ConfigError && /--token/.test(err.message),
        `${hostname} with token ${JSON.stringify(token)}`,
      );
    }
  }
  assert.deepEqual(await listTree(parent.path), []); // refused before touching the disk
});

Deno.test("with a token, every path but /health needs it and near-miss tokens are refused", async () => {
  await using tmp = await tempDir();
  const token = "s3cret-Token-42";
  await using server = await testServer({ siteDir: tmp.path, token });
  const auth = { authorization: `Bearer ${token}` };
  await send(`${server.url}/event`, {
    method: "POST",
    headers: { ...auth, "content-type": "application/json" },
    body: VALID,
  });
  const before = await stateOf(server.url, tmp.path, auth);
  const misses: (string | undefined)[] = [
    undefined,
    "Bearer wrong",
    "Bearer s3cret", // a prefix
    `Bearer ${token}x`, // the token plus more
    `Bearer ${token.toLowerCase()}`,
    `Bearer ${token.slice(0, -1)}`,
    `Basic ${btoa(`user:${token}`)}`,
    token, // no scheme
    "Bearer",
    "Bearer ",
  ];
  const paths: [string, string, string][] = [
    ...TARGETS.filter(([, path]) => path !== "/health"),
    ["GET", "/", ""],
    ["GET", "/ready", ""],
    ["GET", "/run", ""],
    ["GET", "/metrics", ""],
    ["GET", "/current/status", ""],
    ["POST", "/run/stop", ""],
    ["GET", "/nowhere", ""], // 401, not 404: no route is revealed without the token
    ["GET", "/health/", ""],
    ["GET", "/HEALTH", ""],
    ["GET", "/health/../current", ""], // dot segments are removed before the path is compared
    ["GET", `/current?token=${token}`, ""],
  ];
  for (const [method, path, body] of paths) {
    for (const miss of misses) {
      const what = `${method} ${path} with ${JSON.stringify(miss)}`;
      const headers = `Host: localhost\r\n${
        miss === undefined ? "" : `Authorization: ${miss}\r\n`
      }`;
      const res = await rawHttp(server.addr.port, rawRequest(method, path, headers, body));
      assert.equal(res.status, 401, `${what}: ${res.body}`);
      assertProblem(401, res.headers.get("content-type"), res.body, what);
      assert.match(res.headers.get("www-authenticate") ?? "", /^Bearer/, what);
    }
  }
  assert.equal((await send(`${server.url}/health`, {})).status, 200);
  assert.equal((await send(`${server.url}/ready`, { headers: auth })).status, 200);
  assert.equal(await stateOf(server.url, tmp.path, auth), before);
});

Deno.test("the sandboxed server answers 400 to a run_dir outside the site directory and creates nothing", async () => {
  await using parent = await tempDir();
  const site = join(parent.path, "site");
  const outside = join(parent.path, "outside");
  await Deno.mkdir(site);
  await Deno.mkdir(outside);
  await Deno.symlink("../outside", join(site, "link"));
  // Scoped permissions (docs/cli.md): read and write for the site directory only.
  await using server = await spawnCliServer({ siteDir: site, port: freePort() });
  const before = await listTree(parent.path);
  for (
    const runDir of [`${outside}/run`, outside, "/etc/obs-fault", "link/run", "../outside/run"]
  ) {
    const res = await send(`${server.url}/run/start`, {
      method: "POST",
      headers: { "content-type": "application/json" },
      body: JSON.stringify({ run_id: "escape", run_dir: runDir }),
    });
    assert.equal(res.status, 400, `run_dir ${runDir}: ${res.text}\n${server.output()}`);
    assertProblem(400, res.contentType, res.text, runDir);
    assert.match(JSON.parse(res.text).detail, /not inside/);
  }
  assert.equal((await send(`${server.url}/health`, {})).status, 200);
  assert.deepEqual(await listTree(parent.path), before);
  const status = await server.kill("SIGTERM");
  assert.equal(status.code, 0, server.output());
  assert.doesNotMatch(server.output(), /error|NotCapable/i);
});
