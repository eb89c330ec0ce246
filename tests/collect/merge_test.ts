/**
 * Merging values heard one at a time into records per type (docs/collect.md, "Merging"), through
 * a push input of the test's own that hears values from a real local HTTP stream (one JSON value
 * per line) and posts to a real service: the record holds the latest value of each field, leaves
 * at most once per `merge_ms`, and carries the newest measurement time among its values.
 *
 * @module
 */

import assert from "node:assert/strict";
import type { InputKind } from "../../collect/inputs/input.ts";
import { FieldMerger } from "../../collect/field_merge.ts";
import { tempDir, testServer } from "../_shared/util.ts";
import {
  linesWith,
  localServer,
  startCollector,
  storedEvents,
  waitUntil,
} from "../_shared/collect_util.ts";

/** A push kind: reads `{"type", "field", "value", "ts"?}` lines from `url` until the stream ends. */
const streamKind: InputKind<{ url: string }> = {
  kind: "stream",
  polled: false,
  keys: ["url"],
  parse: (raw) => ({ url: String(raw.url) }),
  create: (config) => ({
    listen: async (sink, signal, up) => {
      const res = await fetch(config.url, { signal });
      up();
      let rest = "";
      for await (const chunk of res.body!.pipeThrough(new TextDecoderStream())) {
        rest += chunk;
        const lines = rest.split("\n");
        rest = lines.pop()!;
        for (const line of lines) {
          const v = JSON.parse(line);
          sink.field({ type: v.type, field: v.field, value: v.value, sourceTs: v.ts });
        }
      }
    },
  }),
};

Deno.test("values heard together leave as one record timed by the newest of them", async () => {
  await using dir = await tempDir();
  await using service = await testServer({ siteDir: dir.path });
  let release: (() => void) | undefined;
  const hold = new Promise<void>((r) => release = r);
  await using source = localServer(() =>
    new Response(
      new ReadableStream({
        async start(controller) {
          const put = (v: unknown) =>
            controller.enqueue(new TextEncoder().encode(JSON.stringify(v) + "\n"));
          put({ type: "wx", field: "P.TEMP", value: 4.5, ts: 1_800_000_000_000 });
          put({ type: "wx", field: "P.HUM", value: 61, ts: 1_800_000_002_000 });
          put({ type: "wx", field: "state", value: { ok: true }, ts: 1_800_000_001_000 });
          await hold;
          controller.close();
        },
      }),
    )
  );
  try {
    await using _collector = startCollector(
      [{ name: "s", kind: "stream", url: source.url, merge_ms: 200 }],
      service.url,
      undefined,
      [streamKind],
    );
    await waitUntil(async () => (await storedEvents(dir.path)).length === 1, 10_000, "the record");
    const [event] = await storedEvents(dir.path);
    assert.deepEqual(event!.data, { P: { TEMP: 4.5, HUM: 61 }, ok: true });
    assert.equal(event!.ts, new Date(1_800_000_002_000).toISOString());
  } finally {
    release!();
  }
});

Deno.test("a type is merged into at most one record per merge_ms, keeping the latest value of each field", () => {
  const seen: { data: Record<string, unknown>; at: number; ts: number }[] = [];
  const merger = new FieldMerger(
    10_000,
    (_type, data, ts) => seen.push({ data, at: Date.now(), ts }),
  );
  try {
    merger.add({ type: "t", field: "a", value: 1, sourceTs: 5 }, 0);
    merger.flush();
    // Within merge_ms of that record: held, the later value of a field replacing the earlier.
    merger.add({ type: "t", field: "a", value: 2, sourceTs: 6 }, 0);
    merger.add({ type: "t", field: "a", value: 3, sourceTs: 7 }, 0);
    merger.add({ type: "t", field: "b", value: 9 }, 3);
    assert.equal(seen.length, 1, "held until merge_ms has passed");
    merger.flush();
    assert.deepEqual(seen.map((s) => s.data), [{ a: 1 }, { a: 3, b: 9 }]);
    assert.deepEqual(seen.map((s) => s.ts), [5, 7]);
  } finally {
    merger.close();
  }
});

Deno.test("a push input whose connection drops is logged down once and up once when it reconnects", async () => {
  await using dir = await tempDir();
  await using service = await testServer({ siteDir: dir.path });
  let n = 0;
  await using source = localServer(() => {
    n++;
    // Every connection sends one value, then ends: the collector reconnects with back-off.
    return new Response(JSON.stringify({ type: "c", field: "n", value: n }) + "\n");
  });
  await using collector = startCollector(
    [{ name: "s", kind: "stream", url: source.url, merge_ms: 0 }],
    service.url,
    undefined,
    [streamKind],
  );
  await waitUntil(() => source.requests() >= 3, 20_000, "three connections");
  const lines = linesWith(collector.log, /^input s /).map((l) => l.message);
  assert.ok(lines.length >= 2, lines.join("\n"));
  // Alternating: up, down, up, down... one line per change of state, never two alike in a row.
  for (let i = 1; i < lines.length; i++) {
    assert.notEqual(lines[i]!.split(" ")[3], lines[i - 1]!.split(" ")[3], lines.join("\n"));
  }
  assert.match(lines[1]!, /down: the connection ended; retrying with back-off/);
  await waitUntil(async () => (await storedEvents(dir.path)).length >= 3, 10_000, "events");
});
