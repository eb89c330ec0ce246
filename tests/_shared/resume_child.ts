/**
 * A service session in its own process for the resume fault tests, with a clock the ops move:
 * `deno run -A tests/_shared/resume_child.ts DIR '{"ops": [...], "end": "close"|"kill"}'`, where an op
 * is an event request, `{"clock": "<ISO instant>"}`, `{"start": {…}}` or `{"stop": true}`.
 * `kill` ends with a real SIGKILL to itself, right after the last acknowledgment. Prints the
 * snapshot after opening as JSON on the first line, then the stored line of each event op;
 * warnings go to stderr.
 * @module
 */

// deno-lint-ignore-file no-console
import { TelemetryService } from "../../core/service.ts";

const [dir, planText] = Deno.args;
const plan = JSON.parse(planText ?? "{}");
const now = { ms: Date.parse(plan.clock ?? "2026-05-10T13:00:00Z") };
const service = await TelemetryService.open({
  siteDir: dir!,
  timeZone: "UTC",
  fsync: "never",
  clock: () => now.ms,
  onWarning: (message) => console.error(message),
});
console.log(service.currentJson());
for (const op of plan.ops ?? []) {
  if (op.clock) now.ms = Date.parse(op.clock);
  else if (op.start) await service.startRun({ runId: op.start.run_id });
  else if (op.stop) await service.stopRun();
  else console.log((await service.record([op]))[0]!.line);
}
if (plan.end === "kill") Deno.kill(Deno.pid, "SIGKILL");
await service.close();
