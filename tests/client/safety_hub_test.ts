/**
 * The client's side of the safety hub (docs/client.md, docs/safety.md#safety-events): profiles,
 * external events and waivers through `TelemetryClient` against a real service on port 0.
 */

import assert from "node:assert/strict";
import { TelemetryClient, TelemetryHttpError } from "../../client.ts";
import { parseTypes } from "../../core/types_registry.ts";
import { postJson, safetyEvent, tempDir, testServer } from "../_shared/util.ts";

const TYPES = parseTypes(
  JSON.stringify({
    weather: { critical: true, stale_after_s: 600, fields: { wind_mps: { alarm_above: 15 } } },
    dome: { critical_for: ["north"], stale_after_s: 600 },
  }),
  "types.json",
);

const UPS = safetyEvent("ups-mains");

async function fixture() {
  const tmp = await tempDir();
  const server = await testServer({ siteDir: tmp.path, types: TYPES, token: "s3cret" });
  const headers = { authorization: "Bearer s3cret" };
  for (const type of ["weather", "dome"]) {
    await postJson(`${server.url}/event`, { type, data: { wind_mps: 2 } }, headers);
  }
  return {
    server,
    client: new TelemetryClient({ baseUrl: server.url, token: "s3cret" }),
    async [Symbol.asyncDispose]() {
      await server.shutdown();
      await tmp[Symbol.asyncDispose]();
    },
  };
}

Deno.test("TelemetryClient.setSafetyEvents holds the site shut until clearSafetyEvent", async () => {
  await using f = await fixture();
  const held = await f.client.setSafetyEvents([UPS]);
  assert.equal(held.safe, false);
  assert.deepEqual(held.reasons, ["external: UPS: on battery"]);
  assert.deepEqual(held.events.map((e) => e.Id), ["ups-mains"]);
  assert.equal((await f.client.safety({ profile: "north" })).safe, false, "every profile");
  assert.equal(await f.client.clearSafetyEvent("ups-mains"), true);
  assert.equal(await f.client.clearSafetyEvent("ups-mains"), false);
  assert.equal((await f.client.safety()).safe, true);
});

Deno.test("TelemetryClient.setSafetyEvents with a profile holds only that profile", async () => {
  await using f = await fixture();
  await f.client.setSafetyEvents([UPS], { profile: "north" });
  assert.equal((await f.client.safety()).safe, true);
  const north = await f.client.safety({ profile: "north" });
  assert.equal(north.profile, "north");
  assert.equal(north.safe, false);
});

Deno.test("TelemetryClient.setSafetyEvents refused by the service is TelemetryHttpError 400 with its reason", async () => {
  await using f = await fixture();
  const err = await f.client.setSafetyEvents([{ ...UPS, Id: "telemetry:mine" }]).then(
    () => undefined,
    (e) => e,
  );
  assert.ok(err instanceof TelemetryHttpError);
  assert.equal(err.status, 400);
  assert.match(err.message, /service's own/);
  assert.equal((await f.client.safety()).safe, true);
});

Deno.test("TelemetryClient.waiveType shows the waiver in the verdict until unwaiveType", async () => {
  await using f = await fixture();
  const waiver = await f.client.waiveType("weather", 600, "anemometer iced");
  assert.equal(waiver.type, "weather");
  assert.equal(waiver.reason, "anemometer iced");
  const verdict = await f.client.safety();
  assert.equal(verdict.safe, true);
  assert.deepEqual(verdict.waivers.map((w) => w.type), ["weather"]);
  assert.equal(verdict.types.weather!.waived_until, waiver.until);
  assert.equal(await f.client.unwaiveType("weather"), true);
  assert.equal(await f.client.unwaiveType("weather"), false);
  assert.deepEqual((await f.client.safety()).waivers, []);
});

Deno.test("TelemetryClient.safety with an unknown profile is TelemetryHttpError 404", async () => {
  await using f = await fixture();
  await assert.rejects(
    () => f.client.safety({ profile: "south" }),
    (err) => err instanceof TelemetryHttpError && err.status === 404,
  );
});
