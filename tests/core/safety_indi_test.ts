/**
 * `GET /safety/indi` (docs/safety.md) read by a real INDI server running Debian's
 * `indi_weather_safety_proxy`: its `WEATHER_SAFETY` parameter follows the verdict.
 */

import assert from "node:assert/strict";
import { join } from "node:path";
import { parseTypes } from "../../core/types_registry.ts";
import { getJson, postJson, tempDir, testServer } from "../_shared/util.ts";
import { indiMissing, WeatherSafetyProxy } from "../_shared/indi_util.ts";

const TYPES = parseTypes(
  JSON.stringify({
    weather: {
      critical: true,
      clear_after_s: 0,
      fields: { wind_mps: { unit: "m/s", alarm_above: 15 } },
    },
  }),
  "types.json",
);

const missing = indiMissing();
if (missing) {
  // deno-lint-ignore no-console
  console.log(`safety_indi_test.ts: skipping the INDI tests: ${missing}`);
}

Deno.test({
  name:
    "GET /safety/indi is the document INDI's weather safety proxy reads, and its WEATHER_SAFETY follows the verdict",
  ignore: missing !== undefined,
  async fn() {
    await using dir = await tempDir();
    await using server = await testServer({ siteDir: join(dir.path, "site"), types: TYPES });
    const doc = await getJson(`${server.url}/safety/indi`);
    assert.equal(doc.status, 200);
    const body = doc.body as { timestamp_utc: string; roof_status: Record<string, unknown> };
    assert.match(body.timestamp_utc, /^\d{4}-\d\d-\d\dT\d\d:\d\d:\d\dZ$/);
    assert.deepEqual(body.roof_status, { open_ok: 0, reasons: "weather: stale, never seen" });

    await using proxy = await WeatherSafetyProxy.start(`${server.url}/safety/indi`);
    await proxy.safetyBecomes(0, "while unsafe");
    assert.equal(await proxy.reasons(), "weather: stale, never seen");

    await postJson(`${server.url}/event`, { type: "weather", data: { wind_mps: 3 } });
    await proxy.safetyBecomes(1, "once safe");

    await postJson(`${server.url}/event`, { type: "weather", data: { wind_mps: 22 } });
    await proxy.safetyBecomes(0, "in alarm");
    assert.equal(await proxy.reasons(), "weather: wind_mps 22 m/s above alarm 15");
  },
});
