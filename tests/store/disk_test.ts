/** Tests of `store/disk.ts`: free space on the site directory's file system. @module */

import assert from "node:assert/strict";
import { diskFreeBytes } from "../../store/disk.ts";
import { tempDir } from "../_shared/util.ts";

Deno.test("diskFreeBytes() agrees with df for the site directory's file system", async () => {
  await using dir = await tempDir();
  const free = await diskFreeBytes(dir.path);
  const df = new Deno.Command("df", { args: ["-B1", "--output=avail", dir.path] }).outputSync();
  const avail = Number(new TextDecoder().decode(df.stdout).trim().split("\n")[1]);
  assert.ok(free !== null && free > 0);
  // Other processes write meanwhile: the two readings agree to within 64 MiB.
  assert.ok(Math.abs(free - avail) < 64 * 1024 ** 2, `${free} vs ${avail}`);
});

Deno.test("diskFreeBytes() answers null for a directory that does not exist", async () => {
  await using dir = await tempDir();
  assert.equal(await diskFreeBytes(`${dir.path}/missing`), null);
});
