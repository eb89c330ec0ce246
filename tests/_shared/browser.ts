/**
 * Real headless Chromium for the dashboard's tests (driven by playwright-core), and a few page
 * helpers. Says why it cannot run, so the tests are
 * skipped with the reason printed.
 * @module
 */

export const CHROMIUM = "/usr/bin/chromium";
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

/** The small part of playwright-core these tests use. */
export interface Page {
  goto(url: string): Promise<unknown>;
  reload(): Promise<unknown>;
  on(event: "console", listener: (msg: { type(): string; text(): string }) => void): void;
  on(event: "pageerror", listener: (err: Error) => void): void;
  on(event: "request", listener: (req: { url(): string }) => void): void;
  on(
    event: "response",
    listener: (res: { url(): string; headers(): Record<string, string> }) => void,
  ): void;
  waitForFunction<A>(
    fn: (arg: A) => boolean,
    arg: A,
    options: { timeout: number },
  ): Promise<unknown>;
  textContent(selector: string): Promise<string | null>;
  click(selector: string): Promise<void>;
  tap(selector: string, options?: { position: { x: number; y: number } }): Promise<void>;
  hover(selector: string, options?: { position: { x: number; y: number } }): Promise<void>;
  screenshot(options: { path: string; fullPage?: boolean }): Promise<unknown>;
  evaluate<R, A>(fn: (arg: A) => R, arg: A): Promise<R>;
  setViewportSize(size: { width: number; height: number }): Promise<void>;
  close(): Promise<void>;
  /** The page's clock (playwright's fake timers): installed, then paused to stop every timer. */
  clock: {
    install(): Promise<void>;
    pauseAt(time: number | Date): Promise<void>;
  };
}
/** A browser that closes on dispose. */
export interface Browser {
  newPage(
    options: {
      viewport: { width: number; height: number };
      hasTouch?: boolean;
      ignoreHTTPSErrors?: boolean;
    },
  ): Promise<Page>;
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
/** Why the browser tests cannot run here, or `undefined`. */
export const browserMissing: string | undefined = typeof chromium === "string"
  ? chromium
  : undefined;

/** Launches Chromium (optionally through a wrapper program, e.g. one entering a namespace). */
export async function launch(executablePath = CHROMIUM): Promise<Browser & AsyncDisposable> {
  const browser = await (chromium as Chromium).launch({
    executablePath,
    args: CHROMIUM_ARGS,
    headless: true,
  });
  return Object.assign(browser, { [Symbol.asyncDispose]: () => browser.close() });
}

/** A page that records console errors, uncaught exceptions and the URLs it requested. */
export interface OpenPage {
  page: Page;
  errors: string[];
  requests: URL[];
}

/**
 * Opens `url` in a new page of `browser`; `options.ignoreHTTPSErrors` accepts a test's self-signed
 * certificate; `options.fakeClock` installs playwright's clock before the page loads, so that a
 * test can pause every timer of the page (`page.clock.pauseAt`) and see what only the stream does.
 */
export async function openPage(
  browser: Browser,
  url: string,
  viewport = { width: 1280, height: 900 },
  hasTouch = false,
  options: { ignoreHTTPSErrors?: boolean; fakeClock?: boolean } = {},
): Promise<OpenPage> {
  const { fakeClock, ...trust } = options;
  const page = await browser.newPage({ viewport, hasTouch, ...trust });
  if (fakeClock) await page.clock.install();
  const errors: string[] = [];
  const requests: URL[] = [];
  page.on("console", (msg) => {
    if (msg.type() === "error") errors.push(msg.text());
  });
  page.on("pageerror", (err) => errors.push(err.message));
  page.on("request", (req) => requests.push(new URL(req.url())));
  await page.goto(url);
  return { page, errors, requests };
}

/** Minimal DOM typing for functions that run in the page (the tests have no DOM lib). */
export interface PageElement {
  textContent: string | null;
  hidden: boolean;
  dataset: Record<string, string | undefined>;
  getAttribute(name: string): string | null;
  querySelector(s: string): PageElement | null;
  querySelectorAll(s: string): PageElement[];
}
/** The page's `document`, as the functions below see it. */
export interface PageDocument {
  querySelector(s: string): PageElement | null;
  querySelectorAll(s: string): PageElement[];
}

/** Waits until `fn(arg)` holds in the page. */
export function waitFor<A>(
  page: Page,
  fn: (arg: A) => boolean,
  arg: A,
  timeout = 10_000,
): Promise<unknown> {
  return page.waitForFunction(fn, arg, { timeout });
}

/** Waits until the element of `selector` has the text `want`. */
export function waitForText(
  page: Page,
  selector: string,
  want: string,
  timeout = 10_000,
): Promise<unknown> {
  return page.waitForFunction(
    ([sel, text]) =>
      (globalThis as unknown as { document: PageDocument }).document.querySelector(sel)
        ?.textContent === text,
    [selector, want] as const,
    { timeout },
  );
}
