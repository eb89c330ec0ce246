/**
 * `Prefer: return=minimal` on `POST /events` (docs/http-api.md): the answer
 * `{"accepted", "first_seq", "last_seq"}` with `Preference-Applied`, the run stream's seqs during
 * a run, the same refusals as without it, and with an `Idempotency-Key` the minimal answer kept
 * and replayed (across a restart too), never with other seqs, whichever answer a retry asks for.
 * Also the caller's `ts` that looks canonical but is not, refused as before the fast path.
 *
 * @module
 */

import assert from "node:assert/strict";
import { readLines, readSiteLines, tempDir, testServer } from "../_shared/util.ts";
import { join } from "node:path";

interface Answer {
  status: number;
  applied: string | null;
  replayed: string | null;
  body: string;
}

async function postEvents(
  url: string,
  body: string,
  headers: Record<string, string> = {},
): Promise<Answer> {
  const res = await fetch(`${url}/events`, {
    method: "POST",
    headers: { "content-type": "application/json", ...headers },
    body,
  });
  return {
    status: res.status,
    applied: res.headers.get("preference-applied"),
    replayed: res.headers.get("idempotent-replayed"),
    body: await res.text(),
  };
}

const MINIMAL = { prefer: "return=minimal" };
const batch = (n: number, from = 0) =>
  JSON.stringify(
    Array.from({ length: n }, (_, i) => ({
      type: "weather",
      ts: `2026-11-22T03:00:${String(i % 60).padStart(2, "0")}.${
        String(from + i).padStart(3, "0").slice(-3)
      }Z`,
      data: { t: from + i },
    })),
  );

Deno.test("POST /events with Prefer: return=minimal answers accepted, first_seq and last_seq of the stored events", async () => {
  await using site = await tempDir();
  await using server = await testServer({ siteDir: site.path });
  await postEvents(server.url, batch(2)); // seqs 1 and 2
  const answer = await postEvents(server.url, batch(3, 2), MINIMAL);
  assert.equal(answer.status, 200, answer.body);
  assert.equal(answer.body, '{"accepted":3,"first_seq":3,"last_seq":5}');
  assert.equal(answer.applied, "return=minimal");
  const stored = (await readSiteLines(site.path)).map((l) => JSON.parse(l));
  assert.deepEqual(stored.slice(2).map((e) => [e.seq, e.data.t]), [[3, 2], [4, 3], [5, 4]]);
});

Deno.test("POST /events with Prefer: return=minimal answers the run stream's seqs during a run", async () => {
  await using site = await tempDir();
  await using server = await testServer({ siteDir: site.path });
  await postEvents(server.url, batch(4)); // site seqs 1 to 4
  const start = await fetch(`${server.url}/run/start`, { method: "POST" });
  const run = await start.json();
  const answer = await postEvents(server.url, batch(2, 4), MINIMAL);
  assert.equal(answer.body, '{"accepted":2,"first_seq":1,"last_seq":2}');
  const runLines = await readLines(join(run.run_dir, "telemetry.ndjson"));
  assert.deepEqual(runLines.map((l) => JSON.parse(l).data.t), [4, 5]);
});

Deno.test("POST /events with Prefer: return=minimal answers null seqs to an empty batch", async () => {
  await using site = await tempDir();
  await using server = await testServer({ siteDir: site.path });
  const answer = await postEvents(server.url, "[]", MINIMAL);
  assert.equal(answer.body, '{"accepted":0,"first_seq":null,"last_seq":null}');
});

Deno.test("POST /events answers every envelope without Prefer, with return=representation and with an unknown preference", async () => {
  await using site = await tempDir();
  await using server = await testServer({ siteDir: site.path });
  for (const headers of [{}, { prefer: "return=representation" }, { prefer: "respond-async" }]) {
    const answer = await postEvents(server.url, batch(2), headers);
    assert.equal(answer.applied, null);
    assert.equal(JSON.parse(answer.body).events.length, 2);
  }
});

Deno.test("POST /events reads return=minimal among other preferences, quoted, with parameters, in any case", async () => {
  await using site = await tempDir();
  await using server = await testServer({ siteDir: site.path });
  for (
    const prefer of [
      "respond-async, RETURN=Minimal",
      'return="minimal"; foo=1',
      "wait=5,return=minimal",
    ]
  ) {
    const answer = await postEvents(server.url, batch(1), { prefer });
    assert.equal(answer.applied, "return=minimal", prefer);
    assert.match(answer.body, /^\{"accepted":1,"first_seq":\d+,"last_seq":\d+\}$/, prefer);
  }
});

Deno.test("POST /events with Prefer: return=minimal refuses a bad batch with the same problem as without it", async () => {
  await using site = await tempDir();
  await using server = await testServer({ siteDir: site.path });
  const bad =
    '[{"type":"weather","data":{}},{"type":"weather","data":{},"ts":"2026-13-01T00:00:00.000Z"}]';
  const full = await postEvents(server.url, bad);
  const minimal = await postEvents(server.url, bad, MINIMAL);
  assert.equal(full.status, 400);
  assert.deepEqual(minimal, { ...full, applied: null });
  assert.deepEqual(await readSiteLines(site.path), []);
});

Deno.test("POST /events replays a keyed minimal answer with the same seqs, to a retry asking for either answer", async () => {
  await using site = await tempDir();
  await using server = await testServer({ siteDir: site.path });
  const body = batch(3);
  const key = { "idempotency-key": "minimal-1" };
  const first = await postEvents(server.url, body, { ...key, ...MINIMAL });
  assert.deepEqual(first, {
    status: 200,
    applied: "return=minimal",
    replayed: null,
    body: '{"accepted":3,"first_seq":1,"last_seq":3}',
  });
  const again = await postEvents(server.url, body, { ...key, ...MINIMAL });
  assert.deepEqual(again, { ...first, replayed: "true" });
  // Its lines were not kept: a retry asking for every envelope gets the minimal answer, saying so.
  const full = await postEvents(server.url, body, key);
  assert.deepEqual(full, { ...first, replayed: "true" });
  assert.equal((await readSiteLines(site.path)).length, 3, "stored once");
});

Deno.test("POST /events answers a retry asking for the minimal answer of a key first answered in full with the seqs of its envelopes", async () => {
  await using site = await tempDir();
  await using server = await testServer({ siteDir: site.path });
  await postEvents(server.url, batch(2)); // seqs 1 and 2
  const body = batch(3, 2);
  const key = { "idempotency-key": "full-then-minimal" };
  const first = await postEvents(server.url, body, key);
  const seqs = JSON.parse(first.body).events.map((e: { seq: number }) => e.seq);
  assert.deepEqual(seqs, [3, 4, 5]);
  const minimal = await postEvents(server.url, body, { ...key, ...MINIMAL });
  assert.deepEqual(minimal, {
    status: 200,
    applied: "return=minimal",
    replayed: "true",
    body: '{"accepted":3,"first_seq":3,"last_seq":5}',
  });
  assert.deepEqual(await postEvents(server.url, body, key), { ...first, replayed: "true" });
  assert.equal((await readSiteLines(site.path)).length, 5);
});

Deno.test("POST /events replays a keyed minimal answer after a restart", async () => {
  await using site = await tempDir();
  const body = batch(4);
  const headers = { "idempotency-key": "minimal-restart", ...MINIMAL };
  let first: Answer;
  {
    await using server = await testServer({ siteDir: site.path });
    first = await postEvents(server.url, body, headers);
    assert.equal(first.body, '{"accepted":4,"first_seq":1,"last_seq":4}');
  }
  await using server = await testServer({ siteDir: site.path });
  assert.deepEqual(await postEvents(server.url, body, headers), { ...first, replayed: "true" });
  assert.equal((await readSiteLines(site.path)).length, 4);
});

Deno.test("POST /events refuses a ts that looks canonical but is not, naming what is wrong as before", async () => {
  await using site = await tempDir();
  await using server = await testServer({ siteDir: site.path });
  const cases: [string, string][] = [
    ["2026-13-01T00:00:00.000Z", "2026-13-01 is not a calendar date"],
    ["2025-02-29T00:00:00.000Z", "2025-02-29 is not a calendar date"],
    ["2026-02-30T00:00:00.000Z", "2026-02-30 is not a calendar date"],
    ["2016-12-31T23:59:60.000Z", "23:59:60 is not a time of day"],
    ["2026-11-22T24:00:00.000Z", "24:00:00 is not a time of day"],
    ["2026-11-22T03:00:0\u0663.000Z", "expected YYYY-MM-DDTHH:MM:SS[.fff] ending in Z or ±HH:MM"],
    ["2026-11-22T03:00:00.000Z ", "expected YYYY-MM-DDTHH:MM:SS[.fff] ending in Z or ±HH:MM"],
  ];
  for (const [ts, why] of cases) {
    const answer = await postEvents(
      server.url,
      JSON.stringify([{ type: "weather", data: {}, ts }]),
      MINIMAL,
    );
    assert.equal(answer.status, 400, ts);
    const detail = JSON.parse(answer.body).detail as string;
    assert.ok(detail.startsWith("Item 0 (0-based): Cannot"), detail);
    assert.ok(detail.includes(why), `${ts}: ${detail}`);
    assert.ok(
      detail.endsWith(
        `; send "ts" like "2026-11-22T03:00:00.000Z", or omit it to use the server's time.`,
      ),
      detail,
    );
  }
  assert.deepEqual(await readSiteLines(site.path), []);
});
