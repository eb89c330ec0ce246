/**
 * Concurrency (issue 6, docs/storage.md): dozens of writers while runs start and stop in a
 * loop, against a real server on 127.0.0.1. Every event must land in exactly the file its
 * response names, once, with seq strictly increasing (and here, with no crash, gap-free) in every
 * file, and site-wide types must also be in the site stream with the same ts, data and meta.
 *
 * Replay a failing run with `FAULT_SEED=<seed> deno test -A tests/fault_concurrency_test.ts`.
 * @module
 */

import assert from "node:assert/strict";
import {
  isSiteFile,
  readAllStreams,
  Rng,
  seedFromEnv,
  send,
  type StoredLine,
} from "./_shared/fault_util.ts";
import { tempDir, testServer } from "./_shared/util.ts";

const SEED = seedFromEnv(0xc0c0_0024);
const SITE_TYPES = new Set(["weather", "environment"]); // the default --site-types
const TYPES = ["status", "sensor", "weather", "environment"];
const JSON_CT = { "content-type": "application/json" };

interface Ack {
  line: string;
  type: string;
  runId: string | undefined;
}

Deno.test("every event lands once in the file its response names while runs start and stop", async () => {
  await using tmp = await tempDir();
  await using server = await testServer({ siteDir: tmp.path });
  const rng = new Rng(SEED);
  const acks = new Map<string, Ack>();
  const problems: string[] = [];
  const stopped = new Map<string, number>(); // run id -> events in its stop record
  let controlling = true;

  const writer = async (w: number, wrng: Rng) => {
    const deadline = Date.now() + 10_000;
    for (let k = 0; k < 400 && controlling && Date.now() < deadline; k++) {
      const items = Array.from({ length: wrng.chance(0.6) ? 1 : wrng.int(2, 4) }, (_, j) => ({
        type: wrng.pick(TYPES),
        data: { id: `w${w}-${k}-${j}`, v: wrng.int(0, 99) },
      }));
      const single = items.length === 1 && wrng.chance(0.7);
      const res = await send(`${server.url}/${single ? "event" : "events"}`, {
        method: "POST",
        headers: JSON_CT,
        body: JSON.stringify(single ? items[0] : items),
      });
      if (res.status !== 200) {
        problems.push(`writer ${w}: ${res.status} ${res.text}`);
        continue;
      }
      const lines = single
        ? [res.text]
        : JSON.parse(res.text).events.map((e: unknown) => JSON.stringify(e));
      for (const line of lines) {
        const env = JSON.parse(line);
        acks.set(env.data.id, { line, type: env.type, runId: env.meta.run_id });
      }
    }
  };

  const controller = async () => {
    // At least five cycles whatever the machine's load (the assertion below needs them), then
    // more while the first two seconds last.
    const deadline = Date.now() + 2000;
    for (let k = 0; k < 30 && (k < 5 || Date.now() < deadline); k++) {
      const runId = `cycle-${k}`;
      const start = await send(`${server.url}/run/start`, {
        method: "POST",
        headers: JSON_CT,
        body: JSON.stringify({ run_id: runId }),
      });
      if (start.status !== 201) problems.push(`start ${runId}: ${start.status} ${start.text}`);
      await new Promise((r) => setTimeout(r, rng.int(10, 40)));
      const stop = await send(`${server.url}/run/stop`, { method: "POST" });
      if (stop.status !== 200) problems.push(`stop ${runId}: ${stop.status} ${stop.text}`);
      else stopped.set(runId, JSON.parse(stop.text).events);
      await new Promise((r) => setTimeout(r, rng.int(5, 20)));
    }
    controlling = false;
  };

  await Promise.all([
    controller(),
    ...Array.from({ length: 24 }, (_, w) => writer(w, new Rng(rng.int(0, 2 ** 31)))),
  ]);
  assert.deepEqual(problems, []);
  assert.ok(stopped.size >= 5, `only ${stopped.size} runs completed`);
  const duringRuns = [...acks.values()].filter((a) => a.runId !== undefined).length;
  assert.ok(duringRuns > 0 && duringRuns < acks.size, "events fell both inside and outside runs");

  // Parses every line; seq strictly increases in every file.
  const streams = await readAllStreams(tmp.path);
  const byId = new Map<string, StoredLine[]>();
  for (const lines of streams.values()) {
    for (const l of lines) byId.set(String(l.data.id), [...(byId.get(String(l.data.id)) ?? []), l]);
  }
  let stored = 0;
  for (const [id, ack] of acks) {
    const copies = byId.get(id) ?? [];
    const expectedFile = ack.runId === undefined ? undefined : `${ack.runId}/telemetry.ndjson`;
    const inExpected = (l: StoredLine) =>
      expectedFile === undefined ? isSiteFile(l.file) : l.file === expectedFile;
    // A site copy may share the seq of its run copy by chance, so match on the file too.
    const own = copies.filter((l) => inExpected(l) && l.line === ack.line);
    assert.equal(
      own.length,
      1,
      `event ${id} is not stored exactly once in ${expectedFile ?? "a site file"}`,
    );
    const others = copies.filter((l) => l !== own[0]);
    if (ack.runId !== undefined && SITE_TYPES.has(ack.type)) {
      // docs/storage.md: the site copy has its own seq and the same ts, data and meta (with run_id).
      assert.equal(others.length, 1, `site copy of ${id}`);
      const [copy, answered] = [others[0]!, own[0]!];
      assert.ok(isSiteFile(copy.file), `site copy of ${id} is in ${copy.file}`);
      assert.deepEqual([copy.ts, copy.data, copy.meta], [
        answered.ts,
        answered.data,
        answered.meta,
      ]);
    } else {
      assert.deepEqual(others, [], `event ${id} has stray copies`);
    }
    stored += copies.length;
  }
  // Nothing on disk that no response announced; with no crash, seq has no gaps either.
  let lines = 0;
  for (const [file, fileLines] of streams) {
    lines += fileLines.length;
    assert.deepEqual(
      fileLines.map((l) => l.seq),
      fileLines.map((_, i) => i + 1),
      `gaps in ${file}`,
    );
    const runId = /^(.+)\/telemetry\.ndjson$/.exec(file)?.[1];
    if (runId) {
      assert.ok(fileLines.every((l) => l.meta.run_id === runId), `foreign run_id in ${file}`);
      assert.equal(fileLines.length, stopped.get(runId), `events count of ${runId}`);
    }
  }
  assert.equal(lines, stored);
});
