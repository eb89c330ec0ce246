/**
 * The InfluxDB write API (`http/influx_routes.ts`, docs/http-api.md) against a real server on
 * loopback and its real files: 204 and the stored events, InfluxDB's partial write naming the
 * refused lines with every refusal in the rejection log, gzip bodies, precisions, the token in
 * every form its clients send it, the access modes, `/ping`, and `Idempotency-Key`.
 *
 * @module
 */

import assert from "node:assert/strict";
import { gzipSync } from "node:zlib";
import type { Rejection } from "../../http/types.ts";
import { INFLUXDB_VERSION } from "../../http/influx_routes.ts";
import { parseEnvelope, readSiteLines, tempDir, testServer } from "../_shared/util.ts";
import { curl, netns, netnsUnavailable } from "../_shared/net.ts";
import { Rng } from "../_shared/fault_util.ts";

interface Answer {
  status: number;
  headers: Headers;
  /** The body's text ("" for none). */
  text: string;
}

/** POSTs line protocol (text or bytes) to `path` of `base` and returns the answer. */
async function write(
  base: string,
  path: string,
  body: string | Uint8Array<ArrayBuffer>,
  headers: Record<string, string> = {},
): Promise<Answer> {
  const res = await fetch(`${base}${path}`, { method: "POST", headers, body });
  return { status: res.status, headers: res.headers, text: await res.text() };
}

/** The `error` of an InfluxDB error answer. */
function errorOf(answer: Answer): string {
  assert.equal(answer.headers.get("content-type"), "application/json; charset=utf-8");
  const body = JSON.parse(answer.text);
  assert.deepEqual(Object.keys(body), ["error"]);
  return body.error;
}

/** The stored events, without their seq. */
async function stored(
  siteDir: string,
): Promise<{ type: string; ts: string; data: unknown; meta: unknown }[]> {
  return (await readSiteLines(siteDir)).map(parseEnvelope).map(({ type, ts, data, meta }) => ({
    type,
    ts,
    data,
    meta,
  }));
}

Deno.test("POST /write stores each line as an event: the measurement its type, the fields its data, the tags meta.tags", async () => {
  await using site = await tempDir();
  await using server = await testServer({ siteDir: site.path });
  const answer = await write(
    server.url,
    "/write?db=observatory",
    'weather,site=north,mast=2 wind_mps=2.1,gusts=3i,ok=t,note="calm" 1700000000123456789\nroof open=false 1700000001000000000\n',
  );
  assert.equal(answer.status, 204, answer.text);
  assert.equal(answer.text, "");
  assert.equal(answer.headers.get("x-influxdb-version"), INFLUXDB_VERSION);
  assert.deepEqual(await stored(site.path), [
    {
      type: "weather",
      ts: "2023-11-14T22:13:20.123Z",
      data: { wind_mps: 2.1, gusts: 3, ok: true, note: "calm" },
      meta: { tags: { site: "north", mast: "2" } },
    },
    { type: "roof", ts: "2023-11-14T22:13:21.000Z", data: { open: false }, meta: {} },
  ]);
});

Deno.test("POST /api/v2/write stores the lines as POST /write does, the bucket and org ignored", async () => {
  await using site = await tempDir();
  await using server = await testServer({ siteDir: site.path });
  const answer = await write(
    server.url,
    "/api/v2/write?org=o&bucket=b&precision=s",
    "dome,side=east temp_c=4.5 1700000000",
  );
  assert.equal(answer.status, 204, answer.text);
  assert.deepEqual(await stored(site.path), [
    {
      type: "dome",
      ts: "2023-11-14T22:13:20.000Z",
      data: { temp_c: 4.5 },
      meta: { tags: { side: "east" } },
    },
  ]);
});

Deno.test("POST /write stamps a line without a timestamp with the service's clock", async () => {
  await using site = await tempDir();
  await using server = await testServer({ siteDir: site.path });
  const before = Date.now();
  assert.equal((await write(server.url, "/write", "roof open=t")).status, 204);
  const [event] = await stored(site.path);
  assert.ok(Date.parse(event!.ts) >= before && Date.parse(event!.ts) <= Date.now(), event!.ts);
});

Deno.test("POST /write and /api/v2/write read the timestamps at every precision they take", async () => {
  await using site = await tempDir();
  await using server = await testServer({ siteDir: site.path });
  const cases: [string, string][] = [
    ["/write?precision=n", "1700000000123456789"],
    ["/write?precision=ns", "1700000000123456789"],
    ["/write?precision=u", "1700000000123456"],
    ["/write?precision=ms", "1700000000123"],
    ["/write?precision=s", "1700000000"],
    ["/write?precision=m", "28333333"],
    ["/write?precision=h", "472222"],
    ["/api/v2/write?precision=ns", "1700000000123456789"],
    ["/api/v2/write?precision=us", "1700000000123456"],
    ["/api/v2/write?precision=ms", "1700000000123"],
    ["/api/v2/write?precision=s", "1700000000"],
  ];
  for (const [path, ts] of cases) {
    const answer = await write(
      server.url,
      path,
      `p${cases.findIndex((c) => c[0] === path)} f=1 ${ts}`,
    );
    assert.equal(answer.status, 204, `${path}: ${answer.text}`);
  }
  assert.deepEqual((await stored(site.path)).map((e) => e.ts), [
    "2023-11-14T22:13:20.123Z",
    "2023-11-14T22:13:20.123Z",
    "2023-11-14T22:13:20.123Z",
    "2023-11-14T22:13:20.123Z",
    "2023-11-14T22:13:20.000Z",
    "2023-11-14T22:13:00.000Z",
    "2023-11-14T22:00:00.000Z",
    "2023-11-14T22:13:20.123Z",
    "2023-11-14T22:13:20.123Z",
    "2023-11-14T22:13:20.123Z",
    "2023-11-14T22:13:20.000Z",
  ]);
});

Deno.test("POST /write and /api/v2/write refuse a precision they do not take with 400, storing nothing", async () => {
  await using site = await tempDir();
  await using server = await testServer({ siteDir: site.path });
  const v1 = await write(server.url, "/write?precision=us", "roof open=t 1");
  assert.equal(v1.status, 400);
  assert.equal(
    errorOf(v1),
    'invalid precision "us": /write takes precision=ns (or n), u, ms, s, m or h, the unit of the timestamps (nanoseconds when absent).',
  );
  const v2 = await write(server.url, "/api/v2/write?precision=h", "roof open=t 1");
  assert.equal(v2.status, 400);
  assert.match(
    errorOf(v2),
    /^invalid precision "h": \/api\/v2\/write takes precision=ns, us, ms or s/,
  );
  assert.deepEqual(await readSiteLines(site.path), []);
});

Deno.test("POST /write stores the valid lines of a partial write and answers InfluxDB's 400 naming the others", async () => {
  await using site = await tempDir();
  await using server = await testServer({ siteDir: site.path });
  const body = "a f=1 1000000\ncpu\nb f=2 2000000\nc f=1.2.3\n# a comment\nd f=4 4000000\n";
  const answer = await write(server.url, "/write?db=x", body);
  assert.equal(answer.status, 400);
  assert.equal(
    errorOf(answer),
    "partial write: line 2: unable to parse 'cpu': missing fields; line 4: unable to parse 'c f=1.2.3': invalid number \"1.2.3\" for field \"f\": write a float like -1.5 or 2e3, an integer like 2i, an unsigned integer like 3u (3 lines stored; fix the refused lines and send only them again) dropped=2",
  );
  assert.deepEqual((await stored(site.path)).map((e) => [e.type, e.data]), [
    ["a", { f: 1 }],
    ["b", { f: 2 }],
    ["d", { f: 4 }],
  ]);
});

Deno.test("POST /write names at most 20 refused lines, then their count", async () => {
  await using site = await tempDir();
  await using server = await testServer({ siteDir: site.path });
  const body = Array.from({ length: 25 }, (_, i) => `bad${i}`).join("\n") + "\nok f=1";
  const answer = await write(server.url, "/write", body);
  assert.equal(answer.status, 400);
  const error = errorOf(answer);
  assert.equal(error.match(/unable to parse/g)?.length, 20);
  assert.match(
    error,
    /line 20: unable to parse 'bad19': missing fields; and 5 more lines refused \(1 line stored;/,
  );
  assert.match(error, / dropped=25$/);
  assert.equal((await readSiteLines(site.path)).length, 1);
});

Deno.test("POST /write answers 400 storing nothing when every line is refused", async () => {
  await using site = await tempDir();
  await using server = await testServer({ siteDir: site.path });
  const answer = await write(server.url, "/write", "telemetry.safety safe=t\n");
  assert.equal(answer.status, 400);
  assert.match(
    errorOf(answer),
    /^partial write: line 1: unable to parse 'telemetry.safety safe=t': "type" "telemetry.safety" is reserved.* \(0 lines stored;.* dropped=1$/,
  );
  assert.deepEqual(await readSiteLines(site.path), []);
});

Deno.test("POST /write answers 204 to a body of only comments and blank lines, storing nothing", async () => {
  await using site = await tempDir();
  await using server = await testServer({ siteDir: site.path });
  assert.equal((await write(server.url, "/write", "# nothing\n\n")).status, 204);
  assert.equal((await write(server.url, "/write", "")).status, 204);
  assert.deepEqual(await readSiteLines(site.path), []);
});

Deno.test("POST /write logs every refused line in the rejection log", async () => {
  await using site = await tempDir();
  const rejections: Rejection[] = [];
  await using server = await testServer({
    siteDir: site.path,
    onRejected: (r) => rejections.push(r),
  });
  await write(server.url, "/write", "ok f=1\ncpu\nm f=\nok g=2\n");
  assert.deepEqual(rejections.map((r) => [r.method, r.route, r.status, r.peer, r.detail]), [
    ["POST", "/write", 400, "127.0.0.1", "line 2: unable to parse 'cpu': missing fields"],
    [
      "POST",
      "/write",
      400,
      "127.0.0.1",
      `line 3: unable to parse 'm f=': missing field value for field "f"`,
    ],
  ]);
});

Deno.test("POST /write logs the first 1000 refused lines one by one and the rest as their count", async () => {
  await using site = await tempDir();
  const rejections: Rejection[] = [];
  await using server = await testServer({
    siteDir: site.path,
    onRejected: (r) => rejections.push(r),
  });
  await write(server.url, "/write", "x\n".repeat(1500));
  assert.equal(rejections.length, 1001);
  assert.equal(rejections[999]!.detail, "line 1000: unable to parse 'x': missing fields");
  assert.equal(rejections[1000]!.detail, "and 500 more lines refused, not logged one by one");
});

Deno.test("POST /write inflates a gzip body", async () => {
  await using site = await tempDir();
  await using server = await testServer({ siteDir: site.path });
  const lines = Array.from(
    { length: 500 },
    (_, i) => `weather wind_mps=${i / 10} ${1700000000000000000 + i * 1e9}`,
  ).join("\n");
  const answer = await write(
    server.url,
    "/api/v2/write?bucket=b",
    new Uint8Array(gzipSync(lines)),
    {
      "content-encoding": "gzip",
    },
  );
  assert.equal(answer.status, 204, answer.text);
  assert.equal((await readSiteLines(site.path)).length, 500);
});

Deno.test("POST /write refuses a body marked gzip that is not, and an encoding it does not take, storing nothing", async () => {
  await using site = await tempDir();
  await using server = await testServer({ siteDir: site.path });
  const notGzip = await write(server.url, "/write", "roof open=t", { "content-encoding": "gzip" });
  assert.equal(notGzip.status, 400);
  assert.match(
    errorOf(notGzip),
    /^The body is sent with Content-Encoding: gzip but is not valid gzip \(.+\); send it compressed whole as one gzip member, or without Content-Encoding\.$/,
  );
  const cut = gzipSync("roof open=t\n".repeat(100));
  const truncated = await write(
    server.url,
    "/write",
    new Uint8Array(cut.subarray(0, cut.length - 10)),
    {
      "content-encoding": "gzip",
    },
  );
  assert.equal(truncated.status, 400);
  const br = await write(server.url, "/write", "roof open=t", { "content-encoding": "br" });
  assert.equal(br.status, 415);
  assert.match(errorOf(br), /^Content-Encoding "br" is not accepted/);
  assert.deepEqual(await readSiteLines(site.path), []);
});

Deno.test("POST /write takes any content type: InfluxDB clients send text/plain, octet-stream or curl's form type", async () => {
  await using site = await tempDir();
  await using server = await testServer({ siteDir: site.path });
  for (
    const type of [
      "text/plain; charset=utf-8",
      "application/octet-stream",
      "application/x-www-form-urlencoded",
    ]
  ) {
    assert.equal(
      (await write(server.url, "/write", "roof open=t", { "content-type": type })).status,
      204,
      type,
    );
  }
  assert.equal((await readSiteLines(site.path)).length, 3);
});

const TOKEN = "s3cret-token";

Deno.test("POST /write and /api/v2/write take the token as Token, Bearer, the basic-auth password or ?p=, the user ignored", async () => {
  await using site = await tempDir();
  await using server = await testServer({ siteDir: site.path, token: TOKEN });
  const forms: [string, Record<string, string>, string][] = [
    ["Token", { authorization: `Token ${TOKEN}` }, ""],
    ["Bearer", { authorization: `Bearer ${TOKEN}` }, ""],
    ["basic auth", { authorization: `Basic ${btoa(`anyone:${TOKEN}`)}` }, ""],
    ["basic auth without a user", { authorization: `Basic ${btoa(`:${TOKEN}`)}` }, ""],
    ["?p=", {}, `&u=anyone&p=${TOKEN}`],
  ];
  for (const path of ["/write?db=x", "/api/v2/write?bucket=b"]) {
    for (const [form, headers, query] of forms) {
      const answer = await write(server.url, `${path}${query}`, "roof open=t", headers);
      assert.equal(answer.status, 204, `${path} ${form}: ${answer.text}`);
    }
  }
  assert.equal((await readSiteLines(site.path)).length, 10);
});

Deno.test("POST /write answers a wrong or missing token 401 in every form, as POST /events does, storing nothing", async () => {
  await using site = await tempDir();
  await using server = await testServer({ siteDir: site.path, token: TOKEN });
  const wrong: Record<string, string>[] = [
    { authorization: "Token nope" },
    { authorization: "Bearer nope" },
    { authorization: `Basic ${btoa(`me:nope`)}` },
  ];
  for (const headers of wrong) {
    const answer = await write(server.url, "/write?db=x", "roof open=t", headers);
    assert.equal(answer.status, 401, JSON.stringify(headers));
    assert.match(errorOf(answer), /^The token given for POST \/write is not this server's;/);
    assert.equal(
      answer.headers.get("www-authenticate"),
      'Bearer realm="telemetry", error="invalid_token"',
    );
  }
  const query = await write(server.url, "/write?db=x&p=nope", "roof open=t");
  assert.equal(query.status, 401);
  const none = await write(server.url, "/api/v2/write?bucket=b&u=me", "roof open=t");
  assert.equal(none.status, 401);
  assert.equal(
    errorOf(none),
    "This server requires a token for POST /api/v2/write, and none was given; send it as 'Authorization: Token <token>', 'Authorization: Bearer <token>', the basic-auth password or the p query parameter.",
  );
  const events = await fetch(`${server.url}/events`, {
    method: "POST",
    headers: { "content-type": "application/json", authorization: "Bearer nope" },
    body: "[]",
  });
  await events.body?.cancel();
  assert.equal(events.status, 401, "POST /events refuses the same wrong token");
  assert.deepEqual(await readSiteLines(site.path), []);
});

Deno.test("the InfluxDB token forms other than Bearer are taken by the write routes only", async () => {
  await using site = await tempDir();
  await using server = await testServer({ siteDir: site.path, token: TOKEN });
  for (
    const [path, headers] of [
      [`/events?p=${TOKEN}`, {}],
      ["/events", { authorization: `Token ${TOKEN}` }],
      ["/events", { authorization: `Basic ${btoa(`me:${TOKEN}`)}` }],
    ] as [string, Record<string, string>][]
  ) {
    const res = await fetch(`${server.url}${path}`, {
      method: "POST",
      headers: { "content-type": "application/json", ...headers },
      body: "[]",
    });
    await res.body?.cancel();
    assert.equal(res.status, 401, `${path} ${JSON.stringify(headers)}`);
  }
});

Deno.test("POST /write needs the token under --public-read, and not from this machine under --trust-loopback", async () => {
  await using site = await tempDir();
  {
    await using server = await testServer({ siteDir: site.path, token: TOKEN, publicRead: true });
    assert.equal((await write(server.url, "/write", "roof open=t")).status, 401);
    assert.equal((await write(server.url, "/api/v2/write", "roof open=t")).status, 401);
  }
  {
    await using server = await testServer({
      siteDir: site.path,
      token: TOKEN,
      trustLoopback: true,
    });
    assert.equal((await write(server.url, "/write", "roof open=t")).status, 204);
    assert.equal((await write(server.url, "/api/v2/write", "roof open=t")).status, 204);
  }
  assert.equal((await readSiteLines(site.path)).length, 2);
});

Deno.test({
  name:
    "POST /write from the LAN under --trust-loopback needs the token, in any of its forms, as POST /events does",
  ignore: netnsUnavailable() !== undefined,
  async fn() {
    await using ns = await netns();
    await using site = await tempDir();
    await using server = await testServer({
      siteDir: site.path,
      hostname: "0.0.0.0",
      token: TOKEN,
      trustLoopback: true,
    });
    const lan = `http://${ns.hostAddr}:${server.addr.port}`;
    const from = (path: string, headers: Record<string, string> = {}) =>
      curl(`${lan}${path}`, { method: "POST", ns: ns.name, headers, body: "lan f=1" });
    const events = await curl(`${lan}/events`, {
      method: "POST",
      ns: ns.name,
      headers: { "content-type": "application/json" },
      body: "[]",
    });
    assert.equal(events.status, 401, "POST /events from the LAN without the token");
    assert.equal((await from("/write")).status, 401);
    assert.equal((await from("/api/v2/write")).status, 401);
    assert.equal((await from("/write", { authorization: `Token ${TOKEN}` })).status, 204);
    assert.equal((await from(`/write?u=me&p=${TOKEN}`)).status, 204);
    assert.equal(
      (await from("/api/v2/write", { authorization: `Basic ${btoa(`me:${TOKEN}`)}` })).status,
      204,
    );
    assert.equal(
      (await write(`http://127.0.0.1:${server.addr.port}`, "/write", "local f=1")).status,
      204,
    );
    assert.deepEqual((await stored(site.path)).map((e) => e.type), ["lan", "lan", "lan", "local"]);
  },
});

Deno.test("POST /write refuses a foreign Origin with 403, as every route does", async () => {
  await using site = await tempDir();
  await using server = await testServer({ siteDir: site.path });
  const answer = await write(server.url, "/write", "roof open=t", {
    origin: "https://evil.example",
  });
  assert.equal(answer.status, 403);
  assert.match(errorOf(answer), /origin "https:\/\/evil.example" are not accepted/);
  assert.deepEqual(await readSiteLines(site.path), []);
});

Deno.test("GET and HEAD /ping answer 204 with X-Influxdb-Version, without a token", async () => {
  await using site = await tempDir();
  await using server = await testServer({ siteDir: site.path, token: TOKEN });
  for (const method of ["GET", "HEAD"]) {
    const res = await fetch(`${server.url}/ping`, { method });
    assert.equal(res.status, 204, method);
    assert.equal(res.headers.get("x-influxdb-version"), INFLUXDB_VERSION);
    assert.equal(await res.text(), "");
  }
  const verbose = await fetch(`${server.url}/ping?verbose=true`);
  assert.equal(verbose.status, 200);
  assert.deepEqual(await verbose.json(), { version: INFLUXDB_VERSION });
});

Deno.test("the InfluxDB routes answer a wrong method 405 in InfluxDB's shape", async () => {
  await using site = await tempDir();
  await using server = await testServer({ siteDir: site.path });
  const get = await fetch(`${server.url}/write`);
  assert.equal(get.status, 405);
  assert.equal(get.headers.get("allow"), "POST");
  assert.deepEqual(await get.json(), { error: "GET is not allowed on /write; use POST." });
  const post = await fetch(`${server.url}/ping`, { method: "POST", body: "" });
  assert.equal(post.status, 405);
  assert.deepEqual(await post.json(), { error: "POST is not allowed on /ping; use GET or HEAD." });
});

Deno.test("POST /write answers a retried Idempotency-Key with its first answer, storing nothing again", async () => {
  await using site = await tempDir();
  await using server = await testServer({ siteDir: site.path });
  const body = "a f=1\nbad\nb f=2";
  const first = await write(server.url, "/write", body, { "idempotency-key": "lp-1" });
  assert.equal(first.status, 400);
  assert.equal(first.headers.get("idempotent-replayed"), null);
  const again = await write(server.url, "/write", body, { "idempotency-key": "lp-1" });
  assert.equal(again.status, 400);
  assert.equal(again.headers.get("idempotent-replayed"), "true");
  assert.equal(again.text, first.text);
  const other = await write(server.url, "/write?precision=s", body, { "idempotency-key": "lp-1" });
  assert.equal(other.status, 422, "the same key with another precision is another request");
  const ok = await write(server.url, "/api/v2/write", "c f=3", { "idempotency-key": "lp-2" });
  const okAgain = await write(server.url, "/api/v2/write", "c f=3", { "idempotency-key": "lp-2" });
  assert.deepEqual([ok.status, okAgain.status, okAgain.headers.get("idempotent-replayed")], [
    204,
    204,
    "true",
  ]);
  assert.deepEqual((await stored(site.path)).map((e) => e.type), ["a", "b", "c"]);
});

Deno.test("POST /write commits a body's valid lines as one group: a type cap they would pass refuses them all", async () => {
  await using site = await tempDir();
  await using server = await testServer({ siteDir: site.path, maxTypes: 2 });
  const answer = await write(server.url, "/write", "t1 f=1\nt2 f=2\nt3 f=3");
  assert.equal(answer.status, 400);
  assert.match(
    errorOf(answer),
    /^the snapshot already holds 2 event types, the limit; reuse an existing type or raise --max-types\.$/,
  );
  assert.deepEqual(await readSiteLines(site.path), []);
  assert.equal((await write(server.url, "/write", "t1 f=1\nt2 f=2")).status, 204);
  assert.deepEqual((await readSiteLines(site.path)).map(parseEnvelope).map((e) => e.seq), [1, 2]);
});

Deno.test("POST /write stores a body's lines in one group write, as a POST /events batch", async () => {
  await using site = await tempDir();
  await using server = await testServer({ siteDir: site.path });
  const writes = async () =>
    Number(
      /^telemetry_write_seconds_count (\d+)$/m.exec(
        await (await fetch(`${server.url}/metrics`)).text(),
      )![1],
    );
  const before = await writes();
  const body = Array.from({ length: 50 }, (_, i) => `t${i % 5},n=${i} f=${i}i`).join("\n");
  assert.equal((await write(server.url, "/write", body)).status, 204);
  assert.equal(await writes(), before + 1);
  assert.equal((await readSiteLines(site.path)).length, 50);
});

Deno.test("GET /metrics counts the answers of the InfluxDB routes under their route", async () => {
  await using site = await tempDir();
  await using server = await testServer({ siteDir: site.path });
  await write(server.url, "/write", "roof open=t");
  await write(server.url, "/write", "bad");
  await (await fetch(`${server.url}/ping`)).body?.cancel();
  const text = await (await fetch(`${server.url}/metrics`)).text();
  assert.match(text, /telemetry_http_responses_total\{route="\/write",code="204"\} 1/);
  assert.match(text, /telemetry_http_responses_total\{route="\/write",code="400"\} 1/);
  assert.match(text, /telemetry_http_responses_total\{route="\/ping",code="204"\} 1/);
});

Deno.test("GET /metrics counts the line-protocol lines stored and refused, a replay not again", async () => {
  await using site = await tempDir();
  await using server = await testServer({ siteDir: site.path });
  await write(server.url, "/write", "a f=1\nb f=2\nbad");
  await write(server.url, "/api/v2/write", "c f=3\nworse", { "idempotency-key": "k" });
  await write(server.url, "/api/v2/write", "c f=3\nworse", { "idempotency-key": "k" });
  const text = await (await fetch(`${server.url}/metrics`)).text();
  assert.match(text, /^# TYPE telemetry_line_protocol_lines_total counter$/m);
  assert.match(text, /^telemetry_line_protocol_lines_total\{result="stored"\} 3$/m);
  assert.match(text, /^telemetry_line_protocol_lines_total\{result="refused"\} 2$/m);
});

Deno.test("POST /write stores each line's time and tags as its own, when lines share a second or tags and when they do not", async () => {
  await using site = await tempDir();
  await using server = await testServer({ siteDir: site.path });
  const rng = new Rng(4242);
  const base = Date.UTC(2026, 11, 6, 20, 0, 0);
  let ms = base;
  const expected = new Map<number, { ts: string; tags: Record<string, string> }>();
  const lines: string[] = [];
  for (let n = 0; n < 2000; n++) {
    // Mostly the same second and the same tags as the line before; now and then not.
    const step = rng.next();
    ms += step < 0.6
      ? Math.floor(rng.next() * 3)
      : step < 0.9
      ? 1000
      : Math.floor(rng.next() * 90_000_000);
    const tags: Record<string, string> = rng.next() < 0.8
      ? { station: "ws1" }
      : { station: `ws${n % 7}`, dome: "north" };
    const tagText = Object.entries(tags).map(([k, v]) => `,${k}=${v}`).join("");
    lines.push(`w${tagText} n=${n}i ${ms}`);
    expected.set(n, { ts: new Date(ms).toISOString(), tags });
  }
  const answer = await write(server.url, "/write?db=x&precision=ms", lines.join("\n"));
  assert.equal(answer.status, 204, answer.text);
  const events = await stored(site.path);
  assert.equal(events.length, expected.size);
  for (const event of events) {
    const n = (event.data as { n: number }).n;
    assert.deepEqual(
      { ts: event.ts, tags: (event.meta as { tags: unknown }).tags },
      expected.get(n),
      `line ${n}`,
    );
  }
});
