/**
 * `read --every --agg` (docs/cli.md, docs/history.md): buckets from the files, in ndjson, csv
 * and table, run as the real program with read permission for the site directory only.
 */

import assert from "node:assert/strict";
import { join } from "node:path";
import { CLI, tempDir } from "../_shared/util.ts";
import { compressFile } from "../../store/compress.ts";

const decoder = new TextDecoder();

async function read(siteDir: string, args: string[]) {
  const out = await new Deno.Command(Deno.execPath(), {
    args: [
      "run",
      "--no-prompt",
      `--allow-read=${siteDir}`,
      "--allow-env=OBS_TELEMETRY_SITE_DIR,OBS_TELEMETRY_TZ",
      CLI,
      "telemetry",
      "read",
      "--site-dir",
      siteDir,
      ...args,
    ],
    env: { OBS_TELEMETRY_TZ: "UTC" },
    stdout: "piped",
    stderr: "piped",
  }).output();
  return { code: out.code, stdout: decoder.decode(out.stdout), stderr: decoder.decode(out.stderr) };
}

const LINES = [
  '{"seq":1,"ts":"2026-05-10T13:00:00.000Z","type":"weather","data":{"wind":{"mps":2.5},"t":10,"a\\u001bb":1},"meta":{}}',
  '{"seq":2,"ts":"2026-05-10T13:20:00.000Z","type":"weather","data":{"wind":{"mps":3.5},"t":12},"meta":{}}',
  '{"seq":3,"ts":"2026-05-10T13:40:00.000Z","type":"dome","data":{"open":true},"meta":{}}',
  '{"seq":4,"ts":"2026-05-10T14:10:00.000Z","type":"weather","data":{"wind":{"mps":1},"t":"warm"},"meta":{}}',
];

async function site(dir: string): Promise<void> {
  await Deno.writeTextFile(join(dir, "site_20260510.ndjson"), LINES.join("\n") + "\n");
  await compressFile(join(dir, "site_20260510.ndjson"));
}

const ARGS = ["--since", "2026-05-10", "--every", "1h", "--agg", "mean,max"];

Deno.test("read --every --agg prints one JSON line per bucket and type", async () => {
  await using tmp = await tempDir();
  await site(tmp.path);
  const out = await read(tmp.path, ARGS);
  assert.equal(out.stderr, "");
  assert.equal(out.code, 0);
  assert.equal(
    out.stdout,
    '{"t":"2026-05-10T13:00:00.000Z","type":"dome","count":1,"fields":{}}\n' +
      '{"t":"2026-05-10T13:00:00.000Z","type":"weather","count":2,"fields":{"wind.mps":{"mean":3,"max":3.5},"t":{"mean":11,"max":12},"a\\u001bb":{"mean":1,"max":1}}}\n' +
      '{"t":"2026-05-10T14:00:00.000Z","type":"weather","count":1,"fields":{"wind.mps":{"mean":1,"max":1}}}\n',
  );
});

Deno.test("read --every --format csv writes a column per field and aggregate", async () => {
  await using tmp = await tempDir();
  await site(tmp.path);
  const out = await read(tmp.path, [...ARGS, "--format", "csv", "weather", "--fields", "wind"]);
  assert.equal(out.code, 0, out.stderr);
  assert.equal(
    out.stdout,
    "t,type,count,wind.mps.mean,wind.mps.max\r\n" +
      "2026-05-10T13:00:00.000Z,weather,2,3,3.5\r\n" +
      "2026-05-10T14:00:00.000Z,weather,1,1,1\r\n",
  );
});

Deno.test("read --every --format table aligns the buckets and escapes control characters", async () => {
  await using tmp = await tempDir();
  await site(tmp.path);
  const out = await read(tmp.path, [...ARGS, "--format", "table"]);
  assert.equal(out.code, 0, out.stderr);
  assert.ok(!out.stdout.includes("\x1b"));
  assert.equal(
    out.stdout,
    "T                         TYPE     COUNT  WIND.MPS.MEAN  WIND.MPS.MAX  T.MEAN  T.MAX  A\\u001bB.MEAN  A\\u001bB.MAX\n" +
      "2026-05-10T13:00:00.000Z  dome     1\n" +
      "2026-05-10T13:00:00.000Z  weather  2      3              3.5           11      12     1              1\n" +
      "2026-05-10T14:00:00.000Z  weather  1      1              1\n",
  );
});

Deno.test("read explains a bad --every or --agg in one line and exits 2", async () => {
  await using tmp = await tempDir();
  await site(tmp.path);
  for (
    const [args, message] of [
      [["--every", "5s"], '--every must be from 10s to 7d, not "5s"'],
      [["--every", "5 minutes"], "--every must be a duration such as 10s, 5m, 1h or 1d"],
      [["--every", "5m", "--agg", "median"], "--agg must name each of mean, min, max, last, count"],
      [["--agg", "max"], "--agg applies only with --every"],
    ] as const
  ) {
    const out = await read(tmp.path, [...args]);
    assert.equal(out.code, 2, out.stderr);
    assert.equal(out.stdout, "");
    assert.equal(out.stderr.split("\n").length, 2, out.stderr);
    assert.ok(out.stderr.includes(message), out.stderr);
  }
});

Deno.test("read --every --types counts the unit strings of registered fields as numbers", async () => {
  await using tmp = await tempDir();
  await Deno.writeTextFile(
    join(tmp.path, "site_20260510.ndjson"),
    [
      '{"seq":1,"ts":"2026-05-10T13:00:00.000Z","type":"weather","data":{"wind":"12.5 m/s","gust":"3 m/s"},"meta":{}}',
      '{"seq":2,"ts":"2026-05-10T13:00:10.000Z","type":"weather","data":{"wind":"7.5 m/s","gust":"4 m/s"},"meta":{}}',
    ].join("\n") + "\n",
  );
  const types = join(tmp.path, "types.json");
  await Deno.writeTextFile(
    types,
    JSON.stringify({ weather: { fields: { wind: { unit: "m/s" } } } }),
  );
  const args = ["--since", "2026-05-10", "--every", "1m", "--agg", "mean,count"];
  const without = await read(tmp.path, args);
  assert.equal(without.code, 0, without.stderr);
  assert.deepEqual(JSON.parse(without.stdout).fields, {});
  const out = await read(tmp.path, [...args, "--types", types]);
  assert.equal(out.code, 0, out.stderr);
  // "gust" has no registered unit: its strings stay strings.
  assert.deepEqual(JSON.parse(out.stdout).fields, { wind: { mean: 10, count: 2 } });
});
