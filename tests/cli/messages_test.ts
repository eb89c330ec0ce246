/**
 * The command line's small messages: data given as an argument, help on help, one-letter flag
 * typos and counts in the right number (docs/cli.md). @module
 */

import assert from "node:assert/strict";
import { join } from "node:path";
import { CLI, tempDir } from "../_shared/util.ts";

const decoder = new TextDecoder();

async function cli(args: string[]): Promise<{ code: number; stdout: string; stderr: string }> {
  const out = await new Deno.Command(Deno.execPath(), {
    args: ["run", "--no-prompt", "--allow-all", CLI, ...args],
    stdout: "piped",
    stderr: "piped",
  }).output();
  return { code: out.code, stdout: decoder.decode(out.stdout), stderr: decoder.decode(out.stderr) };
}

Deno.test("post with the data as a second argument points to --data", async () => {
  const r = await cli(["telemetry", "post", "weather", '{"wind_mps": 2.1}']);
  assert.equal(r.code, 2);
  assert.equal(
    r.stderr,
    `obs-utils telemetry post: expected one TYPE, got 2 arguments; pass the data with --data, e.g. post weather --data '{"wind_mps": 2.1}'. Run 'obs-utils telemetry post --help' for usage.\n`,
  );
});

Deno.test("help --help prints the command list, like help alone", async () => {
  const plain = await cli(["telemetry", "help"]);
  for (const args of [["telemetry", "help", "--help"], ["help", "-h"]]) {
    const r = await cli(args);
    assert.equal(r.code, 0, `${args.join(" ")}: ${r.stderr}`);
    assert.equal(r.stdout, plain.stdout);
  }
  const typo = await cli(["telemetry", "help", "--hlep"]);
  assert.equal(typo.code, 2);
  assert.match(typo.stderr, /no command "--hlep"; did you mean --help\?/);
});

Deno.test("a one-letter flag gets the long options it may have meant, exit 2", async () => {
  const p = await cli(["telemetry", "stop", "-p", "7000"]);
  assert.equal(p.code, 2);
  assert.equal(
    p.stderr,
    "obs-utils telemetry stop: Unknown option '-p'; did you mean --port? Run 'obs-utils telemetry stop --help' for usage.\n",
  );
  const s = await cli(["telemetry", "read", "-s", "1d"]);
  assert.equal(s.code, 2);
  assert.match(s.stderr, /Unknown option '-s'; did you mean --site-dir or --since\?/);
  const prot = await cli(["telemetry", "current", "--prot", "7000"]);
  assert.equal(prot.code, 2);
  assert.match(prot.stderr, /Unknown option '--prot'; did you mean --port\?/);
});

Deno.test("migrate counts one record, one collection and one site file in the singular", async () => {
  await using src = await tempDir();
  await using dest = await tempDir();
  await Deno.writeTextFile(
    join(src.path, "weather.json"),
    '{"_id": "6f1c2d9e-1111-4c1a-9d1e-000000000001", "type": "weather", "date": "2024-03-01T22:15:03Z", "data": {"wind": 12.5}}\n',
  );
  const out = join(dest.path, "out");
  const r = await cli(["telemetry", "migrate", "--source", src.path, "--dest", out]);
  assert.equal(r.code, 0, r.stderr);
  assert.match(r.stdout, /^migrated 1 record from 1 collection into 1 site file in /);
});
