/**
 * One unit, one site (docs/fleet.md, "Units"): the forwarder claims its `--unit` for its site's
 * `site_id` before sending anything, in a JetStream key-value bucket or a PostgreSQL table, so two
 * site directories forwarded under one unit never mix their events nor drop one's as duplicates
 * of the other's. Real `nats-server -js` and PostgreSQL, real site directories.
 * @module
 */

import assert from "node:assert/strict";
import { join } from "node:path";
import { archive } from "../../fleet/archive.ts";
import { forward, type ForwardOptions, spawnForwarder } from "../../forward.ts";
import { postJson, tempDir, testServer } from "../_shared/util.ts";
import {
  countRows,
  FORWARD_MAIN,
  forwardUntil,
  natsMissing,
  NatsServer,
  postgresMissing,
  PostgresServer,
  waitUntil,
} from "../_shared/fleet_util.ts";

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

/** Runs the forwarder's own program to its end (it must stop by itself within 20 s). */
async function forwardCli(
  args: string[],
): Promise<{ code: number; stdout: string; stderr: string }> {
  const out = await new Deno.Command(Deno.execPath(), {
    args: ["run", "--allow-all", FORWARD_MAIN, "forward", ...args],
    stdout: "piped",
    stderr: "piped",
    signal: AbortSignal.timeout(20_000),
  }).output();
  const text = new TextDecoder();
  return { code: out.code, stdout: text.decode(out.stdout), stderr: text.decode(out.stderr) };
}

Deno.test({
  name: "forward of a unit another site holds prints one line naming both site ids and exits 1",
  ignore: skipPg !== undefined,
  async fn() {
    await using pg = await PostgresServer.start();
    await using a = await site("a", 3);
    await using b = await site("b", 3);
    await forwardUntil(
      { siteDir: a.dir, to: pg.url, unit: "pan012" },
      async () => (await countRows(pg)) === 3,
      "site a's rows",
    );
    const run = await forwardCli(["--site-dir", b.dir, "--to", pg.url, "--unit", "pan012"]);
    assert.equal(run.code, 1, run.stderr);
    assert.equal(
      run.stderr,
      `error: unit pan012 is held by site ${a.siteId}, and this site directory is site ` +
        `${b.siteId}: forward it under another --unit, or, if it replaces site ${a.siteId} ` +
        `(moved to a new disk), take the unit over with forward --reclaim-unit\n`,
    );
    assert.deepEqual(await rowsBySite(pg), { a: 3 });
  },
});

Deno.test({
  name: "spawnForwarder with reclaimUnit hands the unit over, and the site that held it is refused",
  ignore: skipNats !== undefined,
  async fn() {
    await using nats = await NatsServer.start();
    await using a = await site("a", 3);
    await using b = await site("b", 3);
    let sent = 0;
    await forwardUntil(
      { siteDir: a.dir, to: nats.url, unit: "pan012", onSent: (s) => void (sent += s.count) },
      () => sent === 3,
      "site a's events",
    );
    const child = spawnForwarder({
      siteDir: b.dir,
      to: nats.url,
      unit: "pan012",
      reclaimUnit: true,
      output: "piped",
      nice: 0,
    });
    const lines: string[] = [];
    const reading = (async () => {
      for await (const chunk of child.process.stderr.pipeThrough(new TextDecoderStream())) {
        lines.push(...chunk.split("\n").filter(Boolean));
      }
    })();
    const stdout = child.process.stdout.cancel();
    try {
      await waitUntil(
        () => lines.some((l) => / warn unit pan012 taken over/.test(l)),
        20_000,
        "the log line",
      );
    } finally {
      await child.stop();
      await reading;
      await stdout;
    }
    assert.ok(
      lines.some((l) => l.includes(`taken over from site ${a.siteId} by site ${b.siteId}`)),
      lines.join("\n"),
    );
    const err = await forwardRefusal({ siteDir: a.dir, to: nats.url, unit: "pan012" });
    assertHeld(err, "pan012", b.siteId, a.siteId);
  },
});

Deno.test({
  name: "forward with reclaimUnit takes a PostgreSQL unit over and sends the new site's events",
  ignore: skipPg !== undefined,
  async fn() {
    await using pg = await PostgresServer.start();
    await using a = await site("a", 3);
    await using b = await site("b", 5);
    await forwardUntil(
      { siteDir: a.dir, to: pg.url, unit: "pan012" },
      async () => (await countRows(pg)) === 3,
      "site a's rows",
    );
    const logged: string[] = [];
    // The new disk's site b continues the unit: its seqs 1-3 meet site a's keys, 4-5 are new.
    await forwardUntil(
      {
        siteDir: b.dir,
        to: pg.url,
        unit: "pan012",
        reclaimUnit: true,
        log: (level, message) => void logged.push(`${level} ${message}`),
      },
      async () => (await countRows(pg)) === 5,
      "site b's new rows",
    );
    assert.equal(
      await pg.query("select site_id from telemetry_units where unit = 'pan012'"),
      b.siteId,
    );
    assert.ok(
      logged.some((l) => l.startsWith(`warn unit pan012 taken over from site ${a.siteId}`)),
    );
    assert.deepEqual(await rowsBySite(pg), { a: 3, b: 2 });
  },
});

Deno.test({
  name: "a restarted forwarder of the same site keeps its claim",
  ignore: skipPg !== undefined,
  async fn() {
    await using pg = await PostgresServer.start();
    await using a = await site("a", 4);
    const logged: string[] = [];
    const options = {
      siteDir: a.dir,
      to: pg.url,
      unit: "pan012",
      log: (level: string, message: string) => void logged.push(`${level} ${message}`),
    };
    await forwardUntil(options, async () => (await countRows(pg)) === 4, "the first run");
    const claimed = await pg.query("select site_id, claimed_at from telemetry_units");
    await forwardUntil(
      options,
      () => logged.some((l) => l === `info unit pan012 held by this site, ${a.siteId}`),
      "the restart's claim",
    );
    assert.ok(logged.includes(`info unit pan012 claimed for this site, ${a.siteId}`));
    assert.equal(await pg.query("select site_id, claimed_at from telemetry_units"), claimed);
    assert.equal(await countRows(pg), 4);
  },
});

Deno.test({
  name: "a claim in JetStream survives a restart of the NATS server",
  ignore: skipNats !== undefined,
  async fn() {
    await using nats = await NatsServer.start();
    await using a = await site("a", 2);
    await using b = await site("b", 2);
    let sent = 0;
    await forwardUntil(
      { siteDir: a.dir, to: nats.url, unit: "pan012", onSent: (s) => void (sent += s.count) },
      () => sent === 2,
      "site a's events",
    );
    await nats.kill("SIGTERM");
    await nats.restart();
    const err = await forwardRefusal({ siteDir: b.dir, to: nats.url, unit: "pan012" });
    assertHeld(err, "pan012", a.siteId, b.siteId);
  },
});

Deno.test({
  name: "a claim in PostgreSQL survives a restart of the database",
  ignore: skipPg !== undefined,
  async fn() {
    await using pg = await PostgresServer.start();
    await using a = await site("a", 2);
    await using b = await site("b", 2);
    await forwardUntil(
      { siteDir: a.dir, to: pg.url, unit: "pan012" },
      async () => (await countRows(pg)) === 2,
      "site a's rows",
    );
    await pg.stop("immediate");
    await pg.restart();
    const err = await forwardRefusal({ siteDir: b.dir, to: pg.url, unit: "pan012" });
    assertHeld(err, "pan012", a.siteId, b.siteId);
    assert.deepEqual(await rowsBySite(pg), { a: 2 });
  },
});

Deno.test("forward of a site directory without .site.json stops with one line saying to start the service once", async () => {
  await using dir = await tempDir("obs-units-bare-");
  // An unreachable destination: the refusal comes before any connection is tried.
  const err = await forwardRefusal({ siteDir: dir.path, to: "nats://127.0.0.1:9", unit: "pan012" });
  assert.ok(err, "the forwarder ran on instead of stopping");
  assert.equal(
    err.message,
    `${join(dir.path, ".site.json")} is missing, so this site directory has no site id to ` +
      `claim its unit with: start the service once on it (obs-utils telemetry run --site-dir ` +
      `${dir.path}), which writes it, then forward again`,
  );
});

Deno.test({
  name: "a forwarder started while NATS is down claims its unit and sends once the server is back",
  ignore: skipNats !== undefined,
  async fn() {
    await using nats = await NatsServer.start();
    await using a = await site("a", 3);
    await nats.kill();
    const logged: string[] = [];
    let sent = 0;
    let restarted = false;
    const stats = await forwardUntil(
      {
        siteDir: a.dir,
        to: nats.url,
        unit: "pan012",
        log: (level, message) => void logged.push(`${level} ${message}`),
        onSent: (s) => void (sent += s.count),
      },
      async () => {
        if (!restarted && logged.some((l) => l.includes("retrying the claim of unit pan012"))) {
          assert.equal(sent, 0); // nothing before the claim
          await nats.restart();
          restarted = true;
        }
        return sent === 3;
      },
      "the events after the server came back",
      30_000,
    );
    assert.equal(stats.sent, 3);
    assert.ok(
      logged.includes(`info unit pan012 claimed for this site, ${a.siteId}`),
      logged.join("\n"),
    );
  },
});

Deno.test("forward --status --reclaim-unit is a usage error saying the flag goes with --to and --unit", async () => {
  await using dir = await tempDir("obs-units-status-");
  const run = await forwardCli(["--status", "--reclaim-unit", "--site-dir", dir.path]);
  assert.equal(run.code, 2);
  assert.equal(
    run.stderr,
    "obs-utils telemetry forward: --reclaim-unit goes with --to and --unit, not --status. " +
      "Run 'obs-utils telemetry forward --help' for usage.\n",
  );
});
