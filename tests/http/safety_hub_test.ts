/**
 * The safety hub over HTTP (docs/safety.md#safety-events, #waivers, #profiles, #audit) against a
 * real server on 127.0.0.1 port 0: `PUT /safety/events`, `DELETE /safety/events/{id}`,
 * `PUT /safety/waivers`, `DELETE /safety/waivers/{type}`, `?profile=` on `/safety` and
 * `/safety/indi`, `/check` while held, the token rules of the write routes, the audit events'
 * `via`, and `telemetry_safe{profile}` / `telemetry_safety_waivers` in `/metrics`. Waivers end by
 * the service clocks the test moves (`clock`, `monotonicClock`), not by waiting.
 * @module
 */

import assert from "node:assert/strict";
import { join } from "node:path";
import type { SafetyVerdict, ServerHandle } from "../../server.ts";
import { parseTypes } from "../../core/types_registry.ts";
import {
  getJson,
  postJson,
  promtoolCheck,
  promtoolMissing,
  safetyEvent,
  siteEventData,
  slowBody,
  tempDir,
  testServer,
  waitUntil,
} from "../_shared/util.ts";
import { assertProblem, send } from "../_shared/fault_util.ts";

const TOKEN = "hub-s3cret";

const UPS = safetyEvent("ups-mains");

/** A critical weather type with a wind alarm; a second type critical for the profile `roofb`. */
function hubTypes(clearAfterS = 0) {
  return parseTypes(
    JSON.stringify({
      weather: {
        critical: true,
        stale_after_s: 3600,
        clear_after_s: clearAfterS,
        fields: { wind_mps: { unit: "m/s", alarm_above: 15 } },
      },
      roof_b: {
        critical_for: ["roofb"],
        stale_after_s: 3600,
        fields: { rain: { alarm_if: true } },
      },
    }),
    "types.json",
  );
}

/** A server whose wall and monotonic clocks run `shift.ms` ahead of the real ones. */
function shiftedServer(
  siteDir: string,
  shift: { ms: number },
  clearAfterS = 0,
): Promise<ServerHandle> {
  return testServer({
    siteDir,
    types: hubTypes(clearAfterS),
    clock: () => Date.now() + shift.ms,
    monotonicClock: () => performance.now() + shift.ms,
  });
}

async function safety(server: ServerHandle, query = ""): Promise<SafetyVerdict> {
  const { status, body } = await getJson(`${server.url}/safety${query}`);
  assert.equal(status, 200);
  return body as SafetyVerdict;
}

async function indi(
  server: ServerHandle,
  query = "",
): Promise<{ open_ok: number; reasons: string }> {
  const { status, body } = await getJson(`${server.url}/safety/indi${query}`);
  assert.equal(status, 200);
  return (body as { roof_status: { open_ok: number; reasons: string } }).roof_status;
}

async function post(server: ServerHandle, type: string, data: Record<string, unknown>) {
  const { status } = await postJson(`${server.url}/event`, { type, data });
  assert.equal(status, 200);
}

function put(url: string, body: unknown, headers: Record<string, string> = {}) {
  return send(url, {
    method: "PUT",
    headers: { "content-type": "application/json", ...headers },
    body: JSON.stringify(body),
  });
}

function del(url: string, headers: Record<string, string> = {}) {
  return send(url, { method: "DELETE", headers });
}

/** The value of a sample of `/metrics`, by its name and label text. */
async function metric(server: ServerHandle, series: string): Promise<string | undefined> {
  const text = await (await fetch(`${server.url}/metrics`)).text();
  return text.split("\n").find((line) => line.startsWith(`${series} `))?.slice(series.length + 1);
}

Deno.test("PUT /safety/events holds the site unsafe with the reason external: UPS: on battery", async () => {
  await using dir = await tempDir();
  await using server = await testServer({ siteDir: dir.path, types: hubTypes() });
  await post(server, "weather", { wind_mps: 3 });
  assert.equal((await safety(server)).safe, true);
  const res = await put(`${server.url}/safety/events`, [UPS]);
  assert.equal(res.status, 200, res.text);
  // The answer is the verdict after the change.
  const answer = JSON.parse(res.text) as SafetyVerdict;
  assert.equal(answer.safe, false);
  const verdict = await safety(server);
  assert.equal(verdict.safe, false);
  assert.deepEqual(verdict.reasons, ["external: UPS: on battery"]);
  assert.deepEqual(verdict.events.map((e) => e.Id), ["ups-mains"]);
  assert.deepEqual(answer.reasons, verdict.reasons);
  assert.deepEqual(await indi(server), { open_ok: 0, reasons: "external: UPS: on battery" });
});

Deno.test("DELETE /safety/events/{id} clears the external event (percent-decoded Id) and the site is safe again", async () => {
  await using dir = await tempDir();
  await using server = await testServer({ siteDir: dir.path, types: hubTypes() });
  await post(server, "weather", { wind_mps: 3 });
  assert.equal((await put(`${server.url}/safety/events`, [{ ...UPS, Id: "ups/1 a" }])).status, 200);
  const res = await del(`${server.url}/safety/events/${encodeURIComponent("ups/1 a")}`);
  assert.equal(res.status, 204, res.text);
  const verdict = await safety(server);
  assert.equal(verdict.safe, true, verdict.reasons.join("; "));
  assert.deepEqual(verdict.events, []);
});

Deno.test("DELETE /safety/events/{id} of an internal event is 404 and changes nothing", async () => {
  await using dir = await tempDir();
  await using server = await testServer({ siteDir: dir.path, types: hubTypes() });
  const before = await safety(server); // weather never seen: an internal event
  const internal = before.events[0]!.Id;
  assert.match(internal, /^telemetry:/);
  const res = await del(`${server.url}/safety/events/${encodeURIComponent(internal)}`);
  assertProblem(404, res.contentType, res.text, "DELETE internal");
  assert.match(JSON.parse(res.text).detail, /is not an external event/);
  const after = await safety(server);
  assert.deepEqual(after.events, before.events);
  assert.deepEqual(await siteEventData(dir.path, "telemetry.safety.external"), []);
});

Deno.test("PUT /safety/events refuses an event without Id with 400 and the core's message, and changes nothing", async () => {
  await using dir = await tempDir();
  await using server = await testServer({ siteDir: dir.path, types: hubTypes() });
  await post(server, "weather", { wind_mps: 3 });
  const { Id: _, ...noId } = UPS;
  const res = await put(`${server.url}/safety/events`, [UPS, { ...noId }]);
  const problem = assertProblem(400, res.contentType, res.text, "PUT without Id");
  assert.match(problem.detail, /^The events were not set: event 1: Id must be a non-empty string/);
  assert.equal((await safety(server)).safe, true);
  assert.deepEqual(await siteEventData(dir.path, "telemetry.safety.external"), []);
  const empty = await send(`${server.url}/safety/events`, { method: "PUT" });
  assertProblem(400, empty.contentType, empty.text, "PUT without a body");
});

Deno.test("PUT /safety/events needs the token when one is set, under --public-read too, while GET /safety does not", async () => {
  await using dir = await tempDir();
  await using server = await testServer({
    siteDir: dir.path,
    types: hubTypes(),
    token: TOKEN,
    publicRead: true,
  });
  const auth = { authorization: `Bearer ${TOKEN}` };
  assert.equal((await getJson(`${server.url}/safety`)).status, 200);
  const refused = await put(`${server.url}/safety/events`, [UPS]);
  assertProblem(401, refused.contentType, refused.text, "PUT without the token");
  assert.equal((await safety(server)).events.some((e) => e.Id === UPS.Id), false);
  assert.equal((await put(`${server.url}/safety/events`, [UPS], auth)).status, 200);
  assert.deepEqual((await safety(server)).reasons.at(-1), "external: UPS: on battery");
  assert.equal((await del(`${server.url}/safety/events/${UPS.Id}`)).status, 401);
  const waiver = { type: "weather", for_s: 60, reason: "x" };
  assert.equal((await put(`${server.url}/safety/waivers`, waiver)).status, 401);
  assert.equal((await del(`${server.url}/safety/waivers/weather`)).status, 401);
  assert.equal((await del(`${server.url}/safety/events/${UPS.Id}`, auth)).status, 204);
});

Deno.test("GET /check fails while an external event holds the site, naming it", async () => {
  await using dir = await tempDir();
  await using server = await testServer({ siteDir: dir.path, types: hubTypes() });
  await post(server, "weather", { wind_mps: 3 });
  await post(server, "roof_b", { rain: false });
  assert.equal((await getJson(`${server.url}/check`)).status, 200);
  assert.equal((await put(`${server.url}/safety/events`, [UPS])).status, 200);
  const { status, body } = await getJson(`${server.url}/check`);
  assert.equal(status, 503);
  assert.deepEqual((body as { failing: string[] }).failing, ["external: UPS: on battery"]);
});

Deno.test("?profile= judges profiles apart over one stream", async () => {
  await using dir = await tempDir();
  await using server = await testServer({ siteDir: dir.path, types: hubTypes() });
  await post(server, "weather", { wind_mps: 3 });
  await post(server, "roof_b", { rain: true });
  const site = await safety(server);
  assert.equal(site.profile, "site");
  assert.equal(site.safe, true, site.reasons.join("; "));
  assert.deepEqual(Object.keys(site.types), ["weather"]);
  const roofb = await safety(server, "?profile=roofb");
  assert.equal(roofb.profile, "roofb");
  assert.equal(roofb.safe, false);
  assert.deepEqual(roofb.reasons, ["roof_b: rain is true (alarm if true)"]);
  assert.deepEqual(await indi(server, "?profile=roofb"), {
    open_ok: 0,
    reasons: "roof_b: rain is true (alarm if true)",
  });
  assert.equal((await indi(server)).open_ok, 1);
  assert.equal((await safety(server, "?profile=site")).safe, true);
});

Deno.test("PUT /safety/events?profile=P holds only that profile, and the site stays safe", async () => {
  await using dir = await tempDir();
  await using server = await testServer({ siteDir: dir.path, types: hubTypes() });
  await post(server, "weather", { wind_mps: 3 });
  await post(server, "roof_b", { rain: false });
  const res = await put(`${server.url}/safety/events?profile=roofb`, [UPS]);
  assert.equal(res.status, 200, res.text);
  assert.equal((JSON.parse(res.text) as SafetyVerdict).profile, "roofb");
  assert.deepEqual((await safety(server, "?profile=roofb")).reasons, ["external: UPS: on battery"]);
  assert.equal((await safety(server)).safe, true);
  assert.deepEqual(await siteEventData(dir.path, "telemetry.safety.external"), [{
    action: "set",
    event: (await safety(server, "?profile=roofb")).events[0],
    via: "http",
    peer: "127.0.0.1",
    profile: "roofb",
  }]);
});

Deno.test("GET /safety refuses an unknown profile with 404 naming the profiles, and a repeated or empty one with 400", async () => {
  await using dir = await tempDir();
  await using server = await testServer({ siteDir: dir.path, types: hubTypes() });
  for (const path of ["/safety?profile=north", "/safety/indi?profile=north"]) {
    const res = await send(`${server.url}${path}`, {});
    const { detail } = assertProblem(404, res.contentType, res.text, path);
    assert.match(detail, /no safety profile "north"; the profiles are site, roofb /);
  }
  const unknown = await put(`${server.url}/safety/events?profile=north`, [UPS]);
  assertProblem(404, unknown.contentType, unknown.text, "PUT ?profile=north");
  for (const query of ["?profile=", "?profile=site&profile=roofb"]) {
    const res = await send(`${server.url}/safety${query}`, {});
    const { detail } = assertProblem(400, res.contentType, res.text, query);
    assert.match(detail, /profile must be given once/);
  }
  assert.deepEqual(await siteEventData(dir.path, "telemetry.safety.external"), []);
});

Deno.test("the audit event of a change names the peer, and says via cli under Telemetry-Via: cli, else via http", async () => {
  await using dir = await tempDir();
  await using server = await testServer({ siteDir: dir.path, types: hubTypes() });
  assert.equal(
    (await put(`${server.url}/safety/events`, [UPS], { "telemetry-via": "cli" })).status,
    200,
  );
  assert.equal((await del(`${server.url}/safety/events/${UPS.Id}`)).status, 204);
  const audit = await siteEventData(dir.path, "telemetry.safety.external");
  assert.deepEqual(audit.map((a) => [a.action, a.via, a.peer]), [
    ["set", "cli", "127.0.0.1"],
    ["clear", "http", "127.0.0.1"],
  ]);
  const bogus = await put(`${server.url}/safety/events`, [UPS], { "telemetry-via": "alpaca" });
  const { detail } = assertProblem(400, bogus.contentType, bogus.text, "Telemetry-Via: alpaca");
  assert.match(detail, /Telemetry-Via must be cli or http/);
  assert.equal((await siteEventData(dir.path, "telemetry.safety.external")).length, 2);
});

Deno.test("PUT /safety/events answers 408 to a body slower than --body-timeout, and sets nothing", async () => {
  await using dir = await tempDir();
  await using server = await testServer({
    siteDir: dir.path,
    types: hubTypes(),
    bodyTimeoutMs: 300,
  });
  const head = "PUT /safety/events HTTP/1.1\r\nHost: localhost\r\n" +
    "Content-Type: application/json\r\nContent-Length: 5000\r\n\r\n[";
  const result = await slowBody(server.addr.port, head, {
    everyMs: 100,
    limitMs: 8000,
    untilAnswered: true,
  });
  assert.equal(result.status, 408, result.text);
  assert.match(result.text, /--body-timeout/);
  assert.deepEqual(await siteEventData(dir.path, "telemetry.safety.external"), []);
});

Deno.test("a waiver through HTTP shows in /safety, /safety/indi reasons, /metrics telemetry_safety_waivers and ends by itself", async () => {
  await using dir = await tempDir();
  const shift = { ms: 0 };
  await using server = await shiftedServer(dir.path, shift);
  await post(server, "weather", { wind_mps: 20 });
  assert.equal((await safety(server)).safe, false);
  const res = await put(`${server.url}/safety/waivers`, {
    type: "weather",
    for_s: 60,
    reason: "anemometer iced",
  });
  assert.equal(res.status, 200, res.text);
  const waiver = JSON.parse(res.text);
  assert.deepEqual(Object.keys(waiver), ["type", "until", "reason", "peer"]);
  assert.deepEqual([waiver.type, waiver.reason, waiver.peer], [
    "weather",
    "anemometer iced",
    "127.0.0.1",
  ]);
  const line = `weather: WAIVED until ${waiver.until} (anemometer iced)`;
  const waived = await safety(server);
  assert.equal(waived.safe, true);
  assert.deepEqual(waived.reasons, [line]);
  assert.deepEqual(waived.waivers, [waiver]);
  assert.equal(waived.types.weather?.waived_until, waiver.until);
  assert.deepEqual(await indi(server), { open_ok: 1, reasons: line });
  assert.equal(await metric(server, "telemetry_safety_waivers"), "1");
  shift.ms += 61_000; // the waiver's minute passes on both service clocks
  const after = await safety(server);
  assert.equal(after.safe, false);
  assert.deepEqual(after.reasons, ["weather: wind_mps 20 m/s above alarm 15"]);
  assert.deepEqual(after.waivers, []);
  assert.equal(await metric(server, "telemetry_safety_waivers"), "0");
  // Its end is recorded by the service's own timer, with nobody asking.
  await waitUntil(
    async () => (await siteEventData(dir.path, "telemetry.safety.waiver")).length === 2,
    10_000,
    "the end of the waiver to be recorded",
  );
  const audit = await siteEventData(dir.path, "telemetry.safety.waiver");
  assert.deepEqual(audit.map((a) => [a.action, a.early]), [["set", undefined], ["end", false]]);
});

Deno.test("a waiver ending while the type is in alarm latches it", async () => {
  await using dir = await tempDir();
  const shift = { ms: 0 };
  await using server = await shiftedServer(dir.path, shift, 300);
  await post(server, "weather", { wind_mps: 3 });
  shift.ms += 301_000; // past the clear_after_s its first event started
  assert.equal((await safety(server)).safe, true);
  const set = await put(`${server.url}/safety/waivers`, {
    type: "weather",
    for_s: 60,
    reason: "gusty sensor",
  });
  assert.equal(set.status, 200, set.text);
  await post(server, "weather", { wind_mps: 20 });
  assert.equal((await safety(server)).safe, true); // not judged while waived
  shift.ms += 61_000;
  assert.deepEqual((await safety(server)).reasons, ["weather: wind_mps 20 m/s above alarm 15"]);
  await post(server, "weather", { wind_mps: 3 });
  const clearing = await safety(server);
  assert.equal(clearing.safe, false);
  assert.match(clearing.reasons[0]!, /^weather: clearing, safe at \S+Z \(clear_after_s 300\)$/);
  assert.ok(clearing.types.weather?.latched_until);
});

Deno.test("PUT /safety/waivers refuses more than 12 hours, a type that is not critical and unknown fields with 400", async () => {
  await using dir = await tempDir();
  await using server = await testServer({ siteDir: dir.path, types: hubTypes() });
  const cases: [unknown, RegExp][] = [
    [
      { type: "weather", for_s: 43_201, reason: "x" },
      /for_s must be a whole number of seconds from 60 to 43200/,
    ],
    [{ type: "dome", for_s: 600, reason: "x" }, /"dome" is not a critical type/],
    [{ type: "weather", for_s: 600, reason: "" }, /needs a reason/],
    [{ type: "weather", for_s: 600, reason: "x", until: "later" }, /no field "until"/],
    [["weather"], /not a JSON object/],
  ];
  for (const [body, detail] of cases) {
    const res = await put(`${server.url}/safety/waivers`, body);
    const problem = assertProblem(400, res.contentType, res.text, JSON.stringify(body));
    assert.match(problem.detail, detail);
  }
  assert.deepEqual((await safety(server)).waivers, []);
  assert.deepEqual(await siteEventData(dir.path, "telemetry.safety.waiver"), []);
});

Deno.test("DELETE /safety/waivers/{type} ends a waiver early with 204, and is 404 when none is in force", async () => {
  await using dir = await tempDir();
  await using server = await testServer({ siteDir: dir.path, types: hubTypes() });
  await post(server, "weather", { wind_mps: 20 });
  const waiver = { type: "weather", for_s: 3600, reason: "anemometer iced" };
  assert.equal((await put(`${server.url}/safety/waivers`, waiver)).status, 200);
  assert.equal((await safety(server)).safe, true);
  assert.equal((await del(`${server.url}/safety/waivers/weather`)).status, 204);
  assert.equal((await safety(server)).safe, false);
  const again = await del(`${server.url}/safety/waivers/weather`);
  assertProblem(404, again.contentType, again.text, "second DELETE");
  const audit = await siteEventData(dir.path, "telemetry.safety.waiver");
  assert.deepEqual(audit.map((a) => [a.action, a.early]), [["set", undefined], ["end", true]]);
});

const skipPromtool = promtoolMissing();
Deno.test({
  name: "/metrics telemetry_safe has one sample per profile and promtool accepts it",
  ignore: skipPromtool !== undefined,
  async fn() {
    await using dir = await tempDir();
    await using server = await testServer({ siteDir: join(dir.path, "site"), types: hubTypes() });
    await post(server, "weather", { wind_mps: 3 });
    await post(server, "roof_b", { rain: true });
    const body = await (await fetch(`${server.url}/metrics`)).text();
    const safe = body.split("\n").filter((line) => line.startsWith("telemetry_safe{"));
    assert.deepEqual(safe, [
      'telemetry_safe{profile="site"} 1',
      'telemetry_safe{profile="roofb"} 0',
    ]);
    assert.match(body, /^telemetry_safety_waivers 0$/m);
    const { ok, report } = await promtoolCheck(body);
    assert.ok(ok, `promtool check metrics failed:\n${report}\n--- body ---\n${body}`);
    assert.equal(report.trim(), "", `promtool reported lint problems:\n${report}`);
  },
});
