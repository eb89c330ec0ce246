/**
 * One unit, one site (docs/fleet.md, "Units"): the forwarder claims its `--unit` for its site's
 * `site_id` before sending anything, in a JetStream key-value bucket or a PostgreSQL table, so two
 * site directories forwarded under one unit never mix their events nor drop one's as duplicates
 * of the other's. Real `nats-server -js` and PostgreSQL, real site directories.
 * @module
 */

import assert from "node:assert/strict";
import { join } from "node:path";
import { archive } from "../fleet/archive.ts";
import { forward, type ForwardOptions } from "../forward.ts";
import { postJson, tempDir, testServer } from "./_util.ts";
import {
  countRows,
  forwardUntil,
  natsMissing,
  NatsServer,
  postgresMissing,
  PostgresServer,
  waitUntil,
} from "./_fleet_util.ts";

const skipNats = natsMissing();
const skipPg = postgresMissing();

/** A site directory the service started once (so it has its `.site.json`) holding `count` events. */
async function site(
  name: string,
  count: number,
): Promise<{ dir: string; siteId: string } & AsyncDisposable> {
  const dir = await tempDir(`obs-units-${name}-`);
  await using server = await testServer({ siteDir: dir.path });
  for (let i = 0; i < count; i++) {
    const r = await postJson(`${server.url}/event`, { type: "weather", data: { site: name, i } });
    assert.equal(r.status, 200);
  }
  const identity = JSON.parse(await Deno.readTextFile(join(dir.path, ".site.json")));
  return {
    dir: dir.path,
    siteId: identity.site_id,
    [Symbol.asyncDispose]: dir[Symbol.asyncDispose],
  };
}

/** Runs `forward()` until it stops by itself (then its error) or 10 s pass (then `undefined`). */
async function forwardRefusal(options: Omit<ForwardOptions, "signal">): Promise<Error | undefined> {
  try {
    await forward({ ...options, signal: AbortSignal.timeout(10_000) });
    return undefined;
  } catch (err) {
    return err as Error;
  }
}

/** The rows of `telemetry_events` per site, by the `site` the test wrote into each event. */
async function rowsBySite(pg: PostgresServer): Promise<Record<string, number>> {
  const out = await pg.query(
    "select data->>'site', count(*) from telemetry_events group by 1 order by 1",
  ).catch(() => "");
  return Object.fromEntries(
    out.split("\n").filter(Boolean).map((l) => l.split("|")).map(([s, n]) => [s!, Number(n)]),
  );
}

/** Asserts that `err` is the one line of a unit held by another site, naming both ids and the fix. */
function assertHeld(err: Error | undefined, unit: string, holder: string, mine: string): void {
  assert.ok(err, "the second forwarder ran on instead of stopping");
  assert.doesNotMatch(err.message, /\n/);
  assert.ok(err.message.includes(`unit ${unit}`), err.message);
  assert.ok(err.message.includes(holder), err.message);
  assert.ok(err.message.includes(mine), err.message);
  assert.match(err.message, /another --unit/);
  assert.match(err.message, /--reclaim-unit/);
}

Deno.test({
  name: "a second site forwarding to PostgreSQL under a unit another site holds stops, and " +
    "nothing of either is lost or mixed",
  ignore: skipPg !== undefined,
  async fn() {
    await using pg = await PostgresServer.start();
    await using a = await site("a", 12);
    await using b = await site("b", 7);
    await forwardUntil(
      { siteDir: a.dir, to: pg.url, unit: "pan012" },
      async () => (await countRows(pg)) === 12,
      "site a's rows",
    );
    const err = await forwardRefusal({ siteDir: b.dir, to: pg.url, unit: "pan012" });
    assertHeld(err, "pan012", a.siteId, b.siteId);
    assert.deepEqual(await rowsBySite(pg), { a: 12 });
    // Site b's events are all still in its files, to send under another unit.
    await forwardUntil(
      { siteDir: b.dir, to: pg.url, unit: "pan013" },
      async () => (await countRows(pg, "unit = 'pan013'")) === 7,
      "site b's rows under pan013",
    );
    assert.deepEqual(await rowsBySite(pg), { a: 12, b: 7 });
  },
});

Deno.test({
  name: "a second site forwarding to JetStream under a unit another site holds stops, and " +
    "nothing of either is lost or mixed",
  ignore: skipNats !== undefined || skipPg !== undefined,
  async fn() {
    await using nats = await NatsServer.start();
    await using pg = await PostgresServer.start();
    await using a = await site("a", 12);
    await using b = await site("b", 7);
    let sent = 0;
    await forwardUntil(
      { siteDir: a.dir, to: nats.url, unit: "pan012", onSent: (s) => void (sent += s.count) },
      () => sent === 12,
      "site a's events acknowledged",
    );
    const err = await forwardRefusal({ siteDir: b.dir, to: nats.url, unit: "pan012" });
    assertHeld(err, "pan012", a.siteId, b.siteId);
    const stop = new AbortController();
    const archiving = archive({ from: nats.url, to: pg.url, signal: stop.signal });
    try {
      await waitUntil(async () => (await countRows(pg)) === 12, 15_000, "the archive");
    } finally {
      stop.abort();
      await archiving;
    }
    assert.deepEqual(await rowsBySite(pg), { a: 12 });
  },
});
