/**
 * A service session in its own process, for restart tests:
 * `deno run -A tests/_shared/session_child.ts DIR close|crash '[op, …]'`, where an op is an event
 * request, `{"start": {…}}` or `{"stop": true}`. `crash` exits without closing, as kill -9 would
 * (the operating system releases the lock); `close` shuts down cleanly. Prints the snapshot
 * after opening, as JSON on the first line.
 * @module
 */

// deno-lint-ignore-file no-console
import { TelemetryService } from "../../core/service.ts";

const [dir, mode, opsText] = Deno.args;
const service = await TelemetryService.open({ siteDir: dir!, timeZone: "UTC", fsync: "never" });
console.log(service.currentJson());
for (const op of JSON.parse(opsText ?? "[]")) {
  if (op.start) {
    await service.startRun({
      runId: op.start.run_id,
      runDir: op.start.run_dir,
      meta: op.start.meta,
    });
  } else if (op.stop) await service.stopRun();
  else await service.record([op]);
}
if (mode === "crash") Deno.exit(0);
await service.close();
