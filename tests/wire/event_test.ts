import assert from "node:assert/strict";
import { checkEventType, type Envelope, parseTimestamp, TelemetryEvent } from "../../event.ts";
import { postJson, readSiteLines, tempDir, testServer } from "../_shared/util.ts";

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

// --- Strict event objects over HTTP (docs/http-api.md) --------------------------------------------

const ACCEPTED = '"type", "data", "meta", "ts", "store_permanently", "make_current"';

/** POSTs a raw JSON text (so `1e999` reaches the server as written) and returns status and body. */
async function postText(
  url: string,
  text: string,
  contentType = "application/json",
): Promise<{ status: number; detail: string | undefined; body: Record<string, unknown> }> {
  const res = await fetch(url, {
    method: "POST",
    headers: { "content-type": contentType },
    body: text,
  });
  const body = await res.json() as Record<string, unknown>;
  return { status: res.status, detail: body.detail as string | undefined, body };
}

Deno.test("POST /event accepts the exact body the legacy Python client sends", async () => {
  await using dir = await tempDir();
  await using server = await testServer({ siteDir: dir.path });
  // The Python client's post_event(): all six fields, null for the omitted ones.
  const body =
    '{"type": "weather", "data": {"wind_mps": 2.1, "safe": true}, "meta": {}, "ts": null, "store_permanently": true, "make_current": true}';
  const res = await postText(`${server.url}/event`, body);
  assert.equal(res.status, 200, res.detail ?? "");
  assert.deepEqual(res.body.data, { wind_mps: 2.1, safe: true });
  // insert_current(..., store_permanently=False) with datetime.isoformat() and a meta dict.
  const ephemeral =
    '{"type": "weather", "data": {"wind_mps": 3.4}, "meta": {"source": "dome"}, "ts": "2026-11-22T03:00:00.123456+00:00", "store_permanently": false, "make_current": true}';
  const second = await postText(`${server.url}/event`, ephemeral);
  assert.equal(second.status, 200, second.detail ?? "");
  assert.equal(second.body.ts, "2026-11-22T03:00:00.123Z");
  assert.equal((await readSiteLines(dir.path)).length, 1);
});

Deno.test("POST /event refuses an unknown field, naming it and the accepted ones, and writes nothing", async () => {
  await using dir = await tempDir();
  await using server = await testServer({ siteDir: dir.path });
  const res = await postJson(`${server.url}/event`, { type: "a", data: {}, store: false });
  assert.equal(res.status, 400);
  assert.equal(
    (res.body as { detail: string }).detail,
    `unknown field "store"; an event accepts only ${ACCEPTED}.`,
  );
  assert.deepEqual(await readSiteLines(dir.path), []);
});

Deno.test("POST /event points date, timestamp and time to ts", async () => {
  await using dir = await tempDir();
  await using server = await testServer({ siteDir: dir.path });
  for (const field of ["date", "timestamp", "time"]) {
    const res = await postJson(`${server.url}/event`, {
      type: "a",
      data: {},
      [field]: "2026-11-22T03:00:00Z",
    });
    assert.equal(res.status, 400);
    assert.equal(
      (res.body as { detail: string }).detail,
      `unknown field "${field}"; the event time is \`ts\`; an event accepts only ${ACCEPTED}.`,
    );
  }
  assert.deepEqual(await readSiteLines(dir.path), []);
});

Deno.test("POST /event refuses __proto__ and a long unknown field name without echoing it whole", async () => {
  await using dir = await tempDir();
  await using server = await testServer({ siteDir: dir.path });
  const proto = await postText(`${server.url}/event`, '{"type":"a","data":{},"__proto__":{"x":1}}');
  assert.equal(proto.status, 400);
  assert.match(proto.detail!, /^unknown field "__proto__"; /);
  const long = await postJson(`${server.url}/event`, {
    type: "a",
    data: {},
    ["k".repeat(5000)]: 1,
  });
  assert.equal(long.status, 400);
  assert.ok((long.body as { detail: string }).detail.length < 300);
});

Deno.test("POST /event refuses a number that is not finite, naming its path", async () => {
  await using dir = await tempDir();
  await using server = await testServer({ siteDir: dir.path });
  const cases: [string, string][] = [
    ['{"a": 1e999}', "data.a"],
    ['{"a": -1e999}', "data.a"],
    ['{"sky": {"cloud": [1, 2, 1e400]}}', "data.sky.cloud[2]"],
    ['{"ok": 1, "odd key": {"x": [[0, 1e999]]}}', 'data["odd key"].x[0][1]'],
  ];
  for (const [data, path] of cases) {
    const res = await postText(`${server.url}/event`, `{"type":"a","data":${data}}`);
    assert.equal(res.status, 400, data);
    assert.equal(
      res.detail,
      `the number at ${path} is not finite (too large for a 64-bit float, such as 1e999); send a finite number, or a string if the value is really that large.`,
    );
  }
  const meta = await postText(
    `${server.url}/event`,
    '{"type":"a","data":{},"meta":{"alt":[1e999]}}',
  );
  assert.equal(meta.status, 400);
  assert.match(meta.detail!, /^the number at meta\.alt\[0\] is not finite/);
  // Large but finite numbers, and tiny ones that underflow to 0, are values.
  const fine = await postText(
    `${server.url}/event`,
    '{"type":"a","data":{"big":1.7e308,"tiny":1e-400}}',
  );
  assert.equal(fine.status, 200, fine.detail ?? "");
  assert.equal((await readSiteLines(dir.path)).length, 1);
});

Deno.test("POST /events names the 0-based item of a JSON array and the 1-based line of NDJSON", async () => {
  await using dir = await tempDir();
  await using server = await testServer({ siteDir: dir.path });
  const array = await postText(
    `${server.url}/events`,
    '[{"type":"a","data":{}},{"type":"a","data":{},"date":"x"}]',
  );
  assert.equal(array.status, 400);
  assert.match(array.detail!, /^Item 1 \(0-based\): unknown field "date"; the event time is `ts`/);
  // A blank line counts: the bad event is on line 3 of what the operator sees.
  const ndjson = await postText(
    `${server.url}/events`,
    '{"type":"a","data":{}}\n\n{"type":"a","data":{"v":1e999}}\n',
    "application/x-ndjson",
  );
  assert.equal(ndjson.status, 400);
  assert.equal(
    ndjson.detail,
    "Line 3 (item 1, 0-based): the number at data.v is not finite (too large for a 64-bit float, such as 1e999); send a finite number, or a string if the value is really that large.",
  );
  const broken = await postText(
    `${server.url}/events`,
    '{"type":"a","data":{}}\n{"type":\n',
    "application/x-ndjson",
  );
  assert.equal(broken.status, 400);
  assert.match(broken.detail!, /^Line 2 \(item 1, 0-based\) is not valid JSON/);
  assert.deepEqual(await readSiteLines(dir.path), []);
});

Deno.test("POST /events finds the one bad field among seeded random valid batches", async () => {
  await using dir = await tempDir();
  await using server = await testServer({ siteDir: dir.path });
  let seed = 17;
  const rand = (n: number) => (seed = (seed * 1103515245 + 12345) % 2147483648) % n;
  for (let round = 0; round < 20; round++) {
    const size = 1 + rand(30);
    const bad = rand(size);
    const items = Array.from({ length: size }, (_, i) => {
      const data = `{"x":${rand(1000)},"n":{"m":[${rand(9)},${rand(9)}]}}`;
      return i === bad
        ? `{"type":"t","data":{"x":1,"n":{"m":[0,1e999]}}}`
        : `{"type":"t","data":${data}}`;
    });
    const res = await postText(`${server.url}/events`, `[${items.join(",")}]`);
    assert.equal(res.status, 400);
    assert.match(
      res.detail!,
      new RegExp(`^Item ${bad} \\(0-based\\): the number at data\\.n\\.m\\[1\\]`),
    );
  }
  assert.deepEqual(await readSiteLines(dir.path), []);
});

Deno.test("POST /run/start refuses run meta with a number that is not finite, and starts no run", async () => {
  await using dir = await tempDir();
  await using server = await testServer({ siteDir: dir.path });
  const res = await postText(
    `${server.url}/run/start`,
    '{"run_id":"r1","meta":{"target":"M31","exp":[30,1e999]}}',
  );
  assert.equal(res.status, 400);
  assert.match(res.detail!, /^the number at meta\.exp\[1\] is not finite/);
  assert.equal(
    await fetch(`${server.url}/run`).then(async (r) => (await r.body?.cancel(), r.status)),
    404,
  );
});
