/**
 * The forwarder against real destinations: a service on a real site directory, a real
 * PostgreSQL and a real `nats-server -js`. Every stored line arrives once, runs included, new
 * lines are followed, a restart resumes from the cursor, and a bad command line says what to fix.
 * @module
 */

import assert from "node:assert/strict";
import { archive } from "../../fleet/archive.ts";
import {
  forward,
  FORWARD_ENV_VARS,
  forwarderPermissionFlags,
  forwardStatus,
} from "../../forward.ts";
import { CLI, moduleGraph, postJson, readSiteLines, testServer } from "../_shared/util.ts";
import {
  countRows,
  FORWARD_MAIN,
  forwardUntil,
  natsMissing,
  NatsServer,
  postEvents,
  postgresMissing,
  PostgresServer,
  startForwarding,
  tempSite,
  waitUntil,
} from "../_shared/fleet_util.ts";

const skipNats = natsMissing();
const skipPg = postgresMissing();
// deno-lint-ignore no-console
if (skipPg) console.log(`skipping forward tests that need PostgreSQL: ${skipPg}`);
// deno-lint-ignore no-console
if (skipNats) console.log(`skipping forward tests that need NATS: ${skipNats}`);

Deno.test({
  name: "forward sends every stored site and run line to PostgreSQL once and follows new ones",
  ignore: skipPg !== undefined,
  async fn() {
    await using dir = await tempSite();
    await using pg = await PostgresServer.start();
    await using server = await testServer({ siteDir: dir.path });
    await postEvents(server.url, "weather", 0, 20);
    assert.equal((await postJson(`${server.url}/run/start`, { run_id: "night-1" })).status, 201);
    await postEvents(server.url, "status", 0, 5);
    assert.equal((await postJson(`${server.url}/run/stop`, {})).status, 200);
    await using forwarding = startForwarding({ siteDir: dir.path, to: pg.url, unit: "u1" });
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
    const stats = await forwarding.stop();
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
    await using dir = await tempSite();
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
    await using dir = await tempSite();
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
    await using dir = await tempSite();
    await using pg = await PostgresServer.start();
    await using server = await testServer({ siteDir: dir.path });
    await postEvents(server.url, "weather", 0, 4);
    await forwardUntil(
      { siteDir: dir.path, to: pg.url, unit: "u1" },
      async () => (await countRows(pg)) === 4,
      "4 rows",
    );
    await postEvents(server.url, "weather", 4, 3);
    const out = await new Deno.Command(Deno.execPath(), {
      args: [
        "run",
        // The forwarder's own program, with read permission for the site directory only.
        `--allow-read=${dir.path}`,
        "--allow-env",
        FORWARD_MAIN,
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

/** A stored line as the service writes it. */
function line(seq: number, night: string): string {
  const ts = `${night.slice(0, 4)}-${night.slice(4, 6)}-${night.slice(6, 8)}T20:00:00.000Z`;
  return JSON.stringify({ seq, ts, type: "weather", data: { seq }, meta: {} });
}

/** Compresses a file the way the lifecycle does: complete `.gz` renamed into place, then removed. */
async function gzipInPlace(path: string): Promise<void> {
  const bytes = await new Response(
    new Blob([await Deno.readFile(path)]).stream().pipeThrough(new CompressionStream("gzip")),
  ).bytes();
  await Deno.writeFile(`${path}.gz.tmp`, bytes);
  await Deno.rename(`${path}.gz.tmp`, `${path}.gz`);
  await Deno.remove(path);
}

Deno.test({
  name: "a night compressed under the cursor and a new night after it are forwarded exactly once",
  ignore: skipPg !== undefined,
  async fn() {
    await using dir = await tempSite();
    await using pg = await PostgresServer.start();
    const first = Array.from({ length: 500 }, (_, i) => line(i + 1, "20261101"));
    await Deno.writeTextFile(`${dir.path}/site_20261101.ndjson`, first.join("\n") + "\n");
    // Stop after the first acknowledged batch: the cursor is in the middle of the night.
    const stop = new AbortController();
    await forward({
      siteDir: dir.path,
      to: pg.url,
      unit: "u1",
      batch: 100,
      signal: stop.signal,
      onSent: () => stop.abort(),
    });
    assert.equal(await countRows(pg), 100);
    await gzipInPlace(`${dir.path}/site_20261101.ndjson`);
    const second = Array.from({ length: 50 }, (_, i) => line(501 + i, "20261102"));
    await Deno.writeTextFile(`${dir.path}/site_20261102.ndjson`, second.join("\n") + "\n");
    const stats = await forwardUntil(
      { siteDir: dir.path, to: pg.url, unit: "u1" },
      async () => (await countRows(pg)) >= 550,
      "550 rows",
    );
    assert.equal(stats.sent, 450, "the rest of the compressed night, then the new one");
    assert.equal(
      await pg.query("select count(distinct seq) || ' ' || max(seq) from telemetry_events"),
      "550 550",
    );
  },
});

Deno.test({
  name: "two units forwarding to one JetStream stream keep their events apart",
  ignore: (skipNats ?? skipPg) !== undefined,
  async fn() {
    await using a = await tempSite();
    await using b = await tempSite();
    await using nats = await NatsServer.start();
    await using pg = await PostgresServer.start();
    await Deno.writeTextFile(
      `${a.path}/site_20261101.ndjson`,
      [1, 2, 3].map((s) => line(s, "20261101")).join("\n") + "\n",
    );
    await Deno.writeTextFile(
      `${b.path}/site_20261101.ndjson`,
      [1, 2].map((s) => line(s, "20261101")).join("\n") + "\n",
    );
    const stop = new AbortController();
    const running = [
      forward({ siteDir: a.path, to: nats.url, unit: "pan001", signal: stop.signal }),
      forward({ siteDir: b.path, to: nats.url, unit: "pan002", signal: stop.signal }),
      archive({ from: nats.url, to: pg.url, signal: stop.signal }),
    ];
    try {
      await waitUntil(async () => (await countRows(pg)) === 5, 20_000, "5 rows");
    } finally {
      stop.abort();
    }
    await Promise.all(running);
    assert.equal(
      await pg.query(
        "select string_agg(unit || ':' || seq, ',' order by unit, seq) from telemetry_events",
      ),
      "pan001:1,pan001:2,pan001:3,pan002:1,pan002:2",
    );
  },
});

Deno.test("the client, event, server and CLI entry points load no npm package (the fleet clients stay in ./forward)", async () => {
  // cli.ts too: the service and every other command must never install the fleet's packages.
  for (const entry of ["client.ts", "event.ts", "cli.ts", "server.ts", "mod.ts"]) {
    const specifiers = await moduleGraph(entry);
    const neutral = entry === "client.ts" || entry === "event.ts";
    const foreign = specifiers.filter((s) =>
      neutral ? !s.startsWith("file:") : s.startsWith("npm:")
    );
    assert.deepEqual(foreign, [], entry);
  }
  const forward = await new Deno.Command(Deno.execPath(), {
    args: ["info", "--json", new URL("../../forward.ts", import.meta.url).pathname],
    stdout: "piped",
  }).output();
  assert.match(new TextDecoder().decode(forward.stdout), /npm:\/?postgres@/);
});

Deno.test({
  name: "deno task forward's permission flags are enough to forward and to stop cleanly on SIGTERM",
  ignore: skipPg !== undefined,
  async fn() {
    await using dir = await tempSite();
    await using pg = await PostgresServer.start();
    await Deno.writeTextFile(`${dir.path}/site_20261101.ndjson`, line(1, "20261101") + "\n");
    const config = JSON.parse(await Deno.readTextFile(new URL("../../deno.json", import.meta.url)));
    const task: string = config.tasks.forward;
    const words = task.replaceAll("./telemetry", dir.path).split(" ");
    assert.deepEqual(words.slice(0, 5), ["nice", "-n", "10", "deno", "run"]);
    const main = words.indexOf("cli/forward_main.ts");
    const child = new Deno.Command(Deno.execPath(), {
      args: [
        ...words.slice(4, main),
        FORWARD_MAIN,
        ...words.slice(main + 1),
        "--to",
        pg.url,
        "--unit",
        "u1",
      ],
      stdout: "piped",
      stderr: "piped",
    }).spawn();
    await waitUntil(async () => (await countRows(pg)) === 1, 20_000, "the row");
    child.kill("SIGTERM");
    const out = await child.output();
    const stderr = new TextDecoder().decode(out.stderr);
    assert.equal(out.code, 0, stderr);
    assert.equal(stderr, "");
    assert.match(
      new TextDecoder().decode(out.stdout),
      /info forwarder stopped after sending 1 event;/,
    );
  },
});

Deno.test("deno task forward and spawnForwarder() grant exactly FORWARD_ENV_VARS", async () => {
  const config = JSON.parse(await Deno.readTextFile(new URL("../../deno.json", import.meta.url)));
  for (const task of ["forward", "compile:forward"]) {
    const list = /--allow-env=(\S+)/.exec(config.tasks[task])?.[1]?.split(",");
    assert.deepEqual(list, FORWARD_ENV_VARS, task);
  }
  const flags = forwarderPermissionFlags({ siteDir: "/srv/t", to: "postgres://u@db:5433/fleet" });
  assert.deepEqual(flags, [
    "--allow-net=db:5433",
    "--allow-read=/srv/t",
    "--allow-write=/srv/t/.forward",
    `--allow-env=${FORWARD_ENV_VARS.join(",")}`,
  ]);
});

Deno.test({
  name: "retention keeps the nights a forwarder has not passed, and it sends them from their .gz",
  ignore: skipPg !== undefined,
  async fn() {
    await using dir = await tempSite();
    await using pg = await PostgresServer.start();
    const nights = ["20261101", "20261102", "20261103", "20261104", "20261105"];
    // Recorded since: a night counts as passed only once later nights hold data (history.md).
    const later = ["20261106", "20261107", "20261108"];
    let seq = 0;
    for (const night of [...nights, ...later]) {
      const lines = Array.from({ length: 100 }, () => line(++seq, night));
      await Deno.writeTextFile(`${dir.path}/site_${night}.ndjson`, lines.join("\n") + "\n");
    }
    // The forwarder stops after its first batch: its cursor is inside the oldest night.
    const first = new AbortController();
    await forward({
      siteDir: dir.path,
      to: pg.url,
      unit: "u1",
      batch: 50,
      signal: first.signal,
      onSent: () => first.abort(),
    });
    {
      // Old nights are compressed and would be deleted, but for the cursor.
      await using server = await testServer({ siteDir: dir.path, compressAfter: 1, retain: 2 });
      await waitUntil(
        () => {
          const names = [...Deno.readDirSync(dir.path)].map((e) => e.name);
          return nights.every((n) =>
            names.includes(`site_${n}.ndjson.gz`) && !names.includes(`site_${n}.ndjson`)
          );
        },
        20_000,
        "the old nights compressed",
      );
      void server;
    }
    const stats = await forwardUntil(
      { siteDir: dir.path, to: pg.url, unit: "u1" },
      async () => (await countRows(pg)) >= 800,
      "800 rows",
      20_000,
    );
    assert.equal(stats.sent, 750);
    assert.equal(
      await pg.query("select count(distinct seq) || ' ' || max(seq) from telemetry_events"),
      "800 800",
    );
    // Passed by the cursor now, the nights past --retain go at the next start.
    await using server = await testServer({ siteDir: dir.path, compressAfter: 1, retain: 2 });
    await waitUntil(
      () => {
        const names = [...Deno.readDirSync(dir.path)].map((e) => e.name);
        return !nights.some((night) => names.some((n) => n.startsWith(`site_${night}`)));
      },
      20_000,
      "the forwarded nights deleted",
    );
    void server;
  },
});

Deno.test({
  name:
    "archive without permission to read PGPASSWORD stops with one line instead of retrying forever",
  ignore: skipNats !== undefined,
  async fn() {
    await using nats = await NatsServer.start();
    const out = await new Deno.Command(Deno.execPath(), {
      args: [
        "run",
        "--no-prompt",
        "--allow-net",
        FORWARD_MAIN,
        "archive",
        "--from",
        nats.url,
        "--to",
        "postgres://fleet@127.0.0.1:1/fleet",
      ],
      stdout: "piped",
      stderr: "piped",
      signal: AbortSignal.timeout(30_000),
    }).output();
    const stderr = new TextDecoder().decode(out.stderr).trim();
    assert.equal(out.code, 1, stderr);
    assert.equal(stderr.split("\n").length, 1, stderr);
    assert.match(stderr, /PGPASSWORD/);
  },
});

Deno.test("deno task archive grants the forwarder's variables, so the PostgreSQL client can read them", async () => {
  const config = JSON.parse(await Deno.readTextFile(new URL("../../deno.json", import.meta.url)));
  const list = /--allow-env=(\S+)/.exec(config.tasks.archive)?.[1]?.split(",");
  assert.deepEqual(list, FORWARD_ENV_VARS);
  assert.match(config.tasks.archive, / cli\/forward_main\.ts archive$/);
});
