/**
 * A migration run again into its own output (docs/migration.md, "Options and safety"): the same
 * input gives byte-identical files and seq mark, with or without `--force`, on the merge path and
 * on the spill path; nights are numbered in night order whatever the form of their dates; the
 * service's own lines in the destination are never renumbered, replaced or lost. Real temp dirs,
 * real servers on 127.0.0.1 port 0, the CLI as a child process.
 * @module
 */

import assert from "node:assert/strict";
import { join } from "node:path";
import { gzipSync } from "node:zlib";
import { migrate, MigrateConflictError, MigrateError } from "../../migrate.ts";
import { MERGE_MAX_INPUTS } from "../../migrate/input_merge.ts";
import { CLI, postJson, readLines, tempDir, testServer } from "../_shared/util.ts";

const pad = (n: number, width = 2) => String(n).padStart(width, "0");

/** A date of `ms` (UTC) in one of the forms the legacy writers produced, by `form`. */
function legacyDate(ms: number, form: number): string {
  const d = new Date(ms);
  const day = `${d.getUTCFullYear()}-${pad(d.getUTCMonth() + 1)}-${pad(d.getUTCDate())}`;
  const time = `${pad(d.getUTCHours())}:${pad(d.getUTCMinutes())}:${pad(d.getUTCSeconds())}`;
  const local = new Date(ms - 5 * 3_600_000); // the same instant written at -05:00
  const localDay = `${local.getUTCFullYear()}-${pad(local.getUTCMonth() + 1)}-${
    pad(local.getUTCDate())
  }`;
  const localTime = `${pad(local.getUTCHours())}:${pad(d.getUTCMinutes())}:${
    pad(d.getUTCSeconds())
  }`;
  switch (form % 6) {
    case 0:
      return `${day}T${time}.${pad(d.getUTCMilliseconds(), 3)}123`; // isoformat()
    case 1:
      return `${day} ${time}`; // str()
    case 2:
      return `${day}T${time}Z`;
    case 3:
      return `${day} ${time}.5+00:00`;
    case 4:
      return `${localDay}T${localTime}-05:00`;
    default:
      return `${day}T${time}.${pad(d.getUTCMilliseconds(), 3)}987654`;
  }
}

interface Rec {
  readonly id: string;
  readonly type: string;
  readonly ms: number;
}

function line(r: Rec, form: number): string {
  return `{"_id": "${r.id}", "type": "${r.type}", "date": "${
    legacyDate(r.ms, form)
  }", "data": {"n": ${form}, "note": "caf\\u00e9"}}`;
}

const HOUR = 3_600_000;

/**
 * Records spread over 2019 to 2025, every instant distinct, as collections hold them: `weather` in
 * time order over 2023-2025; `dome` in 2025, then 2019 records appended after them (a clock that
 * was set wrong, fixed by hand), whose nights no other collection has; `archive` starting in 2024
 * and going back to 2020. `scale` divides the counts.
 */
function collections(scale = 1): Record<string, Rec[]> {
  const weather: Rec[] = [], dome: Rec[] = [], archive: Rec[] = [];
  for (let i = 0; i < 150 / scale; i++) {
    weather.push({ id: `w${i}`, type: "weather", ms: Date.UTC(2023, 10, 1) + i * 97 * HOUR });
  }
  for (let i = 0; i < 40 / scale; i++) {
    dome.push({ id: `d${i}`, type: "dome", ms: Date.UTC(2025, 0, 3) + i * 5 * HOUR + 60_000 });
  }
  for (let i = 0; i < 12 / scale; i++) {
    dome.push({ id: `o${i}`, type: "dome", ms: Date.UTC(2019, 5, 1) + i * 7 * HOUR + 120_000 });
  }
  archive.push({ id: "a-first", type: "status", ms: Date.UTC(2024, 2, 1, 22) + 180_000 });
  for (let i = 0; i < 30 / scale; i++) {
    archive.push({ id: `a${i}`, type: "status", ms: Date.UTC(2020, 1, 1) + i * 31 * HOUR });
  }
  return { "weather.json": weather, "sub/dome.json": dome, "old/archive.json": archive };
}

/** Writes the collections, each record's date in a form picked by its position. */
async function writeStore(dir: string, store: Record<string, Rec[]>): Promise<void> {
  let k = 0;
  for (const [rel, recs] of Object.entries(store)) {
    await Deno.mkdir(join(dir, rel, ".."), { recursive: true });
    await Deno.writeTextFile(join(dir, rel), recs.map((r) => line(r, k++)).join("\n") + "\n");
  }
}

/**
 * The same records split over more collections than a migration merges at once, so it takes
 * the spill path (docs/migration.md, "Speed and memory"). Every instant is distinct, so which
 * file a record comes from cannot change its place.
 */
async function writeSplitStore(dir: string, store: Record<string, Rec[]>): Promise<void> {
  const parts: Record<string, Rec[]> = {};
  const forms = new Map<Rec, number>();
  let k = 0;
  for (const recs of Object.values(store)) for (const r of recs) forms.set(r, k++);
  let i = 0;
  for (const recs of Object.values(store)) {
    for (const r of recs) {
      (parts[`split/c${pad(i++ % (MERGE_MAX_INPUTS + 1), 3)}.json`] ??= []).push(r);
    }
  }
  for (const [rel, recs] of Object.entries(parts)) {
    await Deno.mkdir(join(dir, rel, ".."), { recursive: true });
    await Deno.writeTextFile(
      join(dir, rel),
      recs.map((r) => line(r, forms.get(r) as number)).join("\n") + "\n",
    );
  }
}

/** Every file of a directory (not below it) with its bytes, by name. */
async function dirBytes(dir: string): Promise<Map<string, string>> {
  const out = new Map<string, string>();
  const names: string[] = [];
  for await (const e of Deno.readDir(dir)) if (e.isFile) names.push(e.name);
  for (const name of names.sort()) {
    out.set(name, new TextDecoder().decode(await Deno.readFile(join(dir, name))));
  }
  return out;
}

/** Asserts `seqs` run `from`, `from + 1`, ... naming the first place they do not. */
function assertRun(seqs: readonly number[], from: number): void {
  const broken = seqs.findIndex((seq, i) => seq !== from + i);
  assert.equal(broken, -1, `seq ${seqs[broken]} at ${broken}, expected ${from + broken}`);
}

/** Asserts two directories' files hold the same bytes, naming the files that differ. */
function assertSameFiles(actual: Map<string, string>, expected: Map<string, string>): void {
  const names = [...new Set([...actual.keys(), ...expected.keys()])].sort();
  const differ = names.filter((name) => actual.get(name) !== expected.get(name));
  assert.deepEqual(differ.slice(0, 3), [], `${differ.length} of ${names.length} files differ`);
}

/** The names of the entries of a directory. */
async function names(dir: string): Promise<string[]> {
  const out: string[] = [];
  for await (const e of Deno.readDir(dir)) out.push(e.name);
  return out;
}

/** The seqs of every plain site file of a directory, in night order, as one list. */
async function seqsInNightOrder(dir: string): Promise<number[]> {
  const bytes = await dirBytes(dir);
  return [...bytes.keys()].filter((n) => /^site_\d{8}\.ndjson$/.test(n)).flatMap((name) =>
    (bytes.get(name) as string).trimEnd().split("\n").map((l) => JSON.parse(l).seq as number)
  );
}

/** What a promise rejects with; fails when it resolves. */
function failure(promise: Promise<unknown>): Promise<unknown> {
  return promise.then(() => assert.fail("expected a rejection"), (err: unknown) => err);
}

function migrateCli(args: string[]): Promise<Deno.CommandOutput> {
  return new Deno.Command(Deno.execPath(), {
    args: ["run", "-A", CLI, "telemetry", "migrate", ...args],
    stdout: "piped",
    stderr: "piped",
  }).output();
}

Deno.test("migrate numbers nights in night order when dates in mixed forms go back years in a collection", async () => {
  await using tmp = await tempDir();
  const src = join(tmp.path, "legacy"), dst = join(tmp.path, "site");
  await writeStore(src, collections());

  const summary = await migrate(src, dst);

  const seqs = await seqsInNightOrder(dst);
  assert.equal(seqs.length, summary.records);
  assertRun(seqs, 1);
  const first = summary.files[0]!.name;
  assert.equal(first, "site_20190531.ndjson"); // written at -05:00, the night before in UTC
  assert.equal(JSON.parse((await readLines(join(dst, first)))[0]!).seq, 1);
});

Deno.test("migrate writes the same bytes on the merge path and on the spill path", async () => {
  await using tmp = await tempDir();
  const store = collections();
  const merged = join(tmp.path, "merged"), spilled = join(tmp.path, "spilled");
  await writeStore(join(tmp.path, "a"), store);
  await writeSplitStore(join(tmp.path, "b"), store);

  const m = await migrate(join(tmp.path, "a"), merged);
  const s = await migrate(join(tmp.path, "b"), spilled);

  assert.equal(m.inputs.length, 3);
  assert.equal(s.inputs.length, MERGE_MAX_INPUTS + 1);
  assertSameFiles(await dirBytes(spilled), await dirBytes(merged));
});

for (const path of ["merge", "spill"] as const) {
  Deno.test(`migrate --force of the same input into its own output rewrites every file byte for byte (${path} path)`, async () => {
    await using tmp = await tempDir();
    const src = join(tmp.path, "legacy"), dst = join(tmp.path, "site");
    await (path === "merge" ? writeStore : writeSplitStore)(src, collections());
    await migrate(src, dst);
    const first = await dirBytes(dst);

    await migrate(src, dst, { force: true });

    assertSameFiles(await dirBytes(dst), first);
  });
}

/** The collections migrated into a new site directory. */
async function migratedStore(tmp: string): Promise<{ src: string; site: string }> {
  const src = join(tmp, "legacy"), site = join(tmp, "site");
  await writeStore(src, collections());
  await migrate(src, site);
  return { src, site };
}

async function waitFor(what: string, check: () => Promise<boolean>, ms = 30_000): Promise<void> {
  const until = Date.now() + ms;
  while (!(await check())) {
    if (Date.now() > until) throw new Error(`timed out waiting for ${what}`);
    await new Promise((r) => setTimeout(r, 25));
  }
}

/**
 * A site the service recorded in (seq 1 and 2, one of them kept only by the seq mark), with a
 * legacy store migrated into it, then the service run again: it compresses the migrated nights
 * but the newest (docs/history.md) and records above them.
 */
async function liveSite(tmp: string): Promise<{ src: string; site: string }> {
  const src = join(tmp, "legacy"), site = join(tmp, "site");
  await writeStore(src, collections(5));
  {
    await using server = await testServer({ siteDir: site });
    await postJson(`${server.url}/event`, { type: "weather", data: { wind_mps: 2 } });
    await postJson(`${server.url}/event`, {
      type: "probe",
      data: {},
      store_permanently: false,
    });
  }
  await migrate(src, site);
  {
    await using server = await testServer({ siteDir: site });
    await postJson(`${server.url}/event`, { type: "weather", data: { wind_mps: 3 } });
    await waitFor("the migrated nights to be compressed", async () => {
      const now = await names(site);
      return now.filter((n) => /^site_2019\d{4}\.ndjson\.gz$/.test(n)).length > 0 &&
        now.filter((n) => /^site_\d{8}\.ndjson$/.test(n)).length <= 3;
    });
  }
  return { src, site };
}

Deno.test("obs-utils telemetry migrate --force into a live site keeps every byte, its own lines and the seq mark", async () => {
  await using tmp = await tempDir();
  const { src, site } = await liveSite(tmp.path);
  const before = await dirBytes(site);
  assert.ok(before.has(".seq-mark.json"));

  const r = await migrateCli(["--source", src, "--dest", site, "--force"]);

  assert.equal(r.code, 0, new TextDecoder().decode(r.stderr));
  const after = await dirBytes(site);
  // The lock file names its last holder, whoever that was (docs/storage.md).
  assert.ok(after.delete(".lock") && before.delete(".lock"));
  assertSameFiles(after, before);
});

Deno.test("migrate --force refuses to replace a night that holds lines the service recorded, and keeps them", async () => {
  await using tmp = await tempDir();
  const { src, site } = await migratedStore(tmp.path);
  // The service recorded on the night of 1 June 2019 too (the legacy store and the service ran
  // side by side): a line of its own at the end of that night's file.
  const night = join(site, "site_20190601.ndjson");
  const lines = await readLines(night);
  const lineNo = lines.length + 1;
  lines.push(
    `{"seq":900,"ts":"2019-06-01T23:59:00.000Z","type":"weather","data":{"wind_mps":4},"meta":{}}`,
  );
  await Deno.writeTextFile(night, lines.join("\n") + "\n");
  const before = await dirBytes(site);

  const err = await failure(migrate(src, site, { force: true }));

  assert.ok(err instanceof MigrateError, `${err}`);
  assert.ok(
    (err as Error).message.includes(
      `Cannot replace "${night}": its line ${lineNo} (seq 900) was not written by a migration`,
    ),
    (err as Error).message,
  );
  assertSameFiles(await dirBytes(site), before);
});

Deno.test("migrate refuses a night the service has compressed, and --force of the same input leaves it as it is", async () => {
  await using tmp = await tempDir();
  const { src, site } = await migratedStore(tmp.path);
  const plain = join(site, "site_20190601.ndjson");
  // What the service's compression leaves (docs/history.md).
  await Deno.writeFile(`${plain}.gz`, gzipSync(await Deno.readFile(plain)));
  await Deno.remove(plain);
  const compressed = await dirBytes(site);

  const err = await failure(migrate(src, site));
  assert.ok(err instanceof MigrateConflictError, `${err}`);
  assert.ok(err.files.includes(`${plain}.gz`), `${err.files.length} conflicts, not the .gz`);
  await migrate(src, site, { force: true });

  assertSameFiles(await dirBytes(site), compressed);
});

Deno.test("migrate --force of a changed input keeps the seqs of the nights before the change and numbers the rest after every replaced seq", async () => {
  await using tmp = await tempDir();
  const src = join(tmp.path, "legacy"), dst = join(tmp.path, "site");
  const store = collections();
  await writeStore(src, store);
  const first = await migrate(src, dst);
  const before = await dirBytes(dst);
  // One record of 2024 fixed in the source: it moves by a minute.
  const fixed = store["weather.json"]!.findIndex((r) => new Date(r.ms).getUTCFullYear() === 2024);
  const old = store["weather.json"]![fixed]!;
  store["weather.json"]![fixed] = { ...old, ms: old.ms + 60_000 };
  await writeStore(src, store);

  const second = await migrate(src, dst, { force: true });

  const changed = first.files.findIndex((f) =>
    before.get(f.name)!.includes(`"original_id":"${old.id}"`)
  );
  assert.ok(changed > 0);
  const after = await dirBytes(dst);
  for (const f of first.files.slice(0, changed)) {
    assert.equal(after.get(f.name), before.get(f.name), f.name);
  }
  const seqs = await seqsInNightOrder(dst);
  const kept = first.files.slice(0, changed).reduce((sum, f) => sum + f.lines, 0);
  // Never a seq that named another record, and still one increasing sequence in night order.
  assertRun(seqs.slice(0, kept), 1);
  assertRun(seqs.slice(kept), first.records + 1);
  assert.equal(second.records, first.records);
});
