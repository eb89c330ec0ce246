import assert from "node:assert/strict";
import { createHandler } from "../../server.ts";
import { TelemetryService } from "../../core/service.ts";
import { StreamHub } from "../../http/stream_hub.ts";
import { type ServerSentEventMessage, ServerSentEventStream } from "../../wire/sse.ts";
import { getJson, openService, postJson, tempDir, testServer } from "../_shared/util.ts";
import { gunzipSync } from "node:zlib";
import { Rng } from "../_shared/fault_util.ts";

/** One parsed Server-Sent Event (or comment block). */
interface Sse {
  event?: string;
  data?: string;
  id?: string;
  comment?: string;
}

/** Reads SSE messages from a response body, one block at a time. */
class SseReader implements AsyncDisposable {
  #reader: ReadableStreamDefaultReader<string>;
  #buffer = "";
  constructor(body: ReadableStream<Uint8Array>) {
    this.#reader = body.pipeThrough(new TextDecoderStream()).getReader();
  }
  /** The next message, or `undefined` when the stream ended. */
  async next(): Promise<Sse | undefined> {
    while (!this.#buffer.includes("\n\n")) {
      const { value, done } = await this.#reader.read();
      if (done) return undefined;
      this.#buffer += value;
    }
    const cut = this.#buffer.indexOf("\n\n");
    const block = this.#buffer.slice(0, cut);
    this.#buffer = this.#buffer.slice(cut + 2);
    const out: Sse = {};
    for (const line of block.split("\n")) {
      const m = /^([^:]*): ?(.*)$/.exec(line);
      if (!m) continue;
      const [, field, value] = m as unknown as [string, string, string];
      if (field === "") out.comment = value;
      else if (field === "data") {
        out.data = out.data === undefined ? value : `${out.data}\n${value}`;
      } else if (field === "event" || field === "id") out[field] = value;
    }
    return out;
  }
  /** The next message that is not a comment. */
  async nextEvent(): Promise<Sse | undefined> {
    for (;;) {
      const m = await this.next();
      if (m === undefined || m.comment === undefined) return m;
    }
  }
  async [Symbol.asyncDispose](): Promise<void> {
    await this.#reader.cancel().catch(() => {});
  }
}

async function openStream(
  url: string,
  headers: Record<string, string> = {},
): Promise<{ res: Response; sse: SseReader }> {
  const res = await fetch(url, { headers });
  assert.equal(res.status, 200, `GET ${url} answered ${res.status}`);
  return { res, sse: new SseReader(res.body!) };
}

async function encode(messages: ServerSentEventMessage[]): Promise<string> {
  const chunks = await Array.fromAsync(
    ReadableStream.from(messages).pipeThrough(new ServerSentEventStream()).pipeThrough(
      new TextDecoderStream(),
    ),
  );
  return chunks.join("");
}

async function metric(url: string, name: string): Promise<number> {
  const text = await (await fetch(`${url}/metrics`)).text();
  const line = text.split("\n").find((l) => l.startsWith(`${name} `));
  assert.ok(line, `metric ${name} missing from /metrics`);
  return Number(line.slice(name.length + 1));
}

Deno.test("ServerSentEventStream encodes event, data and id as one message", async () => {
  assert.equal(
    await encode([{ event: "telemetry", data: '{"a":1}', id: "site:7" }, { comment: "keepalive" }]),
    'event: telemetry\ndata: {"a":1}\nid: site:7\n\n: keepalive\n\n',
  );
});

Deno.test("ServerSentEventStream splits multi-line data into one data line per line", async () => {
  assert.equal(await encode([{ data: "a\nb\r\nc\rd" }]), "data: a\ndata: b\ndata: c\ndata: d\n\n");
});

Deno.test("ServerSentEventStream rejects a newline in event", async () => {
  await assert.rejects(encode([{ event: "a\nb", data: "x" }]), SyntaxError);
});

Deno.test("ServerSentEventStream rejects a newline in id", async () => {
  await assert.rejects(encode([{ id: "site:1\r", data: "x" }]), SyntaxError);
});

Deno.test("GET /stream sends the snapshot first", async () => {
  await using tmp = await tempDir();
  await using server = await testServer({ siteDir: tmp.path });
  await postJson(`${server.url}/event`, { type: "weather", data: { wind_mps: 2.1 } });
  await postJson(`${server.url}/event`, { type: "status", data: { dome: "open" } });
  const current = (await getJson(`${server.url}/current`)).body;
  const { res, sse } = await openStream(`${server.url}/stream`);
  await using _ = sse;
  assert.equal(res.headers.get("content-type"), "text/event-stream; charset=utf-8");
  assert.equal(res.headers.get("cache-control"), "no-store");
  const first = await sse.next();
  assert.equal(first?.event, "snapshot");
  assert.deepEqual(JSON.parse(first!.data!), current);
});

Deno.test("GET /stream sends each accepted event with id <stream>:<seq>", async () => {
  await using tmp = await tempDir();
  await using server = await testServer({ siteDir: tmp.path });
  const { sse } = await openStream(`${server.url}/stream`);
  await using _ = sse;
  assert.equal((await sse.next())?.event, "snapshot");
  const site = (await postJson(`${server.url}/event`, { type: "status", data: { n: 1 } })).body;
  await postJson(`${server.url}/run/start`, { run_id: "night-1" });
  const inRun = (await postJson(`${server.url}/event`, { type: "status", data: { n: 2 } })).body;
  const siteMsg = await sse.nextEvent();
  assert.deepEqual(siteMsg, { event: "telemetry", id: "site:1", data: JSON.stringify(site) });
  assert.equal((await sse.nextEvent())?.event, "run");
  const runMsg = await sse.nextEvent();
  assert.deepEqual(runMsg, {
    event: "telemetry",
    id: "run:night-1:1",
    data: JSON.stringify(inRun),
  });
});

Deno.test("GET /stream sends the run record on run start and stop", async () => {
  await using tmp = await tempDir();
  await using server = await testServer({ siteDir: tmp.path });
  const { sse } = await openStream(`${server.url}/stream`);
  await using _ = sse;
  await sse.next();
  const started = (await postJson(`${server.url}/run/start`, { run_id: "r1" })).body;
  const stopped = (await postJson(`${server.url}/run/stop`, undefined)).body;
  const a = await sse.nextEvent(), b = await sse.nextEvent();
  assert.deepEqual([a?.event, JSON.parse(a!.data!)], ["run", started]);
  assert.deepEqual([b?.event, JSON.parse(b!.data!)], ["run", stopped]);
});

Deno.test("GET /stream?type= filters the snapshot and telemetry but not run events", async () => {
  await using tmp = await tempDir();
  await using server = await testServer({ siteDir: tmp.path });
  await postJson(`${server.url}/event`, { type: "weather", data: { wind_mps: 1 } });
  await postJson(`${server.url}/event`, { type: "status", data: { dome: "open" } });
  await postJson(`${server.url}/event`, { type: "camera", data: { t: -10 } });
  const { sse } = await openStream(`${server.url}/stream?type=weather,camera`);
  await using _ = sse;
  assert.deepEqual(Object.keys(JSON.parse((await sse.next())!.data!)), ["weather", "camera"]);
  await postJson(`${server.url}/event`, { type: "status", data: { dome: "closed" } });
  await postJson(`${server.url}/run/start`, { run_id: "r1" });
  await postJson(`${server.url}/event`, { type: "camera", data: { t: -11 } });
  const events = [await sse.nextEvent(), await sse.nextEvent()];
  assert.deepEqual(events.map((e) => e?.event), ["run", "telemetry"]);
  assert.equal(JSON.parse(events[1]!.data!).type, "camera");
});

Deno.test("GET /stream sends a keepalive comment every keepaliveMs", async () => {
  await using tmp = await tempDir();
  await using service = await TelemetryService.open({ siteDir: tmp.path, timeZone: "UTC" });
  await using server = Deno.serve(
    { hostname: "127.0.0.1", port: 0, onListen() {} },
    createHandler(service, { keepaliveMs: 50 }),
  );
  const { sse } = await openStream(`http://127.0.0.1:${server.addr.port}/stream`);
  await using _ = sse;
  assert.equal((await sse.next())?.event, "snapshot");
  assert.deepEqual(await sse.next(), { comment: "keepalive" });
  assert.deepEqual(await sse.next(), { comment: "keepalive" });
});

Deno.test("GET /stream ignores Last-Event-ID and starts with a fresh snapshot", async () => {
  await using tmp = await tempDir();
  await using server = await testServer({ siteDir: tmp.path });
  await postJson(`${server.url}/event`, { type: "status", data: { n: 1 } });
  await postJson(`${server.url}/event`, { type: "status", data: { n: 2 } });
  const { sse } = await openStream(`${server.url}/stream`, { "last-event-id": "site:1" });
  await using _ = sse;
  const first = await sse.next();
  assert.equal(first?.event, "snapshot");
  assert.equal(JSON.parse(first!.data!).status.seq, 2);
  await postJson(`${server.url}/event`, { type: "status", data: { n: 3 } });
  assert.equal((await sse.nextEvent())?.id, "site:3"); // no replay of site:2
});

Deno.test("GET /stream unsubscribes a client that disconnects", async () => {
  await using tmp = await tempDir();
  await using server = await testServer({ siteDir: tmp.path });
  const { sse } = await openStream(`${server.url}/stream`);
  await sse.next();
  assert.equal(await metric(server.url, "telemetry_stream_clients"), 1);
  await sse[Symbol.asyncDispose]();
  // The server learns of the disconnect asynchronously; poll the gauge (bounded).
  let clients = 1;
  for (let i = 0; i < 100 && clients !== 0; i++) {
    await new Promise((r) => setTimeout(r, 20));
    clients = await metric(server.url, "telemetry_stream_clients");
  }
  assert.equal(clients, 0);
});

Deno.test("GET /stream drops a stalled client while 20,000 events are ingested", async () => {
  await using tmp = await tempDir();
  await using server = await testServer({ siteDir: tmp.path, fsync: "never" });
  // This client never reads: the kernel and HTTP buffers fill, then its queue hits the bound. It
  // takes gzip (fetch asks for it), so the padding is random: repeated text would compress a
  // thousand times over and fit the buffers.
  const stalled = await fetch(`${server.url}/stream`);
  assert.equal(stalled.status, 200);
  assert.equal(stalled.headers.get("content-encoding"), "gzip");
  const rng = new Rng(13);
  const paddingLength = 1000;
  const total = 20_000, batch = 500;
  let accepted = 0;
  const rssBefore = Deno.memoryUsage().rss;
  for (let i = 0; i < total; i += batch) {
    const items = Array.from(
      { length: batch },
      (_, j) => ({
        type: "load",
        data: { i: i + j, padding: btoa(String.fromCharCode(...rng.bytes(750))) },
      }),
    );
    const res = await postJson(`${server.url}/events`, items);
    assert.equal(res.status, 200);
    accepted += (res.body as { accepted: number }).accepted;
  }
  const rssAfter = Deno.memoryUsage().rss;
  // deno-lint-ignore no-console
  console.log(
    `  posted ${total} events (~${total * 1.05 / 1000 | 0} MB); RSS ${rssBefore >> 20} -> ${
      rssAfter >> 20
    } MiB`,
  );
  assert.equal(accepted, total);
  assert.equal(await metric(server.url, "telemetry_stream_dropped_total"), 1);
  assert.equal(await metric(server.url, "telemetry_stream_clients"), 0);
  // The stalled client sees its stream end early, long before all 20 MB arrived.
  let received = 0;
  try {
    for await (const chunk of stalled.body!) received += chunk.length;
  } catch (err) {
    if (!(err instanceof TypeError)) throw err; // body read error: connection aborted
  }
  assert.ok(received < total * paddingLength, `the stalled client received ${received} bytes`);
});

Deno.test("startServer().shutdown() ends an open stream so finished resolves after POST /shutdown", async () => {
  await using tmp = await tempDir();
  const server = await testServer({ siteDir: tmp.path });
  const { sse } = await openStream(`${server.url}/stream`);
  await using _ = sse;
  assert.equal((await sse.next())?.event, "snapshot");
  const res = await postJson(`${server.url}/shutdown`, undefined);
  assert.equal(res.status, 202);
  await server.finished;
  assert.equal(await sse.next(), undefined); // the stream ended cleanly
});

Deno.test("GET /stream is gzip-compressed for a client that accepts gzip, and each event arrives while it stays open", async () => {
  await using tmp = await tempDir();
  await using server = await testServer({ siteDir: tmp.path });
  // Deno's fetch asks for gzip and decodes it, as browsers do.
  const { res, sse } = await openStream(`${server.url}/stream`);
  await using _ = sse;
  assert.equal(res.headers.get("content-encoding"), "gzip");
  assert.equal(res.headers.get("vary"), "accept-encoding");
  assert.equal((await sse.next())?.event, "snapshot");
  for (let n = 1; n <= 3; n++) {
    await postJson(`${server.url}/event`, { type: "status", data: { n } });
    const message = await sse.nextEvent();
    assert.equal(message?.id, `site:${n}`);
    assert.equal(JSON.parse(message!.data!).data.n, n);
  }
});

Deno.test("GET /stream is sent uncompressed to a client that does not accept gzip", async () => {
  await using tmp = await tempDir();
  await using server = await testServer({ siteDir: tmp.path });
  // With its own Accept-Encoding, fetch hands over the body as it came.
  const res = await fetch(`${server.url}/stream`, { headers: { "accept-encoding": "identity" } });
  assert.equal(res.headers.get("content-encoding"), null);
  assert.equal(res.headers.get("vary"), "accept-encoding");
  const reader = res.body!.pipeThrough(new TextDecoderStream()).getReader();
  let text = "";
  while (!text.includes("\n\n")) text += (await reader.read()).value ?? "";
  assert.ok(text.startsWith("event: snapshot\ndata: {"), text);
  await reader.cancel();
});

Deno.test("a gzip stream ended by the server is one complete gzip member of exactly the plain stream's bytes", async () => {
  await using tmp = await tempDir();
  await using service = await openService(tmp.path);
  const stop = new AbortController();
  const hub = new StreamHub(service, { keepaliveMs: 60_000, flushMs: 0, signal: stop.signal });
  // A snapshot of more than one 64 KiB piece, then live events over several fan-outs.
  const pad = "p".repeat(300);
  for (let i = 0; i < 400; i += 100) {
    await service.record(
      Array.from({ length: 100 }, (_, j) => ({ type: `t${i + j}`, data: { pad, n: i + j } })),
    );
  }
  const plainBody = hub.open();
  const [gzipBody, gzipProbe] = hub.open({ gzip: true }).tee();
  const read = (body: ReadableStream<Uint8Array>) => new Response(body).bytes();
  const plainBytes = read(plainBody);
  const gzipBytes = read(gzipBody);
  for (let n = 0; n < 5; n++) {
    await service.record([{ type: "live", data: { n } }, { type: "t1", data: { n } }]);
    await new Promise((r) => setTimeout(r, 5));
  }
  // The end comes once the gzip client has decoded the last event: its stream is then idle.
  const decoded = (gzipProbe as ReadableStream<Uint8Array<ArrayBuffer>>)
    .pipeThrough(new DecompressionStream("gzip"))
    .pipeThrough(new TextDecoderStream()).getReader();
  let seen = "";
  while (!seen.includes("id: site:410\n")) {
    const { value, done } = await decoded.read();
    assert.ok(!done, "the gzip stream ended before the last event");
    seen += value;
  }
  stop.abort();
  for (let r = await decoded.read(); !r.done; r = await decoded.read()) seen += r.value;
  const plain = await plainBytes;
  assert.ok(plain.byteLength > 64 * 1024 + 2000, `${plain.byteLength} bytes`);
  // gunzipSync checks the member's CRC-32 and length.
  assert.deepEqual(new Uint8Array(gunzipSync(await gzipBytes)), plain);
  assert.equal(seen, new TextDecoder().decode(plain));
});

Deno.test("a stream that does not take its last chunk within a second of shutdown is aborted, so it cannot hold the shutdown open", async () => {
  await using tmp = await tempDir();
  await using service = await openService(tmp.path);
  const stop = new AbortController();
  const hub = new StreamHub(service, { keepaliveMs: 60_000, flushMs: 60_000, signal: stop.signal });
  const reader = hub.open().pipeThrough(new TextDecoderStream()).getReader();
  let text = "";
  while (!text.includes("id: site:1\n")) {
    if (text === "") await service.record([{ type: "a", data: { n: 1 } }]);
    text += (await reader.read()).value ?? "";
  }
  // Waiting for the flush interval when the shutdown comes: sent then, and never read.
  await service.record([{ type: "a", data: { n: 2 } }]);
  stop.abort();
  assert.equal(hub.clients, 1);
  await new Promise((r) => setTimeout(r, 1200));
  assert.equal(hub.clients, 0);
  await assert.rejects(async () => {
    while (!(await reader.read()).done) { /* what is left, then the abort */ }
  });
});
