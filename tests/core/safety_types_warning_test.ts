/**
 * A critical type without `stale_after_s` is never stale, so a station that stops sending with
 * good values would leave the site safe all night: the service says so once at start-up, naming
 * the type and the fix, and still starts (docs/safety.md, docs/types.md). A real `run` child.
 */

import assert from "node:assert/strict";
import { join } from "node:path";
import { cliRunArgs, freePort, tempDir } from "../_shared/util.ts";
import { permissionFlags } from "../../cli/spawn.ts";
import { waitFor } from "../_shared/notify_util.ts";

const TYPES = {
  weather: { critical: true, fields: { wind_mps: { unit: "m/s", alarm_above: 15 } } },
  dome: { critical: true, stale_after_s: 120 },
  mount: {},
};

Deno.test("a critical type without stale_after_s is warned about once at start-up, one with it is not", async () => {
  await using tmp = await tempDir();
  const siteDir = join(tmp.path, "site");
  const typesFile = join(tmp.path, "types.json");
  await Deno.writeTextFile(typesFile, JSON.stringify(TYPES));
  const port = freePort();
  const child = new Deno.Command(Deno.execPath(), {
    args: cliRunArgs(
      siteDir,
      port,
      ["--types", typesFile],
      permissionFlags({ siteDir, host: "127.0.0.1", port, readFiles: [typesFile] }),
    ),
    stdin: "null",
    stdout: "piped",
    stderr: "piped",
  }).spawn();
  let out = "";
  const pumped = Promise.all([child.stdout, child.stderr].map(async (stream) => {
    for await (const text of stream.pipeThrough(new TextDecoderStream())) out += text;
  }));
  let exited = false;
  const status = child.status.then((s) => (exited = true, s));
  try {
    await waitFor(() => out.includes("listening on") || exited, "the service to listen", 30_000);
    assert.ok(!exited, `the service did not start:\n${out}`);
  } finally {
    if (!exited) child.kill("SIGTERM");
    await status;
    await pumped;
  }
  const lines = out.split("\n");
  const about = (type: string) =>
    lines.filter((l) => l.includes(`"${type}"`) && l.includes("stale_after_s"));
  assert.equal(about("weather").length, 1, out);
  assert.match(about("weather")[0]!, /add "stale_after_s": 300/);
  assert.deepEqual(about("dome"), [], out);
  assert.deepEqual(about("mount"), [], out);
});
