import assert from "node:assert/strict";
import { escapeLabelValue, METRICS_CONTENT_TYPE } from "../../http/prometheus.ts";
import { postJson, promtoolCheck, promtoolMissing, tempDir, testServer } from "../_shared/util.ts";

async function scrape(url: string): Promise<string> {
  const res = await fetch(`${url}/metrics`);
  assert.equal(res.status, 200);
  return await res.text();
}

/** The samples of one metric name, as `labels -> value` text. */
function samples(text: string, name: string): Map<string, string> {
  const out = new Map<string, string>();
  for (const line of text.split("\n")) {
    const m = /^([a-zA-Z_:][a-zA-Z0-9_:]*)(\{.*\})? (\S+)$/.exec(line);
    if (m && m[1] === name) out.set(m[2] ?? "", m[3]!);
  }
  return out;
}

const skipPromtool = promtoolMissing();
if (skipPromtool) {
  // deno-lint-ignore no-console
  console.log(`skipping "GET /metrics passes promtool check metrics": ${skipPromtool}`);
}

Deno.test({
  name: "GET /metrics passes promtool check metrics",
  ignore: skipPromtool !== undefined,
  async fn() {
    await using tmp = await tempDir();
    await using server = await testServer({ siteDir: tmp.path });
    await postJson(`${server.url}/event`, {
      type: 'odd "type" \\ here',
      data: { "field\nwith newline": 1, ok: true, text: "ignored" },
    });
    await postJson(`${server.url}/run/start`, { run_id: "r1" });
    await postJson(`${server.url}/event`, { type: "weather", data: { wind_mps: 2.1, t: -3e-7 } });
    const body = await scrape(server.url);
    const { ok: success, report } = await promtoolCheck(body);
    assert.ok(success, `promtool check metrics failed:\n${report}\n--- body ---\n${body}`);
    assert.equal(report.trim(), "", `promtool reported lint problems:\n${report}`);
  },
});

Deno.test("GET /metrics answers in text format 0.0.4 with no-store", async () => {
  await using tmp = await tempDir();
  await using server = await testServer({ siteDir: tmp.path });
  const res = await fetch(`${server.url}/metrics`);
  await res.body?.cancel();
  assert.equal(res.headers.get("content-type"), METRICS_CONTENT_TYPE);
  assert.equal(METRICS_CONTENT_TYPE, "text/plain; version=0.0.4; charset=utf-8");
  assert.equal(res.headers.get("cache-control"), "no-store");
});

Deno.test("GET /metrics has HELP and TYPE lines for every family", async () => {
  await using tmp = await tempDir();
  await using server = await testServer({ siteDir: tmp.path });
  const text = await scrape(server.url);
  for (
    const [name, type] of [
      ["telemetry_events_total", "counter"],
      ["telemetry_write_errors_total", "counter"],
      ["telemetry_bytes_written_total", "counter"],
      ["telemetry_write_seconds", "histogram"],
      ["telemetry_run_active", "gauge"],
      ["telemetry_value", "gauge"],
    ]
  ) {
    assert.match(text, new RegExp(`^# HELP ${name} \\S`, "m"), `HELP for ${name}`);
    assert.match(text, new RegExp(`^# TYPE ${name} ${type}$`, "m"), `TYPE for ${name}`);
  }
});

Deno.test("GET /metrics counts events per stream and type", async () => {
  await using tmp = await tempDir();
  await using server = await testServer({ siteDir: tmp.path });
  await postJson(`${server.url}/event`, { type: "weather", data: { wind_mps: 1 } });
  await postJson(`${server.url}/run/start`, { run_id: "r1" });
  // weather is a site type: during a run it is written to both streams.
  await postJson(`${server.url}/event`, { type: "weather", data: { wind_mps: 2 } });
  await postJson(`${server.url}/events`, [{ type: "status", data: {} }, {
    type: "status",
    data: {},
  }]);
  const events = samples(await scrape(server.url), "telemetry_events_total");
  assert.deepEqual(
    events,
    new Map([
      ['{stream="run",type="status"}', "2"],
      ['{stream="run",type="weather"}', "1"],
      ['{stream="site",type="weather"}', "2"],
    ]),
  );
});

Deno.test("GET /metrics counts each event of a batch whose types alternate under its own type", async () => {
  await using tmp = await tempDir();
  await using server = await testServer({ siteDir: tmp.path });
  await postJson(`${server.url}/run/start`, { run_id: "r1" });
  const types = ["weather", "status", "weather", "weather", "status", "dome"];
  await postJson(`${server.url}/events`, types.map((type) => ({ type, data: {} })));
  assert.deepEqual(
    samples(await scrape(server.url), "telemetry_events_total"),
    new Map([
      ['{stream="run",type="dome"}', "1"],
      ['{stream="run",type="status"}', "2"],
      ['{stream="run",type="weather"}', "3"],
      ['{stream="site",type="weather"}', "3"],
    ]),
  );
});

Deno.test("GET /metrics counts bytes written to the NDJSON files", async () => {
  await using tmp = await tempDir();
  await using server = await testServer({ siteDir: tmp.path });
  const { body } = await postJson(`${server.url}/event`, { type: "status", data: { n: 1 } });
  const bytes = samples(await scrape(server.url), "telemetry_bytes_written_total").get("");
  assert.equal(bytes, String(new TextEncoder().encode(JSON.stringify(body) + "\n").length));
});

Deno.test("GET /metrics exports the latest top-level finite numbers and booleans", async () => {
  await using tmp = await tempDir();
  await using server = await testServer({ siteDir: tmp.path });
  await postJson(`${server.url}/event`, { type: "weather", data: { wind_mps: 9 } });
  await postJson(`${server.url}/event`, {
    type: "weather",
    data: { wind_mps: 2.1, raining: true, dry: false, big: 1e21, label: "x", nested: { a: 1 } },
  });
  assert.deepEqual(
    samples(await scrape(server.url), "telemetry_value"),
    new Map([
      ['{type="weather",field="wind_mps"}', "2.1"],
      ['{type="weather",field="raining"}', "1"],
      ['{type="weather",field="dry"}', "0"],
      ['{type="weather",field="big"}', "1e+21"],
    ]),
  );
});

Deno.test("GET /metrics escapes a quote, backslash and newline in label values", async () => {
  await using tmp = await tempDir();
  await using server = await testServer({ siteDir: tmp.path });
  await postJson(`${server.url}/event`, { type: 'we"ath\\er', data: { "a\nb": 1 } });
  const text = await scrape(server.url);
  assert.ok(
    text.includes('telemetry_value{type="we\\"ath\\\\er",field="a\\nb"} 1\n'),
    `no escaped telemetry_value line in:\n${text}`,
  );
  assert.ok(text.includes('telemetry_events_total{stream="site",type="we\\"ath\\\\er"} 1\n'));
});

Deno.test("GET /metrics renders telemetry_write_seconds as a cumulative histogram", async () => {
  await using tmp = await tempDir();
  await using server = await testServer({ siteDir: tmp.path });
  for (let i = 0; i < 3; i++) {
    await postJson(`${server.url}/event`, { type: "status", data: { i } });
  }
  const text = await scrape(server.url);
  const buckets = [...samples(text, "telemetry_write_seconds_bucket")];
  assert.equal(buckets.at(-1)?.[0], '{le="+Inf"}');
  const counts = buckets.map(([, v]) => Number(v));
  for (let i = 1; i < counts.length; i++) {
    assert.ok(counts[i]! >= counts[i - 1]!, `bucket ${buckets[i]![0]} decreased: ${counts}`);
  }
  const count = Number(samples(text, "telemetry_write_seconds_count").get(""));
  assert.equal(count, 3);
  assert.equal(counts.at(-1), count);
  assert.ok(Number(samples(text, "telemetry_write_seconds_sum").get("")) > 0);
});

Deno.test("GET /metrics reports telemetry_run_active 1 during a run and 0 after", async () => {
  await using tmp = await tempDir();
  await using server = await testServer({ siteDir: tmp.path });
  await postJson(`${server.url}/run/start`, { run_id: "r1" });
  assert.equal(samples(await scrape(server.url), "telemetry_run_active").get(""), "1");
  await postJson(`${server.url}/run/stop`, undefined);
  assert.equal(samples(await scrape(server.url), "telemetry_run_active").get(""), "0");
});

Deno.test("escapeLabelValue() escapes backslash, double quote and newline only", () => {
  assert.equal(escapeLabelValue('a\\b"c\nd\te'), 'a\\\\b\\"c\\nd\te');
});

// --- telemetry_http_responses_total (docs/http-api.md) --------------------------------------------

/** Sends one request and discards the body; returns the status. */
async function hit(url: string, init: RequestInit = {}): Promise<number> {
  const res = await fetch(url, init);
  await res.body?.cancel();
  return res.status;
}

Deno.test("telemetry_http_responses_total counts every answer per route pattern and code", async () => {
  await using tmp = await tempDir();
  await using server = await testServer({ siteDir: tmp.path });
  const u = server.url;
  const json = { "content-type": "application/json" };
  assert.equal(await hit(`${u}/health`), 200);
  assert.equal(
    await hit(`${u}/event`, { method: "POST", headers: json, body: '{"type":"a","data":{}}' }),
    200,
  );
  assert.equal(
    await hit(`${u}/event`, { method: "POST", headers: json, body: '{"type":"a","data":{}}' }),
    200,
  );
  assert.equal(
    await hit(`${u}/event`, { method: "POST", headers: json, body: '{"type":"a"}' }),
    400,
  );
  assert.equal(await hit(`${u}/event`), 405);
  assert.equal(await hit(`${u}/events`, { method: "POST", headers: json, body: "[]" }), 200);
  assert.equal(await hit(`${u}/current/a`), 200);
  assert.equal(await hit(`${u}/current/no%20such`), 404);
  assert.equal(await hit(`${u}/current`), 200);
  assert.equal(await hit(`${u}/run`), 404);
  assert.equal(await hit(`${u}/run/stop`, { method: "POST" }), 409);
  const start = { method: "POST", headers: json, body: '{"run_id":"r1"}' };
  assert.equal(await hit(`${u}/run/start`, start), 201);
  assert.equal(await hit(`${u}/run/start`, { ...start, body: '{"run_id":"r2"}' }), 409);
  assert.equal(await hit(`${u}/run`), 200);
  assert.equal(await hit(`${u}/run/stop`, { method: "POST" }), 200);
  assert.equal(await hit(`${u}/stream`), 200);
  assert.equal(await hit(`${u}/ready`), 200);
  assert.equal(await hit(`${u}/`), 200);
  assert.equal(await hit(`${u}/metrics`), 200);
  // Unknown paths share one label, however many there are: the label set stays bounded.
  for (let i = 0; i < 25; i++) assert.equal(await hit(`${u}/nope/${i}?x=${i}`), 404);
  // Refused before routing: still counted under the route the path names.
  assert.equal(await hit(`${u}/current`, { headers: { origin: "http://evil.example" } }), 403);
  const counts = samples(await scrape(u), "telemetry_http_responses_total");
  const expected: [string, string, string][] = [
    ["/health", "200", "1"],
    ["/event", "200", "2"],
    ["/event", "400", "1"],
    ["/event", "405", "1"],
    ["/events", "200", "1"],
    ["/current/{type}", "200", "1"],
    ["/current/{type}", "404", "1"],
    ["/current", "200", "1"],
    ["/current", "403", "1"],
    ["/run", "404", "1"],
    ["/run", "200", "1"],
    ["/run/stop", "409", "1"],
    ["/run/stop", "200", "1"],
    ["/run/start", "201", "1"],
    ["/run/start", "409", "1"],
    ["/stream", "200", "1"],
    ["/ready", "200", "1"],
    ["/", "200", "1"],
    // The earlier scrape and this one: the body is rendered after the answer was counted.
    ["/metrics", "200", "2"],
    ["other", "404", "25"],
  ];
  for (const [route, code, n] of expected) {
    assert.equal(counts.get(`{route="${route}",code="${code}"}`), n, `${route} ${code}`);
  }
  assert.equal(counts.size, expected.length, [...counts.keys()].join("\n"));
});

Deno.test({
  name: "GET /metrics with telemetry_http_responses_total passes promtool check metrics",
  ignore: skipPromtool !== undefined,
  async fn() {
    await using tmp = await tempDir();
    await using server = await testServer({ siteDir: tmp.path, token: "s3cret" });
    await hit(`${server.url}/current/x`);
    await hit(`${server.url}/nowhere`, { headers: { authorization: "Bearer s3cret" } });
    const res = await fetch(`${server.url}/metrics`, {
      headers: { authorization: "Bearer s3cret" },
    });
    const body = await res.text();
    assert.match(
      body,
      /^telemetry_http_responses_total\{route="\/current\/\{type\}",code="401"\} 1$/m,
    );
    assert.match(body, /^telemetry_http_responses_total\{route="other",code="404"\} 1$/m);
    const { ok, report } = await promtoolCheck(body);
    assert.ok(ok, `promtool check metrics failed:\n${report}\n--- body ---\n${body}`);
    assert.equal(report.trim(), "", `promtool reported lint problems:\n${report}`);
  },
});
