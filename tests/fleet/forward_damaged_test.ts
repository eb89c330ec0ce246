/**
 * The forwarder and a damaged `.gz` night (docs/fleet.md#damaged-files), with a real PostgreSQL:
 * the file is passed over with one warning naming it and the offset reached, the nights after it
 * are sent, and `forward --status` lists it.
 * @module
 */

import assert from "node:assert/strict";
import { forwardStatus } from "../../forward.ts";
import {
  countRows,
  forwardUntil,
  postgresMissing,
  PostgresServer,
  tempSite,
} from "../_shared/fleet_util.ts";

const skipPg = postgresMissing();
// deno-lint-ignore no-console
if (skipPg) console.log(`skipping the damaged-file tests of the forwarder: ${skipPg}`);

/** A stored line as the service writes it (canonical key order). */
function line(seq: number): string {
  const ts = new Date(Date.UTC(2026, 10, 1, 20, 0, 0, seq)).toISOString();
  return JSON.stringify({
    seq,
    ts,
    type: "weather",
    data: { seq, pad: "x".repeat(200) },
    meta: {},
  });
}

/** Gzip of `text`, cut short by `cut` bytes (8: the trailer alone). */
async function truncatedGzip(text: string, cut: number): Promise<Uint8Array> {
  const stream = new Blob([text]).stream().pipeThrough(new CompressionStream("gzip"));
  const bytes = new Uint8Array(await new Response(stream).arrayBuffer());
  return bytes.subarray(0, bytes.length - cut);
}

/** Night 20261101 as a `.gz` without its trailer (seqs 1..50), night 20261102 plain (51..60). */
async function damagedNight(siteDir: string): Promise<void> {
  const first = Array.from({ length: 50 }, (_, i) => line(i + 1)).join("\n") + "\n";
  await Deno.writeFile(`${siteDir}/site_20261101.ndjson.gz`, await truncatedGzip(first, 8));
  const second = Array.from({ length: 10 }, (_, i) => line(51 + i)).join("\n") + "\n";
  await Deno.writeTextFile(`${siteDir}/site_20261102.ndjson`, second);
}

Deno.test({
  name:
    "forward skips a .gz night with a truncated trailer with one warning and sends the nights after it",
  ignore: skipPg !== undefined,
  async fn() {
    await using dir = await tempSite();
    await using pg = await PostgresServer.start();
    await damagedNight(dir.path);
    const logs: string[] = [];
    await forwardUntil(
      {
        siteDir: dir.path,
        to: pg.url,
        unit: "pan012",
        log: (level, message) => logs.push(`${level} ${message}`),
      },
      async () => (await countRows(pg, "seq > 50")) === 10,
      "the night after the damaged one",
    );
    const warnings = logs.filter((l) => l.includes("site_20261101.ndjson.gz"));
    assert.equal(warnings.length, 1, logs.join("\n"));
    assert.match(
      warnings[0]!,
      /^warn skipping the damaged file .*site_20261101\.ndjson\.gz after byte \d+/,
    );
    // Every whole line the damaged file still gave was sent.
    const readable = Number(
      await pg.query("select count(*) from telemetry_events where seq <= 50"),
    );
    assert.ok(readable > 0, "the lines before the damage are sent");
  },
});

Deno.test({
  name: "forward --status lists a damaged .gz night the forwarder passed over",
  ignore: skipPg !== undefined,
  async fn() {
    await using dir = await tempSite();
    await using pg = await PostgresServer.start();
    await damagedNight(dir.path);
    await forwardUntil(
      { siteDir: dir.path, to: pg.url, unit: "pan012" },
      async () => (await countRows(pg, "seq > 50")) === 10,
      "the night after the damaged one",
    );
    const [site] = await forwardStatus(dir.path);
    assert.equal(site!.lag_events, 0);
    assert.equal(site!.damaged.length, 1);
    assert.equal(site!.damaged[0]!.file, "site_20261101.ndjson.gz");
    assert.ok(site!.damaged[0]!.offset > 0);
  },
});
