/**
 * The collector's systemd unit (docs/collect.md, "Running under systemd"): it runs the command
 * of `deno task collect`, and `systemd-analyze verify` accepts it without a warning.
 *
 * @module
 */

import assert from "node:assert/strict";
import { join } from "node:path";
import denoJson from "../../deno.json" with { type: "json" };
import { tempDir } from "../_shared/util.ts";

const UNIT = await Deno.readTextFile(
  new URL("../../deploy/obs-telemetry-collect.service", import.meta.url),
);
const decoder = new TextDecoder();

/** The words of the unit's ExecStart, its continuation lines joined. */
function execStart(unit: string): string[] {
  const line = /^ExecStart=((?:.*\\\n)*.*)$/m.exec(unit)![1]!;
  return line.replace(/\\\n/g, " ").split(/\s+/).filter((w) => w !== "");
}

Deno.test("the collect unit runs deno task collect's command on the installed checkout and config", () => {
  const task = (denoJson.tasks as Record<string, string>).collect!.split(" ");
  assert.deepEqual(execStart(UNIT), [
    "/usr/bin/deno",
    ...task.slice(1).map((w) =>
      w === "cli/collect_launch.ts" ? "/opt/obs-telemetry/cli/collect_launch.ts" : w
    ),
    "--config",
    "/etc/obs-telemetry-collect.json",
  ]);
});

Deno.test("systemd-analyze verify accepts the collect unit without a warning", async () => {
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
      "collect_deploy_test.ts: skipping systemd-analyze verify: systemd-analyze is not installed (apt-get install systemd)",
    );
    return;
  }
  await using dir = await tempDir();
  // verify checks that ExecStart's program exists: point it at this Deno.
  const copy = join(dir.path, "obs-telemetry-collect.service");
  await Deno.writeTextFile(copy, UNIT.replace("/usr/bin/deno ", `${Deno.execPath()} `));
  const out = await new Deno.Command("systemd-analyze", {
    args: ["verify", copy],
    stdout: "piped",
    stderr: "piped",
  }).output();
  const report = (decoder.decode(out.stdout) + decoder.decode(out.stderr)).split("\n")
    .filter((l) => l.includes("obs-telemetry-collect")).join("\n");
  assert.equal(out.code, 0, report);
  assert.equal(report, "", "systemd-analyze warned about the unit");
});
