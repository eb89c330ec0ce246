/**
 * Tests of `store/writer.ts`: one append-only file, its torn-tail recovery and its writer.
 * @module
 */

import assert from "node:assert/strict";
import { join } from "node:path";
import { NdjsonWriter, recoverTornTail } from "../../store/writer.ts";
import { WriteError } from "../../core/errors.ts";
import { tempDir } from "../_shared/util.ts";

const encoder = new TextEncoder();

Deno.test("recoverTornTail() moves the bytes after the last newline to .torn and truncates", async () => {
  await using dir = await tempDir();
  const path = join(dir.path, "site_20260101.ndjson");
  const whole = '{"seq":1}\n{"seq":2}\n';
  const tail = '{"seq":3,"ts":"2026-01-';
  await Deno.writeTextFile(path, whole + tail);
  assert.equal(await recoverTornTail(path), encoder.encode(tail).length);
  assert.equal(await Deno.readTextFile(path), whole);
  assert.equal(await Deno.readTextFile(`${path}.torn`), tail);
});

Deno.test("recoverTornTail() leaves a file that ends in a newline alone", async () => {
  await using dir = await tempDir();
  const path = join(dir.path, "a.ndjson");
  await Deno.writeTextFile(path, '{"seq":1}\n');
  assert.equal(await recoverTornTail(path), 0);
  assert.equal(await Deno.readTextFile(path), '{"seq":1}\n');
  await assert.rejects(Deno.stat(`${path}.torn`), Deno.errors.NotFound);
});

Deno.test("recoverTornTail() moves a whole file without any newline", async () => {
  await using dir = await tempDir();
  const path = join(dir.path, "a.ndjson");
  await Deno.writeTextFile(path, "x".repeat(70_000)); // longer than one 64 KiB scan chunk
  assert.equal(await recoverTornTail(path), 70_000);
  assert.equal((await Deno.stat(path)).size, 0);
  assert.equal((await Deno.stat(`${path}.torn`)).size, 70_000);
});

Deno.test("NdjsonWriter.open() recovers a torn tail before appending", async () => {
  await using dir = await tempDir();
  const path = join(dir.path, "t.ndjson");
  await Deno.writeTextFile(path, '{"seq":1}\n{"se');
  const writer = await NdjsonWriter.open(path, "never");
  await writer.append(encoder.encode('{"seq":2}\n'));
  await writer.close();
  assert.equal(await Deno.readTextFile(path), '{"seq":1}\n{"seq":2}\n');
  assert.equal(await Deno.readTextFile(`${path}.torn`), '{"se');
});

const line = (seq: number) => encoder.encode(`{"seq":${seq}}\n`);

Deno.test("NdjsonWriter.verify() recreates a deleted file with the lines written since the last check", async () => {
  await using dir = await tempDir();
  const path = join(dir.path, "site_20260101.ndjson");
  const writer = await NdjsonWriter.open(path, "never");
  try {
    await writer.append(line(1));
    assert.equal(await writer.verify(), undefined);
    await writer.append(line(2));
    await Deno.remove(path);
    await writer.append(line(3)); // acknowledged into the deleted inode
    const message = await writer.verify();
    assert.match(message ?? "", /was deleted while the service had it open/);
    assert.ok(message?.includes(path), message ?? "");
    await writer.append(line(4));
    assert.equal(await Deno.readTextFile(path), '{"seq":2}\n{"seq":3}\n{"seq":4}\n');
  } finally {
    await writer.close();
  }
});

Deno.test("NdjsonWriter.verify() leaves a renamed file its lines and starts a new one at the path", async () => {
  await using dir = await tempDir();
  const path = join(dir.path, "site_20260101.ndjson");
  const writer = await NdjsonWriter.open(path, "never");
  try {
    await writer.append(line(1));
    await Deno.rename(path, `${path}.1`);
    await writer.append(line(2));
    assert.match((await writer.verify()) ?? "", /renamed or moved away.*old file keeps/);
    await writer.append(line(3));
    assert.equal(await Deno.readTextFile(`${path}.1`), '{"seq":1}\n{"seq":2}\n');
    assert.equal(await Deno.readTextFile(path), '{"seq":3}\n');
  } finally {
    await writer.close();
  }
});

Deno.test("NdjsonWriter.verify() recreates a deleted directory", async () => {
  await using dir = await tempDir();
  const runDir = join(dir.path, "r1");
  await Deno.mkdir(runDir);
  const path = join(runDir, "telemetry.ndjson");
  const writer = await NdjsonWriter.open(path, "interval");
  try {
    await writer.verify();
    await writer.append(line(1));
    await Deno.remove(runDir, { recursive: true });
    assert.match((await writer.verify()) ?? "", /recreated .*r1 and the file, copied the 10 bytes/);
    assert.equal(await Deno.readTextFile(path), '{"seq":1}\n');
  } finally {
    await writer.close();
  }
});

Deno.test("NdjsonWriter.verify() refuses a directory in the file's place until it is gone", async () => {
  await using dir = await tempDir();
  const path = join(dir.path, "site_20260101.ndjson");
  const writer = await NdjsonWriter.open(path, "never");
  try {
    await writer.append(line(1));
    await Deno.remove(path);
    await Deno.mkdir(path);
    await assert.rejects(
      writer.verify(),
      (err: unknown) =>
        err instanceof WriteError && /replaced by a directory; move that away/.test(err.message),
    );
    await Deno.remove(path);
    assert.match((await writer.verify()) ?? "", /was deleted/);
    assert.equal(await Deno.readTextFile(path), '{"seq":1}\n');
  } finally {
    await writer.close();
  }
});

Deno.test("NdjsonWriter.verify() does not follow a directory replaced by a symlink", async () => {
  await using dir = await tempDir();
  const siteDir = join(dir.path, "site");
  await Deno.mkdir(siteDir);
  await Deno.mkdir(join(dir.path, "other"));
  const path = join(siteDir, "site_20260101.ndjson");
  const writer = await NdjsonWriter.open(path, "never");
  try {
    await writer.append(line(1));
    await Deno.remove(siteDir, { recursive: true });
    await Deno.symlink(join(dir.path, "other"), siteDir);
    await assert.rejects(writer.verify(), (err: unknown) =>
      err instanceof WriteError &&
      /replaced by a symbolic link, which is not followed/.test(err.message));
    assert.deepEqual(await Array.fromAsync(Deno.readDir(join(dir.path, "other"))), []);
  } finally {
    await writer.close();
  }
});

Deno.test("NdjsonWriter.open() names the file in a WriteError when it cannot be opened", async () => {
  await using dir = await tempDir();
  const path = join(dir.path, "a.ndjson");
  await Deno.mkdir(path);
  await assert.rejects(
    NdjsonWriter.open(path, "never"),
    (err: unknown) =>
      err instanceof WriteError && err.path === path &&
      err.message.startsWith(`Cannot open ${path}`),
  );
});
