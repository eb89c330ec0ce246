/**
 * A migration's seqs (docs/migration.md): nights are numbered in night order whatever the form of
 * their dates, the same on the merge path and on the spill path. Real temp dirs.
 * @module
 */

import assert from "node:assert/strict";
import { join } from "node:path";
import { migrate } from "../../migrate.ts";
import { MERGE_MAX_INPUTS } from "../../migrate/input_merge.ts";
import { readLines, tempDir } from "../_shared/util.ts";

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

/** The seqs of every plain site file of a directory, in night order, as one list. */
async function seqsInNightOrder(dir: string): Promise<number[]> {
  const bytes = await dirBytes(dir);
  return [...bytes.keys()].filter((n) => /^site_\d{8}\.ndjson$/.test(n)).flatMap((name) =>
    (bytes.get(name) as string).trimEnd().split("\n").map((l) => JSON.parse(l).seq as number)
  );
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
