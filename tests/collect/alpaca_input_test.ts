/**
 * The `alpaca` input against a small ASCOM Alpaca device served by `Deno.serve` on a loopback
 * port, answering as the Alpaca Device API v1 (OpenAPI `AlpacaDeviceAPI_v1.yaml`) says:
 * `GET /api/v1/{device_type}/{device_number}/{property}` with `ClientID` and
 * `ClientTransactionID`, HTTP 200 and `{Value, ClientTransactionID, ServerTransactionID,
 * ErrorNumber, ErrorMessage}` (docs/collect.md, "Alpaca").
 */
import assert from "node:assert/strict";
import { alpacaInput } from "../../collect/inputs/alpaca.ts";
import { build, configAt, SinkLog } from "../_shared/collect_push_util.ts";
import { tempDir, testServer } from "../_shared/util.ts";
import { startCollector, storedEvents, waitUntil } from "../_shared/collect_util.ts";

type Behaviour = number | boolean | "notimplemented" | "error" | "huge" | "slow" | "html";

/** An Alpaca device whose properties behave as `props` says; keeps every query it got. */
function alpacaDevice(device: string, props: Record<string, Behaviour>) {
  const queries: URLSearchParams[] = [];
  let serverTransaction = 0;
  const slow = new AbortController();
  const server = Deno.serve({ hostname: "127.0.0.1", port: 0, onListen: () => {} }, async (req) => {
    const url = new URL(req.url);
    queries.push(url.searchParams);
    const prefix = `/api/v1/${device}/`;
    const behaviour = url.pathname.startsWith(prefix)
      ? props[url.pathname.slice(prefix.length)]
      : undefined;
    if (behaviour === undefined) return new Response("unknown device or member", { status: 400 });
    const base = {
      ClientTransactionID: Number(url.searchParams.get("ClientTransactionID") ?? 0),
      ServerTransactionID: ++serverTransaction,
    };
    if (behaviour === "slow") {
      await new Promise((r) => {
        const t = setTimeout(r, 10_000);
        slow.signal.addEventListener("abort", () => (clearTimeout(t), r(null)));
      });
    }
    if (behaviour === "html") return new Response("<html>oops</html>", { status: 500 });
    if (behaviour === "huge") {
      return Response.json({
        ...base,
        Value: 1,
        ErrorNumber: 0,
        ErrorMessage: "x".repeat(200_000),
      });
    }
    if (behaviour === "notimplemented") {
      return Response.json({ ...base, ErrorNumber: 0x400, ErrorMessage: "not implemented" });
    }
    if (behaviour === "error") {
      return Response.json({ ...base, ErrorNumber: 0x500, ErrorMessage: "sensor read failed" });
    }
    return Response.json({ ...base, Value: behaviour, ErrorNumber: 0, ErrorMessage: "" });
  });
  return {
    url: `http://127.0.0.1:${server.addr.port}`,
    queries,
    async [Symbol.asyncDispose]() {
      slow.abort();
      await server.shutdown();
    },
  };
}

const signal = new AbortController().signal;

Deno.test("alpaca polls every ObservingConditions property and leaves out those that are not implemented", async () => {
  const props: Record<string, Behaviour> = {
    cloudcover: 12.5,
    dewpoint: -3,
    humidity: 80,
    pressure: 1013.2,
    rainrate: 0,
    skybrightness: "notimplemented",
    skyquality: 21.3,
    skytemperature: -25,
    starfwhm: "notimplemented",
    temperature: 4.5,
    winddirection: 270,
    windgust: 8,
    windspeed: 3.5,
  };
  await using device = alpacaDevice("observingconditions/0", props);
  const sink = new SinkLog();
  const { input } = build(alpacaInput, { url: device.url, device: "observingconditions/0" });
  await input.poll!(sink, signal);
  await input.poll!(sink, signal);
  const expected = Object.fromEntries(
    Object.entries(props).filter(([, v]) => typeof v === "number"),
  );
  assert.deepEqual(sink.records.map((r) => r.data), [expected, expected]);
  assert.deepEqual(sink.warnings, []);
  // 13 the first time, 11 after: NotImplemented is not asked again.
  assert.equal(device.queries.length, 24);
  const ids = device.queries.map((q) => Number(q.get("ClientTransactionID")));
  assert.deepEqual([...ids].sort((a, b) => a - b), Array.from({ length: 24 }, (_, i) => i + 1));
  assert.equal(new Set(device.queries.map((q) => q.get("ClientID"))).size, 1);
  assert.ok(Number(device.queries[0]!.get("ClientID")) >= 1);
});

Deno.test("alpaca maps fields to properties, reads issafe, and warns about other errors but posts the rest", async () => {
  await using device = alpacaDevice("safetymonitor/0", { issafe: true });
  const sink = new SinkLog();
  const { input } = build(alpacaInput, {
    url: device.url,
    device: "SafetyMonitor/0",
    fields: { safe: "IsSafe" },
  });
  await input.poll!(sink, signal);
  assert.deepEqual(sink.records.map((r) => r.data), [{ safe: true }]);

  await using weather = alpacaDevice("observingconditions/1", {
    temperature: 3,
    humidity: "error",
  });
  const { input: partial } = build(alpacaInput, {
    url: weather.url,
    device: "observingconditions/1",
    fields: { t: "temperature", h: "humidity" },
  });
  const log = new SinkLog();
  await partial.poll!(log, signal);
  assert.deepEqual(log.records.map((r) => r.data), [{ t: 3 }]);
  assert.equal(log.warnings.length, 1);
  assert.match(log.warnings[0]!.message, /humidity: error 0x500 sensor read failed/);
});

Deno.test("alpaca bounds an answer's size and time: a huge or slow answer is a warning, all failing rejects", async () => {
  await using device = alpacaDevice("observingconditions/0", {
    temperature: 2,
    humidity: "huge",
    pressure: "slow",
  });
  const sink = new SinkLog();
  const { input } = build(alpacaInput, {
    url: device.url,
    device: "observingconditions/0",
    fields: { t: "temperature", h: "humidity", p: "pressure" },
    timeout_s: 0.5,
  });
  const started = Date.now();
  await input.poll!(sink, signal);
  assert.ok(Date.now() - started < 5_000, "the slow answer was not waited for");
  assert.deepEqual(sink.records.map((r) => r.data), [{ t: 2 }]);
  assert.deepEqual(sink.warnings.map((w) => w.message.replace(/^.*?: /, "")).sort(), [
    'humidity: the answer of humidity is larger than 65536 bytes; refused (raise "max_bytes" if it is really that large)',
    "pressure: no answer within 500 ms (timeout_s)",
  ]);

  await using broken = alpacaDevice("observingconditions/0", { temperature: "html" });
  const { input: down } = build(alpacaInput, {
    url: broken.url,
    device: "observingconditions/0",
    fields: { t: "temperature" },
  });
  await assert.rejects(
    down.poll!(new SinkLog(), signal),
    /Alpaca http:\/\/127\.0\.0\.1:\d+\/api\/v1\/observingconditions\/0: temperature: HTTP 500/,
  );
});

Deno.test("alpaca refuses a bad device or an unknown property, naming the key and the fix", () => {
  assert.throws(
    () => alpacaInput.parse({ url: "http://x:11111", device: "telescope/0" }, configAt()),
    /inputs\[0\]\.device: must be observingconditions\/N or safetymonitor\/N/,
  );
  assert.throws(
    () =>
      alpacaInput.parse({
        url: "http://x:11111",
        device: "safetymonitor/0",
        fields: { t: "temperature" },
      }, configAt()),
    /inputs\[0\]\.fields\.t: is not a property of safetymonitor \(use one of issafe\)/,
  );
  assert.throws(
    () => alpacaInput.parse({ url: "http://x:11111/api", device: "safetymonitor/0" }, configAt()),
    /inputs\[0\]\.url: must name only the server/,
  );
});

Deno.test("a collector with an alpaca input stores the device's implemented properties in the service", async () => {
  await using dir = await tempDir();
  await using service = await testServer({ siteDir: dir.path });
  await using device = alpacaDevice("observingconditions/0", {
    temperature: 3.5,
    humidity: 71,
    skyquality: "notimplemented",
  });
  await using _collector = startCollector([{
    name: "boltwood",
    kind: "alpaca",
    type: "weather",
    url: device.url,
    device: "observingconditions/0",
    fields: { temperature: "temperature", humidity: "humidity", sqm: "skyquality" },
    every_s: 0.2,
  }], service.url);
  await waitUntil(
    async () => (await storedEvents(dir.path)).length >= 2,
    10_000,
    "two polls stored",
  );
  const events = await storedEvents(dir.path);
  assert.deepEqual(events.map((e) => [e.type, e.data]).slice(0, 2), [
    ["weather", { temperature: 3.5, humidity: 71 }],
    ["weather", { temperature: 3.5, humidity: 71 }],
  ]);
});
