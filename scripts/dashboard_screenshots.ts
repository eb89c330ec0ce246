/**
 * Takes the dashboard pictures of docs/dashboard.md: a real service on 127.0.0.1 port 0 in a
 * temporary site directory, the example types of `examples/types.json` (weather latched for 15
 * minutes after it was unsafe), a seeded night of twelve hours in the site zone of Mauna Kea, and
 * headless Chromium at desktop (1280 wide) and phone (390 wide) widths. The seed is fixed, so only
 * the clock moves between runs.
 *
 * Usage: deno run --allow-all scripts/dashboard_screenshots.ts [OUT_DIR]   (default docs/)
 *
 * Needs `/usr/bin/chromium` (Debian `chromium`) and the npm package `playwright-core`.
 *
 * @module
 */
import { dirname, join, resolve } from "node:path";
import { startServer } from "../server.ts";
import { parseTypes } from "../core/types_registry.ts";

const root = resolve(dirname(new URL(import.meta.url).pathname), "..");
const outDir = resolve(Deno.args[0] ?? join(root, "docs"));
const CHROMIUM = "/usr/bin/chromium";
const MIN = 60_000;

interface Page {
  goto(url: string): Promise<unknown>;
  waitForFunction(fn: () => boolean, arg: unknown, options: { timeout: number }): Promise<unknown>;
  hover(selector: string, options: { position: { x: number; y: number } }): Promise<void>;
  screenshot(options: { path: string; fullPage?: boolean }): Promise<unknown>;
  close(): Promise<void>;
}
interface Browser {
  newPage(options: { viewport: { width: number; height: number } }): Promise<Page>;
  close(): Promise<void>;
}

/** A small seeded generator (mulberry32), so every run draws the same night. */
function random(seed: number): () => number {
  let a = seed;
  return () => {
    a = (a + 0x6d2b79f5) | 0;
    let t = Math.imul(a ^ (a >>> 15), 1 | a);
    t = (t + Math.imul(t ^ (t >>> 7), 61 | t)) ^ t;
    return ((t ^ (t >>> 14)) >>> 0) / 4294967296;
  };
}

/** Twelve hours of weather and power every two minutes, and the environment every six. */
function night(now: number): { type: string; ts: string; data: Record<string, unknown> }[] {
  const rnd = random(42);
  const events = [];
  const round = (v: number) => Math.round(v * 10) / 10;
  for (let m = 720; m >= 4; m -= 2) {
    const ts = new Date(now - m * MIN).toISOString();
    const h = (720 - m) / 60; // hours since dusk
    // A front passes about nine hours in: wind rises past its warning, then calms.
    const front = Math.exp(-(((h - 9.2) / 0.6) ** 2));
    const wind = round(3 + 1.5 * Math.sin(h * 1.3) + 9 * front + rnd() * 1.2);
    events.push({
      type: "weather",
      ts,
      data: {
        wind_mps: wind,
        gust_mps: round(wind * (1.35 + rnd() * 0.3)),
        sky_temp_c: round(-31 + 2 * h / 12 + 9 * front + rnd()),
        humidity_pct: Math.round(42 + 2.5 * h + 12 * front + rnd() * 3),
        rain: false,
        safe: wind < 15,
      },
    });
    // Power as often as its stale_after_s (90 s) asks, the environment every six minutes (300 s):
    // a type read less often than its stale_after_s would be charted as dots (docs/dashboard.md).
    events.push({
      type: "power",
      ts,
      data: { ac_ok: true, battery_v: round(13.6 - h * 0.04), current_a: round(3 + rnd()) },
    });
    if (m % 6 === 0) {
      events.push({
        type: "environment",
        ts,
        data: {
          box_temp_c: round(14 - h * 0.5 + rnd()),
          box_humidity_pct: Math.round(35 + h + rnd() * 2),
          system: { free_space: round(212 - h * 1.6) },
          location: { elevation: "4205.0 m" },
        },
      });
    }
  }
  return events;
}

async function post(url: string, path: string, body: unknown): Promise<void> {
  const res = await fetch(url + path, {
    method: "POST",
    headers: { "content-type": "application/json" },
    body: JSON.stringify(body),
  });
  const text = await res.text();
  if (!res.ok) throw new Error(`POST ${path} answered ${res.status}: ${text}`);
}

const types = JSON.parse(await Deno.readTextFile(join(root, "examples", "types.json")));
types.weather.clear_after_s = 900;
const siteDir = await Deno.makeTempDir({ prefix: "dashboard-shots-" });
const server = await startServer({
  hostname: "127.0.0.1",
  port: 0,
  siteDir,
  timeZone: "Pacific/Honolulu",
  types: parseTypes(JSON.stringify(types), "examples/types.json"),
});
let browser: Browser | undefined;
try {
  const now = Date.now();
  const events = night(now);
  for (let i = 0; i < events.length; i += 500) {
    await post(server.url, "/events", events.slice(i, i + 500));
  }
  await post(server.url, "/run/start", { run_id: "m42-0042", meta: { target: "M42" } });
  // A last gust past the alarm a minute ago, then calm: the verdict is clearing.
  const gust = (ago: number, wind: number) =>
    post(server.url, "/event", {
      type: "weather",
      ts: new Date(now - ago).toISOString(),
      data: {
        wind_mps: wind,
        gust_mps: wind * 1.4,
        sky_temp_c: -27.4,
        humidity_pct: 71,
        rain: false,
        safe: wind < 15,
      },
    });
  await gust(90_000, 15.8);
  await gust(30_000, 9.6);
  await gust(0, 7.9);
  await post(server.url, "/events", [
    { type: "power", data: { ac_ok: true, battery_v: 13.1, current_a: 3.4 } },
    { type: "safety", data: { is_safe: true, dark: true } },
    { type: "status", data: { state: "observing", observing: true } },
    {
      type: "environment",
      data: {
        box_temp_c: 8.7,
        box_humidity_pct: 48,
        system: { free_space: 193.1 },
        location: { elevation: "4205.0 m" },
      },
    },
  ]);
  const { chromium } = await import(["npm:playwright-core", "1"].join("@"));
  browser = await chromium.launch({
    executablePath: CHROMIUM,
    args: ["--headless", "--no-sandbox", "--disable-gpu", "--no-first-run"],
    headless: true,
  }) as Browser;
  await Deno.mkdir(outDir, { recursive: true });
  for (
    const [name, viewport] of [
      ["desktop", { width: 1280, height: 1000 }],
      ["phone", { width: 390, height: 844 }],
    ] as const
  ) {
    const page = await browser.newPage({ viewport });
    await page.goto(`${server.url}/`);
    // Runs in the page: the banner is clearing and the charts have their history.
    await page.waitForFunction(
      () => {
        const d = (globalThis as unknown as {
          document: {
            querySelector(s: string): {
              textContent: string | null;
              dataset: Record<string, string | undefined>;
            } | null;
          };
        }).document;
        const points = (sel: string) => Number(d.querySelector(sel)?.dataset.vertices ?? 0);
        return (d.querySelector("#safety .clear")?.textContent ?? "").startsWith("safe at") &&
          points('[data-type="weather"] figure.chart[data-field="wind_mps"] svg') > 300 &&
          points('[data-type="environment"] figure.chart[data-field="box_temp_c"] svg') > 100;
      },
      undefined,
      { timeout: 20_000 },
    );
    await page.hover('[data-type="weather"] figure.chart[data-field="wind_mps"] .plot', {
      position: { x: name === "phone" ? 250 : 200, y: 30 },
    });
    const path = join(outDir, `dashboard-${name}.png`);
    await page.screenshot({ path, fullPage: false });
    // deno-lint-ignore no-console
    console.log(`wrote ${path}`);
    await page.close();
  }
} finally {
  await browser?.close();
  await server.shutdown();
  await Deno.remove(siteDir, { recursive: true });
}
