/**
 * `GET /history` never holds the event loop or the memory of the service (docs/history.md): while
 * a whole night streams, and while many readers loop on it, the p99 of `POST /event` stays within
 * 2x of the p99 measured without them (the worse of just before and just after), plus 35 ms for a
 * busy 2-core machine; and however many readers ask, the service's resident memory stays under a
 * fixed bound. Real services (in this process, or a child spawned as `run`), real night files,
 * readers in other processes.
 */

import assert from "node:assert/strict";
import { tempDir, testServer } from "../_shared/util.ts";
import {
  latencyLine,
  latencyUnderReaders,
  memoryUnderReaders,
  p99,
  postMany,
  postOnce,
  READER_FIELDS,
  readerUrls,
  spawnSite,
  writeNight,
} from "../_shared/history_util.ts";

for (const [what, query] of [["lines", ""], ["buckets", "&every=1m"]] as const) {
  Deno.test(`a whole night's GET /history (${what}) keeps the p99 of POST /event within 2x + 35 ms`, async () => {
    await using tmp = await tempDir();
    // A 1 Hz night plus two more types: 3 x 43,200 lines.
    const lines = await writeNight(tmp.path);
    await using server = await testServer({ siteDir: tmp.path });
    await postMany(server.url, 30); // warm up
    const before = await postMany(server.url, 300);
    const during: number[] = [];
    let done = false, received = 0;
    // The reader is another process, as a browser or a script is: this process's loop is
    // the service's alone.
    const reading = (async () => {
      const out = await new Deno.Command("curl", {
        args: [
          "-sS",
          "-o",
          "/dev/null",
          "-w",
          "%{http_code} %{size_download}",
          `${server.url}/history?since=2026-05-10&until=2026-05-11&limit=1000000${query}`,
        ],
        stdout: "piped",
      }).output();
      const [code, size] = new TextDecoder().decode(out.stdout).split(" ");
      assert.equal(code, "200");
      received = Number(size);
      done = true;
    })();
    const t0 = performance.now();
    for (let i = 0; !done && i < 20_000 && performance.now() - t0 < 120_000; i++) {
      during.push(await postOnce(server.url, i));
    }
    await reading;
    // The machine's own load moves under a parallel suite: the reference is the worse of the
    // p99s measured just before and just after the query, both without it.
    const after = await postMany(server.url, 300);
    const reference = Math.max(p99(before), p99(after));
    const ratio = p99(during) / reference;
    // deno-lint-ignore no-console
    console.log(
      `${what}: ${lines} lines, ${received} bytes in ${
        (performance.now() - t0).toFixed(0)
      } ms; POST /event p99 ${p99(before).toFixed(1)} ms before, ${
        p99(after).toFixed(1)
      } ms after, ${p99(during).toFixed(1)} ms during (${during.length} posts, ratio ${
        ratio.toFixed(2)
      })`,
    );
    assert.ok(received > 0);
    assert.ok(during.length >= 20, `only ${during.length} posts during the query`);
    assert.ok(
      p99(during) <= 2 * reference + 35,
      `p99 ${p99(during).toFixed(1)} ms during vs ${reference.toFixed(1)} ms around it`,
    );
  });
}

/** How long the looping readers run. */
const READERS_MS = 20_000;

Deno.test("16 looping GET /history readers (buckets at the cell budget, limit=1, CSV) keep the p99 of POST /event within 2x + 35 ms of none", async () => {
  await using tmp = await tempDir();
  const lines = await writeNight(tmp.path, { fields: READER_FIELDS });
  await using server = await spawnSite(tmp.path);
  const result = await latencyUnderReaders(server.url, readerUrls(server.url, 16), READERS_MS);
  const { before, during, after, report } = result;
  const reference = Math.max(p99(before), p99(after));
  // deno-lint-ignore no-console
  console.log(`16 readers over ${lines} lines: ${latencyLine(result)}`);
  assert.ok((report.statuses["200"] ?? 0) >= 3, "the readers were answered");
  assert.ok(during.length >= 100, `only ${during.length} posts while the readers ran`);
  assert.ok(
    p99(during) <= 2 * reference + 35,
    `p99 ${p99(during).toFixed(1)} ms with 16 readers vs ${reference.toFixed(1)} ms without`,
  );
});

/**
 * The budget of the readers on top of twice the idle size: the bucketed answers read at once hold
 * at most 200,000 cells together (docs/history.md, "Memory"), at most 450 bytes each as the
 * service holds this night's buckets (measured: 194,000 cells of the whole night grew it by 83
 * MB), so 90 MB live; the collector lets the garbage of the answers that ended grow to about as
 * much again before it collects, 180 MB; and 70 MB for what the answers stream through at once
 * (a 64 KiB read and a 64 KiB chunk per answer, the socket buffers) and the CSV rows and parsed
 * lines not collected yet.
 */
const READERS_BUDGET = 250 * 1024 * 1024;

Deno.test("64 looping GET /history readers keep the service's memory under twice its idle size plus the answers' budget", async () => {
  await using tmp = await tempDir();
  await writeNight(tmp.path, { fields: READER_FIELDS });
  await using server = await spawnSite(tmp.path);
  const { idle, peak, report } = await memoryUnderReaders(
    server.url,
    server.pid,
    readerUrls(server.url, 64),
    READERS_MS,
  );
  const mb = (n: number) => `${(n / 1048576).toFixed(0)} MB`;
  // deno-lint-ignore no-console
  console.log(
    `64 readers: ${JSON.stringify(report.statuses)}, ${mb(report.bytes)} read; service RSS ${
      mb(idle)
    } idle, ${mb(peak)} at peak (bound ${mb(2 * idle + READERS_BUDGET)})`,
  );
  assert.ok((report.statuses["200"] ?? 0) >= 3, "the readers were answered");
  assert.ok(
    peak < 2 * idle + READERS_BUDGET,
    `the service grew from ${mb(idle)} to ${mb(peak)} with 64 readers`,
  );
});
