/**
 * `obs-utils telemetry safety` (docs/cli.md, docs/safety.md) against a real service on
 * 127.0.0.1 port 0, and `TelemetryClient.safety()`.
 */

import assert from "node:assert/strict";
import { join } from "node:path";
import { TelemetryClient } from "../../client.ts";
import { parseTypes } from "../../core/types_registry.ts";
import { CLI, freePort, postJson, tempDir, testServer } from "../_shared/util.ts";

const TYPES = parseTypes(
  JSON.stringify({
    weather: {
      critical: true,
      clear_after_s: 0,
      fields: { "wind\u001b[2J": { unit: "m/s", alarm_above: 15 } },
    },
  }),
  "types.json",
);

async function runSafety(
  args: string[],
): Promise<{ code: number; stdout: string; stderr: string }> {
  const out = await new Deno.Command(Deno.execPath(), {
    args: ["run", "--allow-net", "--allow-env", CLI, "telemetry", "safety", ...args],
    stdout: "piped",
    stderr: "piped",
  }).output();
  const d = new TextDecoder();
  return { code: out.code, stdout: d.decode(out.stdout), stderr: d.decode(out.stderr) };
}

Deno.test("obs-utils telemetry safety exits 1 with the reasons while unsafe, 0 once safe", async () => {
  await using dir = await tempDir();
  await using server = await testServer({ siteDir: join(dir.path, "site"), types: TYPES });
  const at = ["--host", "127.0.0.1", "--port", String(server.addr.port)];
  const never = await runSafety(at);
  assert.equal(never.code, 1, never.stderr);
  assert.match(never.stdout, /^UNSAFE since \S+Z\n {2}weather: stale, never seen\n$/);
  await postJson(`${server.url}/event`, { type: "weather", data: { "wind\u001b[2J": 20 } });
  const alarm = await runSafety(at);
  assert.equal(alarm.code, 1);
  // The control character of the field's name reaches the terminal escaped.
  assert.ok(
    alarm.stdout.endsWith("  weather: wind\\u001b[2J 20 m/s above alarm 15\n"),
    JSON.stringify(alarm.stdout),
  );
  assert.ok(!alarm.stdout.includes("\u001b"));
  await postJson(`${server.url}/event`, { type: "weather", data: { "wind\u001b[2J": 2 } });
  const safe = await runSafety(at);
  assert.equal(safe.code, 0, safe.stderr);
  assert.match(safe.stdout, /^SAFE since \S+Z: 1 critical type fine\n$/);
  assert.deepEqual(await runSafety(["--quiet", ...at]), { code: 0, stdout: "", stderr: "" });
  const json = await runSafety(["--json", ...at]);
  assert.equal(json.code, 0);
  const doc = JSON.parse(json.stdout);
  assert.equal(doc.safe, true);
  assert.deepEqual(doc.types.weather, {
    state: "ok",
    safe: true,
    latched_until: null,
    waived_until: null,
  });
  // The client reads the same document.
  const verdict = await new TelemetryClient({ baseUrl: server.url }).safety();
  assert.equal(verdict.safe, true);
  assert.equal(verdict.since, doc.since);
});

Deno.test("obs-utils telemetry safety says no service answers (exit 1) and refuses arguments (exit 2)", async () => {
  const port = String(freePort());
  assert.deepEqual(await runSafety(["--host", "127.0.0.1", "--port", port]), {
    code: 1,
    stdout: "",
    stderr:
      `error: No telemetry service answers at http://127.0.0.1:${port}; start it with 'obs-utils telemetry run' or check --host/--port\n`,
  });
  const usage = await runSafety(["weather"]);
  assert.equal(usage.code, 2);
  assert.equal(
    usage.stderr,
    `obs-utils telemetry safety: unknown subcommand "weather"; use hold, release, waive, unwaive, replay, or none for the verdict. Run 'obs-utils telemetry safety --help' for usage.\n`,
  );
  assert.equal((await runSafety(["--bogus"])).code, 2);
  assert.equal((await runSafety(["--port", "99999"])).code, 2);
});
