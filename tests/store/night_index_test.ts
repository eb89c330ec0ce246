/**
 * `store/night_index.ts`: a night's time index is built once, read through afterwards, and never
 * trusted blindly: a truncated, stale, hand-edited, garbage or foreign index file costs a whole
 * read, never a line of an answer.
 */

import assert from "node:assert/strict";
import { join } from "node:path";
import { readHistoryLines, readHistoryRegions } from "../../store/history.ts";
import { nightIndexPath, readNightIndex } from "../../store/night_index.ts";
import { storedFile } from "../../store/site_files.ts";
import { compressFile } from "../../store/compress.ts";
import { runRetentionPass } from "../../store/retention.ts";
import { tempDir } from "../_shared/util.ts";
import { formatTimestamp } from "../../wire/event.ts";
import { ODD_T0, oddLines, writeOddNight } from "../_shared/odd_night.ts";

const HOUR = 3_600_000;
/** The last hour of the seeded night (6,000 lines about 2 s apart, a clock stepped back). */
const LAST_HOUR = { since: ODD_T0 + 110 * 60_000, until: ODD_T0 + 4 * HOUR };

async function lines(dir: string, range: object = LAST_HOUR): Promise<string[]> {
  return await Array.fromAsync(readHistoryLines(dir, { timeZone: "UTC", ...range }));
}

/** How many bytes a range read takes from the files. */
async function bytesRead(dir: string, range: object = LAST_HOUR): Promise<number> {
  let n = 0;
  for await (const { bytes } of readHistoryRegions(dir, { timeZone: "UTC", ...range }).regions) {
    n += bytes.length;
  }
  return n;
}

const indexPath = (dir: string) => nightIndexPath("20260510", dir);

/** A site directory with the seeded night, its answer read before any index existed. */
async function seeded(dir: string): Promise<{ path: string; size: number; answer: string[] }> {
  const path = await writeOddNight(dir, oddLines(35, 6000));
  const answer = await lines(dir);
  return { path, size: (await Deno.stat(path)).size, answer };
}

Deno.test("a range read indexes a night once, and later reads only the blocks of its range", async () => {
  await using tmp = await tempDir();
  const { path, size, answer } = await seeded(tmp.path);
  assert.ok(answer.length > 1000);
  assert.ok(await readNightIndex(storedFile(path)), "the first read wrote the index");
  assert.deepEqual(await lines(tmp.path), answer);
  const read = await bytesRead(tmp.path);
  assert.ok(read < size / 2, `read ${read} of ${size} bytes`);
  // A range no line of the night is in reads none of its blocks.
  const none = { since: ODD_T0 + 20 * HOUR, until: ODD_T0 + 21 * HOUR };
  assert.ok(await bytesRead(tmp.path, none) < 1000);
  assert.deepEqual(await lines(tmp.path, none), []);
});

Deno.test("a truncated index file is ignored, and the night read whole and indexed again", async () => {
  await using tmp = await tempDir();
  const { path, size, answer } = await seeded(tmp.path);
  const text = await Deno.readTextFile(indexPath(tmp.path));
  await Deno.writeTextFile(indexPath(tmp.path), text.slice(0, text.length / 2));
  assert.equal(await readNightIndex(storedFile(path)), undefined);
  assert.equal(await bytesRead(tmp.path), size - '{"seq":99999,"ts":"2026-05-1'.length);
  assert.deepEqual(await lines(tmp.path), answer);
  assert.ok(await readNightIndex(storedFile(path)), "indexed again");
});

Deno.test("a garbage index file is ignored", async () => {
  await using tmp = await tempDir();
  const { path, answer } = await seeded(tmp.path);
  await Deno.writeFile(indexPath(tmp.path), crypto.getRandomValues(new Uint8Array(5000)));
  assert.equal(await readNightIndex(storedFile(path)), undefined);
  assert.deepEqual(await lines(tmp.path), answer);
});

Deno.test("a hand-edited index (a block's times changed, its checksum not) is ignored", async () => {
  await using tmp = await tempDir();
  const { path, answer } = await seeded(tmp.path);
  const index = JSON.parse(await Deno.readTextFile(indexPath(tmp.path)));
  // Every block said to end before the range: read through, the answer would be empty.
  for (const block of index.blocks) block[1] = block[2] = "2000-01-01T00:00:00.000Z";
  await Deno.writeTextFile(indexPath(tmp.path), JSON.stringify(index));
  assert.equal(await readNightIndex(storedFile(path)), undefined);
  assert.deepEqual(await lines(tmp.path), answer);
});

Deno.test("a stale index (the night changed in place, the same size) is ignored", async () => {
  await using tmp = await tempDir();
  const { path } = await seeded(tmp.path);
  // A line early in the night moved into the range: the same bytes count, another time.
  const text = await Deno.readTextFile(path);
  const at = text.indexOf('"ts":"2026-05-10T13:') + 6;
  const moved = formatTimestamp(LAST_HOUR.since + 1000);
  await Deno.writeTextFile(path, text.slice(0, at) + moved + text.slice(at + 24));
  await Deno.utime(path, new Date(), new Date(Date.now() + 5000));
  assert.equal(await readNightIndex(storedFile(path)), undefined);
  const got = await lines(tmp.path);
  assert.ok(got.some((line) => line.includes(moved)), "the moved line is in the answer");
  await Deno.remove(indexPath(tmp.path));
  assert.deepEqual(got, await lines(tmp.path));
});

Deno.test("an index of another file (the night replaced by a copy) is ignored", async () => {
  await using tmp = await tempDir();
  const { path, answer } = await seeded(tmp.path);
  const info = await Deno.stat(path);
  await Deno.copyFile(path, path + ".new");
  await Deno.rename(path + ".new", path);
  await Deno.utime(path, info.atime!, info.mtime!);
  assert.equal(await readNightIndex(storedFile(path)), undefined);
  assert.deepEqual(await lines(tmp.path), answer);
});

Deno.test("a night still being written: lines past the index are read, and the index grows", async () => {
  await using tmp = await tempDir();
  const all = oddLines(36, 8000);
  const path = await writeOddNight(tmp.path, all.slice(0, 6000), "");
  const whole = { since: ODD_T0, until: ODD_T0 + 30 * HOUR };
  const before = await lines(tmp.path, whole);
  const covered = (await readNightIndex(storedFile(path)))!.size;
  // Appended after the index was written: more than an eighth of what it covers.
  await Deno.writeTextFile(path, all.slice(6000).join("\n") + "\n", { append: true });
  const got = await lines(tmp.path, whole);
  assert.ok(got.length > before.length + 1000);
  const grown = (await readNightIndex(storedFile(path)))!.size;
  assert.ok(grown > covered && grown === (await Deno.stat(path)).size);
  await Deno.remove(indexPath(tmp.path));
  assert.deepEqual(got, await lines(tmp.path, whole));
});

Deno.test("compressing a night removes its index, and retention an index without its night", async () => {
  await using tmp = await tempDir();
  const { path } = await seeded(tmp.path);
  await compressFile(path);
  await assert.rejects(Deno.stat(indexPath(tmp.path)), Deno.errors.NotFound);
  const orphan = nightIndexPath("20260401", tmp.path);
  await Deno.writeTextFile(orphan, "{}");
  await runRetentionPass({ siteDir: tmp.path, timeZone: "UTC", compressAfter: 1000 });
  await assert.rejects(Deno.stat(orphan), Deno.errors.NotFound);
});

Deno.test("a reader that may not write reads the night without an index and writes none", async () => {
  await using tmp = await tempDir();
  await using scripts = await tempDir();
  await writeOddNight(tmp.path, oddLines(35, 2000));
  const script = join(scripts.path, "read.ts");
  const module = new URL("../../store/history.ts", import.meta.url).href;
  await Deno.writeTextFile(
    script,
    `import { readHistoryLines } from "${module}";
let n = 0;
const range = { timeZone: "UTC", since: ${ODD_T0 + HOUR} };
for await (const _ of readHistoryLines(${JSON.stringify(tmp.path)}, range)) n++;
console.log(n);`,
  );
  const out = await new Deno.Command(Deno.execPath(), {
    args: ["run", "--no-prompt", `--allow-read=${tmp.path}`, script],
    stdout: "piped",
    stderr: "piped",
  }).output();
  assert.equal(out.code, 0, new TextDecoder().decode(out.stderr));
  await assert.rejects(Deno.stat(indexPath(tmp.path)), Deno.errors.NotFound);
  const expected = await lines(tmp.path, { since: ODD_T0 + HOUR, until: undefined });
  assert.equal(Number(new TextDecoder().decode(out.stdout)), expected.length);
});
