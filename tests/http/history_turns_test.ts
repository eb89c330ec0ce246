/**
 * `GET /history` serves only `--max-history` requests at once and reads no more than its `limit`
 * needs (docs/history.md, "Readers at once" and "A limit"): the next requests wait their turn in
 * a bounded queue, for at most 10 s, then get 503 with `Retry-After`; a reader that goes away
 * gives its turn up at once; `limit=1` ends the reading of a large night after its line. Real
 * services on port 0 over a real night file; slots are held by clients that do not read their
 * answers (a 20 MB night fills the socket buffers, and the service waits on them).
 */

import assert from "node:assert/strict";
import { join } from "node:path";
import { tempDir, testServer } from "../_shared/util.ts";
import { NIGHT_RANGE, writeNight } from "../_shared/history_util.ts";
import { spawnServer } from "../../server.ts";

/** The whole night, every line: about 20 MB, far more than the socket buffers hold. */
const WHOLE = `/history?${NIGHT_RANGE}&limit=1000000`;
/** A small answer: the first line of the night. */
const SMALL = `/history?${NIGHT_RANGE}&limit=1`;

/** Asks for `path` and returns the answer once its head came, its body unread. */
async function open(url: string, path: string): Promise<Response> {
  const res = await fetch(`${url}${path}`);
  assert.equal(res.status, 200, await problemOf(res));
  return res;
}

async function problemOf(res: Response): Promise<string> {
  return res.status === 200 ? "" : await res.clone().text();
}

/** Whether `promise` settled within `ms`: the test's view of "still waiting". */
async function settledWithin(promise: Promise<unknown>, ms: number): Promise<boolean> {
  let timer: ReturnType<typeof setTimeout> | undefined;
  const settled = await Promise.race([
    promise.then(() => true, () => true),
    new Promise<boolean>((resolve) => timer = setTimeout(() => resolve(false), ms)),
  ]);
  clearTimeout(timer);
  return settled;
}

/** Two answers held by clients that do not read them, and a third request waiting its turn. */
async function twoHeldOneWaiting(url: string) {
  const first = await open(url, WHOLE);
  const second = await open(url, WHOLE);
  const third = fetch(`${url}${SMALL}`);
  assert.equal(await settledWithin(third, 1000), false, "the third was answered at once");
  return { first, second, third };
}

Deno.test("GET /history serves two requests at once: a third waits for its turn and is served when one of them ends", async () => {
  await using tmp = await tempDir();
  await writeNight(tmp.path);
  await using server = await testServer({ siteDir: tmp.path });
  const { first, second, third } = await twoHeldOneWaiting(server.url);
  try {
    const lines = (await first.text()).trimEnd().split("\n").length;
    assert.equal(lines, 129_600, "the first answer ended whole");
    const res = await third;
    assert.equal(res.status, 200);
    assert.equal((await res.text()).trimEnd().split("\n").length, 2, "one line and the cut");
  } finally {
    await second.body?.cancel();
    await first.body?.cancel().catch(() => {});
    await (await third).body?.cancel().catch(() => {});
  }
});

Deno.test("GET /history answers a request that waited 10 s without its turn 503 with Retry-After", async () => {
  await using tmp = await tempDir();
  await writeNight(tmp.path);
  await using server = await testServer({ siteDir: tmp.path });
  const held = [await open(server.url, WHOLE), await open(server.url, WHOLE)];
  try {
    const t0 = performance.now();
    const res = await fetch(`${server.url}${SMALL}`);
    const waited = performance.now() - t0;
    const body = await res.json();
    assert.equal(res.status, 503);
    assert.equal(res.headers.get("retry-after"), "10");
    assert.equal(res.headers.get("content-type"), "application/problem+json; charset=utf-8");
    assert.match(body.detail, /serves 2 requests at once \(--max-history\)/);
    assert.match(body.detail, /waited 10 s/);
    assert.ok(waited >= 9_500, `answered after ${waited.toFixed(0)} ms`);
  } finally {
    for (const res of held) await res.body?.cancel();
  }
});

Deno.test("GET /history answers 503 at once, with Retry-After, to a request past the 64 already waiting", async () => {
  await using tmp = await tempDir();
  await writeNight(tmp.path);
  await using server = await testServer({ siteDir: tmp.path });
  const held = [await open(server.url, WHOLE), await open(server.url, WHOLE)];
  const waiting: Promise<Response>[] = [];
  try {
    for (let i = 0; i < 64; i++) waiting.push(fetch(`${server.url}${SMALL}`));
    // Once 64 wait, the next is refused without a wait (far sooner than any waiter's 10 s).
    let refused: Response | undefined;
    for (let tries = 0; tries < 50 && !refused; tries++) {
      const res = await fetch(`${server.url}${SMALL}`);
      if (res.status === 503) refused = res;
      else {
        // Not all 64 had arrived yet: this one took a place (it is answered below).
        waiting.push(Promise.resolve(res));
        await new Promise((r) => setTimeout(r, 20));
      }
    }
    assert.ok(refused, "no request was refused at once");
    const body = await refused.json();
    assert.equal(refused.headers.get("retry-after"), "10");
    assert.match(body.detail, /64 more are waiting/);
    assert.equal(await settledWithin(Promise.any(waiting), 0), false, "a waiter was answered");
  } finally {
    for (const res of held) await res.body?.cancel();
  }
  // Their turns come once the two are gone.
  for (const res of await Promise.all(waiting)) {
    assert.equal(res.status, 200, await problemOf(res));
    await res.body?.cancel();
  }
});

Deno.test("GET /history gives the turn of a reader that disconnects to the next one at once", async () => {
  await using tmp = await tempDir();
  await writeNight(tmp.path);
  await using server = await testServer({ siteDir: tmp.path });
  const { first, second, third } = await twoHeldOneWaiting(server.url);
  try {
    await first.body?.cancel(); // the client goes away in the middle of its answer
    // Served, not refused: the turn came long before the third's 10 s were over.
    const res = await third;
    assert.equal(res.status, 200, await problemOf(res));
    await res.body?.cancel();
  } finally {
    await second.body?.cancel();
  }
});

Deno.test("spawnServer({maxHistory: 1}) serves one GET /history at once (--max-history 1)", async () => {
  await using tmp = await tempDir();
  await writeNight(tmp.path);
  await using server = await spawnServer({
    siteDir: tmp.path,
    host: "127.0.0.1",
    port: 0,
    timeZone: "UTC",
    maxHistory: 1,
    output: "null",
  });
  const first = await open(server.url, WHOLE);
  const second = fetch(`${server.url}${SMALL}`);
  try {
    assert.equal(await settledWithin(second, 1000), false, "the second was answered at once");
    await first.body?.cancel();
    const res = await second;
    assert.equal(res.status, 200, await problemOf(res));
    await res.body?.cancel();
  } finally {
    await first.body?.cancel().catch(() => {});
  }
});

/**
 * The answer to `query` over a large night whose last line is a `weather` line with `ts` (a
 * clock stepped back): a reading of the whole night would see it.
 */
async function withLateLine(ts: string, query: string): Promise<Record<string, unknown>[]> {
  await using tmp = await tempDir();
  await writeNight(tmp.path);
  await Deno.writeTextFile(
    join(tmp.path, "site_20260510.ndjson"),
    `{"seq":999999,"ts":"${ts}","type":"weather","data":{"wind":{"mps":99},"temp":99},"meta":{}}\n`,
    { append: true },
  );
  await using server = await testServer({ siteDir: tmp.path });
  const res = await fetch(`${server.url}/history?${NIGHT_RANGE}&type=weather&${query}`);
  return (await res.text()).trimEnd().split("\n").map((l) => JSON.parse(l));
}

Deno.test("GET /history?limit=1 reads a large night only as far as the lines after its one line", async () => {
  // A ts between the first two weather lines: a reading of the whole night takes it for
  // next_since.
  const lines = await withLateLine("2026-05-10T12:00:00.500Z", "limit=1");
  assert.equal(lines.length, 2);
  assert.equal(lines[0]!.ts, "2026-05-10T12:00:00.000Z");
  assert.deepEqual(lines[1], { truncated: true, next_since: "2026-05-10T12:00:01.000Z" });
});

Deno.test("GET /history?every=&limit=1 reads a large night only as far as its bucket and the lines after it", async () => {
  // A ts in the first minute: a reading of the whole night counts it into the first bucket.
  const lines = await withLateLine("2026-05-10T12:00:30.000Z", "every=1m&agg=count&limit=1");
  assert.equal(lines.length, 2);
  assert.equal(lines[0]!.t, "2026-05-10T12:00:00.000Z");
  assert.equal(lines[0]!.count, 60, "the minute's 60 lines, not the night's last");
  assert.deepEqual(lines[1], { truncated: true, next_since: "2026-05-10T12:01:00.000Z" });
});

Deno.test("GET /history?limit=1 over a large night costs a small part of a scan of the night", async () => {
  await using tmp = await tempDir();
  // 8 types: 345,600 lines (55 MB), so that the fixed cost of a request weighs little.
  const types = ["weather", "mount", "dome", "camera", "focuser", "guider", "power", "sky"];
  const total = await writeNight(tmp.path, { types });
  await using server = await testServer({ siteDir: tmp.path });
  const time = async (path: string) => {
    const t0 = performance.now();
    const res = await fetch(`${server.url}${path}`);
    const text = await res.text();
    assert.equal(res.status, 200, text);
    return performance.now() - t0;
  };
  // The reference scans every line of the night and answers none of them.
  const scan = `/history?${NIGHT_RANGE}&type=nothing`;
  const one: number[] = [], whole: number[] = [];
  for (let i = 0; i < 3; i++) {
    whole.push(await time(scan));
    one.push(await time(SMALL));
  }
  const ratio = Math.min(...one) / Math.min(...whole);
  // deno-lint-ignore no-console
  console.log(
    `limit=1: ${Math.min(...one).toFixed(1)} ms; a scan of the ${total} lines: ${
      Math.min(...whole).toFixed(1)
    } ms (best of 3 each, ratio ${ratio.toFixed(3)})`,
  );
  assert.ok(ratio < 0.3, `limit=1 took ${ratio.toFixed(2)} of a whole scan`);
});

Deno.test("GET /history answers a request still waiting for its turn 503 when the service stops", async () => {
  await using tmp = await tempDir();
  await writeNight(tmp.path);
  await using server = await testServer({ siteDir: tmp.path, shutdownGraceMs: 500 });
  const held = [await open(server.url, WHOLE), await open(server.url, WHOLE)];
  const waiting = fetch(`${server.url}${SMALL}`);
  try {
    assert.equal(await settledWithin(waiting, 500), false, "the third was answered at once");
    const stopping = server.shutdown();
    const res = await waiting;
    assert.equal(res.status, 503);
    assert.match((await res.json()).detail, /shutting down/);
    await stopping;
  } finally {
    for (const res of held) await res.body?.cancel().catch(() => {});
  }
});
