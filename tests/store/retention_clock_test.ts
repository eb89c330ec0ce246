import assert from "node:assert/strict";
import { join } from "node:path";
import { runRetentionPass } from "../../store/retention.ts";
import { openService, tempDir } from "../_shared/util.ts";

/** Site files of the given nights, each holding one line with a `ts` of that night. */
async function nights(dir: string, keys: string[]): Promise<void> {
  let seq = 0;
  for (const key of keys) {
    const ts = `${key.slice(0, 4)}-${key.slice(4, 6)}-${key.slice(6)}T13:00:00.000Z`;
    const line = `{"seq":${++seq},"ts":"${ts}","type":"weather","data":{},"meta":{}}\n`;
    await Deno.writeTextFile(join(dir, `site_${key}.ndjson`), line);
  }
}

async function names(dir: string): Promise<string[]> {
  const out: string[] = [];
  for await (const e of Deno.readDir(dir)) if (e.name.startsWith("site_")) out.push(e.name);
  return out.sort();
}

async function waitFor(check: () => boolean | Promise<boolean>, what: string): Promise<void> {
  const deadline = Date.now() + 10_000;
  while (!(await check())) {
    if (Date.now() > deadline) throw new Error(`timed out waiting for ${what}`);
    await new Promise((r) => setTimeout(r, 20));
  }
}

/** Eight nights recorded up to 20261127, the night whose events were written minutes ago. */
const RECORDED = [
  "20261120",
  "20261121",
  "20261122",
  "20261123",
  "20261124",
  "20261125",
  "20261126",
  "20261127",
];
/** 2038-01-19, the clock of a unit that booted without its RTC battery. */
const YEARS_AHEAD = Date.parse("2038-01-19T03:14:07Z");

Deno.test("a start-up retention pass with the clock years ahead deletes only what the newest recorded night has passed", async () => {
  await using tmp = await tempDir();
  await nights(tmp.path, RECORDED);
  const info: string[] = [];
  const now = { ms: YEARS_AHEAD };
  const service = await openService(
    tmp.path,
    { retain: 3, compressAfter: 2, onInfo: (m) => info.push(m) },
    now,
  );
  try {
    // Relative to 20261127 (the newest night that holds data) 20261124 is the one night due
    // for compression; the pass compresses it after the deletions, in night order.
    await waitFor(
      async () =>
        info.some((m) => m.includes("site_20261124.ndjson to")) ||
        !(await names(tmp.path)).includes("site_20261127.ndjson"),
      "the start-up pass",
    );
    assert.deepEqual(await names(tmp.path), [
      "site_20261124.ndjson.gz",
      "site_20261125.ndjson",
      "site_20261126.ndjson",
      "site_20261127.ndjson",
    ]);
  } finally {
    await service.close();
  }
});

Deno.test("a retention pass never deletes or compresses the night written last, whatever the clock says", async () => {
  await using tmp = await tempDir();
  await nights(tmp.path, ["20261127"]);
  const report = await runRetentionPass({
    siteDir: tmp.path,
    timeZone: "UTC",
    compressAfter: 1,
    retain: 1,
    now: () => YEARS_AHEAD,
  });
  assert.deepEqual(report, { compressed: [], deleted: [], heldByCursor: [] });
  assert.deepEqual(await names(tmp.path), ["site_20261127.ndjson"]);
});

Deno.test("with the clock years ahead a night is deleted only after --retain later nights hold data", async () => {
  await using tmp = await tempDir();
  await nights(tmp.path, ["20261126", "20261127", "20380119"]);
  const pass = () =>
    runRetentionPass({
      siteDir: tmp.path,
      timeZone: "UTC",
      compressAfter: 0,
      retain: 2,
      now: () => YEARS_AHEAD,
    });
  // One night (the clock's) was recorded since 20261127: it stays, and so does 20261126.
  assert.deepEqual((await pass()).deleted, []);
  // A second night recorded with the wrong clock: 20261126 now has two later nights.
  await nights(tmp.path, ["20380120"]);
  const deleted = (await runRetentionPass({
    siteDir: tmp.path,
    timeZone: "UTC",
    compressAfter: 0,
    retain: 2,
    now: () => YEARS_AHEAD + 86_400_000,
  })).deleted.map((p) => p.slice(tmp.path.length + 1));
  assert.deepEqual(deleted, ["site_20261126.ndjson"]);
});

Deno.test("an empty site file is no evidence that a night passed", async () => {
  await using tmp = await tempDir();
  await nights(tmp.path, ["20261125", "20261126", "20261127"]);
  await Deno.writeTextFile(join(tmp.path, "site_20380119.ndjson"), "");
  await Deno.writeTextFile(join(tmp.path, "site_20380118.ndjson"), "");
  const report = await runRetentionPass({
    siteDir: tmp.path,
    timeZone: "UTC",
    compressAfter: 0,
    retain: 1,
    now: () => YEARS_AHEAD,
  });
  assert.deepEqual(report.deleted.map((p) => p.slice(tmp.path.length + 1)), [
    "site_20261125.ndjson",
  ]);
});
