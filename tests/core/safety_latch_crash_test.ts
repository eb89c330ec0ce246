/**
 * The safety latch through a crash (docs/safety.md#across-restarts): a commit group that turns a
 * critical type unsafe is written only after the latch file says so, and a start judges again
 * every stored line written after the latch file it finds. Real `cli.ts telemetry run` children
 * and real kill -9, except the one test that needs a refused write at a chosen moment.
 */

import assert from "node:assert/strict";
import { join } from "node:path";
import type { SafetyVerdict } from "../../server.ts";
import { parseTypes } from "../../core/types_registry.ts";
import { SafetyJudge } from "../../core/safety.ts";
import { LATCH_REFRESH_EVENTS } from "../../core/safety_watch.ts";
import {
  freePort,
  getJson,
  openService,
  parseEnvelope,
  postJson,
  readLines,
  readSiteLines,
  T0,
  tempDir,
} from "../_shared/util.ts";
import { type ChildServer, Rng, seedFromEnv, spawnCliServer } from "../_shared/fault_util.ts";

const HOUR_MS = 3_600_000;
const LATCH_FILE = ".safety.json";

/** A critical rain sensor, unsafe while it rains and latched for `clear_after_s` after. */
function typesJson(names: readonly string[], clearAfterS: number): string {
  const spec = {
    critical: true,
    stale_after_s: 86_400,
    clear_after_s: clearAfterS,
    fields: { rain: { alarm_if: true } },
  };
  return JSON.stringify(Object.fromEntries(names.map((name) => [name, spec])));
}

/** A site directory, its types file (`clear_after_s` 3600) and the port its service listens on. */
interface Site {
  siteDir: string;
  typesFile: string;
  port: number;
}

function start(site: Site): Promise<ChildServer> {
  return spawnCliServer({
    siteDir: site.siteDir,
    port: site.port,
    args: ["--types", site.typesFile],
    readFiles: [site.typesFile],
  });
}

async function safety(url: string): Promise<SafetyVerdict> {
  const { status, body } = await getJson(`${url}/safety`);
  assert.equal(status, 200);
  return body as SafetyVerdict;
}

/**
 * A site where every named type was seen dry and judged safe with `clear_after_s` 0, then
 * stopped: started again with `clear_after_s` 3600 it is safe at once, nothing latched.
 */
async function safeSite(dir: string, names: readonly string[]): Promise<Site> {
  const site = { siteDir: join(dir, "site"), typesFile: join(dir, "types.json"), port: freePort() };
  const first = { ...site, typesFile: join(dir, "types-clear-0.json") };
  await Deno.writeTextFile(first.typesFile, typesJson(names, 0));
  await Deno.writeTextFile(site.typesFile, typesJson(names, 3600));
  const server = await start(first);
  try {
    const dry = names.map((type) => ({ type, data: { rain: false } }));
    assert.equal((await postJson(`${server.url}/events`, dry)).status, 200);
    assert.equal((await safety(server.url)).safe, true);
  } finally {
    assert.equal((await server.kill("SIGTERM")).success, true, server.output());
  }
  return site;
}

/** The batch of a collector catching up after an outage: rain a minute ago, dry since. */
function catchUp(type: string): unknown[] {
  const now = Date.now();
  return [
    { type, ts: new Date(now - 60_000).toISOString(), data: { rain: true } },
    { type, ts: new Date(now - 30_000).toISOString(), data: { rain: false } },
  ];
}

/** The types with a rain alarm stored in a stream file, and the seq of each. */
function alarms(lines: readonly string[]): Map<string, number> {
  const found = new Map<string, number>();
  for (const line of lines) {
    const event = parseEnvelope(line);
    if ((event.data as { rain?: unknown }).rain === true) found.set(event.type, event.seq);
  }
  return found;
}

/** A type latched, not safe, until at least an hour after `notBefore`, and the site unsafe. */
function assertLatched(
  verdict: SafetyVerdict,
  type: string,
  notBefore: number,
  context: string,
): void {
  const judged = verdict.types[type];
  const text = `${context}: ${type} ${JSON.stringify(judged)}`;
  assert.equal(verdict.safe, false, text);
  assert.equal(judged?.safe, false, text);
  const until = Date.parse(judged.latched_until ?? "");
  assert.ok(
    until >= notBefore + HOUR_MS,
    `${text}, latched until before ${new Date(notBefore + HOUR_MS).toISOString()}`,
  );
}

function delay(ms: number): Promise<void> {
  return new Promise((resolve) => setTimeout(resolve, ms));
}

Deno.test("a service killed -9 at random moments during catch-up batches never restarts a type safe before its latch ends", async () => {
  const seed = seedFromEnv(0x5afe7);
  // deno-lint-ignore no-console
  console.log(`seed ${seed} (FAULT_SEED=${seed} replays it)`);
  const rng = new Rng(seed);
  const ROUNDS = 12, PER_ROUND = 16, CONCURRENCY = 4;
  const deadline = Date.now() + 150_000;
  const names = Array.from({ length: ROUNDS * PER_ROUND }, (_, i) => `rain${i}`);
  await using dir = await tempDir();
  const site = await safeSite(dir.path, names);
  let server = await start(site);
  let round = 0, cut = 0;
  try {
    assert.equal((await safety(server.url)).safe, true, "every type dry and not latched");
    for (; round < ROUNDS && Date.now() < deadline; round++) {
      const context = `seed ${seed}, round ${round}`;
      const types = names.slice(round * PER_ROUND, (round + 1) * PER_ROUND);
      const sentAt = new Map<string, number>();
      const answered = new Set<string>();
      // Killed a random few milliseconds after a random answer, with batches still in flight.
      const answersBeforeKill = rng.int(0, PER_ROUND - CONCURRENCY);
      const extraMs = rng.int(0, 3);
      let next = 0, answers = 0;
      let killed: Promise<unknown> | undefined;
      const victim = server;
      const worker = async () => {
        while (next < types.length && killed === undefined) {
          const type = types[next++]!;
          sentAt.set(type, Date.now());
          try {
            const { status } = await postJson(`${victim.url}/events`, catchUp(type));
            if (status === 200) answered.add(type);
          } catch {
            return; // the kill cut the connection
          }
          if (++answers > answersBeforeKill) {
            killed ??= delay(extraMs).then(() => victim.kill("SIGKILL"));
          }
        }
      };
      await Promise.all(Array.from({ length: CONCURRENCY }, worker));
      await (killed ?? victim.kill("SIGKILL"));
      server = await start(site);
      const verdict = await safety(server.url);
      const stored = alarms(await readSiteLines(site.siteDir));
      for (const type of answered) {
        assert.ok(stored.has(type), `${context}: ${type} answered, not stored`);
      }
      for (const type of types) {
        if (!stored.has(type)) continue;
        if (!answered.has(type)) cut++;
        assertLatched(verdict, type, sentAt.get(type)!, context);
      }
    }
  } finally {
    await server.kill("SIGKILL");
  }
  // deno-lint-ignore no-console
  console.log(`${round} rounds; ${cut} batches stored whose answer the kill cut off`);
  assert.ok(round >= 3, `only ${round} rounds ran within the time bound`);
});

/** The service of a safe site; a scenario may stop it and start another in its place. */
interface Running {
  site: Site;
  server: ChildServer;
  /** Puts `latch` in place of `.safety.json` and starts the service again; returns when. */
  restartWith(latch: string): Promise<number>;
}

/** Runs a scenario against the service of a safe site of the named types, then kills it. */
async function scenario(names: string[], run: (it: Running) => Promise<void>): Promise<void> {
  await using dir = await tempDir();
  const site = await safeSite(dir.path, names);
  const it: Running = {
    site,
    server: await start(site),
    async restartWith(latch) {
      await Deno.writeTextFile(join(site.siteDir, LATCH_FILE), latch);
      const restarted = Date.now();
      it.server = await start(site);
      return restarted;
    },
  };
  try {
    await run(it);
  } finally {
    await it.server.kill("SIGKILL");
  }
}

/** The site's `.safety.json` as it is now. */
function latchOf(site: Site): Promise<string> {
  return Deno.readTextFile(join(site.siteDir, LATCH_FILE));
}

/** The same without `covers`, as 0.6 wrote it. */
async function latchOf06(site: Site): Promise<string> {
  const { covers: _, ...before07 } = JSON.parse(await latchOf(site));
  return JSON.stringify(before07);
}

/** Posts the catch-up batch of `type` and asserts it was answered 200; returns when it was sent. */
async function postCatchUp(server: ChildServer, type: string): Promise<number> {
  const sent = Date.now();
  assert.equal((await postJson(`${server.url}/events`, catchUp(type))).status, 200);
  return sent;
}

Deno.test("a site directory whose .safety.json is older than its stored lines starts with the type they judge unsafe latched", async () => {
  await scenario(["rain"], async (it) => {
    const older = await latchOf(it.site);
    const sent = await postCatchUp(it.server, "rain");
    assertLatched(await safety(it.server.url), "rain", sent, "before the stop");
    assert.equal((await it.server.kill("SIGTERM")).success, true, it.server.output());
    // The stop saved the latch after every line; the one saved before the batch goes back.
    const restarted = await it.restartWith(older);
    assertLatched(await safety(it.server.url), "rain", restarted, "after the restart");
    assert.match(
      it.server.output(),
      /Stored lines written after the safety latch \.safety\.json was saved judge rain unsafe/,
    );
  });
});

Deno.test("a service killed -9 after a catch-up batch whose latch could not be saved restarts with its alarm latched", async () => {
  await scenario(["rain"], async (it) => {
    const saved = await latchOf(it.site);
    const latchPath = join(it.site.siteDir, LATCH_FILE);
    // A rename cannot replace a directory: every save of the latch fails from here on.
    await Deno.remove(latchPath);
    await Deno.mkdir(latchPath);
    const sent = await postCatchUp(it.server, "rain");
    assert.match(it.server.output(), /Could not save the safety latch/);
    await it.server.kill("SIGKILL");
    await Deno.remove(latchPath);
    await it.restartWith(saved);
    assertLatched(await safety(it.server.url), "rain", sent, "after the restart");
  });
});

Deno.test("a damaged .safety.json with a rain alarm stored keeps the type latched for its clear_after_s from the start", async () => {
  await scenario(["rain"], async (it) => {
    await postCatchUp(it.server, "rain");
    await it.server.kill("SIGKILL");
    const restarted = await it.restartWith('{"version": 1, "covers": {"si');
    assertLatched(await safety(it.server.url), "rain", restarted, "after the restart");
    assert.match(it.server.output(), /\.safety\.json is unreadable/);
  });
});

Deno.test("a run started and stopped after .safety.json was saved has its critical lines judged at the next start", async () => {
  // Every critical type is written to the site stream too (docs/storage.md), so lines of a
  // critical type in a run's file alone come from a type made critical since they were written
  // (or from a service before 0.7): clouds is recorded as an ordinary type, then made critical.
  await scenario(["rain"], async (it) => {
    const types = JSON.parse(await Deno.readTextFile(it.site.typesFile));
    const clouds = { ...types.rain, critical: false };
    await Deno.writeTextFile(it.site.typesFile, JSON.stringify({ ...types, clouds }));
    assert.equal((await it.server.kill("SIGTERM")).success, true, it.server.output());
    await it.restartWith(await latchOf(it.site));
    // The latch as saved before the run, had clouds been critical and fine then.
    const older = JSON.parse(await latchOf(it.site));
    older.types.clouds = { unsafe: false, latched_until_ms: null };
    assert.equal((await postJson(`${it.server.url}/run/start`, { run_id: "n1" })).status, 201);
    await postCatchUp(it.server, "clouds");
    assert.equal((await postJson(`${it.server.url}/run/stop`, undefined)).status, 200);
    assert.equal((await it.server.kill("SIGTERM")).success, true, it.server.output());
    const siteDir = it.site.siteDir;
    assert.equal(alarms(await readSiteLines(siteDir)).size, 0, "no alarm in the site stream");
    assert.ok(alarms(await readLines(join(siteDir, "n1", "telemetry.ndjson"))).has("clouds"));
    await Deno.writeTextFile(
      it.site.typesFile,
      JSON.stringify({ ...types, clouds: { ...clouds, critical: true } }),
    );
    const restarted = await it.restartWith(JSON.stringify(older));
    assertLatched(await safety(it.server.url), "clouds", restarted, "after the restart");
  });
});

Deno.test("a critical type's events during a run are written to the site stream too", async () => {
  await scenario(["clouds"], async (it) => {
    assert.equal((await postJson(`${it.server.url}/run/start`, { run_id: "n1" })).status, 201);
    await postCatchUp(it.server, "clouds");
    assert.equal((await postJson(`${it.server.url}/run/stop`, undefined)).status, 200);
    assert.equal((await it.server.kill("SIGTERM")).success, true, it.server.output());
    const siteDir = it.site.siteDir;
    assert.ok(alarms(await readSiteLines(siteDir)).has("clouds"), "in the site stream");
    assert.ok(alarms(await readLines(join(siteDir, "n1", "telemetry.ndjson"))).has("clouds"));
  });
});

Deno.test("a .safety.json written by 0.6 (no covers) is taken to cover what the checkpoint covers: a clean stop restarts safe at once", async () => {
  await scenario(["rain"], async (it) => {
    assert.equal((await it.server.kill("SIGTERM")).success, true, it.server.output());
    await it.restartWith(await latchOf06(it.site));
    const verdict = await safety(it.server.url);
    assert.equal(verdict.safe, true, verdict.reasons.join("; "));
  });
});

Deno.test("a .safety.json written by 0.6 (no covers) and a kill -9 after a catch-up batch: the lines after the checkpoint are judged again", async () => {
  await scenario(["rain"], async (it) => {
    // What 0.6 had on disk when a crash came between writing the batch and saving the latch.
    const before07 = await latchOf06(it.site);
    await postCatchUp(it.server, "rain");
    await it.server.kill("SIGKILL");
    const siteDir = it.site.siteDir;
    const checkpoint = JSON.parse(await Deno.readTextFile(join(siteDir, ".snapshot.json")));
    const alarmSeq = alarms(await readSiteLines(siteDir)).get("rain")!;
    assert.ok(checkpoint.site.seq < alarmSeq, "the batch came after the last checkpoint");
    const restarted = await it.restartWith(before07);
    assertLatched(await safety(it.server.url), "rain", restarted, "after the restart");
  });
});

Deno.test("a group that turns a critical type unsafe has its latch saved first: when the disk then refuses the group, the site is latched all the same", async () => {
  await using dir = await tempDir();
  const siteDir = join(dir.path, "site");
  const now = { ms: T0 };
  const service = await openService(
    siteDir,
    {
      types: parseTypes(typesJson(["rain"], 3600), "types.json"),
      monotonicClock: () => now.ms - T0,
    },
    now,
  );
  try {
    await service.record([{ type: "rain", data: { rain: false } }]);
    // The next night (noon UTC on 11 May): its group opens a new site file, which cannot be.
    now.ms = T0 + 23.5 * HOUR_MS;
    assert.equal(service.safety().safe, true, service.safety().reasons.join("; "));
    await Deno.mkdir(join(siteDir, "site_20260511.ndjson"));
    await assert.rejects(
      service.record([{ type: "rain", data: { rain: true } }, {
        type: "rain",
        data: { rain: false },
      }]),
    );
    const saved = JSON.parse(await Deno.readTextFile(join(siteDir, LATCH_FILE))).types.rain;
    assert.ok(
      saved.unsafe === true || saved.latched_until_ms >= now.ms + HOUR_MS,
      JSON.stringify(saved),
    );
    assert.equal(service.safety().types.rain?.safe, false);
  } finally {
    await service.close();
  }
});

Deno.test("SafetyJudge holds a type an unwritten group turned unsafe: a judgement before the group is committed neither ends nor starts its latch", () => {
  const registry = parseTypes(typesJson(["rain"], 3600), "types.json");
  const wall = T0;
  const judge = new SafetyJudge(registry, { wallMs: wall, monoMs: 0, restored: null });
  const dry = { ts: new Date(wall).toISOString(), data: { rain: false } };
  judge.judge(() => dry, wall, 0);
  const after = HOUR_MS + 1; // the first event's latch is over
  assert.equal(judge.judge(() => dry, wall + after, after).verdict.safe, true);
  assert.equal(judge.observe("rain", wall + after, { rain: true }, wall + after, after), "unsafe");
  // Asked while the group is written: the snapshot still holds the dry line.
  const during = judge.judge(() => dry, wall + after + 5, after + 5).verdict;
  assert.equal(during.types.rain?.safe, false);
  assert.equal(
    judge.saved(wall + after + 5, { site_seq: 1, run: null, runs_log: null }).types.rain?.unsafe,
    true,
  );
  judge.release();
  // Committed 20 ms later: the latch counts from here, not from the question before.
  const committed = judge.judge(() => dry, wall + after + 20, after + 20).verdict;
  assert.equal(
    committed.types.rain?.latched_until,
    new Date(wall + after + 20 + HOUR_MS).toISOString(),
  );
});

Deno.test("a service taking events that change no judgement saves its latch again only every LATCH_REFRESH_EVENTS events, with where the streams end", async () => {
  await using dir = await tempDir();
  const siteDir = join(dir.path, "site");
  const service = await openService(siteDir, {
    types: parseTypes(typesJson(["rain"], 0), "t.json"),
  });
  const covered = async () =>
    JSON.parse(await Deno.readTextFile(join(siteDir, LATCH_FILE))).covers.site_seq as number;
  try {
    const dry = Array.from({ length: 1000 }, () => ({ type: "rain", data: { rain: false } }));
    await service.record(dry);
    const first = await covered();
    for (let n = 1000; n < LATCH_REFRESH_EVENTS - 1000; n += 1000) await service.record(dry);
    assert.equal(await covered(), first, "not saved again before LATCH_REFRESH_EVENTS events");
    await service.record(dry);
    await service.record(dry);
    // Queued after the save: the save covers every line before it.
    const [fence] = await service.record([{ type: "fence", data: {} }]);
    assert.ok(fence!.seq > LATCH_REFRESH_EVENTS);
    assert.equal(await covered(), fence!.seq - 1);
  } finally {
    await service.close();
  }
});
