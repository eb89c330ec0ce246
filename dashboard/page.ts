/**
 * `GET /`: a live dashboard served by the service itself. One self-contained HTML page (inline
 * style and script under a per-response CSP nonce, no external assets, no build step) that
 * shows one card per event type and follows `GET /stream` with `EventSource`. With a types
 * registry (`GET /types`, docs/types.md) the cards follow its order, show labels and units, colour
 * values past a limit amber or red, and turn `STALE` when their `ts` is older than
 * `stale_after_s`; numeric fields get a sparkline of the values seen since the page opened and a
 * chart of the last hours (`GET /history`), and a SAFE / UNSAFE banner shows `GET /safety`
 * (docs/dashboard.md).
 *
 * @example Usage
 * ```ts
 * import { renderDashboard } from "./page.ts";
 * import assert from "node:assert/strict";
 *
 * assert.match(renderDashboard("bm9uY2Utbm9uY2U="), /<script nonce="bm9uY2Utbm9uY2U=">/);
 * ```
 *
 * @module
 */

import { type Route, route } from "../http/router.ts";
import { DASHBOARD_STYLE } from "./style.ts";
import { DASHBOARD_SCRIPT } from "./script.ts";
import { DASHBOARD_CHART_SCRIPT } from "./chart.ts";
import { DASHBOARD_SAFETY_SCRIPT } from "./safety_banner.ts";

const NONCE_PATTERN = /^[A-Za-z0-9+/_-]{8,}={0,2}$/;

/**
 * Renders the dashboard page with the given CSP nonce on its inline style and script.
 *
 * @param nonce A fresh random nonce for this response, base64 or base64url (at least 8 chars).
 * @returns The complete HTML document.
 * @throws {SyntaxError} If `nonce` is not base64 text.
 *
 * @example Usage
 * ```ts
 * import { renderDashboard } from "./page.ts";
 * import assert from "node:assert/strict";
 *
 * assert.match(renderDashboard("bm9uY2Utbm9uY2U="), /^<!doctype html>/);
 * ```
 */
export function renderDashboard(nonce: string): string {
  if (!NONCE_PATTERN.test(nonce)) {
    throw new SyntaxError(
      `Cannot render the dashboard with nonce ${
        JSON.stringify(nonce)
      }: expected at least 8 base64 characters; use crypto.getRandomValues`,
    );
  }
  return `<!doctype html>
<html lang="en">
<head>
<meta charset="utf-8">
<meta name="viewport" content="width=device-width, initial-scale=1">
<meta name="color-scheme" content="dark">
<title>Telemetry</title>
<link rel="icon" href="data:,">
<style nonce="${nonce}">${DASHBOARD_STYLE}</style>
</head>
<body>
<header class="top">
  <h1><span>&#9679;</span> Telemetry</h1>
  <span class="pill" id="conn" data-state="connecting" role="status"><span class="dot"></span><span class="label">connecting&hellip;</span></span>
  <span class="pill" id="run" data-active="false"><span class="label">no run</span></span>
  <span class="pill" id="alerts" data-bad="false" title="types in alarm, and stale types">0 alarm &middot; 0 stale</span>
  <span class="spacer"></span>
  <span id="range" role="group" aria-label="chart range" title="hours shown in the charts"><button type="button" data-hours="1">1 h</button><button type="button" data-hours="6">6 h</button><button type="button" data-hours="12">12 h</button><button type="button" data-hours="24">24 h</button><button type="button" data-hours="48">48 h</button></span>
  <span class="meta" id="zone" title="times are shown in the site zone"></span>
  <span class="meta" id="types">0 types</span>
  <span class="meta" id="last">no events yet</span>
  <button id="night" type="button" aria-pressed="false" title="Dim red theme for dark-adapted eyes">Night</button>
</header>
<p id="banner" role="alert" hidden>disconnected - values may be out of date</p>
<section id="safety" role="status" aria-live="polite" hidden><span class="verdict"></span><span class="clear" hidden></span><span class="since"></span><ul class="reasons" hidden></ul><ul class="waivers" hidden></ul><ul class="profiles" hidden></ul></section>
<main id="cards" aria-live="polite">
  <p id="empty">No events yet. Post one: <code id="hint"></code></p>
</main>
<script nonce="${nonce}">"use strict";${DASHBOARD_CHART_SCRIPT}${DASHBOARD_SAFETY_SCRIPT}${DASHBOARD_SCRIPT}</script>
</body>
</html>
`;
}

function randomNonce(): string {
  const bytes = crypto.getRandomValues(new Uint8Array(16));
  return btoa(String.fromCharCode(...bytes));
}

/**
 * The `GET /` response: the dashboard with a fresh nonce and a strict Content-Security-Policy
 * (`default-src 'none'`, the nonce for the inline style and script, `connect-src 'self'`).
 *
 * @returns A `200 text/html` response.
 *
 * @example Usage
 * ```ts
 * import { dashboardResponse } from "./page.ts";
 * import assert from "node:assert/strict";
 *
 * const res = dashboardResponse();
 * assert.match(res.headers.get("content-security-policy")!, /connect-src 'self'/);
 * await res.body?.cancel();
 * ```
 */
export function dashboardResponse(): Response {
  const nonce = randomNonce();
  return new Response(renderDashboard(nonce), {
    headers: {
      "content-type": "text/html; charset=utf-8",
      "cache-control": "no-store",
      "x-content-type-options": "nosniff",
      "referrer-policy": "no-referrer",
      "x-frame-options": "DENY",
      "content-security-policy": [
        "default-src 'none'",
        `script-src 'nonce-${nonce}'`,
        `style-src 'nonce-${nonce}'`,
        "connect-src 'self'",
        "img-src data:",
        "base-uri 'none'",
        "form-action 'none'",
        "frame-ancestors 'none'",
      ].join("; "),
    },
  });
}

/**
 * The dashboard's routes on the API port: `GET /` (docs/dashboard.md), behind the API's guards.
 *
 * @returns The route rows to serve before the API's own.
 *
 * @example Usage
 * ```ts
 * import { dashboardRoutes } from "./page.ts";
 * import assert from "node:assert/strict";
 *
 * assert.deepEqual(dashboardRoutes().map((r) => r.pattern.pathname), ["/"]);
 * ```
 */
export function dashboardRoutes(): Route[] {
  return [route("/", { GET: () => dashboardResponse() })];
}
