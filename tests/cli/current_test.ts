/**
 * Tests of the `obs-utils telemetry current` table: states from the types registry, the stream a
 * seq belongs to, 80- and 60-column terminals, and `--follow` where nothing answers. @module
 */

import assert from "node:assert/strict";
import { renderTable, type TableTypeInfo } from "../../cli/current.ts";
import { TelemetryEvent } from "../../event.ts";
import { parseTypes } from "../../core/types_registry.ts";
import { CLI, freePort, postJson, tempDir, testServer } from "../_shared/util.ts";

const NOW = Date.parse("2026-11-25T06:00:00.000Z");
const TYPES: Record<string, TableTypeInfo> = {
  weather: {
    critical: true,
    stale_after_s: 180,
    order: 1,
    fields: { wind_mps: { unit: "m/s", warn_above: 10, alarm_above: 15 } },
  },
  power: { critical: true, stale_after_s: 90, order: 2, fields: {} },
  dome: { critical: false, stale_after_s: null, order: null, fields: {} },
};

function event(
  type: string,
  seq: number,
  ageS: number,
  data: Record<string, unknown>,
  meta: Record<string, unknown> = {},
): TelemetryEvent {
  return new TelemetryEvent({
    seq,
    ts: new Date(NOW - ageS * 1000).toISOString(),
    type,
    data,
    meta: meta as Record<string, never>,
  });
}

const EVENTS = {
  camera: event("camera", 7, 3, { ccd_temp_c: -20, exposure_s: 300, filter: "R" }, {
    run_id: "m31-2026-11-25",
  }),
  weather: event("weather", 41, 5, { wind_mps: 16.2, gust_mps: 21.5, humidity_pct: 61 }),
  power: event("power", 12, 412, { ac_ok: true, battery_v: 12.6 }),
};

Deno.test("the current table marks alarm and stale rows and says why under the table", () => {
  const table = renderTable(EVENTS, NOW, { width: 120, types: TYPES });
  assert.equal(
    table,
    [
      "TYPE     STATE  STREAM:SEQ            TS                        AGE    DATA",
      "weather  ALARM  site:41               2026-11-25T05:59:55.000Z  5s     wind_mps=16.2 gust_mps=21.5 humidity_pct=61",
      "power    STALE  site:12               2026-11-25T05:53:08.000Z  6m52s  ac_ok=true battery_v=12.6",
      "camera   ok     run:m31-2026-11-25:7  2026-11-25T05:59:57.000Z  3s     ccd_temp_c=-20 exposure_s=300 filter=R",
      "! weather: wind_mps 16.2 m/s above alarm 15",
      "! power: stale for 412 s (limit 90 s)",
      "",
    ].join("\n"),
  );
});

Deno.test("the current table labels the stream of each seq: site:N, or run:<run_id>:N", () => {
  const table = renderTable(EVENTS, NOW, { width: 120 });
  assert.match(table, /^camera\s+run:m31-2026-11-25:7\s/m);
  assert.match(table, /^weather\s+site:41\s/m);
  // Without a registry there is no STATE column and no reasons.
  assert.match(table, /^TYPE\s+STREAM:SEQ\s+TS\s+AGE\s+DATA$/m);
  assert.doesNotMatch(table, /^!/m);
});

Deno.test("the current table lists critical types never seen, as STALE", () => {
  const table = renderTable({ camera: EVENTS.camera }, NOW, { width: 120, types: TYPES });
  assert.match(table, /^weather\s+STALE\s+-\s+-\s+-\s+\(never seen\)$/m);
  assert.match(table, /^power\s+STALE\s+-/m);
  // A registered type that is neither critical nor ever stale is not listed until seen.
  assert.doesNotMatch(table, /^dome/m);
  assert.match(table, /^! weather: never seen$/m);
});

Deno.test("the current table fits 80 and 60 columns, keeping type, state, stream and age", () => {
  const long = {
    ...EVENTS,
    "a-very-long-event-type-name-from-a-plugin": event("x", 3, 1, { note: "x".repeat(300) }),
  };
  for (
    const [width, type] of [[80, "a-very-long-event-type-…"], [60, "a-very-long-eve…"]] as const
  ) {
    const table = renderTable(long, NOW, { width, types: TYPES });
    for (const line of table.trimEnd().split("\n")) {
      assert.ok(line.length <= width, `${width} columns: ${line.length}: ${line}`);
    }
    assert.match(table, /^weather\s+ALARM\s+site:41\s+(05:59:55Z\s+)?5s\s/m, `${width}`);
    assert.ok(table.includes(`\n${type}  ok     site:3 `), `${width}: ${table}`);
    assert.match(table, /^camera\s+ok\s+run:m31-2026-11\S*\s/m, `${width}`);
  }
  // 80 columns: the time of day; 60: no TS column at all.
  assert.match(renderTable(EVENTS, NOW, { width: 80 }), /^weather\s+site:41\s+05:59:55Z\s+5s\s/m);
  const narrow = renderTable(EVENTS, NOW, { width: 60 });
  assert.match(narrow, /^TYPE\s+STREAM:SEQ\s+AGE\s+DATA$/m);
  assert.match(narrow, /^weather\s+site:41\s+5s\s+wind_mps=16\.2/m);
});

Deno.test("colour marks only the state cell, so widths stay aligned", () => {
  const red = (s: string) => `<${s}>`;
  const table = renderTable(EVENTS, NOW, { width: 120, types: TYPES, red, yellow: red });
  assert.ok(table.includes("\nweather  <ALARM>  site:41 "), table);
  assert.ok(table.includes("\ncamera   ok     run:"), table);
});

async function cli(
  args: string[],
  columns?: number,
): Promise<{ code: number; stdout: string; stderr: string }> {
  const deno = [Deno.execPath(), "run", "--allow-all", CLI, "telemetry", ...args];
  const command = columns === undefined
    ? new Deno.Command(deno[0]!, { args: deno.slice(1), stdout: "piped", stderr: "piped" })
    : new Deno.Command("script", {
      // A real pseudo-terminal of that width, as an operator's ssh session would have.
      args: ["-qfec", `stty cols ${columns}; ${deno.map((a) => `'${a}'`).join(" ")}`, "/dev/null"],
      env: { NO_COLOR: "1", TERM: "xterm" },
      stdout: "piped",
      stderr: "piped",
    });
  const out = await command.output();
  const d = new TextDecoder();
  return { code: out.code, stdout: d.decode(out.stdout), stderr: d.decode(out.stderr) };
}

Deno.test("obs-utils telemetry current in 80- and 60-column terminals shows states and fits", async () => {
  const noScript = await new Deno.Command("script", { args: ["--version"], stdout: "null" })
    .output().then((o) => !o.success, () => true);
  await using dir = await tempDir();
  const types = parseTypes(
    '{"weather": {"critical": true, "stale_after_s": 180, "fields": {"wind_mps": {"alarm_above": 15}}}, "power": {"critical": true, "stale_after_s": 90}}',
    "t.json",
  );
  await using server = await testServer({ siteDir: dir.path, types });
  await postJson(`${server.url}/event`, { type: "weather", data: { wind_mps: 16.2, rain: false } });
  await postJson(`${server.url}/run/start`, { run_id: "m42" });
  await postJson(`${server.url}/event`, { type: "camera", data: { ccd_temp_c: -20 } });
  const conn = ["--host", "127.0.0.1", "--port", String(server.addr.port)];
  const piped = await cli(["current", ...conn]);
  assert.equal(piped.code, 0, piped.stderr);
  assert.match(piped.stdout, /^weather\s+ALARM\s+site:1\s/m);
  assert.match(piped.stdout, /^power\s+STALE\s+-\s/m);
  assert.match(piped.stdout, /^camera\s+ok\s+run:m42:1\s/m);
  assert.match(piped.stdout, /^! weather: wind_mps 16\.2 above alarm 15$/m);
  if (noScript) {
    // deno-lint-ignore no-console
    console.log("skipping the terminal widths: util-linux 'script' is not installed");
    return;
  }
  for (const columns of [80, 60]) {
    const r = await cli(["current", ...conn], columns);
    assert.equal(r.code, 0, r.stdout);
    const lines = r.stdout.replaceAll("\r", "").trimEnd().split("\n");
    assert.ok(lines.length >= 4, r.stdout);
    for (const line of lines) assert.ok(line.length <= columns, `${columns}: ${line}`);
    assert.match(lines.join("\n"), /^weather\s+ALARM\s+site:1\s/m);
  }
});

Deno.test("obs-utils telemetry current --follow where nothing answers says so, never 'no events recorded yet'", async () => {
  const port = freePort();
  const child = new Deno.Command(Deno.execPath(), {
    args: [
      "run",
      "--allow-all",
      CLI,
      "telemetry",
      "current",
      "--follow",
      "--host",
      "127.0.0.1",
      "--port",
      String(port),
    ],
    stdout: "piped",
    stderr: "piped",
  }).spawn();
  const reader = child.stdout.pipeThrough(new TextDecoderStream()).getReader();
  let out = "";
  const deadline = Date.now() + 10_000;
  while (!/attempt 2/.test(out) && Date.now() < deadline) {
    const { value, done } = await reader.read();
    if (done) break;
    out += value;
  }
  child.kill("SIGINT");
  while (!(await reader.read()).done) { /* drain */ }
  await child.stderr.cancel();
  const status = await child.status;
  assert.equal(status.code, 0);
  assert.match(
    out,
    new RegExp(
      `^http://127\\.0\\.0\\.1:${port} · no telemetry service answers; retrying… \\(attempt 1\\) · Ctrl-C to exit$`,
      "m",
    ),
  );
  assert.doesNotMatch(out, /no events recorded yet/);
});

Deno.test("obs-utils telemetry current --follow --json warns once on stderr when nothing answers", async () => {
  const port = freePort();
  const child = new Deno.Command(Deno.execPath(), {
    args: [
      "run",
      "--allow-all",
      CLI,
      "telemetry",
      "current",
      "--follow",
      "--json",
      "--host",
      "127.0.0.1",
      "--port",
      String(port),
    ],
    stdout: "piped",
    stderr: "piped",
  }).spawn();
  const reader = child.stderr.pipeThrough(new TextDecoderStream()).getReader();
  let err = "";
  while (!err.includes("\n")) {
    const { value, done } = await reader.read();
    if (done) break;
    err += value;
  }
  child.kill("SIGINT");
  while (!(await reader.read()).done) { /* drain */ }
  const out = await new Response(child.stdout).text();
  assert.equal((await child.status).code, 0);
  assert.equal(
    err,
    `warning: no telemetry service answers at http://127.0.0.1:${port}; retrying\n`,
  );
  assert.equal(out, "");
});
