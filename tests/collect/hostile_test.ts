/**
 * Push inputs against hostile or broken sources (docs/collect.md, "MQTT" and "INDI"): a fake
 * INDI server (a real TCP listener) that sends an endless element or endless nesting, and an MQTT
 * payload of several MiB through a real `mosquitto`. Each gives one warning, memory stays
 * bounded, and the input stays up (MQTT) or reconnects (INDI).
 */
import assert from "node:assert/strict";
import { Buffer } from "node:buffer";
import mqtt from "npm:mqtt@^5.14.1";
import { indiInput } from "../../collect/inputs/indi.ts";
import { MQTT_MAX_PACKET_BYTES, mqttInput } from "../../collect/inputs/mqtt.ts";
import { MqttSizeGuard } from "../../collect/inputs/mqtt_guard.ts";
import {
  build,
  Listening,
  Mosquitto,
  mosquittoMissing,
  SinkLog,
  waitUntil,
} from "../_shared/collect_push_util.ts";

const MiB = 1024 * 1024;
const encoder = new TextEncoder();

/**
 * What this test's isolate holds (its heap and the buffers outside it). Not the process's RSS:
 * `deno test --parallel` runs the other test files in the same process, so RSS grows with them.
 */
function isolateBytes(): number {
  const { heapUsed, external } = Deno.memoryUsage();
  return heapUsed + external;
}

/**
 * A fake INDI server: the first connection gets `head` then `filler` repeated until the client
 * hangs up (at most `maxBytes`); later connections get one good number vector and stay open.
 */
function fakeIndi(head: string, filler: string, maxBytes = 256 * MiB) {
  const listener = Deno.listen({ hostname: "127.0.0.1", port: 0 });
  const state = { connections: 0, sentToFirst: 0 };
  const open: Deno.Conn[] = [];
  const serving = (async () => {
    for await (const conn of listener) {
      open.push(conn);
      const n = ++state.connections;
      (async () => {
        try {
          if (n > 1) {
            await conn.write(encoder.encode(
              `<setNumberVector device="W" name="P" timestamp="2026-11-27T01:02:03">` +
                `<oneNumber name="T">-12:30:00</oneNumber></setNumberVector>`,
            ));
            return;
          }
          const chunk = encoder.encode(filler.repeat(Math.ceil(65536 / filler.length)));
          await conn.write(encoder.encode(head));
          while (state.sentToFirst < maxBytes) state.sentToFirst += await conn.write(chunk);
        } catch { /* the client hung up, as it should */ }
      })();
    }
  })();
  return {
    port: (listener.addr as Deno.NetAddr).port,
    state,
    async [Symbol.asyncDispose]() {
      listener.close();
      await serving.catch(() => {});
      for (const conn of open) {
        try {
          conn.close();
        } catch { /* already closed */ }
      }
    },
  };
}

async function hostileIndi(head: string, filler: string, kind: string): Promise<void> {
  await using server = fakeIndi(head, filler);
  const sink = new SinkLog();
  const { input } = build(indiInput, { port: server.port, devices: { W: { type: "w" } } });
  const before = isolateBytes();
  {
    await using listening = new Listening(input, sink);
    await waitUntil(
      () => sink.latest("w", "P.T") !== undefined,
      20_000,
      "a value after reconnecting",
    );
    assert.equal(listening.errors.length, 1);
  }
  assert.deepEqual(sink.warnings.map((w) => w.key), [`stream ${kind}`]);
  assert.equal(sink.latest("w", "P.T")!.value, -12.5);
  assert.equal(sink.latest("w", "P.T")!.sourceTs, Date.UTC(2026, 10, 27, 1, 2, 3));
  // The input hung up after about one bound's worth (1 MiB), plus what the sockets buffer.
  assert.ok(
    server.state.sentToFirst < 16 * MiB,
    `sent ${server.state.sentToFirst} bytes before the hang-up`,
  );
  assert.ok(isolateBytes() - before < 64 * MiB, "memory growth bounded");
}

Deno.test("indi drops a server sending an endless element with one warning and reconnects", async () => {
  await hostileIndi('<defTextVector device="W" name="X"><defText name="T">', "x", "size");
});

Deno.test("indi drops a server sending endless nesting with one warning and reconnects", async () => {
  await hostileIndi('<defTextVector device="W" name="X">', "<a>", "depth");
});

Deno.test("indi drops a server sending an endless tag with one warning and reconnects", async () => {
  await hostileIndi('<defTextVector device="W" name="', "x", "size");
});

const missing = mosquittoMissing();
if (missing) {
  // deno-lint-ignore no-console
  console.log(`collect_hostile_test.ts: skipping the MQTT payload test: ${missing}`);
}

Deno.test({
  name: "mqtt drops payloads of several MiB with a warning each, keeps memory bounded and stays up",
  ignore: missing !== undefined,
  async fn() {
    await using broker = await Mosquitto.start();
    const sink = new SinkLog();
    const { input } = build(mqttInput, { url: broker.url, topics: { "w/#": { type: "w" } } });
    await using listening = new Listening(input, sink);
    await waitUntil(() => sink.ups === 1, 10_000, "the subscription");
    const publisher = await mqtt.connectAsync(broker.url, { reconnectPeriod: 0 });
    try {
      const huge = Buffer.alloc(8 * MiB, 0x31);
      const before = isolateBytes();
      for (let i = 0; i < 5; i++) await publisher.publishAsync("w/huge", huge, { qos: 1 });
      await publisher.publishAsync("w/t", "7", { qos: 1 });
      await waitUntil(() => sink.latest("w", "t") !== undefined, 20_000, "the small value after");
      assert.ok(isolateBytes() - before < 64 * MiB, "memory growth bounded");
    } finally {
      await publisher.endAsync();
    }
    assert.equal(sink.warnings.length, 5);
    assert.deepEqual(new Set(sink.warnings.map((w) => w.key)), new Set(["oversized w/#"]));
    assert.match(
      sink.warnings[0]!.message,
      /MQTT w\/huge: a payload of 8388608 bytes is over 1048576/,
    );
    assert.deepEqual(sink.fields.map((f) => [f.field, f.value]), [["t", 7]]);
    assert.equal(listening.errors.length, 0, "the connection stayed up");
    assert.equal(sink.ups, 1);
  },
});

Deno.test("mqtt size guard passes no packet over the bound to the parser, however the bytes are split", () => {
  const topic = encoder.encode("w/huge");
  const length = 2 + topic.length + 2 + 3 * MiB;
  const header = [0x32];
  for (let n = length; n > 0; n = Math.floor(n / 128)) {
    header.push((n % 128) | (n >= 128 ? 0x80 : 0));
  }
  const stream = new Uint8Array(header.length + length + 2);
  stream.set([...header, 0, topic.length, ...topic, 0x12, 0x34]);
  stream.set([0xd0, 0], stream.length - 2); // a PINGRESP after it
  for (const step of [1, 7, 65536]) {
    const guard = new MqttSizeGuard(MQTT_MAX_PACKET_BYTES);
    const out: number[] = [];
    // The head and tail in pieces of `step` bytes, the payload in 64 KiB reads.
    const cuts = [0];
    while (cuts.at(-1)! < stream.length) {
      const at = cuts.at(-1)!;
      cuts.push(
        Math.min(
          stream.length,
          at < 64 || at >= stream.length - 64
            ? at + step
            : Math.min(at + 65536, stream.length - 64),
        ),
      );
    }
    for (let i = 1; i < cuts.length; i++) {
      for (const part of guard.push(stream.subarray(cuts[i - 1], cuts[i]))) out.push(...part);
    }
    assert.ok(out.length < 100, `${out.length} bytes passed on`);
    // PUBLISH QoS 1 with its topic and packet id and the size marker, then the PINGRESP untouched.
    assert.equal(out[0], 0x32);
    assert.deepEqual(out.slice(-2), [0xd0, 0]);
    const text = new TextDecoder().decode(new Uint8Array(out));
    assert.ok(text.includes("w/huge\u0012\u0034"), "topic and packet id kept");
    assert.ok(text.includes("oversized:3145728"), "the marker names the payload's size");
  }
});
