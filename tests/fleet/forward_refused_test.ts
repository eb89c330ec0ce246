/**
 * Rows a destination can never take (docs/fleet.md#rows-a-destination-refuses), with a real
 * PostgreSQL and a real `nats-server -js`: a value nested 100,000 deep, or a message larger than
 * its stream's `max_msg_size`, is skipped with one warning naming its key and counted, and the
 * rows behind it are archived.
 * @module
 */

import assert from "node:assert/strict";
import { connect } from "npm:@nats-io/transport-node@^3.4.0";
import { jetstreamManager } from "npm:@nats-io/jetstream@^3.4.0";
import { archive, forwardStatus } from "../../forward.ts";
import {
  countRows,
  forwardUntil,
  natsMissing,
  NatsServer,
  postgresMissing,
  PostgresServer,
  tempSite,
} from "../_shared/fleet_util.ts";

const skipNats = natsMissing();
const skipPg = postgresMissing();
// deno-lint-ignore no-console
if (skipPg) console.log(`skipping the refused-row tests of the forwarder: ${skipPg}`);

/** A stored line as the service writes it (canonical key order), `data` given as JSON text. */
function line(seq: number, data = `{"seq":${seq}}`): string {
  const ts = new Date(Date.UTC(2026, 10, 1, 20, 0, 0, seq)).toISOString();
  return `{"seq":${seq},"ts":"${ts}","type":"weather","data":${data},"meta":{}}`;
}

Deno.test({
  name: "forward skips a row nested 100,000 deep with one warning naming its key " +
    "and archives the rows behind it in PostgreSQL",
  ignore: skipPg !== undefined,
  async fn() {
    await using dir = await tempSite();
    await using pg = await PostgresServer.start();
    const deep = `{"a":${"[".repeat(100_000)}${"]".repeat(100_000)}}`;
    const lines = [line(1), line(2, deep), ...Array.from({ length: 20 }, (_, i) => line(3 + i))];
    await Deno.writeTextFile(`${dir.path}/site_20261101.ndjson`, lines.join("\n") + "\n");
    const logs: string[] = [];
    const stats = await forwardUntil(
      {
        siteDir: dir.path,
        to: pg.url,
        unit: "pan012",
        log: (level, message) => logs.push(`${level} ${message}`),
      },
      async () => (await countRows(pg)) === 21,
      "the 21 rows PostgreSQL can take",
    );
    assert.equal(await countRows(pg, "seq = 2"), 0);
    assert.equal(stats.skipped, 1);
    const warnings = logs.filter((l) => l.includes("pan012/site/2"));
    assert.equal(warnings.length, 1, logs.join("\n"));
    assert.match(warnings[0]!, /^warn skipping site event 2: /);
  },
});

Deno.test({
  name: "forward skips a message its JetStream stream refuses for its size (max_msg_size) " +
    "with one warning naming its key and sends the ones behind it",
  ignore: skipPg !== undefined || skipNats !== undefined,
  async fn() {
    await using dir = await tempSite();
    await using nats = await NatsServer.start();
    await using pg = await PostgresServer.start();
    // A stream made by the operator with a message limit below the server's max_payload.
    const nc = await connect({ servers: `127.0.0.1:${nats.port}` });
    try {
      const jsm = await jetstreamManager(nc);
      await jsm.streams.add({ name: "TELEMETRY", subjects: ["telemetry.>"], max_msg_size: 1024 });
    } finally {
      await nc.close();
    }
    const big = `{"pad":"${"x".repeat(4000)}"}`;
    const lines = [line(1), line(2, big), ...Array.from({ length: 5 }, (_, i) => line(3 + i))];
    await Deno.writeTextFile(`${dir.path}/site_20261101.ndjson`, lines.join("\n") + "\n");
    const logs: string[] = [];
    const stop = new AbortController();
    const archiving = archive({ from: nats.url, to: pg.url, signal: stop.signal });
    try {
      const stats = await forwardUntil(
        {
          siteDir: dir.path,
          to: nats.url,
          unit: "pan012",
          log: (level, message) => logs.push(`${level} ${message}`),
        },
        async () => (await countRows(pg)) === 6,
        "the 6 messages JetStream takes",
      );
      // The cursor went past the refused message: the stream behind it is not stuck.
      const [site] = await forwardStatus(dir.path);
      assert.equal(site!.lag_events, 0, "nothing waits behind the refused message");
      assert.equal(stats.skipped, 1);
    } finally {
      stop.abort();
      await archiving;
    }
    assert.equal(await countRows(pg, "seq = 2"), 0);
    const warnings = logs.filter((l) => l.includes("pan012/site/2"));
    assert.equal(warnings.length, 1, logs.join("\n"));
    assert.match(warnings[0]!, /^warn skipping site event 2: JetStream refused it/);
  },
});
