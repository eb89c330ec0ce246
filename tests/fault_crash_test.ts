/**
 * Crashes and restarts (issue 6, docs/storage.md): `cli.ts telemetry run` as a child process
 * under the scoped permissions of docs/cli.md, killed with SIGKILL under load or stopped with
 * SIGTERM mid-run, and restarted on the same site directory.
 *
 * A SIGKILL does not lose what the process already handed to the kernel: `write()` returned, so
 * the bytes sit in the page cache and reach the disk whatever the process does next. So with
 * `--fsync never` or `interval` every acknowledged event must survive a kill -9 (the service
 * answers only after the write). Only a power cut can lose page-cache data, and that is what
 * `--fsync always` is for: one round runs with it to show it behaves the same under load. A power
 * cut can also leave a torn last line; the rounds simulate that by appending half a line to the
 * files the next start will reopen, which must end up in `<file>.torn` and nowhere else.
 *
 * Replay a failing run with `FAULT_SEED=<seed> deno test -A tests/fault_crash_test.ts`.
 * @module
 */

import assert from "node:assert/strict";
import { join } from "node:path";
import {
  type ChildServer,
  freePort,
  isSiteFile,
  readAllStreams,
  Rng,
  seedFromEnv,
  send,
  spawnCliServer,
  type StoredLine,
} from "./_shared/fault_util.ts";
import { tempDir } from "./_shared/util.ts";

const SEED = seedFromEnv(0x5eed_0006);
const SITE_TYPES = new Set(["weather", "environment"]); // the default --site-types
const JSON_HEADERS = { "content-type": "application/json" };

function delay(ms: number): Promise<void> {
  return new Promise((resolve) => setTimeout(resolve, ms));
}

/** What the service answered for one event: the envelope line it says it wrote. */
interface Ack {
  line: string;
  type: string;
  runId: string | undefined;
}

/** Every event the writers sent, and the ones the service acknowledged with 200. */
class Ledger {
  readonly attempted = new Set<string>();
  readonly acked = new Map<string, Ack>();
  /** Answers that are neither 200 nor a dropped connection of the kill: always a failure. */
  readonly unexpected: string[] = [];

  ackLine(line: string): void {
    const env = JSON.parse(line);
    const id = env.data.id as string;
    assert.ok(!this.acked.has(id), `event ${id} was acknowledged twice`);
    this.acked.set(id, { line, type: env.type, runId: env.meta.run_id });
  }
}

/**
 * One writer: single `POST /event`s and small `POST /events` batches (JSON array or NDJSON) with
 * a unique `data.id` each, until the server dies or the bounds are hit.
 */
async function writer(
  url: string,
  client: Deno.HttpClient,
  name: string,
  rng: Rng,
  ledger: Ledger,
  isDead: () => boolean,
): Promise<void> {
  const deadline = Date.now() + 10_000;
  for (let k = 0; k < 500 && !isDead() && Date.now() < deadline; k++) {
    const n = rng.chance(0.5) ? 1 : rng.int(2, 5);
    const items = Array.from({ length: n }, (_, j) => {
      const id = `${name}-${k}-${j}`;
      ledger.attempted.add(id);
      return { type: rng.pick(["status", "sensor", "weather"]), data: { id, v: rng.int(0, 999) } };
    });
    const form = n === 1 ? rng.pick(["event", "array", "ndjson"]) : rng.pick(["array", "ndjson"]);
    let res;
    try {
      res = await send(`${url}/${form === "event" ? "event" : "events"}`, {
        method: "POST",
        client,
        headers: {
          "content-type": form === "ndjson" ? "application/x-ndjson" : "application/json",
        },
        body: form === "event"
          ? JSON.stringify(items[0])
          : form === "array"
          ? JSON.stringify(items)
          : items.map((i) => JSON.stringify(i)).join("\n"),
      });
    } catch (err) {
      if (!(err instanceof TypeError)) throw err; // fetch reports a lost connection as TypeError
      if (isDead()) return;
      ledger.unexpected.push(`${name}-${k}: connection failed while the server was up: ${err}`);
      return;
    }
    if (res.status !== 200) {
      ledger.unexpected.push(`${name}-${k}: ${res.status} ${res.text}`);
      continue;
    }
    if (form === "event") ledger.ackLine(res.text);
    else for (const e of JSON.parse(res.text).events) ledger.ackLine(JSON.stringify(e));
  }
}

/** Starts and stops runs with fresh ids at random moments, until the server dies. */
async function runController(
  url: string,
  client: Deno.HttpClient,
  round: number,
  rng: Rng,
  ledger: Ledger,
  isDead: () => boolean,
): Promise<void> {
  try {
    const current = await send(`${url}/run`, { client });
    let active = current.status === 200;
    for (let k = 0; k < 50 && !isDead(); k++) {
      await delay(rng.int(20, 120));
      if (isDead()) return;
      const res = active
        ? await send(`${url}/run/stop`, { method: "POST", client })
        : await send(`${url}/run/start`, {
          method: "POST",
          client,
          headers: JSON_HEADERS,
          body: JSON.stringify({ run_id: `run-${round}-${k}` }),
        });
      const expected = active ? 200 : 201;
      if (res.status !== expected) ledger.unexpected.push(`run control: ${res.status} ${res.text}`);
      active = !active;
    }
  } catch (err) {
    if (!(err instanceof TypeError) || !isDead()) throw err;
  }
}

/**
 * Waits until the ledger holds `count` acknowledged events, or every writer has ended. The kill
 * then comes at a random moment after that: on a machine busy with other work (another suite
 * beside this one) the first answers may come later than any fixed delay.
 */
async function untilAcked(ledger: Ledger, count: number, work: Promise<unknown>[]): Promise<void> {
  let ended = false;
  void Promise.allSettled(work).then(() => (ended = true));
  while (ledger.acked.size < count && !ended) await delay(10);
}

/** Simulates a torn last line (a power cut mid-write): half an envelope without `\n`. */
async function tearFile(path: string, marker: string): Promise<string> {
  const torn =
    `{"seq":999999,"ts":"2026-11-22T03:00:00.000Z","type":"status","data":{"torn":"${marker}`;
  await Deno.writeTextFile(path, torn, { append: true });
  return torn;
}

async function newestSiteFile(siteDir: string): Promise<string | undefined> {
  const names: string[] = [];
  for await (const e of Deno.readDir(siteDir)) if (isSiteFile(e.name)) names.push(e.name);
  return names.sort().at(-1);
}

Deno.test("the service keeps every acknowledged event across repeated kill -9", async () => {
  await using tmp = await tempDir();
  const siteDir = join(tmp.path, "site");
  const port = freePort();
  const rng = new Rng(SEED);
  const ledger = new Ledger();
  const tornExpected = new Map<string, string>(); // file relative to siteDir -> injected bytes
  const rounds = 5;
  // Each round is killed only after this many more acknowledgements, so all of them make > 100.
  const ackedPerRound = 25;

  for (let round = 0; round < rounds; round++) {
    // Round 0 fsyncs before every answer; the others rely on the page cache (see module doc).
    const fsync = round === 0 ? "always" : rng.pick(["never", "interval"]);
    const server = await spawnCliServer({ siteDir, port, args: ["--fsync", fsync] });
    const client = Deno.createHttpClient({});
    let dead = false;
    try {
      const work = [
        ...Array.from(
          { length: 16 },
          (_, w) =>
            writer(
              server.url,
              client,
              `r${round}w${w}`,
              new Rng(rng.int(0, 2 ** 31)),
              ledger,
              () => dead,
            ),
        ),
        runController(server.url, client, round, new Rng(rng.int(0, 2 ** 31)), ledger, () => dead),
      ];
      await untilAcked(ledger, ledger.acked.size + ackedPerRound, work);
      await delay(rng.int(150, 600));
      dead = true;
      const status = await server.kill("SIGKILL");
      assert.equal(status.signal, "SIGKILL", server.output());
      await Promise.all(work);
    } finally {
      client.close();
      await server[Symbol.asyncDispose]();
    }

    // A power cut could also tear the last line of a file the next start reopens.
    if (round % 2 === 1) {
      const newest = await newestSiteFile(siteDir);
      const files = newest ? [newest] : [];
      const active = await Deno.readTextFile(join(siteDir, ".active-run.json")).catch(() => "");
      if (active) files.push(`${JSON.parse(active).run_id}/telemetry.ndjson`);
      for (const rel of files) {
        const torn = await tearFile(join(siteDir, rel), `r${round}`);
        tornExpected.set(rel, (tornExpected.get(rel) ?? "") + torn);
      }
    }
  }

  // A last, clean start recovers the tails of the last round and proves the service still works.
  const final = await spawnCliServer({ siteDir, port });
  let finalEvent: string;
  try {
    const res = await send(`${final.url}/event`, {
      method: "POST",
      headers: JSON_HEADERS,
      body: JSON.stringify({ type: "status", data: { id: "final" } }),
    });
    assert.equal(res.status, 200, res.text);
    finalEvent = res.text;
    const status = await final.kill("SIGTERM");
    assert.equal(status.code, 0, final.output());
  } finally {
    await final[Symbol.asyncDispose]();
  }

  assert.deepEqual(ledger.unexpected, [], "answers other than 200 while the server was up");
  assert.ok(ledger.acked.size > 100, `only ${ledger.acked.size} events acknowledged`);

  // Every line of every .ndjson parses and seq strictly increases per file (readAllStreams).
  const streams = await readAllStreams(siteDir);
  const copies = new Map<string, StoredLine[]>(); // data.id -> every stored copy
  for (const lines of streams.values()) {
    for (const l of lines) {
      const id = String(l.data.id);
      copies.set(id, [...(copies.get(id) ?? []), l]);
    }
  }
  assert.equal(copies.get("final")?.[0]?.line, finalEvent);

  for (const [id, ack] of ledger.acked) {
    const stored = copies.get(id) ?? [];
    const runCopies = stored.filter((l) => !isSiteFile(l.file));
    const siteCopies = stored.filter((l) => isSiteFile(l.file));
    if (ack.runId !== undefined) {
      assert.deepEqual(
        runCopies.map((l) => [l.file, l.line]),
        [[`${ack.runId}/telemetry.ndjson`, ack.line]],
        `acknowledged run event ${id}`,
      );
      // Site-wide types are also in the site stream, same ts/data/meta (docs/storage.md).
      assert.equal(siteCopies.length, SITE_TYPES.has(ack.type) ? 1 : 0, `site copies of ${id}`);
    } else {
      assert.deepEqual(runCopies, [], `acknowledged site event ${id} in a run file`);
      assert.deepEqual(siteCopies.map((l) => l.line), [ack.line], `acknowledged site event ${id}`);
    }
  }
  for (const [id, stored] of copies) {
    if (id === "final") continue;
    assert.ok(ledger.attempted.has(id), `stored event ${id} was never sent`);
    assert.ok(stored.filter((l) => isSiteFile(l.file)).length <= 1, `${id} twice in site files`);
    assert.ok(stored.filter((l) => !isSiteFile(l.file)).length <= 1, `${id} twice in run files`);
  }

  // Torn tails end up in .torn files, verbatim, and nowhere else.
  assert.ok(tornExpected.size > 0, "no round tore a file");
  for (const [rel, torn] of tornExpected) {
    const text = await Deno.readTextFile(join(siteDir, `${rel}.torn`));
    assert.ok(text.includes(torn), `${rel}.torn lacks the torn tail: ${JSON.stringify(text)}`);
  }
});

/** Reads the run file and returns its last envelope. */
async function lastLine(path: string): Promise<{ seq: number; line: string; count: number }> {
  const lines = (await Deno.readTextFile(path)).trimEnd().split("\n");
  return { seq: JSON.parse(lines.at(-1)!).seq, line: lines.at(-1)!, count: lines.length };
}

async function startRun(server: ChildServer, runId: string): Promise<Record<string, unknown>> {
  const res = await send(`${server.url}/run/start`, {
    method: "POST",
    headers: JSON_HEADERS,
    body: JSON.stringify({ run_id: runId, meta: { target: "M31" } }),
  });
  assert.equal(res.status, 201, res.text);
  return JSON.parse(res.text);
}

Deno.test("the service resumes an active run and its seq after kill -9 under load", async () => {
  await using tmp = await tempDir();
  const siteDir = join(tmp.path, "site");
  const port = freePort();
  const rng = new Rng(SEED + 1);
  const ledger = new Ledger();
  let started: Record<string, unknown>;
  {
    await using server = await spawnCliServer({ siteDir, port, args: ["--fsync", "interval"] });
    started = await startRun(server, "night-kill");
    const client = Deno.createHttpClient({});
    let dead = false;
    const work = Array.from(
      { length: 8 },
      (_, w) =>
        writer(server.url, client, `w${w}`, new Rng(rng.int(0, 2 ** 31)), ledger, () => dead),
    );
    await untilAcked(ledger, 1, work);
    await delay(rng.int(200, 400));
    dead = true;
    await server.kill("SIGKILL");
    await Promise.all(work);
    client.close();
  }
  assert.deepEqual(ledger.unexpected, []);
  const file = join(siteDir, "night-kill", "telemetry.ndjson");
  const before = await lastLine(file);
  const onDisk = new Set((await Deno.readTextFile(file)).split("\n"));
  assert.ok(ledger.acked.size > 0, "no event was acknowledged before the kill");
  for (const [id, ack] of ledger.acked) {
    assert.equal(ack.runId, "night-kill", id);
    assert.ok(onDisk.has(ack.line), `acknowledged event ${id} is missing from the run file`);
  }

  await using server = await spawnCliServer({ siteDir, port });
  const run = await send(`${server.url}/run`, {});
  assert.equal(run.status, 200, run.text);
  const record = JSON.parse(run.text);
  assert.equal(record.run_id, "night-kill");
  assert.equal(record.started_at, started.started_at);
  assert.deepEqual(record.meta, { target: "M31" });
  assert.equal(record.events, before.count);

  const next = await send(`${server.url}/event`, {
    method: "POST",
    headers: JSON_HEADERS,
    body: JSON.stringify({ type: "status", data: { after: "kill" } }),
  });
  assert.equal(next.status, 200, next.text);
  const env = JSON.parse(next.text);
  assert.equal(env.seq, before.seq + 1);
  assert.equal(env.meta.run_id, "night-kill");
  assert.equal((await lastLine(file)).line, next.text);
  assert.equal((await server.kill("SIGTERM")).code, 0, server.output());
});

Deno.test("the service keeps the run, its seq and /current across a SIGTERM restart mid-run", async () => {
  await using tmp = await tempDir();
  const siteDir = join(tmp.path, "site");
  const port = freePort();
  let current: unknown;
  let started: Record<string, unknown>;
  let lastRunSeq = 0;
  {
    await using server = await spawnCliServer({ siteDir, port });
    await send(`${server.url}/event`, {
      method: "POST",
      headers: JSON_HEADERS,
      body: JSON.stringify({ type: "sensor", data: { before: "run" } }),
    });
    started = await startRun(server, "night-term");
    // Writes in flight when SIGTERM arrives are finished, not dropped (docs/storage.md).
    const posts = Array.from({ length: 40 }, (_, i) =>
      send(`${server.url}/event`, {
        method: "POST",
        headers: JSON_HEADERS,
        body: JSON.stringify({ type: ["weather", "status", "environment"][i % 3], data: { i } }),
      }));
    const answers = await Promise.all(posts);
    for (const a of answers) {
      assert.equal(a.status, 200, a.text);
      lastRunSeq = Math.max(lastRunSeq, JSON.parse(a.text).seq);
    }
    const res = await send(`${server.url}/current`, {});
    current = JSON.parse(res.text);
    const status = await server.kill("SIGTERM");
    assert.equal(status.code, 0, server.output());
  }

  await using server = await spawnCliServer({ siteDir, port });
  const run = JSON.parse((await send(`${server.url}/run`, {})).text);
  assert.equal(run.run_id, "night-term");
  assert.equal(run.started_at, started.started_at);
  assert.equal(run.events, 40);
  assert.deepEqual(JSON.parse((await send(`${server.url}/current`, {})).text), current);
  const next = await send(`${server.url}/event`, {
    method: "POST",
    headers: JSON_HEADERS,
    body: JSON.stringify({ type: "status", data: { after: "restart" } }),
  });
  assert.equal(next.status, 200, next.text);
  assert.equal(JSON.parse(next.text).seq, lastRunSeq + 1);
  assert.equal(JSON.parse(next.text).meta.run_id, "night-term");
  assert.equal((await server.kill("SIGTERM")).code, 0, server.output());
});
