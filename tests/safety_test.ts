/**
 * The latched safety verdict (docs/safety.md) on a real service on 127.0.0.1 port 0: alarm,
 * clearing, the latch, reserved types, `/check` while latched.
 */

import assert from "node:assert/strict";
import { join } from "node:path";
import { startServer } from "../server.ts";
import { parseTypes } from "../core/types_registry.ts";
import type { SafetyChange, SafetyVerdict } from "../server.ts";

const TYPES = JSON.stringify({
  weather: {
    critical: true,
    stale_after_s: 600,
    clear_after_s: 1,
    fields: { wind_mps: { unit: "m/s", alarm_above: 15 } },
  },
});

async function waitFor<T>(what: string, fn: () => Promise<T | undefined>, ms = 10_000): Promise<T> {
  const deadline = Date.now() + ms;
  for (let i = 0; i < 10_000; i++) {
    const value = await fn();
    if (value !== undefined) return value;
    if (Date.now() > deadline) break;
    await new Promise((r) => setTimeout(r, 20));
  }
  throw new Error(`timed out waiting for ${what}`);
}

async function post(url: string, body: unknown): Promise<Response> {
  return await fetch(`${url}/event`, {
    method: "POST",
    headers: { "content-type": "application/json" },
    body: JSON.stringify(body),
  });
}

async function safety(url: string): Promise<SafetyVerdict> {
  const res = await fetch(`${url}/safety`);
  assert.equal(res.status, 200);
  return await res.json();
}

Deno.test("safety: an alarm that clears keeps the site unsafe for clear_after_s, then safe", async () => {
  const dir = await Deno.makeTempDir({ prefix: "safety-" });
  const server = await startServer({
    siteDir: join(dir, "site"),
    port: 0,
    hostname: "127.0.0.1",
    timeZone: "UTC",
    types: parseTypes(TYPES, "types.json"),
  });
  const changes: SafetyChange[] = [];
  const stop = server.service.onSafetyChange((c) => changes.push(c));
  try {
    const first = await safety(server.url);
    assert.equal(first.safe, false);
    assert.deepEqual(first.reasons, ["weather: stale, never seen"]);
    assert.equal((await post(server.url, { type: "weather", data: { wind_mps: 20 } })).status, 200);
    const alarm = await safety(server.url);
    assert.equal(alarm.safe, false);
    assert.deepEqual(alarm.reasons, ["weather: wind_mps 20 m/s above alarm 15"]);
    assert.equal(alarm.types.weather?.state, "alarm");
    assert.equal((await post(server.url, { type: "weather", data: { wind_mps: 3 } })).status, 200);
    const clearing = await safety(server.url);
    assert.equal(clearing.safe, false);
    assert.equal(clearing.types.weather?.state, "ok");
    assert.ok(clearing.types.weather?.latched_until);
    assert.match(clearing.reasons[0]!, /^weather: clearing, safe at \S+Z \(clear_after_s 1\)$/);
    assert.equal(clearing.clear_at, clearing.types.weather?.latched_until);
    // The timer ends the latch: a listener hears it without anyone asking.
    await waitFor(
      "the latch to end",
      () => Promise.resolve(changes.some((c) => c.kind === "safety" && c.safe) ? true : undefined),
    );
    const safe = await safety(server.url);
    assert.equal(safe.safe, true);
    assert.deepEqual(safe.reasons, []);
    assert.equal(safe.clear_at, null);
    assert.ok(changes.some((c) => c.kind === "type" && c.state === "ok" && c.previous === "alarm"));
  } finally {
    stop();
    await server.shutdown();
    await Deno.remove(dir, { recursive: true });
  }
});
