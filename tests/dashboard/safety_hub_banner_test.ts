/**
 * The dashboard's safety banner with the safety hub (docs/dashboard.md, "The safety banner"), in
 * real headless Chromium against a real service on 127.0.0.1 port 0: external events, waivers
 * and the verdicts of profiles. The hub is changed through `service.safetyHub`, as the Alpaca
 * device, the HTTP routes and the CLI change it. Where the point is that the page follows the
 * stream, the page's timers (its 5 s poll among them) are stopped first with playwright's clock,
 * so only the stream's events can change what it shows: no test here races a poll.
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
  console.log(`skipping the dashboard safety hub tests: ${browserMissing}`);
}

/** The banner's own state, read in the page (`let` bindings of the page's script). */
declare const safetyBusy: boolean;

/** `weather` decides the site; `dome` the profile `north`, `roof` the profile `south`. */
const TYPES = parseTypes(
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

/** The texts of the elements of `selector` in the page. */
function texts(page: Page, selector: string): Promise<string[]> {
  return page.evaluate(
    (sel) =>
      Array.from(
        (globalThis as unknown as { document: PageDocument }).document.querySelectorAll(sel),
        (e) => e.textContent ?? "",
      ),
    selector,
  );
}

/** Waits until the elements of `selector` have exactly the texts `want`, in order. */
function waitForTexts(page: Page, selector: string, want: string[]): Promise<unknown> {
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
  );
}

/** The banner's data attributes. */
function bannerState(page: Page) {
  return page.evaluate(() => {
    const box = (globalThis as unknown as { document: PageDocument }).document
      .querySelector("#safety")!;
    return { safe: box.dataset.safe, waived: box.dataset.waived, hidden: box.hidden };
  }, 0);
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
    await using server = await testServer({ siteDir: tmp.path, types: TYPES });
    await postJson(`${server.url}/event`, { type: "weather", data: { wind_mps: 3 } });
    await using browser = await launch();
    const { page, errors } = await openPage(browser, `${server.url}/`, undefined, false, {
      fakeClock: true,
    });
    await waitForText(page, "#safety .verdict", "SAFE");
    const ups = externalEvent("ups-mains", "UPS", "on battery");
    await server.service.safetyHub.setExternal([ups], "site", ACTOR);
    await waitForText(page, "#safety .verdict", "UNSAFE");
    await waitForTexts(page, "#safety .reasons li", ["external: UPS: on battery"]);
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
    await waitForTexts(page, "#safety .reasons li", verdict.reasons);
    // Released: the page follows again, with the same stopped timers.
    await server.service.safetyHub.clearExternal([ups.Id, rain.Id], "site", ACTOR);
    await waitForText(page, "#safety .verdict", "SAFE");
    assert.deepEqual(await texts(page, "#safety .reasons li"), []);
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
      types: TYPES,
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
    assert.deepEqual(await bannerState(page), { safe: "true", waived: "true", hidden: false });
    assert.equal(await page.textContent("#safety .verdict"), "SAFE");
    // Shown once, as the waiver: not again among the reasons.
    assert.deepEqual(await texts(page, "#safety .reasons li"), []);
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
    await waitFor(
      page,
      () =>
        (globalThis as unknown as { document: PageDocument }).document.querySelector("#safety")!
          .dataset.waived === "false",
      0,
    );
    assert.deepEqual(await texts(page, "#safety .waivers li"), []);
    assert.deepEqual(errors, []);
  },
});

Deno.test({
  name: "the banner lists each profile's verdict",
  ignore: browserMissing !== undefined,
  async fn() {
    await using tmp = await tempDir();
    await using server = await testServer({ siteDir: tmp.path, types: TYPES });
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
    assert.equal((await bannerState(page)).safe, "true");
    assert.deepEqual(errors, []);
  },
});
