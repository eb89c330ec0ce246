/**
 * The publisher's systemd unit (docs/publish.md, "Running under systemd"): it runs the command
 * of `deno task publish`, takes the broker URL from an environment file, and
 * `systemd-analyze verify` accepts it without a warning.
 *
 * @module
 */

import assert from "node:assert/strict";
import denoJson from "../../deno.json" with { type: "json" };
import { assertUnitVerifies, execStart } from "../_shared/deploy_util.ts";

const UNIT = await Deno.readTextFile(
  new URL("../../deploy/obs-telemetry-publish.service", import.meta.url),
);

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
  await assertUnitVerifies(UNIT, "obs-telemetry-publish.service");
});
