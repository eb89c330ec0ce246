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

/** What `systemd-analyze verify` said of a unit. */
export interface UnitReport {
  /** Its exit code. */
  code: number;
  /** Its lines about the unit (stdout and stderr). */
  report: string;
  /** Its stderr. */
  stderr: string;
}

/**
 * Runs `systemd-analyze verify` on a copy of a unit whose ExecStart runs this Deno (verify checks
 * that the program exists), or says why it cannot run here.
 *
 * @param unit The unit's text.
 * @param name Its file name, such as `obs-telemetry-collect.service`.
 * @returns What it said, or `undefined` where systemd-analyze is not installed (said once).
 */
export async function verifyUnit(unit: string, name: string): Promise<UnitReport | undefined> {
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
    return undefined;
  }
  await using dir = await tempDir();
  const copy = join(dir.path, name);
  await Deno.writeTextFile(copy, unit.replace("/usr/bin/deno ", `${Deno.execPath()} `));
  const out = await new Deno.Command("systemd-analyze", {
    args: ["verify", copy],
    stdout: "piped",
    stderr: "piped",
  }).output();
  const stem = name.replace(/\.service$/, "");
  const stderr = decoder.decode(out.stderr);
  const report = (decoder.decode(out.stdout) + stderr).split("\n")
    .filter((l) => l.includes(stem)).join("\n");
  return { code: out.code, report, stderr };
}

/**
 * Asserts that `systemd-analyze verify` accepts a unit without a warning about it; skips (with a
 * printed reason) where systemd-analyze is not installed.
 *
 * @param unit The unit's text.
 * @param name Its file name, such as `obs-telemetry-collect.service`.
 * @returns Whether it was checked (systemd-analyze is installed).
 */
export async function assertUnitVerifies(unit: string, name: string): Promise<boolean> {
  const out = await verifyUnit(unit, name);
  if (out === undefined) return false;
  assert.equal(out.code, 0, out.report);
  assert.equal(out.report, "", "systemd-analyze warned about the unit");
  return true;
}
