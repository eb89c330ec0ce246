import assert from "node:assert/strict";
import { join } from "node:path";
import {
  DamagedFileError,
  findStored,
  listRunFiles,
  listSiteFiles,
  OffsetMismatchError,
  readLines,
  type StoredFile,
  storedFile,
} from "../../store/site_files.ts";
import { compressFile } from "../../store/compress.ts";
import { tempDir } from "../_shared/util.ts";
import { Rng, seedFromEnv } from "../_shared/fault_util.ts";

const encoder = new TextEncoder();

async function collect(file: StoredFile, options = {}): Promise<{ text: string; end: number }[]> {
  const out: { text: string; end: number }[] = [];
  for await (const batch of readLines(file, options)) out.push(...batch);
  return out;
}

async function gzip(path: string): Promise<string> {
  const gz = await compressFile(path);
  assert.ok(gz);
  return gz;
}

/** The expected lines and byte ends of a text, computed independently with TextEncoder. */
function expected(text: string): { text: string; end: number }[] {
  const parts = text.split("\n");
  parts.pop(); // after the last "\n": a torn tail or nothing
  let end = 0;
  return parts.map((line) => {
    end += encoder.encode(line).length + 1;
    return { text: line, end };
  });
}

Deno.test("readLines() yields each complete line with its end offset and skips a torn last line", async () => {
  await using tmp = await tempDir();
  const path = join(tmp.path, "site_20260510.ndjson");
  await Deno.writeTextFile(path, '{"seq":1}\n{"seq":2}\n{"seq":3,"ts');
  assert.deepEqual(await collect(storedFile(path)), [
    { text: '{"seq":1}', end: 10 },
    { text: '{"seq":2}', end: 20 },
  ]);
});

Deno.test("readLines() counts offsets in bytes for multi-byte text at any chunk size (seeded)", async () => {
  await using tmp = await tempDir();
  const rng = new Rng(seedFromEnv(17));
  const rand = () => rng.next();
  const alphabet = ["a", "é", "€", "😀", "\r", '"', " ", "\ufeff", "z"];
  for (let round = 0; round < 20; round++) {
    let text = "";
    const lines = 1 + Math.floor(rand() * 30);
    for (let i = 0; i < lines; i++) {
      const n = Math.floor(rand() * 40);
      for (let j = 0; j < n; j++) text += alphabet[Math.floor(rand() * alphabet.length)];
      text += "\n";
    }
    if (rand() < 0.5) text += "torn…";
    const path = join(tmp.path, `site_2026051${round % 10}.ndjson`);
    await Deno.writeTextFile(path, text);
    const chunkSize = 1 + Math.floor(rand() * 64);
    assert.deepEqual(
      await collect(storedFile(path), { chunkSize }),
      expected(text),
      `round ${round}`,
    );
    const gz = await gzip(path);
    assert.deepEqual(await collect(storedFile(gz), { chunkSize }), expected(text), `gz ${round}`);
    await Deno.remove(gz);
  }
});

Deno.test("readLines() reads a .gz with the same lines and offsets as its original", async () => {
  await using tmp = await tempDir();
  const path = join(tmp.path, "site_20260510.ndjson");
  const lines = Array.from(
    { length: 5000 },
    (_, i) => JSON.stringify({ seq: i + 1, x: "é".repeat(i % 7) }),
  );
  await Deno.writeTextFile(path, lines.join("\n") + "\n");
  const plain = await collect(storedFile(path));
  const gz = await collect(storedFile(await gzip(path)));
  assert.equal(gz.length, 5000);
  assert.deepEqual(gz, plain);
});

Deno.test("readLines() continues from a cursor's offset in the plain and the compressed form", async () => {
  await using tmp = await tempDir();
  const path = join(tmp.path, "telemetry.ndjson");
  await Deno.writeTextFile(path, "one\ntwo\nthree\n");
  assert.deepEqual(await collect(storedFile(path), { offset: 4 }), [
    { text: "two", end: 8 },
    { text: "three", end: 14 },
  ]);
  assert.deepEqual(await collect(storedFile(path), { offset: 14 }), []);
  const gz = await gzip(path);
  assert.deepEqual(await collect(storedFile(gz), { offset: 8 }), [{ text: "three", end: 14 }]);
});

Deno.test("readLines() refuses an offset that is not just after a line end, or past the end", async () => {
  await using tmp = await tempDir();
  const path = join(tmp.path, "telemetry.ndjson");
  await Deno.writeTextFile(path, "one\ntwo\n");
  for (const file of [storedFile(path)]) {
    await assert.rejects(() => collect(file, { offset: 5 }), OffsetMismatchError);
    await assert.rejects(
      () => collect(file, { offset: 9 }),
      (err: Error) => err instanceof OffsetMismatchError && /holds 8 bytes/.test(err.message),
    );
  }
  const gz = storedFile(await gzip(path));
  await assert.rejects(() => collect(gz, { offset: 2 }), OffsetMismatchError);
  await assert.rejects(() => collect(gz, { offset: 100 }), OffsetMismatchError);
  await assert.rejects(() => collect(gz, { offset: -1 }), RangeError);
});

Deno.test("readLines() followed from the last end sees a line once it is complete", async () => {
  await using tmp = await tempDir();
  const path = join(tmp.path, "site_20260510.ndjson");
  await Deno.writeTextFile(path, 'a\n{"seq":2,"half');
  const first = await collect(storedFile(path));
  assert.deepEqual(first, [{ text: "a", end: 2 }]);
  await Deno.writeTextFile(path, '"}\n', { append: true });
  assert.deepEqual(await collect(storedFile(path), { offset: first.at(-1)!.end }), [
    { text: '{"seq":2,"half"}', end: 19 },
  ]);
});

Deno.test("listSiteFiles() orders nights and reads the plain file when a compression stopped before removing it", async () => {
  await using tmp = await tempDir();
  const a = join(tmp.path, "site_20260510.ndjson");
  await Deno.writeTextFile(a, "x\ny\n");
  const gz = await gzip(a);
  // As a kill between the rename and the removal leaves it: both forms, the same lines.
  await Deno.writeTextFile(a, "x\ny\n");
  await Deno.writeTextFile(join(tmp.path, "site_20260509.ndjson"), "w\n");
  const files = await listSiteFiles(tmp.path);
  assert.deepEqual(files.map((f) => f.name), ["site_20260509.ndjson", "site_20260510.ndjson"]);
  assert.ok(await Deno.lstat(gz));
});

Deno.test("listSiteFiles() reads both forms, .gz first, when a night was written again after compression", async () => {
  await using tmp = await tempDir();
  const a = join(tmp.path, "site_20260510.ndjson");
  await Deno.writeTextFile(a, "old\n");
  await gzip(a);
  await Deno.writeTextFile(a, "new\n");
  const files = await listSiteFiles(tmp.path);
  assert.deepEqual(files.map((f) => f.name), ["site_20260510.ndjson.gz", "site_20260510.ndjson"]);
  const found = await findStored(tmp.path, "site_20260510.ndjson");
  assert.equal(found?.name, "site_20260510.ndjson");
});

Deno.test("listSiteFiles() does not follow a link named like a site file out of the directory", async () => {
  await using tmp = await tempDir();
  await using outside = await tempDir();
  const secret = join(outside.path, "secret.ndjson");
  await Deno.writeTextFile(secret, '{"seq":1,"secret":true}\n');
  await Deno.symlink(secret, join(tmp.path, "site_20260510.ndjson"));
  await Deno.symlink(secret, join(tmp.path, "site_20260511.ndjson.gz"));
  await Deno.writeTextFile(join(tmp.path, "site_20260512.ndjson"), "mine\n");
  assert.deepEqual((await listSiteFiles(tmp.path)).map((f) => f.name), ["site_20260512.ndjson"]);
  assert.equal(await findStored(tmp.path, "site_20260510.ndjson"), undefined);
});

Deno.test("listSiteFiles() skips nights the filter refuses without opening them", async () => {
  await using tmp = await tempDir();
  // Not gzip: opening it would fail.
  await Deno.writeTextFile(join(tmp.path, "site_20200101.ndjson.gz"), "not gzip");
  await Deno.writeTextFile(join(tmp.path, "site_20260510.ndjson"), "a\n");
  const files = await listSiteFiles(tmp.path, { nights: (n) => n >= "20260101" });
  assert.deepEqual(files.map((f) => f.name), ["site_20260510.ndjson"]);
});

Deno.test("listRunFiles() finds a run's file in either form and nothing in an empty directory", async () => {
  await using tmp = await tempDir();
  assert.deepEqual(await listRunFiles(tmp.path), []);
  const path = join(tmp.path, "telemetry.ndjson");
  await Deno.writeTextFile(path, "r\n");
  assert.deepEqual((await listRunFiles(tmp.path)).map((f) => f.name), ["telemetry.ndjson"]);
  await gzip(path);
  assert.deepEqual((await listRunFiles(tmp.path)).map((f) => f.name), ["telemetry.ndjson.gz"]);
});

Deno.test("readLines() reports a damaged .gz as a DamagedFileError after the lines it could read", async () => {
  await using tmp = await tempDir();
  const path = join(tmp.path, "site_20260510.ndjson");
  await Deno.writeTextFile(
    path,
    Array.from({ length: 20000 }, (_, i) => `line ${i}`).join("\n") + "\n",
  );
  const gz = await gzip(path);
  const bytes = await Deno.readFile(gz);
  await Deno.writeFile(gz, bytes.subarray(0, Math.floor(bytes.length / 2)));
  await assert.rejects(() => collect(storedFile(gz)), DamagedFileError);
});

Deno.test("readLines() hands out a line longer than many steps whole, with its end", async () => {
  await using tmp = await tempDir();
  const path = join(tmp.path, "site_20260510.ndjson");
  const long = JSON.stringify({ seq: 2, pad: "é".repeat(3_000_000) });
  await Deno.writeTextFile(path, `a\n${long}\nb\n`);
  for (const form of ["plain", "gz"]) {
    const file = form === "gz" ? storedFile(await gzip(path)) : storedFile(path);
    const lines = await collect(file);
    assert.deepEqual(lines.map((l) => l.text.length), [1, long.length, 1]);
    assert.equal(lines[1]!.text, long);
    assert.equal(lines[2]!.end, 2 + encoder.encode(long).length + 1 + 2);
  }
});
