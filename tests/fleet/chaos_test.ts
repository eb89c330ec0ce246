/**
 * Exactly once, proven (issue 18): events are posted to a real service while two forwarders (one
 * straight to PostgreSQL, one to NATS JetStream with an archiver behind it) run as their own
 * processes. At seeded random moments the service, either forwarder or the NATS server is killed
 * with SIGKILL and restarted; then PostgreSQL is stopped for a while and brought back. At the end
 * every stored event is in both PostgreSQL databases exactly once, by key and by content, and
 * JetStream holds each once. Replay a failure with `FAULT_SEED=<seed>`.
 * @module
 */

import assert from "node:assert/strict";
import { archive } from "../../fleet/archive.ts";
import { type SpawnedForwarder, spawnForwarder } from "../../forward.ts";
import {
  type ChildServer,
  readAllStreams,
  Rng,
  seedFromEnv,
  spawnCliServer,
} from "../_shared/fault_util.ts";
import { freePort, tempDir } from "../_shared/util.ts";
import { natsMissing, NatsServer, postgresMissing, PostgresServer } from "../_shared/fleet_util.ts";

const skip = natsMissing() ?? postgresMissing();
// deno-lint-ignore no-console
if (skip) console.log(`skipping the exactly-once fleet test: ${skip}`);

const SEED = seedFromEnv(0x5eed18);
const ROUNDS = 8;
const sleep = (ms: number) => new Promise((r) => setTimeout(r, ms));

interface Row {
  s: string;
  r: string;
  q: number;
  ts: string;
  t: string;
  d: unknown;
  m: unknown;
}

async function rowsOf(pg: PostgresServer, db: string): Promise<Row[]> {
  const out = await new Deno.Command("psql", {
    args: [
      "-h",
      "127.0.0.1",
      "-p",
      String(pg.port),
      "-U",
      "postgres",
      "-d",
      db,
      "-At",
      "-c",
      `select json_build_object('s', stream, 'r', run_id, 'q', seq,
         'ts', to_char(ts at time zone 'UTC', 'YYYY-MM-DD"T"HH24:MI:SS.MS"Z"'),
         't', type, 'd', data, 'm', meta) from telemetry_events where unit = 'u1'`,
    ],
    stdout: "piped",
    stderr: "piped",
  }).output();
  if (!out.success) return [];
  const text = new TextDecoder().decode(out.stdout).trim();
  return text === "" ? [] : text.split("\n").map((l) => JSON.parse(l));
}

/** Every stored event of the site directory, keyed `stream/run_id/seq`. */
async function storedEvents(siteDir: string): Promise<Map<string, Row>> {
  const out = new Map<string, Row>();
  for (const [file, lines] of await readAllStreams(siteDir)) {
    const run = !/^site_\d{8}\.ndjson$/.test(file);
    for (const l of lines) {
      const runId = run ? String(l.meta.run_id) : "";
      out.set(`${run ? "run" : "site"}/${runId}/${l.seq}`, {
        s: run ? "run" : "site",
        r: runId,
        q: l.seq,
        ts: l.ts,
        t: l.type,
        d: l.data,
        m: l.meta,
      });
    }
  }
  return out;
}

Deno.test({
  name: "every stored event reaches PostgreSQL exactly once, directly and through JetStream, " +
    "whatever is killed when",
  ignore: skip !== undefined,
  sanitizeResources: false,
  sanitizeOps: false,
  async fn() {
    const rng = new Rng(SEED);
    await using dir = await tempDir();
    await using nats = await NatsServer.start();
    await using pg = await PostgresServer.start();
    await pg.query("create database archive");
    const direct = pg.url;
    const viaNats = pg.url.replace(/\/postgres$/, "/archive");
    const port = freePort();
    let service: ChildServer = await spawnCliServer({ siteDir: dir.path, port });
    const forwarders: Record<"pg" | "nats", SpawnedForwarder> = {
      pg: spawnForwarder({ siteDir: dir.path, to: direct, unit: "u1", batch: 50, output: "null" }),
      nats: spawnForwarder({
        siteDir: dir.path,
        to: nats.url,
        unit: "u1",
        batch: 50,
        output: "null",
      }),
    };
    const stopArchive = new AbortController();
    const archiver = archive({ from: nats.url, to: viaNats, signal: stopArchive.signal });

    // Posts events all along; posts that fail while the service is down are simply not stored.
    let writing = true;
    let acknowledged = 0;
    const writer = (async () => {
      for (let i = 0; writing; i++) {
        try {
          const res = await fetch(`${service.url}/event`, {
            method: "POST",
            headers: { "content-type": "application/json" },
            body: JSON.stringify({
              type: ["weather", "power", "status"][i % 3],
              data: { i, v: i / 7 },
            }),
          });
          await res.body?.cancel();
          if (res.status === 200) acknowledged++;
        } catch {
          await sleep(20);
        }
        if (i % 4 === 0) await sleep(1);
      }
    })();

    try {
      const victims = ["service", "forward-pg", "forward-nats", "nats"] as const;
      for (let round = 0; round < ROUNDS; round++) {
        await sleep(rng.int(100, 500));
        if (round === 2) {
          await fetch(`${service.url}/run/start`, {
            method: "POST",
            headers: { "content-type": "application/json" },
            body: JSON.stringify({ run_id: "night-1" }),
          }).then((r) => r.body?.cancel()).catch(() => {});
        }
        if (round === 5) {
          await fetch(`${service.url}/run/stop`, { method: "POST" })
            .then((r) => r.body?.cancel()).catch(() => {});
        }
        const victim = rng.pick(victims);
        if (victim === "service") {
          await service.kill("SIGKILL");
          await sleep(rng.int(20, 300));
          service = await spawnCliServer({ siteDir: dir.path, port });
        } else if (victim === "nats") {
          await nats.kill("SIGKILL");
          await sleep(rng.int(20, 300));
          await nats.restart();
        } else {
          const key = victim === "forward-pg" ? "pg" : "nats";
          forwarders[key].process.kill("SIGKILL");
          await forwarders[key].process.status;
          await sleep(rng.int(20, 300));
          forwarders[key] = spawnForwarder({
            siteDir: dir.path,
            to: key === "pg" ? direct : nats.url,
            unit: "u1",
            batch: rng.int(1, 200),
            output: "null",
          });
        }
      }
      // The fleet store goes away for a while, and comes back.
      await pg.stop("immediate");
      await sleep(rng.int(500, 1500));
      await pg.restart();
      await sleep(300);
    } finally {
      writing = false;
      await writer;
    }

    const stored = await storedEvents(dir.path);
    assert.ok(stored.size >= acknowledged, `${stored.size} stored < ${acknowledged} acknowledged`);
    assert.ok(stored.size > 100, `only ${stored.size} events stored`);
    // Catching up after the last kill can take a capped back-off (30 s) and then the backlog, on a
    // machine that may be busy: the bound is generous, the loop ends as soon as all have arrived.
    const deadline = Date.now() + 150_000;
    let rows: [Row[], Row[]] = [[], []];
    while (Date.now() < deadline) {
      rows = [await rowsOf(pg, "postgres"), await rowsOf(pg, "archive")];
      if (rows[0].length >= stored.size && rows[1].length >= stored.size) break;
      await sleep(250);
    }
    stopArchive.abort();
    await archiver;
    await forwarders.pg.stop();
    await forwarders.nats.stop();
    await service.kill("SIGTERM");

    for (const [path, got] of [["direct", rows[0]], ["JetStream + archive", rows[1]]] as const) {
      const byKey = new Map(got.map((r) => [`${r.s}/${r.r}/${r.q}`, r]));
      assert.equal(byKey.size, got.length, `${path}: a key stored twice (seed ${SEED})`);
      assert.equal(
        got.length,
        stored.size,
        `${path}: ${got.length} rows for ${stored.size} stored events (seed ${SEED})`,
      );
      for (const [key, want] of stored) {
        assert.deepEqual(byKey.get(key), want, `${path}: ${key} differs (seed ${SEED})`);
      }
    }
    assert.ok(
      [...stored.keys()].some((k) => k.startsWith("run/night-1/")),
      "the run was forwarded",
    );
  },
});
