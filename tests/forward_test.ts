/**
 * The forwarder against real destinations: a service on a real site directory, a real
 * PostgreSQL and a real `nats-server -js`. Every stored line arrives once, runs included, new
 * lines are followed, a restart resumes from the cursor, and a bad command line says what to fix.
 * @module
 */

import assert from "node:assert/strict";
import { archive } from "../_archive.ts";
import { forward, forwardStatus } from "../forward.ts";
import { CLI, postJson, readSiteLines, tempDir, testServer } from "./_util.ts";
import { natsMissing, NatsServer, postgresMissing, PostgresServer } from "./_fleet_util.ts";

const skipNats = natsMissing();
const skipPg = postgresMissing();
// deno-lint-ignore no-console
if (skipPg) console.log(`skipping forward tests that need PostgreSQL: ${skipPg}`);
// deno-lint-ignore no-console
if (skipNats) console.log(`skipping forward tests that need NATS: ${skipNats}`);

async function waitUntil(check: () => Promise<boolean>, ms: number, what: string): Promise<void> {
  const deadline = Date.now() + ms;
  while (!(await check())) {
    if (Date.now() > deadline) throw new Error(`timed out waiting for ${what}`);
    await new Promise((r) => setTimeout(r, 50));
  }
}

async function countRows(pg: PostgresServer, where = "true"): Promise<number> {
  return Number(
    await pg.query(`select count(*) from telemetry_events where ${where}`).catch(() => "0"),
  );
}

async function postEvents(url: string, type: string, from: number, count: number): Promise<void> {
  for (let i = from; i < from + count; i++) {
    const r = await postJson(`${url}/event`, { type, data: { i } });
    assert.equal(r.status, 200);
  }
}

Deno.test({
  name: "forward sends every stored site and run line to PostgreSQL once and follows new ones",
  ignore: skipPg !== undefined,
  async fn() {
    await using dir = await tempDir();
    await using pg = await PostgresServer.start();
    await using server = await testServer({ siteDir: dir.path });
    await postEvents(server.url, "weather", 0, 20);
    assert.equal((await postJson(`${server.url}/run/start`, { run_id: "night-1" })).status, 201);
    await postEvents(server.url, "status", 0, 5);
    assert.equal((await postJson(`${server.url}/run/stop`, {})).status, 200);
    const stop = new AbortController();
    const running = forward({ siteDir: dir.path, to: pg.url, unit: "u1", signal: stop.signal });
    try {
      await waitUntil(async () => (await countRows(pg, "stream = 'run'")) === 5, 15_000, "the run");
      const siteBefore = (await readSiteLines(dir.path)).length;
      await waitUntil(
        async () => (await countRows(pg, "stream = 'site'")) === siteBefore,
        15_000,
        "site",
      );
      await postEvents(server.url, "weather", 20, 10); // followed live
      await waitUntil(
        async () => (await countRows(pg, "stream = 'site'")) === siteBefore + 10,
        15_000,
        "new lines",
      );
    } finally {
      stop.abort();
    }
    const stats = await running;
    assert.equal(stats.sent, (await readSiteLines(dir.path)).length + 5);
    const row = await pg.query(
      "select unit, run_id, seq, type, data->>'i', meta->>'run_id' from telemetry_events where stream = 'run' and seq = 3",
    );
    assert.equal(row, "u1|night-1|3|status|2|night-1");
  },
});

Deno.test({
  name: "a restarted forwarder resumes from its cursor and stores nothing twice",
  ignore: skipPg !== undefined,
  async fn() {
    await using dir = await tempDir();
    await using pg = await PostgresServer.start();
    await using server = await testServer({ siteDir: dir.path });
    await postEvents(server.url, "weather", 0, 30);
    const first = new AbortController();
    const a = forward({
      siteDir: dir.path,
      to: pg.url,
      unit: "u1",
      batch: 7,
      signal: first.signal,
    });
    await waitUntil(async () => (await countRows(pg)) === 30, 15_000, "first 30");
    first.abort();
    assert.equal((await a).sent, 30);
    await postEvents(server.url, "weather", 30, 12);
    const second = new AbortController();
    const b = forward({ siteDir: dir.path, to: pg.url, unit: "u1", signal: second.signal });
    await waitUntil(async () => (await countRows(pg)) === 42, 15_000, "all 42");
    second.abort();
    assert.equal((await b).sent, 12, "only the lines after the cursor are sent again");
    const [lag] = await forwardStatus(dir.path);
    assert.equal(lag?.lag_events, 0);
    assert.equal(lag?.sent_seq, 42);
  },
});

Deno.test({
  name: "forward through JetStream and an archiver stores every line in PostgreSQL once",
  ignore: (skipNats ?? skipPg) !== undefined,
  async fn() {
    await using dir = await tempDir();
    await using nats = await NatsServer.start();
    await using pg = await PostgresServer.start();
    await using server = await testServer({ siteDir: dir.path });
    await postEvents(server.url, "power", 0, 50);
    const stop = new AbortController();
    const fwd = forward({ siteDir: dir.path, to: nats.url, unit: "u7", signal: stop.signal });
    const arc = archive({ from: nats.url, to: pg.url, signal: stop.signal });
    try {
      await waitUntil(async () => (await countRows(pg)) === 50, 20_000, "50 rows");
    } finally {
      stop.abort();
    }
    await Promise.all([fwd, arc]);
    assert.equal(
      await pg.query("select min(seq) || '-' || max(seq) from telemetry_events where unit = 'u7'"),
      "1-50",
    );
  },
});

Deno.test({
  name: "forward --status prints each stream's lag without sending anything",
  ignore: skipPg !== undefined,
  async fn() {
    await using dir = await tempDir();
    await using pg = await PostgresServer.start();
    await using server = await testServer({ siteDir: dir.path });
    await postEvents(server.url, "weather", 0, 4);
    const stop = new AbortController();
    const running = forward({ siteDir: dir.path, to: pg.url, unit: "u1", signal: stop.signal });
    await waitUntil(async () => (await countRows(pg)) === 4, 15_000, "4 rows");
    stop.abort();
    await running;
    await postEvents(server.url, "weather", 4, 3);
    const out = await new Deno.Command(Deno.execPath(), {
      args: [
        "run",
        `--allow-read=${dir.path}`,
        "--allow-env",
        CLI,
        "telemetry",
        "forward",
        "--status",
        "--site-dir",
        dir.path,
      ],
      stdout: "piped",
      stderr: "piped",
    }).output();
    const text = new TextDecoder().decode(out.stdout);
    assert.equal(out.code, 0, new TextDecoder().decode(out.stderr));
    assert.match(text, /^NAME\s+STREAM\s+RUN\s+SENT_SEQ\s+LAG\s+OLDEST UNSENT\n/);
    assert.match(text, /\npostgres\s+site\s+-\s+4\s+3\s+\d+ s ago\n/);
    assert.equal(await countRows(pg), 4);
  },
});

for (
  const [args, message] of [
    [["--unit", "u1"], /--to is required/],
    [
      ["--to", "http://x:1", "--unit", "u1"],
      /--to must be nats:\/\/host:port or postgres:\/\/user@host:port\/db, not http:/,
    ],
    [["--to", "nats://127.0.0.1:4222"], /--unit is required \(or set OBS_TELEMETRY_UNIT\)/],
    [
      ["--to", "nats://127.0.0.1:4222", "--unit", "pan.1"],
      /--unit: unit "pan.1" must be 1 to 64 letters/,
    ],
    [
      ["--to", "nats://127.0.0.1:4222", "--unit", "u1", "--subject-prefix", "a.>"],
      /--subject-prefix: /,
    ],
    [
      ["--to", "nats://127.0.0.1:4222", "--unit", "u1", "--batch", "0"],
      /--batch must be a positive integer/,
    ],
  ] as const
) {
  Deno.test(`forward ${args.join(" ")} exits 2 with one line saying what to fix`, async () => {
    const out = await new Deno.Command(Deno.execPath(), {
      args: ["run", "--allow-all", CLI, "telemetry", "forward", ...args],
      stdout: "piped",
      stderr: "piped",
      env: { OBS_TELEMETRY_UNIT: "" },
    }).output();
    const stderr = new TextDecoder().decode(out.stderr);
    assert.equal(out.code, 2);
    assert.equal(stderr.trim().split("\n").length, 1, stderr);
    assert.match(stderr, message);
  });
}
