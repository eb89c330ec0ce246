/**
 * The dashboard's charts (docs/dashboard.md) in real headless Chromium against a real service on
 * 127.0.0.1 port 0: loaded from `GET /history`, one vertex per bucket, the range selector, live
 * points from the stream, limit lines, run and safety marks, hover in the site zone, and a LAN
 * peer under `--public-read`.
 * @module
 */
import assert from "node:assert/strict";
import { join } from "node:path";
import { parseTypes } from "../../core/types_registry.ts";
import { postJson, tempDir, testServer } from "../_shared/util.ts";
import { netns, netnsUnavailable } from "../_shared/net.ts";
import {
  browserMissing,
  CHROMIUM,
  launch,
  type OpenPage,
  openPage,
  type Page,
  type PageDocument,
  waitFor,
} from "../_shared/browser.ts";

if (browserMissing) {
  // deno-lint-ignore no-console
  console.log(`skipping the dashboard chart tests: ${browserMissing}`);
}

const TYPES = parseTypes(
  JSON.stringify({
    weather: {
      critical: true,
      fields: {
        wind_mps: { label: "Wind", unit: "m/s", warn_above: 10, alarm_above: 15 },
        temp_c: { unit: "°C", warn_below: -5, alarm_below: -10 },
      },
    },
  }),
  "types.json",
);
const WIND = '[data-type="weather"] figure.chart[data-field="wind_mps"]';
const MIN = 60_000;

/** Seeds `count` weather events, one every 7 minutes back from 13 minutes ago, skipping some. */
async function seedWeather(url: string, count: number, skip: (i: number) => boolean) {
  const now = Date.now();
  const events = [];
  for (let i = 0; i < count; i++) {
    if (skip(i)) continue;
    events.push({
      type: "weather",
      ts: new Date(now - 13 * MIN - i * 7 * MIN).toISOString(),
      data: { wind_mps: 3 + (i % 9) / 2, temp_c: -2 - (i % 5) },
    });
  }
  const res = await postJson(`${url}/events`, events.reverse());
  assert.equal(res.status, 200, JSON.stringify(res.body));
}

/** The history requests of the page for `type`, in order. */
function historyRequests(opened: OpenPage, type: string): URL[] {
  return opened.requests.filter((u) =>
    u.pathname === "/history" && u.searchParams.get("type") === type
  );
}

/** The buckets the service answers for a request the page made, for one field. */
async function bucketsOf(url: URL, field: string): Promise<number> {
  const res = await fetch(url);
  assert.equal(res.status, 200);
  let n = 0;
  for (const line of (await res.text()).split("\n")) {
    if (!line) continue;
    const b = JSON.parse(line);
    if (b.fields && field in b.fields) n++;
  }
  return n;
}

/** The vertex count of a chart: the M and L commands of its series path. */
function vertices(page: Page, selector: string): Promise<number> {
  return page.evaluate((sel) => {
    const d = (globalThis as unknown as { document: PageDocument }).document
      .querySelector(sel + " path.series")?.getAttribute("d") ?? "";
    return (d.match(/[ML]/g) ?? []).length;
  }, selector);
}

function waitForVertices(page: Page, selector: string, want: number): Promise<unknown> {
  return waitFor(page, ([sel, n]) => {
    const svg = (globalThis as unknown as { document: PageDocument }).document
      .querySelector(sel + " svg");
    return svg?.dataset.vertices === String(n);
  }, [selector, want] as const);
}

Deno.test({
  name:
    "the dashboard charts a field from GET /history with one vertex per bucket the service answers",
  ignore: browserMissing !== undefined,
  async fn() {
    await using tmp = await tempDir();
    await using server = await testServer({ siteDir: tmp.path, types: TYPES });
    // 7-minute steps over 9 hours, with a 70-minute hole that breaks the line.
    await seedWeather(server.url, 78, (i) => i >= 20 && i < 30);
    await using browser = await launch();
    const opened = await openPage(browser, `${server.url}/`);
    const { page, errors } = opened;
    await waitFor(page, (sel) => {
      const svg = (globalThis as unknown as { document: PageDocument }).document
        .querySelector(sel + " svg");
      return Number(svg?.dataset.vertices ?? 0) > 0;
    }, WIND);
    const request = historyRequests(opened, "weather")[0]!;
    assert.equal(request.searchParams.get("every"), "1m");
    const since = Date.parse(request.searchParams.get("since")!);
    assert.ok(Math.abs(Date.now() - 12 * 3600_000 - since) < 2 * MIN, `since ${since}`);
    const buckets = await bucketsOf(request, "wind_mps");
    assert.equal(buckets, 68);
    assert.equal(await vertices(page, WIND), buckets);
    // The hole is a break: two sub-paths.
    const d = await page.evaluate(
      (sel) =>
        (globalThis as unknown as { document: PageDocument }).document
          .querySelector(sel + " path.series")?.getAttribute("d") ?? "",
      WIND,
    );
    assert.equal((d.match(/M/g) ?? []).length, 2);
    assert.deepEqual(errors, []);
  },
});

Deno.test({
  name: "the range selector asks GET /history for the chosen hours, redraws, and is remembered",
  ignore: browserMissing !== undefined,
  async fn() {
    await using tmp = await tempDir();
    await using server = await testServer({ siteDir: tmp.path, types: TYPES });
    await seedWeather(server.url, 78, () => false); // 9 hours
    await using browser = await launch();
    const opened = await openPage(browser, `${server.url}/`);
    const { page, errors } = opened;
    await waitForVertices(page, WIND, 78);
    await page.click('#range button[data-hours="6"]');
    await waitFor(page, (sel) => {
      const svg = (globalThis as unknown as { document: PageDocument }).document
        .querySelector(sel + " svg");
      return svg?.dataset.span === String(6 * 3600_000) && Number(svg.dataset.vertices) < 78;
    }, WIND);
    const request = historyRequests(opened, "weather").at(-1)!;
    assert.equal(request.searchParams.get("every"), "30s");
    const since = Date.parse(request.searchParams.get("since")!);
    assert.ok(Math.abs(Date.now() - 6 * 3600_000 - since) < MIN, `since ${since}`);
    const buckets = await bucketsOf(request, "wind_mps");
    assert.equal(buckets, 50); // 13 min + 49 * 7 min <= 6 h < 13 min + 50 * 7 min
    await waitForVertices(page, WIND, buckets);
    assert.equal(
      await page.evaluate(
        () =>
          (globalThis as unknown as { document: PageDocument }).document
            .querySelector('#range button[data-hours="6"]')?.getAttribute("aria-pressed"),
        0,
      ),
      "true",
    );
    // Remembered: a reload asks for 6 hours at once.
    const before = historyRequests(opened, "weather").length;
    await page.reload();
    await waitForVertices(page, WIND, buckets);
    assert.equal(historyRequests(opened, "weather")[before]!.searchParams.get("every"), "30s");
    assert.deepEqual(errors, []);
  },
});

Deno.test({
  name: "a posted event appends a live point to its chart",
  ignore: browserMissing !== undefined,
  async fn() {
    await using tmp = await tempDir();
    await using server = await testServer({ siteDir: tmp.path, types: TYPES });
    await seedWeather(server.url, 12, () => false);
    await using browser = await launch();
    const { page, errors } = await openPage(browser, `${server.url}/`);
    await waitForVertices(page, WIND, 12);
    await postJson(`${server.url}/event`, { type: "weather", data: { wind_mps: 12.5 } });
    await waitForVertices(page, WIND, 13);
    // The new vertex is at the right edge, at the value's height.
    const last = await page.evaluate((sel) => {
      const svg = (globalThis as unknown as { document: PageDocument }).document
        .querySelector(sel + " svg")!;
      const d = svg.querySelector("path.series")!.getAttribute("d")!;
      const [x, y] = d.split(/[ML]/).at(-1)!.replace("h0", "").split(",").map(Number);
      return {
        x: x!,
        y: y!,
        lo: Number(svg.dataset.lo),
        hi: Number(svg.dataset.hi),
        span: Number(svg.dataset.span),
      };
    }, WIND);
    // At the middle of its 1-minute bucket: within a bucket of now, whatever the time axis spans.
    assert.ok(
      last.x >= 600 - (MIN / last.span) * 600 - 0.1,
      `x ${last.x} of a ${last.span} ms axis`,
    );
    assert.ok(Math.abs(100 - ((12.5 - last.lo) / (last.hi - last.lo)) * 100 - last.y) < 0.02);
    assert.deepEqual(errors, []);
  },
});

Deno.test({
  name: "the chart draws the field's warn and alarm limits as their own lines at their values",
  ignore: browserMissing !== undefined,
  async fn() {
    await using tmp = await tempDir();
    await using server = await testServer({ siteDir: tmp.path, types: TYPES });
    await seedWeather(server.url, 6, () => false);
    await using browser = await launch();
    const { page, errors } = await openPage(browser, `${server.url}/`);
    await waitForVertices(page, WIND, 6);
    for (
      const [field, want] of [
        ["wind_mps", { "warn_above": 10, "alarm_above": 15 }],
        ["temp_c", { "warn_below": -5, "alarm_below": -10 }],
      ] as const
    ) {
      const lines = await page.evaluate((sel) => {
        const svg = (globalThis as unknown as { document: PageDocument }).document
          .querySelector(sel + " svg")!;
        return {
          lo: Number(svg.dataset.lo),
          hi: Number(svg.dataset.hi),
          lines: Array.from(svg.querySelectorAll("line.limit"), (l) => ({
            cls: l.getAttribute("class"),
            limit: l.dataset.limit,
            y1: Number(l.getAttribute("y1")),
            y2: Number(l.getAttribute("y2")),
          })),
        };
      }, `[data-type="weather"] figure.chart[data-field="${field}"]`);
      assert.equal(lines.lines.length, 2, field);
      for (const line of lines.lines) {
        const value = want[line.limit as keyof typeof want] as number;
        assert.ok(value !== undefined, `${field}: ${line.limit}`);
        assert.equal(line.cls, `limit ${line.limit!.split("_")[0]}`);
        const y = 100 - ((value - lines.lo) / (lines.hi - lines.lo)) * 100;
        assert.ok(Math.abs(line.y1 - y) < 0.01 && line.y1 === line.y2, `${field} ${line.limit}`);
      }
    }
    assert.deepEqual(errors, []);
  },
});

Deno.test({
  name: "the charts mark a run's start and stop on the time axis",
  ignore: browserMissing !== undefined,
  async fn() {
    await using tmp = await tempDir();
    await using server = await testServer({ siteDir: tmp.path, types: TYPES });
    await seedWeather(server.url, 6, () => false);
    await using browser = await launch();
    const { page, errors } = await openPage(browser, `${server.url}/`);
    await waitForVertices(page, WIND, 6);
    const count = (cls: string) =>
      page.evaluate(
        ([sel, c]) =>
          (globalThis as unknown as { document: PageDocument }).document
            .querySelectorAll(`${sel} line.mark.run.${c}`).length,
        [WIND, cls] as const,
      );
    await postJson(`${server.url}/run/start`, { run_id: "m42-001" });
    await waitFor(
      page,
      (sel) =>
        (globalThis as unknown as { document: PageDocument }).document
          .querySelectorAll(sel + " line.mark.run.start").length === 1,
      WIND,
    );
    assert.equal(await count("stop"), 0);
    // Let the stop land at least one pixel after the start.
    const started = Date.now();
    await waitFor(page, (t) => Date.now() - t > 200, started);
    await postJson(`${server.url}/run/stop`, undefined);
    await waitFor(
      page,
      (sel) =>
        (globalThis as unknown as { document: PageDocument }).document
          .querySelectorAll(sel + " line.mark.run.stop").length === 1,
      WIND,
    );
    assert.deepEqual(errors, []);
  },
});

Deno.test({
  name: "the charts mark safety changes from the stream, and from GET /history after a reload",
  ignore: browserMissing !== undefined,
  async fn() {
    await using tmp = await tempDir();
    await using server = await testServer({ siteDir: tmp.path, types: TYPES });
    await seedWeather(server.url, 6, () => false);
    await using browser = await launch();
    const { page, errors } = await openPage(browser, `${server.url}/`);
    await waitForVertices(page, WIND, 6);
    const marks = () =>
      page.evaluate(
        (sel) =>
          Array.from(
            (globalThis as unknown as { document: PageDocument }).document
              .querySelectorAll(sel + " line.mark.safety"),
            (l) => l.getAttribute("class"),
          ),
        WIND,
      );
    const before = (await marks()).length;
    // Wind past its alarm makes the critical type unsafe: one telemetry.safety event.
    await postJson(`${server.url}/event`, { type: "weather", data: { wind_mps: 16 } });
    await waitFor(
      page,
      ([sel, n]) =>
        (globalThis as unknown as { document: PageDocument }).document
          .querySelectorAll(sel + " line.mark.safety").length > n,
      [WIND, before] as const,
    );
    const live = await marks();
    assert.equal(live.at(-1), "mark safety unsafe");
    await page.reload();
    await waitFor(
      page,
      ([sel, n]) =>
        (globalThis as unknown as { document: PageDocument }).document
          .querySelectorAll(sel + " line.mark.safety").length === n,
      [WIND, live.length] as const,
    );
    assert.deepEqual(await marks(), live);
    assert.deepEqual(errors, []);
  },
});

Deno.test({
  name: "hovering or touching a chart shows the site-zone time and the value of the nearest point",
  ignore: browserMissing !== undefined,
  async fn() {
    await using tmp = await tempDir();
    await using server = await testServer({
      siteDir: tmp.path,
      types: TYPES,
      timeZone: "Pacific/Honolulu",
    });
    // One point, 30 minutes ago, in the 1-hour range.
    const ts = new Date(Math.floor((Date.now() - 30 * MIN) / MIN) * MIN + 5000);
    await postJson(`${server.url}/event`, {
      type: "weather",
      ts: ts.toISOString(),
      data: { wind_mps: 7.25 },
    });
    await using browser = await launch();
    const { page, errors } = await openPage(
      browser,
      `${server.url}/`,
      { width: 1280, height: 900 },
      true,
    );
    await page.click('#range button[data-hours="1"]');
    await waitFor(page, (sel) => {
      const svg = (globalThis as unknown as { document: PageDocument }).document
        .querySelector(sel + " svg");
      // The 1-hour range (10 s buckets), not a longer range zoomed to the hour of data.
      return svg?.dataset.span === "3600000" && svg.dataset.every === "10000" &&
        svg.dataset.vertices === "1";
    }, WIND);
    // The bucket of 10 s holding ts, shown at its middle, in Honolulu (UTC-10).
    const mid = new Date(Math.floor(ts.getTime() / 10_000) * 10_000 + 5000);
    const hhmmss = new Date(mid.getTime() - 10 * 3600_000).toISOString().slice(11, 19);
    const want = new RegExp(`^\\w{3},? ${hhmmss} (HST|GMT-10) \u00b7 7\\.25 m/s$`);
    await page.hover(`${WIND} .plot`, { position: { x: 100, y: 30 } });
    await waitFor(page, (sel) => {
      const tip = (globalThis as unknown as { document: PageDocument }).document
        .querySelector(sel + " .tip");
      return tip !== null && !tip.hidden;
    }, WIND);
    assert.match((await page.textContent(`${WIND} .tip`))!, want);
    await page.tap(`[data-type="weather"] figure.chart[data-field="wind_mps"] .plot`, {
      position: { x: 20, y: 30 },
    });
    assert.match((await page.textContent(`${WIND} .tip`))!, want);
    assert.deepEqual(errors, []);
  },
});

Deno.test({
  name: "against a service without GET /history the charts grow from the live events",
  ignore: browserMissing !== undefined,
  async fn() {
    await using tmp = await tempDir();
    await using server = await testServer({ siteDir: tmp.path, types: TYPES });
    // A real proxy that answers 404 for /history and /safety, as an older service does.
    await using proxy = Deno.serve(
      { hostname: "127.0.0.1", port: 0, onListen() {} },
      (req) => {
        const url = new URL(req.url);
        if (url.pathname === "/history" || url.pathname === "/safety") {
          return new Response("not here", { status: 404 });
        }
        return fetch(`${server.url}${url.pathname}${url.search}`, { signal: req.signal });
      },
    );
    await using browser = await launch();
    const { page } = await openPage(browser, `http://127.0.0.1:${proxy.addr.port}/`);
    for (const [i, wind] of [4, 6].entries()) {
      await postJson(`${server.url}/event`, {
        type: "weather",
        ts: new Date(Date.now() - (3 - i) * MIN).toISOString(),
        data: { wind_mps: wind },
      });
      await waitForVertices(page, WIND, i + 1);
    }
  },
});

const skipLan = browserMissing ?? netnsUnavailable();
if (skipLan && !browserMissing) {
  // deno-lint-ignore no-console
  console.log(`skipping the LAN chart test: ${skipLan}`);
}

Deno.test({
  name:
    "with --public-read a browser on the LAN draws the charts from GET /history without the token",
  ignore: skipLan !== undefined,
  async fn() {
    await using ns = await netns();
    await using tmp = await tempDir();
    await using dir = await tempDir();
    await using server = await testServer({
      siteDir: tmp.path,
      hostname: "0.0.0.0",
      types: TYPES,
      token: "lan-secret-token-0123456789",
      publicRead: true,
      trustLoopback: true,
    });
    const local = `http://127.0.0.1:${server.addr.port}`;
    await seedWeather(local, 10, () => false);
    // Chromium runs inside the namespace: every request it makes comes from the LAN address.
    const wrapper = join(dir.path, "chromium-in-netns");
    await Deno.writeTextFile(
      wrapper,
      `#!/bin/sh\nexec ip netns exec ${ns.name} ${CHROMIUM} "$@"\n`,
    );
    await Deno.chmod(wrapper, 0o755);
    await using browser = await launch(wrapper);
    const { page, errors } = await openPage(browser, `http://${ns.hostAddr}:${server.addr.port}/`);
    await waitForVertices(page, WIND, 10);
    await postJson(`${local}/event`, { type: "weather", data: { wind_mps: 5 } });
    await waitForVertices(page, WIND, 11);
    assert.deepEqual(errors, []);
  },
});

/** The vertex count of each piece of a chart's line (a piece starts at each M). */
function pieces(page: Page, selector: string): Promise<number[]> {
  return page.evaluate((sel) => {
    const d = (globalThis as unknown as { document: PageDocument }).document
      .querySelector(sel + " path.series")?.getAttribute("d") ?? "";
    return d.split("M").slice(1).map((piece) => (piece.match(/L/g) ?? []).length + 1);
  }, selector);
}

/** Posts `type` events every 2 minutes back from 2 minutes ago over `minutes`, skipping some. */
async function seedEvery2Min(
  url: string,
  type: string,
  minutes: number,
  skip: (i: number) => boolean,
): Promise<number> {
  const now = Date.now();
  const events = [];
  for (let i = 0; 2 + 2 * i <= minutes; i++) {
    if (skip(i)) continue;
    events.push({
      type,
      ts: new Date(now - (2 + 2 * i) * MIN).toISOString(),
      data: { battery_v: 12.5 + (i % 4) / 10 },
    });
  }
  const res = await postJson(`${url}/events`, events.reverse());
  assert.equal(res.status, 200, JSON.stringify(res.body));
  return events.length;
}

/** Waits until the chart shows the 1-hour range (10 s buckets) with `n` vertices. */
function waitForHour(page: Page, chart: string, n: number): Promise<unknown> {
  return waitFor(page, ([sel, want]) => {
    const svg = (globalThis as unknown as { document: PageDocument }).document
      .querySelector(sel + " svg");
    return svg?.dataset.span === "3600000" && svg.dataset.every === "10000" &&
      svg.dataset.vertices === String(want);
  }, [chart, n] as const);
}

const POWER = parseTypes(
  JSON.stringify({
    power: { stale_after_s: 300, fields: { battery_v: { unit: "V", alarm_below: 11.8 } } },
  }),
  "types.json",
);

/**
 * Seeds `type` every 2 minutes over `minutes` (some left out), opens the page at the 1-hour range
 * (10 s buckets) and returns the vertex count of each piece of its `battery_v` line.
 */
async function piecesAtOneHour(
  types: ReturnType<typeof parseTypes>,
  type: string,
  minutes: number,
  skip: (i: number) => boolean,
): Promise<number[]> {
  await using tmp = await tempDir();
  await using server = await testServer({ siteDir: tmp.path, types });
  const sent = await seedEvery2Min(server.url, type, minutes, skip);
  const chart = `[data-type="${type}"] figure.chart[data-field="battery_v"]`;
  await using browser = await launch();
  const { page, errors } = await openPage(browser, `${server.url}/`);
  await page.click('#range button[data-hours="1"]');
  await waitForHour(page, chart, sent);
  const drawn = await pieces(page, chart);
  assert.deepEqual(errors, []);
  return drawn;
}

Deno.test({
  name:
    "at 1 h the chart joins a type sent every 2 minutes into one line, broken only past twice its stale_after_s",
  ignore: browserMissing !== undefined,
  async fn() {
    // 2 to 56 minutes ago; i = 10..14 left out: a hole of 12 minutes, past 2 x 300 s. Newest
    // first: i = 15..27 before the hole, i = 0..9 after it.
    assert.deepEqual(await piecesAtOneHour(POWER, "power", 56, (i) => i >= 10 && i < 15), [13, 10]);
  },
});

Deno.test({
  name:
    "without stale_after_s the chart joins points at the type's median spacing and breaks past twice it",
  ignore: browserMissing !== undefined,
  async fn() {
    // No stale_after_s for "probe": 2-minute steps, one hole of 6 minutes (past 2 x 2 minutes).
    assert.deepEqual(await piecesAtOneHour(TYPES, "probe", 50, (i) => i === 7 || i === 8), [16, 7]);
  },
});

Deno.test({
  name: "at the default 12 h a type with an hour of data is drawn across the whole chart",
  ignore: browserMissing !== undefined,
  async fn() {
    await using tmp = await tempDir();
    await using server = await testServer({ siteDir: tmp.path, types: POWER });
    const sent = await seedEvery2Min(server.url, "power", 60, () => false);
    const chart = '[data-type="power"] figure.chart[data-field="battery_v"]';
    await using browser = await launch();
    const { page, errors } = await openPage(browser, `${server.url}/`);
    await waitForVertices(page, chart, sent);
    const drawn = await page.evaluate((sel) => {
      const fig = (globalThis as unknown as { document: PageDocument }).document.querySelector(
        sel,
      )!;
      const d = fig.querySelector("path.series")!.getAttribute("d")!;
      const xs = d.split(/[ML]/).slice(1).map((v) => Number(v.replace("h0", "").split(",")[0]));
      return {
        xs,
        span: Number(fig.querySelector("svg")!.dataset.span),
        caption: fig.querySelector(".span")!.textContent,
        pressed: (globalThis as unknown as { document: PageDocument }).document
          .querySelector('#range button[aria-pressed="true"]')?.textContent,
      };
    }, chart);
    assert.equal(drawn.pressed, "12 h");
    // From a bucket before the first point (an hour ago) to now: about an hour, not 12. The
    // first point sits a bucket and a half from the left edge, the last (2 minutes before the
    // seeding) near the right one; 12 hours would have put the first at x = 550.
    assert.ok(drawn.span >= 3600_000 && drawn.span < 2 * 3600_000, `span ${drawn.span}`);
    assert.ok(drawn.xs[0]! < 30, `first x ${drawn.xs[0]}`);
    assert.ok(drawn.xs.at(-1)! > 540, `last x ${drawn.xs.at(-1)}`);
    assert.match(drawn.caption ?? "", /^last 1 h( [1-9] min)? \(all data\)$/);
    assert.deepEqual(errors, []);
  },
});

/** A box on the page, from getBoundingClientRect. */
interface Box {
  left: number;
  top: number;
  right: number;
  bottom: number;
}

Deno.test({
  name: "the chart's value and time labels lie outside its plot area, on a desktop and a phone",
  ignore: browserMissing !== undefined,
  async fn() {
    await using tmp = await tempDir();
    await using server = await testServer({ siteDir: tmp.path, types: TYPES });
    await seedWeather(server.url, 40, () => false);
    await using browser = await launch();
    for (const viewport of [{ width: 1280, height: 900 }, { width: 390, height: 844 }]) {
      const { page, errors } = await openPage(browser, `${server.url}/`, viewport);
      await waitForVertices(page, WIND, 40);
      const boxes = await page.evaluate(() => {
        type El = { getBoundingClientRect(): Box; dataset: Record<string, string> };
        const doc = (globalThis as unknown as {
          document: { querySelectorAll(s: string): El[] };
        }).document;
        const box = (e: El | null) => {
          const r = e!.getBoundingClientRect();
          return { left: r.left, top: r.top, right: r.right, bottom: r.bottom };
        };
        return Array.from(doc.querySelectorAll("figure.chart"), (fig) => {
          const f = fig as unknown as { querySelector(s: string): El | null };
          return {
            field: fig.dataset.field!,
            plot: box(f.querySelector("svg")),
            labels: [".hi", ".lo", ".t0", ".t1"].map((s) => ({ s, ...box(f.querySelector(s)) })),
          };
        });
      }, 0);
      assert.equal(boxes.length, 2);
      for (const { field, plot, labels } of boxes) {
        for (const label of labels) {
          const where = `${viewport.width} px, ${field} ${label.s}: ${JSON.stringify(label)} ${
            JSON.stringify(plot)
          }`;
          assert.ok(label.right > label.left && label.bottom > label.top, `empty ${where}`);
          const apart = label.right <= plot.left || label.left >= plot.right ||
            label.bottom <= plot.top || label.top >= plot.bottom;
          assert.ok(apart, `over the plot: ${where}`);
        }
      }
      assert.deepEqual(errors, []);
      await page.close();
    }
  },
});
