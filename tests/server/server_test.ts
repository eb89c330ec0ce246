/**
 * Tests of the HTTP API (docs/http-api.md, docs/storage.md) against real servers on 127.0.0.1.
 * @module
 */

import assert from "node:assert/strict";
import { join } from "node:path";
import denoJson from "../../deno.json" with { type: "json" };
import { ConfigError, createHandler, startServer, TelemetryService } from "../../server.ts";
import {
  getJson,
  postJson,
  rawHttp,
  type RawResponse,
  readSiteLines,
  tempDir,
  testServer,
} from "../_shared/util.ts";

const encoder = new TextEncoder();

interface Problem {
  type: string;
  title: string;
  status: number;
  detail: string;
}

/** Asserts a response is an RFC 9457 problem with this status and returns its body. */
async function problem(res: Response, status: number): Promise<Problem> {
  const text = await res.text();
  assert.equal(res.status, status, text);
  assert.match(res.headers.get("content-type") ?? "", /^application\/problem\+json\b/);
  const body = JSON.parse(text);
  assert.deepEqual(Object.keys(body), ["type", "title", "status", "detail"]);
  assert.equal(body.type, "about:blank");
  assert.equal(body.status, status);
  assert.equal(typeof body.title, "string");
  assert.ok(body.title.length > 0);
  assert.match(body.detail, /^\S.*[.!?]$/s, "detail must be a full sentence");
  return body;
}

function post(url: string, body: BodyInit | null, contentType = "application/json") {
  return fetch(url, { method: "POST", headers: { "content-type": contentType }, body });
}

/** Sends raw HTTP/1.1 bytes over a real TCP connection; for headers `fetch` will not send. */
function rawRequest(port: number, head: string): Promise<RawResponse> {
  return rawHttp(port, head);
}

function rawGet(port: number, path: string, host: string): ReturnType<typeof rawRequest> {
  return rawRequest(port, `GET ${path} HTTP/1.1\r\nHost: ${host}\r\nConnection: close\r\n\r\n`);
}

// --- 2.2 endpoints -------------------------------------------------------------------------------

Deno.test("GET /health answers 200 {ok: true}", async () => {
  await using dir = await tempDir();
  await using server = await testServer({ siteDir: dir.path });
  const res = await fetch(`${server.url}/health`);
  assert.equal(res.status, 200);
  assert.match(res.headers.get("content-type") ?? "", /^application\/json; charset=utf-8$/);
  assert.equal(await res.text(), '{"ok":true}');
});

Deno.test("HEAD /health answers 200 without a body", async () => {
  await using dir = await tempDir();
  await using server = await testServer({ siteDir: dir.path });
  const res = await fetch(`${server.url}/health`, { method: "HEAD" });
  assert.equal(res.status, 200);
  assert.equal(await res.text(), "");
});

Deno.test("GET /ready answers ready, the run state, the package version, the site zone and the site's id", async () => {
  await using dir = await tempDir();
  await using server = await testServer({ siteDir: dir.path });
  // The id of the site's .site.json (docs/storage.md), which the publisher names topics by.
  const { site_id } = JSON.parse(await Deno.readTextFile(`${dir.path}/.site.json`));
  assert.match(site_id, /^[0-9a-f]{8}-[0-9a-f]{4}-/);
  assert.deepEqual((await getJson(`${server.url}/ready`)).body, {
    ready: true,
    run_active: false,
    run_id: null,
    version: denoJson.version,
    zone: "UTC",
    site_id,
  });
  await postJson(`${server.url}/run/start`, { run_id: "r1" });
  assert.deepEqual((await getJson(`${server.url}/ready`)).body, {
    ready: true,
    run_active: true,
    run_id: "r1",
    version: denoJson.version,
    zone: "UTC",
    site_id,
  });
});

Deno.test("POST /run/start answers 201 with the new run record", async () => {
  await using dir = await tempDir();
  await using server = await testServer({ siteDir: dir.path });
  const { status, body } = await postJson(`${server.url}/run/start`, {
    run_id: "m31",
    meta: { target: "M31" },
  });
  assert.equal(status, 201);
  const run = body as Record<string, unknown>;
  assert.deepEqual(Object.keys(run), [
    "run_id",
    "run_dir",
    "started_at",
    "stopped_at",
    "events",
    "meta",
  ]);
  assert.equal(run.run_id, "m31");
  assert.equal(run.run_dir, join(server.service.siteDir, "m31"));
  assert.match(String(run.started_at), /^\d{4}-\d\d-\d\dT\d\d:\d\d:\d\d\.\d{3}Z$/);
  assert.equal(run.stopped_at, null);
  assert.equal(run.events, 0);
  assert.deepEqual(run.meta, { target: "M31" });
});

Deno.test("POST /run/start answers 200 with the same record when the same run is active", async () => {
  await using dir = await tempDir();
  await using server = await testServer({ siteDir: dir.path });
  const first = await postJson(`${server.url}/run/start`, { run_id: "r1" });
  const again = await postJson(`${server.url}/run/start`, { run_id: "r1" });
  assert.equal(again.status, 200);
  assert.deepEqual(again.body, first.body);
});

Deno.test("POST /run/start with an empty body derives run 001", async () => {
  await using dir = await tempDir();
  await using server = await testServer({ siteDir: dir.path });
  const res = await fetch(`${server.url}/run/start`, { method: "POST" });
  assert.equal(res.status, 201);
  assert.equal((await res.json()).run_id, "001");
});

Deno.test("POST /run/start with a JSON null body derives run 001", async () => {
  await using dir = await tempDir();
  await using server = await testServer({ siteDir: dir.path });
  const { status, body } = await postJson(`${server.url}/run/start`, null);
  assert.equal(status, 201);
  assert.equal((body as { run_id: string }).run_id, "001");
});

Deno.test("GET /run answers the active run record with a live events count", async () => {
  await using dir = await tempDir();
  await using server = await testServer({ siteDir: dir.path });
  const started = (await postJson(`${server.url}/run/start`, { run_id: "r1" })).body as object;
  await postJson(`${server.url}/event`, { type: "a", data: {} });
  const { status, body } = await getJson(`${server.url}/run`);
  assert.equal(status, 200);
  assert.deepEqual(body, { ...started, events: 1 });
});

Deno.test("POST /run/stop answers 200 with stopped_at and events filled", async () => {
  await using dir = await tempDir();
  await using server = await testServer({ siteDir: dir.path });
  await postJson(`${server.url}/run/start`, { run_id: "r1" });
  await postJson(`${server.url}/events`, [{ type: "a", data: {} }, { type: "b", data: {} }]);
  const { status, body } = await postJson(`${server.url}/run/stop`, undefined);
  assert.equal(status, 200);
  const run = body as { stopped_at: string; events: number; run_id: string };
  assert.equal(run.run_id, "r1");
  assert.match(run.stopped_at, /Z$/);
  assert.equal(run.events, 2);
});

Deno.test("POST /event answers 200 with the envelope exactly as written to disk", async () => {
  await using dir = await tempDir();
  await using server = await testServer({ siteDir: dir.path });
  const res = await post(
    `${server.url}/event`,
    JSON.stringify({ type: "weather", data: { wind_mps: 2.1, t: "é" }, meta: { src: "x" } }),
  );
  assert.equal(res.status, 200);
  const text = await res.text();
  assert.deepEqual(await readSiteLines(dir.path), [text]);
  const env = JSON.parse(text);
  assert.deepEqual(Object.keys(env), ["seq", "ts", "type", "data", "meta"]);
  assert.equal(env.seq, 1);
});

Deno.test("POST /event normalises a ts with an offset to UTC milliseconds with Z", async () => {
  await using dir = await tempDir();
  await using server = await testServer({ siteDir: dir.path });
  const { status, body } = await postJson(`${server.url}/event`, {
    type: "t",
    data: {},
    ts: "2026-11-22T00:30:00.987654-03:00",
  });
  assert.equal(status, 200);
  assert.equal((body as { ts: string }).ts, "2026-11-22T03:30:00.987Z");
});

Deno.test("POST /events with a JSON array answers every envelope, written in order", async () => {
  await using dir = await tempDir();
  await using server = await testServer({ siteDir: dir.path });
  const items = Array.from({ length: 5 }, (_, i) => ({ type: `t${i % 2}`, data: { i } }));
  const res = await post(`${server.url}/events`, JSON.stringify(items));
  assert.equal(res.status, 200);
  const text = await res.text();
  const lines = await readSiteLines(dir.path);
  assert.equal(text, `{"accepted":5,"events":[${lines.join(",")}]}`);
  assert.deepEqual(lines.map((l) => JSON.parse(l).data.i), [0, 1, 2, 3, 4]);
});

Deno.test("POST /events with NDJSON accepts one event per line, skipping blank lines and CR", async () => {
  await using dir = await tempDir();
  await using server = await testServer({ siteDir: dir.path });
  const body = '{"type":"a","data":{"i":0}}\r\n\n{"type":"b","data":{"i":1}}\n';
  const res = await post(`${server.url}/events`, body, "application/x-ndjson");
  assert.equal(res.status, 200);
  const answer = await res.json();
  assert.equal(answer.accepted, 2);
  assert.deepEqual(
    answer.events.map((e: { type: string; seq: number }) => [e.type, e.seq]),
    [["a", 1], ["b", 2]],
  );
  assert.deepEqual((await readSiteLines(dir.path)).map((l) => JSON.parse(l).type), ["a", "b"]);
});

Deno.test("POST /events with an empty array answers accepted 0", async () => {
  await using dir = await tempDir();
  await using server = await testServer({ siteDir: dir.path });
  const { status, body } = await postJson(`${server.url}/events`, []);
  assert.equal(status, 200);
  assert.deepEqual(body, { accepted: 0, events: [] });
});

Deno.test("POST /events answers 400 naming the bad 0-based index and writes nothing", async () => {
  await using dir = await tempDir();
  await using server = await testServer({ siteDir: dir.path });
  const items = [{ type: "a", data: {} }, { type: "b", data: {} }, { type: "c", data: "x" }];
  const body = await problem(await post(`${server.url}/events`, JSON.stringify(items)), 400);
  assert.match(body.detail, /^Item 2 \(0-based\): /);
  assert.deepEqual(await readSiteLines(dir.path), []);
  const next = await postJson(`${server.url}/event`, { type: "a", data: {} });
  assert.equal((next.body as { seq: number }).seq, 1);
});

Deno.test("POST /events answers 400 naming index 0 of a one-item batch", async () => {
  await using dir = await tempDir();
  await using server = await testServer({ siteDir: dir.path });
  const res = await post(`${server.url}/events`, JSON.stringify([{ type: "", data: {} }]));
  assert.match((await problem(res, 400)).detail, /^Item 0 \(0-based\): /);
});

Deno.test("POST /events answers 400 naming the index of an NDJSON line that is not JSON", async () => {
  await using dir = await tempDir();
  await using server = await testServer({ siteDir: dir.path });
  const body = '{"type":"a","data":{}}\n\n{"type":\n';
  const res = await post(`${server.url}/events`, body, "application/x-ndjson");
  assert.match((await problem(res, 400)).detail, /item 1\b/);
  assert.deepEqual(await readSiteLines(dir.path), []);
});

Deno.test("POST /events answers 400 for a JSON object that is not an array", async () => {
  await using dir = await tempDir();
  await using server = await testServer({ siteDir: dir.path });
  await problem(await post(`${server.url}/events`, '{"type":"a","data":{}}'), 400);
});

Deno.test("GET /current answers an object keyed by type holding the latest envelopes", async () => {
  await using dir = await tempDir();
  await using server = await testServer({ siteDir: dir.path });
  await postJson(`${server.url}/event`, { type: "dome", data: { open: false } });
  const latestDome = (await postJson(`${server.url}/event`, { type: "dome", data: { open: true } }))
    .body;
  const cam = (await postJson(`${server.url}/event`, { type: "cam", data: { t: 1 } })).body;
  const { status, body } = await getJson(`${server.url}/current`);
  assert.equal(status, 200);
  assert.deepEqual(body, { dome: latestDome, cam });
});

Deno.test("GET /current/{type} answers the latest envelope of a URL-encoded type", async () => {
  await using dir = await tempDir();
  await using server = await testServer({ siteDir: dir.path });
  const posted = await postJson(`${server.url}/event`, { type: "dome status/ä", data: { a: 1 } });
  const res = await fetch(`${server.url}/current/${encodeURIComponent("dome status/ä")}`);
  assert.equal(res.status, 200);
  assert.deepEqual(await res.json(), posted.body);
});

Deno.test("POST /event answers responses whose seqs match the file lines for hundreds of concurrent posts", async () => {
  await using dir = await tempDir();
  await using server = await testServer({ siteDir: dir.path });
  const answers = await Promise.all(
    Array.from({ length: 300 }, async (_, i) => {
      const res = await post(`${server.url}/event`, JSON.stringify({ type: "c", data: { i } }));
      assert.equal(res.status, 200);
      return await res.text();
    }),
  );
  const lines = await readSiteLines(dir.path);
  const parsed = lines.map((l) => JSON.parse(l));
  assert.equal(lines.length, 300);
  for (let i = 1; i < parsed.length; i++) assert.ok(parsed[i].seq > parsed[i - 1].seq);
  assert.deepEqual(
    [...answers].sort((a, b) => JSON.parse(a).seq - JSON.parse(b).seq),
    lines,
  );
});

// --- 2.1 errors ----------------------------------------------------------------------------------

Deno.test("POST /event answers 400 for a body that is not JSON", async () => {
  await using dir = await tempDir();
  await using server = await testServer({ siteDir: dir.path });
  assert.match((await problem(await post(`${server.url}/event`, "{nope"), 400)).detail, /JSON/);
});

Deno.test("POST /event answers 400 for an empty body", async () => {
  await using dir = await tempDir();
  await using server = await testServer({ siteDir: dir.path });
  await problem(await post(`${server.url}/event`, null), 400);
});

Deno.test("POST /event answers 400 for a body that is not valid UTF-8", async () => {
  await using dir = await tempDir();
  await using server = await testServer({ siteDir: dir.path });
  const bytes = encoder.encode('{"type":"t","data":{"s":"XX"}}');
  bytes[21] = 0xff;
  bytes[22] = 0xfe;
  const res = await post(`${server.url}/event`, bytes);
  assert.match((await problem(res, 400)).detail, /UTF-8/);
  assert.deepEqual(await readSiteLines(dir.path), []);
});

const badEvents: [string, unknown, RegExp][] = [
  ["an empty type", { type: "", data: {} }, /1 to 128/],
  ["a type of 129 characters", { type: "t".repeat(129), data: {} }, /1 to 128/],
  ["a type with a lone surrogate", { type: "a\ud800b", data: {} }, /surrogate/],
  ["a type with a C0 control character", { type: "a\u0007b", data: {} }, /control/],
  ["a type with a C1 control character", { type: "a\u0085b", data: {} }, /control/],
  ["a type that is a number", { type: 5, data: {} }, /"type" must be a string/],
  ["data that is an array", { type: "t", data: [1] }, /"data" must be a JSON object/],
  ["data that is null", { type: "t", data: null }, /"data" must be a JSON object/],
  ["meta that is a string", { type: "t", data: {}, meta: "m" }, /"meta" must be/],
  ["a ts without a zone", { type: "t", data: {}, ts: "2026-05-10T13:00:00" }, /ts/],
  ["a ts on February 30th", { type: "t", data: {}, ts: "2026-02-30T00:00:00Z" }, /calendar/],
  ["a ts that is a bare number", { type: "t", data: {}, ts: 1778418000000 }, /ISO 8601/],
  ["a ts that is a numeric string", { type: "t", data: {}, ts: "1778418000000" }, /ts/],
  ["a ts that is an empty string", { type: "t", data: {}, ts: "" }, /ts/],
  ["store_permanently that is a string", {
    type: "t",
    data: {},
    store_permanently: "no",
  }, /true or false/],
  ["a body that is an array", [{ type: "t", data: {} }], /JSON object/],
];
for (const [what, body, detail] of badEvents) {
  Deno.test(`POST /event answers 400 for ${what}`, async () => {
    await using dir = await tempDir();
    await using server = await testServer({ siteDir: dir.path });
    const res = await post(`${server.url}/event`, JSON.stringify(body));
    assert.match((await problem(res, 400)).detail, detail);
    assert.deepEqual(await readSiteLines(dir.path), []);
  });
}

Deno.test("POST /event answers 400 when meta.run_id differs from the active run", async () => {
  await using dir = await tempDir();
  await using server = await testServer({ siteDir: dir.path });
  await postJson(`${server.url}/run/start`, { run_id: "r1" });
  const res = await post(
    `${server.url}/event`,
    JSON.stringify({ type: "t", data: {}, meta: { run_id: "other" } }),
  );
  assert.match((await problem(res, 400)).detail, /differs from the active run "r1"/);
});

Deno.test("POST /event answers 400 for a new type beyond maxTypes", async () => {
  await using dir = await tempDir();
  await using server = await testServer({ siteDir: dir.path, maxTypes: 1 });
  assert.equal((await postJson(`${server.url}/event`, { type: "a", data: {} })).status, 200);
  const res = await post(`${server.url}/event`, JSON.stringify({ type: "b", data: {} }));
  assert.match((await problem(res, 400)).detail, /limit/);
});

Deno.test("POST /run/start answers 400 for a run_id that is not one path segment", async () => {
  await using dir = await tempDir();
  await using server = await testServer({ siteDir: dir.path });
  const res = await post(`${server.url}/run/start`, JSON.stringify({ run_id: "../up" }));
  assert.match((await problem(res, 400)).detail, /run_id/);
});

Deno.test("POST /run/start answers 400 for an absolute run_dir outside the site directory", async () => {
  await using dir = await tempDir();
  await using outside = await tempDir();
  await using server = await testServer({ siteDir: dir.path });
  const res = await post(
    `${server.url}/run/start`,
    JSON.stringify({ run_dir: join(outside.path, "r") }),
  );
  assert.match((await problem(res, 400)).detail, /--allow-run-root/);
  assert.deepEqual(await Array.fromAsync(Deno.readDir(outside.path)), []);
});

Deno.test("POST /event answers 401 without the token and sends WWW-Authenticate", async () => {
  await using dir = await tempDir();
  await using server = await testServer({ siteDir: dir.path, token: "s3cret" });
  const res = await post(`${server.url}/event`, JSON.stringify({ type: "t", data: {} }));
  assert.match(res.headers.get("www-authenticate") ?? "", /^Bearer\b/);
  assert.match((await problem(res, 401)).detail, /Authorization: Bearer/);
  assert.deepEqual(await readSiteLines(dir.path), []);
});

Deno.test("POST /event answers 401 with a wrong token", async () => {
  await using dir = await tempDir();
  await using server = await testServer({ siteDir: dir.path, token: "s3cret" });
  const { status } = await postJson(
    `${server.url}/event`,
    { type: "t", data: {} },
    { authorization: "Bearer s3cre" },
  );
  assert.equal(status, 401);
});

Deno.test("POST /event answers 200 with the right bearer token", async () => {
  await using dir = await tempDir();
  await using server = await testServer({ siteDir: dir.path, token: "s3cret" });
  const { status } = await postJson(
    `${server.url}/event`,
    { type: "t", data: {} },
    { authorization: "Bearer s3cret" },
  );
  assert.equal(status, 200);
});

Deno.test("GET /health answers 200 without the token when one is configured", async () => {
  await using dir = await tempDir();
  await using server = await testServer({ siteDir: dir.path, token: "s3cret" });
  assert.equal((await getJson(`${server.url}/health`)).status, 200);
});

Deno.test("startServer() refuses a non-loopback hostname without a token with ConfigError", async () => {
  await using dir = await tempDir();
  const siteDir = join(dir.path, "site");
  await assert.rejects(
    startServer({ siteDir, hostname: "0.0.0.0", port: 0 }),
    (err: unknown) => err instanceof ConfigError && /--token/.test(err.message),
  );
  await assert.rejects(Deno.stat(siteDir), Deno.errors.NotFound); // refused before opening
});

Deno.test("GET /health answers 403 for a Host header that is not loopback", async () => {
  await using dir = await tempDir();
  await using server = await testServer({ siteDir: dir.path });
  const res = await rawGet(server.addr.port, "/health", "evil.example:6562");
  assert.equal(res.status, 403);
  assert.match(res.headers.get("content-type") ?? "", /^application\/problem\+json/);
  assert.match(JSON.parse(res.body).detail, /Host "evil\.example:6562" is not accepted/);
});

Deno.test("GET /health answers 200 for the loopback Host names localhost and [::1]", async () => {
  await using dir = await tempDir();
  await using server = await testServer({ siteDir: dir.path });
  assert.equal((await rawGet(server.addr.port, "/health", "localhost")).status, 200);
  assert.equal((await rawGet(server.addr.port, "/health", "[::1]:6562")).status, 200);
});

Deno.test("POST /event answers 403 for an Origin that is not loopback", async () => {
  await using dir = await tempDir();
  await using server = await testServer({ siteDir: dir.path });
  const res = await fetch(`${server.url}/event`, {
    method: "POST",
    headers: { "content-type": "application/json", origin: "https://evil.example" },
    body: JSON.stringify({ type: "t", data: {} }),
  });
  assert.match((await problem(res, 403)).detail, /origin/);
  assert.deepEqual(await readSiteLines(dir.path), []);
});

Deno.test("GET /current answers 403 for Origin null", async () => {
  await using dir = await tempDir();
  await using server = await testServer({ siteDir: dir.path });
  await problem(await fetch(`${server.url}/current`, { headers: { origin: "null" } }), 403);
});

Deno.test("GET /current answers 200 for a loopback Origin", async () => {
  await using dir = await tempDir();
  await using server = await testServer({ siteDir: dir.path });
  const res = await fetch(`${server.url}/current`, {
    headers: { origin: "http://localhost:3000" },
  });
  assert.equal(res.status, 200);
  assert.equal(res.headers.get("access-control-allow-origin"), null);
  await res.body?.cancel();
});

Deno.test("POST /shutdown answers 403 to a non-loopback peer", async () => {
  await using dir = await tempDir();
  await using service = await TelemetryService.open({ siteDir: dir.path, timeZone: "UTC" });
  let shutdowns = 0;
  const handler = createHandler(service, { onShutdown: () => shutdowns++ });
  const info = {
    remoteAddr: { transport: "tcp", hostname: "192.0.2.1", port: 1 },
    completed: Promise.resolve(),
  } as Deno.ServeHandlerInfo;
  const req = new Request("http://localhost/shutdown", {
    method: "POST",
    headers: { host: "localhost" },
  });
  const res = await handler(req, info);
  assert.match((await problem(res, 403)).detail, /Shutdown is only accepted/);
  await new Promise((r) => setTimeout(r, 0));
  assert.equal(shutdowns, 0);
});

Deno.test("GET /nowhere answers 404", async () => {
  await using dir = await tempDir();
  await using server = await testServer({ siteDir: dir.path });
  assert.match((await problem(await fetch(`${server.url}/nowhere`), 404)).detail, /\/nowhere/);
});

Deno.test("GET /run answers 404 when no run is active", async () => {
  await using dir = await tempDir();
  await using server = await testServer({ siteDir: dir.path });
  await problem(await fetch(`${server.url}/run`), 404);
});

Deno.test("GET /current/{type} answers 404 for a type never recorded", async () => {
  await using dir = await tempDir();
  await using server = await testServer({ siteDir: dir.path });
  await problem(await fetch(`${server.url}/current/none`), 404);
});

Deno.test("GET /event answers 405 with Allow: POST", async () => {
  await using dir = await tempDir();
  await using server = await testServer({ siteDir: dir.path });
  const res = await fetch(`${server.url}/event`);
  assert.equal(res.headers.get("allow"), "POST");
  await problem(res, 405);
});

Deno.test("POST /health answers 405 with Allow: GET, HEAD", async () => {
  await using dir = await tempDir();
  await using server = await testServer({ siteDir: dir.path });
  const res = await post(`${server.url}/health`, "{}");
  assert.equal(res.headers.get("allow"), "GET, HEAD");
  await problem(res, 405);
});

Deno.test("OPTIONS /event answers 405 without CORS headers", async () => {
  await using dir = await tempDir();
  await using server = await testServer({ siteDir: dir.path });
  const res = await fetch(`${server.url}/event`, {
    method: "OPTIONS",
    headers: { origin: "http://localhost:8080", "access-control-request-method": "POST" },
  });
  assert.equal(res.headers.get("allow"), "POST");
  assert.equal(res.headers.get("access-control-allow-origin"), null);
  await problem(res, 405);
});

Deno.test("POST /run/start answers 409 while a different run is active", async () => {
  await using dir = await tempDir();
  await using server = await testServer({ siteDir: dir.path });
  await postJson(`${server.url}/run/start`, { run_id: "r1" });
  const res = await post(`${server.url}/run/start`, JSON.stringify({ run_id: "r2" }));
  assert.match((await problem(res, 409)).detail, /"r1" is active/);
});

Deno.test("POST /run/stop answers 409 when no run is active", async () => {
  await using dir = await tempDir();
  await using server = await testServer({ siteDir: dir.path });
  await problem(await post(`${server.url}/run/stop`, null), 409);
});

Deno.test("POST /event answers 413 for a Content-Length over the limit", async () => {
  await using dir = await tempDir();
  await using server = await testServer({ siteDir: dir.path, maxBody: 1000 });
  const body = JSON.stringify({ type: "t", data: { pad: "x".repeat(1000) } });
  const res = await post(`${server.url}/event`, body);
  assert.match((await problem(res, 413)).detail, /1000 bytes/);
  assert.deepEqual(await readSiteLines(dir.path), []);
});

Deno.test("POST /event answers 413 for a chunked body that grows over the limit", async () => {
  await using dir = await tempDir();
  await using server = await testServer({ siteDir: dir.path, maxBody: 1000 });
  const chunk = encoder.encode(" ".repeat(100));
  let sent = 0;
  const body = new ReadableStream<Uint8Array>({
    pull(controller) {
      if (sent++ < 30) controller.enqueue(chunk);
      else controller.close();
    },
  });
  const res = await post(`${server.url}/event`, body);
  await problem(res, 413);
});

Deno.test("POST /event accepts a chunked body under the limit", async () => {
  await using dir = await tempDir();
  await using server = await testServer({ siteDir: dir.path, maxBody: 1000 });
  const json = encoder.encode(JSON.stringify({ type: "t", data: { a: 1 } }));
  const body = new ReadableStream<Uint8Array>({
    start(controller) {
      controller.enqueue(json.subarray(0, 5));
      controller.enqueue(json.subarray(5));
      controller.close();
    },
  });
  const res = await post(`${server.url}/event`, body);
  assert.equal(res.status, 200);
  await res.body?.cancel();
});

Deno.test("POST /event answers 415 for a text/plain body", async () => {
  await using dir = await tempDir();
  await using server = await testServer({ siteDir: dir.path });
  const res = await post(
    `${server.url}/event`,
    JSON.stringify({ type: "t", data: {} }),
    "text/plain",
  );
  assert.match((await problem(res, 415)).detail, /application\/json/);
  assert.deepEqual(await readSiteLines(dir.path), []);
});

Deno.test("POST /event answers 415 for a form post", async () => {
  await using dir = await tempDir();
  await using server = await testServer({ siteDir: dir.path });
  const res = await fetch(`${server.url}/event`, {
    method: "POST",
    body: new URLSearchParams({ type: "t", data: "{}" }),
  });
  await problem(res, 415);
});

Deno.test("POST /event answers 415 before reading a text/plain body larger than the limit", async () => {
  await using dir = await tempDir();
  await using server = await testServer({ siteDir: dir.path, maxBody: 1024 });
  const res = await post(`${server.url}/event`, "x".repeat(4096), "text/plain");
  assert.match((await problem(res, 415)).detail, /application\/json/);
});

Deno.test("POST /run/stop without a body or Content-Type, as curl -X POST sends it, answers 409 not 415", async () => {
  await using dir = await tempDir();
  await using server = await testServer({ siteDir: dir.path });
  const conn = await Deno.connect({ hostname: "127.0.0.1", port: server.addr.port });
  try {
    await conn.write(
      new TextEncoder().encode(
        `POST /run/stop HTTP/1.1\r\nHost: 127.0.0.1:${server.addr.port}\r\nConnection: close\r\n\r\n`,
      ),
    );
    const answer = new TextDecoder().decode(await new Response(conn.readable).bytes());
    assert.match(answer, /^HTTP\/1\.1 409 /);
  } catch (err) {
    conn.close();
    throw err;
  }
});

Deno.test("POST /event answers 415 for a text/plain body sent with its Content-Length twice", async () => {
  await using dir = await tempDir();
  await using server = await testServer({ siteDir: dir.path });
  const body = '{"type":"form","data":{}}';
  const conn = await Deno.connect({ hostname: "127.0.0.1", port: server.addr.port });
  await conn.write(
    new TextEncoder().encode(
      `POST /event HTTP/1.1\r\nHost: 127.0.0.1\r\nContent-Type: text/plain\r\nContent-Length: ${body.length}\r\nContent-Length: ${body.length}\r\nConnection: close\r\n\r\n${body}`,
    ),
  );
  const answer = new TextDecoder().decode(await new Response(conn.readable).bytes());
  assert.match(answer, /^HTTP\/1\.1 415 /);
  assert.deepEqual(await readSiteLines(dir.path), []);
});

Deno.test("POST /run/start answers 415 for a text/plain body", async () => {
  await using dir = await tempDir();
  await using server = await testServer({ siteDir: dir.path });
  await problem(await post(`${server.url}/run/start`, '{"run_id":"r"}', "text/plain"), 415);
  assert.equal(server.service.run, undefined);
});

Deno.test("POST /event answers 500 when the site file cannot be opened, consuming no seq", async () => {
  await using dir = await tempDir();
  const now = { ms: Date.parse("2026-05-10T13:00:00Z") };
  await using server = await testServer({ siteDir: dir.path, clock: () => now.ms });
  await postJson(`${server.url}/event`, { type: "t", data: { n: 1 } });
  const current = (await getJson(`${server.url}/current`)).body;
  const blocker = join(dir.path, "site_20260511.ndjson");
  await Deno.mkdir(blocker); // a directory where the next day's file must go
  now.ms = Date.parse("2026-05-11T13:00:00Z");
  const res = await post(`${server.url}/event`, JSON.stringify({ type: "t", data: { n: 2 } }));
  assert.match((await problem(res, 500)).detail, /nothing was stored/);
  assert.deepEqual((await getJson(`${server.url}/current`)).body, current);
  await Deno.remove(blocker);
  const next = await postJson(`${server.url}/event`, { type: "t", data: { n: 3 } });
  assert.equal((next.body as { seq: number }).seq, 2);
});

Deno.test("GET /health answers 503 once a shutdown was requested", async () => {
  await using dir = await tempDir();
  await using service = await TelemetryService.open({ siteDir: dir.path, timeZone: "UTC" });
  const handler = createHandler(service, { onShutdown: () => {} });
  const headers = { host: "localhost" };
  const accepted = await handler(
    new Request("http://localhost/shutdown", { method: "POST", headers }),
  );
  assert.equal(accepted.status, 202);
  assert.equal(await accepted.text(), '{"shutting_down":true}');
  await problem(await handler(new Request("http://localhost/health", { headers })), 503);
});

// --- 4.4 graceful shutdown ----------------------------------------------------------------------

Deno.test("POST /shutdown answers 202, finishes the server and releases the lock", async () => {
  await using dir = await tempDir();
  const server = await testServer({ siteDir: dir.path });
  const { status, body } = await postJson(`${server.url}/shutdown`, undefined);
  assert.equal(status, 202);
  assert.deepEqual(body, { shutting_down: true });
  await server.finished;
  await using next = await testServer({ siteDir: dir.path });
  assert.equal((await getJson(`${next.url}/health`)).status, 200);
});

Deno.test("POST /shutdown leaves every acknowledged event on disk", async () => {
  await using dir = await tempDir();
  const server = await testServer({ siteDir: dir.path });
  const posts = Array.from(
    { length: 40 },
    (_, i) => post(`${server.url}/event`, JSON.stringify({ type: "t", data: { i } })),
  );
  const stop = postJson(`${server.url}/shutdown`, undefined);
  const settled = await Promise.allSettled(
    posts.map(async (p) => {
      const res = await p;
      return { status: res.status, text: await res.text() };
    }),
  );
  assert.equal((await stop).status, 202);
  await server.finished;
  const acknowledged = settled.flatMap((s) =>
    s.status === "fulfilled" && s.value.status === 200 ? [s.value.text] : []
  );
  for (const s of settled) {
    if (s.status === "fulfilled" && s.value.status !== 200) assert.equal(s.value.status, 503);
  }
  const lines = await readSiteLines(dir.path);
  for (const line of acknowledged) assert.ok(lines.includes(line), `missing on disk: ${line}`);
});
