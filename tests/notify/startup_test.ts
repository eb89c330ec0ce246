/**
 * A change of the safety verdict found when the service starts is notified (docs/safety.md,
 * "Notifications"): a site stopped while safe and started again after its critical type went
 * stale tells its receivers it is unsafe. Real services on port 0 over one site directory, a
 * real receiver.
 */

import assert from "node:assert/strict";
import { join } from "node:path";
import { parseTypes } from "../../core/types_registry.ts";
import { getJson, postJson, tempDir, testServer } from "../_shared/util.ts";
import { startReceiver, waitFor } from "../_shared/notify_util.ts";

const TYPES = {
  weather: {
    critical: true,
    stale_after_s: 2,
    clear_after_s: 0,
    fields: { wind_mps: { unit: "m/s", alarm_above: 15 } },
  },
};

Deno.test("a site stopped while safe and started after its critical type went stale notifies that it is unsafe", async () => {
  await using tmp = await tempDir();
  const siteDir = join(tmp.path, "site");
  const types = () => parseTypes(JSON.stringify(TYPES), "types.json");
  await using before = startReceiver();
  const first = await testServer({ siteDir, types: types(), notify: [before.url] });
  let postedAt: number;
  try {
    assert.equal(
      (await postJson(`${first.url}/event`, { type: "weather", data: { wind_mps: 3 } })).status,
      200,
    );
    postedAt = Date.now();
    const { body } = await getJson(`${first.url}/safety`);
    assert.equal((body as { safe: boolean }).safe, true, JSON.stringify(body));
  } finally {
    await first.shutdown();
  }
  // Stopped while safe: the weather event goes stale while nothing runs.
  await waitFor(() => Date.now() > postedAt + 2_500, "the weather event to go stale", 5_000);
  await using after = startReceiver();
  const second = await testServer({ siteDir, types: types(), notify: [after.url] });
  try {
    await waitFor(
      () => after.received.some((r) => JSON.parse(r.body).kind === "safety"),
      "the safety notification of the start",
      5_000,
    );
    const safety = after.received.map((r) => JSON.parse(r.body)).find((b) => b.kind === "safety");
    assert.equal(safety.safe, false);
    assert.ok(
      safety.reasons.some((r: string) => r.startsWith("weather: stale")),
      JSON.stringify(safety.reasons),
    );
  } finally {
    await second.shutdown();
  }
});
