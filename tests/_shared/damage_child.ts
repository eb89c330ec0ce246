/**
 * A reader of a site directory in a process of its own, for the memory tests of damaged files:
 * `deno run -A tests/_shared/damage_child.ts read <site_dir>` runs `obs-utils telemetry read`, and
 * `deno run -A tests/_shared/damage_child.ts start <site_dir>` opens the service on the directory and
 * closes it. Either then prints its peak resident memory (`VmHWM` of /proc/self/status, in kB)
 * on stderr as `peak-kb <n>`.
 * @module
 */

// deno-lint-ignore-file no-console
import { runCli } from "../../cli.ts";
import { TelemetryService } from "../../server.ts";

const [mode, siteDir] = Deno.args;
let code = 0;
if (mode === "read") {
  code = await runCli(["telemetry", "read", "--site-dir", siteDir!]);
} else {
  const service = await TelemetryService.open({
    siteDir: siteDir!,
    timeZone: "UTC",
    compressAfter: 0,
    onWarning: (m) => console.error(`warning: ${m}`),
  });
  const [event] = await service.record([{ type: "after", data: {} }]);
  console.log(`recorded seq ${event!.seq}`);
  await service.close();
}
const status = await Deno.readTextFile("/proc/self/status");
console.error(`peak-kb ${/VmHWM:\s+(\d+)/.exec(status)![1]}`);
Deno.exit(code);
