/**
 * Hostile input (issue 6, docs/http-api.md): a seeded fuzz run of malformed requests against
 * a real server on 127.0.0.1, over `fetch` and over raw TCP for what `fetch` cannot send. Every
 * answer must be a 4xx problem (never a 5xx, never a dropped connection), the server must stay
 * up, and nothing may reach the files or the snapshot.
 *
 * Replay a failing run with `FAULT_SEED=<seed> deno test -A tests/fault_input_test.ts`.
 * @module
 */

import assert from "node:assert/strict";
import { join } from "node:path";
import type { ServerHandle } from "../server.ts";
import { writeJsonAtomic } from "../store/fs.ts";
import { assertProblem, listTree, rawHttp, Rng, seedFromEnv, send } from "./_shared/fault_util.ts";
import { tempDir, testServer } from "./_shared/util.ts";

const SEED = seedFromEnv(0x0bad_1297);
const MAX_BODY = 4096;
const encoder = new TextEncoder();

/** One request of the fuzz run. */
interface Case {
  what: string;
  method: string;
  path: string;
  headers: Record<string, string>;
  body?: BodyInit;
}

const VALID = { type: "status", data: { dome: "open" } };
const JSON_CT: Record<string, string> = { "content-type": "application/json" };

function post(what: string, path: string, body: BodyInit, headers = JSON_CT): Case {
  return { what, method: "POST", path, headers, body };
}

/** `{"type": ..., "data": ...}` with one field replaced by a wrong value. */
function wrongEventField(rng: Rng): [string, Record<string, unknown>] {
  const wrong: Record<string, unknown[]> = {
    type: [1, true, null, [], {}, "", "x".repeat(129)],
    data: [null, [], "text", 3, true, undefined],
    meta: [[], "text", 3, true, { run_id: 7 }, { run_id: "no-run-is-active" }],
    ts: [0, "", "2026-02-30T00:00:00Z", "2026-01-01T00:00:00", "yesterday", {}, true, 1e12],
    store_permanently: ["yes", 1, 0, "false", [], {}],
    make_current: ["no", 1, 0, "true", [], {}],
  };
  const field = rng.pick(Object.keys(wrong));
  const value = rng.pick(wrong[field]!);
  const event: Record<string, unknown> = { ...VALID, [field]: value };
  if (value === undefined) delete event[field];
  return [`${field}=${JSON.stringify(value)}`, event];
}

/** A type with a control character or an unpaired surrogate somewhere in it. */
function badType(rng: Rng): string {
  const bad = rng.pick([
    "\u0000",
    "\u0007",
    "\n",
    "\u001f",
    "\u007f",
    "\u0085",
    "\u009f",
    "\ud800",
    "\udfff",
    "\udc00\ud800",
  ]);
  const at = rng.int(0, 6);
  return "weather".slice(0, at) + bad + "weather".slice(at);
}

function randomPath(rng: Rng): string {
  const known = ["/", "/health", "/ready", "/run", "/run/start", "/run/stop", "/event", "/events"];
  const odd = [
    "/current/%ZZ",
    "/event/",
    "/events/x",
    "/run/",
    "/%00",
    "/..%2f",
    "/EVENT",
    "//event",
  ];
  if (rng.chance(0.5)) return rng.pick([...known, ...odd, "/current", "/metrics", "/shutdown"]);
  const chars = "abcdefghijklmnopqrstuvwxyz0123456789-._~%/";
  return "/" + Array.from({ length: rng.int(0, 20) }, () => rng.pick([...chars])).join("");
}

/** One malformed request; each kind is chosen so that a correct server answers 4xx. */
function fuzzCase(rng: Rng): Case {
  const target = rng.pick(["/event", "/events", "/run/start"]);
  switch (rng.int(0, 11)) {
    case 0: {
      // Random bytes (at least one; an empty /run/start body is a valid derived start).
      return post("random bytes", target, rng.bytes(rng.int(1, 300)));
    }
    case 1: {
      const text = JSON.stringify(rng.chance(0.5) ? VALID : [VALID, VALID]);
      return post(
        "truncated JSON",
        rng.pick(["/event", "/events"]),
        text.slice(0, rng.int(1, text.length - 1)),
      );
    }
    case 2: {
      const lines = [VALID, VALID, VALID].map((e) => JSON.stringify(e)).join("\n");
      const cut = rng.int(lines.lastIndexOf("\n") + 2, lines.length - 1);
      return post("truncated NDJSON", "/events", lines.slice(0, cut), {
        "content-type": "application/x-ndjson",
      });
    }
    case 3: {
      // Just over the limit: declared, or streamed without a length.
      const body = JSON.stringify({
        ...VALID,
        data: { pad: "x".repeat(MAX_BODY + rng.int(0, 64)) },
      });
      if (rng.chance(0.5)) return post("over the limit", target, body);
      const bytes = encoder.encode(body);
      const stream = new ReadableStream<Uint8Array>({
        start(c) {
          for (let i = 0; i < bytes.length; i += 1000) c.enqueue(bytes.slice(i, i + 1000));
          c.close();
        },
      });
      return {
        what: "over the limit, chunked",
        method: "POST",
        path: target,
        headers: JSON_CT,
        body: stream,
      };
    }
    case 4: {
      // Just under (or exactly at) the limit, but with a type that is too long.
      const head = '{"data":{},"type":"';
      const n = MAX_BODY - head.length - 2 - rng.int(0, 40);
      return post("at the limit", rng.pick(["/event", "/events"]), head + "t".repeat(n) + '"}');
    }
    case 5: {
      const [what, event] = wrongEventField(rng);
      if (rng.chance(0.5)) return post(`wrong type: ${what}`, "/event", JSON.stringify(event));
      const batch = [VALID, VALID, VALID];
      batch.splice(rng.int(0, 3), 0, event as typeof VALID);
      return post(`batch with ${what}`, "/events", JSON.stringify(batch));
    }
    case 6: {
      const body = rng.pick<Record<string, unknown>>([
        {
          run_id: rng.pick([
            1,
            true,
            [],
            {},
            "",
            "../x",
            "..%2Fx",
            "a/b",
            "x\u0000y",
            "r".repeat(200),
            ".hidden",
          ]),
        },
        {
          run_dir: rng.pick([
            1,
            true,
            [],
            {},
            "",
            "x\u0000y",
            "/etc",
            "../x",
            ".",
            "a/../..",
            "/tmp/x",
          ]),
        },
        { run_id: "ok", meta: rng.pick([[], "text", 3, true]) },
      ]);
      return post(`run start ${JSON.stringify(body)}`, "/run/start", JSON.stringify(body));
    }
    case 7: {
      const type = badType(rng);
      return post(`bad type ${JSON.stringify(type)}`, "/event", JSON.stringify({ ...VALID, type }));
    }
    case 8: {
      // A valid event with a content type that is not JSON (no header at all for a byte body).
      const ct = rng.pick([
        undefined,
        "text/plain",
        "application/xml",
        "multipart/form-data; boundary=x",
        "application/x-www-form-urlencoded",
        "application/jsonx",
        "json",
        "",
      ]);
      const body = encoder.encode(JSON.stringify(VALID));
      return post(
        `content type ${ct}`,
        rng.pick(["/event", "/events"]),
        body,
        ct === undefined ? {} : {
          "content-type": ct,
        },
      );
    }
    case 9: {
      const method = rng.pick(["PUT", "DELETE", "PATCH", "OPTIONS", "PROPFIND", "LOCK", "FOO"]);
      return { what: `${method} on a path`, method, path: randomPath(rng), headers: {} };
    }
    case 10: {
      let path = randomPath(rng);
      // GET on the paths that exist would answer 200 (or stream forever): make them unknown.
      if (/^\/(?:|health|ready|current|metrics|stream|run)$/.test(path)) path += "/nope";
      if (path.startsWith("/current/") && !path.includes("%ZZ")) path = "/current/never-recorded";
      return { what: "GET on a path", method: "GET", path, headers: {} };
    }
    default: {
      // One bad line in an NDJSON batch; or invalid UTF-8 inside a JSON string.
      if (rng.chance(0.5)) {
        const lines = [VALID, VALID, VALID, VALID].map((e) => JSON.stringify(e));
        lines[rng.int(0, 3)] = rng.pick(["{", "[]", '{"type":"x"}', "null", '"text"', "{}"]);
        return post("NDJSON with a bad line", "/events", lines.join("\n"), {
          "content-type": "application/x-ndjson",
        });
      }
      const ok = encoder.encode(JSON.stringify({ ...VALID, data: { note: "ab" } }));
      const at = ok.indexOf(0x61); // the "a" of "ab"... or of "data"; either breaks UTF-8
      ok[at] = rng.pick([0xff, 0xc0, 0xed, 0x80]);
      return post("invalid UTF-8", rng.pick(["/event", "/events", "/run/start"]), ok);
    }
  }
}

/**
 * What the server holds: its files (names, sizes and bytes) and the snapshot. The snapshot
 * checkpoint (`.snapshot.json`) is left out: the service rewrites it on its own schedule after
 * accepted events, and `/current` already compares what it holds.
 */
async function stateOf(server: ServerHandle, siteDir: string): Promise<string> {
  const files: string[] = [];
  for (const entry of await listTree(siteDir)) {
    if (entry.startsWith(".snapshot.json")) continue;
    const m = /^(.+\.ndjson) \(\d+\)$/.exec(entry);
    files.push(m ? `${entry}: ${await Deno.readTextFile(join(siteDir, m[1]!))}` : entry);
  }
  const current = await send(`${server.url}/current`, {});
  return JSON.stringify({ files, current: current.text });
}

async function seed(server: ServerHandle): Promise<number> {
  let seq = 0;
  for (const type of ["weather", "status"]) {
    const res = await send(`${server.url}/event`, {
      method: "POST",
      headers: JSON_CT,
      body: JSON.stringify({ type, data: { v: 1 } }),
    });
    assert.equal(res.status, 200, res.text);
    seq = JSON.parse(res.text).seq;
  }
  return seq;
}

async function assertSeqContinues(server: ServerHandle, lastSeq: number): Promise<void> {
  const health = await send(`${server.url}/health`, {});
  assert.equal(health.status, 200);
  const res = await send(`${server.url}/event`, {
    method: "POST",
    headers: JSON_CT,
    body: JSON.stringify({ type: "status", data: { after: "fuzz" } }),
  });
  assert.equal(res.status, 200, res.text);
  assert.equal(JSON.parse(res.text).seq, lastSeq + 1, "a refused request consumed a seq");
}

Deno.test("the server answers thousands of malformed requests with 4xx problems and stores nothing", async () => {
  await using tmp = await tempDir();
  const unexpected: unknown[] = [];
  await using server = await testServer({
    siteDir: tmp.path,
    maxBody: MAX_BODY,
    onError: (err) => unexpected.push(err),
  });
  const lastSeq = await seed(server);
  const before = await stateOf(server, tmp.path);
  const rng = new Rng(SEED);
  const deadline = Date.now() + 30_000;
  const statuses = new Map<number, number>();
  let sent = 0;
  // Four connections at a time: concurrency is part of the abuse, and it keeps the run short.
  const worker = async () => {
    while (sent < 3000 && Date.now() < deadline) {
      sent++;
      const c = fuzzCase(rng);
      const context = `${c.what}: ${c.method} ${c.path}`;
      let res;
      try {
        res = await send(`${server.url}${c.path}`, {
          method: c.method,
          headers: c.headers,
          body: c.body ?? null,
        });
      } catch (err) {
        throw new assert.AssertionError({ message: `${context}: the connection failed (${err})` });
      }
      statuses.set(res.status, (statuses.get(res.status) ?? 0) + 1);
      assert.ok(
        res.status >= 400 && res.status < 500,
        `${context}: ${res.status} ${res.text.slice(0, 300)}`,
      );
      // HEAD-less methods only, so every answer carries its problem body.
      assertProblem(res.status, res.contentType, res.text, context);
    }
  };
  await Promise.all([worker(), worker(), worker(), worker()]);
  assert.ok(sent >= 1000, `only ${sent} requests were sent before the deadline`);
  assert.deepEqual(unexpected, []);
  // Most kinds should reach the parser, not just the router.
  for (const status of [400, 404, 405, 413, 415]) assert.ok(statuses.get(status), `no ${status}`);
  assert.equal(await stateOf(server, tmp.path), before);
  await assertSeqContinues(server, lastSeq);
});

Deno.test("the server answers 400 to JSON nested 100000 levels deep and stores nothing", async () => {
  await using tmp = await tempDir();
  const unexpected: unknown[] = [];
  // The default 1 MiB limit, so the nesting reaches the parser.
  await using server = await testServer({
    siteDir: tmp.path,
    onError: (err) => unexpected.push(err),
  });
  const lastSeq = await seed(server);
  const before = await stateOf(server, tmp.path);
  const n = 100_000;
  const arrays = "[".repeat(n) + "]".repeat(n);
  const objects = '{"a":'.repeat(n) + "1" + "}".repeat(n);
  const cases: [string, string][] = [
    ["/event", "[".repeat(n)],
    ["/event", '{"a":'.repeat(n)],
    ["/event", arrays],
    ["/event", objects],
    ["/events", arrays],
    ["/event", `{"type":"status","data":${objects}}`],
    ["/event", `{"type":"status","data":{"x":${arrays}}}`],
    ["/event", `{"type":"status","data":{},"meta":${objects}}`],
    ["/events", `[{"type":"status","data":${objects}}]`],
    ["/run/start", `{"run_id":"deep","meta":${objects}}`],
    ["/run/start", arrays],
  ];
  for (const [path, body] of cases) {
    const res = await send(`${server.url}${path}`, { method: "POST", headers: JSON_CT, body });
    const context = `${path} ${body.slice(0, 40)}...`;
    assert.equal(res.status, 400, `${context}: ${res.text.slice(0, 300)}`);
    assertProblem(400, res.contentType, res.text, context);
  }
  assert.deepEqual(unexpected, []);
  assert.equal(await stateOf(server, tmp.path), before);
  await assertSeqContinues(server, lastSeq);
});

/** Raw requests that reach the handler: each must get a 4xx problem+json. */
function handledRawCases(): [string, Uint8Array | string, boolean][] {
  const event = JSON.stringify(VALID);
  const badUtf8 = encoder.encode(`{"type":"status","data":{"note":"\xff\xfe"}}`);
  // TextEncoder wrote U+00FF as two valid bytes; put raw invalid bytes back in.
  const invalid = new Uint8Array([...badUtf8.slice(0, 30), 0xff, 0xfe, 0xc0, ...badUtf8.slice(30)]);
  const head = (path: string, extra: string, length: number) =>
    `POST ${path} HTTP/1.1\r\nHost: localhost\r\nContent-Type: application/json\r\n${extra}Content-Length: ${length}\r\nConnection: close\r\n\r\n`;
  const withBody = (h: string, body: Uint8Array) => new Uint8Array([...encoder.encode(h), ...body]);
  return [
    [
      "Host evil.example",
      `GET /health HTTP/1.1\r\nHost: evil.example\r\nConnection: close\r\n\r\n`,
      false,
    ],
    ["empty Host", `GET /health HTTP/1.1\r\nHost: \r\nConnection: close\r\n\r\n`, false],
    ["HTTP/1.0 without Host", `GET /health HTTP/1.0\r\n\r\n`, false],
    [
      "Host 127.0.0.2",
      `GET /ready HTTP/1.1\r\nHost: 127.0.0.2\r\nConnection: close\r\n\r\n`,
      false,
    ],
    [
      "Host with a trailing dot",
      `GET /ready HTTP/1.1\r\nHost: localhost.\r\nConnection: close\r\n\r\n`,
      false,
    ],
    [
      "invalid UTF-8 with a right length",
      withBody(head("/event", "", invalid.length), invalid),
      false,
    ],
    ["invalid UTF-8 with a short length", withBody(head("/event", "", 40), invalid), false],
    [
      "invalid UTF-8 with a long length",
      withBody(head("/event", "", invalid.length + 50), invalid),
      true,
    ],
    [
      "a body cut short of its length",
      withBody(head("/events", "", 500), encoder.encode(`[${event}`)),
      true,
    ],
    [
      "a chunked body cut mid-chunk",
      `POST /event HTTP/1.1\r\nHost: localhost\r\nContent-Type: application/json\r\nTransfer-Encoding: chunked\r\n\r\n40\r\n{"type"`,
      true,
    ],
    ["a length over the limit", head("/event", "", 10 * 1024 * 1024), true],
    [
      "a dot-segment path to /shutdown",
      `POST /health/../shutdown HTTP/1.1\r\nHost: evil.example\r\nContent-Length: 0\r\nConnection: close\r\n\r\n`,
      false,
    ],
  ];
}

/** Raw requests that are not valid HTTP/1.1; Deno's HTTP layer answers them itself. */
const PROTOCOL_ERRORS: [string, string][] = [
  [
    "two Host headers",
    `GET /health HTTP/1.1\r\nHost: localhost\r\nHost: evil.example\r\nConnection: close\r\n\r\n`,
  ],
  [
    "a control character in Host",
    `GET /health HTTP/1.1\r\nHost: local\u0001host\r\nConnection: close\r\n\r\n`,
  ],
  ["a garbage request line", `GARBAGE\r\n\r\n`],
  [
    "a non-numeric Content-Length",
    `POST /event HTTP/1.1\r\nHost: localhost\r\nContent-Length: ten\r\n\r\n`,
  ],
];

/**
 * A chunk size that is not hex: Deno's HTTP layer cannot find where the body ends and closes
 * the connection without an answer (outside the service's code; it never sees the request).
 * The server must merely survive it.
 */
const BAD_CHUNK_SIZE =
  `POST /event HTTP/1.1\r\nHost: localhost\r\nContent-Type: application/json\r\nTransfer-Encoding: chunked\r\n\r\nzz\r\n{}\r\n0\r\n\r\n`;

Deno.test("the server answers requests fetch cannot send with 4xx over a real TCP connection", async () => {
  await using tmp = await tempDir();
  const unexpected: unknown[] = [];
  await using server = await testServer({
    siteDir: tmp.path,
    maxBody: MAX_BODY,
    onError: (err) => unexpected.push(err),
  });
  const lastSeq = await seed(server);
  const before = await stateOf(server, tmp.path);
  for (const [what, request, halfClose] of handledRawCases()) {
    const res = await rawHttp(server.addr.port, request, { halfClose });
    assert.ok(res.status >= 400 && res.status < 500, `${what}: ${res.status} ${res.body}`);
    assertProblem(
      res.status,
      res.headers.get("content-type"),
      res.body.split("HTTP/1.1")[0]!,
      what,
    );
  }
  for (const [what, request] of PROTOCOL_ERRORS) {
    // These never reach the handler, so no problem body; but an answer, never a dropped line.
    const res = await rawHttp(server.addr.port, request, { halfClose: true });
    assert.equal(res.status, 400, `${what}: ${JSON.stringify(res.body)}`);
  }
  const chunked = await rawHttp(server.addr.port, BAD_CHUNK_SIZE, { halfClose: true });
  assert.ok(chunked.status === 0 || chunked.status === 400, `bad chunk size: ${chunked.status}`);
  assert.deepEqual(unexpected, []);
  assert.equal(await stateOf(server, tmp.path), before);
  await assertSeqContinues(server, lastSeq);
});

Deno.test("the server accepts data nested 100 levels deep and refuses 101", async () => {
  await using tmp = await tempDir();
  await using server = await testServer({ siteDir: tmp.path });
  const nested = (levels: number) => '{"a":'.repeat(levels - 1) + "{}" + "}".repeat(levels - 1);
  const ok = await send(`${server.url}/event`, {
    method: "POST",
    headers: JSON_CT,
    body: `{"type":"status","data":${nested(100)}}`,
  });
  assert.equal(ok.status, 200, ok.text);
  const deep = await send(`${server.url}/event`, {
    method: "POST",
    headers: JSON_CT,
    body: `{"type":"status","data":${nested(101)}}`,
  });
  assert.equal(deep.status, 400, deep.text);
  assert.match(assertProblem(400, deep.contentType, deep.text, "101 levels").detail, /100 levels/);
});

Deno.test("writeJsonAtomic() leaves no temporary file behind when the write fails", async () => {
  await using tmp = await tempDir();
  const target = join(tmp.path, ".active-run.json");
  await Deno.writeTextFile(target, '{"run_id":"before"}\n');
  // A BigInt cannot be serialised: the write fails after the temporary file was created.
  await assert.rejects(writeJsonAtomic(target, { n: 1n }), TypeError);
  assert.deepEqual(await listTree(tmp.path), [".active-run.json (20)"]);
  assert.equal(await Deno.readTextFile(target), '{"run_id":"before"}\n');
});
