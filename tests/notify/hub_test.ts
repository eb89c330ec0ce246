/**
 * Notifications of the safety hub (docs/safety.md#notifications): external events, waivers and
 * the verdicts of profiles other than `site`, as a real receiver gets them from an in-process
 * service, in both formats. The changes are made through `service.safetyHub`, as the Alpaca
 * device, the HTTP routes and the CLI make them.
 * @module
 */

import assert from "node:assert/strict";
import { join } from "node:path";
import { postJson, safetyEvent, tempDir, testServer } from "../_shared/util.ts";
import { parseTypes } from "../../core/types_registry.ts";
import type { HubActor, SafetyEvent } from "../../core/safety_events.ts";
import type { NotifyFormat } from "../../notify/post.ts";
import type { ServerHandle } from "../../server.ts";
import { type Received, type Receiver, startReceiver, waitFor } from "../_shared/notify_util.ts";

/** `weather` decides the site; `dome` decides the profile `north` only. */
const TYPES = {
  weather: {
    critical: true,
    stale_after_s: 600,
    fields: { wind_mps: { unit: "m/s", alarm_above: 15 } },
  },
  dome: { critical_for: ["north"], stale_after_s: 600, fields: { temp_c: { alarm_above: 50 } } },
};

const ACTOR: HubActor = { via: "http", peer: "192.0.2.7" };

const UPS = { ...safetyEvent("ups-mains"), EventTimeUtc: "2026-11-27T03:00:00Z" } as SafetyEvent;

/** A service with a receiver, every profile safe; disposing of it stops them both. */
interface SafeSite extends AsyncDisposable {
  readonly server: ServerHandle;
  readonly receiver: Receiver;
  /** The site directory's `site_id`. */
  readonly site: string;
  /** The messages after those of the opening. */
  since(): Received[];
  /** Waits for `n` messages after those of the opening, and returns them all. */
  after(n: number): Promise<Received[]>;
}

/**
 * A service that notifies a receiver in `format`, with every profile safe and the four messages
 * that made them so received (both profiles' safe verdicts, both types' ok): the tests look at
 * what comes after.
 */
async function safeSite(format: NotifyFormat): Promise<SafeSite> {
  const tmp = await tempDir();
  const receiver = startReceiver();
  const server = await testServer({
    siteDir: join(tmp.path, "site"),
    types: parseTypes(JSON.stringify(TYPES), "types.json"),
    notify: [receiver.url],
    notifyFormat: format,
  });
  const close = async () => {
    await server.shutdown();
    await receiver.close();
    await tmp[Symbol.asyncDispose]();
  };
  try {
    const site = JSON.parse(await Deno.readTextFile(join(server.service.siteDir, ".site.json")))
      .site_id as string;
    for (const [type, data] of [["weather", { wind_mps: 3 }], ["dome", { temp_c: 12 }]] as const) {
      assert.equal((await postJson(`${server.url}/event`, { type, data })).status, 200);
    }
    await waitFor(
      () => server.service.safetyProfiles.every((p) => server.service.safety(p).safe),
      "every profile safe",
    );
    await waitFor(() => receiver.received.length === 4, "the four opening notifications");
    const from = receiver.received.length;
    return {
      server,
      receiver,
      site,
      since: () => receiver.received.slice(from),
      async after(n) {
        await waitFor(() => receiver.received.length >= from + n, `${n} notifications`);
        return receiver.received.slice(from);
      },
      [Symbol.asyncDispose]: close,
    };
  } catch (err) {
    await close();
    throw err;
  }
}

Deno.test("an external event set and cleared is notified twice with kind external (--notify-format json)", async () => {
  await using s = await safeSite("json");
  const { server, site } = s;
  await server.service.safetyHub.setExternal([UPS], "site", ACTOR);
  await server.service.safetyHub.clearExternal([UPS.Id], "site", ACTOR);
  // Set, both profiles unsafe, cleared, both profiles safe.
  const got = (await s.after(6)).map((r) => JSON.parse(r.body));
  const external = got.filter((b) => b.kind === "external");
  assert.equal(external.length, 2, JSON.stringify(got));
  const [set, clear] = external;
  // The keys in the documented order, and only those that apply.
  assert.equal(
    JSON.stringify(set),
    JSON.stringify({
      kind: "external",
      action: "set",
      event: UPS,
      reasons: ["external: UPS: on battery (set by 192.0.2.7 via http)"],
      ts: set.ts,
      site,
    }),
  );
  assert.ok(!Number.isNaN(Date.parse(set.ts)), set.ts);
  assert.equal(clear.action, "clear");
  assert.deepEqual(clear.event, UPS);
  assert.deepEqual(clear.reasons, ["external: UPS: on battery (cleared by 192.0.2.7 via http)"]);
  assert.equal(clear.profile, undefined);
  // The verdict changes it made are notified too, after the set.
  const unsafe = got.find((b) => b.kind === "safety" && b.safe === false && !b.profile);
  assert.deepEqual(unsafe?.reasons, ["external: UPS: on battery"]);
  assert.ok(got.indexOf(set) < got.indexOf(unsafe), JSON.stringify(got));
});

Deno.test("an external event set and cleared is notified twice with kind external (--notify-format ntfy)", async () => {
  await using s = await safeSite("ntfy");
  const { server } = s;
  await server.service.safetyHub.setExternal([UPS], "site", ACTOR);
  await server.service.safetyHub.clearExternal([UPS.Id], "site", ACTOR);
  const got = await s.after(6);
  const external = got.filter((r) => r.headers["tags"]?.endsWith(",external"));
  assert.equal(external.length, 2, JSON.stringify(got.map((r) => r.headers["title"])));
  const [set, clear] = external;
  assert.deepEqual(
    [set!.headers["title"], set!.headers["priority"], set!.headers["tags"], set!.body],
    [
      "External event set: UPS",
      "high",
      "warning,telemetry,external",
      "external: UPS: on battery (set by 192.0.2.7 via http)",
    ],
  );
  assert.deepEqual(
    [clear!.headers["title"], clear!.headers["priority"], clear!.headers["tags"], clear!.body],
    [
      "External event cleared: UPS",
      "default",
      "white_check_mark,telemetry,external",
      "external: UPS: on battery (cleared by 192.0.2.7 via http)",
    ],
  );
  assert.equal(set!.headers["content-type"], "text/plain; charset=utf-8");
});

Deno.test("a waiver and its end are notified (--notify-format json)", async () => {
  await using s = await safeSite("json");
  const { server, site } = s;
  const waiver = await server.service.safetyHub.waive("weather", 3600, "anemometer iced", ACTOR);
  await server.service.safetyHub.unwaive("weather", { via: "cli", peer: "local" });
  // The site was safe and stays safe: the waiver and its end are the only messages.
  const got = (await s.after(2)).map((r) => JSON.parse(r.body));
  const [set, end] = got;
  assert.equal(
    JSON.stringify(set),
    JSON.stringify({
      kind: "waiver",
      type: "weather",
      action: "set",
      until: waiver.until,
      reasons: [`weather: WAIVED until ${waiver.until} (anemometer iced) by 192.0.2.7`],
      ts: set.ts,
      site,
    }),
  );
  assert.equal(end.kind, "waiver");
  assert.equal(end.action, "end");
  assert.equal(end.type, "weather");
  assert.deepEqual(end.reasons, ["weather: waiver ended early by local; judged again"]);
  assert.equal(end.site, site);
});

Deno.test("a waiver and its end are notified (--notify-format ntfy)", async () => {
  await using s = await safeSite("ntfy");
  const { server } = s;
  const waiver = await server.service.safetyHub.waive("weather", 3600, "anemometer iced", ACTOR);
  await server.service.safetyHub.unwaive("weather", { via: "cli", peer: "local" });
  const [set, end] = await s.after(2);
  const hhmmss = waiver.until.slice(11, 19);
  // A waiver is an override: as loud as a site going unsafe.
  assert.deepEqual(
    [set!.headers["title"], set!.headers["priority"], set!.headers["tags"], set!.body],
    [
      `Waiver: weather until ${hhmmss}Z`,
      "high",
      "warning,telemetry,waiver",
      `weather: WAIVED until ${waiver.until} (anemometer iced) by 192.0.2.7`,
    ],
  );
  assert.deepEqual(
    [end!.headers["title"], end!.headers["priority"], end!.headers["tags"], end!.body],
    [
      "Waiver ended: weather",
      "default",
      "white_check_mark,telemetry,waiver",
      "weather: waiver ended early by local; judged again",
    ],
  );
});

Deno.test("a profile's verdict change is notified with its profile (--notify-format json)", async () => {
  await using s = await safeSite("json");
  const { server, site } = s;
  // An external event set through the profile's own device holds that profile only.
  await server.service.safetyHub.setExternal([UPS], "north", ACTOR);
  const got = (await s.after(2)).map((r) => JSON.parse(r.body));
  const [external, north] = got;
  assert.equal(external.kind, "external");
  assert.equal(external.profile, "north");
  assert.equal(
    JSON.stringify(north),
    JSON.stringify({
      kind: "safety",
      safe: false,
      profile: "north",
      reasons: ["external: UPS: on battery"],
      ts: north.ts,
      site,
    }),
  );
  assert.equal(server.service.safety().safe, true);
  // Nothing says the site went unsafe.
  await server.service.safetyHub.clearExternal([UPS.Id], "north", ACTOR);
  const all = (await s.after(4)).map((r) => JSON.parse(r.body));
  assert.deepEqual(
    all.map((b) => [b.kind, b.profile, b.safe ?? b.action]),
    [
      ["external", "north", "set"],
      ["safety", "north", false],
      ["external", "north", "clear"],
      ["safety", "north", true],
    ],
  );
});

Deno.test("a profile's verdict change is notified with its profile (--notify-format ntfy)", async () => {
  await using s = await safeSite("ntfy");
  const { server } = s;
  // The profile's own type in alarm: the site's weather is fine, so only north turns unsafe.
  assert.equal(
    (await postJson(`${server.url}/event`, { type: "dome", data: { temp_c: 61 } })).status,
    200,
  );
  await waitFor(
    () => s.since().some((r) => r.headers["tags"]?.endsWith(",safety")),
    "north's verdict",
  );
  const north = s.since().find((r) => r.headers["tags"]?.endsWith(",safety"))!;
  assert.deepEqual(
    [north.headers["title"], north.headers["priority"], north.headers["tags"], north.body],
    ["north UNSAFE", "high", "warning,telemetry,safety", "dome: temp_c 61 above alarm 50"],
  );
  assert.equal(
    (await postJson(`${server.url}/event`, { type: "dome", data: { temp_c: 20 } })).status,
    200,
  );
  await waitFor(
    () => s.since().some((r) => r.headers["title"] === "north safe"),
    "north safe again",
  );
  const safe = s.since().find((r) => r.headers["title"] === "north safe")!;
  assert.deepEqual(
    [safe.headers["priority"], safe.body],
    ["default", "every critical type of north is fine"],
  );
  assert.ok(
    !s.since().some((r) => /^Site /.test(r.headers["title"] ?? "")),
    "the site's verdict did not change",
  );
});
