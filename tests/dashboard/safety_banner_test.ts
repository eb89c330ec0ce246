/**
 * The dashboard's SAFE / UNSAFE banner (docs/dashboard.md) in real headless Chromium against a real
 * service on 127.0.0.1 port 0: SAFE, UNSAFE with the reasons of `GET /safety`, "safe at HH:MM:SS
 * (site zone)" while a latch clears, hidden against a service without `/safety`; and the safety
 * hub's external events, waivers and profiles, changed through `service.safetyHub` as the Alpaca
 * device, the HTTP routes and the CLI change it. Where the point is that the page follows the
 * stream, the page's timers (its 5 s poll among them) are stopped first with playwright's clock,
 * so only the stream's events can change what it shows: those tests race no poll.
 * @module
 */
import assert from "node:assert/strict";
import { parseTypes } from "../../core/types_registry.ts";
import type { HubActor, SafetyEvent } from "../../core/safety_events.ts";
import { getJson, postJson, tempDir, testServer } from "../_shared/util.ts";
import {
  browserMissing,
  launch,
  openPage,
  type Page,
  type PageDocument,
  waitFor,
  waitForText,
} from "../_shared/browser.ts";

if (browserMissing) {
  // deno-lint-ignore no-console
  console.log(`skipping the dashboard safety tests: ${browserMissing}`);
}

function weatherTypes(clearAfterS: number, staleAfterS?: number) {
  return parseTypes(
    JSON.stringify({
      weather: {
        critical: true,
        clear_after_s: clearAfterS,
        ...(staleAfterS === undefined ? {} : { stale_after_s: staleAfterS }),
        fields: { wind_mps: { label: "Wind", unit: "m/s", alarm_above: 15 } },
      },
    }),
    "types.json",
  );
}

/** The banner as the page shows it. */
function banner(page: Page) {
  return page.evaluate(() => {
    const box = (globalThis as unknown as { document: PageDocument }).document
      .querySelector("#safety")!;
    return {
      hidden: box.hidden,
      safe: box.dataset.safe,
      clearing: box.dataset.clearing,
      waived: box.dataset.waived,
      verdict: box.querySelector(".verdict")?.textContent,
      clear: box.querySelector(".clear")!.hidden ? null : box.querySelector(".clear")!.textContent,
      reasons: Array.from(box.querySelectorAll(".reasons li"), (li) => li.textContent ?? ""),
    };
  }, 0);
}

/** Waits until the elements of `selector` have exactly the texts `want`, in order. */
function waitForTexts(
  page: Page,
  selector: string,
  want: string[],
  timeout = 10_000,
): Promise<unknown> {
  return waitFor(
    page,
    ([sel, json]) =>
      JSON.stringify(
        Array.from(
          (globalThis as unknown as { document: PageDocument }).document.querySelectorAll(sel),
          (e) => e.textContent,
        ),
      ) === json,
    [selector, JSON.stringify(want)] as const,
    timeout,
  );
}

/** Waits until the banner lists exactly `reasons`, in order. */
function waitForReasons(page: Page, reasons: string[], timeout = 10_000): Promise<unknown> {
  return waitForTexts(page, "#safety .reasons li", reasons, timeout);
}

Deno.test({
  name: "the dashboard shows SAFE above the cards while every critical type is fine",
  ignore: browserMissing !== undefined,
  async fn() {
    await using tmp = await tempDir();
    await using server = await testServer({ siteDir: tmp.path, types: weatherTypes(0) });
    await postJson(`${server.url}/event`, { type: "weather", data: { wind_mps: 3 } });
    await using browser = await launch();
    const { page, errors } = await openPage(browser, `${server.url}/`);
    await waitForText(page, "#safety .verdict", "SAFE");
    const shown = await banner(page);
    assert.deepEqual(
      { hidden: shown.hidden, safe: shown.safe, clear: shown.clear, reasons: shown.reasons },
      { hidden: false, safe: "true", clear: null, reasons: [] },
    );
    // Above the cards.
    assert.equal(
      await page.evaluate(
        () =>
          (globalThis as unknown as {
            document: { querySelector(s: string): { nextElementSibling: { id: string } | null } };
          }).document.querySelector("#safety").nextElementSibling?.id,
        0,
      ),
      "cards",
    );
    assert.deepEqual(errors, []);
  },
});

Deno.test({
  name: "the dashboard turns the banner UNSAFE with the reasons of GET /safety when a type alarms",
  ignore: browserMissing !== undefined,
  async fn() {
    await using tmp = await tempDir();
    await using server = await testServer({ siteDir: tmp.path, types: weatherTypes(0) });
    await postJson(`${server.url}/event`, { type: "weather", data: { wind_mps: 3 } });
    await using browser = await launch();
    const { page, errors } = await openPage(browser, `${server.url}/`);
    await waitForText(page, "#safety .verdict", "SAFE");
    await postJson(`${server.url}/event`, { type: "weather", data: { wind_mps: 16.2 } });
    await waitForText(page, "#safety .verdict", "UNSAFE", 5000);
    const verdict = (await getJson(`${server.url}/safety`)).body as { reasons: string[] };
    assert.ok(verdict.reasons.length > 0);
    await waitForReasons(page, verdict.reasons);
    assert.equal((await banner(page)).safe, "false");
    assert.deepEqual(errors, []);
  },
});

Deno.test({
  name:
    "while a latch clears the banner says safe at HH:MM:SS in the site zone, then SAFE when it ends",
  ignore: browserMissing !== undefined,
  async fn() {
    await using tmp = await tempDir();
    await using server = await testServer({
      siteDir: tmp.path,
      types: weatherTypes(4),
      timeZone: "Pacific/Honolulu",
    });
    await postJson(`${server.url}/event`, { type: "weather", data: { wind_mps: 16 } });
    await using browser = await launch();
    const { page, errors } = await openPage(browser, `${server.url}/`);
    await waitForText(page, "#safety .verdict", "UNSAFE");
    await postJson(`${server.url}/event`, { type: "weather", data: { wind_mps: 3 } });
    const verdict = (await getJson(`${server.url}/safety`)).body as {
      safe: boolean;
      clear_at: string | null;
    };
    assert.equal(verdict.safe, false);
    assert.ok(verdict.clear_at, "clear_at is set while clearing");
    // Honolulu is UTC-10 all year.
    const hhmmss = new Date(Date.parse(verdict.clear_at) - 10 * 3600_000).toISOString().slice(
      11,
      19,
    );
    await waitForText(page, "#safety .clear", `safe at ${hhmmss} (Pacific/Honolulu)`, 5000);
    const clearing = await banner(page);
    assert.equal(clearing.verdict, "UNSAFE");
    assert.equal(clearing.clearing, "true");
    // No reload, no new event: the page asks again once clear_at passes.
    await waitForText(page, "#safety .verdict", "SAFE", 15_000);
    const safe = await banner(page);
    assert.equal(safe.clear, null);
    assert.equal(safe.clearing, "false");
    assert.deepEqual(errors, []);
  },
});

/**
 * Well under the 15 s the page once polled at, well over what it takes to ask again: a page that
 * waits for its poll fails, one that follows the stream passes however loaded the machine.
 */
const PROMPTLY_MS = 8_000;

Deno.test({
  name:
    "the banner swaps the alarm's reasons for the clearing one as soon as the type is fine again, with no telemetry.safety event",
  ignore: browserMissing !== undefined,
  async fn() {
    await using tmp = await tempDir();
    await using server = await testServer({ siteDir: tmp.path, types: weatherTypes(600) });
    await postJson(`${server.url}/event`, { type: "weather", data: { wind_mps: 16 } });
    await using browser = await launch();
    const { page, errors } = await openPage(browser, `${server.url}/`);
    const alarm = (await getJson(`${server.url}/safety`)).body as { reasons: string[] };
    await waitForReasons(page, alarm.reasons);
    const changes = async () =>
      (await (await fetch(`${server.url}/history?type=telemetry.safety`)).text()).trim()
        .split("\n").length;
    const before = await changes();
    await postJson(`${server.url}/event`, { type: "weather", data: { wind_mps: 3 } });
    const clearing = (await getJson(`${server.url}/safety`)).body as {
      safe: boolean;
      reasons: string[];
    };
    assert.equal(clearing.safe, false);
    assert.match(clearing.reasons.join("\n"), /^weather: clearing, safe at /);
    // Still unsafe: the verdict did not change, so the stream carries no telemetry.safety event.
    assert.equal(await changes(), before);
    await waitForReasons(page, clearing.reasons, PROMPTLY_MS);
    assert.equal((await banner(page)).clearing, "true");
    assert.deepEqual(errors, []);
  },
});

Deno.test({
  name:
    "the banner shows a critical type's stale reason soon after it turns stale while the site stays unsafe",
  ignore: browserMissing !== undefined,
  async fn() {
    await using tmp = await tempDir();
    await using server = await testServer({ siteDir: tmp.path, types: weatherTypes(0, 5) });
    await postJson(`${server.url}/event`, { type: "weather", data: { wind_mps: 16 } });
    const alarm = ((await getJson(`${server.url}/safety`)).body as { reasons: string[] }).reasons;
    await using browser = await launch();
    const { page, errors } = await openPage(browser, `${server.url}/`);
    await waitForReasons(page, alarm);
    // The page asked before the type turned stale: what it shows next it must ask again for.
    const asked = ((await getJson(`${server.url}/safety`)).body as { reasons: string[] }).reasons;
    assert.deepEqual(asked, alarm, "the page was ready before the type turned stale");
    // The service says stale on its own timer; no event marks it, the site was unsafe already.
    const deadline = Date.now() + 10_000;
    let reasons: string[] = [];
    while (Date.now() < deadline) {
      reasons = ((await getJson(`${server.url}/safety`)).body as { reasons: string[] }).reasons;
      if (reasons[0]?.startsWith("weather: stale for ")) break;
      await new Promise((resolve) => setTimeout(resolve, 100));
    }
    assert.match(reasons[0] ?? "", /^weather: stale for \d+ s \(limit 5 s\)$/);
    await waitFor(
      page,
      () =>
        (globalThis as unknown as { document: PageDocument }).document
          .querySelector("#safety .reasons li")?.textContent?.startsWith("weather: stale for ") ===
          true,
      0,
      PROMPTLY_MS,
    );
    assert.equal((await banner(page)).reasons.length, reasons.length);
    assert.deepEqual(errors, []);
  },
});

Deno.test({
  name: "against a service without GET /safety the banner stays hidden",
  ignore: browserMissing !== undefined,
  async fn() {
    await using tmp = await tempDir();
    await using server = await testServer({ siteDir: tmp.path });
    await postJson(`${server.url}/event`, { type: "weather", data: { wind_mps: 3 } });
    // A real proxy that answers 404 for /safety, as an older service does.
    let asked = 0;
    await using proxy = Deno.serve(
      { hostname: "127.0.0.1", port: 0, onListen() {} },
      (req) => {
        const url = new URL(req.url);
        if (url.pathname === "/safety") {
          asked++;
          return new Response("not here", { status: 404 });
        }
        return fetch(`${server.url}${url.pathname}${url.search}`, { signal: req.signal });
      },
    );
    await using browser = await launch();
    const { page } = await openPage(browser, `http://127.0.0.1:${proxy.addr.port}/`);
    await waitForText(page, '[data-type="weather"] [data-field="wind_mps"] dd', "3");
    await waitFor(
      page,
      (sel) =>
        (globalThis as unknown as { document: PageDocument }).document.querySelector(sel)
          ?.dataset.missing === "true",
      "#safety",
    );
    assert.ok(asked > 0, "the page asked for /safety");
    assert.equal((await banner(page)).hidden, true);
  },
});

// --- The safety hub: external events, waivers, profiles ----------------------------------------

/** The banner's own state, read in the page (`let` bindings of the page's script). */
declare const safetyBusy: boolean;

/** `weather` decides the site; `dome` the profile `north`, `roof` the profile `south`. */
const HUB_TYPES = parseTypes(
  JSON.stringify({
    weather: {
      critical: true,
      stale_after_s: 600,
      fields: { wind_mps: { label: "Wind", unit: "m/s", alarm_above: 15 } },
    },
    dome: { critical_for: ["north"], stale_after_s: 600, fields: { temp_c: { alarm_above: 50 } } },
    roof: { critical_for: ["south"], stale_after_s: 600, fields: { temp_c: { alarm_above: 50 } } },
  }),
  "types.json",
);

const ACTOR: HubActor = { via: "http", peer: "192.0.2.7" };

function externalEvent(id: string, source: string, description: string): SafetyEvent {
  return {
    Source: source,
    Name: id,
    Id: id,
    Type: "Safety",
    Trigger: "Active",
    Description: description,
    EventTimeUtc: "2026-11-27T03:00:00Z",
  };
}

/**
 * Stops every timer of the page (opened with `fakeClock`) and waits until no question to
 * `/safety` is pending: from then on only the stream's events can change the banner.
 */
async function stopTimers(page: Page): Promise<void> {
  // The page's clock runs on between reading it and pausing it: pause a little ahead (the timers
  // due meanwhile fire once), further ahead when a loaded machine took longer than that.
  for (const ahead of [100, 1000, 10_000]) {
    const now = await page.evaluate(() => Date.now(), 0);
    try {
      await page.clock.pauseAt(now + ahead);
      break;
    } catch (err) {
      if (ahead === 10_000 || !/to the past/.test(String(err))) throw err;
    }
  }
  await waitFor(page, () => !safetyBusy, 0);
}

/** The number of `telemetry.safety` events stored so far. */
async function verdictChanges(url: string): Promise<number> {
  const text = await (await fetch(`${url}/history?type=telemetry.safety`)).text();
  return text.trim().split("\n").filter((l) => l !== "").length;
}

Deno.test({
  name: "the banner shows an external event's reason while it holds the site",
  ignore: browserMissing !== undefined,
  async fn() {
    await using tmp = await tempDir();
    await using server = await testServer({ siteDir: tmp.path, types: HUB_TYPES });
    await postJson(`${server.url}/event`, { type: "weather", data: { wind_mps: 3 } });
    await using browser = await launch();
    const { page, errors } = await openPage(browser, `${server.url}/`, undefined, false, {
      fakeClock: true,
    });
    await waitForText(page, "#safety .verdict", "SAFE");
    const ups = externalEvent("ups-mains", "UPS", "on battery");
    await server.service.safetyHub.setExternal([ups], "site", ACTOR);
    await waitForText(page, "#safety .verdict", "UNSAFE");
    await waitForReasons(page, ["external: UPS: on battery"]);
    // A second event while the site is unsafe already: the verdict does not change, so only the
    // stream's telemetry.safety.external event can tell the page.
    await stopTimers(page);
    const before = await verdictChanges(server.url);
    const rain = externalEvent("dome-rain", "dome", "rain sensor wet");
    await server.service.safetyHub.setExternal([rain], "site", ACTOR);
    const verdict = (await getJson(`${server.url}/safety`)).body as { reasons: string[] };
    assert.deepEqual(verdict.reasons, [
      "external: UPS: on battery",
      "external: dome: rain sensor wet",
    ]);
    assert.equal(await verdictChanges(server.url), before, "no telemetry.safety event");
    await waitForReasons(page, verdict.reasons);
    // Released: the page follows again, with the same stopped timers.
    await server.service.safetyHub.clearExternal([ups.Id, rain.Id], "site", ACTOR);
    await waitForText(page, "#safety .verdict", "SAFE");
    assert.deepEqual((await banner(page)).reasons, []);
    assert.deepEqual(errors, []);
  },
});

Deno.test({
  name: "the banner shows a waiver while the site is safe",
  ignore: browserMissing !== undefined,
  async fn() {
    await using tmp = await tempDir();
    await using server = await testServer({
      siteDir: tmp.path,
      types: HUB_TYPES,
      timeZone: "Pacific/Honolulu",
    });
    await postJson(`${server.url}/event`, { type: "weather", data: { wind_mps: 3 } });
    await using browser = await launch();
    const { page, errors } = await openPage(browser, `${server.url}/`, undefined, false, {
      fakeClock: true,
    });
    await waitForText(page, "#safety .verdict", "SAFE");
    await waitForText(page, "#zone", "Pacific/Honolulu");
    await stopTimers(page);
    const before = await verdictChanges(server.url);
    const waiver = await server.service.safetyHub.waive("weather", 7200, "anemometer iced", ACTOR);
    assert.equal(server.service.safety().safe, true);
    assert.equal(await verdictChanges(server.url), before, "no telemetry.safety event");
    // Honolulu is UTC-10 all year.
    const hhmmss = new Date(Date.parse(waiver.until) - 10 * 3600_000).toISOString().slice(11, 19);
    await waitForTexts(page, "#safety .waivers li", [
      `weather WAIVED until ${hhmmss} (Pacific/Honolulu) \u2014 anemometer iced \u2014 by 192.0.2.7`,
    ]);
    const waived = await banner(page);
    assert.deepEqual([waived.safe, waived.waived, waived.hidden], ["true", "true", false]);
    assert.equal(await page.textContent("#safety .verdict"), "SAFE");
    // Shown once, as the waiver: not again among the reasons.
    assert.deepEqual(waived.reasons, []);
    // Amber, not the green edge of a plain SAFE.
    const colors = await page.evaluate(() => {
      const g = globalThis as unknown as {
        document: { querySelector(s: string): unknown };
        getComputedStyle(e: unknown): { borderLeftColor: string; backgroundColor: string };
      };
      return [
        g.getComputedStyle(g.document.querySelector("#safety")).borderLeftColor,
        g.getComputedStyle(g.document.querySelector("#safety .waivers .tag")).backgroundColor,
      ];
    }, 0);
    assert.deepEqual(colors, ["rgb(224, 164, 88)", "rgb(224, 164, 88)"]);
    // Its end goes as promptly.
    await server.service.safetyHub.unwaive("weather", { via: "cli", peer: "local" });
    await waitForTexts(page, "#safety .waivers li", []);
    assert.equal((await banner(page)).waived, "false");
    assert.deepEqual(errors, []);
  },
});

Deno.test({
  name: "the banner lists each profile's verdict",
  ignore: browserMissing !== undefined,
  async fn() {
    await using tmp = await tempDir();
    await using server = await testServer({ siteDir: tmp.path, types: HUB_TYPES });
    for (const type of ["weather", "dome", "roof"]) {
      const data = type === "weather" ? { wind_mps: 3 } : { temp_c: 12 };
      await postJson(`${server.url}/event`, { type, data });
    }
    await using browser = await launch();
    const { page, errors } = await openPage(browser, `${server.url}/`, undefined, false, {
      fakeClock: true,
    });
    await waitForText(page, "#safety .verdict", "SAFE");
    await waitForTexts(page, "#safety .profiles li", ["north SAFE", "south SAFE"]);
    await stopTimers(page);
    // north's own type in alarm: north turns unsafe, the site and south stay safe.
    await postJson(`${server.url}/event`, { type: "dome", data: { temp_c: 61 } });
    const north = (await getJson(`${server.url}/safety?profile=north`)).body as {
      safe: boolean;
      reasons: string[];
    };
    assert.deepEqual(north, { ...north, safe: false, reasons: ["dome: temp_c 61 above alarm 50"] });
    await waitForTexts(page, "#safety .profiles li", [
      "north UNSAFE \u2014 dome: temp_c 61 above alarm 50",
      "south SAFE",
    ]);
    const lines = await page.evaluate(
      () =>
        Array.from(
          (globalThis as unknown as { document: PageDocument }).document
            .querySelectorAll("#safety .profiles li"),
          (li) => [li.dataset.profile, li.dataset.safe],
        ),
      0,
    );
    assert.deepEqual(lines, [["north", "false"], ["south", "true"]]);
    // The site's verdict is the site's: north's change did not touch it.
    assert.equal(await page.textContent("#safety .verdict"), "SAFE");
    assert.equal((await banner(page)).safe, "true");
    assert.deepEqual(errors, []);
  },
});
