/**
 * The safety hub on the Alpaca port (docs/safety.md, "Actions: the safety hub over Alpaca" and
 * "One safety monitor per profile"): `SafetyEvents`, `SetExternalEvents` and
 * `ClearExternalEvents` on every safety monitor of a real service, one safety monitor per
 * profile, what is refused (and changes nothing), when the answer comes, and who is recorded.
 */

import assert from "node:assert/strict";
import { join } from "node:path";
import { postJson, siteEventData, tempDir } from "../_shared/util.ts";
import {
  actionOk,
  alpacaAction,
  type AlpacaAnswer,
  alpacaGet,
  alpacaServer,
  eventIds,
  isSafe,
  postSafe,
  PROFILE_TYPES,
  PROFILES,
  safetyEvent,
} from "../_shared/alpaca_util.ts";
import { SAFETY_HUB_FILE } from "../../store/layout.ts";

/** The `data` of the site stream's audit events of the external events. */
function audit(siteDir: string): Promise<Record<string, unknown>[]> {
  return siteEventData(siteDir, "telemetry.safety.external");
}

/** `issafe` of every safety monitor, by profile. */
async function safeByProfile(base: string): Promise<Record<string, boolean>> {
  const out: Record<string, boolean> = {};
  for (const [number, profile] of PROFILES.entries()) out[profile] = await isSafe(base, number);
  return out;
}

/** The hub file's text (what a restart reads back). */
function hubFile(siteDir: string): Promise<string> {
  return Deno.readTextFile(join(siteDir, SAFETY_HUB_FILE)).catch(() => "");
}

/** Asserts an InvalidValue answer whose message matches. */
function invalidValue(body: AlpacaAnswer, message: RegExp, context: string): void {
  assert.equal(body.ErrorNumber, 0x401, `${context}: ${JSON.stringify(body)}`);
  assert.match(String(body.ErrorMessage), message, context);
}

Deno.test("SetExternalEvents through safetymonitor/1 holds only its profile", async () => {
  await using site = await tempDir();
  await using alpaca = await alpacaServer(site.path, PROFILE_TYPES);
  await postSafe(alpaca.server.url);
  assert.deepEqual(await safeByProfile(alpaca.base), { site: true, north: true, south: true });
  assert.equal(await actionOk(alpaca.base, 1, "SetExternalEvents", [safetyEvent("door")]), "");
  assert.deepEqual(await safeByProfile(alpaca.base), { site: true, north: false, south: true });
  assert.deepEqual(await eventIds(alpaca.base, 1), ["door"]);
  assert.deepEqual(await eventIds(alpaca.base, 0), []);
  assert.deepEqual(await eventIds(alpaca.base, 2), []);
  assert.deepEqual(alpaca.server.service.safety("north").reasons, ["external: UPS: on battery"]);
  assert.equal(alpaca.server.service.safety().safe, true);
});

Deno.test("SetExternalEvents through safetymonitor/0 holds every profile", async () => {
  await using site = await tempDir();
  await using alpaca = await alpacaServer(site.path, PROFILE_TYPES);
  await postSafe(alpaca.server.url);
  await actionOk(alpaca.base, 0, "SetExternalEvents", [safetyEvent("ups")]);
  assert.deepEqual(await safeByProfile(alpaca.base), { site: false, north: false, south: false });
  for (const number of PROFILES.keys()) {
    assert.deepEqual(await eventIds(alpaca.base, number), ["ups"]);
  }
  // Cleared through another profile's monitor, which sees it: every profile is safe again.
  await actionOk(alpaca.base, 2, "ClearExternalEvents", ["ups"]);
  assert.deepEqual(await safeByProfile(alpaca.base), { site: true, north: true, south: true });
});

Deno.test("each safetymonitor's issafe and devicestate are its profile's verdict", async () => {
  await using site = await tempDir();
  await using alpaca = await alpacaServer(site.path, PROFILE_TYPES);
  await postSafe(alpaca.server.url);
  const res = await postJson(`${alpaca.server.url}/event`, { type: "dome", data: { fault: true } });
  assert.equal(res.status, 200);
  const expected = { site: true, north: false, south: true };
  assert.deepEqual(await safeByProfile(alpaca.base), expected);
  for (const [number, profile] of PROFILES.entries()) {
    const state = await alpacaGet(alpaca.base, `safetymonitor/${number}/devicestate`);
    assert.deepEqual(state.Value, [{ Name: "IsSafe", Value: expected[profile] }], profile);
  }
});

Deno.test("SafetyEvents answers the single-line JSON of the profile's events, and [] when safe", async () => {
  await using site = await tempDir();
  await using alpaca = await alpacaServer(site.path, PROFILE_TYPES);
  for (const [number, profile] of PROFILES.entries()) {
    const value = String(await actionOk(alpaca.base, number, "SafetyEvents"));
    assert.doesNotMatch(value, /\n/);
    assert.deepEqual(JSON.parse(value), alpaca.server.service.safety(profile).events, profile);
    // Never seen: one internal event per critical type of the profile.
    assert.equal(JSON.parse(value).length, profile === "site" ? 1 : 2, value);
  }
  await postSafe(alpaca.server.url);
  for (const number of PROFILES.keys()) {
    assert.equal(await actionOk(alpaca.base, number, "SafetyEvents"), "[]");
  }
});

Deno.test("ClearExternalEvents of an internal Id is InvalidValue and changes nothing", async () => {
  await using site = await tempDir();
  await using alpaca = await alpacaServer(site.path, PROFILE_TYPES);
  await postJson(`${alpaca.server.url}/event`, { type: "weather", data: { rain: true } });
  await actionOk(alpaca.base, 0, "SetExternalEvents", [safetyEvent("ups")]);
  const events = JSON.parse(String(await actionOk(alpaca.base, 0, "SafetyEvents")));
  const internal = events.find((e: { Id: string }) => e.Id.startsWith("telemetry:")).Id;
  const before = await hubFile(site.path);
  const body = await alpacaAction(alpaca.base, 0, "ClearExternalEvents", ["ups", internal]);
  invalidValue(body, /is not an external event of this safety monitor/, internal);
  assert.deepEqual(
    JSON.parse(String(await actionOk(alpaca.base, 0, "SafetyEvents"))),
    events,
    "both events are still there",
  );
  assert.equal(await hubFile(site.path), before);
  assert.deepEqual((await audit(site.path)).map((d) => d.action), ["set"]);
});

Deno.test("SetExternalEvents and ClearExternalEvents refuse a null, empty or malformed parameter, an event without Id, or an Id that is not external, and change nothing", async () => {
  await using site = await tempDir();
  await using alpaca = await alpacaServer(site.path, PROFILE_TYPES);
  await postSafe(alpaca.server.url);
  await actionOk(alpaca.base, 1, "SetExternalEvents", [safetyEvent("door")]);
  const before = await hubFile(site.path);
  const { Id: _, ...noId } = safetyEvent("x");
  const cases: [number, string, string, RegExp][] = [
    [0, "SetExternalEvents", "", /the parameter was empty/],
    [1, "SetExternalEvents", "null", /non-empty JSON array of SafetyEvent objects/],
    [1, "SetExternalEvents", "[]", /non-empty JSON array of SafetyEvent objects/],
    [2, "SetExternalEvents", "[{", /not JSON/],
    [1, "SetExternalEvents", JSON.stringify([noId]), /event 0: Id must be a non-empty string/],
    [0, "SetExternalEvents", JSON.stringify([safetyEvent("telemetry:x")]), /are the service's own/],
    [1, "ClearExternalEvents", "", /the parameter was empty/],
    [1, "ClearExternalEvents", "null", /non-empty JSON array of event Ids/],
    [1, "ClearExternalEvents", "[7]", /non-empty JSON array of event Ids/],
    [1, "ClearExternalEvents", '["nope"]', /"nope" is not an external event/],
    // An event held by north is not one of south's.
    [2, "ClearExternalEvents", '["door"]', /"door" is not an external event/],
  ];
  for (const [number, action, params, message] of cases) {
    const body = await alpacaAction(alpaca.base, number, action, params);
    invalidValue(body, message, `${action} ${params} on safetymonitor/${number}`);
  }
  assert.equal(await hubFile(site.path), before);
  assert.deepEqual(await eventIds(alpaca.base, 1), ["door"]);
  assert.deepEqual(await safeByProfile(alpaca.base), { site: true, north: false, south: true });
  assert.deepEqual((await audit(site.path)).map((d) => d.action), ["set"]);
});

Deno.test("SetExternalEvents of 257 events is refused, 256 are held, and one more is refused", async () => {
  await using site = await tempDir();
  await using alpaca = await alpacaServer(site.path, PROFILE_TYPES);
  await postSafe(alpaca.server.url);
  const many = (n: number, stem: string) =>
    Array.from({ length: n }, (_, i) => safetyEvent(`${stem}-${i}`, `sensor ${i} offline`));
  invalidValue(
    await alpacaAction(alpaca.base, 0, "SetExternalEvents", many(257, "a")),
    /257 events is more than the 256 external events a site holds/,
    "257 at once",
  );
  assert.deepEqual(await eventIds(alpaca.base, 0), []);
  await actionOk(alpaca.base, 0, "SetExternalEvents", many(256, "b"));
  invalidValue(
    await alpacaAction(alpaca.base, 1, "SetExternalEvents", many(1, "c")),
    /the site would hold 257 external events, more than 256/,
    "the 257th",
  );
  const ids = await eventIds(alpaca.base, 1);
  assert.equal(ids.length, 256);
  assert.ok(ids.every((id) => id.startsWith("b-")));
});

Deno.test("the actions answer NotConnected while their safety monitor is disconnected, and only that one", async () => {
  await using site = await tempDir();
  await using alpaca = await alpacaServer(site.path, PROFILE_TYPES);
  const res = await fetch(`${alpaca.base}/api/v1/safetymonitor/1/disconnect`, { method: "PUT" });
  assert.equal((await res.json()).ErrorNumber, 0);
  for (const action of ["SafetyEvents", "SetExternalEvents", "ClearExternalEvents"]) {
    const body = await alpacaAction(alpaca.base, 1, action, [safetyEvent("door")]);
    assert.equal(body.ErrorNumber, 0x407, action);
  }
  assert.deepEqual(await audit(site.path), [], "nothing was set");
  await actionOk(alpaca.base, 0, "SetExternalEvents", [safetyEvent("ups")]);
  assert.deepEqual((await audit(site.path)).map((d) => (d.event as { Id: string }).Id), ["ups"]);
});

Deno.test("PUT action takes Action and Parameters, and ActionName and ActionParameters when those are absent", async () => {
  await using site = await tempDir();
  await using alpaca = await alpacaServer(site.path, PROFILE_TYPES);
  await postSafe(alpaca.server.url);
  const put = (form: [string, string][]) =>
    fetch(`${alpaca.base}/api/v1/safetymonitor/1/action`, {
      method: "PUT",
      headers: { "content-type": "application/x-www-form-urlencoded" },
      body: new URLSearchParams(form).toString(),
    });
  const events = JSON.stringify([safetyEvent("door")]);
  let body = await (await put([
    ["ActionName", "SetExternalEvents"],
    ["ActionParameters", events],
  ])).json();
  assert.equal(body.ErrorNumber, 0, body.ErrorMessage);
  assert.deepEqual(await eventIds(alpaca.base, 1), ["door"]);
  // The standard names win when both are sent.
  body = await (await put([
    ["Action", "SafetyEvents"],
    ["Parameters", ""],
    ["ActionName", "ClearExternalEvents"],
    ["ActionParameters", '["door"]'],
  ])).json();
  assert.equal(body.ErrorNumber, 0, body.ErrorMessage);
  assert.deepEqual(JSON.parse(body.Value).map((e: { Id: string }) => e.Id), ["door"]);
  for (
    const [form, message] of [
      [[["action", "SafetyEvents"], ["Parameters", ""]], /"action" was sent.*send Action=<value>/],
      [[["Parameters", ""]], /the parameter Action is missing; send Action=<value> \(ActionName/],
      [[["Action", "SafetyEvents"]], /the parameter Parameters is missing/],
    ] as [[string, string][], RegExp][]
  ) {
    const res = await put(form);
    assert.equal(res.status, 400, JSON.stringify(form));
    assert.match(await res.text(), message);
  }
  assert.deepEqual(await eventIds(alpaca.base, 1), ["door"]);
});

Deno.test("SetExternalEvents answers once the event is saved in the hub file and its audit event written", async () => {
  await using site = await tempDir();
  await using alpaca = await alpacaServer(site.path, PROFILE_TYPES);
  for (let i = 0; i < 5; i++) {
    await actionOk(alpaca.base, i % 3, "SetExternalEvents", [safetyEvent(`e${i}`)]);
    // Read at once, from the files a restart reads.
    const saved = JSON.parse(await hubFile(site.path));
    assert.ok(saved.external.some((x: { event: { Id: string } }) => x.event.Id === `e${i}`));
    assert.equal((await audit(site.path)).length, i + 1);
  }
});

Deno.test("the audit event of an Alpaca change carries via alpaca, the ClientID and the peer the connection guard accepted", async () => {
  await using site = await tempDir();
  await using alpaca = await alpacaServer(site.path, PROFILE_TYPES, { connectionGuard: true });
  using client = Deno.createHttpClient({ localAddress: "127.0.0.5" });
  // A header naming another address is not the peer.
  const headers = { "x-forwarded-for": "192.0.2.1", forwarded: "for=192.0.2.1" };
  for (const action of ["SetExternalEvents", "ClearExternalEvents"]) {
    const params = action === "SetExternalEvents" ? [safetyEvent("door")] : ["door"];
    const body = await alpacaAction(alpaca.base, 1, action, params, { client, headers });
    assert.equal(body.ErrorNumber, 0, String(body.ErrorMessage));
  }
  assert.deepEqual(
    (await audit(site.path)).map(({ action, via, client_id, peer, profile }) => ({
      action,
      via,
      client_id,
      peer,
      profile,
    })),
    ["set", "clear"].map((action) => ({
      action,
      via: "alpaca",
      client_id: 9,
      peer: "127.0.0.5",
      profile: "north",
    })),
  );
});

Deno.test("on a listener without the guard, the audit's peer is the connection's, never a header the client sends", async () => {
  await using site = await tempDir();
  await using alpaca = await alpacaServer(site.path, PROFILE_TYPES);
  using client = Deno.createHttpClient({ localAddress: "127.0.0.6" });
  const headers = { "x-forwarded-for": "192.0.2.1", "x-real-ip": "192.0.2.1" };
  const body = await alpacaAction(alpaca.base, 0, "SetExternalEvents", [safetyEvent("ups")], {
    client,
    headers,
  });
  assert.equal(body.ErrorNumber, 0, String(body.ErrorMessage));
  const [data] = await audit(site.path);
  assert.equal(data!.peer, "127.0.0.6");
  assert.equal(data!.profile, undefined, "set through safetymonitor/0: every profile");
});

Deno.test("an external event set through the HTTP API is neither cleared nor replaced through the Alpaca port, which has no authentication", async () => {
  await using site = await tempDir();
  await using alpaca = await alpacaServer(site.path, PROFILE_TYPES);
  const url = `${alpaca.server.url}/safety/events`;
  const put = await fetch(url, {
    method: "PUT",
    headers: { "content-type": "application/json" },
    body: JSON.stringify([safetyEvent("ups")]),
  });
  assert.equal(put.status, 200, await put.text());
  const before = await hubFile(site.path);
  const cleared = await alpacaAction(alpaca.base, 0, "ClearExternalEvents", ["ups"]);
  invalidValue(cleared, /set through the HTTP API, so it is cleared only there/, "clear");
  // Replacing it through profile north's device would rescope it and open the site.
  const replaced = await alpacaAction(alpaca.base, 1, "SetExternalEvents", [safetyEvent("ups")]);
  invalidValue(replaced, /so it is replaced only there/, "replace");
  assert.equal(await hubFile(site.path), before);
  assert.deepEqual(await safeByProfile(alpaca.base), { site: false, north: false, south: false });
  const deleted = await fetch(`${url}/ups`, { method: "DELETE" });
  assert.equal(deleted.status, 204);
});
