import assert from "node:assert/strict";
import { join } from "node:path";
import {
  type ClientOptions,
  type FetchFunction,
  type FollowMessage,
  TelemetryClient,
  TelemetryConnectionError,
  TelemetryHttpError,
} from "../../client.ts";
import { TelemetryEvent } from "../../event.ts";
import type { ServerHandle, ServerOptions } from "../../server.ts";
import { readLines, readSiteLines, tempDir, testServer } from "../_shared/util.ts";

interface Fixture extends AsyncDisposable {
  dir: string;
  server: ServerHandle;
  client: TelemetryClient;
}

/** A real server on a real temp dir, and a client pointed at it. */
async function fixture(
  serverOptions: Partial<ServerOptions> = {},
  clientOptions: ClientOptions = {},
): Promise<Fixture> {
  const tmp = await tempDir();
  const server = await testServer({ siteDir: tmp.path, ...serverOptions });
  return {
    dir: tmp.path,
    server,
    client: new TelemetryClient({ baseUrl: server.url, ...clientOptions }),
    async [Symbol.asyncDispose]() {
      await server.shutdown();
      await tmp[Symbol.asyncDispose]();
    },
  };
}

/** A fetch that records every call and never sends anything, to prove no request was made. */
function recordingFetch(): { calls: string[]; fetch: FetchFunction } {
  const calls: string[] = [];
  return {
    calls,
    fetch(input) {
      calls.push(String(input));
      return Promise.reject(new Error("this test expects no request"));
    },
  };
}

/** A port nothing listens on (bound, then released). */
function closedPort(): number {
  const listener = Deno.listen({ hostname: "127.0.0.1", port: 0 });
  const port = listener.addr.port;
  listener.close();
  return port;
}

function isHttpError(status: number, detail?: RegExp): (err: unknown) => boolean {
  return (err) => {
    assert.ok(err instanceof TelemetryHttpError, `expected TelemetryHttpError, got ${err}`);
    assert.equal(err.name, "TelemetryHttpError");
    assert.equal(err.status, status);
    if (detail) assert.match(err.detail, detail);
    return true;
  };
}

// ---------------------------------------------------------------------------------------------
// postEvent

Deno.test("TelemetryClient.postEvent() returns the envelope exactly as written to the site file", async () => {
  await using f = await fixture();
  const event = await f.client.postEvent("weather", { wind_mps: 2.1 });
  assert.ok(event instanceof TelemetryEvent);
  assert.equal(event.type, "weather");
  assert.deepEqual(event.data, { wind_mps: 2.1 });
  assert.deepEqual(await readSiteLines(f.dir), [JSON.stringify(event)]);
});

Deno.test("TelemetryClient.postEvent() sends meta and a caller ts", async () => {
  await using f = await fixture();
  const event = await f.client.postEvent("status", { dome: "open" }, {
    meta: { source: "dome-ctl" },
    ts: "2026-11-22T04:00:00.123456+01:00",
  });
  assert.deepEqual(event.meta, { source: "dome-ctl" });
  assert.equal(event.ts, "2026-11-22T03:00:00.123Z");
});

Deno.test("TelemetryClient.postEvent() accepts a Date as ts", async () => {
  await using f = await fixture();
  const event = await f.client.postEvent("status", {}, { ts: new Date(Date.UTC(2026, 0, 2, 3)) });
  assert.equal(event.ts, "2026-01-02T03:00:00.000Z");
});

Deno.test("TelemetryClient.postEvent() with storePermanently false updates only the snapshot", async () => {
  await using f = await fixture();
  const event = await f.client.postEvent("environment", { humidity: 41 }, {
    storePermanently: false,
  });
  assert.deepEqual(await readSiteLines(f.dir), []);
  assert.deepEqual((await f.client.getCurrent("environment"))?.toJSON(), event.toJSON());
});

Deno.test("TelemetryClient.postEvent() with makeCurrent false writes without updating the snapshot", async () => {
  await using f = await fixture();
  const event = await f.client.postEvent("status", { a: 1 }, { makeCurrent: false });
  assert.deepEqual(await readSiteLines(f.dir), [JSON.stringify(event)]);
  assert.equal(await f.client.getCurrent("status"), null);
});

Deno.test("TelemetryClient.postEvent() during a run returns meta.run_id and writes the run file", async () => {
  await using f = await fixture();
  await f.client.startRun({ runId: "m31-1" });
  const event = await f.client.postEvent("status", { mount: "tracking" });
  assert.equal(event.meta.run_id, "m31-1");
  assert.deepEqual(await readLines(join(f.dir, "m31-1", "telemetry.ndjson")), [
    JSON.stringify(event),
  ]);
});

Deno.test("TelemetryClient.postEvent() throws TelemetryHttpError with detail on 400", async () => {
  await using f = await fixture();
  await assert.rejects(
    f.client.postEvent("status", {}, { ts: "2026-02-30T00:00:00Z" }),
    isHttpError(400, /2026-02-30/),
  );
});

// ---------------------------------------------------------------------------------------------
// postEvents

Deno.test("TelemetryClient.postEvents() returns TelemetryEvents in order and writes them", async () => {
  await using f = await fixture();
  const events = await f.client.postEvents([
    { type: "weather", data: { wind_mps: 1 } },
    { type: "status", data: { dome: "open" }, meta: { by: "test" } },
  ]);
  assert.ok(events.every((e) => e instanceof TelemetryEvent));
  assert.deepEqual(events.map((e) => [e.type, e.seq]), [["weather", 1], ["status", 2]]);
  assert.deepEqual(events[1]?.meta, { by: "test" });
  assert.deepEqual(await readSiteLines(f.dir), events.map((e) => JSON.stringify(e)));
});

Deno.test("TelemetryClient.postEvents() maps storePermanently to the wire per item", async () => {
  await using f = await fixture();
  const events = await f.client.postEvents([
    { type: "weather", data: { wind_mps: 1 } },
    { type: "status", data: {}, storePermanently: false },
  ]);
  assert.deepEqual(await readSiteLines(f.dir), [JSON.stringify(events[0])]);
});

Deno.test("TelemetryClient.postEvents() with minimal: true asks for the minimal answer and returns the seqs of the stored events", async () => {
  await using f = await fixture();
  await f.client.postEvent("status", {});
  const summary = await f.client.postEvents([
    { type: "weather", data: { wind_mps: 1 } },
    { type: "weather", data: { wind_mps: 2 } },
  ], { minimal: true });
  assert.deepEqual(summary, { accepted: 2, first_seq: 2, last_seq: 3 });
  const stored = (await readSiteLines(f.dir)).map((l) => JSON.parse(l));
  assert.deepEqual(stored.map((e) => e.seq), [1, 2, 3]);
});

Deno.test("TelemetryClient.postEvents() with minimal: true counts the envelopes of a server that answers them all", async () => {
  const envelope = (seq: number) => ({
    seq,
    ts: "2026-11-22T03:00:00.000Z",
    type: "weather",
    data: {},
    meta: {},
  });
  let prefer: string | null = null;
  const client = new TelemetryClient({
    fetch: (_input, init) => {
      prefer = new Headers(init?.headers).get("prefer");
      const body = JSON.stringify({ accepted: 2, events: [envelope(7), envelope(8)] });
      return Promise.resolve(
        new Response(body, { headers: { "content-type": "application/json" } }),
      );
    },
  });
  const summary = await client.postEvents([{ type: "weather", data: {} }, {
    type: "weather",
    data: {},
  }], { minimal: true });
  assert.equal(prefer, "return=minimal");
  assert.deepEqual(summary, { accepted: 2, first_seq: 7, last_seq: 8 });
});

// ---------------------------------------------------------------------------------------------
// runs

Deno.test("TelemetryClient.startRun() with runId returns the run record", async () => {
  await using f = await fixture();
  const run = await f.client.startRun({ runId: "night-1", meta: { target: "M31" } });
  assert.equal(run.run_id, "night-1");
  assert.equal(run.run_dir, join(await Deno.realPath(f.dir), "night-1"));
  assert.equal(run.stopped_at, null);
  assert.equal(run.events, 0);
  assert.deepEqual(run.meta, { target: "M31" });
});

Deno.test("TelemetryClient.startRun() without options derives run 001", async () => {
  await using f = await fixture();
  const run = await f.client.startRun();
  assert.equal(run.run_id, "001");
});

Deno.test("TelemetryClient.startRun() with runDir uses its last segment as run id", async () => {
  await using f = await fixture();
  const run = await f.client.startRun({ runDir: "2026/flats" });
  assert.equal(run.run_id, "flats");
  assert.equal(run.run_dir, join(await Deno.realPath(f.dir), "2026", "flats"));
});

Deno.test("TelemetryClient.startRun() throws TelemetryHttpError 409 while a different run is active", async () => {
  await using f = await fixture();
  await f.client.startRun({ runId: "a" });
  await assert.rejects(f.client.startRun({ runId: "b" }), isHttpError(409));
});

Deno.test("TelemetryClient.stopRun() returns the record with stopped_at and events", async () => {
  await using f = await fixture();
  await f.client.startRun({ runId: "r" });
  await f.client.postEvent("status", { a: 1 });
  await f.client.postEvent("status", { a: 2 });
  const run = await f.client.stopRun();
  assert.equal(run.run_id, "r");
  assert.equal(typeof run.stopped_at, "string");
  assert.equal(run.events, 2);
  assert.equal((await f.client.postEvent("status", { a: 3 })).meta.run_id, undefined);
});

Deno.test("TelemetryClient.stopRun() throws TelemetryHttpError 409 when no run is active", async () => {
  await using f = await fixture();
  await assert.rejects(f.client.stopRun(), isHttpError(409, /No run is active/));
});

Deno.test("TelemetryClient.getRun() returns null when no run is active", async () => {
  await using f = await fixture();
  assert.equal(await f.client.getRun(), null);
});

Deno.test("TelemetryClient.getRun() returns the active run with a live events count", async () => {
  await using f = await fixture();
  await f.client.startRun({ runId: "r" });
  await f.client.postEvent("status", {});
  const run = await f.client.getRun();
  assert.equal(run?.run_id, "r");
  assert.equal(run?.events, 1);
});

// ---------------------------------------------------------------------------------------------
// snapshot

Deno.test("TelemetryClient.current() returns an empty object before any event", async () => {
  await using f = await fixture();
  assert.deepEqual(await f.client.current(), {});
});

Deno.test("TelemetryClient.current() returns the latest TelemetryEvent per type", async () => {
  await using f = await fixture();
  await f.client.postEvent("weather", { wind_mps: 1 });
  const latest = await f.client.postEvent("weather", { wind_mps: 2 });
  const status = await f.client.postEvent("status", { dome: "open" });
  const current = await f.client.current();
  assert.deepEqual(Object.keys(current).sort(), ["status", "weather"]);
  assert.ok(current.weather instanceof TelemetryEvent);
  assert.equal(JSON.stringify(current.weather), JSON.stringify(latest));
  assert.equal(JSON.stringify(current.status), JSON.stringify(status));
});

Deno.test("TelemetryClient.current() keeps a type named __proto__ as an ordinary key", async () => {
  await using f = await fixture();
  await f.client.postEvent("__proto__", { odd: true });
  const current = await f.client.current();
  assert.ok(Object.hasOwn(current, "__proto__"));
  assert.equal(Object.getPrototypeOf(current), Object.prototype);
});

Deno.test("TelemetryClient.currentEvent() returns the latest event of one type", async () => {
  await using f = await fixture();
  const event = await f.client.postEvent("status", { dome: "open" });
  assert.equal(JSON.stringify(await f.client.currentEvent("status")), JSON.stringify(event));
});

Deno.test("TelemetryClient.currentEvent() throws TelemetryHttpError 404 for a type never posted", async () => {
  await using f = await fixture();
  await assert.rejects(f.client.currentEvent("weather"), isHttpError(404, /weather/));
});

Deno.test("TelemetryClient.getCurrent() returns null for a type never posted", async () => {
  await using f = await fixture();
  assert.equal(await f.client.getCurrent("weather"), null);
});

Deno.test("TelemetryClient.getCurrent() returns the full envelope including meta", async () => {
  await using f = await fixture();
  await f.client.startRun({ runId: "r" });
  const event = await f.client.postEvent("status", { a: 1 }, { meta: { by: "x" } });
  const current = await f.client.getCurrent("status");
  assert.deepEqual(current?.meta, { by: "x", run_id: "r" });
  assert.equal(JSON.stringify(current), JSON.stringify(event));
});

Deno.test("TelemetryClient.getCurrent() percent-encodes types with / ? # % and spaces", async () => {
  await using f = await fixture();
  const type = "a/b ?c#d%e";
  await f.client.postEvent(type, { ok: true });
  assert.equal((await f.client.getCurrent(type))?.type, type);
});

// ---------------------------------------------------------------------------------------------
// legacy operations

Deno.test("TelemetryClient.insertCurrent() returns the seq as a string and updates the snapshot", async () => {
  await using f = await fixture();
  const id = await f.client.insertCurrent("status", { a: 1 });
  const current = await f.client.getCurrent("status");
  assert.equal(id, "1");
  assert.equal(current?._id, id);
  assert.equal((await readSiteLines(f.dir)).length, 1);
});

Deno.test("TelemetryClient.insertCurrent() with storePermanently false writes nothing", async () => {
  await using f = await fixture();
  const id = await f.client.insertCurrent("status", { a: 1 }, false);
  assert.equal((await f.client.getCurrent("status"))?._id, id);
  assert.deepEqual(await readSiteLines(f.dir), []);
});

Deno.test("TelemetryClient.insert() writes the event, leaves the snapshot and returns the seq", async () => {
  await using f = await fixture();
  const id = await f.client.insert("observations", { exptime: 120 });
  const lines = await readSiteLines(f.dir);
  assert.equal(id, "1");
  assert.equal(JSON.parse(lines[0]!).seq, 1);
  assert.equal(await f.client.getCurrent("observations"), null);
});

Deno.test("TelemetryClient.find() resolves null without a request", async () => {
  const rec = recordingFetch();
  const client = new TelemetryClient({ fetch: rec.fetch });
  assert.equal(await client.find("weather", "1"), null);
  assert.deepEqual(rec.calls, []);
});

Deno.test("TelemetryClient.clearCurrent() is a no-op without a request", async () => {
  await using f = await fixture();
  await f.client.postEvent("status", { a: 1 });
  await f.client.clearCurrent("status");
  assert.notEqual(await f.client.getCurrent("status"), null);
});

// ---------------------------------------------------------------------------------------------
// service endpoints

Deno.test("TelemetryClient.health() returns ok true", async () => {
  await using f = await fixture();
  assert.deepEqual(await f.client.health(), { ok: true });
});

Deno.test("TelemetryClient.ready() reports the active run", async () => {
  await using f = await fixture();
  assert.equal((await f.client.ready()).run_active, false);
  await f.client.startRun({ runId: "r" });
  const ready = await f.client.ready();
  assert.equal(ready.ready, true);
  assert.equal(ready.run_active, true);
  assert.equal(ready.run_id, "r");
  assert.match(ready.version, /^\d+\.\d+\.\d+/);
});

Deno.test("TelemetryClient.ready() passes on the site's id of .site.json", async () => {
  await using f = await fixture();
  const { site_id } = JSON.parse(await Deno.readTextFile(join(f.dir, ".site.json")));
  assert.equal((await f.client.ready()).site_id, site_id);
});

Deno.test("TelemetryClient.shutdown() makes the server exit", async () => {
  await using f = await fixture();
  await f.client.shutdown();
  await f.server.finished;
  await assert.rejects(f.client.health(), TelemetryConnectionError);
});

// ---------------------------------------------------------------------------------------------
// errors

Deno.test("TelemetryClient throws TelemetryConnectionError when nothing listens on the port", async () => {
  const client = new TelemetryClient({ host: "127.0.0.1", port: closedPort() });
  const err = await client.postEvent("status", {}).catch((e) => e);
  assert.ok(err instanceof TelemetryConnectionError);
  assert.equal(err.name, "TelemetryConnectionError");
  assert.ok(err.cause instanceof TypeError, "the fetch failure is kept as cause");
  assert.match(
    err.message,
    /^Cannot POST \/event at http:\/\/127\.0\.0\.1:\d+: .*obs-utils telemetry run/,
  );
});

Deno.test("TelemetryClient throws TelemetryConnectionError when the server does not answer within timeoutMs", async () => {
  const release = Promise.withResolvers<void>();
  await using server = Deno.serve(
    { hostname: "127.0.0.1", port: 0, onListen() {} },
    async () => {
      await release.promise;
      return new Response("too late");
    },
  );
  const client = new TelemetryClient({
    baseUrl: `http://127.0.0.1:${server.addr.port}`,
    timeoutMs: 150,
  });
  try {
    const err = await client.health().catch((e) => e);
    assert.ok(err instanceof TelemetryConnectionError);
    assert.match(err.message, /no complete answer within 150 ms/);
  } finally {
    release.resolve();
  }
});

Deno.test("TelemetryClient rejects with the signal's reason, whatever its class, when the caller aborts", async () => {
  const release = Promise.withResolvers<void>();
  await using server = Deno.serve(
    { hostname: "127.0.0.1", port: 0, onListen() {} },
    async () => {
      await release.promise;
      return new Response("too late");
    },
  );
  const client = new TelemetryClient({ baseUrl: `http://127.0.0.1:${server.addr.port}` });
  const controller = new AbortController();
  // A TypeError reason, which fetch failures also are, must still reach the caller unchanged.
  const reason = new TypeError("operator cancelled");
  try {
    const pending = client.current({ signal: controller.signal });
    controller.abort(reason);
    assert.equal(await pending.catch((e) => e), reason);
  } finally {
    release.resolve();
  }
});

Deno.test("TelemetryClient throws TelemetryHttpError with status and body start for a non-JSON error page", async () => {
  const page = `<html><body>502 Bad Gateway${" ".repeat(1000)}</body></html>`;
  await using server = Deno.serve(
    { hostname: "127.0.0.1", port: 0, onListen() {} },
    () => new Response(page, { status: 502, headers: { "content-type": "text/html" } }),
  );
  const client = new TelemetryClient({ baseUrl: `http://127.0.0.1:${server.addr.port}` });
  const err = await client.getCurrent("weather").catch((e) => e);
  assert.ok(err instanceof TelemetryHttpError);
  assert.equal(err.status, 502);
  assert.equal(err.body, page.slice(0, 512));
  assert.match(err.detail, /without a problem-details body/);
});

Deno.test("TelemetryClient throws TelemetryHttpError for a 200 answer that is not JSON", async () => {
  await using server = Deno.serve(
    { hostname: "127.0.0.1", port: 0, onListen() {} },
    () => new Response("hello from some other service"),
  );
  const client = new TelemetryClient({ baseUrl: `http://127.0.0.1:${server.addr.port}` });
  const err = await client.health().catch((e) => e);
  assert.ok(err instanceof TelemetryHttpError);
  assert.equal(err.status, 200);
  assert.equal(err.body, "hello from some other service");
  assert.ok(err.cause instanceof SyntaxError);
});

Deno.test("TelemetryClient throws TelemetryHttpError for JSON of the wrong shape", async () => {
  await using server = Deno.serve(
    { hostname: "127.0.0.1", port: 0, onListen() {} },
    () => Response.json({ seq: "one" }),
  );
  const client = new TelemetryClient({ baseUrl: `http://127.0.0.1:${server.addr.port}` });
  const err = await client.postEvent("status", {}).catch((e) => e);
  assert.ok(err instanceof TelemetryHttpError);
  assert.equal(err.status, 200);
  assert.match(err.message, /not an event envelope/);
  assert.equal(err.body, '{"seq":"one"}');
});

// ---------------------------------------------------------------------------------------------
// options

Deno.test("TelemetryClient sends the token as a bearer token", async () => {
  await using f = await fixture({ token: "s3cret" }, { token: "s3cret" });
  assert.equal((await f.client.postEvent("status", {})).seq, 1);
});

Deno.test("TelemetryClient without the server's token gets TelemetryHttpError 401", async () => {
  await using f = await fixture({ token: "s3cret" }, { token: "wrong" });
  await assert.rejects(f.client.postEvent("status", {}), isHttpError(401, /Bearer/));
});

Deno.test("TelemetryClient calls an injected fetch unbound", async () => {
  await using f = await fixture();
  const receivers: unknown[] = [];
  const client = new TelemetryClient({
    baseUrl: f.server.url,
    fetch: function (this: unknown, input, init) {
      receivers.push(this);
      return fetch(input, init);
    },
  });
  await client.health();
  assert.deepEqual(receivers, [undefined]);
});

Deno.test("TelemetryClient keeps a baseUrl path prefix and drops trailing slashes", () => {
  const client = new TelemetryClient({ baseUrl: "http://127.0.0.1:8080/telemetry//" });
  assert.equal(client.baseUrl, "http://127.0.0.1:8080/telemetry");
});

Deno.test("TelemetryClient builds the base URL from host and port, bracketing IPv6", () => {
  assert.equal(new TelemetryClient({ host: "::1", port: 7001 }).baseUrl, "http://[::1]:7001");
});

Deno.test("TelemetryClient prefers baseUrl over host and port", () => {
  const client = new TelemetryClient({ baseUrl: "http://127.0.0.2:1", host: "x", port: 2 });
  assert.equal(client.baseUrl, "http://127.0.0.2:1");
});

Deno.test("TelemetryClient rejects a port out of range with RangeError", () => {
  assert.throws(() => new TelemetryClient({ port: 70000 }), {
    name: "RangeError",
    message: /port 70000 .* 1 to 65535/,
  });
});

Deno.test("TelemetryClient rejects a baseUrl that is not an http URL with TypeError", () => {
  assert.throws(() => new TelemetryClient({ baseUrl: "localhost:6562" }), {
    name: "TypeError",
    message: /baseUrl "localhost:6562"/,
  });
});

Deno.test({
  name: "TelemetryClient without env permission falls back to localhost:6562 without throwing",
  permissions: { env: false, net: true, read: true, write: true },
  fn() {
    assert.notEqual(Deno.permissions.querySync({ name: "env" }).state, "granted");
    assert.equal(new TelemetryClient().baseUrl, "http://localhost:6562");
  },
});

/** Runs `new TelemetryClient()` in a fresh Deno with the given environment. */
async function clientInSubprocess(env: Record<string, string>, code: string): Promise<string> {
  const clientUrl = new URL("../../client.ts", import.meta.url).href;
  const { code: status, stdout, stderr } = await new Deno.Command(Deno.execPath(), {
    args: [
      "eval",
      `import { TelemetryClient } from ${JSON.stringify(clientUrl)};\n${code}`,
    ],
    env,
    stdout: "piped",
    stderr: "piped",
  }).output();
  const err = new TextDecoder().decode(stderr);
  assert.equal(status, 0, err);
  return new TextDecoder().decode(stdout).trim();
}

Deno.test("TelemetryClient reads OBS_TELEMETRY_HOST and OBS_TELEMETRY_PORT from the environment", async () => {
  await using f = await fixture();
  const out = await clientInSubprocess(
    { OBS_TELEMETRY_HOST: "127.0.0.1", OBS_TELEMETRY_PORT: String(f.server.addr.port) },
    "const c = new TelemetryClient(); console.log(c.baseUrl, JSON.stringify(await c.health()));",
  );
  assert.equal(out, `${f.server.url} {"ok":true}`);
});

Deno.test("TelemetryClient rejects an OBS_TELEMETRY_PORT that is not a port, naming the variable", async () => {
  const out = await clientInSubprocess(
    { OBS_TELEMETRY_PORT: "http" },
    "try { new TelemetryClient(); } catch (e) { console.log(e.name, e.message); }",
  );
  assert.equal(
    out,
    'RangeError Cannot use OBS_TELEMETRY_PORT "http" as a port: expected an integer from 1 to 65535',
  );
});

// ---------------------------------------------------------------------------------------------
// argument errors: TypeError before any request

const badCalls: [string, (c: TelemetryClient) => Promise<unknown>, RegExp][] = [
  [
    "postEvent() rejects a type that is not a string",
    (c) => c.postEvent(42 as unknown as string, {}),
    /"type" must be a string/,
  ],
  [
    "postEvent() rejects an empty type",
    (c) => c.postEvent("", {}),
    /"type" must be 1 to 128 characters/,
  ],
  [
    "postEvent() rejects data that is an array",
    (c) => c.postEvent("status", [] as unknown as Record<string, unknown>),
    /"data" must be a plain JSON object .* not an array/,
  ],
  [
    "postEvent() rejects meta that is a string",
    (c) => c.postEvent("status", {}, { meta: "x" as unknown as Record<string, unknown> }),
    /"meta" must be a plain JSON object, not a string/,
  ],
  [
    "postEvent() rejects a ts that is a number",
    (c) => c.postEvent("status", {}, { ts: 0 as unknown as string }),
    /"ts" must be an ISO 8601 string or a Date, not a number/,
  ],
  [
    "postEvent() rejects storePermanently that is a string",
    (c) => c.postEvent("status", {}, { storePermanently: "no" as unknown as boolean }),
    /"storePermanently" must be a boolean, not a string/,
  ],
  [
    "postEvent() rejects data holding a BigInt",
    (c) => c.postEvent("status", { big: 1n }),
    /cannot be serialised as JSON/,
  ],
  [
    "postEvents() rejects items that are not an array",
    (c) => c.postEvents("x" as unknown as []),
    /"items" must be an array of events, not a string/,
  ],
  [
    "postEvents() rejects a bad item, naming its index",
    (c) =>
      c.postEvents([{ type: "a", data: {} }, {
        type: "b",
        data: null as unknown as Record<string, unknown>,
      }]),
    /items\[1\]: "data" must be a plain JSON object .* not null/,
  ],
  [
    "postEvents() rejects a minimal option that is not a boolean",
    (c) => c.postEvents([], { minimal: "yes" as unknown as true }),
    /"minimal" must be true or false, not a string/,
  ],
  [
    "getCurrent() rejects a col that is not a string",
    (c) => c.getCurrent(5 as unknown as string),
    /"col" must be a string/,
  ],
  [
    "currentEvent() rejects a type with a control character",
    (c) => c.currentEvent("a\nb"),
    /control character/,
  ],
  [
    "insertCurrent() rejects storePermanently that is not a boolean",
    (c) => c.insertCurrent("status", {}, "false" as unknown as boolean),
    /"storePermanently" must be a boolean, not a string/,
  ],
  [
    "startRun() rejects a runId that is a number",
    (c) => c.startRun({ runId: 7 as unknown as string }),
    /"runId" must be a string, not a number/,
  ],
  [
    "current() rejects a signal that is not an AbortSignal",
    (c) => c.current({ signal: "stop" as unknown as AbortSignal }),
    /"signal" must be an AbortSignal, not a string/,
  ],
  [
    "follow() rejects a type containing a comma",
    (c) => c.follow({ types: ["a,b"] }).next(),
    /"types\[0\]" "a,b" contains a comma/,
  ],
];

for (const [name, call, message] of badCalls) {
  Deno.test(`TelemetryClient.${name} with TypeError before any request`, async () => {
    const rec = recordingFetch();
    const client = new TelemetryClient({ fetch: rec.fetch });
    await assert.rejects(call(client), { name: "TypeError", message });
    assert.deepEqual(rec.calls, []);
  });
}

// ---------------------------------------------------------------------------------------------
// follow

async function next(iter: AsyncGenerator<FollowMessage>): Promise<FollowMessage> {
  const result = await iter.next();
  assert.ok(!result.done, "the stream ended early");
  return result.value;
}

Deno.test("TelemetryClient.follow() yields the snapshot first", async () => {
  await using f = await fixture();
  const posted = await f.client.postEvent("weather", { wind_mps: 3 });
  const iter = f.client.follow();
  try {
    const first = await next(iter);
    assert.equal(first.kind, "snapshot");
    assert.ok(first.kind === "snapshot" && first.current.weather instanceof TelemetryEvent);
    assert.equal(JSON.stringify(first.current.weather), JSON.stringify(posted));
  } finally {
    await iter.return();
  }
});

Deno.test("TelemetryClient.follow() yields each accepted event with its stream id", async () => {
  await using f = await fixture();
  const iter = f.client.follow();
  try {
    await next(iter);
    const posted = await f.client.postEvent("status", { dome: "open" });
    const message = await next(iter);
    assert.equal(message.kind, "telemetry");
    assert.ok(message.kind === "telemetry");
    assert.equal(message.id, `site:${posted.seq}`);
    assert.equal(JSON.stringify(message.event), JSON.stringify(posted));
  } finally {
    await iter.return();
  }
});

Deno.test("TelemetryClient.follow() yields run messages on start and stop", async () => {
  await using f = await fixture();
  const iter = f.client.follow();
  try {
    await next(iter);
    await f.client.startRun({ runId: "r" });
    const started = await next(iter);
    await f.client.stopRun();
    const stopped = await next(iter);
    assert.ok(started.kind === "run" && stopped.kind === "run");
    assert.equal(started.run.run_id, "r");
    assert.equal(started.run.stopped_at, null);
    assert.equal(typeof stopped.run.stopped_at, "string");
  } finally {
    await iter.return();
  }
});

Deno.test("TelemetryClient.follow() with types yields only those types", async () => {
  await using f = await fixture();
  await f.client.postEvent("status", {});
  const iter = f.client.follow({ types: ["weather", "environment"] });
  try {
    const snapshot = await next(iter);
    assert.ok(snapshot.kind === "snapshot");
    assert.deepEqual(Object.keys(snapshot.current), []);
    await f.client.postEvent("status", { skipped: true });
    const weather = await f.client.postEvent("weather", { wind_mps: 1 });
    const message = await next(iter);
    assert.ok(message.kind === "telemetry");
    assert.equal(message.event.seq, weather.seq);
  } finally {
    await iter.return();
  }
});

Deno.test("TelemetryClient.follow() ends without error when the signal aborts", async () => {
  await using f = await fixture();
  const controller = new AbortController();
  const iter = f.client.follow({ signal: controller.signal });
  await next(iter);
  const pending = iter.next();
  controller.abort();
  assert.deepEqual(await pending, { done: true, value: undefined });
});

Deno.test("TelemetryClient.follow() reports the drop and reconnects with a fresh snapshot after a server restart", async () => {
  await using tmp = await tempDir();
  const first = await testServer({ siteDir: tmp.path });
  const port = first.addr.port;
  const client = new TelemetryClient({ baseUrl: first.url });
  const iter = client.follow({ retryMs: 20, maxRetryMs: 100 });
  let second: ServerHandle | undefined;
  try {
    assert.equal((await next(iter)).kind, "snapshot");
    await first.shutdown();
    const dropped = await next(iter);
    assert.ok(dropped.kind === "disconnected");
    assert.ok(dropped.error instanceof TelemetryConnectionError);
    assert.equal(dropped.attempt, 1);
    second = await testServer({ siteDir: tmp.path, port });
    let message = await next(iter);
    const attempts: number[] = [];
    while (message.kind === "disconnected") {
      attempts.push(message.attempt);
      assert.ok(message.retryMs <= 100, `retryMs ${message.retryMs} is capped at maxRetryMs`);
      message = await next(iter);
    }
    assert.equal(message.kind, "snapshot");
    assert.deepEqual(attempts, attempts.map((_, i) => i + 2), "attempts count up from 2");
  } finally {
    await iter.return();
    await second?.shutdown();
  }
});

Deno.test("TelemetryClient.follow() treats a connection silent for idleTimeoutMs as dropped", async () => {
  await using f = await fixture();
  const iter = f.client.follow({ idleTimeoutMs: 100, retryMs: 10 });
  try {
    assert.equal((await next(iter)).kind, "snapshot");
    const message = await next(iter);
    assert.ok(message.kind === "disconnected");
    assert.match(message.error.message, /nothing arrived for 100 ms/);
    assert.equal((await next(iter)).kind, "snapshot");
  } finally {
    await iter.return();
  }
});

Deno.test("TelemetryClient.follow() throws TelemetryHttpError 401 without retrying when the token is wrong", async () => {
  await using f = await fixture({ token: "s3cret" });
  const iter = f.client.follow({ retryMs: 10 });
  await assert.rejects(iter.next(), isHttpError(401));
  assert.deepEqual(await iter.next(), { done: true, value: undefined });
});

Deno.test("TelemetryClient.follow() throws TelemetryHttpError for a server without /stream", async () => {
  let requests = 0;
  await using server = Deno.serve({ hostname: "127.0.0.1", port: 0, onListen() {} }, () => {
    requests++;
    return Response.json({ detail: "No endpoint at /stream." }, { status: 404 });
  });
  const client = new TelemetryClient({ baseUrl: `http://127.0.0.1:${server.addr.port}` });
  await assert.rejects(client.follow({ retryMs: 10 }).next(), isHttpError(404, /\/stream/));
  assert.equal(requests, 1);
});
