/**
 * A migration writes only what the service itself would store (docs/migration.md): the service's
 * input rules (`wire/event_value.ts`) decide, and a record they refuse goes to the rejects file
 * with the reason. Real temp dirs, a real server on 127.0.0.1 port 0.
 * @module
 */

import assert from "node:assert/strict";
import { join } from "node:path";
import { migrate, REJECTS_FILE } from "../../migrate.ts";
import { postJson, readLines, tempDir, testServer } from "../_shared/util.ts";

/** A legacy record line whose `data` nests `depth` objects deep, built as text. */
function nestedLine(id: string, depth: number): string {
  return `{"_id": "${id}", "type": "weather", "date": "2026-03-05T10:00:00", "data": ${
    '{"a": '.repeat(depth - 1)
  }{"a": 1}${"}".repeat(depth - 1)}}`;
}

function plainLine(id: string, date: string, data = '{"wind_mps": 2.5}'): string {
  return `{"_id": "${id}", "type": "weather", "date": "${date}", "data": ${data}}`;
}

Deno.test("migrate rejects a record nested 100,000 deep with the service's reason and converts the records around it", async () => {
  await using tmp = await tempDir();
  const src = join(tmp.path, "legacy"), dst = join(tmp.path, "site");
  await Deno.mkdir(src);
  await Deno.writeTextFile(
    join(src, "weather.json"),
    [
      plainLine("before", "2026-03-05T09:00:00"),
      nestedLine("deep", 100_000),
      plainLine("after", "2026-03-05T11:00:00"),
    ].join("\n") + "\n",
  );
  const summary = await migrate(src, dst);
  assert.equal(summary.records, 2);
  assert.equal(summary.rejects, 1);
  const rejects = (await readLines(join(dst, REJECTS_FILE))).map((l) => JSON.parse(l));
  assert.deepEqual(rejects.map((r) => [r.line, r.reason]), [
    [
      2,
      `the service would refuse this record: "data" nests objects or arrays more than 100 levels deep; flatten it.`,
    ],
  ]);
  const lines = (await readLines(join(dst, "site_20260305.ndjson"))).map((l) => JSON.parse(l));
  assert.deepEqual(lines.map((e) => e.meta.original_id), ["before", "after"]);
});

Deno.test("migrate rejects a number too large for a float instead of writing it as null", async () => {
  await using tmp = await tempDir();
  const src = join(tmp.path, "legacy"), dst = join(tmp.path, "site");
  await Deno.mkdir(src);
  await Deno.writeTextFile(
    join(src, "weather.json"),
    plainLine("huge", "2026-03-05T09:00:00", '{"sky": {"t": 1e999}}') + "\n" +
      `{"_id": 1e999, "type": "weather", "date": "2026-03-05T10:00:00", "data": {}}\n`,
  );
  const summary = await migrate(src, dst);
  assert.equal(summary.records, 0);
  const reasons = (await readLines(join(dst, REJECTS_FILE))).map((l) => JSON.parse(l).reason);
  assert.deepEqual(reasons, [
    "the service would refuse this record: the number at data.sky.t is not finite (too large for a 64-bit float, such as 1e999); send a finite number, or a string if the value is really that large.",
    "the service would refuse this record: the number at meta.original_id is not finite (too large for a 64-bit float, such as 1e999); send a finite number, or a string if the value is really that large.",
  ]);
});

Deno.test("migrate rejects an _id nested too deeply for meta and data that is not an object but nests too deeply", async () => {
  await using tmp = await tempDir();
  const src = join(tmp.path, "legacy"), dst = join(tmp.path, "site");
  await Deno.mkdir(src);
  const deepArray = "[".repeat(100) + "]".repeat(100);
  await Deno.writeTextFile(
    join(src, "weather.json"),
    `{"_id": ${deepArray}, "type": "weather", "date": "2026-03-05T10:00:00", "data": {}}\n` +
      `{"_id": "v", "type": "weather", "date": "2026-03-05T10:00:00", "data": ${deepArray}}\n` +
      // 99 levels inside "value": 100 with the wrapper, the most the service takes.
      `{"_id": "ok", "type": "weather", "date": "2026-03-05T10:00:00", "data": ${
        "[".repeat(99) + "]".repeat(99)
      }}\n`,
  );
  const summary = await migrate(src, dst);
  assert.equal(summary.records, 1);
  const reasons = (await readLines(join(dst, REJECTS_FILE))).map((l) => JSON.parse(l).reason);
  assert.deepEqual(reasons, [
    `the service would refuse this record: "meta" nests objects or arrays more than 100 levels deep; flatten it.`,
    `the service would refuse this record: "data" nests objects or arrays more than 100 levels deep; flatten it.`,
  ]);
});

Deno.test("every line migrate writes is an event the service accepts", async () => {
  await using tmp = await tempDir();
  const src = join(tmp.path, "legacy"), dst = join(tmp.path, "site"), live = join(tmp.path, "live");
  await Deno.mkdir(src);
  const edge = "[".repeat(99) + "]".repeat(99);
  await Deno.writeTextFile(
    join(src, "weather.json"),
    [
      plainLine("a", "2026-03-05T09:00:00"),
      plainLine("b", "2026-03-05T09:01:00", edge),
      plainLine("c", "2026-03-05T09:02:00", '"parked"'),
      plainLine("d", "2026-03-05T09:03:00", '{"x": 1e308, "y": -0.0, "z": [1, 2.5e-300]}'),
      nestedLine("e", 101),
      plainLine("f", "2026-03-05T09:04:00", '{"sky": 1e400}'),
    ].join("\n") + "\n",
  );
  const summary = await migrate(src, dst);
  assert.equal(summary.records, 4);
  await using server = await testServer({ siteDir: live });
  for (const line of await readLines(join(dst, "site_20260305.ndjson"))) {
    const { type, data, meta, ts } = JSON.parse(line);
    const answer = await postJson(`${server.url}/event`, { type, data, meta, ts });
    assert.equal(answer.status, 200, JSON.stringify(answer.body));
  }
});

Deno.test("migrate rejects a record larger than the service's default request body limit", async () => {
  await using tmp = await tempDir();
  const src = join(tmp.path, "legacy"), dst = join(tmp.path, "site");
  await Deno.mkdir(src);
  const big = `{"image": "${"x".repeat(1024 * 1024)}"}`;
  // Just under the limit: 1 MiB minus the envelope, in two-byte characters counted as UTF-8.
  const near = `{"note": "${"é".repeat(500_000)}"}`;
  await Deno.writeTextFile(
    join(src, "weather.json"),
    [
      plainLine("big", "2026-03-05T09:00:00", big),
      plainLine("near", "2026-03-05T09:01:00", near),
    ].join("\n") + "\n",
  );
  const dry = await migrate(src, dst, { dryRun: true });
  assert.deepEqual([dry.records, dry.rejects], [1, 1]);
  const summary = await migrate(src, dst);
  assert.deepEqual([summary.records, summary.rejects], [1, 1]);
  const rejects = (await readLines(join(dst, REJECTS_FILE))).map((l) => JSON.parse(l));
  assert.equal(rejects[0].line, 1);
  assert.match(
    rejects[0].reason,
    /^the service would refuse this record: its event is 1,048,\d{3} bytes as JSON, more than the 1,048,576 a request body may have by default \(--max-body\)$/,
  );
});
