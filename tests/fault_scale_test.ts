/**
 * Scale faults: snapshots too large for one string, many event types, many live viewers. Every
 * answer must be a 2xx or a clear 4xx (never a 500), state per type stays bounded, and every
 * subscriber sees every event exactly once. Seeded (`FAULT_SEED` replays a run) and bounded in
 * count; speed is measured by `bench/scale.ts`, not here.
 * @module
 */

import assert from "node:assert/strict";
import { createHandler, ServiceMetrics, startServer } from "../server.ts";
import { ServerSentEventParserStream } from "../wire/sse.ts";
import { StreamHub } from "../http/stream_hub.ts";
import { assertProblem, Rng, seedFromEnv } from "./_shared/fault_util.ts";
import {
  openService,
  postJson,
  promtoolCheck,
  promtoolMissing,
  tempDir,
  testServer,
} from "./_shared/util.ts";

const SEED = seedFromEnv(20261125);

/** The first SSE message of a `GET /stream` body (the snapshot), then cancels the body. */
async function firstMessage(res: Response): Promise<{ event: string; data: string }> {
  const reader = res.body!.pipeThrough(new TextDecoderStream()).pipeThrough(
    new ServerSentEventParserStream(),
  ).getReader();
  const { value } = await reader.read();
  await reader.cancel();
  return value!;
}

/** All chunks of a body, as the consumer receives them. */
async function chunksOf(body: ReadableStream<Uint8Array>): Promise<Uint8Array[]> {
  return await Array.fromAsync(body);
}

function joined(chunks: Uint8Array[]): string {
  const decoder = new TextDecoder();
  return chunks.map((c) => decoder.decode(c, { stream: true })).join("") + decoder.decode();
}

Deno.test("POST /event answers 413 naming --max-snapshot once the snapshot budget is spent, and /current, /stream and a restart still answer", async () => {
  const rng = new Rng(SEED);
  await using tmp = await tempDir();
  const budget = 600_000;
  const server = await testServer({ siteDir: tmp.path, maxSnapshotBytes: budget });
  let refused: { status: number; detail: string } | undefined;
  let accepted = 0;
  for (let i = 0; i < 40 && !refused; i++) {
    const res = await fetch(`${server.url}/event`, {
      method: "POST",
      headers: { "content-type": "application/json" },
      body: JSON.stringify({
        type: `big-${i}`,
        data: { blob: "x".repeat(rng.int(40_000, 90_000)) },
      }),
    });
    const text = await res.text();
    if (res.status === 200) accepted++;
    else {
      const body = assertProblem(413, res.headers.get("content-type"), text, `event ${i}`);
      refused = { status: res.status, detail: body.detail };
    }
  }
  assert.ok(refused, "no event was refused");
  assert.ok(accepted >= 5, `only ${accepted} events fitted the budget`);
  assert.match(refused.detail, /limit of 600000 bytes/);
  assert.match(refused.detail, /raise --max-snapshot\.$/);
  assert.match(refused.detail, /"make_current": false/);

  const res = await fetch(`${server.url}/current`);
  assert.equal(res.status, 200);
  const text = await res.text();
  assert.ok(new TextEncoder().encode(text).byteLength <= budget, "the snapshot is over budget");
  const current = JSON.parse(text);
  assert.equal(Object.keys(current).length, accepted);
  // The same event, not current, is still accepted and stored.
  const notCurrent = await postJson(`${server.url}/event`, {
    type: "big-more",
    data: { blob: "y".repeat(100_000) },
    make_current: false,
  });
  assert.equal(notCurrent.status, 200);

  const stream = await fetch(`${server.url}/stream`);
  const snapshot = await firstMessage(stream);
  assert.equal(snapshot.event, "snapshot");
  assert.deepEqual(JSON.parse(snapshot.data), current);
  await server.shutdown();

  await using again = await testServer({ siteDir: tmp.path, maxSnapshotBytes: budget });
  const after = await fetch(`${again.url}/current`);
  assert.equal(after.status, 200);
  assert.deepEqual(await after.json(), current);
});

Deno.test("POST /events refuses a batch past the snapshot budget whole, naming its largest item", async () => {
  await using tmp = await tempDir();
  await using server = await testServer({ siteDir: tmp.path, maxSnapshotBytes: 100_000 });
  const res = await postJson(`${server.url}/events`, [
    { type: "small", data: { n: 1 } },
    { type: "large", data: { blob: "z".repeat(120_000) } },
  ]);
  assert.equal(res.status, 413);
  assert.match((res.body as { detail: string }).detail, /^Item 1 \(0-based\): .*"large"/);
  assert.deepEqual(await (await fetch(`${server.url}/current`)).json(), {});
});

Deno.test("TelemetryService.record() lets a type shrink while the snapshot is over a lowered budget, and refuses growth", async () => {
  await using tmp = await tempDir();
  {
    await using service = await openService(tmp.path);
    await service.record([{ type: "a", data: { blob: "a".repeat(50_000) } }]);
    await service.record([{ type: "b", data: { blob: "b".repeat(50_000) } }]);
  }
  await using service = await openService(tmp.path, { maxSnapshotBytes: 60_000 });
  assert.equal(service.snapshotSize, 2);
  await service.record([{ type: "a", data: { blob: "small" } }]);
  await assert.rejects(
    service.record([{ type: "c", data: { blob: "c".repeat(20_000) } }]),
    { name: "SnapshotLimitError" },
  );
  await service.record([{ type: "b", data: { n: 1 } }]);
  await service.record([{ type: "c", data: { blob: "c".repeat(20_000) } }]);
  assert.equal(service.snapshotSize, 3);
});

Deno.test("GET /current and the /stream snapshot are sent in bounded chunks that join into the whole object", async () => {
  const rng = new Rng(SEED + 1);
  await using tmp = await tempDir();
  await using service = await openService(tmp.path);
  const handler = createHandler(service, { hostname: "127.0.0.1", keepaliveMs: 60_000 });
  const expected: Record<string, unknown> = {};
  for (let i = 0; i < 12; i++) {
    const [event] = await service.record([{
      type: `t${i}`,
      data: { blob: "é".repeat(rng.int(5_000, 40_000)), i },
    }]);
    expected[`t${i}`] = JSON.parse(event!.line);
  }
  const get = (path: string) =>
    handler(new Request(`http://127.0.0.1${path}`, { headers: { host: "127.0.0.1" } }));
  const chunks = await chunksOf((await get("/current")).body!);
  assert.ok(chunks.length > 1, `one chunk of ${chunks[0]?.byteLength} bytes`);
  for (const chunk of chunks) assert.ok(chunk.byteLength <= 256 * 1024, `${chunk.byteLength}`);
  assert.deepEqual(JSON.parse(joined(chunks)), expected);

  const stream = await get("/stream?type=t3,t7");
  assert.deepEqual(JSON.parse((await firstMessage(stream)).data), {
    t3: expected.t3,
    t7: expected.t7,
  });
});

Deno.test({
  name:
    "GET /current, GET /stream and a restart serve a snapshot of 1 MiB events up to the default budget, refusing the next with 413",
  sanitizeResources: true,
  async fn() {
    await using tmp = await tempDir();
    const server = await startServer({
      siteDir: tmp.path,
      hostname: "127.0.0.1",
      port: 0,
      timeZone: "UTC",
      fsync: "never",
    });
    const blob = "m".repeat(1024 * 1024 - 200);
    let accepted = 0;
    let status = 200;
    // 530 types of 1 MiB would be 530 MiB: past what one string can hold.
    for (let i = 0; i < 530 && status === 200; i++) {
      const res = await fetch(`${server.url}/event`, {
        method: "POST",
        headers: { "content-type": "application/json" },
        body: `{"type":"image-${i}","data":{"b":"${blob}"},"store_permanently":false}`,
      });
      status = res.status;
      const text = await res.text();
      if (status === 200) accepted++;
      else assertProblem(413, res.headers.get("content-type"), text, `event ${i}`);
    }
    assert.equal(status, 413);
    assert.ok(accepted >= 60 && accepted <= 64, `${accepted} types fitted 64 MiB`);
    const current = await fetch(`${server.url}/current`);
    assert.equal(current.status, 200);
    let bytes = 0;
    for await (const chunk of current.body!) bytes += chunk.byteLength;
    assert.ok(bytes > 60 * 1024 * 1024 && bytes <= 64 * 1024 * 1024, `${bytes} bytes`);
    const stream = await fetch(`${server.url}/stream?type=image-0`);
    assert.equal(stream.status, 200);
    assert.equal(JSON.parse((await firstMessage(stream)).data)["image-0"].data.b, blob);
    await server.shutdown();

    // Not stored in the files: only the saved snapshot brings them back.
    await using again = await testServer({ siteDir: tmp.path });
    const res = await fetch(`${again.url}/current/image-${accepted - 1}`);
    assert.equal(res.status, 200);
    assert.equal((await res.json()).data.b, blob);
  },
});

Deno.test("GET /metrics keeps at most 100 telemetry_value series per type, counts the rest as omitted and passes promtool", async () => {
  const rng = new Rng(SEED + 2);
  await using tmp = await tempDir();
  await using server = await testServer({ siteDir: tmp.path });
  const data: Record<string, number | boolean | string> = {};
  for (let i = 0; i < 250; i++) data[`f${i}`] = rng.chance(0.2) ? rng.chance(0.5) : rng.next();
  data.text = "ignored";
  await postJson(`${server.url}/event`, { type: "wide", data });
  await postJson(`${server.url}/event`, { type: "narrow", data: { x: 1 } });
  const text = await (await fetch(`${server.url}/metrics`)).text();
  const wide = text.split("\n").filter((l) => l.startsWith('telemetry_value{type="wide"'));
  assert.equal(wide.length, 100);
  assert.match(wide[0]!, /field="f0"/);
  assert.match(text, /^telemetry_value\{type="narrow",field="x"\} 1$/m);
  assert.match(text, /^telemetry_value_omitted 150$/m);
  const missing = promtoolMissing();
  if (missing) {
    // deno-lint-ignore no-console
    console.log(`skipping the promtool check of this test: ${missing}`);
    return;
  }
  const { ok, report } = await promtoolCheck(text);
  assert.ok(ok, report);
});

Deno.test("ServiceMetrics leaves out whole types past maxValueSeries and reports them as omitted", async () => {
  await using tmp = await tempDir();
  await using service = await openService(tmp.path);
  const metrics = new ServiceMetrics(service, { maxValueSeries: 45 });
  const items = Array.from({ length: 10 }, (_, t) => ({
    type: `t${t}`,
    data: Object.fromEntries(Array.from({ length: 10 }, (_, f) => [`f${f}`, t * 10 + f])),
  }));
  await service.record(items);
  const text = metrics.render();
  assert.equal(text.split("\n").filter((l) => l.startsWith("telemetry_value{")).length, 40);
  assert.match(text, /^telemetry_value_omitted 60$/m);
});

Deno.test("ServiceMetrics counts 3,000 unique make_current:false types under type=_other past 1,000 series", async () => {
  const rng = new Rng(SEED + 3);
  await using tmp = await tempDir();
  await using service = await openService(tmp.path);
  const metrics = new ServiceMetrics(service);
  await service.record([{ type: "weather", data: { wind_mps: 1 } }]);
  for (let i = 0; i < 3000; i += 500) {
    await service.record(Array.from({ length: 500 }, (_, j) => ({
      type: `req-${i + j}-${rng.int(0, 1e9)}`,
      data: {},
      make_current: false,
    })));
  }
  // A type that becomes current later still gets its own series.
  await service.record([{ type: "status", data: { ok: true } }]);
  const totals = metrics.eventsTotal;
  assert.equal(totals.size, 1 + 1000 + 1 + 1);
  assert.equal(totals.get("site\u0000_other"), 2000);
  assert.equal(totals.get("site\u0000status"), 1);
  assert.equal(totals.get("site\u0000weather"), 1);
  assert.equal([...totals.values()].reduce((a, b) => a + b, 0), 3002);
  const text = metrics.render();
  assert.equal(
    text.split("\n").filter((l) => l.startsWith("telemetry_events_total{")).length,
    1003,
  );
  assert.match(text, /^telemetry_events_total\{stream="site",type="_other"\} 2000$/m);
});

Deno.test("GET /stream delivers every event exactly once to each of 200 subscribers", async () => {
  const rng = new Rng(SEED + 4);
  await using tmp = await tempDir();
  await using server = await testServer({ siteDir: tmp.path, fsync: "never" });
  const subscribers = await Promise.all(
    Array.from({ length: 200 }, async () => {
      const res = await fetch(`${server.url}/stream`);
      assert.equal(res.status, 200);
      return res.body!.pipeThrough(new TextDecoderStream()).pipeThrough(
        new ServerSentEventParserStream(),
      ).getReader();
    }),
  );
  // Singles and batches from several concurrent posters, so commits group events variously.
  let total = 0;
  const posters = Array.from({ length: 4 }, async (_, p) => {
    for (let i = 0; i < 20; i++) {
      const n = rng.int(1, 8);
      total += n;
      const items = Array.from({ length: n }, (_, k) => ({ type: `p${p}`, data: { i, k } }));
      const res = n === 1
        ? await postJson(`${server.url}/event`, items[0])
        : await postJson(`${server.url}/events`, items);
      assert.equal(res.status, 200);
    }
  });
  await Promise.all(posters);
  await Promise.all(subscribers.map(async (reader, s) => {
    const seqs: number[] = [];
    const first = await reader.read();
    assert.equal(first.value?.event, "snapshot");
    while (seqs.length < total) {
      const { value, done } = await reader.read();
      assert.ok(!done, `subscriber ${s} ended after ${seqs.length} of ${total} events`);
      if (value.event === "telemetry") seqs.push(Number(value.id.slice("site:".length)));
    }
    await reader.cancel();
    assert.deepEqual(seqs, Array.from({ length: total }, (_, i) => i + 1), `subscriber ${s}`);
  }));
});

Deno.test("StreamHub.open() during a commit sends the events already in its snapshot only there", async () => {
  await using tmp = await tempDir();
  await using service = await openService(tmp.path);
  const hub = new StreamHub(service, { keepaliveMs: 60_000 });
  let late: ReadableStream<Uint8Array> | undefined;
  const unsubscribe = service.subscribe((message) => {
    // Runs after the hub heard of event 1, before the hub sends it anywhere.
    if (message.kind === "telemetry" && message.event.seq === 1) late = hub.open();
  });
  await service.record([{ type: "a", data: { n: 1 } }, { type: "a", data: { n: 2 } }]);
  unsubscribe();
  const reader = late!.pipeThrough(new TextDecoderStream()).pipeThrough(
    new ServerSentEventParserStream(),
  ).getReader();
  const snapshot = await reader.read();
  assert.equal(JSON.parse(snapshot.value!.data).a.seq, 1);
  const next = await reader.read();
  assert.equal(next.value?.id, "site:2");
  await service.record([{ type: "a", data: { n: 3 } }]);
  assert.equal((await reader.read()).value?.id, "site:3");
  await reader.cancel();
});
