/**
 * `scripts/sample_night.ts`, the sample site of docs/history.md and docs/storage.md, run as the
 * docs run it (a child `deno` with write access to the new directory only), then read back by the
 * store's own reader: the lines docs/history.md prints must be what it wrote.
 * @module
 */
import assert from "node:assert/strict";
import { join } from "node:path";
import { readHistoryLines } from "../../history.ts";
import { tempDir } from "../_shared/util.ts";

const ROOT = new URL("../../", import.meta.url);
const SCRIPT = new URL("scripts/sample_night.ts", ROOT).pathname;

/** The output lines docs/history.md prints after the command that starts with `command`. */
async function printedAfter(command: string): Promise<string[]> {
  const doc = await Deno.readTextFile(new URL("docs/history.md", ROOT));
  const at = doc.indexOf(`\n$ ${command}`);
  assert.ok(at >= 0, `docs/history.md runs ${command}`);
  const rest = doc.slice(doc.indexOf("\n", at + 1) + 1);
  return rest.slice(0, rest.search(/\n(?:\$ |```|\n)/)).split("\n");
}

Deno.test("scripts/sample_night.ts writes the site whose lines docs/history.md prints", async () => {
  await using tmp = await tempDir();
  const site = join(tmp.path, "telemetry");
  const out = await new Deno.Command(Deno.execPath(), {
    args: [
      "run",
      `--allow-read=${site}`,
      `--allow-write=${site}`,
      SCRIPT,
      site,
      "--until",
      "2026-11-27T06:20:00Z",
    ],
    stdout: "piped",
    stderr: "piped",
  }).output();
  const text = new TextDecoder();
  assert.equal(out.code, 0, text.decode(out.stderr));
  assert.equal(
    text.decode(out.stdout),
    `wrote ${site}: 5 nights, 335 site events, run m31-1 with 40 events (zone America/Santiago: set OBS_TELEMETRY_TZ=America/Santiago or --tz to read it)\n`,
  );
  const since = "2026-11-24T02:00:00-03:00", until = "2026-11-24T04:00:00-03:00";
  const lines: string[] = [];
  for await (
    const line of readHistoryLines(site, {
      types: ["weather"],
      since,
      until,
      timeZone: "America/Santiago",
    })
  ) lines.push(line);
  assert.deepEqual(
    lines,
    await printedAfter(`obs-utils telemetry read weather --site-dir ./telemetry --since ${since}`),
  );
});

Deno.test("scripts/sample_night.ts refuses a directory that is not empty, writing nothing", async () => {
  await using tmp = await tempDir();
  await Deno.writeTextFile(join(tmp.path, "site_20261122.ndjson"), "kept\n");
  const out = await new Deno.Command(Deno.execPath(), {
    args: ["run", `--allow-read=${tmp.path}`, `--allow-write=${tmp.path}`, SCRIPT, tmp.path],
    stdout: "piped",
    stderr: "piped",
  }).output();
  assert.equal(out.code, 1);
  assert.match(new TextDecoder().decode(out.stderr), /is not empty: give a new directory/);
  assert.deepEqual(
    [...Deno.readDirSync(tmp.path)].map((e) => e.name),
    ["site_20261122.ndjson"],
  );
  assert.equal(await Deno.readTextFile(join(tmp.path, "site_20261122.ndjson")), "kept\n");
});
