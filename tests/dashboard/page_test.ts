import assert from "node:assert/strict";
import { join } from "node:path";
import { renderDashboard } from "../../dashboard/page.ts";
import { createHandler } from "../../server.ts";
import { TelemetryService } from "../../core/service.ts";
import { parseTypes } from "../../core/types_registry.ts";
import { postJson, tempDir, testServer } from "../_shared/util.ts";
import { curlMissing, opensslMissing, selfSignedCert } from "../_shared/net.ts";
import {
  type Browser,
  browserMissing,
  launch,
  openPage as openBrowserPage,
  type Page,
} from "../_shared/browser.ts";

const ARTIFACTS = join(import.meta.dirname!, "..", "artifacts");

const skip = browserMissing;
if (skip) {
  // deno-lint-ignore no-console
  console.log(`skipping the browser tests of GET /: ${skip}`);
}

/** Opens the dashboard at this file's size; records console errors and uncaught exceptions. */
function openPage(browser: Browser, url: string, viewport = { width: 1180, height: 560 }) {
  return openBrowserPage(browser, url, viewport);
}

function waitForText(
  page: Page,
  selector: string,
  text: string,
  timeout: number,
): Promise<unknown> {
  return page.waitForFunction(
    // Runs in the page, where `document` exists; the test is type-checked without the DOM lib.
    ([sel, want]) =>
      (globalThis as unknown as {
        document: { querySelector(s: string): { textContent: string | null } | null };
      }).document.querySelector(sel)?.textContent === want,
    [selector, text] as const,
    { timeout },
  );
}

const WIND = '[data-type="weather"] [data-field="wind_mps"] dd';

Deno.test({
  name: "GET / shows a posted value, then the next one within 2 s",
  ignore: skip !== undefined,
  async fn() {
    await using tmp = await tempDir();
    await using server = await testServer({ siteDir: tmp.path });
    const post = (type: string, data: Record<string, unknown>) =>
      postJson(`${server.url}/event`, { type, data });
    await post("weather", { wind_mps: 2.1, gust_mps: 4.8, temp_c: 3.2, humidity_pct: 71 });
    await post("environment", { dome_temp_c: 4.1, mirror_temp_c: 3.9, dewpoint_c: -1.7 });
    await postJson(`${server.url}/run/start`, { run_id: "m31-001", meta: { target: "M31" } });
    await post("status", { dome: "open", tracking: true, filter: "R" });
    await post("camera", { ccd_temp_c: -20, exposure_s: 300, binning: [2, 2], cooler: true });
    await post("focuser", { position: 18234, temp_c: 3.6, moving: false });

    await using browser = await launch();
    const { page, errors } = await openPage(browser, `${server.url}/`);
    await waitForText(page, WIND, "2.1", 5000);
    await post("weather", { wind_mps: 3.4, gust_mps: 6.2, temp_c: 3.1, humidity_pct: 72 });
    await waitForText(page, WIND, "3.4", 2000);
    await Deno.mkdir(ARTIFACTS, { recursive: true });
    await page.screenshot({ path: join(ARTIFACTS, "dashboard.png"), fullPage: true });
    assert.deepEqual(errors, []);
  },
});

Deno.test({
  name: "GET / gets its live stream gzip-compressed in Chromium and shows each value from it",
  ignore: skip !== undefined,
  async fn() {
    await using tmp = await tempDir();
    await using server = await testServer({ siteDir: tmp.path });
    await using browser = await launch();
    const page = await browser.newPage({ viewport: { width: 1180, height: 560 } });
    const encodings: string[] = [];
    page.on("response", (res) => {
      if (new URL(res.url()).pathname === "/stream") {
        encodings.push(res.headers()["content-encoding"] ?? "identity");
      }
    });
    await page.goto(`${server.url}/`);
    // The card appears from the stream only: the type did not exist when the page loaded.
    for (const wind of [1.5, 2.5, 3.5]) {
      await postJson(`${server.url}/event`, { type: "weather", data: { wind_mps: wind } });
      await waitForText(page, WIND, String(wind), 5000);
    }
    assert.deepEqual(encodings, ["gzip"]);
  },
});

Deno.test({
  name: "GET / shows the live connection and the active run in its header",
  ignore: skip !== undefined,
  async fn() {
    await using tmp = await tempDir();
    await using server = await testServer({ siteDir: tmp.path });
    await using browser = await launch();
    const { page, errors } = await openPage(browser, `${server.url}/`);
    await waitForText(page, "#conn .label", "live", 5000);
    assert.equal(await page.textContent("#run .label"), "no run");
    await postJson(`${server.url}/run/start`, { run_id: "night-7" });
    await waitForText(page, "#run .label", "run night-7", 2000);
    await postJson(`${server.url}/run/stop`, undefined);
    await waitForText(page, "#run .label", "no run", 2000);
    assert.deepEqual(errors, []);
  },
});

Deno.test("GET / answers HTML under a nonce Content-Security-Policy", async () => {
  await using tmp = await tempDir();
  await using server = await testServer({ siteDir: tmp.path });
  const res = await fetch(`${server.url}/`);
  const html = await res.text();
  assert.equal(res.status, 200);
  assert.equal(res.headers.get("content-type"), "text/html; charset=utf-8");
  const csp = res.headers.get("content-security-policy") ?? "";
  const nonce = /script-src 'nonce-([^']+)'/.exec(csp)?.[1];
  assert.ok(nonce, `no script nonce in ${csp}`);
  assert.match(csp, /default-src 'none'/);
  assert.match(csp, /connect-src 'self'/);
  assert.ok(html.includes(`<script nonce="${nonce}">`));
  assert.ok(html.includes(`<style nonce="${nonce}">`));
});

Deno.test("GET / loads no external assets", async () => {
  await using tmp = await tempDir();
  await using server = await testServer({ siteDir: tmp.path });
  const html = await (await fetch(`${server.url}/`)).text();
  assert.doesNotMatch(html, /\b(?:src|href)=["']?(?:https?:)?\/\//i);
  assert.doesNotMatch(html, /@import|url\(/i);
});

Deno.test("GET / uses a fresh nonce for every response", async () => {
  await using tmp = await tempDir();
  await using server = await testServer({ siteDir: tmp.path });
  const nonces = new Set<string | null>();
  for (let i = 0; i < 2; i++) {
    const res = await fetch(`${server.url}/`);
    await res.body?.cancel();
    nonces.add(res.headers.get("content-security-policy"));
  }
  assert.equal(nonces.size, 2);
});

Deno.test("GET / is refused with 403 for a foreign Host", async () => {
  await using tmp = await tempDir();
  await using service = await TelemetryService.open({ siteDir: tmp.path, timeZone: "UTC" });
  const handler = createHandler(service, { hostname: "127.0.0.1" });
  const res = await handler(
    new Request("http://127.0.0.1/", { headers: { host: "evil.example" } }),
  );
  await res.body?.cancel();
  assert.equal(res.status, 403);
});

Deno.test("renderDashboard() rejects a nonce that is not base64", () => {
  assert.throws(() => renderDashboard('x" onload="alert(1)'), SyntaxError);
});

// --- The empty page's hint --------------------------------------------------------------------

const skipHint = skip ?? curlMissing();
const skipHttpsHint = skipHint ?? opensslMissing();

/** Runs the empty page's hint in a shell, as a user pasting it would, with `env` added. */
async function runHint(hint: string, env: Record<string, string> = {}) {
  const out = await new Deno.Command("sh", {
    args: ["-c", `${hint} -s --max-time 10`],
    env,
    stdout: "piped",
    stderr: "piped",
  }).output();
  return { code: out.code, text: new TextDecoder().decode(out.stdout) };
}

const HINT_HEAD =
  `curl -d '{"type":"weather","data":{"wind_mps":2.1}}' -H 'content-type: application/json' `;

Deno.test({
  name:
    "GET / with no events hints a curl command posting to the address the page was loaded from, which works",
  ignore: skipHint !== undefined,
  async fn() {
    await using tmp = await tempDir();
    await using server = await testServer({ siteDir: tmp.path });
    assert.notEqual(new URL(server.url).port, "6562");
    await using browser = await launch();
    const { page, errors } = await openPage(browser, `${server.url}/`);
    const hint = (await page.textContent("#empty code"))!;
    assert.equal(hint, `${HINT_HEAD}${server.url}/event`);
    const ran = await runHint(hint);
    assert.equal(ran.code, 0, ran.text);
    await waitForText(page, WIND, "2.1", 5000);
    assert.deepEqual(errors, []);
  },
});

Deno.test({
  name: "GET / over HTTPS hints a curl command with the https scheme",
  ignore: skipHttpsHint !== undefined,
  async fn() {
    await using dir = await tempDir();
    await using tmp = await tempDir();
    const { cert, key } = await selfSignedCert(dir.path);
    await using server = await testServer({ siteDir: tmp.path, tlsCert: cert, tlsKey: key });
    assert.match(server.url, /^https:\/\/127\.0\.0\.1:\d+$/);
    await using browser = await launch();
    const { page, errors } = await openBrowserPage(
      browser,
      `${server.url}/`,
      { width: 1180, height: 560 },
      false,
      { ignoreHTTPSErrors: true },
    );
    const hint = (await page.textContent("#empty code"))!;
    assert.equal(hint, `${HINT_HEAD}${server.url}/event`);
    // curl trusts the test's certificate through its own variable; the command is the page's.
    const ran = await runHint(hint, { CURL_CA_BUNDLE: cert });
    assert.equal(ran.code, 0, ran.text);
    await waitForText(page, WIND, "2.1", 5000);
    assert.deepEqual(errors, []);
  },
});

// --- The types registry on the dashboard (docs/types.md) ---------------------------------------

const DOCS = join(import.meta.dirname!, "../..", "docs");
const REGISTRY = parseTypes(
  await Deno.readTextFile(new URL("../../examples/types.json", import.meta.url)),
  "examples/types.json",
);

/** Minimal DOM typing for functions that run in the page (the tests have no DOM lib). */
interface PageElement {
  textContent: string | null;
  hidden: boolean;
  className: string;
  dataset: Record<string, string | undefined>;
  getAttribute(name: string): string | null;
}
interface PageDocument {
  querySelector(s: string): PageElement | null;
  querySelectorAll(s: string): PageElement[];
  documentElement: { scrollWidth: number };
}

function computedColor(page: Page, selector: string): Promise<string | null> {
  return page.evaluate((sel) => {
    const g = (globalThis as unknown as { document: PageDocument }).document;
    const e = g.querySelector(sel);
    return e
      ? (globalThis as unknown as { getComputedStyle(e: PageElement): { color: string } })
        .getComputedStyle(e).color
      : null;
  }, selector);
}

function waitFor(page: Page, fn: (sel: string) => boolean, sel: string, timeout = 5000) {
  return page.waitForFunction(fn, sel, { timeout });
}

/** The types of the cards, in page order. */
function cardOrder(page: Page): Promise<string[]> {
  return page.evaluate(() => {
    const d = (globalThis as unknown as { document: PageDocument }).document;
    return Array.from(d.querySelectorAll("article.card"), (e) => e.dataset.type ?? "");
  }, 0);
}

const RED = "rgb(224, 108, 108)"; // --bad
const AMBER = "rgb(224, 164, 88)"; // --warn
const NEUTRAL = "rgb(241, 245, 249)"; // --value
const GREEN = "rgb(95, 185, 138)"; // --ok

Deno.test({
  name: "GET / colours a value past its alarm limit red and one past its warning amber",
  ignore: skip !== undefined,
  async fn() {
    await using tmp = await tempDir();
    await using server = await testServer({ siteDir: tmp.path, types: REGISTRY });
    await postJson(`${server.url}/event`, {
      type: "weather",
      data: { wind_mps: 16.2, gust_mps: 17, humidity_pct: 40, rain: false, safe: true },
    });
    await using browser = await launch();
    const { page, errors } = await openPage(browser, `${server.url}/`);
    const wind = '[data-type="weather"] [data-field="wind_mps"] dd';
    await waitForText(page, wind, "16.2", 5000);
    assert.equal(await computedColor(page, wind), RED);
    assert.equal(
      await page.textContent('[data-type="weather"] [data-field="wind_mps"] .tag'),
      "ALARM",
    );
    assert.equal(
      await page.textContent('[data-type="weather"] [data-field="wind_mps"] dt'),
      "Wind",
    );
    assert.equal(
      await page.textContent('[data-type="weather"] [data-field="wind_mps"] .unit'),
      "m/s",
    );
    assert.equal(
      await computedColor(page, '[data-type="weather"] [data-field="gust_mps"] dd'),
      AMBER,
    );
    assert.equal(
      await computedColor(page, '[data-type="weather"] [data-field="humidity_pct"] dd'),
      NEUTRAL,
    );
    await waitForText(page, "#alerts", "1 alarm \u00b7 4 stale", 2000);
    await postJson(`${server.url}/event`, { type: "weather", data: { wind_mps: 3, rain: true } });
    await waitForText(page, wind, "3", 2000);
    assert.equal(await computedColor(page, wind), NEUTRAL);
    // A boolean past its alarm_if is red too.
    assert.equal(
      await computedColor(page, '[data-type="weather"] [data-field="rain"] dd'),
      RED,
    );
    assert.deepEqual(errors, []);
  },
});

Deno.test({
  name: "GET / never shows a boolean green because it is true; without limits it is neutral",
  ignore: skip !== undefined,
  async fn() {
    await using tmp = await tempDir();
    await using server = await testServer({ siteDir: tmp.path, types: REGISTRY });
    await postJson(`${server.url}/event`, {
      type: "status",
      data: { observing: true, parked: false, state: "observing" },
    });
    await using browser = await launch();
    const { page, errors } = await openPage(browser, `${server.url}/`);
    const sel = (f: string) => `[data-type="status"] [data-field="${f}"] dd`;
    await waitForText(page, sel("observing"), "true", 5000);
    for (const field of ["observing", "parked"]) {
      const color = await computedColor(page, sel(field));
      assert.notEqual(color, GREEN, field);
      assert.equal(color, NEUTRAL, field);
    }
    assert.deepEqual(errors, []);
  },
});

Deno.test({
  name:
    "GET / turns a card STALE after its stale_after_s, counts it in the header and keeps the age growing",
  ignore: skip !== undefined,
  async fn() {
    await using tmp = await tempDir();
    const types = parseTypes(
      '{"power": {"stale_after_s": 5, "critical": true, "fields": {"battery_v": {"unit": "V"}}}}',
      "t.json",
    );
    await using server = await testServer({ siteDir: tmp.path, types });
    // The page is open before the event is posted, so a slow browser start under load cannot
    // use up the fresh window: measured 0.5 s ago, the card is fresh now and stale 4.5 s later.
    await using browser = await launch();
    const { page, errors } = await openPage(browser, `${server.url}/`);
    await postJson(`${server.url}/event`, {
      type: "power",
      data: { battery_v: 12.6 },
      ts: new Date(Date.now() - 500).toISOString(),
    });
    const badge = '[data-type="power"] .badge';
    await waitForText(page, '[data-type="power"] [data-field="battery_v"] dd', "12.6", 5000);
    assert.equal(
      await page.evaluate(
        (s) =>
          (globalThis as unknown as { document: PageDocument }).document.querySelector(s)!.hidden,
        badge,
      ),
      true,
    );
    await waitFor(
      page,
      (s) =>
        /^STALE \d+ s$/.test(
          (globalThis as unknown as { document: PageDocument }).document.querySelector(s)
            ?.textContent ?? "",
        ),
      badge,
      8000,
    );
    assert.equal(
      await page.evaluate(
        (s) =>
          (globalThis as unknown as { document: PageDocument }).document.querySelector(s)!.hidden,
        badge,
      ),
      false,
    );
    await waitForText(page, "#alerts", "0 alarm \u00b7 1 stale", 5000);
    assert.equal(await computedColor(page, badge), "rgb(0, 0, 0)");
    // A new measurement clears it.
    await postJson(`${server.url}/event`, { type: "power", data: { battery_v: 12.5 } });
    await waitForText(page, "#alerts", "0 alarm \u00b7 0 stale", 5000);
    assert.equal(
      await page.evaluate(
        (s) =>
          (globalThis as unknown as { document: PageDocument }).document.querySelector(s)!.hidden,
        badge,
      ),
      true,
    );
    assert.deepEqual(errors, []);
  },
});

Deno.test({
  name: "GET / says disconnected when the service stops, and the ages keep growing",
  ignore: skip !== undefined,
  async fn() {
    await using tmp = await tempDir();
    const server = await testServer({ siteDir: tmp.path });
    await postJson(`${server.url}/event`, { type: "weather", data: { wind_mps: 2 } });
    await using browser = await launch();
    const { page } = await openPage(browser, `${server.url}/`);
    await waitForText(page, "#conn .label", "live", 5000);
    assert.equal(
      await page.evaluate(
        () =>
          (globalThis as unknown as { document: PageDocument }).document.querySelector("#banner")!
            .hidden,
        0,
      ),
      true,
    );
    await server.shutdown();
    await waitFor(
      page,
      (s) =>
        !(globalThis as unknown as { document: PageDocument }).document.querySelector(s)!.hidden,
      "#banner",
      5000,
    );
    assert.equal(await page.textContent("#banner"), "disconnected - values may be out of date");
    const age = () => page.textContent('[data-type="weather"] .age');
    const first = await age();
    await waitFor(
      page,
      (want) =>
        (globalThis as unknown as { document: PageDocument }).document.querySelector(
          '[data-type="weather"] .age',
        )?.textContent !== want,
      first ?? "",
      3000,
    );
    assert.match((await age())!, /^\d+ s ago$/);
    assert.equal(await page.textContent('[data-type="weather"] [data-field="wind_mps"] dd'), "2");
  },
});

Deno.test({
  name: "GET / draws a sparkline that grows with each value since the page opened",
  ignore: skip !== undefined,
  async fn() {
    await using tmp = await tempDir();
    await using server = await testServer({ siteDir: tmp.path, types: REGISTRY });
    const post = (wind: number) =>
      postJson(`${server.url}/event`, { type: "weather", data: { wind_mps: wind } });
    await post(2);
    await using browser = await launch();
    const { page, errors } = await openPage(browser, `${server.url}/`);
    const spark = '[data-type="weather"] [data-field="wind_mps"] svg.spark';
    const points = () =>
      page.evaluate(
        (s) =>
          (globalThis as unknown as { document: PageDocument }).document.querySelector(s)?.dataset
            .points ?? "0",
        spark,
      );
    await waitForText(page, '[data-type="weather"] [data-field="wind_mps"] dd', "2", 5000);
    assert.equal(await points(), "1");
    for (const [i, wind] of [4, 3, 7, 5].entries()) {
      await post(wind);
      await waitFor(
        page,
        (want) =>
          (globalThis as unknown as { document: PageDocument }).document.querySelector(
            '[data-type="weather"] [data-field="wind_mps"] svg.spark',
          )?.dataset.points === want,
        String(i + 2),
        2000,
      );
    }
    const polyline = await page.evaluate(
      (s) =>
        (globalThis as unknown as { document: PageDocument }).document.querySelector(
          s + " polyline",
        )?.getAttribute("points") ?? "",
      spark,
    );
    assert.equal(polyline.split(" ").length, 5);
    assert.deepEqual(errors, []);
  },
});

Deno.test({
  name:
    "GET / orders cards by order, then critical, then name, shows times in the site zone and the run's target",
  ignore: skip !== undefined,
  async fn() {
    await using tmp = await tempDir();
    const types = parseTypes(
      JSON.stringify({
        zz_first: { order: 1 },
        b_plain: {},
        a_critical: { critical: true },
        c_second: { order: 2, critical: false },
      }),
      "t.json",
    );
    await using server = await testServer({
      siteDir: tmp.path,
      types,
      timeZone: "Pacific/Honolulu",
    });
    for (const type of ["b_plain", "aardvark", "zz_first", "a_critical", "c_second"]) {
      await postJson(`${server.url}/event`, {
        type,
        data: { v: 1 },
        ts: "2026-11-25T08:30:15.000Z",
      });
    }
    await postJson(`${server.url}/run/start`, { run_id: "m31-001", meta: { target: "M31" } });
    await using browser = await launch();
    const { page, errors } = await openPage(browser, `${server.url}/`);
    await waitForText(page, "#run .label", "run m31-001 \u00b7 M31", 5000);
    // 08:30:15 UTC is 22:30:15 the day before in Honolulu (UTC-10, no DST).
    await waitFor(
      page,
      (sel) =>
        /^22:30:15 (HST|GMT-10)$/.test(
          (globalThis as unknown as { document: PageDocument }).document.querySelector(sel)
            ?.textContent ?? "",
        ),
      '[data-type="aardvark"] .ts',
    );
    const order = await cardOrder(page);
    assert.deepEqual(order, ["zz_first", "c_second", "a_critical", "aardvark", "b_plain"]);
    assert.equal(await page.textContent("#zone"), "Pacific/Honolulu");
    assert.deepEqual(errors, []);
  },
});

Deno.test({
  name: "GET / reads GET /current in the wrapped shape too, even with the stream unavailable",
  ignore: skip !== undefined,
  async fn() {
    await using tmp = await tempDir();
    await using server = await testServer({ siteDir: tmp.path });
    await postJson(`${server.url}/event`, { type: "weather", data: { wind_mps: 4.5 } });
    // A real proxy in front of the server that answers /current the --wrap-current way and
    // refuses /stream, so the page can only have its values from the wrapped /current.
    await using proxy = Deno.serve(
      { hostname: "127.0.0.1", port: 0, onListen() {} },
      async (req) => {
        const url = new URL(req.url);
        if (url.pathname === "/stream") return new Response("down", { status: 503 });
        const upstream = await fetch(`${server.url}${url.pathname}${url.search}`);
        if (url.pathname !== "/current") return upstream;
        return Response.json({ current: await upstream.json() });
      },
    );
    await using browser = await launch();
    const { page } = await openPage(browser, `http://127.0.0.1:${proxy.addr.port}/`);
    await waitForText(page, '[data-type="weather"] [data-field="wind_mps"] dd', "4.5", 5000);
    const types = await cardOrder(page);
    assert.deepEqual(types, ["weather"]);
  },
});

Deno.test({
  name: "GET / fits a phone screen; screenshots at desktop and phone widths",
  ignore: skip !== undefined,
  async fn() {
    await using tmp = await tempDir();
    await using server = await testServer({ siteDir: tmp.path, types: REGISTRY });
    const post = (type: string, data: Record<string, unknown>, ts?: string) =>
      postJson(`${server.url}/event`, { type, data, ...(ts ? { ts } : {}) });
    await postJson(`${server.url}/run/start`, { run_id: "pan012-0042", meta: { target: "M42" } });
    const weather = async (winds: number[]) => {
      for (const [i, wind] of winds.entries()) {
        await post("weather", {
          wind_mps: wind,
          gust_mps: Math.round(wind * 16) / 10,
          sky_temp_c: -28.5 + i / 10,
          humidity_pct: 61 + (i % 3),
          rain: false,
          safe: true,
        });
      }
    };
    await weather([4.1]);
    await post("power", { ac_ok: false, battery_v: 12.1, current_a: 3.2 });
    await post("environment", {
      box_temp_c: 21.4,
      box_humidity_pct: 38,
      system: { free_space: 14.2 },
      location: { elevation: "3397.0 m" },
    });
    await post("status", { state: "observing", observing: true });
    await post("camera", { ccd_temp_c: -20, exposure_s: 120, cooler: true });
    await using browser = await launch();
    await Deno.mkdir(ARTIFACTS, { recursive: true });
    for (
      const [name, viewport] of [
        ["desktop", { width: 1280, height: 820 }],
        ["phone", { width: 390, height: 844 }],
      ] as const
    ) {
      const { page, errors } = await openPage(browser, `${server.url}/`, viewport);
      await waitForText(page, "#conn .label", "live", 5000);
      await weather([5.3, 6.8, 6.1, 9.2, 8.7, 11.4]);
      await waitForText(page, '[data-type="weather"] [data-field="wind_mps"] dd', "11.4", 5000);
      const width = await page.evaluate(
        () =>
          (globalThis as unknown as { document: PageDocument }).document.documentElement
            .scrollWidth,
        0,
      );
      assert.ok(
        width <= viewport.width,
        `${name}: ${width}px wide in a ${viewport.width}px screen`,
      );
      await page.screenshot({ path: join(ARTIFACTS, `dashboard-${name}.png`), fullPage: true });
      // The README's picture is refreshed on request only, so a test run leaves the tree clean.
      if (name === "desktop" && Deno.env.get("UPDATE_DOCS") === "1") {
        await page.screenshot({ path: join(DOCS, "dashboard.png"), fullPage: false });
      }
      assert.deepEqual(errors, []);
      await page.close();
    }
  },
});

Deno.test({
  name: "GET / drops a forgotten type's card while the page is open",
  ignore: skip !== undefined,
  async fn() {
    await using tmp = await tempDir();
    await using server = await testServer({ siteDir: tmp.path });
    await postJson(`${server.url}/event`, { type: "weather", data: { wind_mps: 2 } });
    await postJson(`${server.url}/event`, { type: "old_sensor", data: { v: 1 } });
    await using browser = await launch();
    const { page, errors } = await openPage(browser, `${server.url}/`);
    // Generous waits: with the whole suite running on two cores, Chromium can take seconds.
    await waitForText(page, "#conn .label", "live", 15_000);
    assert.deepEqual((await cardOrder(page)).toSorted(), ["old_sensor", "weather"]);
    const res = await fetch(`${server.url}/current/old_sensor`, { method: "DELETE" });
    assert.equal(res.status, 204);
    await waitFor(
      page,
      (s) => !(globalThis as unknown as { document: PageDocument }).document.querySelector(s),
      '[data-type="old_sensor"]',
      15_000,
    );
    assert.deepEqual(await cardOrder(page), ["weather"]);
    assert.deepEqual(errors, []);
  },
});

Deno.test({
  name: "GET / shows a card STALE while its latest ts is a day ahead of the clock",
  ignore: skip !== undefined,
  async fn() {
    await using tmp = await tempDir();
    const types = parseTypes(
      '{"power": {"stale_after_s": 600, "critical": true, "fields": {"battery_v": {"unit": "V"}}}}',
      "t.json",
    );
    await using server = await testServer({ siteDir: tmp.path, types });
    await using browser = await launch();
    const { page, errors } = await openPage(browser, `${server.url}/`);
    await postJson(`${server.url}/event`, {
      type: "power",
      data: { battery_v: 12.6 },
      ts: new Date(Date.now() + 86_400_000).toISOString(),
    });
    await waitForText(page, '[data-type="power"] [data-field="battery_v"] dd', "12.6", 10_000);
    await waitFor(
      page,
      (s) =>
        /^STALE ts 23 h 59 min ahead$/.test(
          (globalThis as unknown as { document: PageDocument }).document.querySelector(s)
            ?.textContent ?? "",
        ),
      '[data-type="power"] .badge',
      10_000,
    );
    await waitForText(page, "#alerts", "0 alarm \u00b7 1 stale", 10_000);
    assert.deepEqual(errors, []);
  },
});
