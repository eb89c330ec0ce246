/**
 * The collector's systemd unit (docs/collect.md, "Running under systemd"): it runs the command
 * of `deno task collect`, and `systemd-analyze verify` accepts it without a warning.
 *
 * @module
 */

import assert from "node:assert/strict";
import denoJson from "../../deno.json" with { type: "json" };
import { assertUnitVerifies, execStart } from "../_shared/deploy_util.ts";

const UNIT = await Deno.readTextFile(
  new URL("../../deploy/obs-telemetry-collect.service", import.meta.url),
);
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
  await assertUnitVerifies(UNIT, "obs-telemetry-collect.service");
});
