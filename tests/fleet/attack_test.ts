/**
 * The forwarder and the archiver against a clumsy operator and a hostile site directory, with a
 * real PostgreSQL and a real `nats-server -js` on loopback: damaged lines and cursors, reused run
 * ids, a table of another shape, passwords in URLs, two forwarders on one cursor, a line too big
 * for NATS. Each test is bounded (seconds) and seeded where it draws anything.
 * @module
 */

import assert from "node:assert/strict";
import { archive } from "../../fleet/archive.ts";
import { forward, forwarderPermissionFlags } from "../../forward.ts";
import { freePort, postJson, tempDir, testServer } from "../_shared/util.ts";
import { runLogLine } from "../../store/run_log.ts";
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
if (skipPg ?? skipNats) console.log(`skipping fleet attack tests: ${skipPg ?? skipNats}`);

/** A stored line as the service writes it (canonical key order). */
function line(seq: number, data: unknown = { seq }): string {
  const ts = new Date(Date.UTC(2026, 10, 1, 20, 0, 0, seq)).toISOString();
  return JSON.stringify({ seq, ts, type: "weather", data, meta: {} });
}

/** A log sink that keeps every line. */
function capture(): { lines: string[]; log: (level: string, message: string) => void } {
  const lines: string[] = [];
  return { lines, log: (level, message) => lines.push(`${level} ${message}`) };
}

Deno.test({
  name: "a line damaged by hand in the middle of a night is skipped with a warning " +
    "and the lines after it still reach PostgreSQL",
  ignore: skipPg !== undefined,
  async fn() {
    await using dir = await tempSite();
    await using pg = await PostgresServer.start();
    const lines = [
      line(1),
      line(2),
      // The canonical head (seq, ts, type) is intact, the rest is not JSON.
      line(3).replace('"data":{', '"data":{oops'),
      // Valid JSON, but its ts is no time PostgreSQL (or anyone) can read.
      line(4).replace(/"ts":"[^"]+"/, '"ts":"2026-13-45T99:99:99.999Z"'),
      line(5),
    ];
    await Deno.writeTextFile(`${dir.path}/site_20261101.ndjson`, lines.join("\n") + "\n");
    const { lines: logs, log } = capture();
    const stats = await forwardUntil(
      { siteDir: dir.path, to: pg.url, unit: "u1", log },
      async () => (await countRows(pg)) === 3,
      "3 rows",
    );
    assert.equal(
      await pg.query("select string_agg(seq::text, ',' order by seq) from telemetry_events"),
      "1,2,5",
    );
    assert.equal(stats.skipped, 2);
    assert.equal(
      logs.filter((l) => l.startsWith("warn skipping a line")).length,
      2,
      logs.join("\n"),
    );
    assert.ok(!logs.some((l) => l.includes("unavailable")), logs.join("\n"));
  },
});

Deno.test({
  name:
    "a run stopped and started again with the same id is forwarded again by a running forwarder",
  ignore: skipPg !== undefined,
  async fn() {
    await using dir = await tempSite();
    await using pg = await PostgresServer.start();
    await using server = await testServer({ siteDir: dir.path });
    const post = (n: number) => postEvents(server.url, "status", 0, n);
    assert.equal((await postJson(`${server.url}/run/start`, { run_id: "night-1" })).status, 201);
    await post(2);
    assert.equal((await postJson(`${server.url}/run/stop`, {})).status, 200);
    await using _forwarding = startForwarding({
      siteDir: dir.path,
      to: pg.url,
      unit: "u1",
      pollMs: 20,
    });
    await waitUntil(async () => (await countRows(pg, "stream = 'run'")) === 2, 10_000, "the run");
    // Let the forwarder see the run as stopped and read to its end.
    await new Promise((r) => setTimeout(r, 300));
    assert.equal((await postJson(`${server.url}/run/start`, { run_id: "night-1" })).status, 201);
    await post(3);
    assert.equal((await postJson(`${server.url}/run/stop`, {})).status, 200);
    await waitUntil(
      async () => (await countRows(pg, "stream = 'run'")) === 5,
      10_000,
      "the run again",
    );
  },
});

Deno.test({
  name: "a run whose id is also a property of every JavaScript object (constructor) is forwarded",
  ignore: skipPg !== undefined,
  async fn() {
    await using dir = await tempSite();
    await using pg = await PostgresServer.start();
    for (const runId of ["constructor", "toString"]) {
      await Deno.mkdir(`${dir.path}/${runId}`);
      await Deno.writeTextFile(`${dir.path}/${runId}/telemetry.ndjson`, `${line(1)}\n${line(2)}\n`);
    }
    await forwardUntil(
      { siteDir: dir.path, to: pg.url, unit: "u1" },
      async () => (await countRows(pg)) === 4,
      "4 rows",
    );
    // And a restart reads the cursor of those runs back: nothing is sent again.
    const again = new AbortController();
    const timer = setTimeout(() => again.abort(), 1000);
    const stats = await forward({ siteDir: dir.path, to: pg.url, unit: "u1", signal: again.signal })
      .finally(() => clearTimeout(timer));
    assert.equal(stats.sent, 0);
  },
});

Deno.test({
  name:
    "a damaged cursor file is set aside with a warning and forwarding starts again from the start",
  ignore: skipPg !== undefined,
  async fn() {
    await using dir = await tempSite();
    await using pg = await PostgresServer.start();
    await Deno.writeTextFile(
      `${dir.path}/site_20261101.ndjson`,
      [1, 2, 3].map((s) => line(s)).join("\n") + "\n",
    );
    await Deno.mkdir(`${dir.path}/.forward`);
    // Cut short, as a full disk or a hand edit leaves it.
    await Deno.writeTextFile(`${dir.path}/.forward/postgres.json`, '{"version":1,"site":{"fi');
    const { lines: logs, log } = capture();
    await forwardUntil(
      { siteDir: dir.path, to: pg.url, unit: "u1", log },
      async () => (await countRows(pg)) === 3,
      "3 rows",
    );
    const warning = logs.find((l) => l.startsWith("warn") && l.includes("postgres.json"));
    assert.ok(warning, logs.join("\n"));
    assert.match(warning, /from the start/);
    const names = [...Deno.readDirSync(`${dir.path}/.forward`)].map((e) => e.name).sort();
    assert.ok(names.includes("postgres.json"), names.join(" "));
    assert.ok(names.some((n) => n.startsWith("postgres.json.damaged")), names.join(" "));
    const cursor = JSON.parse(await Deno.readTextFile(`${dir.path}/.forward/postgres.json`));
    assert.equal(cursor.site.seq, 3);
  },
});

Deno.test({
  name: "a second forwarder with the same name on one site directory refuses to start, saying why",
  ignore: skipPg !== undefined,
  async fn() {
    await using dir = await tempSite();
    await using pg = await PostgresServer.start();
    await Deno.writeTextFile(`${dir.path}/site_20261101.ndjson`, line(1) + "\n");
    const stop = new AbortController();
    const first = forward({ siteDir: dir.path, to: pg.url, unit: "u1", signal: stop.signal });
    try {
      await waitUntil(async () => (await countRows(pg)) === 1, 10_000, "the row");
      await assert.rejects(
        forward({ siteDir: dir.path, to: pg.url, unit: "u1", signal: stop.signal }),
        /another forwarder named "postgres" is running on this site directory/,
      );
      // Another name is another cursor: it may run beside it.
      const other = new AbortController();
      const second = forward({
        siteDir: dir.path,
        to: pg.url,
        unit: "u1",
        name: "pg2",
        signal: other.signal,
      });
      await waitUntil(
        () => Deno.lstat(`${dir.path}/.forward/pg2.json`).then(() => true, () => false),
        10_000,
        "pg2's cursor",
      );
      other.abort();
      await second;
    } finally {
      stop.abort();
      await first;
    }
    // Once the first has stopped, the name is free again.
    const again = new AbortController();
    const third = forward({ siteDir: dir.path, to: pg.url, unit: "u1", signal: again.signal });
    await new Promise((r) => setTimeout(r, 200));
    again.abort();
    await third;
  },
});

Deno.test({
  name: "the archiver never prints the password of its --from or --to URL",
  ignore: (skipNats ?? skipPg) !== undefined,
  async fn() {
    await using nats = await NatsServer.start();
    const port = nats.port;
    await nats.kill(); // down: the archiver logs that it is unavailable
    const { lines: logs, log } = capture();
    const stop = new AbortController();
    const running = archive({
      from: `nats://fleet:s3cret-nats@127.0.0.1:${port}`,
      to: "postgres://fleet:s3cret-pg@127.0.0.1:1/fleet",
      log,
      signal: stop.signal,
    });
    try {
      await waitUntil(() => logs.length > 0, 10_000, "a log line");
    } finally {
      stop.abort();
      await running;
    }
    assert.ok(!logs.join("\n").includes("s3cret"), logs.join("\n"));
  },
});

Deno.test({
  name: "a stored line larger than the NATS server's max_payload is skipped with a warning " +
    "and the lines after it are forwarded",
  ignore: (skipNats ?? skipPg) !== undefined,
  async fn() {
    await using dir = await tempSite();
    await using nats = await NatsServer.start();
    await using pg = await PostgresServer.start();
    const big = line(2, { blob: "x".repeat(5 * 1024 * 1024) });
    await Deno.writeTextFile(
      `${dir.path}/site_20261101.ndjson`,
      [line(1), big, line(3)].join("\n") + "\n",
    );
    const { lines: logs, log } = capture();
    const stop = new AbortController();
    const fwd = forward({ siteDir: dir.path, to: nats.url, unit: "u1", log, signal: stop.signal });
    const arc = archive({ from: nats.url, to: pg.url, signal: stop.signal });
    try {
      await waitUntil(async () => (await countRows(pg)) === 2, 15_000, "2 rows");
    } finally {
      stop.abort();
    }
    const [stats] = await Promise.all([fwd, arc]);
    assert.equal(
      await pg.query("select string_agg(seq::text, ',' order by seq) from telemetry_events"),
      "1,3",
    );
    assert.equal(stats.skipped, 1);
    assert.ok(logs.some((l) => /^warn .*max_payload/.test(l)), logs.join("\n"));
  },
});

Deno.test({
  name: "a telemetry_events table of another shape stops the forwarder with an error naming the " +
    "table and what is missing, without the password",
  ignore: skipPg !== undefined,
  async fn() {
    await using dir = await tempSite();
    await using pg = await PostgresServer.start();
    await pg.query("create table telemetry_events (unit text, seq integer, payload text)");
    await Deno.writeTextFile(`${dir.path}/site_20261101.ndjson`, line(1) + "\n");
    const url = pg.url.replace("postgres@", "postgres:s3cret@");
    const { lines: logs, log } = capture();
    const stop = new AbortController();
    const timer = setTimeout(() => stop.abort(), 8000);
    try {
      const error = await forward({
        siteDir: dir.path,
        to: url,
        unit: "u1",
        log,
        signal: stop.signal,
      })
        .then(() => undefined, (err) => err as Error);
      assert.ok(error, `the forwarder kept retrying: ${logs.join("\n")}`);
      assert.match(error.message, /telemetry_events/);
      assert.match(error.message, /stream, run_id, ts, type, data, meta/);
      assert.ok(!error.message.includes("s3cret"));
      assert.ok(!logs.join("\n").includes("s3cret"));
    } finally {
      clearTimeout(timer);
    }
  },
});

/** Runs `forward` as its own process, as `spawnForwarder()` does, with piped output. */
function spawnForward(args: string[], flags: string[] = ["--allow-all"]): Deno.ChildProcess {
  return new Deno.Command(Deno.execPath(), {
    args: ["run", "--no-prompt", ...flags, FORWARD_MAIN, "forward", ...args],
    stdout: "piped",
    stderr: "piped",
  }).spawn();
}

async function cursorSeq(siteDir: string, name: string): Promise<number | undefined> {
  try {
    return JSON.parse(await Deno.readTextFile(`${siteDir}/.forward/${name}.json`)).site?.seq;
  } catch {
    return undefined;
  }
}

Deno.test({
  name: "a nats:// URL with user and password authenticates, and the password is never printed",
  ignore: skipNats !== undefined,
  async fn() {
    await using dir = await tempSite();
    await using store = await tempDir();
    const port = freePort();
    const server = new Deno.Command("nats-server", {
      args: [
        "-js",
        "-a",
        "127.0.0.1",
        "-p",
        String(port),
        "-sd",
        store.path,
        "--user",
        "fleet",
        "--pass",
        "s3cret",
      ],
      stdout: "null",
      stderr: "null",
    }).spawn();
    try {
      await Deno.writeTextFile(
        `${dir.path}/site_20261101.ndjson`,
        [1, 2].map((s) => line(s)).join("\n") + "\n",
      );
      const child = spawnForward([
        "--site-dir",
        dir.path,
        "--to",
        `nats://fleet:s3cret@127.0.0.1:${port}`,
        "--unit",
        "u1",
      ]);
      await waitUntil(
        async () => (await cursorSeq(dir.path, "nats")) === 2,
        15_000,
        "the cursor at 2",
      );
      child.kill("SIGTERM");
      const out = await child.output();
      const text = new TextDecoder().decode(out.stdout) + new TextDecoder().decode(out.stderr);
      assert.equal(out.code, 0, text);
      assert.ok(!text.includes("s3cret"), text);
      assert.match(text, /nats:\/\/fleet:\*\*\*@127\.0\.0\.1/);
    } finally {
      server.kill("SIGKILL");
      await server.status;
    }
  },
});

for (const kind of ["nats", "postgres"] as const) {
  Deno.test({
    name: `SIGTERM while the ${kind} destination is down ends the forwarder promptly with exit 0 ` +
      "and the cursor where the destination left it",
    ignore: (kind === "nats" ? skipNats : skipPg) !== undefined,
    async fn() {
      await using dir = await tempSite();
      await using nats = await NatsServer.start();
      await using pg = await PostgresServer.start();
      await Deno.writeTextFile(
        `${dir.path}/site_20261101.ndjson`,
        [1, 2, 3].map((s) => line(s)).join("\n") + "\n",
      );
      const child = spawnForward([
        "--site-dir",
        dir.path,
        "--to",
        kind === "nats" ? nats.url : pg.url,
        "--unit",
        "u1",
      ]);
      await waitUntil(
        async () => (await cursorSeq(dir.path, kind)) === 3,
        15_000,
        "the cursor at 3",
      );
      if (kind === "nats") await nats.kill();
      else await pg.stop("immediate");
      // A long catch-up waits: the forwarder is sending into a dead destination or backing off.
      const more = Array.from({ length: 5000 }, (_, i) => line(4 + i));
      await Deno.writeTextFile(`${dir.path}/site_20261101.ndjson`, more.join("\n") + "\n", {
        append: true,
      });
      await new Promise((r) => setTimeout(r, 1500));
      const t0 = Date.now();
      child.kill("SIGTERM");
      const out = await child.output();
      const took = Date.now() - t0;
      const text = new TextDecoder().decode(out.stdout) + new TextDecoder().decode(out.stderr);
      assert.equal(out.code, 0, text);
      // Well under the 30 s back-off cap it would wait out if the stop waited for the destination.
      assert.ok(took < 12_000, `took ${took} ms to stop:\n${text}`);
      assert.equal(await cursorSeq(dir.path, kind), 3);
      assert.match(text, /forwarder stopped after sending 3 events; cursor saved/);
    },
  });
}

Deno.test({
  name: "a run log naming a directory the forwarder may not read, or a run id that is no run id, " +
    "skips that run with a warning and forwards everything else",
  ignore: skipPg !== undefined,
  async fn() {
    await using dir = await tempSite();
    await using outside = await tempDir();
    await using pg = await PostgresServer.start();
    await Deno.writeTextFile(`${outside.path}/telemetry.ndjson`, line(1) + "\n");
    await Deno.mkdir(`${dir.path}/good`);
    await Deno.writeTextFile(`${dir.path}/good/telemetry.ndjson`, line(1) + "\n");
    await Deno.writeTextFile(
      `${dir.path}/site_20261101.ndjson`,
      [1, 2].map((s) => line(s)).join("\n") + "\n",
    );
    const record = (runId: string, runDir: string) =>
      JSON.stringify({
        run_id: runId,
        run_dir: runDir,
        started_at: "2026-11-01T20:00:00.000Z",
        stopped_at: "2026-11-01T21:00:00.000Z",
        events: 1,
        meta: {},
      }) + "\n";
    await Deno.writeTextFile(
      `${dir.path}/runs.ndjson`,
      record("elsewhere", outside.path) + record("bad\r\nNats-Msg-Id: x", `${dir.path}/good`) +
        record("good", `${dir.path}/good`),
    );
    const child = spawnForward(
      ["--site-dir", dir.path, "--to", pg.url, "--unit", "u1"],
      forwarderPermissionFlags({ siteDir: dir.path, to: pg.url }),
    );
    try {
      await waitUntil(
        async () => (await countRows(pg)) === 3,
        15_000,
        "the site's 2 rows and run good's",
      );
    } finally {
      child.kill("SIGTERM");
    }
    const out = await child.output();
    const stderr = new TextDecoder().decode(out.stderr);
    assert.equal(out.code, 0, stderr);
    assert.equal(
      await pg.query(
        "select string_agg(stream || ':' || run_id || ':' || seq, ',' order by stream, run_id, seq) from telemetry_events",
      ),
      "run:good:1,site::1,site::2",
    );
    assert.match(stderr, /warn not forwarding run "elsewhere": cannot read its directory/);
    assert.match(stderr, /warn not forwarding run "bad\\r\\nNats-Msg-Id: x": .* no run id/);
    assert.equal(
      stderr.trim().split("\n").filter((l) => l.includes("elsewhere")).length,
      1,
      "one warning, not one per pass",
    );
  },
});

Deno.test({
  name:
    "a site file truncated under the cursor (a restored backup) is forwarded again from its start",
  ignore: skipPg !== undefined,
  async fn() {
    await using dir = await tempSite();
    await using pg = await PostgresServer.start();
    const path = `${dir.path}/site_20261101.ndjson`;
    await Deno.writeTextFile(path, [1, 2, 3, 4].map((s) => line(s)).join("\n") + "\n");
    const { lines: logs, log } = capture();
    await using forwarding = startForwarding({
      siteDir: dir.path,
      to: pg.url,
      unit: "u1",
      pollMs: 20,
      log,
    });
    await waitUntil(async () => (await countRows(pg)) === 4, 10_000, "4 rows");
    // Replaced by a shorter file with other lines (seq 1..2 again, then new ones).
    await Deno.writeTextFile(path, [1, 2].map((s) => line(s)).join("\n") + "\n");
    await Deno.writeTextFile(path, line(5, { x: "a much longer line than before" }) + "\n", {
      append: true,
    });
    await waitUntil(async () => (await countRows(pg)) === 5, 10_000, "5 rows");
    await forwarding.stop();
    assert.ok(logs.some((l) => /^warn .*truncated or replaced/.test(l)), logs.join("\n"));
  },
});

Deno.test({
  name: "an event whose data holds a lone UTF-16 surrogate (accepted by the service) reaches " +
    "PostgreSQL as U+FFFD directly and through JetStream, and the events after it too",
  ignore: (skipNats ?? skipPg) !== undefined,
  async fn() {
    await using dir = await tempSite();
    await using nats = await NatsServer.start();
    await using pg = await PostgresServer.start();
    await using server = await testServer({ siteDir: dir.path });
    const body = [
      '{"type":"x","data":{"s":"a\\ud800b","k\\udc00":1}}',
      '{"type":"x","data":{"i":2}}',
    ];
    for (const b of body) {
      const r = await fetch(`${server.url}/event`, {
        method: "POST",
        headers: { "content-type": "application/json" },
        body: b,
      });
      assert.equal(r.status, 200, await r.text());
    }
    const stop = new AbortController();
    const running = [
      forward({ siteDir: dir.path, to: pg.url, unit: "direct", signal: stop.signal }),
      forward({ siteDir: dir.path, to: nats.url, unit: "viajs", signal: stop.signal }),
      archive({ from: nats.url, to: pg.url, signal: stop.signal }),
    ];
    try {
      await waitUntil(async () => (await countRows(pg)) === 4, 15_000, "4 rows");
    } finally {
      stop.abort();
      await Promise.all(running);
    }
    assert.equal(
      await pg.query(
        "select string_agg(unit || ':' || seq || ':' || (data->>'s'), ',' order by unit) from telemetry_events where seq = 1",
      ),
      "direct:1:a\uFFFDb,viajs:1:a\uFFFDb",
    );
  },
});

Deno.test({
  name: "a night of very large lines is sent in batches of bounded size, not 1000 lines at once",
  ignore: skipPg !== undefined,
  async fn() {
    await using dir = await tempSite();
    await using pg = await PostgresServer.start();
    // 30 lines of 700 KB: 1000 of them would hold 700 MB in memory on a small unit.
    const lines = Array.from({ length: 30 }, (_, i) => line(i + 1, { blob: "y".repeat(700_000) }));
    await Deno.writeTextFile(`${dir.path}/site_20261101.ndjson`, lines.join("\n") + "\n");
    const counts: number[] = [];
    await using forwarding = startForwarding({
      siteDir: dir.path,
      to: pg.url,
      unit: "u1",
      onSent: (b) => counts.push(b.count),
    });
    await waitUntil(() => counts.reduce((a, b) => a + b, 0) === 30, 20_000, "30 lines");
    await forwarding.stop();
    assert.ok(Math.max(...counts) <= 12, `batches of ${counts.join(", ")} lines`);
    assert.equal(await countRows(pg), 30);
  },
});

Deno.test({
  name: "a value PostgreSQL refuses that no check foresaw costs that one event, not its batch " +
    "forever, directly and through the archiver",
  ignore: (skipNats ?? skipPg) !== undefined,
  async fn() {
    await using dir = await tempSite();
    await using nats = await NatsServer.start();
    await using pg = await PostgresServer.start();
    // An ISO time with a zone offset PostgreSQL finds out of range.
    const odd = line(2).replace(/"ts":"([^"]+)Z"/, '"ts":"$1+99:00"');
    await Deno.writeTextFile(
      `${dir.path}/site_20261101.ndjson`,
      [line(1), odd, line(3)].join("\n") + "\n",
    );
    const direct = capture();
    const archived = capture();
    const stop = new AbortController();
    const running = [
      forward({
        siteDir: dir.path,
        to: pg.url,
        unit: "direct",
        log: direct.log,
        signal: stop.signal,
      }),
      forward({ siteDir: dir.path, to: nats.url, unit: "viajs", signal: stop.signal }),
      archive({ from: nats.url, to: pg.url, log: archived.log, signal: stop.signal }),
    ];
    try {
      await waitUntil(async () => (await countRows(pg)) === 4, 15_000, "4 rows");
    } finally {
      stop.abort();
    }
    const [stats, , archiveStats] = await Promise.all(running);
    assert.equal(
      await pg.query(
        "select string_agg(unit || ':' || seq, ',' order by unit, seq) from telemetry_events",
      ),
      "direct:1,direct:3,viajs:1,viajs:3",
    );
    assert.equal((stats as { skipped: number }).skipped, 1);
    assert.equal((archiveStats as { rejected: number }).rejected, 1);
    assert.ok(
      direct.lines.some((l) => /^warn skipping site event 2: PostgreSQL refused it/.test(l)),
      direct.lines.join("\n"),
    );
    assert.ok(
      archived.lines.some((l) => /^warn dropping message .*PostgreSQL refused it/.test(l)),
      archived.lines.join("\n"),
    );
  },
});

Deno.test({
  name: "a site stream that starts over at seq 1 (a site directory replaced) is reported, " +
    "not dropped as repeats in silence",
  ignore: skipPg !== undefined,
  async fn() {
    await using dir = await tempSite();
    await using pg = await PostgresServer.start();
    await Deno.writeTextFile(
      `${dir.path}/site_20261101.ndjson`,
      [1, 2, 3].map((s) => line(s)).join("\n") + "\n",
    );
    const first = new AbortController();
    await forward({
      siteDir: dir.path,
      to: pg.url,
      unit: "u1",
      signal: first.signal,
      onSent: () => first.abort(),
    });
    await Deno.remove(`${dir.path}/site_20261101.ndjson`);
    await Deno.writeTextFile(
      `${dir.path}/site_20261102.ndjson`,
      [1, 2].map((s) => line(s, { fresh: s })).join("\n") + "\n",
    );
    const { lines: logs, log } = capture();
    const stop = new AbortController();
    const running = forward({
      siteDir: dir.path,
      to: pg.url,
      unit: "u1",
      log,
      signal: stop.signal,
      onSent: () => stop.abort(),
    });
    await running;
    const warnings = logs.filter((l) =>
      /^warn the seq of the site stream went back from 3 to 1/.test(l)
    );
    assert.equal(warnings.length, 1, logs.join("\n"));
  },
});

Deno.test({
  name: "a cursor naming a night later than every stored file says that nothing is sent",
  ignore: skipPg !== undefined,
  async fn() {
    await using dir = await tempSite();
    await using pg = await PostgresServer.start();
    await Deno.writeTextFile(
      `${dir.path}/site_20261101.ndjson`,
      [1, 2].map((s) => line(s)).join("\n") + "\n",
    );
    await Deno.mkdir(`${dir.path}/.forward`);
    // Copied from another unit, or the clock once ran years ahead.
    await Deno.writeTextFile(
      `${dir.path}/.forward/postgres.json`,
      JSON.stringify({
        version: 1,
        site: { file: "site_20991231.ndjson", offset: 100, seq: 9 },
        runs: {},
      }),
    );
    const { lines: logs, log } = capture();
    const stop = new AbortController();
    const running = forward({
      siteDir: dir.path,
      to: pg.url,
      unit: "u1",
      pollMs: 20,
      log,
      signal: stop.signal,
    });
    await new Promise((r) => setTimeout(r, 800));
    stop.abort();
    assert.equal((await running).sent, 0);
    const warnings = logs.filter((l) =>
      l.includes("site_20991231.ndjson of the site stream is gone")
    );
    assert.equal(warnings.length, 1, logs.join("\n"));
  },
});

Deno.test("forward with a --to that is not a URL names it without its password", async () => {
  const out = await new Deno.Command(Deno.execPath(), {
    args: [
      "run",
      "--allow-all",
      FORWARD_MAIN,
      "forward",
      "--to",
      "postgres://fleet:s3cret@db:99999/x",
      "--unit",
      "u1",
    ],
    stdout: "piped",
    stderr: "piped",
  }).output();
  const stderr = new TextDecoder().decode(out.stderr);
  assert.equal(out.code, 2, stderr);
  assert.match(stderr, /is not a URL/);
  assert.ok(!stderr.includes("s3cret"), stderr);
});

Deno.test({
  name: "a run id started again in another directory is forwarded from that directory's start, " +
    "and the keys it repeats are reported",
  ignore: skipPg !== undefined,
  async fn() {
    await using dir = await tempSite();
    await using pg = await PostgresServer.start();
    await using server = await testServer({ siteDir: dir.path });
    const post = (n: number) => postEvents(server.url, "status", 0, n);
    assert.equal((await postJson(`${server.url}/run/start`, { run_id: "r1" })).status, 201);
    await post(2);
    assert.equal((await postJson(`${server.url}/run/stop`, {})).status, 200);
    const { lines: logs, log } = capture();
    await using forwarding = startForwarding({
      siteDir: dir.path,
      to: pg.url,
      unit: "u1",
      pollMs: 20,
      log,
    });
    await waitUntil(
      async () => (await countRows(pg, "stream = 'run'")) === 2,
      10_000,
      "the first r1",
    );
    // The service refuses the reuse now (docs/http-api.md); a run log from before the rule
    // can still hold it, so the second run is written as such a service wrote it.
    const r = await postJson(`${server.url}/run/start`, {
      run_id: "r1",
      run_dir: `${dir.path}/other`,
    });
    assert.equal(r.status, 409);
    const site = await Deno.realPath(dir.path);
    const other = `${site}/other`;
    await Deno.mkdir(other);
    const ts = (i: number) => new Date(Date.now() + i).toISOString();
    await Deno.writeTextFile(
      `${other}/telemetry.ndjson`,
      [2, 3, 4].map((i, n) =>
        `{"seq":${n + 1},"ts":"${
          ts(i)
        }","type":"status","data":{"i":${i}},"meta":{"run_id":"r1"}}\n`
      ).join(""), // seq 1, 2, 3 again in the new directory
    );
    const again = {
      run_id: "r1",
      run_dir: other,
      started_at: ts(0),
      stopped_at: null as string | null,
      events: 0,
      meta: {},
    };
    await Deno.writeTextFile(`${site}/runs.ndjson`, runLogLine(again), { append: true });
    await Deno.writeTextFile(
      `${site}/runs.ndjson`,
      runLogLine({ ...again, stopped_at: ts(10), events: 3 }),
      { append: true },
    );
    await waitUntil(
      async () => (await countRows(pg, "stream = 'run'")) === 3,
      10_000,
      "seq 3 of the new r1",
    ).catch(async (e) => {
      throw new Error(
        `${e.message}: ${await pg.query(
          "select run_id || ':' || seq || ':' || (data->>'i') from telemetry_events where stream = 'run'",
        )}\n${logs.join("\n")}`,
      );
    });
    await forwarding.stop();
    assert.ok(logs.some((l) => /^warn run r1 is now stored in .*other/.test(l)), logs.join("\n"));
    assert.ok(
      logs.some((l) => /^warn the seq of run r1 went back from 2 to 1/.test(l)),
      logs.join("\n"),
    );
  },
});
