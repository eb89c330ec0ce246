/**
 * The site stream's seq is one increasing sequence whatever wrote the files (docs/migration.md):
 * a migration numbers all the nights it writes as one sequence in night order, after the highest
 * seq the destination holds, and a service started on the destination goes on above it. Real temp
 * dirs, real servers on 127.0.0.1 port 0.
 * @module
 */

import assert from "node:assert/strict";
import { join } from "node:path";
import { gzipSync } from "node:zlib";
import { migrate } from "../../migrate.ts";
import { getJson, postJson, readLines, siteFiles, tempDir, testServer } from "../_shared/util.ts";

function record(id: string, date: string, type = "weather"): string {
  return `{"_id": "${id}", "type": "${type}", "date": "${date}", "data": {"wind_mps": 1}}`;
}

/** A legacy store of `nights` days with `perNight` records each, seeded and in time order. */
async function legacyStore(dir: string, nights: number, perNight: number): Promise<void> {
  await Deno.mkdir(dir, { recursive: true });
  const lines: string[] = [];
  for (let n = 0; n < nights; n++) {
    for (let i = 0; i < perNight; i++) {
      lines.push(record(`r${n}-${i}`, `2024-03-${String(n + 1).padStart(2, "0")}T2${i % 4}:00:00`));
    }
  }
  await Deno.writeTextFile(join(dir, "weather.json"), lines.join("\n") + "\n");
}

/** The seqs of every site file of a directory, file by file in night order. */
async function seqsByFile(dir: string): Promise<number[][]> {
  const out: number[][] = [];
  for (const name of await siteFiles(dir)) {
    out.push((await readLines(join(dir, name))).map((l) => JSON.parse(l).seq));
  }
  return out;
}

async function waitFor(what: string, check: () => Promise<boolean>, ms = 20_000): Promise<void> {
  const until = Date.now() + ms;
  while (!(await check())) {
    if (Date.now() > until) throw new Error(`timed out waiting for ${what}`);
    await new Promise((r) => setTimeout(r, 25));
  }
}

Deno.test("migrate numbers every night it writes as one sequence in night order", async () => {
  await using tmp = await tempDir();
  const src = join(tmp.path, "legacy"), dst = join(tmp.path, "site");
  await legacyStore(src, 3, 4);
  await migrate(src, dst);
  assert.deepEqual(await seqsByFile(dst), [[1, 2, 3, 4], [5, 6, 7, 8], [9, 10, 11, 12]]);
});

Deno.test("migrate numbers the nights as one sequence on the spill path too", async () => {
  await using tmp = await tempDir();
  const src = join(tmp.path, "legacy"), dst = join(tmp.path, "site");
  await Deno.mkdir(src);
  // A date that goes back to a night already written sends the migration down the spill path.
  await Deno.writeTextFile(
    join(src, "weather.json"),
    [
      record("a", "2024-03-01T22:00:00"),
      record("b", "2024-03-02T22:00:00"),
      record("c", "2024-03-01T23:00:00"),
      record("d", "2024-03-03T22:00:00"),
    ].join("\n") + "\n",
  );
  await migrate(src, dst);
  assert.deepEqual(await seqsByFile(dst), [[1, 2], [3], [4]]);
});

Deno.test("migrate continues after the highest seq the destination holds, compressed nights and the seq mark included", async () => {
  await using tmp = await tempDir();
  const src = join(tmp.path, "legacy"), dst = join(tmp.path, "site");
  await legacyStore(src, 2, 2);
  await Deno.mkdir(dst);
  const line = (seq: number) =>
    `{"seq":${seq},"ts":"2026-01-01T20:00:00.000Z","type":"weather","data":{},"meta":{}}\n`;
  await Deno.writeFile(
    join(dst, "site_20260101.ndjson.gz"),
    gzipSync(new TextEncoder().encode(line(40) + line(41))),
  );
  await Deno.writeTextFile(join(dst, "site_20260102.ndjson"), line(42));
  assert.deepEqual((await migrate(src, dst)).files.map((f) => f.lines), [2, 2]);
  assert.deepEqual((await seqsByFile(dst)).slice(0, 2), [[43, 44], [45, 46]]);
  // The seq mark now covers them, so a service resumes above them whatever it compresses.
  assert.deepEqual(JSON.parse(await Deno.readTextFile(join(dst, ".seq-mark.json"))), { seq: 46 });

  // Above a seq mark that is higher than any file, too.
  await using tmp2 = await tempDir();
  const dst2 = join(tmp2.path, "site");
  await Deno.mkdir(dst2);
  await Deno.writeTextFile(join(dst2, "site_20260102.ndjson"), line(5));
  await Deno.writeTextFile(join(dst2, ".seq-mark.json"), '{"seq":1029}');
  await migrate(src, dst2);
  assert.deepEqual((await seqsByFile(dst2)).slice(0, 2), [[1030, 1031], [1032, 1033]]);
});

/**
 * A live site (one event, seq 1) that 5 migrated nights went into, started once (which
 * compresses the 3 oldest: retention keeps the newest `--compress-after` + 1 nights that hold data
 * plain, docs/history.md) and stopped, then started again without its checkpoint (as after a crash).
 */
async function migratedLiveSite(tmp: string): Promise<string> {
  const src = join(tmp, "legacy"), site = join(tmp, "site");
  await legacyStore(src, 5, 2);
  {
    await using server = await testServer({ siteDir: site });
    const live = await postJson(`${server.url}/event`, { type: "weather", data: { wind_mps: 9 } });
    assert.equal((live.body as { seq: number }).seq, 1);
  }
  await migrate(src, site);
  assert.deepEqual((await seqsByFile(site)).slice(0, 3), [[2, 3], [4, 5], [6, 7]]);
  {
    // This start compresses the oldest migrated nights (--compress-after 2).
    await using _server = await testServer({ siteDir: site });
    const oldest = ["20240301", "20240302", "20240303"].map((d) => `site_${d}.ndjson`);
    await waitFor(
      "the oldest migrated nights to be compressed",
      async () => {
        const plain = await siteFiles(site);
        return oldest.every((name) => !plain.includes(name));
      },
    );
  }
  // Without a checkpoint, compressed older nights count as seq 0 at the resume: only the seq
  // mark still says that 2..7 are taken.
  await Deno.remove(join(site, ".snapshot.json"));
  return site;
}

Deno.test("a service on a site migrated into resumes above the migrated seqs after they are compressed", async () => {
  await using tmp = await tempDir();
  const site = await migratedLiveSite(tmp.path);
  await using server = await testServer({ siteDir: site });
  const next = await postJson(`${server.url}/event`, { type: "weather", data: { wind_mps: 3 } });
  assert.equal((next.body as { seq: number }).seq, 12);
});

Deno.test("a service on a site migrated into keeps its own current values, not the migrated ones of higher seq", async () => {
  await using tmp = await tempDir();
  const site = await migratedLiveSite(tmp.path);
  await using server = await testServer({ siteDir: site });
  const current = await getJson(`${server.url}/current/weather`);
  assert.deepEqual((current.body as { data: unknown }).data, { wind_mps: 9 });
});

Deno.test("a service restarting from its checkpoint after a migration into its site keeps its own current values", async () => {
  await using tmp = await tempDir();
  const src = join(tmp.path, "legacy"), site = join(tmp.path, "site");
  await legacyStore(src, 3, 2);
  {
    await using server = await testServer({ siteDir: site });
    await postJson(`${server.url}/event`, { type: "weather", data: { wind_mps: 9 } });
  }
  await migrate(src, site);
  // The checkpoint covers seq 1; the migrated lines 2..7 come after it in seq.
  await using server = await testServer({ siteDir: site });
  const current = await getJson(`${server.url}/current/weather`);
  assert.deepEqual((current.body as { data: unknown }).data, { wind_mps: 9 });
});
