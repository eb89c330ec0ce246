/**
 * The publisher's systemd unit (docs/publish.md, "Running under systemd"): it runs the command
 * of `deno task publish`, and `systemd-analyze verify` accepts it without a warning.
 *
 * @module
 */

import assert from "node:assert/strict";
import { join } from "node:path";
import denoJson from "../../deno.json" with { type: "json" };
import { tempDir } from "../_shared/util.ts";

const UNIT = await Deno.readTextFile(
  new URL("../../deploy/obs-telemetry-publish.service", import.meta.url),
);
const decoder = new TextDecoder();

/** The words of the unit's ExecStart, its continuation lines joined. */
function execStart(unit: string): string[] {
  const line = /^ExecStart=((?:.*\\\n)*.*)$/m.exec(unit)![1]!;
  return line.replace(/\\\n/g, " ").split(/\s+/).filter((w) => w !== "");
}

Deno.test("the publish unit runs deno task publish's command on the installed checkout", () => {
  const task = (denoJson.tasks as Record<string, string>).publish!.split(" ");
  assert.deepEqual(
    execStart(UNIT),
    [
      "/usr/bin/deno",
      ...task.slice(1).map((w) =>
        w === "cli/publish_launch.ts" ? "/opt/obs-telemetry/cli/publish_launch.ts" : w
      ),
    ],
  );
});

Deno.test("the publish unit takes the broker URL from an environment file, never from its command line", () => {
  assert.match(UNIT, /^EnvironmentFile=\/etc\/obs-telemetry-publish\.env$/m);
  assert.ok(!execStart(UNIT).includes("--to"));
});

Deno.test("systemd-analyze verify accepts the publish unit without a warning", async () => {
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
      "publish deploy_test.ts: skipping systemd-analyze verify: systemd-analyze is not installed (apt-get install systemd)",
    );
    return;
  }
  await using dir = await tempDir();
  // verify checks that ExecStart's program exists: point it at this Deno.
  const copy = join(dir.path, "obs-telemetry-publish.service");
  await Deno.writeTextFile(copy, UNIT.replace("/usr/bin/deno ", `${Deno.execPath()} `));
  const out = await new Deno.Command("systemd-analyze", {
    args: ["verify", copy],
    stdout: "piped",
    stderr: "piped",
  }).output();
  const report = (decoder.decode(out.stdout) + decoder.decode(out.stderr)).split("\n")
    .filter((l) => l.includes("obs-telemetry-publish")).join("\n");
  assert.equal(out.code, 0, report);
  assert.equal(report, "", "systemd-analyze warned about the unit");
});
