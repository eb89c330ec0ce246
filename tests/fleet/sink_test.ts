/**
 * The fleet's two peers, for real: a `nats-server -js` and a PostgreSQL cluster started in temp
 * directories on free loopback ports. Batches sent twice are stored once; archivers sharing a
 * durable store every message once; a PostgreSQL outage loses nothing.
 * @module
 */

import assert from "node:assert/strict";
import { archive } from "../../fleet/archive.ts";
import { type ForwardItem, idempotencyKey, toRow } from "../../fleet/item.ts";
import { NatsSink } from "../../fleet/sinks/nats.ts";
import { PostgresSink } from "../../fleet/sinks/postgres.ts";
import {
  countRows,
  natsMissing,
  NatsServer,
  postgresMissing,
  PostgresServer,
  waitUntil,
} from "../_shared/fleet_util.ts";

const skipNats = natsMissing();
const skipPg = postgresMissing();
const skipBoth = skipNats ?? skipPg;
// deno-lint-ignore no-console
if (skipBoth) console.log(`skipping fleet sink tests: ${skipBoth}`);

function siteItems(from: number, count: number): ForwardItem[] {
  return Array.from({ length: count }, (_, i) => {
    const seq = from + i;
    return {
      stream: "site" as const,
      runId: "",
      seq,
      line: JSON.stringify({
        seq,
        ts: new Date(Date.UTC(2026, 10, 25, 3, 0, 0, seq)).toISOString(),
        type: seq % 2 ? "weather" : "power",
        data: { n: seq, nested: { s: `é${seq}` } },
        meta: {},
      }),
    };
  });
}

Deno.test({
  name: "PostgresSink stores a batch sent twice exactly once, data as JSON",
  ignore: skipPg !== undefined,
  async fn() {
    await using pg = await PostgresServer.start();
    const sink = await PostgresSink.open(pg.url);
    try {
      const rows = siteItems(1, 300).map((i) => toRow("u1", i));
      assert.equal(await sink.insert(rows), 300);
      assert.equal(await sink.insert(rows), 0);
      assert.equal(await pg.query("select count(*) from telemetry_events"), "300");
      assert.equal(
        await pg.query("select data->'nested'->>'s' from telemetry_events where seq = 7"),
        "é7",
      );
    } finally {
      await sink.close();
    }
  },
});

Deno.test({
  name: "PostgresSink stores a NUL character in data as U+FFFD instead of failing the batch",
  ignore: skipPg !== undefined,
  async fn() {
    await using pg = await PostgresServer.start();
    const sink = await PostgresSink.open(pg.url);
    try {
      const line =
        '{"seq":1,"ts":"2026-11-25T03:00:00.000Z","type":"t","data":{"s":"a\\u0000b"},"meta":{}}';
      await sink.insert([toRow("u1", { stream: "site", runId: "", seq: 1, line })]);
      assert.equal(
        await pg.query("select data->>'s' = 'a' || chr(65533) || 'b' from telemetry_events"),
        "t",
      );
    } finally {
      await sink.close();
    }
  },
});

Deno.test({
  name: "NatsSink publishes each line once with its key, headers and subject",
  ignore: skipNats !== undefined,
  async fn() {
    await using nats = await NatsServer.start();
    const sink = await NatsSink.open({ url: new URL(nats.url) }, "u1");
    try {
      const items = [...siteItems(1, 50), {
        stream: "run" as const,
        runId: "night-1",
        seq: 1,
        line:
          '{"seq":1,"ts":"2026-11-25T03:00:00.000Z","type":"t","data":{},"meta":{"run_id":"night-1"}}',
      }];
      await sink.send(items);
      await sink.send(items); // a resend after a crash: dropped by Nats-Msg-Id
      const source = await import("../../fleet/sinks/nats.ts").then((m) =>
        m.NatsArchiveSource.open({ url: new URL(nats.url) }, "check")
      );
      try {
        const got = await source.take(200, 1000);
        assert.equal(got.length, 51);
        const run = got.find((m) => m.stream === "run")!;
        assert.equal(run.msg.subject, "telemetry.u1.run");
        assert.equal(run.runId, "night-1");
        assert.equal(run.unit, "u1");
        assert.equal(run.msg.headers?.get("Nats-Msg-Id"), idempotencyKey("u1", items[50]!));
        assert.equal(got[0]!.line, items[0]!.line);
      } finally {
        await source.close();
      }
    } finally {
      await sink.close();
    }
  },
});

Deno.test({
  name: "two archivers sharing one durable store every JetStream message in PostgreSQL once",
  ignore: skipBoth !== undefined,
  async fn() {
    await using nats = await NatsServer.start();
    await using pg = await PostgresServer.start();
    const sink = await NatsSink.open({ url: new URL(nats.url) }, "u1");
    const stop = new AbortController();
    const archivers = [1, 2].map(() =>
      archive({ from: nats.url, to: pg.url, batch: 100, signal: stop.signal })
    );
    try {
      for (let i = 0; i < 10; i++) await sink.send(siteItems(1 + i * 200, 200));
      await waitUntil(
        async () => (await countRows(pg)) === 2000,
        20_000,
        "2000 rows",
      );
    } finally {
      stop.abort();
      await sink.close();
    }
    const [a, b] = await Promise.all(archivers);
    assert.equal(a!.messages + b!.messages, 2000);
    assert.ok(a!.messages > 0 && b!.messages > 0, `work shared: ${a!.messages} + ${b!.messages}`);
    assert.equal(await pg.query("select count(distinct seq) from telemetry_events"), "2000");
  },
});

Deno.test({
  name:
    "archive keeps messages in JetStream while PostgreSQL is down and stores them when it returns",
  ignore: skipBoth !== undefined,
  async fn() {
    await using nats = await NatsServer.start();
    await using pg = await PostgresServer.start();
    const lines: string[] = [];
    const stop = new AbortController();
    const sink = await NatsSink.open({ url: new URL(nats.url) }, "u1");
    const running = archive({
      from: nats.url,
      to: pg.url,
      signal: stop.signal,
      log: (_level, line) => lines.push(line),
    });
    try {
      await sink.send(siteItems(1, 100));
      await waitUntil(
        async () => (await countRows(pg)) === 100,
        10_000,
        "first 100",
      );
      await pg.stop("immediate");
      await sink.send(siteItems(101, 400));
      await new Promise((r) => setTimeout(r, 1500));
      await pg.restart();
      await waitUntil(
        async () => (await countRows(pg)) === 500,
        40_000,
        "500 rows",
      );
    } finally {
      stop.abort();
      await sink.close();
    }
    await running;
    assert.ok(lines.some((l) => /PostgreSQL .* unavailable/.test(l)), lines.join("\n"));
    assert.ok(lines.some((l) => /PostgreSQL .* available again/.test(l)), lines.join("\n"));
    assert.equal(lines.filter((l) => /unavailable/.test(l)).length, 1, lines.join("\n"));
  },
});

Deno.test({
  name: "NatsSink fails a batch with a clear reason when no JetStream stream stores its subjects",
  ignore: skipNats !== undefined,
  async fn() {
    await using nats = await NatsServer.start();
    // A stream of that name exists already, for other subjects.
    const other = await NatsSink.open({ url: new URL(nats.url), subjectPrefix: "other" }, "u1");
    await other.close();
    const sink = await NatsSink.open({ url: new URL(nats.url) }, "u1");
    try {
      await assert.rejects(
        () => sink.send(siteItems(1, 3)),
        /no JetStream stream stores these subjects/,
      );
    } finally {
      await sink.close();
    }
  },
});
