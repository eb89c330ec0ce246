/**
 * The safety replay's judging (`core/safety_replay.ts`, docs/safety.md#replay), pure: stored lines
 * handed over in stream order, the clock they imply, the moments time alone changes the verdict,
 * and the comparison with the recorded changes. The command and real recorded nights are in
 * tests/cli/safety_replay_test.ts.
 */

import assert from "node:assert/strict";
import { compareChanges, SafetyReplay } from "../../core/safety_replay.ts";
import { SafetyJudge } from "../../core/safety.ts";
import { parseTypes } from "../../core/types_registry.ts";
import type { LatestEvent } from "../../core/freshness.ts";

const T0 = Date.parse("2026-11-27T03:00:00Z");
const REGISTRY = parseTypes(
  JSON.stringify({
    weather: {
      critical: true,
      stale_after_s: 120,
      clear_after_s: 300,
      fields: { wind_mps: { unit: "m/s", alarm_above: 15 } },
    },
  }),
  "types.json",
);

let seq = 0;
function weather(ms: number, wind: number): string {
  return `{"seq":${++seq},"ts":"${
    new Date(ms).toISOString()
  }","type":"weather","data":{"wind_mps":${wind}},"meta":{}}`;
}

function safetyLine(ms: number, safe: boolean): string {
  return `{"seq":${++seq},"ts":"${
    new Date(ms).toISOString()
  }","type":"telemetry.safety","data":{"safe":${safe},"reasons":[],"clear_at":null},"meta":{}}`;
}

/** Fine weather every 30 s for ten minutes before `T0`: safe from then on. */
function settled(replay: SafetyReplay): void {
  for (let t = T0 - 600_000; t <= T0; t += 30_000) replay.line(weather(t, 3));
}

Deno.test("SafetyReplay finds a latch ending at the very moment of a stored line", () => {
  const replay = new SafetyReplay(REGISTRY, { sinceMs: T0, untilMs: T0 + 900_000 });
  settled(replay);
  replay.line(weather(T0 + 10_000, 20));
  replay.line(weather(T0 + 11_000, 3));
  // Every 30 s, one of them exactly when the latch of 300 s from the clear ends.
  const end = T0 + 11_000 + 300_000;
  let last = 0;
  for (let t = T0 + 41_000; t <= T0 + 700_000; t += 30_000) replay.line(weather(last = t, 3));
  assert.ok((end - (T0 + 41_000)) % 30_000 === 0);
  const { changes, summary } = replay.finish();
  assert.equal(summary.start.safe, true);
  assert.deepEqual(changes.map((c) => [c.ts, c.safe]), [
    [new Date(T0 + 10_000).toISOString(), false],
    [new Date(end).toISOString(), true],
    // stale 120 s after the last event, judged 1 ms after the moment as the live timer wakes
    [new Date(last + 120_002).toISOString(), false],
  ]);
});

Deno.test("SafetyReplay judges a batch sent late with old ts as old as it was when it arrived", () => {
  const registry = parseTypes(
    JSON.stringify({ weather: { critical: true, stale_after_s: 120, fields: {} } }),
    "types.json",
  );
  const replay = new SafetyReplay(registry, { sinceMs: T0, untilMs: T0 + 900_000 });
  settled(replay);
  for (let t = T0; t <= T0 + 60_000; t += 1_000) replay.line(weather(t, 3));
  // The service wrote its own line while the station was silent: that moment has passed.
  replay.line(safetyLine(T0 + 180_001, false));
  // Then another collector's backlog arrives, its ts over two minutes old: stale on arrival,
  // where judged at its own ts it would have looked fresh.
  for (let t = T0 + 40_000; t <= T0 + 50_000; t += 1_000) replay.line(weather(t, 3));
  const { changes, differences } = replay.finish();
  assert.deepEqual(changes.map((c) => [c.ts, c.safe]), [
    [new Date(T0 + 180_001).toISOString(), false],
  ]);
  assert.deepEqual(differences, []);
});

Deno.test('SafetyReplay reads a line in another field order, or with a nested "meta" key, and passes over one that is not an envelope', () => {
  const registry = parseTypes(
    JSON.stringify({
      weather: {
        critical: true,
        stale_after_s: 120,
        fields: { wind_mps: { unit: "m/s", alarm_above: 15 } },
      },
    }),
    "types.json",
  );
  const replay = new SafetyReplay(registry, { sinceMs: T0, untilMs: T0 + 60_000 });
  settled(replay);
  const ts = (s: number) => new Date(T0 + s * 1000).toISOString();
  replay.line(`{"type":"weather","data":{"wind_mps":20},"ts":"${ts(10)}","seq":1,"meta":{}}`);
  replay.line("not an envelope");
  replay.line(`{"seq":2,"ts":"${ts(12)}","type":"weather","data":"wind 3","meta":{}}`);
  replay.line(
    `{"seq":3,"ts":"${ts(20)}","type":"weather","data":{"wind_mps":3},"meta":{"a":1,"meta":{}}}`,
  );
  replay.line(
    `{"seq":4,"ts":"${
      ts(30)
    }","type":"weather","data":{"wind_mps":3,"note":",\\"meta\\":"},"meta":{}}`,
  );
  assert.deepEqual(replay.finish().changes.map((c) => [c.ts, c.safe]), [
    [ts(10), false],
    [ts(20), true],
  ]);
});

Deno.test("SafetyJudge.observe of a waived type keeps its staleness from its latest event, so the waiver's end does not depend on how often it was judged", () => {
  const judge = new SafetyJudge(REGISTRY, { wallMs: T0, monoMs: T0, restored: null });
  const latest = new Map<string, LatestEvent>();
  const at = (t: number) => judge.judge((type) => latest.get(type), t, t).verdict;
  const post = (t: number) => {
    const data = { wind_mps: 3 };
    if (judge.observe("weather", t, data, t, t) !== "same") {
      latest.set("weather", { ts: new Date(t).toISOString(), data });
      judge.release();
      at(t);
    }
    latest.set("weather", { ts: new Date(t).toISOString(), data });
  };
  for (let t = T0; t <= T0 + 301_000; t += 1_000) post(t);
  assert.equal(at(T0 + 301_000).safe, true);
  const untilMs = T0 + 301_000 + 3_600_000;
  judge.setHub({
    external: [],
    waivers: new Map([["weather", {
      type: "weather",
      until: new Date(untilMs).toISOString(),
      reason: "anemometer checked",
      peer: "127.0.0.1",
      untilMs,
      endMono: untilMs,
    }]]),
  });
  assert.equal(at(T0 + 301_000).safe, true);
  // An hour of fresh events, none of which changes the state: nothing judges the type whole.
  for (let t = T0 + 302_000; t < untilMs + 5_000; t += 1_000) post(t);
  const after = at(untilMs + 5_000);
  assert.equal(after.safe, true, after.reasons.join("; "));
});

Deno.test("compareChanges matches changes to the same verdict within the tolerance, each once", () => {
  const ts = (s: number) => new Date(T0 + s).toISOString();
  const recorded = [
    { ts: ts(0), safe: false, reasons: [] },
    { ts: ts(60_000), safe: true, reasons: [] },
    { ts: ts(120_000), safe: false, reasons: [] },
  ];
  const replayed = [
    { ts: ts(-2_000), safe: false, reasons: [], clear_at: null },
    { ts: ts(62_001), safe: true, reasons: [], clear_at: null },
    { ts: ts(120_500), safe: true, reasons: [], clear_at: null },
  ];
  assert.deepEqual(
    compareChanges(recorded, replayed, 2_000).map((d) => [d.kind, d.ts]),
    [
      ["recorded_only", ts(60_000)],
      ["replayed_only", ts(62_001)],
      ["recorded_only", ts(120_000)],
      ["replayed_only", ts(120_500)],
    ],
  );
});
