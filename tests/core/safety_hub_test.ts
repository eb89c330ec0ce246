/**
 * The safety hub's core (docs/safety.md#safety-events, #waivers, #profiles): the judge over
 * profiles, external events and waivers (pure, with its clocks driven by hand), and the
 * service keeping them across restarts in `.safety-hub.json`, with their audit events.
 */

import assert from "node:assert/strict";
import { join } from "node:path";
import { type ActiveWaiver, type HubInput, SafetyJudge } from "../../core/safety.ts";
import { parseTypes, type TypesRegistry } from "../../core/types_registry.ts";
import {
  checkSafetyEvents,
  type ExternalEvent,
  type SafetyEvent,
  SafetyHubInputError,
} from "../../core/safety_events.ts";
import type { LatestEvent } from "../../core/freshness.ts";
import { postJson, safetyEvent, siteEventData, tempDir, testServer } from "../_shared/util.ts";

const T0 = Date.parse("2026-11-27T03:00:00Z");

/** weather is the site's, rain is north's and the site's, dome is north's only. */
function profileTypes(): TypesRegistry {
  return parseTypes(
    JSON.stringify({
      weather: {
        critical: true,
        stale_after_s: 600,
        clear_after_s: 300,
        fields: { wind_mps: { unit: "m/s", alarm_above: 15, alpaca: "windspeed" } },
      },
      rain: { critical: true, critical_for: ["north"], fields: { wet: { alarm_if: true } } },
      dome: { critical_for: ["north"], fields: { open_fault: { alarm_if: true } } },
    }),
    "types.json",
  );
}

/** A judge over the registry with the latest events held in a map, and its clocks by hand. */
function harness(registry: TypesRegistry) {
  const latest = new Map<string, LatestEvent>();
  let wall = T0, mono = 0;
  // A fresh site directory: no latch saved, so the first events start every latch; clear_after_s
  // 300 then passes before the scenarios begin.
  const judge = new SafetyJudge(registry, { wallMs: wall, monoMs: mono, restored: null });
  return {
    judge,
    post(type: string, data: Record<string, unknown>) {
      latest.set(type, { ts: new Date(wall).toISOString(), data });
      return judge.judge((t) => latest.get(t), wall, mono);
    },
    advance(ms: number) {
      wall += ms;
      mono += ms;
      return judge.judge((t) => latest.get(t), wall, mono);
    },
    get wall() {
      return wall;
    },
    get mono() {
      return mono;
    },
  };
}

function event(id: string, description = "on battery"): SafetyEvent {
  return checkSafetyEvents([safetyEvent(id, description)], new Date(T0).toISOString())[0]!;
}

function hub(external: ExternalEvent[], waivers: ActiveWaiver[] = []): HubInput {
  return { external, waivers: new Map(waivers.map((w) => [w.type, w])) };
}

/** Every type fine and past its latch from the start. */
function allFine(h: ReturnType<typeof harness>) {
  h.post("weather", { wind_mps: 3 });
  h.post("rain", { wet: false });
  h.post("dome", { open_fault: false });
  return h.advance(301_000);
}

Deno.test("SafetyJudge judges profiles apart over one stream: north's dome in alarm leaves the site safe", () => {
  const h = harness(profileTypes());
  assert.deepEqual(h.judge.profiles, ["site", "north"]);
  const fine = allFine(h);
  assert.equal(fine.verdicts.get("site")!.safe, true);
  assert.equal(fine.verdicts.get("north")!.safe, true);
  const judged = h.post("dome", { open_fault: true });
  assert.equal(judged.verdicts.get("site")!.safe, true);
  assert.deepEqual(Object.keys(judged.verdicts.get("site")!.types), ["weather", "rain"]);
  const north = judged.verdicts.get("north")!;
  assert.equal(north.safe, false);
  assert.deepEqual(north.reasons, ["dome: open_fault is true (alarm if true)"]);
  assert.deepEqual(Object.keys(north.types), ["rain", "dome"]);
  assert.deepEqual(
    judged.changes.filter((c) => c.kind === "safety").map((c) => [c.profile, c.safe]),
    [["north", false]],
  );
});

Deno.test("SafetyJudge shares one latch between the profiles a type counts in", () => {
  const h = harness(profileTypes());
  allFine(h);
  h.post("rain", { wet: true });
  const cleared = h.post("rain", { wet: false });
  for (const profile of ["site", "north"]) {
    const verdict = cleared.verdicts.get(profile)!;
    assert.equal(verdict.safe, true, `${profile}: rain has no clear_after_s`);
  }
  h.post("weather", { wind_mps: 20 });
  const calm = h.post("weather", { wind_mps: 2 });
  assert.equal(calm.verdicts.get("site")!.safe, false);
  assert.match(calm.verdicts.get("site")!.reasons[0]!, /^weather: clearing, safe at /);
  assert.equal(calm.verdicts.get("north")!.safe, true, "weather is not north's");
});

Deno.test("SafetyJudge keeps a waived type out of the verdict, safe with a WAIVED reason", () => {
  const h = harness(profileTypes());
  allFine(h);
  h.advance(700_000); // weather goes stale (its sensor died)
  const dead = h.post("rain", { wet: false });
  assert.equal(dead.verdict.safe, false);
  h.judge.setHub(hub([], [{
    type: "weather",
    until: "2026-11-27T05:00:00Z",
    reason: "anemometer dead, sky clear",
    peer: "192.0.2.7",
    untilMs: h.wall + 3_600_000,
    endMono: h.mono + 3_600_000,
  }]));
  const waived = h.advance(1000);
  assert.equal(waived.verdict.safe, true);
  assert.equal(waived.verdict.reasons.length, 1);
  assert.match(
    waived.verdict.reasons[0]!,
    /^weather: WAIVED until \S+Z \(anemometer dead, sky clear\)$/,
  );
  assert.equal(waived.verdict.types.weather!.safe, true);
  assert.equal(waived.verdict.types.weather!.state, "stale");
  assert.deepEqual(waived.verdict.waivers.map((w) => w.type), ["weather"]);
  assert.deepEqual(waived.verdict.events, []);
});

Deno.test("SafetyJudge latches a type whose waiver ends while it is in alarm", () => {
  const h = harness(profileTypes());
  allFine(h);
  h.judge.setHub(hub([], [{
    type: "weather",
    until: "",
    reason: "testing",
    peer: "127.0.0.1",
    untilMs: h.wall + 120_000,
    endMono: h.mono + 120_000,
  }]));
  const during = h.post("weather", { wind_mps: 25 });
  assert.equal(during.verdict.safe, true, "not judged while waived");
  assert.equal(h.judge.nextChangeIn(() => undefined, h.wall, h.mono), 120_000);
  const ended = h.advance(120_000);
  assert.equal(ended.verdict.safe, false);
  assert.deepEqual(ended.verdict.reasons, ["weather: wind_mps 25 m/s above alarm 15"]);
  const calm = h.post("weather", { wind_mps: 2 });
  assert.equal(calm.verdict.safe, false, "latched for clear_after_s after the alarm");
  assert.match(calm.verdict.reasons[0]!, /clearing, safe at .* \(clear_after_s 300\)/);
});

Deno.test("SafetyJudge ends a waiver by the monotonic clock when the wall clock is set back", () => {
  const h = harness(profileTypes());
  allFine(h);
  h.judge.setHub(hub([], [{
    type: "weather",
    until: "",
    reason: "testing",
    peer: "127.0.0.1",
    untilMs: h.wall + 120_000,
    endMono: h.mono + 120_000,
  }]));
  h.post("weather", { wind_mps: 25 });
  // Two minutes pass on the monotonic clock while the wall clock is set back an hour.
  const stepped = h.judge.judge(
    () => ({ ts: new Date(h.wall).toISOString(), data: { wind_mps: 25 } }),
    h.wall - 3_600_000 + 120_000,
    h.mono + 120_000,
  );
  assert.equal(stepped.verdict.safe, false);
  assert.equal(stepped.verdict.waivers.length, 0);
});

Deno.test("SafetyJudge holds every profile with an external event, and only its own with a profile's", () => {
  const h = harness(profileTypes());
  allFine(h);
  h.judge.setHub(hub([{ event: event("ups"), profile: null, via: "http" }]));
  const everywhere = h.advance(1000);
  for (const profile of ["site", "north"]) {
    const verdict = everywhere.verdicts.get(profile)!;
    assert.equal(verdict.safe, false);
    assert.deepEqual(verdict.reasons, ["external: UPS: on battery"]);
    assert.equal(verdict.clear_at, null);
    assert.deepEqual(verdict.events.map((e) => e.Id), ["ups"]);
  }
  h.judge.setHub(hub([{ event: event("door", "door open"), profile: "north", via: "http" }]));
  const north = h.advance(1000);
  assert.equal(north.verdicts.get("site")!.safe, true);
  assert.deepEqual(north.verdicts.get("north")!.reasons, ["external: UPS: door open"]);
});

Deno.test("SafetyJudge keeps an internal event's Id and EventTimeUtc while its condition lasts", () => {
  const h = harness(profileTypes());
  allFine(h);
  const start = h.post("weather", { wind_mps: 20 });
  const [first] = start.verdict.events;
  assert.deepEqual(
    { ...first, EventTimeUtc: undefined },
    {
      Source: "obs-utils telemetry",
      Name: "weather",
      Id: "telemetry:weather:wind_mps",
      Type: "WindSpeed",
      Trigger: "AboveThreshold",
      Description: "weather: wind_mps 20 m/s above alarm 15",
      EventTimeUtc: undefined,
    },
  );
  h.advance(5000);
  const later = h.post("weather", { wind_mps: 22 });
  assert.equal(later.verdict.events[0]!.Id, first!.Id);
  assert.equal(later.verdict.events[0]!.EventTimeUtc, first!.EventTimeUtc);
  const calm = h.post("weather", { wind_mps: 2 });
  assert.deepEqual(calm.verdict.events.map((e) => [e.Id, e.Trigger]), [
    ["telemetry:weather:clearing", "Unsafe"],
  ]);
});

Deno.test("SafetyJudge gives a never-seen type an Offline event and no critical types an ErrorCondition", () => {
  const h = harness(profileTypes());
  const start = h.advance(0);
  assert.deepEqual(
    start.verdict.events.map((e) => [e.Id, e.Type, e.Trigger]),
    [
      ["telemetry:weather:never-seen", "WindSpeed", "Offline"],
      ["telemetry:rain:never-seen", "Safety", "Offline"],
    ],
  );
  const none = new SafetyJudge(new Map(), { wallMs: T0, monoMs: 0, restored: null });
  const judged = none.judge(() => undefined, T0, 0);
  assert.deepEqual(
    judged.verdict.events.map((e) => [e.Id, e.Trigger]),
    [["telemetry:no-critical-types", "ErrorCondition"]],
  );
});

// --- the service: saved, audited, refused ---------------------------------------------------

const ACTOR = { via: "http" as const, peer: "192.0.2.7" };

Deno.test("TelemetryService keeps external events across a clean restart, in every profile", async () => {
  await using dir = await tempDir();
  const types = profileTypes();
  let server = await testServer({ siteDir: dir.path, types });
  try {
    await server.service.safetyHub.setExternal([event("ups")], "site", ACTOR);
    await server.shutdown();
    server = await testServer({ siteDir: dir.path, types });
    for (const profile of ["site", "north"]) {
      const verdict = server.service.safety(profile);
      assert.equal(verdict.safe, false);
      assert.ok(verdict.reasons.includes("external: UPS: on battery"), verdict.reasons.join("; "));
    }
  } finally {
    await server.shutdown();
  }
});

Deno.test("TelemetryService records every change of the external events as telemetry.safety.external", async () => {
  await using dir = await tempDir();
  const server = await testServer({ siteDir: dir.path, types: profileTypes() });
  try {
    const hubApi = server.service.safetyHub;
    await hubApi.setExternal([event("ups")], "site", ACTOR);
    await hubApi.setExternal([event("door", "door open")], "north", {
      via: "alpaca",
      peer: "192.0.2.9",
      client_id: 42,
    });
    await hubApi.clearExternal(["ups"], "north", { via: "cli", peer: "127.0.0.1" });
  } finally {
    await server.shutdown();
  }
  const audit = await siteEventData(dir.path, "telemetry.safety.external");
  assert.deepEqual(
    audit.map((
      d,
    ) => [d.action, (d.event as SafetyEvent).Id, d.via, d.peer, d.client_id, d.profile]),
    [
      ["set", "ups", "http", "192.0.2.7", undefined, undefined],
      ["set", "door", "alpaca", "192.0.2.9", 42, "north"],
      ["clear", "ups", "cli", "127.0.0.1", undefined, undefined],
    ],
  );
});

Deno.test("TelemetryService refuses clearing an internal event or an unknown Id and changes nothing", async () => {
  await using dir = await tempDir();
  const server = await testServer({ siteDir: dir.path, types: profileTypes() });
  try {
    const hubApi = server.service.safetyHub;
    await hubApi.setExternal([event("ups")], "site", ACTOR);
    for (const id of ["telemetry:weather:never-seen", "nope"]) {
      await assert.rejects(
        () => hubApi.clearExternal(["ups", id], "site", ACTOR),
        SafetyHubInputError,
      );
    }
    assert.deepEqual(server.service.safety().events.filter((e) => e.Id === "ups").length, 1);
  } finally {
    await server.shutdown();
  }
});

Deno.test("TelemetryService refuses a 257th external event and keeps the 256", async () => {
  await using dir = await tempDir();
  const server = await testServer({ siteDir: dir.path, types: profileTypes() });
  try {
    const hubApi = server.service.safetyHub;
    await hubApi.setExternal(
      Array.from({ length: 256 }, (_, i) => event(`e${i}`)),
      "site",
      ACTOR,
    );
    await assert.rejects(
      () => hubApi.setExternal([event("one-more")], "site", ACTOR),
      /more than 256/,
    );
    // Replacing one by its Id is not adding one.
    await hubApi.setExternal([event("e7", "replaced")], "site", ACTOR);
    const external = server.service.safety().events.filter((e) => !e.Id.startsWith("telemetry:"));
    assert.equal(external.length, 256);
    assert.equal(external.find((e) => e.Id === "e7")!.Description, "replaced");
  } finally {
    await server.shutdown();
  }
});

Deno.test("TelemetryService refuses a hub change it cannot save, and changes nothing", async () => {
  await using dir = await tempDir();
  const server = await testServer({ siteDir: dir.path, types: profileTypes() });
  try {
    const hubApi = server.service.safetyHub;
    await hubApi.setExternal([event("ups")], "site", ACTOR);
    // The next save cannot replace the file: a directory now stands at its name.
    await Deno.remove(join(dir.path, ".safety-hub.json"));
    await Deno.mkdir(join(dir.path, ".safety-hub.json", "blocker"), { recursive: true });
    await assert.rejects(() => hubApi.clearExternal(["ups"], "site", ACTOR));
    assert.ok(server.service.safety().reasons.includes("external: UPS: on battery"));
  } finally {
    await server.shutdown();
  }
});

Deno.test("TelemetryService holds every profile shut when .safety-hub.json is damaged, until released", async () => {
  await using dir = await tempDir();
  const types = profileTypes();
  let server = await testServer({ siteDir: dir.path, types });
  await server.shutdown();
  await Deno.writeTextFile(join(dir.path, ".safety-hub.json"), '{"version": 1, "external": [');
  const warnings: string[] = [];
  server = await testServer({ siteDir: dir.path, types, onWarning: (m) => warnings.push(m) });
  try {
    for (const profile of ["site", "north"]) {
      assert.ok(
        server.service.safety(profile).events.some((e) => e.Id === "safety-hub-damaged"),
        profile,
      );
    }
    assert.ok(
      warnings.some((w) => w.includes("safety release safety-hub-damaged")),
      warnings.join("\n"),
    );
    await server.service.safetyHub.clearExternal(["safety-hub-damaged"], "site", ACTOR);
    assert.ok(!server.service.safety().events.some((e) => e.Id === "safety-hub-damaged"));
  } finally {
    await server.shutdown();
  }
});

Deno.test("TelemetryService keeps a waiver's wall end across a restart and records one that ran out while stopped", async () => {
  await using dir = await tempDir();
  const types = profileTypes();
  let now = T0;
  const clock = () => now;
  let server = await testServer({ siteDir: dir.path, types, clock });
  try {
    const waiver = await server.service.safetyHub.waive("weather", 3600, "dead anemometer", ACTOR);
    assert.equal(waiver.until, "2026-11-27T04:00:00Z");
    await server.shutdown();
    now = T0 + 1_800_000;
    server = await testServer({ siteDir: dir.path, types, clock });
    assert.deepEqual(server.service.safety().waivers, [
      {
        type: "weather",
        until: "2026-11-27T04:00:00Z",
        reason: "dead anemometer",
        peer: "192.0.2.7",
      },
    ]);
    assert.equal(server.service.safetyWaivers, 1);
    await server.shutdown();
    now = T0 + 7_200_000;
    server = await testServer({ siteDir: dir.path, types, clock });
    assert.deepEqual(server.service.safety().waivers, []);
    assert.equal(server.service.safetyWaivers, 0);
  } finally {
    await server.shutdown();
  }
  const audit = await siteEventData(dir.path, "telemetry.safety.waiver");
  assert.deepEqual(audit.map((d) => [d.action, d.type, d.early]), [
    ["set", "weather", undefined],
    ["end", "weather", false],
  ]);
});

Deno.test("TelemetryService refuses a waiver of a type that is not critical, or of more than 12 hours", async () => {
  await using dir = await tempDir();
  const types = parseTypes(
    JSON.stringify({ weather: { critical: true }, note: { stale_after_s: 60 } }),
    "types.json",
  );
  const server = await testServer({ siteDir: dir.path, types });
  try {
    const hubApi = server.service.safetyHub;
    await assert.rejects(() => hubApi.waive("note", 600, "x", ACTOR), /not a critical type/);
    await assert.rejects(() => hubApi.waive("weather", 43_201, "x", ACTOR), /12 hours/);
    await assert.rejects(() => hubApi.waive("weather", 59, "x", ACTOR), /from 60/);
    await assert.rejects(() => hubApi.waive("weather", 600, "", ACTOR), /reason/);
    assert.equal(server.service.safetyWaivers, 0);
  } finally {
    await server.shutdown();
  }
});

Deno.test("a waiver never makes a site without critical types safe", async () => {
  await using dir = await tempDir();
  const server = await testServer({ siteDir: dir.path });
  try {
    await assert.rejects(
      () => server.service.safetyHub.waive("weather", 600, "x", ACTOR),
      /critical types are none/,
    );
    await postJson(`${server.url}/event`, { type: "weather", data: {} });
    assert.equal(server.service.safety().safe, false);
  } finally {
    await server.shutdown();
  }
});

Deno.test("TelemetryService lets the Alpaca path lift only the external events set through it", async () => {
  await using dir = await tempDir();
  const server = await testServer({ siteDir: dir.path, types: profileTypes() });
  try {
    const hubApi = server.service.safetyHub;
    const alpaca = { via: "alpaca" as const, peer: "192.0.2.66" };
    await hubApi.setExternal([event("ups")], "site", { via: "cli", peer: "127.0.0.1" });
    await hubApi.setExternal([event("nina")], "site", alpaca);
    await assert.rejects(() => hubApi.clearExternal(["ups"], "site", alpaca), /command line/);
    await assert.rejects(() => hubApi.setExternal([event("ups")], "north", alpaca), /replaced/);
    await hubApi.clearExternal(["nina"], "site", alpaca);
    assert.deepEqual(
      server.service.safety().events.filter((e) => !e.Id.startsWith("telemetry:")).map((e) => e.Id),
      ["ups"],
    );
  } finally {
    await server.shutdown();
  }
});

Deno.test("TelemetryService never stretches a waiver past its length when the wall clock was set back while stopped", async () => {
  await using dir = await tempDir();
  const types = profileTypes();
  let now = T0, mono = 0;
  const clocks = { clock: () => now, monotonicClock: () => mono };
  let server = await testServer({ siteDir: dir.path, types, ...clocks });
  try {
    await server.service.safetyHub.waive("weather", 3600, "dead anemometer", ACTOR);
    await server.shutdown();
    // Stopped, and the wall clock set back an hour: the saved end is two hours away now.
    now = T0 - 3_600_000;
    mono = 0;
    server = await testServer({ siteDir: dir.path, types, ...clocks });
    assert.equal(server.service.safetyWaivers, 1);
    now += 3_600_001;
    mono += 3_600_001;
    assert.equal(server.service.safetyWaivers, 0, "ended after the hour it was given");
    assert.deepEqual(server.service.safety().waivers, []);
  } finally {
    await server.shutdown();
  }
});
