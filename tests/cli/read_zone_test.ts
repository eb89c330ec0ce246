/**
 * `read` judges night dates in the zone the site records in (its `.site.json`), not the zone of
 * the machine reading it, unless `--tz` or `OBS_TELEMETRY_TZ` name another (docs/history.md).
 * @module
 */

import assert from "node:assert/strict";
import { join } from "node:path";
import { CLI, tempDir } from "../_shared/util.ts";

const decoder = new TextDecoder();

function line(seq: number, ts: string): string {
  return JSON.stringify({ seq, ts, type: "weather", data: { seq }, meta: {} });
}

// Night 2026-11-26 in Auckland (NZDT, UTC+13) is 2026-11-25T23:00Z to 2026-11-26T23:00Z; in
// Santiago (UTC-3) it is 2026-11-26T15:00Z to 2026-11-27T15:00Z.
const AUCKLAND_ONLY = line(1, "2026-11-26T00:00:00.000Z");
const BOTH = line(2, "2026-11-26T20:00:00.000Z");
const SANTIAGO_ONLY = line(3, "2026-11-27T00:00:00.000Z");

/** A site recorded in Pacific/Auckland: its `.site.json` and its two night files. */
async function aucklandSite(dir: string): Promise<void> {
  await Deno.writeTextFile(
    join(dir, ".site.json"),
    JSON.stringify({
      site_id: "0b6f9c1e-7a54-4d0e-9a51-3f1c8f1b2d3a",
      zone: "Pacific/Auckland",
      created_at: "2026-11-20T00:00:00.000Z",
    }),
  );
  await Deno.writeTextFile(join(dir, "site_20261126.ndjson"), `${AUCKLAND_ONLY}\n${BOTH}\n`);
  await Deno.writeTextFile(join(dir, "site_20261127.ndjson"), `${SANTIAGO_ONLY}\n`);
}

/** `read` in a machine set to America/Santiago, without OBS_TELEMETRY_TZ unless given. */
async function readInSantiago(
  siteDir: string,
  args: string[],
  env: Record<string, string> = {},
): Promise<{ code: number; stdout: string; stderr: string }> {
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
    clearEnv: true,
    env: { PATH: Deno.env.get("PATH") ?? "", TZ: "America/Santiago", ...env },
    stdout: "piped",
    stderr: "piped",
  }).output();
  return { code: out.code, stdout: decoder.decode(out.stdout), stderr: decoder.decode(out.stderr) };
}

const NIGHT = ["--since", "2026-11-26", "--until", "2026-11-27"];

Deno.test("read of a site recorded in Pacific/Auckland on a Santiago machine gives the Auckland night", async () => {
  await using dir = await tempDir();
  await aucklandSite(dir.path);
  const r = await readInSantiago(dir.path, NIGHT);
  assert.equal(r.stderr, "");
  assert.equal(r.code, 0);
  assert.equal(r.stdout, `${AUCKLAND_ONLY}\n${BOTH}\n`);
});

Deno.test("read --tz judges night dates in the zone it names, over the site's", async () => {
  await using dir = await tempDir();
  await aucklandSite(dir.path);
  const r = await readInSantiago(dir.path, [...NIGHT, "--tz", "America/Santiago"]);
  assert.equal(r.code, 0, r.stderr);
  assert.equal(r.stdout, `${BOTH}\n${SANTIAGO_ONLY}\n`);
  const env = await readInSantiago(dir.path, NIGHT, { OBS_TELEMETRY_TZ: "America/Santiago" });
  assert.equal(env.stdout, r.stdout);
});

Deno.test("read --tz with a zone that does not exist is a usage error naming the flag", async () => {
  await using dir = await tempDir();
  await aucklandSite(dir.path);
  const r = await readInSantiago(dir.path, [...NIGHT, "--tz", "Mars/Olympus"]);
  assert.equal(r.code, 2);
  assert.equal(
    r.stderr,
    `obs-utils telemetry read: --tz "Mars/Olympus" is not an IANA zone such as "UTC" or "America/Santiago". Run 'obs-utils telemetry read --help' for usage.\n`,
  );
});
