/**
 * Tests of `GET /types`, `GET /check`, the freshness metrics, the alert rules, the client's
 * `types()`/`check()` and `obs-utils telemetry check`, against real servers. @module
 */

import assert from "node:assert/strict";
import { join } from "node:path";
import { TelemetryClient, TelemetryConnectionError, TelemetryHttpError } from "../../client.ts";
import { parseTypes } from "../../core/types_registry.ts";
import {
  createHandler,
  DiskWatch,
  ShutdownLifecycle,
  spawnServer,
  TelemetryService,
} from "../../server.ts";
import {
  CLI,
  freePort,
  getJson,
  postJson,
  promtoolCheck,
  promtoolMissing,
  tempDir,
  testServer,
} from "../_shared/util.ts";

const EXAMPLE = new URL("../../examples/types.json", import.meta.url).pathname;
const ALERTS = new URL("../../examples/alerts.yml", import.meta.url).pathname;
const TYPES = parseTypes(
  JSON.stringify({
    weather: {
      description: "Weather station",
      stale_after_s: 180,
      critical: true,
      order: 1,
      fields: {
        wind_mps: { label: "Wind", unit: "m/s", warn_above: 10, alarm_above: 15 },
        "system.free_space": { unit: "GB", warn_below: 20 },
        altitude: { unit: "m" },
      },
    },
    power: { stale_after_s: 90, critical: true, fields: { ac_ok: { alarm_if: false } } },
    dome: { fields: { open: {} } },
  }),
  "t.json",
);
const ago = (s: number) => new Date(Date.now() - s * 1000).toISOString();
const promtool = promtoolMissing();

async function check(url: string): Promise<{ status: number; body: Record<string, unknown> }> {
  const { status, body } = await getJson(`${url}/check`);
  return { status, body: body as Record<string, unknown> };
}

Deno.test("GET /check goes from 503 to 200 and back as critical types arrive, alarm, go stale and recover", async () => {
  await using dir = await tempDir();
  await using server = await testServer({ siteDir: dir.path, types: TYPES, minFreeBytes: 0 });
  const post = (type: string, data: Record<string, unknown>, ts?: string) =>
    postJson(`${server.url}/event`, { type, data, ...(ts ? { ts } : {}) });

  let c = await check(server.url);
  assert.equal(c.status, 503);
  assert.deepEqual(c.body.failing, ["weather: stale, never seen", "power: stale, never seen"]);
  assert.equal(c.body.ok, false);

  await post("weather", { wind_mps: 3 });
  await post("power", { ac_ok: true });
  c = await check(server.url);
  assert.equal(c.status, 200, JSON.stringify(c.body));
  assert.deepEqual(c.body.failing, []);
  assert.deepEqual(c.body.critical, { weather: "ok", power: "ok" });

  await post("weather", { wind_mps: 16.2 });
  c = await check(server.url);
  assert.equal(c.status, 503);
  assert.deepEqual(c.body.failing, ["weather: wind_mps 16.2 m/s above alarm 15"]);

  // A warning, or a non-critical type, never fails the check.
  await post("weather", { wind_mps: 12 });
  await post("dome", { open: false });
  assert.equal((await check(server.url)).status, 200);

  // Measured 100 s ago: fresh for weather (180 s), stale for power (90 s), though both just arrived.
  await post("weather", { wind_mps: 3 }, ago(100));
  await post("power", { ac_ok: true }, ago(100));
  c = await check(server.url);
  assert.equal(c.status, 503);
  assert.deepEqual(c.body.failing, ["power: stale for 100 s (limit 90 s)"]);

  await post("power", { ac_ok: true });
  assert.equal((await check(server.url)).status, 200);
});

Deno.test("GET /check fails while free disk space is below --min-free", async () => {
  await using dir = await tempDir();
  await using server = await testServer({
    siteDir: dir.path,
    minFreeBytes: Number.MAX_SAFE_INTEGER,
  });
  const c = await check(server.url);
  assert.equal(c.status, 503);
  const failing = c.body.failing as string[];
  assert.equal(failing.length, 1);
  assert.match(failing[0]!, /^disk: [\d.]+ [KMGT]iB free, below --min-free 8\.0 PiB$/);
  assert.equal(c.body.min_free_bytes, Number.MAX_SAFE_INTEGER);
  assert.ok(typeof c.body.disk_free_bytes === "number" && c.body.disk_free_bytes > 0);
});

Deno.test("a server low on disk logs the warning once, not on every check", async () => {
  await using dir = await tempDir();
  const warnings: string[] = [];
  await using server = await testServer({
    siteDir: dir.path,
    minFreeBytes: Number.MAX_SAFE_INTEGER,
    onWarning: (m) => warnings.push(m),
  });
  for (let i = 0; i < 5; i++) await check(server.url);
  const low = warnings.filter((w) => w.startsWith("disk space low: "));
  assert.equal(low.length, 1, warnings.join("\n"));
  assert.match(low[0]!, /below --min-free 8\.0 PiB; free some space or lower --min-free/);
});

Deno.test("GET /types lists registered types in file order, then seen ones, with state, age and reasons", async () => {
  await using dir = await tempDir();
  await using server = await testServer({ siteDir: dir.path, types: TYPES });
  await postJson(`${server.url}/event`, {
    type: "weather",
    data: { wind_mps: 16.2, system: { free_space: 12 } },
    ts: ago(5),
  });
  await postJson(`${server.url}/event`, { type: "camera", data: { ccd_temp_c: -20 } });
  const { status, body } = await getJson(`${server.url}/types`);
  assert.equal(status, 200);
  const types = body as Record<string, Record<string, unknown>>;
  assert.deepEqual(Object.keys(types), ["weather", "power", "dome", "camera"]);
  const weather = types.weather!;
  assert.equal(weather.state, "alarm");
  assert.deepEqual(weather.reasons, [
    "wind_mps 16.2 m/s above alarm 15",
    "system.free_space 12 GB below warn 20",
  ]);
  assert.equal(weather.description, "Weather station");
  assert.equal(weather.critical, true);
  assert.equal(weather.order, 1);
  assert.equal(weather.stale_after_s, 180);
  assert.ok(
    (weather.age_s as number) >= 5 && (weather.age_s as number) < 15,
    String(weather.age_s),
  );
  assert.equal((weather.fields as Record<string, unknown>).wind_mps !== undefined, true);
  assert.deepEqual(
    [types.power!.state, types.power!.last_ts, types.power!.age_s],
    ["stale", null, null],
  );
  assert.deepEqual([types.dome!.state, types.dome!.last_ts], ["ok", null]);
  assert.equal(types.camera!.state, "ok");
  assert.equal(types.camera!.critical, false);
});

Deno.test("without --types, GET /types lists the seen types and GET /check passes", async () => {
  await using dir = await tempDir();
  await using server = await testServer({ siteDir: dir.path, minFreeBytes: 0 });
  assert.deepEqual((await getJson(`${server.url}/types`)).body, {});
  await postJson(`${server.url}/event`, { type: "weather", data: { wind_mps: 99 } });
  const types = (await getJson(`${server.url}/types`)).body as Record<string, { state: string }>;
  assert.deepEqual(Object.keys(types), ["weather"]);
  assert.equal(types.weather!.state, "ok");
  const c = await check(server.url);
  assert.equal(c.status, 200);
  assert.deepEqual(c.body.critical, {});
});

Deno.test("GET /types and /check refuse other methods with 405 and need the token like the rest", async () => {
  await using dir = await tempDir();
  await using server = await testServer({ siteDir: dir.path, token: "t0k" });
  for (const path of ["/types", "/check"]) {
    const post = await postJson(`${server.url}${path}`, {}, { authorization: "Bearer t0k" });
    assert.equal(post.status, 405);
    assert.equal(post.headers.get("allow"), "GET, HEAD");
    assert.equal((await getJson(`${server.url}${path}`)).status, 401);
    const ok = await getJson(`${server.url}${path}`, { authorization: "Bearer t0k" });
    assert.ok(ok.status === 200 || ok.status === 503, String(ok.status));
  }
});

Deno.test("/metrics adds last event time, type states, disk free and registered nested and unit-string values", async () => {
  await using dir = await tempDir();
  await using server = await testServer({ siteDir: dir.path, types: TYPES });
  const ts = "2026-11-25T06:00:00.250Z";
  await postJson(`${server.url}/event`, {
    type: "weather",
    data: { wind_mps: 16.2, system: { free_space: 12 }, altitude: "3397.0 m", note: "12 m" },
    ts,
  });
  const text = await (await fetch(`${server.url}/metrics`)).text();
  const lines = text.split("\n");
  assert.ok(
    lines.includes(
      `telemetry_last_event_timestamp_seconds{type="weather"} ${Date.parse(ts) / 1000}`,
    ),
  );
  assert.ok(lines.includes('telemetry_value{type="weather",field="wind_mps"} 16.2'));
  assert.ok(lines.includes('telemetry_value{type="weather",field="system.free_space"} 12'));
  assert.ok(lines.includes('telemetry_value{type="weather",field="altitude"} 3397'));
  // An unregistered unit string stays out.
  assert.ok(!text.includes('field="note"'));
  // Old ts: stale (not alarm, though the wind is past its limit: stale outranks).
  assert.ok(lines.includes('telemetry_type_state{type="weather",state="stale"} 1'));
  for (const s of ["ok", "warn", "alarm"]) {
    assert.ok(lines.includes(`telemetry_type_state{type="weather",state="${s}"} 0`), s);
  }
  assert.ok(lines.includes('telemetry_type_state{type="power",state="stale"} 1'));
  assert.ok(lines.includes('telemetry_type_state{type="dome",state="ok"} 1'));
  assert.match(text, /^telemetry_disk_free_bytes \d+$/m);
  if (promtool) {
    // deno-lint-ignore no-console
    console.log(`skipping promtool check metrics: ${promtool}`);
    return;
  }
  const { ok, report } = await promtoolCheck(text);
  assert.ok(ok, report);
});

Deno.test("examples/alerts.yml passes promtool check rules and fires on stale and alarm series", async () => {
  if (promtool) {
    // deno-lint-ignore no-console
    console.log(`skipping promtool rules: ${promtool}`);
    return;
  }
  const lint = await new Deno.Command("promtool", {
    args: ["check", "rules", ALERTS],
    stdout: "piped",
    stderr: "piped",
  }).output();
  assert.ok(lint.success, new TextDecoder().decode(lint.stderr));
  await using dir = await tempDir();
  await Deno.copyFile(ALERTS, join(dir.path, "alerts.yml"));
  const tests = join(dir.path, "alerts_test.yml");
  await Deno.writeTextFile(
    tests,
    `rule_files: [alerts.yml]
evaluation_interval: 1m
tests:
  - interval: 1m
    input_series:
      - series: 'telemetry_type_state{type="weather",state="stale",instance="unit1"}'
        values: '0 0 1 1 1'
      - series: 'telemetry_type_state{type="power",state="alarm",instance="unit1"}'
        values: '0 1 1 1 1'
      - series: 'telemetry_disk_free_bytes{instance="unit1"}'
        values: '5e9 5e9 5e9 5e9 5e9'
    alert_rule_test:
      - eval_time: 1m
        alertname: TelemetryTypeStale
        exp_alerts: []
      - eval_time: 4m
        alertname: TelemetryTypeStale
        exp_alerts:
          - exp_labels: {severity: critical, type: weather, state: stale, instance: unit1}
            exp_annotations:
              summary: "weather telemetry is stale on unit1"
              description: "No weather event measured within its stale_after_s. Check the sensor, its cable and the process that posts it; GET /types shows the age."
      - eval_time: 2m
        alertname: TelemetryTypeAlarm
        exp_alerts:
          - exp_labels: {severity: critical, type: power, state: alarm, instance: unit1}
            exp_annotations:
              summary: "power is past an alarm limit on unit1"
              description: "GET /types on the unit lists the reasons (field, value, limit)."
      - eval_time: 4m
        alertname: TelemetryDiskLow
        exp_alerts: []
`,
  );
  const out = await new Deno.Command("promtool", {
    args: ["test", "rules", tests],
    cwd: dir.path,
    stdout: "piped",
    stderr: "piped",
  }).output();
  const report = new TextDecoder().decode(out.stdout) + new TextDecoder().decode(out.stderr);
  assert.ok(out.success, report);
});

Deno.test("client.types() and client.check() read the answers, a failing check included", async () => {
  await using dir = await tempDir();
  await using server = await testServer({ siteDir: dir.path, types: TYPES, minFreeBytes: 0 });
  const client = new TelemetryClient({ baseUrl: server.url });
  const failing = await client.check();
  assert.equal(failing.ok, false);
  assert.deepEqual(failing.failing, ["weather: stale, never seen", "power: stale, never seen"]);
  await client.postEvent("weather", { wind_mps: 1 });
  await client.postEvent("power", { ac_ok: true });
  const passing = await client.check();
  assert.equal(passing.ok, true);
  assert.equal(passing.min_free_bytes, 0);
  const types = await client.types();
  assert.equal(types.weather?.state, "ok");
  assert.equal(types.power?.stale_after_s, 90);
  assert.equal((await client.ready()).zone, "UTC");
  await server.shutdown();
  await assert.rejects(client.check(), TelemetryConnectionError);
});

async function runCheck(
  args: string[],
  env: Record<string, string> = {},
): Promise<{ code: number; stdout: string; stderr: string }> {
  const out = await new Deno.Command(Deno.execPath(), {
    args: ["run", "--allow-net", "--allow-env", CLI, "telemetry", "check", ...args],
    env,
    stdout: "piped",
    stderr: "piped",
  }).output();
  const d = new TextDecoder();
  return { code: out.code, stdout: d.decode(out.stdout), stderr: d.decode(out.stderr) };
}

Deno.test("obs-utils telemetry check exits 1 with one FAIL line per reason, then 0 once fresh", async () => {
  await using dir = await tempDir();
  await using server = await testServer({ siteDir: dir.path, types: TYPES, minFreeBytes: 0 });
  const port = String(server.addr.port);
  const failed = await runCheck(["--host", "127.0.0.1", "--port", port]);
  assert.deepEqual(failed, {
    code: 1,
    stdout: "FAIL weather: stale, never seen\nFAIL power: stale, never seen\n",
    stderr: "",
  });
  await postJson(`${server.url}/event`, { type: "weather", data: { wind_mps: 1 } });
  await postJson(`${server.url}/event`, { type: "power", data: { ac_ok: true } });
  const ok = await runCheck(["--port", port], { OBS_TELEMETRY_HOST: "127.0.0.1" });
  assert.equal(ok.code, 0, ok.stderr);
  assert.match(
    ok.stdout,
    /^ok: 2 critical types fresh and out of alarm; [\d.]+ [KMGTP]?i?B free\n$/,
  );
  assert.deepEqual(await runCheck(["--quiet", "--host", "127.0.0.1", "--port", port]), {
    code: 0,
    stdout: "",
    stderr: "",
  });
  const json = await runCheck(["--json", "--host", "127.0.0.1", "--port", port]);
  assert.equal(json.code, 0);
  assert.equal(JSON.parse(json.stdout).ok, true);
});

Deno.test("obs-utils telemetry check says no service answers (exit 1) and refuses arguments (exit 2)", async () => {
  const port = String(freePort());
  assert.deepEqual(await runCheck(["--host", "127.0.0.1", "--port", port]), {
    code: 1,
    stdout: "",
    stderr:
      `error: No telemetry service answers at http://127.0.0.1:${port}; start it with 'obs-utils telemetry run' or check --host/--port\n`,
  });
  const usage = await runCheck(["weather"]);
  assert.equal(usage.code, 2);
  assert.equal(
    usage.stderr,
    `obs-utils telemetry check: unexpected argument "weather"; check takes no TYPE. Run 'obs-utils telemetry check --help' for usage.\n`,
  );
  const badPort = await runCheck(["--port", "99999"]);
  assert.equal(badPort.code, 2);
});

Deno.test("spawnServer({typesFile}) grants read permission for that file alone and serves its types", async () => {
  await using dir = await tempDir();
  const file = join(dir.path, "types.json");
  await Deno.copyFile(EXAMPLE, file);
  await using server = await spawnServer({
    siteDir: join(dir.path, "site"),
    host: "127.0.0.1",
    port: 0,
    timeZone: "UTC",
    typesFile: file,
    output: "null",
  });
  const cmdline = (await Deno.readTextFile(`/proc/${server.pid}/cmdline`)).split("\0");
  assert.ok(cmdline.includes(`--allow-read=${join(dir.path, "site")},${file}`), cmdline.join(" "));
  const types = (await getJson(`${server.url}/types`)).body as Record<string, unknown>;
  assert.deepEqual(Object.keys(types), ["weather", "power", "safety", "environment", "status"]);
});

Deno.test("client.check() reports the 503 of a server that is shutting down as an error, not a failed check", async () => {
  await using dir = await tempDir();
  await using service = await TelemetryService.open({ siteDir: dir.path, timeZone: "UTC" });
  const lifecycle = new ShutdownLifecycle();
  await using http = Deno.serve(
    { hostname: "127.0.0.1", port: 0, onListen() {} },
    createHandler(service, {
      hostname: "127.0.0.1",
      lifecycle,
      disk: new DiskWatch(dir.path, 0),
    }),
  );
  const client = new TelemetryClient({ baseUrl: `http://127.0.0.1:${http.addr.port}` });
  assert.equal((await client.check()).ok, true);
  lifecycle.begin();
  const err = await client.check().then(() => undefined, (e: unknown) => e);
  assert.ok(err instanceof TelemetryHttpError, String(err));
  assert.equal(err.status, 503);
  assert.match(err.detail, /shutting down/i);
});

Deno.test("a failing GET /check is an answer, not a rejection: no warn line per poll", async () => {
  await using dir = await tempDir();
  const rejected: string[] = [];
  await using server = await testServer({
    siteDir: dir.path,
    types: TYPES,
    onRejected: (r) => rejected.push(`${r.method} ${r.route} ${r.status}`),
  });
  for (let i = 0; i < 3; i++) assert.equal((await check(server.url)).status, 503);
  // A real rejection on the same server is still logged.
  assert.equal((await postJson(`${server.url}/event`, { type: "weather", data: 1 })).status, 400);
  assert.deepEqual(rejected, ["POST /event 400"]);
});

Deno.test("GET /check is never cached: a proxy or a browser must ask again", async () => {
  await using dir = await tempDir();
  await using server = await testServer({ siteDir: dir.path, minFreeBytes: 0 });
  const res = await fetch(`${server.url}/check`);
  await res.body?.cancel();
  assert.equal(res.headers.get("cache-control"), "no-store");
  // Other JSON answers keep their headers untouched.
  const ready = await fetch(`${server.url}/ready`);
  await ready.body?.cancel();
  assert.equal(ready.headers.get("cache-control"), null);
});

Deno.test("under the scoped permissions of spawnServer() and the tasks, /check knows the free disk space", async () => {
  await using dir = await tempDir();
  await using server = await spawnServer({
    siteDir: dir.path,
    host: "127.0.0.1",
    port: 0,
    output: "null",
  });
  const res = await fetch(`${server.url}/check`);
  const body = await res.json();
  assert.equal(typeof body.disk_free_bytes, "number", JSON.stringify(body));
  assert.ok(body.disk_free_bytes > 0);
});
