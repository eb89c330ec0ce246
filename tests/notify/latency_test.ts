/**
 * A receiver that never answers does not slow ingestion (docs/safety.md#notifications): two
 * services side by side, each its own process, one notifying a receiver that accepts TCP and never
 * replies; every POST flips a critical type between alarm and ok, so each one queues
 * notifications. Their POST /event latencies are measured interleaved in one run.
 * @module
 */

import assert from "node:assert/strict";
import { join } from "node:path";
import { type SpawnedServer, spawnServer } from "../../server.ts";
import { tempDir } from "../_shared/util.ts";
import { silentReceiver } from "../_shared/notify_util.ts";

/** POSTs measured per service. */
const N = 300;
const WARMUP = 30;

const TYPES = {
  weather: {
    critical: true,
    stale_after_s: 600,
    clear_after_s: 0,
    fields: { wind_mps: { unit: "m/s", alarm_above: 15 } },
  },
};

async function post(url: string, wind: number): Promise<number> {
  const started = performance.now();
  const res = await fetch(`${url}/event`, {
    method: "POST",
    headers: { "content-type": "application/json" },
    body: JSON.stringify({ type: "weather", data: { wind_mps: wind } }),
  });
  await res.text();
  const took = performance.now() - started;
  assert.equal(res.status, 200);
  return took;
}

function percentile(values: number[], p: number): number {
  const sorted = values.toSorted((a, b) => a - b);
  return sorted[Math.min(sorted.length - 1, Math.floor((p / 100) * sorted.length))]!;
}

async function metric(server: SpawnedServer, name: string): Promise<number> {
  const text = await (await fetch(`${server.url}/metrics`)).text();
  const m = new RegExp(`^${name} (\\S+)$`, "m").exec(text);
  return Number(m?.[1]);
}

Deno.test("a notify receiver that never answers leaves POST /event latency unchanged", async () => {
  await using tmp = await tempDir();
  await using silent = silentReceiver();
  const typesFile = join(tmp.path, "types.json");
  await Deno.writeTextFile(typesFile, JSON.stringify(TYPES));
  const common = {
    host: "127.0.0.1",
    port: 0,
    timeZone: "UTC",
    typesFile,
    output: "null",
  } as const;
  await using notifying = await spawnServer({
    ...common,
    siteDir: join(tmp.path, "notifying"),
    notify: [silent.url],
  });
  await using plain = await spawnServer({ ...common, siteDir: join(tmp.path, "plain") });
  const times = { notifying: [] as number[], plain: [] as number[] };
  for (let i = 0; i < WARMUP + N; i++) {
    const wind = i % 2 === 0 ? 20 : 3;
    // Interleaved, alternating which goes first, so both see the same machine.
    const order = i % 4 < 2 ? ["notifying", "plain"] as const : ["plain", "notifying"] as const;
    for (const which of order) {
      const took = await post(which === "notifying" ? notifying.url : plain.url, wind);
      if (i >= WARMUP) times[which].push(took);
    }
  }
  // The notifying service really had something to send: a change per POST, its receiver holding
  // the first try open.
  assert.ok(await metric(notifying, "telemetry_safety_changes_total") >= N, "verdict changes");
  assert.ok(silent.accepted >= 1, "the receiver was connected to");
  const stats = {
    notifying: { p50: percentile(times.notifying, 50), p99: percentile(times.notifying, 99) },
    plain: { p50: percentile(times.plain, 50), p99: percentile(times.plain, 99) },
  };
  // deno-lint-ignore no-console
  console.log(
    `notify_latency_test.ts: POST /event over ${N} each, ms: with a dead receiver p50 ${
      stats.notifying.p50.toFixed(2)
    } p99 ${stats.notifying.p99.toFixed(2)}; without p50 ${stats.plain.p50.toFixed(2)} p99 ${
      stats.plain.p99.toFixed(2)
    }`,
  );
  assert.ok(
    stats.notifying.p50 <= 2 * stats.plain.p50 + 2,
    `p50 ${stats.notifying.p50} ms with the dead receiver, ${stats.plain.p50} ms without`,
  );
  assert.ok(
    stats.notifying.p99 <= 2 * stats.plain.p99 + 10,
    `p99 ${stats.notifying.p99} ms with the dead receiver, ${stats.plain.p99} ms without`,
  );
  // And its shutdown is not held by the receiver beyond the bounded drain.
  const started = performance.now();
  const status = await notifying.stop();
  assert.equal(status.code, 0);
  assert.ok(performance.now() - started < 5000, `stop took ${performance.now() - started} ms`);
});
