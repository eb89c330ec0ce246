/**
 * One INDI safety proxy per enclosure (docs/safety.md, "One safety monitor per profile"): a real
 * `indiserver` running Debian's `indi_weather_safety_proxy` reads `GET /safety/indi?profile=north`
 * while an external event is set and cleared through north's Alpaca safety monitor.
 */

import assert from "node:assert/strict";
import { getJson, tempDir } from "../_shared/util.ts";
import {
  actionOk,
  alpacaServer,
  postSafe,
  PROFILE_TYPES,
  safetyEvent,
} from "../_shared/alpaca_util.ts";
import { indiMissing, WeatherSafetyProxy } from "../_shared/indi_util.ts";

const missing = indiMissing();
if (missing) {
  // deno-lint-ignore no-console
  console.log(`tests/alpaca/safety_indi_test.ts: skipping the INDI test: ${missing}`);
}

Deno.test({
  name:
    "INDI's weather safety proxy reading /safety/indi?profile=north follows an external event set and cleared through safetymonitor/1",
  ignore: missing !== undefined,
  async fn() {
    await using site = await tempDir();
    await using alpaca = await alpacaServer(site.path, PROFILE_TYPES);
    await postSafe(alpaca.server.url);
    const url = `${alpaca.server.url}/safety/indi?profile=north`;
    await using proxy = await WeatherSafetyProxy.start(url);
    await proxy.safetyBecomes(1, "while north is safe");

    await actionOk(alpaca.base, 1, "SetExternalEvents", [safetyEvent("door", "people in dome B")]);
    await proxy.safetyBecomes(0, "once the event holds north");
    assert.equal(await proxy.reasons(), "external: UPS: people in dome B");
    // The site's document, which another enclosure's proxy reads, stays open.
    const siteDoc = await getJson(`${alpaca.server.url}/safety/indi`);
    assert.deepEqual((siteDoc.body as { roof_status: unknown }).roof_status, {
      open_ok: 1,
      reasons: "",
    });

    await actionOk(alpaca.base, 1, "ClearExternalEvents", ["door"]);
    await proxy.safetyBecomes(1, "once the event is cleared");
  },
});
