/**
 * The `mqtt` input against a real `mosquitto` on a loopback port (docs/collect.md, "MQTT").
 * Messages are published by MQTT.js itself, as a weather station's bridge would.
 */
import assert from "node:assert/strict";
import { tempDir, testServer } from "../_shared/util.ts";
import { linesWith, startCollector, storedEvents } from "../_shared/collect_util.ts";
import mqtt from "npm:mqtt@^5.14.1";
import { Buffer } from "node:buffer";
import { mqttInput } from "../../collect/inputs/mqtt.ts";
import {
  build,
  configAt,
  Listening,
  Mosquitto,
  mosquittoMissing,
  SinkLog,
  waitUntil,
} from "../_shared/collect_push_util.ts";

const missing = mosquittoMissing();
if (missing) {
  // deno-lint-ignore no-console
  console.log(`collect_mqtt_test.ts: skipping: ${missing}`);
}
const ignore = missing !== undefined;

/** Publishes `messages` (topic, payload) with QoS 1 and disconnects. */
export async function publish(
  url: string,
  messages: [string, string | Uint8Array][],
): Promise<void> {
  const client = await mqtt.connectAsync(url, { reconnectPeriod: 0 });
  try {
    for (const [topic, payload] of messages) {
      await client.publishAsync(
        topic,
        typeof payload === "string" ? payload : Buffer.from(payload),
        { qos: 1 },
      );
    }
  } finally {
    await client.endAsync();
  }
}

Deno.test({
  name: "mqtt delivers JSON objects as fields and scalars as the topic's last segment, by filter",
  ignore,
  async fn() {
    await using broker = await Mosquitto.start();
    const sink = new SinkLog();
    const { input } = build(mqttInput, {
      url: broker.url,
      topics: {
        "station/+/temp": { type: "weather" },
        "roof/#": { type: "roof", field: "state" },
        "sky/json": { type: "sky" },
      },
    });
    {
      await using _ = new Listening(input, sink);
      await waitUntil(() => sink.ups === 1, 10_000, "the subscription");
      await publish(broker.url, [
        ["station/north/temp", "12.5"],
        ["station/north/deep/temp", "99"],
        ["roof/a/b", "open"],
        ["roof/flag", "true"],
        ["sky/json", '{"cloud": -20.5, "rain": false, "name": "sqm"}'],
        ["other/topic", "1"],
      ]);
      await waitUntil(() => sink.fields.length >= 6, 10_000, "six fields");
    }
    assert.deepEqual(sink.fields.map((f) => [f.type, f.field, f.value]), [
      ["weather", "temp", 12.5],
      ["roof", "state", "open"],
      ["roof", "state", true],
      ["sky", "cloud", -20.5],
      ["sky", "rain", false],
      ["sky", "name", "sqm"],
    ]);
    assert.deepEqual(sink.warnings, []);
  },
});

Deno.test({
  name: "mqtt reads a JSON object's source time from the ts key and selects fields by pointer",
  ignore,
  async fn() {
    await using broker = await Mosquitto.start();
    const sink = new SinkLog();
    const { input } = build(mqttInput, {
      url: broker.url,
      topics: { "w": { type: "weather" } },
    }, { ts: "/time", tsFormat: "unix", fields: { temperature: "/m/t" } });
    {
      await using _ = new Listening(input, sink);
      await waitUntil(() => sink.ups === 1, 10_000, "the subscription");
      await publish(broker.url, [["w", '{"time": 1800000000, "m": {"t": 4.25}, "x": 1}']]);
      await waitUntil(() => sink.fields.length >= 1, 10_000, "a field");
    }
    assert.deepEqual(sink.fields, [
      { type: "weather", field: "temperature", value: 4.25, sourceTs: 1_800_000_000_000 },
    ]);
  },
});

Deno.test({
  name: "mqtt values resume after the broker restarts mid-stream",
  ignore,
  async fn() {
    await using broker = await Mosquitto.start();
    const sink = new SinkLog();
    const { input } = build(mqttInput, { url: broker.url, topics: { "w/#": { type: "weather" } } });
    await using listening = new Listening(input, sink);
    await waitUntil(() => sink.ups === 1, 10_000, "the subscription");
    await publish(broker.url, [["w/t", "1"]]);
    await waitUntil(() => sink.latest("weather", "t")?.value === 1, 10_000, "the first value");
    await broker.kill();
    await waitUntil(() => listening.errors.length >= 1, 10_000, "listen to reject on the loss");
    await broker.restart();
    await waitUntil(() => sink.ups === 2, 15_000, "the second subscription");
    await publish(broker.url, [["w/t", "2"]]);
    await waitUntil(
      () => sink.latest("weather", "t")?.value === 2,
      10_000,
      "the value after the restart",
    );
    assert.match(listening.errors[0]!.message, /MQTT mqtt:\/\/127\.0\.0\.1:\d+/);
  },
});

Deno.test("mqtt refuses a config without topics or with a bad url, naming the key and the fix", () => {
  const bad: [Record<string, unknown>, RegExp][] = [
    [
      { url: "http://x", topics: { a: { type: "t" } } },
      /inputs\[0\]\.url: must start with mqtt:\/\//,
    ],
    [{ url: "mqtt://x" }, /inputs\[0\]\.topics: must be an object/],
    [
      { url: "mqtt://x", topics: { "a/#/b": { type: "t" } } },
      /topics\.a\/#\/b: is not an MQTT topic filter/,
    ],
    [{ url: "mqtt://x", topics: { a: {} } }, /topics\.a\.type: is missing/],
  ];
  for (const [raw, message] of bad) {
    assert.throws(() => mqttInput.parse(raw, configAt()), message);
  }
  const ok = mqttInput.parse(
    { url: "mqtts://u%40x:p@broker.lan", type: "w", topics: { a: {} } },
    configAt(),
  );
  assert.deepEqual(
    [ok.url, ok.username, ok.password, ok.topics[0]![1].type],
    ["mqtts://broker.lan:8883", "u@x", "p", "w"],
  );
  assert.deepEqual(mqttInput.needs!(ok), {
    net: ["broker.lan:8883"],
    ignoreEnv: ["DEBUG", "READABLE_STREAM"],
  });
});

Deno.test("mqtt rejects listen naming the broker and the reason when nothing listens there", async () => {
  const listener = Deno.listen({ hostname: "127.0.0.1", port: 0 });
  const port = (listener.addr as Deno.NetAddr).port;
  listener.close();
  const { input } = build(mqttInput, {
    url: `mqtt://127.0.0.1:${port}`,
    topics: { a: { type: "t" } },
  });
  await assert.rejects(
    input.listen!(new SinkLog(), new AbortController().signal, () => {}),
    new RegExp(`^Error: MQTT mqtt://127\\.0\\.0\\.1:${port}: .*(refused|ECONNREFUSED)`, "i"),
  );
});

Deno.test("mqtt rejects listen with the size guard's reason when a broker sends a huge packet that is not a PUBLISH", async () => {
  // A fake broker (a real TCP listener): CONNACK, then a SUBACK announcing 16 MiB.
  const listener = Deno.listen({ hostname: "127.0.0.1", port: 0 });
  const port = (listener.addr as Deno.NetAddr).port;
  const serving = (async () => {
    const conn = await listener.accept();
    try {
      await conn.read(new Uint8Array(1024));
      await conn.write(new Uint8Array([0x20, 2, 0, 0, 0x90, 0x80, 0x80, 0x80, 0x08]));
      await conn.read(new Uint8Array(1024));
    } catch {
      /* the client hung up */
    } finally {
      conn.close();
    }
  })();
  try {
    const { input } = build(mqttInput, {
      url: `mqtt://127.0.0.1:${port}`,
      topics: { a: { type: "t" } },
    });
    await assert.rejects(
      input.listen!(new SinkLog(), new AbortController().signal, () => {}),
      /MQTT mqtt:\/\/127\.0\.0\.1:\d+: the broker sent an MQTT packet of 16777216 bytes, over 1048576/,
    );
  } finally {
    listener.close();
    await serving;
  }
});

Deno.test({
  name: "a collector with an mqtt input stores the merged record of a type's topics in the service",
  ignore,
  async fn() {
    await using dir = await tempDir();
    await using service = await testServer({ siteDir: dir.path });
    await using broker = await Mosquitto.start();
    await using collector = startCollector([{
      name: "station",
      kind: "mqtt",
      url: broker.url,
      topics: { "w/+": { type: "weather" } },
    }], service.url);
    await waitUntil(() => linesWith(collector.log, "up").length > 0, 10_000, "the input up");
    await publish(broker.url, [["w/t", "4.5"], ["w/rain", "false"], ["w/sky", '{"sqm": 21.2}']]);
    await waitUntil(
      async () =>
        (await storedEvents(dir.path)).some((e) => e.data.sqm === 21.2 && e.data.t === 4.5),
      10_000,
      "the merged event",
    );
    const last = (await storedEvents(dir.path)).at(-1)!;
    assert.equal(last.type, "weather");
    assert.deepEqual(last.data, { t: 4.5, rain: false, sqm: 21.2 });
  },
});
