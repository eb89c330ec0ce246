/**
 * `GET /`: a live dashboard served by the service itself. One self-contained HTML page (inline
 * style and script under a per-response CSP nonce, no external assets, no build step) that
 * shows one card per event type and follows `GET /stream` with `EventSource`.
 *
 * @example Usage
 * ```ts
 * import { renderDashboard } from "./dashboard.ts";
 * import assert from "node:assert/strict";
 *
 * assert.match(renderDashboard("bm9uY2Utbm9uY2U="), /<script nonce="bm9uY2Utbm9uY2U=">/);
 * ```
 *
 * @module
 */

const STYLE = `
:root {
  color-scheme: dark;
  --bg: #0b0e12; --panel: #141a21; --panel-2: #1a222b; --line: #26303b;
  --text: #d5dde5; --muted: #7f8b98; --accent: #e0a458; --ok: #5fb98a; --warn: #e0a458;
  --bad: #e06c6c; --value: #f1f5f9; --true: #5fb98a; --false: #9aa5b1;
}
:root.night {
  --bg: #000; --panel: #0d0303; --panel-2: #140505; --line: #2a0a0a;
  --text: #b33a3a; --muted: #6e2020; --accent: #c23b3b; --ok: #b33a3a; --warn: #8f2a2a;
  --bad: #ff4d4d; --value: #d04545; --true: #c23b3b; --false: #6e2020;
}
* { box-sizing: border-box; }
html, body { margin: 0; background: var(--bg); color: var(--text); }
body {
  font: 15px/1.4 system-ui, -apple-system, "Segoe UI", Roboto, "Noto Sans", sans-serif;
  min-height: 100vh;
}
.top {
  position: sticky; top: 0; z-index: 1; display: flex; flex-wrap: wrap; align-items: center;
  gap: .5rem 1rem; padding: .75rem 1rem; background: color-mix(in srgb, var(--bg) 88%, transparent);
  border-bottom: 1px solid var(--line); backdrop-filter: blur(6px);
}
.top h1 { margin: 0; font-size: 1.05rem; font-weight: 600; letter-spacing: .04em; }
.top h1 span { color: var(--accent); }
.pill {
  display: inline-flex; align-items: center; gap: .45rem; padding: .2rem .65rem;
  border: 1px solid var(--line); border-radius: 999px; background: var(--panel);
  font-size: .85rem; white-space: nowrap;
}
.dot { width: .55rem; height: .55rem; border-radius: 50%; background: var(--muted); }
#conn[data-state="live"] .dot { background: var(--ok); box-shadow: 0 0 6px var(--ok); }
#conn[data-state="reconnecting"] .dot, #conn[data-state="connecting"] .dot { background: var(--warn); }
#conn[data-state="closed"] .dot { background: var(--bad); }
#run[data-active="true"] { border-color: var(--accent); color: var(--accent); }
.spacer { flex: 1; }
.meta { color: var(--muted); font-size: .85rem; }
button {
  font: inherit; font-size: .85rem; color: var(--text); background: var(--panel);
  border: 1px solid var(--line); border-radius: 6px; padding: .25rem .7rem; cursor: pointer;
}
button:hover { border-color: var(--accent); }
main {
  display: grid; gap: .9rem; padding: 1rem;
  grid-template-columns: repeat(auto-fill, minmax(min(100%, 17rem), 1fr));
}
.card {
  display: flex; flex-direction: column; background: var(--panel); border: 1px solid var(--line);
  border-radius: 10px; overflow: hidden; transition: opacity .3s;
}
.card.stale { opacity: .55; }
.card.flash { animation: flash 1.2s ease-out; }
@keyframes flash { from { border-color: var(--accent); box-shadow: 0 0 0 1px var(--accent); } }
.card > header {
  display: flex; align-items: baseline; justify-content: space-between; gap: .5rem;
  padding: .6rem .8rem; background: var(--panel-2); border-bottom: 1px solid var(--line);
}
.card h2 {
  margin: 0; font-size: .95rem; font-weight: 600; overflow-wrap: anywhere; color: var(--accent);
}
.age { color: var(--muted); font-size: .8rem; white-space: nowrap; font-variant-numeric: tabular-nums; }
dl { margin: 0; padding: .5rem .8rem; flex: 1; }
dl > div {
  display: flex; justify-content: space-between; align-items: baseline; gap: 1rem;
  padding: .22rem 0; border-bottom: 1px dashed var(--line);
}
dl > div:last-child { border-bottom: 0; }
dt { flex: 0 0 auto; max-width: 50%; color: var(--muted); font-size: .85rem; overflow-wrap: anywhere; }
dd {
  flex: 1 1 auto; min-width: 0; margin: 0; text-align: right; color: var(--value);
  font-size: 1.05rem; font-variant-numeric: tabular-nums; overflow-wrap: anywhere;
}
dd.text { font-size: .95rem; }
dd.bool-true { color: var(--true); }
dd.bool-false { color: var(--false); }
dd.json { font: .8rem/1.3 ui-monospace, "SFMono-Regular", Menlo, Consolas, monospace; color: var(--text); }
.card > footer {
  display: flex; flex-wrap: wrap; gap: .2rem 1rem; padding: .45rem .8rem;
  border-top: 1px solid var(--line); color: var(--muted); font-size: .78rem;
}
.card > footer b { color: var(--text); font-weight: 500; font-variant-numeric: tabular-nums; }
#empty { grid-column: 1 / -1; color: var(--muted); text-align: center; padding: 3rem 1rem; }
#empty code { color: var(--text); }
@media (max-width: 480px) { .top { padding: .6rem .75rem; } main { padding: .75rem; gap: .7rem; } }
`;

const SCRIPT = `
"use strict";
const grid = document.getElementById("cards");
const empty = document.getElementById("empty");
const conn = document.getElementById("conn");
const runPill = document.getElementById("run");
const typeCount = document.getElementById("types");
const lastSeen = document.getElementById("last");
const cards = new Map();

function el(tag, cls, text) {
  const e = document.createElement(tag);
  if (cls) e.className = cls;
  if (text !== undefined) e.textContent = text;
  return e;
}

function formatAge(ms) {
  const s = Math.max(0, Math.floor(ms / 1000));
  if (s < 60) return s + " s ago";
  if (s < 3600) return Math.floor(s / 60) + " min " + (s % 60) + " s ago";
  if (s < 86400) return Math.floor(s / 3600) + " h " + Math.floor((s % 3600) / 60) + " min ago";
  return Math.floor(s / 86400) + " d ago";
}

function fillValue(dd, value) {
  dd.className = "";
  if (typeof value === "boolean") {
    dd.className = "bool-" + value;
    dd.textContent = value ? "true" : "false";
  } else if (typeof value === "number") {
    dd.textContent = String(value);
  } else if (typeof value === "string") {
    dd.className = "text";
    dd.textContent = value;
  } else {
    const text = JSON.stringify(value);
    dd.className = "json";
    dd.textContent = text.length > 160 ? text.slice(0, 159) + "\\u2026" : text;
  }
}

function makeCard(type) {
  const card = el("article", "card");
  card.dataset.type = type;
  const head = el("header");
  head.append(el("h2", "", type), el("span", "age", ""));
  const foot = el("footer");
  const seq = el("span", "", "seq ");
  seq.append(el("b", "seq", ""));
  const run = el("span", "", "run ");
  run.append(el("b", "runid", ""));
  const ts = el("span", "", "");
  ts.append(el("b", "ts", ""));
  foot.append(seq, run, ts);
  card.append(head, el("dl"), foot);
  const entry = { card, ts: 0 };
  let before = null;
  for (const [other, e] of cards) if (other > type && (!before || other < before.card.dataset.type)) before = e;
  grid.insertBefore(card, before ? before.card : empty);
  cards.set(type, entry);
  return entry;
}

function upsert(env, flash) {
  if (!env || typeof env.type !== "string") return;
  const entry = cards.get(env.type) || makeCard(env.type);
  const card = entry.card;
  const dl = card.querySelector("dl");
  dl.replaceChildren();
  const data = env.data && typeof env.data === "object" ? env.data : {};
  for (const [field, value] of Object.entries(data)) {
    const row = el("div");
    row.dataset.field = field;
    const dd = el("dd");
    fillValue(dd, value);
    row.append(el("dt", "", field), dd);
    dl.append(row);
  }
  if (dl.children.length === 0) dl.append(el("div", "", "(no data fields)"));
  card.querySelector(".seq").textContent = String(env.seq);
  const runId = env.meta && typeof env.meta.run_id === "string" ? env.meta.run_id : "\\u2014";
  card.querySelector(".runid").textContent = runId;
  const when = Date.parse(env.ts);
  entry.ts = Number.isNaN(when) ? Date.now() : when;
  const tsEl = card.querySelector(".ts");
  // Envelope ts is UTC with a Z (CONTRACT 2.4); observatory logs read in UTC too.
  tsEl.textContent = Number.isNaN(when) ? "" : new Date(when).toISOString().slice(11, 19) + " UTC";
  tsEl.parentElement.title = env.ts;
  if (flash) {
    card.classList.remove("flash");
    void card.offsetWidth; // restart the animation
    card.classList.add("flash");
  }
  tick();
}

function tick() {
  const now = Date.now();
  let newest = 0;
  for (const { card, ts } of cards.values()) {
    card.querySelector(".age").textContent = formatAge(now - ts);
    card.classList.toggle("stale", now - ts > 300000);
    newest = Math.max(newest, ts);
  }
  empty.hidden = cards.size > 0;
  typeCount.textContent = cards.size + (cards.size === 1 ? " type" : " types");
  lastSeen.textContent = newest ? "last event " + formatAge(now - newest) : "no events yet";
}

function setConn(state, label) {
  conn.dataset.state = state;
  conn.querySelector(".label").textContent = label;
}

function setRun(run) {
  const active = !!run && run.stopped_at === null;
  runPill.dataset.active = String(active);
  runPill.querySelector(".label").textContent = active ? "run " + run.run_id : "no run";
  runPill.title = active ? "started " + run.started_at + " \\u2014 " + run.run_dir : "";
}

async function loadRun() {
  try {
    // GET /run answers 404 without a run, which browsers log as an error; ask /ready first.
    const ready = await (await fetch("ready", { cache: "no-store" })).json();
    if (!ready.run_active) return setRun(null);
    const res = await fetch("run", { cache: "no-store" });
    setRun(res.ok ? await res.json() : null);
  } catch {
    // The stream's own reconnect reports the outage.
  }
}

let source = null;
function connect() {
  setConn("connecting", "connecting\\u2026");
  const params = new URLSearchParams(location.search);
  const filter = params.getAll("type").join(",");
  source = new EventSource("stream" + (filter ? "?type=" + encodeURIComponent(filter) : ""));
  source.addEventListener("open", () => setConn("live", "live"));
  source.addEventListener("error", () => {
    if (source.readyState === EventSource.CLOSED) {
      // Refused (503 while the server restarts, 401 with a token): EventSource gives up, we do not.
      setConn("closed", "offline \\u2014 retrying");
      setTimeout(connect, 3000);
    } else {
      setConn("reconnecting", "reconnecting\\u2026");
    }
  });
  source.addEventListener("snapshot", (e) => {
    setConn("live", "live");
    const snap = JSON.parse(e.data);
    for (const type of [...cards.keys()]) {
      if (!(type in snap)) {
        cards.get(type).card.remove();
        cards.delete(type);
      }
    }
    for (const env of Object.values(snap)) upsert(env, false);
    tick();
    loadRun();
  });
  source.addEventListener("telemetry", (e) => upsert(JSON.parse(e.data), true));
  source.addEventListener("run", (e) => setRun(JSON.parse(e.data)));
}

const night = document.getElementById("night");
function setNight(on) {
  document.documentElement.classList.toggle("night", on);
  night.setAttribute("aria-pressed", String(on));
  try { localStorage.setItem("telemetry-night", on ? "1" : "0"); } catch { /* private mode */ }
}
night.addEventListener("click", () => setNight(!document.documentElement.classList.contains("night")));
try { setNight(localStorage.getItem("telemetry-night") === "1"); } catch { /* private mode */ }

setInterval(tick, 1000);
tick();
connect();
`;

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
 * import { renderDashboard } from "./dashboard.ts";
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
<style nonce="${nonce}">${STYLE}</style>
</head>
<body>
<header class="top">
  <h1><span>&#9679;</span> Telemetry</h1>
  <span class="pill" id="conn" data-state="connecting" role="status"><span class="dot"></span><span class="label">connecting&hellip;</span></span>
  <span class="pill" id="run" data-active="false"><span class="label">no run</span></span>
  <span class="spacer"></span>
  <span class="meta" id="types">0 types</span>
  <span class="meta" id="last">no events yet</span>
  <button id="night" type="button" aria-pressed="false" title="Dim red theme for dark-adapted eyes">Night</button>
</header>
<main id="cards" aria-live="polite">
  <p id="empty">No events yet. Post one: <code>curl -d '{"type":"weather","data":{"wind_mps":2.1}}' -H 'content-type: application/json' localhost:6562/event</code></p>
</main>
<script nonce="${nonce}">${SCRIPT}</script>
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
 * import { dashboardResponse } from "./dashboard.ts";
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
