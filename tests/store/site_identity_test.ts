/**
 * `<site_dir>/.site.json` (docs/storage.md): made once, kept across starts, its zone following
 * the zone the service records in, and a damaged file stopping the start with a line that names it.
 */
import assert from "node:assert/strict";
import { join } from "node:path";
import { openService, tempDir } from "../_shared/util.ts";
import { readSiteIdentity } from "../../store/site_identity.ts";

const UUID = /^[0-9a-f]{8}-[0-9a-f]{4}-4[0-9a-f]{3}-[89ab][0-9a-f]{3}-[0-9a-f]{12}$/;

Deno.test("the first start writes .site.json with a random site_id, the zone in use and created_at", async () => {
  await using tmp = await tempDir();
  const service = await openService(tmp.path, { timeZone: "America/Santiago" });
  await service.close();
  const text = await Deno.readTextFile(join(tmp.path, ".site.json"));
  const identity = JSON.parse(text);
  assert.deepEqual(Object.keys(identity), ["site_id", "zone", "created_at"]);
  assert.match(identity.site_id, UUID);
  assert.equal(identity.zone, "America/Santiago");
  assert.ok(Math.abs(Date.parse(identity.created_at) - Date.now()) < 60_000, identity.created_at);
});

Deno.test("a restart keeps the site_id and created_at of .site.json byte for byte", async () => {
  await using tmp = await tempDir();
  await (await openService(tmp.path)).close();
  const first = await Deno.readTextFile(join(tmp.path, ".site.json"));
  await (await openService(tmp.path)).close();
  assert.equal(await Deno.readTextFile(join(tmp.path, ".site.json")), first);
});

Deno.test("a start in another zone rewrites only the zone of .site.json and warns once", async () => {
  await using tmp = await tempDir();
  await (await openService(tmp.path, { timeZone: "UTC" })).close();
  const before = await readSiteIdentity(tmp.path);
  const warnings: string[] = [];
  await (await openService(tmp.path, {
    timeZone: "Pacific/Auckland",
    onWarning: (m) => warnings.push(m),
  })).close();
  const after = await readSiteIdentity(tmp.path);
  assert.deepEqual(after, { ...before!, zone: "Pacific/Auckland" });
  assert.equal(warnings.filter((w) => w.includes("zone changes from UTC")).length, 1);
});

Deno.test("a damaged .site.json stops the start with a message naming the file and the fix", async () => {
  await using tmp = await tempDir();
  await Deno.writeTextFile(join(tmp.path, ".site.json"), '{"site_id": "not-a-uuid"');
  await assert.rejects(
    openService(tmp.path),
    (err: Error) =>
      err.message.includes(join(tmp.path, ".site.json")) && /move it aside/.test(err.message),
  );
  // Nothing was written over it: the operator's file is still there to be looked at.
  assert.equal(
    await Deno.readTextFile(join(tmp.path, ".site.json")),
    '{"site_id": "not-a-uuid"',
  );
});

Deno.test("readSiteIdentity() says undefined for a site directory that has none yet", async () => {
  await using tmp = await tempDir();
  assert.equal(await readSiteIdentity(tmp.path), undefined);
});
