/**
 * Attacks on gzip `GET /stream` (stream.ts, http/gzip_live.ts): the CRC and length of a client's
 * member against the order its bytes went out (snapshot pieces, live chunks that queued meanwhile,
 * keepalives), clients that join mid-batch, filtered clients sharing a piece, the drop path,
 * shutdown of idle and busy clients, Accept-Encoding edge cases, HEAD, and a seeded differential
 * run where every gzip client must decode to exactly what its plain twin was sent.
 *
 * In-process bodies come from {@linkcode StreamHub.open}; HTTP tests use real servers on port 0,
 * with a raw TCP reader where the gzip bytes themselves matter (fetch would decode them).
 * @module
 */
import assert from "node:assert/strict";
import { Buffer } from "node:buffer";
import { constants, gunzipSync, inflateRawSync } from "node:zlib";
import { StreamHub, type StreamHubOptions } from "../../http/stream_hub.ts";
import type { TelemetryService } from "../../core/service.ts";
import { getJson, openService, postJson, tempDir, testServer } from "../_shared/util.ts";
import { Rng, seedFromEnv } from "../_shared/fault_util.ts";

const encoder = new TextEncoder();
const GZIP_HEADER = [0x1f, 0x8b, 8, 0, 0, 0, 0, 0, 0, 255];

/** A service in a temp directory and a hub on it that `stop` shuts down; both go at disposal. */
async function hubOn(
  options: Omit<StreamHubOptions, "signal">,
  fsync?: "never",
): Promise<
  { service: TelemetryService; hub: StreamHub; stop: AbortController } & AsyncDisposable
> {
  const tmp = await tempDir();
  const service = await openService(tmp.path, fsync ? { fsync } : {});
  const stop = new AbortController();
  const hub = new StreamHub(service, { ...options, signal: stop.signal });
  return {
    service,
    hub,
    stop,
    async [Symbol.asyncDispose]() {
      await service[Symbol.asyncDispose]();
      await tmp[Symbol.asyncDispose]();
    },
  };
}

const delay = (ms: number) => new Promise<void>((resolve) => setTimeout(resolve, ms));

/** `promise`, or a failure naming `what` after `ms`. */
async function within<T>(promise: Promise<T>, ms: number, what: string): Promise<T> {
  let timer: ReturnType<typeof setTimeout> | undefined;
  try {
    return await Promise.race([
      promise,
      new Promise<never>((_, reject) => {
        timer = setTimeout(() => reject(new Error(`timed out after ${ms} ms: ${what}`)), ms);
      }),
    ]);
  } finally {
    clearTimeout(timer);
  }
}

/** Polls `condition` every few ms, failing after `ms`. */
async function waitUntil(condition: () => boolean, ms: number, what: string): Promise<void> {
  const deadline = Date.now() + ms;
  while (!condition()) {
    if (Date.now() > deadline) throw new Error(`timed out after ${ms} ms: ${what}`);
    await delay(2);
  }
}

/** The readings of a padded event that compress like real ones, neither 1000x nor not at all. */
function readings(rng: Rng, n: number, padBytes: number): Record<string, unknown> {
  return {
    n,
    wind_mps: Math.round(rng.next() * 20_000) / 1000,
    pad: Array.from(rng.bytes(padBytes), (b) => b.toString(16).padStart(2, "0")).join(""),
  };
}

/**
 * One stream body as a client reads it: its raw bytes, kept for a strict check, and its text as
 * it arrives. A gzip body is decoded chunk by chunk without the member's end: each chunk the hub
 * hands out is whole deflate pieces that start from an empty window and end on a sync flush, so
 * it decodes on its own (which is what makes an event readable the moment it arrives).
 */
class Tap {
  readonly gzip: boolean;
  readonly raw: Uint8Array[] = [];
  text = "";
  /** The member's end (final block, CRC and length) arrived. */
  trailer = false;
  #reader: ReadableStreamDefaultReader<Uint8Array>;
  #decoder = new TextDecoder();
  #header = false;
  #drained: Promise<{ closed: true } | { closed: false; error: unknown }> | undefined;

  constructor(body: ReadableStream<Uint8Array>, gzip: boolean) {
    this.gzip = gzip;
    this.#reader = body.getReader();
  }

  /** Reads one chunk: `false` at the body's end; rejects when the body was dropped or aborted. */
  async take(): Promise<boolean> {
    const { value, done } = await this.#reader.read();
    if (done) return false;
    this.raw.push(value);
    this.#decode(value);
    return true;
  }

  /** Reads until the text holds `needle`. */
  async until(needle: string, ms = 10_000): Promise<void> {
    const deadline = Date.now() + ms;
    while (!this.text.includes(needle)) {
      const more = await within(this.take(), Math.max(1, deadline - Date.now()), `"${needle}"`);
      assert.ok(more, `the body ended before "${needle}"; it had ${this.text.length} chars`);
    }
  }

  /** Reads on to the end in the background, pausing `pace()` ms before each read. */
  drain(
    pace: () => number = () => 0,
  ): Promise<{ closed: true } | { closed: false; error: unknown }> {
    return this.#drained ??= (async () => {
      try {
        for (;;) {
          const ms = pace();
          if (ms > 0) await delay(ms);
          if (!await this.take()) return { closed: true as const };
        }
      } catch (error) {
        return { closed: false as const, error };
      }
    })();
  }

  /** The whole body decoded strictly: a gzip member must be complete and its CRC and length right. */
  plain(): Uint8Array {
    const bytes = new Uint8Array(Buffer.concat(this.raw));
    return this.gzip ? new Uint8Array(gunzipSync(bytes)) : bytes;
  }

  async cancel(): Promise<void> {
    await this.#reader.cancel().catch(() => {});
  }

  #decode(chunk: Uint8Array): void {
    if (!this.gzip) {
      this.text += this.#decoder.decode(chunk, { stream: true });
      return;
    }
    let piece = chunk;
    if (!this.#header) {
      assert.deepEqual([...chunk.subarray(0, 10)], GZIP_HEADER, "the member's header");
      piece = chunk.subarray(10);
      this.#header = true;
    }
    if (piece.byteLength === 0) return;
    // A piece's first block has BFINAL clear; only the member's end sets it.
    if ((piece[0]! & 1) === 1) {
      assert.equal(piece.byteLength, 10, "the member's end is a final empty block, CRC and length");
      this.trailer = true;
      return;
    }
    const out = inflateRawSync(piece, { finishFlush: constants.Z_SYNC_FLUSH });
    this.text += this.#decoder.decode(out, { stream: true });
  }
}

/**
 * `GET` over a raw TCP connection, so that the gzip bytes are seen as the server sent them (fetch
 * decodes them): the chunked body is de-chunked as it arrives.
 */
class RawStream {
  status = 0;
  headers = new Headers();
  readonly parts: Uint8Array[] = [];
  /** The chunked body's terminating chunk arrived: the response ended cleanly. */
  complete = false;
  /** The connection ended (closed or reset). */
  ended = false;
  #conn: Deno.Conn;
  #buf: Uint8Array = new Uint8Array(0);

  private constructor(conn: Deno.Conn) {
    this.#conn = conn;
  }

  static async open(
    port: number,
    path: string,
    headers: Record<string, string> = {},
  ): Promise<RawStream> {
    const conn = await Deno.connect({ hostname: "127.0.0.1", port });
    const lines = [`GET ${path} HTTP/1.1`, `host: 127.0.0.1:${port}`];
    for (const [k, v] of Object.entries(headers)) lines.push(`${k}: ${v}`);
    const request = encoder.encode(lines.join("\r\n") + "\r\n\r\n");
    for (let off = 0; off < request.byteLength;) off += await conn.write(request.subarray(off));
    const stream = new RawStream(conn);
    await stream.#head();
    return stream;
  }

  /** The body so far, decoded without the member's end. */
  decodedSoFar(): string {
    const bytes = Buffer.concat(this.parts);
    return new TextDecoder().decode(
      this.headers.get("content-encoding") === "gzip"
        ? gunzipSync(bytes, { finishFlush: constants.Z_SYNC_FLUSH })
        : bytes,
    );
  }

  /** Reads until `condition` holds. */
  async until(condition: () => boolean, ms: number, what: string): Promise<void> {
    const deadline = Date.now() + ms;
    while (!condition()) {
      assert.ok(!this.ended, `the connection ended before ${what}`);
      await within(this.#fill(), Math.max(1, deadline - Date.now()), what);
      this.#parse();
    }
  }

  /** Reads until the connection ends. */
  async toEnd(ms: number): Promise<void> {
    await this.until(() => this.ended, ms, "the connection's end");
  }

  close(): void {
    try {
      this.#conn.close();
    } catch {
      // already closed
    }
  }

  async #head(): Promise<void> {
    const crlf2 = () => {
      for (let i = 0; i + 3 < this.#buf.byteLength; i++) {
        if (
          this.#buf[i] === 13 && this.#buf[i + 1] === 10 && this.#buf[i + 2] === 13 &&
          this.#buf[i + 3] === 10
        ) return i;
      }
      return -1;
    };
    let at = crlf2();
    while (at < 0) {
      assert.ok(!this.ended, "the connection ended before the response head");
      await within(this.#fill(), 5000, "the response head");
      at = crlf2();
    }
    const [statusLine, ...lines] = new TextDecoder().decode(this.#buf.subarray(0, at)).split(
      "\r\n",
    );
    this.status = Number(statusLine!.split(" ")[1]);
    for (const line of lines) {
      const colon = line.indexOf(":");
      this.headers.append(line.slice(0, colon).trim(), line.slice(colon + 1).trim());
    }
    this.#buf = this.#buf.slice(at + 4);
    this.#parse();
  }

  async #fill(): Promise<void> {
    const buf = new Uint8Array(64 * 1024);
    let n: number | null;
    try {
      n = await this.#conn.read(buf);
    } catch {
      n = null; // reset: an aborted response
    }
    if (n === null) {
      this.ended = true;
      return;
    }
    this.#buf = Buffer.concat([this.#buf, buf.subarray(0, n)]);
  }

  #parse(): void {
    while (!this.complete) {
      let eol = -1;
      for (let i = 0; i + 1 < this.#buf.byteLength; i++) {
        if (this.#buf[i] === 13 && this.#buf[i + 1] === 10) {
          eol = i;
          break;
        }
      }
      if (eol < 0) return;
      const size = parseInt(new TextDecoder().decode(this.#buf.subarray(0, eol)), 16);
      if (this.#buf.byteLength < eol + 2 + size + 2) return;
      if (size === 0) this.complete = true;
      else this.parts.push(this.#buf.slice(eol + 2, eol + 2 + size));
      this.#buf = this.#buf.slice(eol + 2 + size + 2);
    }
  }
}

/** The telemetry ids of a stream's text, in order. */
function ids(text: string): string[] {
  return [...text.matchAll(/^id: (.*)$/gm)].map((m) => m[1]!);
}

/** The `data` of the stream's first message, the snapshot. */
function snapshotOf(text: string): unknown {
  assert.ok(text.startsWith("event: snapshot\ndata: "), text.slice(0, 80));
  return JSON.parse(text.slice("event: snapshot\ndata: ".length, text.indexOf("\n\n")));
}

Deno.test("a gzip client sent a multi-piece snapshot while live batches arrive decodes to exactly the plain client's bytes", async () => {
  const rng = new Rng(seedFromEnv(7001));
  await using on = await hubOn({ keepaliveMs: 600_000, flushMs: 0 }, "never");
  const { service, hub, stop } = on;
  // About 300 kB of snapshot: five 64 KiB pieces.
  for (let i = 0; i < 300; i += 50) {
    await service.record(
      Array.from(
        { length: 50 },
        (_, j) => ({ type: `t${i + j}`, data: readings(rng, i + j, 400) }),
      ),
    );
  }
  const plain = new Tap(hub.open(), false);
  const gzip = new Tap(hub.open({ gzip: true }), true);
  // Live batches while neither client has read anything: they wait behind the snapshot.
  let seq = 300;
  for (let b = 0; b < 3; b++) {
    await service.record([{ type: "live", data: { b } }, { type: "t1", data: { b } }]);
    seq += 2;
  }
  // The gzip client reads its snapshot one piece at a time, with a live batch after each piece.
  let pieces = 0;
  while (!gzip.text.includes("}\n\n")) {
    assert.ok(await gzip.take());
    pieces++;
    await service.record([{ type: "live", data: { piece: pieces } }]);
    seq++;
  }
  assert.ok(pieces >= 4, `${pieces} snapshot pieces`);
  const last = `id: site:${seq}\n`;
  await gzip.until(last);
  await plain.until(last);
  const outcomes = [gzip.drain(), plain.drain()];
  await delay(10); // both are now waiting for live bytes: idle
  stop.abort();
  assert.deepEqual(await Promise.all(outcomes), [{ closed: true }, { closed: true }]);
  assert.ok(gzip.trailer, "the gzip member was ended");
  assert.deepEqual(gzip.plain(), plain.plain());
  assert.equal(gzip.text, plain.text);
  assert.equal(ids(plain.text).length, seq - 300);
  assert.equal(hub.clients, 0);
});

Deno.test("a client that joins mid-batch gets only the rest of that batch, with gzip as without", async () => {
  await using on = await hubOn({ keepaliveMs: 600_000, flushMs: 300 });
  const { service, hub, stop } = on;
  const anchor = new Tap(hub.open({ gzip: true }), true);
  void anchor.drain();
  await service.record([{ type: "a", data: { n: 1 } }]); // the first after a quiet spell: at once
  await waitUntil(() => anchor.text.includes("id: site:1\n"), 5000, "site:1");
  await service.record([{ type: "b", data: { n: 2 } }]); // waits for the flush interval
  const plain = new Tap(hub.open(), false);
  const gzip = new Tap(hub.open({ gzip: true }), true);
  await service.record([{ type: "c", data: { n: 3 } }]);
  await waitUntil(() => anchor.text.includes("id: site:3\n"), 5000, "site:3");
  for (const tap of [plain, gzip]) await tap.until("id: site:3\n");
  const outcomes = [plain.drain(), gzip.drain()];
  await delay(10);
  stop.abort();
  assert.deepEqual(await Promise.all(outcomes), [{ closed: true }, { closed: true }]);
  // site:2 is in the snapshot of the late clients, never sent to them again.
  assert.deepEqual(Object.keys(snapshotOf(plain.text) as object), ["a", "b"]);
  assert.deepEqual(ids(plain.text), ["site:3"]);
  assert.deepEqual(ids(anchor.text), ["site:1", "site:2", "site:3"]);
  assert.deepEqual(gzip.plain(), plain.plain());
});

Deno.test("filtered gzip clients sharing a fan-out each decode exactly what their plain twin gets", async () => {
  const rng = new Rng(seedFromEnv(7003));
  await using on = await hubOn({ keepaliveMs: 600_000, flushMs: 5 });
  const { service, hub, stop } = on;
  await service.record(["a", "b", "c"].map((type) => ({ type, data: { n: 0 } })));
  const filters: (string[] | undefined)[] = [
    ["a"],
    ["a"],
    ["b", "a"],
    ["a", "b"],
    ["c"],
    undefined,
  ];
  const pairs = filters.map((types) => {
    const options = types ? { types } : {};
    return {
      types,
      plain: new Tap(hub.open(options), false),
      gzip: new Tap(hub.open({ ...options, gzip: true }), true),
    };
  });
  const outcomes = pairs.flatMap((p) => [p.plain.drain(), p.gzip.drain()]);
  for (let i = 0; i < 40; i++) {
    const n = rng.int(1, 6);
    await service.record(
      Array.from(
        { length: n },
        () => ({ type: rng.pick(["a", "b", "c"]), data: readings(rng, i, 50) }),
      ),
    );
    if (i === 20) await service.startRun({ runId: "r1" });
    if (rng.chance(0.3)) await delay(rng.int(0, 8));
  }
  await service.stopRun();
  for (const p of pairs) {
    await waitUntil(
      () => p.plain.text.includes('"stopped_at"') && p.gzip.text.includes('"stopped_at"'),
      10_000,
      `the run's stop on ${p.types}`,
    );
  }
  await delay(10);
  stop.abort();
  for (const outcome of await Promise.all(outcomes)) assert.deepEqual(outcome, { closed: true });
  for (const p of pairs) {
    assert.deepEqual(p.gzip.plain(), p.plain.plain(), `filter ${p.types}`);
    for (const m of p.plain.text.matchAll(/^event: telemetry\ndata: (.*)$/gm)) {
      const type = JSON.parse(m[1]!).type;
      assert.ok(!p.types || p.types.includes(type), `${type} sent to a client of ${p.types}`);
    }
  }
  // Clients with the same filter (in any order) were sent the same bytes.
  assert.equal(pairs[0]!.gzip.text, pairs[1]!.gzip.text);
  assert.equal(pairs[2]!.plain.text, pairs[3]!.plain.text);
});

Deno.test("keepalive comments reach an idle gzip client as they happen and count in its member", async () => {
  await using on = await hubOn({ keepaliveMs: 25, flushMs: 0 });
  const { service, hub, stop } = on;
  const gzip = new Tap(hub.open({ gzip: true }), true);
  const outcome = gzip.drain();
  await waitUntil(
    () => gzip.text.split(": keepalive\n\n").length > 3,
    5000,
    "two keepalives",
  );
  await service.record([{ type: "status", data: { dome: "open" } }]);
  await waitUntil(() => gzip.text.includes("id: site:1\n"), 5000, "the event");
  await delay(5);
  stop.abort();
  assert.deepEqual(await outcome, { closed: true });
  assert.equal(new TextDecoder().decode(gzip.plain()), gzip.text);
  assert.match(gzip.text, /^event: snapshot\ndata: \{\}\n\n(: keepalive\n\n)+/);
});

Deno.test("a gzip client that stops reading is dropped at the plain-byte queue bound like a plain one, its member left unfinished", async () => {
  const rng = new Rng(seedFromEnv(7005));
  await using on = await hubOn({ keepaliveMs: 600_000, flushMs: 0, maxQueueBytes: 8000 });
  const { service, hub } = on;
  const plain = new Tap(hub.open(), false);
  const gzip = new Tap(hub.open({ gzip: true }), true);
  await plain.until("}\n\n");
  await gzip.until("}\n\n");
  // Neither reads on. Each event is about 1.2 kB of plain bytes and far less compressed.
  let sent = 0;
  while (hub.dropped === 0) {
    await service.record([{ type: "load", data: readings(rng, sent, 500) }]);
    sent++;
    assert.ok(sent < 50, "no client was dropped");
  }
  assert.equal(hub.dropped, 2, "both dropped by the same event: the bound counts plain bytes");
  assert.ok(sent >= 6 && sent <= 8, `dropped after ${sent} events`);
  assert.equal(hub.clients, 0);
  for (const tap of [plain, gzip]) await assert.rejects(tap.take(), /dropped a client/);
  // What the gzip client had is a valid start of a member, never a complete one.
  assert.throws(() => gzip.plain(), /unexpected end/);
  assert.equal(gzip.text, plain.text);
  // Later events find no client and no timer is left behind.
  await service.record([{ type: "load", data: { n: -1 } }]);
});

Deno.test("server shutdown ends an idle gzip client's member cleanly and aborts a gzip client still behind", async () => {
  const rng = new Rng(seedFromEnv(7006));
  await using on = await hubOn({ keepaliveMs: 600_000, flushMs: 0 }, "never");
  const { service, hub, stop } = on;
  await service.record(
    Array.from({ length: 400 }, (_, i) => ({ type: `t${i}`, data: readings(rng, i, 300) })),
  );
  const idle = new Tap(hub.open({ gzip: true }), true);
  const midSnapshot = new Tap(hub.open({ gzip: true }), true);
  const liveBehind = new Tap(hub.open({ gzip: true, types: ["live"] }), true);
  const neverRead = new Tap(hub.open({ gzip: true }), true);
  const idleDone = idle.drain();
  assert.ok(await midSnapshot.take()); // one piece of several
  await liveBehind.until("}\n\n");
  await service.record([{ type: "live", data: { n: 1 } }]);
  await waitUntil(() => idle.text.includes("id: site:401\n"), 5000, "the live event");
  await delay(5);
  stop.abort();
  assert.deepEqual(await idleDone, { closed: true });
  assert.ok(idle.trailer);
  assert.equal(new TextDecoder().decode(idle.plain()), idle.text);
  for (const tap of [midSnapshot, liveBehind, neverRead]) {
    await assert.rejects(tap.drain().then((o) => o.closed ? undefined : Promise.reject(o.error)));
    assert.ok(!tap.trailer, "an aborted client must not get a trailer");
  }
  assert.equal(hub.clients, 0);
  assert.throws(() => hub.open({ gzip: true }), /shutting down|stopping|503/i);
});

Deno.test("events acknowledged before shutdown are in an idle gzip client's stream before its clean end", async () => {
  // The default flush interval is 50 ms; a long one makes the window easy to hit.
  await using on = await hubOn({ keepaliveMs: 600_000, flushMs: 2000 });
  const { service, hub, stop } = on;
  const gzip = new Tap(hub.open({ gzip: true }), true);
  const plain = new Tap(hub.open(), false);
  const outcomes = [gzip.drain(), plain.drain()];
  await service.record([{ type: "status", data: { n: 1 } }]); // sent at once
  await waitUntil(() => gzip.text.includes("id: site:1\n"), 5000, "site:1");
  // Acknowledged to its producer, then the server stops within the flush interval.
  await service.record([{ type: "status", data: { n: 2 } }]);
  await delay(5);
  stop.abort();
  assert.deepEqual(await Promise.all(outcomes), [{ closed: true }, { closed: true }]);
  // Both streams end "cleanly", the gzip one with a correct CRC; is the event in them?
  assert.deepEqual(ids(plain.text), ["site:1", "site:2"], "plain client");
  assert.deepEqual(
    ids(new TextDecoder().decode(gzip.plain())),
    ["site:1", "site:2"],
    "gzip client",
  );
});

Deno.test("a gzip client that cancels mid-snapshot leaves the hub at once", async () => {
  const rng = new Rng(seedFromEnv(7008));
  await using on = await hubOn({ keepaliveMs: 20, flushMs: 0 }, "never");
  const { service, hub, stop } = on;
  await service.record(
    Array.from({ length: 300 }, (_, i) => ({ type: `t${i}`, data: readings(rng, i, 300) })),
  );
  const gzip = new Tap(hub.open({ gzip: true }), true);
  assert.ok(await gzip.take());
  assert.ok(!gzip.text.includes("}\n\n"), "still in the snapshot");
  await service.record([{ type: "live", data: { n: 1 } }]); // queued behind the snapshot
  await gzip.cancel();
  assert.equal(hub.clients, 0);
  await delay(50); // keepalives would find no client; none is left to leak
  await service.record([{ type: "live", data: { n: 2 } }]);
  assert.equal(hub.dropped, 0);
  stop.abort();
});

Deno.test("an empty snapshot through gzip is a complete member of exactly the plain bytes", async () => {
  await using on = await hubOn({ keepaliveMs: 600_000, flushMs: 0 });
  const { hub, stop } = on;
  const taps = [
    new Tap(hub.open({ gzip: true }), true),
    new Tap(hub.open({ gzip: true, types: ["nothing-yet"] }), true),
    new Tap(hub.open(), false),
  ];
  const outcomes = taps.map((t) => t.drain());
  await waitUntil(() => taps.every((t) => t.text.includes("\n\n")), 5000, "the snapshots");
  await delay(5);
  stop.abort();
  for (const o of await Promise.all(outcomes)) assert.deepEqual(o, { closed: true });
  for (const t of taps) {
    assert.equal(new TextDecoder().decode(t.plain()), "event: snapshot\ndata: {}\n\n");
  }
});

Deno.test("a snapshot of several MB and thousands of types arrives through gzip identical to GET /current, in bounded steps", async () => {
  const rng = new Rng(seedFromEnv(7010));
  await using tmp = await tempDir();
  await using server = await testServer({ siteDir: tmp.path, fsync: "never" });
  const types = 4000;
  for (let i = 0; i < types; i += 500) {
    const items = Array.from(
      { length: 500 },
      (_, j) => ({ type: `sensor.${i + j}`, data: readings(rng, i + j, 400) }),
    );
    assert.equal((await postJson(`${server.url}/events`, items)).status, 200);
  }
  const current = (await getJson(`${server.url}/current`)).body as Record<string, unknown>;
  assert.equal(Object.keys(current).length, types);
  // Over HTTP, decoded by fetch as a browser would; each read is bounded, not the whole (a busy
  // machine slows the whole, which is the benchmarks' business).
  const res = await fetch(`${server.url}/stream`);
  assert.equal(res.headers.get("content-encoding"), "gzip");
  const reader = res.body!.pipeThrough(new TextDecoderStream()).getReader();
  let text = "";
  while (!text.includes("}\n\n")) {
    const { value, done } = await within(reader.read(), 20_000, "the snapshot");
    assert.ok(!done);
    text += value;
  }
  await reader.cancel();
  assert.ok(text.length > 3_000_000, `${text.length} chars`);
  assert.deepEqual(snapshotOf(text), current);
  // In process: each piece is compressed in a short step and the whole is much smaller.
  const hub = new StreamHub(server.service, { keepaliveMs: 600_000 });
  const gzip = new Tap(hub.open({ gzip: true }), true);
  let longest = 0;
  while (!gzip.text.includes("}\n\n")) {
    const start = performance.now();
    assert.ok(await gzip.take());
    longest = Math.max(longest, performance.now() - start);
  }
  await gzip.cancel();
  const wire = gzip.raw.reduce((n, p) => n + p.byteLength, 0);
  assert.equal(gzip.text, text);
  assert.ok(wire * 1.5 < text.length, `${wire} bytes on the wire for ${text.length}`);
  assert.ok(gzip.raw.length >= text.length / (80 * 1024), `${gzip.raw.length} pieces`);
  assert.ok(longest < 250, `the longest piece took ${longest.toFixed(1)} ms`);
});

Deno.test("Accept-Encoding picks gzip or identity for GET /stream as RFC 9110 says", async () => {
  await using tmp = await tempDir();
  await using server = await testServer({ siteDir: tmp.path });
  const cases: [string, boolean][] = [
    ["gzip", true],
    ["GZIP", true],
    ["  gzip  ", true],
    ["deflate, gzip;q=0.001", true],
    ["gzip; q=1.000", true],
    ["gzip;Q=0.5", true],
    ["x-gzip", true],
    ["*", true],
    ["br;q=1, *;q=0.1", true],
    ["*;q=0, gzip", true],
    ["gzip;q=0", false],
    ["gzip ; q=0.000", false],
    ["gzip;q=0, *", false],
    ["*;q=0", false],
    ["identity", false],
    ["identity;q=0", false],
    ["br, zstd, deflate", false],
  ];
  for (const [header, gzip] of cases) {
    const res = await fetch(`${server.url}/stream`, { headers: { "accept-encoding": header } });
    assert.equal(res.status, 200);
    assert.equal(
      res.headers.get("content-encoding"),
      gzip ? "gzip" : null,
      `Accept-Encoding: ${header}`,
    );
    assert.equal(res.headers.get("vary"), "accept-encoding");
    // fetch decodes gzip: either way the body starts with the snapshot.
    const reader = res.body!.pipeThrough(new TextDecoderStream()).getReader();
    let text = "";
    while (!text.includes("\n\n")) text += (await within(reader.read(), 5000, header)).value ?? "";
    assert.ok(text.startsWith("event: snapshot\ndata: {}"), `${header}: ${text}`);
    await reader.cancel();
  }
});

Deno.test("HEAD /stream answers the gzip GET's headers without a body and leaves no client open", async () => {
  await using tmp = await tempDir();
  await using server = await testServer({ siteDir: tmp.path });
  for (const encoding of ["gzip", "identity"]) {
    const res = await fetch(`${server.url}/stream`, {
      method: "HEAD",
      headers: { "accept-encoding": encoding },
    });
    assert.equal(res.status, 200);
    assert.equal(res.headers.get("content-type"), "text/event-stream; charset=utf-8");
    assert.equal(res.headers.get("content-encoding"), encoding === "gzip" ? "gzip" : null);
    assert.equal(await res.text(), "");
  }
  const metrics = await (await fetch(`${server.url}/metrics`)).text();
  assert.match(metrics, /^telemetry_stream_clients 0$/m);
});

Deno.test("over HTTP, shutdown ends an idle gzip stream with the chunked end and a member whose CRC and length check", async () => {
  await using tmp = await tempDir();
  const server = await testServer({ siteDir: tmp.path });
  let stopped = false;
  try {
    await postJson(`${server.url}/event`, { type: "weather", data: { wind_mps: 3.2 } });
    const port = server.addr.port;
    const gzip = await RawStream.open(port, "/stream", { "accept-encoding": "gzip, deflate, br" });
    const plain = await RawStream.open(port, "/stream", { "accept-encoding": "identity" });
    try {
      assert.equal(gzip.status, 200);
      assert.equal(gzip.headers.get("content-encoding"), "gzip");
      assert.equal(gzip.headers.get("transfer-encoding"), "chunked");
      assert.equal(plain.headers.get("content-encoding"), null);
      for (let n = 1; n <= 3; n++) {
        await postJson(`${server.url}/event`, { type: "status", data: { n } });
        for (const s of [gzip, plain]) {
          await s.until(
            () => s.decodedSoFar().includes(`id: site:${n + 1}\n`),
            5000,
            `site:${n + 1}`,
          );
        }
      }
      await delay(20);
      await server.shutdown();
      stopped = true;
      await gzip.toEnd(5000);
      await plain.toEnd(5000);
      assert.ok(gzip.complete, "the gzip response ended with its terminating chunk");
      assert.ok(plain.complete, "the plain response ended with its terminating chunk");
      const decoded = new TextDecoder().decode(gunzipSync(Buffer.concat(gzip.parts)));
      assert.equal(decoded, new TextDecoder().decode(Buffer.concat(plain.parts)));
      assert.deepEqual(ids(decoded), ["site:2", "site:3", "site:4"]);
    } finally {
      gzip.close();
      plain.close();
    }
  } finally {
    if (!stopped) await server.shutdown();
  }
});

Deno.test("under seeded random load with joins and leaves, every gzip client decodes to exactly what its plain twin was sent", async () => {
  const seed = seedFromEnv(20261126);
  const rng = new Rng(seed);
  const pace = new Rng(seed ^ 0x5eed);
  await using tmp = await tempDir();
  await using service = await openService(tmp.path, { fsync: "never" });
  const stop = new AbortController();
  const flushMs = rng.pick([0, 3, 15]);
  const hub = new StreamHub(service, { keepaliveMs: 600_000, flushMs, signal: stop.signal });
  const types = ["a", "b", "c", "d", "e"];
  await service.record(types.map((type) => ({ type, data: { n: 0 } })));
  interface Pair {
    types: string[] | undefined;
    plain: Tap;
    gzip: Tap;
    outcomes: Promise<{ closed: boolean }>[];
  }
  const open: Pair[] = [];
  const all: Pair[] = [];
  let hurry = false;
  let run: string | undefined;
  for (let step = 0; step < 80; step++) {
    const roll = rng.next();
    if (roll < 0.2 && open.length < 8) {
      const filter = rng.chance(0.4) ? types.filter(() => rng.chance(0.5)) : undefined;
      const options = filter ? { types: filter } : {};
      const slow = rng.chance(0.4);
      const paced = () => (slow && !hurry ? pace.int(0, 12) : 0);
      const plain = new Tap(hub.open(options), false);
      const gzip = new Tap(hub.open({ ...options, gzip: true }), true);
      const pair = {
        types: filter,
        plain,
        gzip,
        outcomes: [plain.drain(paced), gzip.drain(paced)],
      };
      open.push(pair);
      all.push(pair);
    } else if (roll < 0.28 && open.length > 0) {
      const [gone] = open.splice(rng.int(0, open.length - 1), 1);
      await gone!.plain.cancel();
      await gone!.gzip.cancel();
    } else if (roll < 0.75) {
      const n = rng.int(1, 30);
      await service.record(
        Array.from({ length: n }, () => ({
          type: rng.pick(types),
          data: readings(rng, step, rng.int(0, 300)),
        })),
      );
    } else if (roll < 0.85) {
      if (run) await service.stopRun();
      else await service.startRun({ runId: `r${step}` });
      run = run ? undefined : `r${step}`;
    } else if (roll < 0.9) {
      await service.forget(rng.pick(types));
    } else {
      await delay(rng.int(0, 20));
    }
  }
  hurry = true;
  if (run) await service.stopRun();
  await service.startRun({ runId: "final" });
  for (const p of open) {
    for (const t of [p.plain, p.gzip]) {
      await waitUntil(
        () => t.text.includes('"run_id":"final"'),
        10_000,
        `seed ${seed}: the final run on ${p.types}`,
      );
    }
  }
  await delay(20);
  stop.abort();
  for (const p of all) {
    const outcomes = await Promise.all(p.outcomes);
    if (open.includes(p)) {
      assert.deepEqual(outcomes, [{ closed: true }, { closed: true }], `seed ${seed}`);
      assert.deepEqual(p.gzip.plain(), p.plain.plain(), `seed ${seed}, filter ${p.types}`);
    } else {
      // Cancelled: the gzip text decoded so far is what the plain twin had, as far as both got.
      const n = Math.min(p.gzip.text.length, p.plain.text.length);
      assert.equal(p.gzip.text.slice(0, n), p.plain.text.slice(0, n), `seed ${seed}`);
    }
    for (const m of p.plain.text.matchAll(/^event: (?:telemetry|forget)\ndata: (.*)$/gm)) {
      const type = JSON.parse(m[1]!).type;
      assert.ok(!p.types?.length || p.types.includes(type), `seed ${seed}: ${type} to ${p.types}`);
    }
  }
  assert.equal(hub.clients, 0);
  assert.equal(hub.dropped, 0);
});
