/**
 * The `indi` input against a real `indiserver` running `indi_simulator_weather` on a loopback
 * port (docs/collect.md, "INDI"), and the incremental parser of the INDI stream.
 */
import assert from "node:assert/strict";
import { tempDir, testServer } from "../_shared/util.ts";
import { linesWith, startCollector, storedEvents } from "../_shared/collect_util.ts";
import { indiInput } from "../../collect/inputs/indi.ts";
import { IndiStreamError, IndiXmlParser } from "../../collect/inputs/indi_xml.ts";
import {
  build,
  configAt,
  indiMissing,
  IndiServer,
  Listening,
  SinkLog,
  waitUntil,
} from "../_shared/collect_push_util.ts";

const missing = indiMissing();
if (missing) {
  // deno-lint-ignore no-console
  console.log(`collect_indi_test.ts: skipping: ${missing}`);
}
const ignore = missing !== undefined;
const DEVICE = "Weather Simulator";

Deno.test({
  name:
    "indi connects the weather simulator and delivers its numbers and lights with the vector's timestamp",
  ignore,
  async fn() {
    await using server = await IndiServer.start();
    const sink = new SinkLog();
    const { input } = build(indiInput, {
      port: server.port,
      devices: {
        [DEVICE]: {
          type: "weather",
          connect: true,
          properties: ["WEATHER_PARAMETERS", "WEATHER_STATUS", "CONNECTION"],
        },
      },
    }, { fields: { temperature: "WEATHER_PARAMETERS.WEATHER_TEMPERATURE" } });
    const before = Date.now();
    {
      await using _ = new Listening(input, sink);
      await waitUntil(
        () =>
          sink.latest("weather", "temperature") !== undefined &&
          sink.latest("weather", "WEATHER_STATUS.WEATHER_TEMPERATURE") !== undefined,
        20_000,
        "the simulator's weather after CONNECT",
      );
    }
    const temperature = sink.latest("weather", "temperature")!;
    assert.equal(typeof temperature.value, "number");
    // INDI timestamps are whole seconds of UTC: the measurement time is the driver's.
    assert.ok(temperature.sourceTs! >= Math.floor(before / 1000) * 1000 - 2000, "sourceTs is now");
    assert.ok(temperature.sourceTs! <= Date.now() + 1000);
    assert.equal(temperature.sourceTs! % 1000, 0);
    assert.ok(
      ["Idle", "Ok", "Busy", "Alert"].includes(
        sink.latest("weather", "WEATHER_STATUS.WEATHER_TEMPERATURE")!.value as string,
      ),
    );
    assert.equal(sink.latest("weather", "CONNECTION.CONNECT")?.value, true, "the switch went On");
    assert.equal(
      sink.fields.some((f) => f.field.startsWith("DRIVER_INFO")),
      false,
      "only listed properties",
    );
    assert.deepEqual(sink.warnings, []);
  },
});

Deno.test({
  name: "indi values resume after the indiserver restarts",
  ignore,
  async fn() {
    await using server = await IndiServer.start();
    const sink = new SinkLog();
    const { input } = build(indiInput, {
      port: server.port,
      devices: { [DEVICE]: { type: "weather", connect: true, properties: ["WEATHER_PARAMETERS"] } },
    });
    await using listening = new Listening(input, sink);
    const field = "WEATHER_PARAMETERS.WEATHER_TEMPERATURE";
    await waitUntil(() => sink.latest("weather", field) !== undefined, 20_000, "the first values");
    await server.kill();
    await waitUntil(() => listening.errors.length >= 1, 10_000, "listen to reject on the loss");
    const heard = sink.fields.length;
    await server.restart();
    await waitUntil(
      () => sink.fields.slice(heard).some((f) => f.field === field) && sink.ups >= 2,
      20_000,
      "values after the restart",
    );
    assert.match(listening.errors[0]!.message, /^INDI 127\.0\.0\.1:\d+: /);
  },
});

Deno.test("indi parser reads elements split anywhere, skips noise and decodes entities", () => {
  const stream =
    `<?xml version="1.0"?>junk<!-- c > d --><setTextVector device="A&amp;B" name='P' timestamp="2026-01-01T00:00:00">` +
    `<oneText name="T">x &lt; y &#x263A;</oneText></setTextVector>\n<message device="A" message="a > b"/>`;
  for (const step of [1, 3, 7, stream.length]) {
    const parser = new IndiXmlParser();
    const out = [];
    for (let i = 0; i < stream.length; i += step) {
      out.push(...parser.push(stream.slice(i, i + step)));
    }
    assert.deepEqual(out.map((e) => e.name), ["setTextVector", "message"]);
    assert.equal(out[0]!.attrs.device, "A&B");
    assert.equal(out[0]!.children[0]!.text, "x < y \u263A");
    assert.equal(out[1]!.attrs.message, "a > b");
  }
});

Deno.test("indi parser refuses an element over the size bound and nesting over the depth bound", () => {
  const big = new IndiXmlParser({ maxElementChars: 1000 });
  big.push("<defTextVector><defText>");
  assert.throws(() => {
    for (let i = 0; i < 100; i++) big.push("x".repeat(100));
  }, (e) => e instanceof IndiStreamError && e.kind === "size");
  const deep = new IndiXmlParser({ maxDepth: 8 });
  assert.throws(
    () => deep.push("<a>".repeat(9)),
    (e) => e instanceof IndiStreamError && e.kind === "depth",
  );
  const tag = new IndiXmlParser({ maxElementChars: 1000 });
  assert.throws(
    () => tag.push(`<a b="${"x".repeat(2000)}`),
    (e) => e instanceof IndiStreamError && e.kind === "size",
  );
});

Deno.test("indi refuses a config without devices or with a bad port, naming the key and the fix", () => {
  assert.throws(
    () => indiInput.parse({ devices: {} }, configAt()),
    /inputs\[0\]\.devices: must be an object of at least one device/,
  );
  assert.throws(
    () => indiInput.parse({ port: 0, devices: { A: { type: "t" } } }, configAt()),
    /inputs\[0\]\.port: must be a port number/,
  );
  assert.throws(
    () => indiInput.parse({ devices: { A: {} } }, configAt()),
    /inputs\[0\]\.devices\.A\.type: is missing/,
  );
  const config = indiInput.parse({ type: "w", devices: { A: { properties: ["P"] } } }, configAt());
  assert.deepEqual(config, {
    host: "127.0.0.1",
    port: 7624,
    devices: { A: { type: "w", connect: false, properties: ["P"] } },
  });
});

Deno.test({
  name:
    "a collector with an indi input stores the simulator's weather with the driver's timestamp as ts",
  ignore,
  async fn() {
    await using dir = await tempDir();
    await using service = await testServer({ siteDir: dir.path });
    await using server = await IndiServer.start();
    await using collector = startCollector([{
      name: "indi-weather",
      kind: "indi",
      port: server.port,
      devices: { [DEVICE]: { type: "weather", connect: true, properties: ["WEATHER_PARAMETERS"] } },
      fields: { temperature: "WEATHER_PARAMETERS.WEATHER_TEMPERATURE" },
    }], service.url);
    await waitUntil(
      async () =>
        (await storedEvents(dir.path)).some((e) => typeof e.data.temperature === "number"),
      20_000,
      "a stored weather event",
    );
    const event = (await storedEvents(dir.path)).find((e) =>
      typeof e.data.temperature === "number"
    )!;
    assert.equal(event.type, "weather");
    // INDI's timestamp is whole seconds of UTC, written without a zone: the event's ts is it.
    assert.match(event.ts, /^\d{4}-\d\d-\d\dT\d\d:\d\d:\d\d\.000Z$/);
    assert.ok(Math.abs(Date.parse(event.ts) - Date.now()) < 60_000);
    assert.equal(
      typeof (event.data.WEATHER_PARAMETERS as Record<string, unknown>)?.WEATHER_WIND_SPEED,
      "number",
    );
    assert.deepEqual(linesWith(collector.log, "down"), []);
  },
});
