import assert from "node:assert/strict";
import { join } from "node:path";
import { renderDashboard } from "../dashboard.ts";
import { createHandler } from "../server.ts";
import { TelemetryService } from "../service.ts";
import { postJson, tempDir, testServer } from "./_util.ts";

const CHROMIUM = "/usr/bin/chromium";
const CHROMIUM_ARGS = [
  "--headless",
  "--no-sandbox",
  "--disable-gpu",
  "--disable-quic",
  "--no-first-run",
  "--disable-background-networking",
  "--disable-component-update",
  "--disable-sync",
];
const ARTIFACTS = join(import.meta.dirname!, "artifacts");

/** The small part of playwright-core these tests use. */
interface Page {
  goto(url: string): Promise<unknown>;
  on(event: "console", listener: (msg: { type(): string; text(): string }) => void): void;
  on(event: "pageerror", listener: (err: Error) => void): void;
  waitForFunction<A>(
    fn: (arg: A) => boolean,
    arg: A,
    options: { timeout: number },
  ): Promise<unknown>;
  textContent(selector: string): Promise<string | null>;
  screenshot(options: { path: string; fullPage?: boolean }): Promise<unknown>;
}
interface Browser {
  newPage(options: { viewport: { width: number; height: number } }): Promise<Page>;
  close(): Promise<void>;
}
interface Chromium {
  launch(options: { executablePath: string; args: string[]; headless: boolean }): Promise<Browser>;
}

/** playwright-core's `chromium`, or why it cannot be used here. */
async function loadChromium(): Promise<Chromium | string> {
  try {
    Deno.statSync(CHROMIUM);
  } catch (err) {
    if (err instanceof Deno.errors.NotFound) {
      return `${CHROMIUM} is missing (apt-get install -y chromium)`;
    }
    throw err;
  }
  // A computed specifier keeps type checking independent of the npm registry.
  const specifier = ["npm:playwright-core", "1"].join("@");
  try {
    return (await import(specifier) as { chromium: Chromium }).chromium;
  } catch (err) {
    return `${specifier} cannot be loaded (${err instanceof Error ? err.message : err})`;
  }
}

const chromium = await loadChromium();
const skip = typeof chromium === "string" ? chromium : undefined;
if (skip) {
  // deno-lint-ignore no-console
  console.log(`skipping the browser tests of GET /: ${skip}`);
}

async function launch(): Promise<Browser & AsyncDisposable> {
  const browser = await (chromium as Chromium).launch({
    executablePath: CHROMIUM,
    args: CHROMIUM_ARGS,
    headless: true,
  });
  return Object.assign(browser, { [Symbol.asyncDispose]: () => browser.close() });
}

/** Opens a page that records console errors and uncaught exceptions (CSP violations too). */
async function openPage(browser: Browser, url: string): Promise<{ page: Page; errors: string[] }> {
  const page = await browser.newPage({ viewport: { width: 1180, height: 560 } });
  const errors: string[] = [];
  page.on("console", (msg) => {
    if (msg.type() === "error") errors.push(msg.text());
  });
  page.on("pageerror", (err) => errors.push(err.message));
  await page.goto(url);
  return { page, errors };
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
