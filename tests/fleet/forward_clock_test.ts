/**
 * The forwarder when the service's clock steps back across local noon (docs/fleet.md#a-clock-stepped-back):
 * a real `TelemetryService` whose injected clock the test moves writes new events into an earlier
 * night's file than the forwarder's cursor; every one of them must reach a real PostgreSQL, be
 * counted by `forward --status`, and keep its night from retention until it is sent.
 * @module
 */

import assert from "node:assert/strict";
import { forwardStatus } from "../../forward.ts";
import { runRetentionPass } from "../../store/retention.ts";
import { openService } from "../_shared/util.ts";
import {
  countRows,
  forwardUntil,
  postgresMissing,
  PostgresServer,
  startForwarding,
  tempSite,
  waitUntil,
} from "../_shared/fleet_util.ts";

const skipPg = postgresMissing();
// deno-lint-ignore no-console
if (skipPg) console.log(`skipping the clock tests of the forwarder: ${skipPg}`);

const NIGHT_10 = Date.parse("2026-05-10T13:00:00Z"); // night 20260510 (UTC)
const NIGHT_11 = Date.parse("2026-05-11T13:00:00Z"); // night 20260511
const STEPPED_BACK = Date.parse("2026-05-11T11:00:00Z"); // before noon: night 20260510 again

/**
 * A site directory whose night 20260511 holds events 3 and 4, and whose night 20260510 holds 1
 * and 2 plus `late` more written after the clock stepped back; `send` runs between the two parts
 * with the forwarder given.
 */
async function steppedBack(
  siteDir: string,
  late: number,
  send: () => Promise<void>,
): Promise<void> {
  const now = { ms: NIGHT_10 };
  const service = await openService(siteDir, {}, now);
  try {
    await service.record([{ type: "weather", data: { n: 1 } }, {
      type: "weather",
      data: { n: 2 },
    }]);
    now.ms = NIGHT_11;
    await service.record([{ type: "weather", data: { n: 3 } }, {
      type: "weather",
      data: { n: 4 },
    }]);
    await send();
    now.ms = STEPPED_BACK;
    for (let i = 0; i < late; i++) await service.record([{ type: "weather", data: { n: 5 + i } }]);
  } finally {
    await service.close();
  }
  const earlier = await Deno.readTextFile(`${siteDir}/site_20260510.ndjson`);
  assert.equal(
    earlier.trim().split("\n").length,
    2 + late,
    "the late events are in the earlier night",
  );
}

Deno.test({
  name: "forward sends events a clock step back wrote into an earlier night",
  ignore: skipPg !== undefined,
  async fn() {
    await using dir = await tempSite();
    await using pg = await PostgresServer.start();
    await using _forwarder = startForwarding({ siteDir: dir.path, to: pg.url, unit: "pan012" });
    await steppedBack(dir.path, 3, async () => {
      await waitUntil(async () => (await countRows(pg)) === 4, 15_000, "the first 4 rows");
    });
    await waitUntil(async () => (await countRows(pg)) === 7, 15_000, "the 3 late rows");
    assert.equal(
      await pg.query("select string_agg(seq::text, ',' order by seq) from telemetry_events"),
      "1,2,3,4,5,6,7",
    );
  },
});

Deno.test({
  name: "forward --status counts events a clock step back wrote into an earlier night",
  ignore: skipPg !== undefined,
  async fn() {
    await using dir = await tempSite();
    await using pg = await PostgresServer.start();
    await steppedBack(dir.path, 2, async () => {
      await forwardUntil(
        { siteDir: dir.path, to: pg.url, unit: "pan012" },
        async () => (await countRows(pg)) === 4,
        "the first 4 rows",
      );
    });
    const [site] = await forwardStatus(dir.path, { now: STEPPED_BACK });
    assert.equal(site!.stream, "site");
    assert.equal(site!.lag_events, 2);
    assert.equal(site!.oldest_unsent_ts, new Date(STEPPED_BACK).toISOString());
  },
});

Deno.test({
  name: "retention keeps a night a clock step back wrote into until the forwarder sent it",
  ignore: skipPg !== undefined,
  async fn() {
    await using dir = await tempSite();
    await using pg = await PostgresServer.start();
    await steppedBack(dir.path, 2, async () => {
      await forwardUntil(
        { siteDir: dir.path, to: pg.url, unit: "pan012" },
        async () => (await countRows(pg)) === 4,
        "the first 4 rows",
      );
    });
    // Two later nights hold data, so that retention counts nights 20260510 and 20260511 as
    // passed by the data too, not only by the clock (docs/history.md).
    const later = { ms: Date.parse("2026-05-13T13:00:00Z") };
    const service = await openService(dir.path, {}, later);
    try {
      await service.record([{ type: "weather", data: { n: 7 } }]);
      later.ms = Date.parse("2026-05-14T13:00:00Z");
      await service.record([{ type: "weather", data: { n: 8 } }]);
    } finally {
      await service.close();
    }
    const pass = () =>
      runRetentionPass({
        siteDir: dir.path,
        timeZone: "UTC",
        retain: 1,
        compressAfter: 0,
        now: () => Date.parse("2026-05-20T13:00:00Z"),
      });
    const held = await pass();
    assert.ok(!held.deleted.some((p) => p.endsWith("site_20260510.ndjson")), String(held.deleted));
    assert.ok(held.heldByCursor.some((p) => p.endsWith("site_20260510.ndjson")));
    await forwardUntil(
      { siteDir: dir.path, to: pg.url, unit: "pan012" },
      async () => (await countRows(pg)) === 8,
      "the 2 late rows and the 2 of the later nights",
    );
    const after = await pass();
    assert.ok(after.deleted.some((p) => p.endsWith("site_20260510.ndjson")), String(after.deleted));
  },
});
