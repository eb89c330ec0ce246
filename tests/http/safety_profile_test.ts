/**
 * The safety profiles over HTTP as the dashboard reads them (docs/safety.md#profiles,
 * docs/types.md): `GET /safety?profile=P` and `GET /types`'s `critical_for`, against a real
 * service on 127.0.0.1 port 0.
 * @module
 */
import assert from "node:assert/strict";
import { parseTypes } from "../../core/types_registry.ts";
import { getJson, postJson, tempDir, testServer } from "../_shared/util.ts";

/** `weather` decides the site; `dome` the profile `north` only. */
const TYPES = parseTypes(
  JSON.stringify({
    weather: { critical: true, stale_after_s: 600, fields: { wind_mps: { alarm_above: 15 } } },
    dome: { critical_for: ["north"], stale_after_s: 600, fields: { temp_c: { alarm_above: 50 } } },
  }),
  "types.json",
);

Deno.test("GET /safety?profile=P answers that profile's verdict, and without it the site's", async () => {
  await using tmp = await tempDir();
  await using server = await testServer({ siteDir: tmp.path, types: TYPES });
  await postJson(`${server.url}/event`, { type: "weather", data: { wind_mps: 3 } });
  await postJson(`${server.url}/event`, { type: "dome", data: { temp_c: 61 } });
  const north = await getJson(`${server.url}/safety?profile=north`);
  assert.equal(north.status, 200);
  assert.equal(north.headers.get("cache-control"), "no-store");
  const body = north.body as { profile: string; safe: boolean; reasons: string[] };
  assert.deepEqual([body.profile, body.safe, body.reasons], [
    "north",
    false,
    ["dome: temp_c 61 above alarm 50"],
  ]);
  for (const query of ["", "?profile=site"]) {
    const site = (await getJson(`${server.url}/safety${query}`)).body as {
      profile: string;
      safe: boolean;
    };
    assert.deepEqual([site.profile, site.safe], ["site", true], query);
  }
});

Deno.test("GET /safety?profile=P for a profile the types file does not name is a 404 listing the profiles", async () => {
  await using tmp = await tempDir();
  await using server = await testServer({ siteDir: tmp.path, types: TYPES });
  const res = await getJson(`${server.url}/safety?profile=south`);
  assert.equal(res.status, 404);
  assert.equal(res.headers.get("content-type"), "application/problem+json; charset=utf-8");
  assert.deepEqual(res.body, {
    type: "about:blank",
    title: "Not Found",
    status: 404,
    detail:
      'There is no safety profile "south"; the profiles are site, north (site, and each name of a critical_for in the types file, docs/safety.md#profiles).',
  });
});

Deno.test("GET /types lists the profiles each type decides as critical_for", async () => {
  await using tmp = await tempDir();
  await using server = await testServer({ siteDir: tmp.path, types: TYPES });
  await postJson(`${server.url}/event`, { type: "camera", data: { ccd_temp_c: -20 } });
  const types = (await getJson(`${server.url}/types`)).body as Record<
    string,
    { critical: boolean; critical_for: string[] }
  >;
  assert.deepEqual(
    Object.entries(types).map(([type, t]) => [type, t.critical, t.critical_for]),
    [["weather", true, []], ["dome", false, ["north"]], ["camera", false, []]],
  );
});
