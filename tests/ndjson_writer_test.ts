/**
 * Tests of `_ndjson_writer.ts`: one append-only file, its torn-tail recovery and its writer.
 * @module
 */

import assert from "node:assert/strict";
import { join } from "node:path";
import { NdjsonWriter, recoverTornTail } from "../_ndjson_writer.ts";
import { tempDir } from "./_util.ts";

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
