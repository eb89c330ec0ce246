/**
 * What the tests of the systemd units share (docs/collect.md, docs/publish.md): a unit's
 * ExecStart as words, and `systemd-analyze verify` of it.
 *
 * @module
 */

import assert from "node:assert/strict";
import { join } from "node:path";
import { tempDir } from "./util.ts";

const decoder = new TextDecoder();

/** The words of a unit's ExecStart, its continuation lines joined. */
export function execStart(unit: string): string[] {
  const line = /^ExecStart=((?:.*\\\n)*.*)$/m.exec(unit)![1]!;
  return line.replace(/\\\n/g, " ").split(/\s+/).filter((w) => w !== "");
}

/**
 * Asserts that `systemd-analyze verify` accepts a unit without a warning about it; skips (with a
 * printed reason) where systemd-analyze is not installed.
 *
 * @param unit The unit's text.
 * @param name Its file name, such as `obs-telemetry-collect.service`.
 */
export async function assertUnitVerifies(unit: string, name: string): Promise<void> {
  let version;
  try {
    version = await new Deno.Command("systemd-analyze", {
      args: ["--version"],
      stdout: "null",
      stderr: "null",
    }).output();
  } catch (err) {
    if (!(err instanceof Deno.errors.NotFound)) throw err;
  }
  if (!version?.success) {
    // deno-lint-ignore no-console
    console.log(
      `${name}: skipping systemd-analyze verify: systemd-analyze is not installed (apt-get install systemd)`,
    );
    return;
  }
  await using dir = await tempDir();
  // verify checks that ExecStart's program exists: point it at this Deno.
  const copy = join(dir.path, name);
  await Deno.writeTextFile(copy, unit.replace("/usr/bin/deno ", `${Deno.execPath()} `));
  const out = await new Deno.Command("systemd-analyze", {
    args: ["verify", copy],
    stdout: "piped",
    stderr: "piped",
  }).output();
  const stem = name.replace(/\.service$/, "");
  const report = (decoder.decode(out.stdout) + decoder.decode(out.stderr)).split("\n")
    .filter((l) => l.includes(stem)).join("\n");
  assert.equal(out.code, 0, report);
  assert.equal(report, "", "systemd-analyze warned about the unit");
}
