import assert from "node:assert/strict";
import { checkEventType, type Envelope, parseTimestamp, TelemetryEvent } from "../event.ts";

function envelope(): Envelope {
  return {
    seq: 42,
    ts: "2026-11-22T03:00:00.123Z",
    type: "weather",
    data: { wind_mps: 2.1, sky: { cloud: [1, 2] } },
    meta: { run_id: "001" },
  };
}

const LINE =
  '{"seq":42,"ts":"2026-11-22T03:00:00.123Z","type":"weather","data":{"wind_mps":2.1,"sky":{"cloud":[1,2]}},"meta":{"run_id":"001"}}';

Deno.test("TelemetryEvent exposes seq, ts, type, data and meta as properties", () => {
  const event = new TelemetryEvent(envelope());
  assert.equal(event.seq, 42);
  assert.equal(event.ts, "2026-11-22T03:00:00.123Z");
  assert.equal(event.type, "weather");
  assert.deepEqual(event.data, { wind_mps: 2.1, sky: { cloud: [1, 2] } });
  assert.deepEqual(event.meta, { run_id: "001" });
});

Deno.test("TelemetryEvent._id is the string form of seq, by property and by index", () => {
  const event = new TelemetryEvent(envelope());
  assert.equal(event._id, "42");
  assert.equal(event["_id"], "42");
});

Deno.test("TelemetryEvent.date equals ts", () => {
  const event = new TelemetryEvent(envelope());
  assert.equal(event.date, event.ts);
  assert.equal(event["date"], "2026-11-22T03:00:00.123Z");
});

Deno.test("TelemetryEvent answers the in operator for fields and legacy aliases", () => {
  const event = new TelemetryEvent(envelope());
  for (const name of ["seq", "ts", "type", "data", "meta", "_id", "date"]) {
    assert.ok(name in event, `${name} in event`);
  }
});

Deno.test("TelemetryEvent.get() reads fields and aliases and gives undefined for other names", () => {
  const event = new TelemetryEvent(envelope());
  assert.equal(event.get("seq"), 42);
  assert.equal(event.get("_id"), "42");
  assert.equal(event.get("date"), event.ts);
  assert.deepEqual(event.get("meta"), { run_id: "001" });
  assert.equal(event.get("toJSON"), undefined);
  assert.equal(event.get("constructor"), undefined);
});

Deno.test("TelemetryEvent.has() is true for fields and aliases only", () => {
  const event = new TelemetryEvent(envelope());
  assert.deepEqual(
    ["seq", "ts", "type", "data", "meta", "_id", "date", "get", "toJSON", "constructor", ""]
      .map((n) => event.has(n)),
    [true, true, true, true, true, true, true, false, false, false, false],
  );
});

Deno.test("TelemetryEvent cannot be changed: assigning a field throws TypeError", () => {
  const event = new TelemetryEvent(envelope());
  assert.ok(Object.isFrozen(event));
  assert.throws(() => {
    (event as { seq: number }).seq = 1;
  }, TypeError);
  assert.equal(event.seq, 42);
});

Deno.test("TelemetryEvent deep-freezes data and meta", () => {
  const event = new TelemetryEvent(envelope());
  const sky = event.data.sky as { cloud: number[] };
  assert.throws(() => sky.cloud.push(3), TypeError);
  assert.throws(() => {
    (event.meta as Record<string, unknown>).run_id = "002";
  }, TypeError);
  assert.deepEqual(sky.cloud, [1, 2]);
});

Deno.test("TelemetryEvent copies data and meta, so changing the source leaves it intact", () => {
  const source = envelope();
  const event = new TelemetryEvent(source);
  (source.data.sky as { cloud: number[] }).cloud.push(3);
  source.meta.run_id = "changed";
  assert.deepEqual(event.data.sky, { cloud: [1, 2] });
  assert.equal(event.meta.run_id, "001");
  assert.ok(!Object.isFrozen(source.data), "the caller's object is not frozen");
});

Deno.test("TelemetryEvent serialises with JSON.stringify to the canonical NDJSON line", () => {
  const event = TelemetryEvent.fromJSON(JSON.parse(LINE));
  assert.equal(JSON.stringify(event), LINE);
  assert.equal(event.toJSONString(), LINE);
});

Deno.test("TelemetryEvent.toJSON() puts keys in envelope order whatever the input order", () => {
  const { seq, ts, type, data, meta } = envelope();
  const event = TelemetryEvent.fromJSON({ meta, data, type, ts, seq });
  assert.deepEqual(Object.keys(event.toJSON()), ["seq", "ts", "type", "data", "meta"]);
  assert.equal(JSON.stringify(event), LINE);
});

Deno.test("TelemetryEvent.toDict() returns a mutable deep copy", () => {
  const event = new TelemetryEvent(envelope());
  const dict = event.toDict();
  (dict.data.sky as { cloud: number[] }).cloud.push(3);
  dict.seq = 1;
  assert.deepEqual(dict.data.sky, { cloud: [1, 2, 3] });
  assert.deepEqual(event.data.sky, { cloud: [1, 2] });
  assert.equal(event.seq, 42);
});

Deno.test("TelemetryEvent.fromJSON() rejects a value that is not an object", () => {
  assert.throws(() => TelemetryEvent.fromJSON([envelope()]), {
    name: "TypeError",
    message: "Cannot build a TelemetryEvent from an array: expected an object",
  });
});

Deno.test("TelemetryEvent.fromJSON() rejects data that is not an object, naming the field", () => {
  assert.throws(() => TelemetryEvent.fromJSON({ ...envelope(), data: [] }), {
    name: "TypeError",
    message: 'Cannot build a TelemetryEvent: "data" must be an object, not an array',
  });
});

Deno.test("TelemetryEvent.fromJSON() rejects a seq that is not a non-negative integer", () => {
  assert.throws(() => TelemetryEvent.fromJSON({ ...envelope(), seq: "42" }), {
    name: "TypeError",
    message: /"seq" must be a non-negative integer, not a string/,
  });
  assert.throws(() => TelemetryEvent.fromJSON({ ...envelope(), seq: 1.5 }), TypeError);
});

Deno.test("TelemetryEvent.fromJSON() rejects an envelope without meta", () => {
  const { seq, ts, type, data } = envelope();
  assert.throws(() => TelemetryEvent.fromJSON({ seq, ts, type, data }), {
    name: "TypeError",
    message: /"meta" must be an object, not nothing/,
  });
});

Deno.test("TelemetryEvent constructor called from untyped code with null throws TypeError", () => {
  assert.throws(() => new TelemetryEvent(null as unknown as Envelope), {
    name: "TypeError",
    message: /expected an envelope object, not null/,
  });
});

Deno.test('checkEventType() refuses "." and "..", which no /current/{type} URL can address', () => {
  assert.match(checkEventType(".")!, /cannot be "\." or "\.\."/);
  assert.match(checkEventType("..")!, /cannot be "\." or "\.\."/);
  assert.equal(checkEventType("..."), undefined);
});

Deno.test("parseTimestamp() rejects a leap second and accepts the last millisecond of a day", () => {
  assert.throws(() => parseTimestamp("2026-06-30T23:59:60Z"), RangeError);
  assert.equal(parseTimestamp("2026-06-30T23:59:59.999Z"), Date.UTC(2026, 5, 30, 23, 59, 59, 999));
});
