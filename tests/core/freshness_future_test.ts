/**
 * A `ts` far ahead of the service's clock establishes no freshness (docs/types.md): judged by
 * `core/freshness.ts` directly and through `GET /types`, `GET /check` and `current` against a
 * real server. @module
 */

import assert from "node:assert/strict";
import { FUTURE_TOLERANCE_MS, judgeType } from "../../core/freshness.ts";
import { parseTypes } from "../../core/types_registry.ts";
import { CLI, getJson, postJson, tempDir, testServer } from "../_shared/util.ts";

const TYPES = parseTypes(
  JSON.stringify({
    weather: { stale_after_s: 180, critical: true, fields: {} },
    power: { stale_after_s: 90, critical: true, fields: {} },
    dome: { fields: { open: {} } },
  }),
  "t.json",
);
const DAY_MS = 86_400_000;
const NOW = Date.parse("2026-11-25T06:00:00.000Z");
const iso = (ms: number) => new Date(ms).toISOString();

Deno.test("a ts a day ahead makes a type with stale_after_s stale, not fresh", () => {
  const status = judgeType(TYPES.get("weather"), { ts: iso(NOW + DAY_MS), data: {} }, NOW);
  assert.equal(status.state, "stale");
  assert.deepEqual(status.reasons, [
    "ts 86400 s in the future (more than 60 s ahead, so freshness cannot be established); check the sender's clock",
  ]);
});

Deno.test("a ts within the tolerance ahead still counts as fresh", () => {
  const ahead = judgeType(
    TYPES.get("weather"),
    { ts: iso(NOW + FUTURE_TOLERANCE_MS), data: {} },
    NOW,
  );
  assert.equal(ahead.state, "ok");
  const beyond = judgeType(
    TYPES.get("weather"),
    { ts: iso(NOW + FUTURE_TOLERANCE_MS + 1), data: {} },
    NOW,
  );
  assert.equal(beyond.state, "stale");
});

Deno.test("a ts far ahead only warns for a type whose freshness is not judged", () => {
  const status = judgeType(TYPES.get("dome"), { ts: iso(NOW + DAY_MS), data: {} }, NOW);
  assert.equal(status.state, "warn");
  assert.deepEqual(status.reasons, [
    "ts 86400 s in the future (more than 60 s ahead); check the sender's clock",
  ]);
});

Deno.test("GET /check fails and GET /types says stale while a critical type's latest ts is a day ahead", async () => {
  await using dir = await tempDir();
  await using server = await testServer({ siteDir: dir.path, types: TYPES, minFreeBytes: 0 });
  const ahead = new Date(Date.now() + DAY_MS).toISOString();
  assert.equal((await postJson(`${server.url}/event`, { type: "power", data: {} })).status, 200);
  const posted = await postJson(`${server.url}/event`, { type: "weather", data: {}, ts: ahead });
  assert.equal(posted.status, 200);
  const check = await getJson(`${server.url}/check`);
  assert.equal(check.status, 503);
  const failing = (check.body as { failing: string[] }).failing;
  assert.equal(failing.length, 1);
  assert.match(failing[0]!, /^weather: .*in the future.*freshness cannot be established/);
  const types = (await getJson(`${server.url}/types`)).body as Record<string, { state: string }>;
  assert.equal(types.weather?.state, "stale");
  assert.equal(types.power?.state, "ok");
});

Deno.test("current shows a critical type whose ts is a day ahead as stale", async () => {
  await using dir = await tempDir();
  await using server = await testServer({ siteDir: dir.path, types: TYPES, minFreeBytes: 0 });
  const ahead = new Date(Date.now() + DAY_MS).toISOString();
  await postJson(`${server.url}/event`, { type: "weather", data: {}, ts: ahead });
  const out = await new Deno.Command(Deno.execPath(), {
    args: [
      "run",
      "--allow-all",
      CLI,
      "telemetry",
      "current",
      "--host",
      "127.0.0.1",
      "--port",
      String(server.addr.port),
    ],
    env: { NO_COLOR: "1" },
    stdout: "piped",
    stderr: "piped",
  }).output();
  const text = new TextDecoder().decode(out.stdout);
  const line = text.split("\n").find((l) => l.includes("weather"));
  assert.ok(line, text + new TextDecoder().decode(out.stderr));
  assert.match(line, /STALE/i);
});
