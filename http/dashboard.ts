/**
 * `GET /`: a live dashboard served by the service itself. One self-contained HTML page (inline
 * style and script under a per-response CSP nonce, no external assets, no build step) that
 * shows one card per event type and follows `GET /stream` with `EventSource`. With a types
 * registry (`GET /types`, docs/types.md) the cards follow its order, show labels and units, colour
 * values past a limit amber or red, and turn `STALE` when their `ts` is older than
 * `stale_after_s`; numeric fields get a sparkline of the values seen since the page opened.
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
  --text: #d5dde5; --muted: #7f8b98; --accent: #8ab4f8; --ok: #5fb98a; --warn: #e0a458;
  --bad: #e06c6c; --value: #f1f5f9;
}
:root.night {
  --bg: #000; --panel: #0d0303; --panel-2: #140505; --line: #2a0a0a;
  --text: #b33a3a; --muted: #6e2020; --accent: #c23b3b; --ok: #b33a3a; --warn: #8f2a2a;
  --bad: #ff4d4d; --value: #d04545;
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
.card.stale { border-color: var(--bad); }
.card.stale dl { opacity: .6; }
.card.alarm { border-color: var(--bad); }
.card.warn { border-color: var(--warn); }
.badge {
  margin-left: auto; padding: .05rem .45rem; border-radius: 4px; background: var(--bad); color: #000;
  font-size: .72rem; font-weight: 700; letter-spacing: .04em; white-space: nowrap;
}
.desc { margin: 0; padding: .35rem .8rem 0; color: var(--muted); font-size: .78rem; }
.spark { flex: 0 0 60px; width: 60px; height: 16px; align-self: center; }
.spark polyline { fill: none; stroke: var(--muted); stroke-width: 1.2; vector-effect: non-scaling-stroke; }
.unit { flex: 0 0 auto; color: var(--muted); font-size: .8rem; }
.tag { flex: 0 0 auto; font-size: .65rem; font-weight: 700; padding: 0 .3rem; border-radius: 3px; }
.tag-warn { background: var(--warn); color: #000; }
.tag-alarm { background: var(--bad); color: #000; }
dl dd.lvl-warn { color: var(--warn); font-weight: 600; }
dl dd.lvl-alarm { color: var(--bad); font-weight: 700; }
.nodata { color: var(--muted); font-size: .85rem; }
#alerts[data-bad="true"] { border-color: var(--bad); color: var(--bad); font-weight: 600; }
#banner {
  margin: 0; padding: .5rem 1rem; background: var(--bad); color: #000; font-weight: 600;
  text-align: center;
}
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
  display: flex; justify-content: space-between; align-items: baseline; gap: .5rem;
  padding: .22rem 0; border-bottom: 1px dashed var(--line);
}
dl > div:last-child { border-bottom: 0; }
dt { flex: 0 0 auto; max-width: 50%; color: var(--muted); font-size: .85rem; overflow-wrap: anywhere; }
dd {
  flex: 1 1 auto; min-width: 0; margin: 0; text-align: right; color: var(--value);
  font-size: 1.05rem; font-variant-numeric: tabular-nums; overflow-wrap: anywhere;
}
dd.text { font-size: .95rem; }
dd.bool { color: var(--value); }
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
const banner = document.getElementById("banner");
const runPill = document.getElementById("run");
const alertsEl = document.getElementById("alerts");
const typeCount = document.getElementById("types");
const lastSeen = document.getElementById("last");
const cards = new Map();
// The registry and states of GET /types, keyed by type (empty without --types).
let registry = {};
function specOf(type) {
  return Object.prototype.hasOwnProperty.call(registry, type) ? registry[type] : null;
}
let zone;
let timeFormat = null;
// Sparklines: values seen since the page opened, per "type\\u0000field", at most 30 minutes.
const SPARK_MS = 30 * 60 * 1000;
const SPARK_MAX = 720;
const history = new Map();
let everLive = false;

function el(tag, cls, text) {
  const e = document.createElement(tag);
  if (cls) e.className = cls;
  if (text !== undefined) e.textContent = text;
  return e;
}

function formatSpan(ms) {
  const s = Math.max(0, Math.floor(ms / 1000));
  if (s < 60) return s + " s";
  if (s < 3600) return Math.floor(s / 60) + " min " + (s % 60) + " s";
  if (s < 86400) return Math.floor(s / 3600) + " h " + Math.floor((s % 3600) / 60) + " min";
  return Math.floor(s / 86400) + " d " + Math.floor((s % 86400) / 3600) + " h";
}
function formatAge(ms) {
  return formatSpan(ms) + " ago";
}

// GET /current answers the plain map, or {"current": {...}} with --wrap-current: accept both.
function unwrapCurrent(body) {
  if (!body || typeof body !== "object") return {};
  const keys = Object.keys(body);
  const inner = body.current;
  if (keys.length === 1 && inner && typeof inner === "object" && !Array.isArray(inner) &&
      !(typeof inner.type === "string" && "seq" in inner && "data" in inner)) return inner;
  return body;
}

function valueAt(data, path) {
  if (Object.prototype.hasOwnProperty.call(data, path)) return data[path];
  let at = data;
  for (const part of path.split(".")) {
    if (!at || typeof at !== "object" || Array.isArray(at) ||
        !Object.prototype.hasOwnProperty.call(at, part)) return undefined;
    at = at[part];
  }
  return at;
}

const QUANTITY = /^\\s*([-+]?(?:\\d+\\.?\\d*|\\.\\d+)(?:[eE][-+]?\\d+)?)\\s+(\\S(?:.*\\S)?)\\s*$/;
function numericValue(value, unit) {
  if (typeof value === "number") return Number.isFinite(value) ? value : undefined;
  if (typeof value !== "string" || !unit) return undefined;
  const m = QUANTITY.exec(value);
  if (!m || m[2] !== unit) return undefined;
  const n = Number(m[1]);
  return Number.isFinite(n) ? n : undefined;
}

// The same rules as the server's GET /types (_freshness.ts): alarm before warn.
function fieldLevel(spec, raw) {
  if (raw === undefined || !spec) return "";
  const n = numericValue(raw, spec.unit);
  for (const level of ["alarm", "warn"]) {
    const above = spec[level + "_above"], below = spec[level + "_below"], eq = spec[level + "_if"];
    if (n !== undefined && above !== undefined && n > above) return level;
    if (n !== undefined && below !== undefined && n < below) return level;
    if (eq !== undefined && JSON.stringify(raw) === JSON.stringify(eq)) return level;
  }
  return "";
}

function fillValue(dd, value) {
  dd.className = "";
  if (typeof value === "boolean") {
    // Neutral: true is not "good"; only a limit colours a value.
    dd.className = "bool";
    dd.textContent = value ? "true" : "false";
  } else if (typeof value === "number") {
    dd.textContent = String(value);
  } else if (typeof value === "string") {
    dd.className = "text";
    dd.textContent = value;
  } else {
    const text = JSON.stringify(value);
    dd.className = "json";
    dd.textContent = text === undefined ? "" : text.length > 160 ? text.slice(0, 159) + "\\u2026" : text;
  }
}

function sortKey(type) {
  const spec = specOf(type);
  const order = spec && typeof spec.order === "number" ? spec.order : Infinity;
  return [order, spec && spec.critical ? 0 : 1, type];
}
function before(a, b) {
  const x = sortKey(a), y = sortKey(b);
  if (x[0] !== y[0]) return x[0] < y[0];
  if (x[1] !== y[1]) return x[1] < y[1];
  return x[2] < y[2];
}
function place(entry, type) {
  let next = null;
  for (const [other, e] of cards) {
    if (other !== type && before(type, other) && (!next || before(other, next.card.dataset.type))) next = e;
  }
  grid.insertBefore(entry.card, next ? next.card : empty);
}

function makeCard(type) {
  const card = el("article", "card");
  card.dataset.type = type;
  const head = el("header");
  const title = el("h2", "", type);
  const badge = el("span", "badge");
  badge.hidden = true;
  head.append(title, badge, el("span", "age", ""));
  const desc = el("p", "desc");
  desc.hidden = true;
  const foot = el("footer");
  const seq = el("span", "", "seq ");
  seq.append(el("b", "seq", ""));
  const run = el("span", "", "run ");
  run.append(el("b", "runid", ""));
  const ts = el("span", "", "");
  ts.append(el("b", "ts", ""));
  foot.append(seq, run, ts);
  card.append(head, desc, el("dl"), foot);
  const entry = { card, ts: 0, env: null, state: "ok" };
  cards.set(type, entry);
  place(entry, type);
  return entry;
}

function sparkKey(type, field) {
  return type + "\\u0000" + field;
}
function remember(type, field, t, v) {
  const key = sparkKey(type, field);
  let points = history.get(key);
  if (!points) history.set(key, points = []);
  const last = points[points.length - 1];
  if (last && last[0] === t && last[1] === v) return;
  points.push([t, v]);
  const cutoff = Date.now() - SPARK_MS;
  while (points.length > SPARK_MAX || (points.length > 1 && points[0][0] < cutoff)) points.shift();
}
const SVG = "http://www.w3.org/2000/svg";
function sparkline(type, field) {
  const points = history.get(sparkKey(type, field)) || [];
  const svg = document.createElementNS(SVG, "svg");
  svg.setAttribute("class", "spark");
  svg.setAttribute("viewBox", "0 0 60 16");
  svg.setAttribute("preserveAspectRatio", "none");
  svg.setAttribute("aria-hidden", "true");
  if (points.length < 1) return svg;
  let lo = Infinity, hi = -Infinity;
  for (const p of points) { lo = Math.min(lo, p[1]); hi = Math.max(hi, p[1]); }
  const line = document.createElementNS(SVG, "polyline");
  line.setAttribute("points", points.map((p, i) => {
    // One step per value, so a burst after a quiet hour stays readable.
    const x = points.length > 1 ? (i / (points.length - 1)) * 60 : 60;
    const y = hi > lo ? 15 - ((p[1] - lo) / (hi - lo)) * 14 : 8;
    return x.toFixed(1) + "," + y.toFixed(1);
  }).join(" "));
  svg.append(line);
  svg.dataset.points = String(points.length);
  return svg;
}

function fieldRow(type, field, label, unit, value, spec) {
  const row = el("div");
  row.dataset.field = field;
  const level = fieldLevel(spec, value);
  if (level) row.dataset.level = level;
  const dt = el("dt", "", label);
  if (label !== field) dt.title = field;
  const dd = el("dd");
  fillValue(dd, value);
  if (level) dd.classList.add("lvl-" + level);
  const n = numericValue(value, unit);
  row.append(dt);
  if (n !== undefined) row.append(sparkline(type, field));
  row.append(dd);
  if (unit && typeof value === "number") row.append(el("span", "unit", unit));
  if (level) row.append(el("span", "tag tag-" + level, level === "alarm" ? "ALARM" : "WARN"));
  return row;
}

function render(type) {
  const entry = cards.get(type);
  if (!entry) return;
  const { card, env } = entry;
  const spec = specOf(type);
  const fields = spec && spec.fields ? spec.fields : {};
  card.classList.toggle("critical", !!(spec && spec.critical));
  const desc = card.querySelector(".desc");
  desc.hidden = !(spec && spec.description);
  desc.textContent = spec && spec.description ? spec.description : "";
  const dl = card.querySelector("dl");
  dl.replaceChildren();
  const data = env && env.data && typeof env.data === "object" ? env.data : null;
  let worst = "";
  if (data) {
    const shown = new Set();
    for (const [path, f] of Object.entries(fields)) {
      const value = valueAt(data, path);
      if (value === undefined) continue;
      shown.add(path);
      const row = fieldRow(type, path, f.label || path, f.unit || "", value, f);
      if (row.dataset.level === "alarm" || (row.dataset.level === "warn" && worst === "")) worst = row.dataset.level;
      dl.append(row);
    }
    for (const [field, value] of Object.entries(data)) {
      if (shown.has(field)) continue;
      // A nested object whose registered fields are shown already.
      if (value && typeof value === "object" && !Array.isArray(value) &&
          Object.keys(fields).some((p) => p.startsWith(field + ".") && shown.has(p))) continue;
      dl.append(fieldRow(type, field, field, "", value, null));
    }
  }
  if (dl.children.length === 0) dl.append(el("div", "nodata", env ? "(no data fields)" : "never seen"));
  entry.level = worst;
  card.querySelector(".seq").textContent = env ? String(env.seq) : "\\u2014";
  const runId = env && env.meta && typeof env.meta.run_id === "string" ? env.meta.run_id : "\\u2014";
  card.querySelector(".runid").textContent = runId;
  const when = env ? Date.parse(env.ts) : NaN;
  entry.ts = Number.isNaN(when) ? 0 : when;
  const tsEl = card.querySelector(".ts");
  tsEl.textContent = Number.isNaN(when) ? "" : formatTime(when);
  tsEl.parentElement.title = env ? env.ts : "";
}

function formatTime(ms) {
  try {
    if (!timeFormat) {
      timeFormat = new Intl.DateTimeFormat("en-GB", {
        timeZone: zone || "UTC", hour: "2-digit", minute: "2-digit", second: "2-digit",
        hourCycle: "h23", timeZoneName: "short",
      });
    }
    return timeFormat.format(new Date(ms));
  } catch {
    return new Date(ms).toISOString().slice(11, 19) + " UTC";
  }
}

function upsert(env, flash) {
  if (!env || typeof env.type !== "string") return;
  const entry = cards.get(env.type) || makeCard(env.type);
  entry.env = env;
  const t = Date.parse(env.ts);
  const data = env.data && typeof env.data === "object" ? env.data : {};
  const fields = (specOf(env.type) && specOf(env.type).fields) || {};
  const seen = new Set();
  for (const [path, f] of Object.entries(fields)) {
    const n = numericValue(valueAt(data, path), f.unit);
    seen.add(path);
    if (n !== undefined) remember(env.type, path, Number.isNaN(t) ? Date.now() : t, n);
  }
  for (const [field, value] of Object.entries(data)) {
    if (!seen.has(field) && typeof value === "number" && Number.isFinite(value)) {
      remember(env.type, field, Number.isNaN(t) ? Date.now() : t, value);
    }
  }
  render(env.type);
  if (flash) {
    entry.card.classList.remove("flash");
    void entry.card.offsetWidth; // restart the animation
    entry.card.classList.add("flash");
  }
  tick();
}

function tick() {
  const now = Date.now();
  let newest = 0, alarms = 0, stale = 0;
  for (const [type, entry] of cards) {
    const { card, ts } = entry;
    const spec = specOf(type);
    const limit = spec && typeof spec.stale_after_s === "number" ? spec.stale_after_s * 1000 : null;
    const neverSeen = !entry.env;
    const isStale = limit !== null && (neverSeen || now - ts > limit);
    card.querySelector(".age").textContent = neverSeen ? "" : formatAge(now - ts);
    const badge = card.querySelector(".badge");
    badge.hidden = !isStale;
    badge.textContent = isStale ? (neverSeen ? "STALE never seen" : "STALE " + formatSpan(now - ts)) : "";
    card.classList.toggle("stale", isStale);
    card.classList.toggle("alarm", !isStale && entry.level === "alarm");
    card.classList.toggle("warn", !isStale && entry.level === "warn");
    if (isStale) stale++;
    else if (entry.level === "alarm") alarms++;
    if (!neverSeen) newest = Math.max(newest, ts);
  }
  empty.hidden = cards.size > 0;
  typeCount.textContent = cards.size + (cards.size === 1 ? " type" : " types");
  lastSeen.textContent = newest ? "last event " + formatAge(now - newest) : "no events yet";
  alertsEl.textContent = alarms + " alarm \\u00b7 " + stale + " stale";
  alertsEl.dataset.bad = String(alarms + stale > 0);
}

function setConn(state, label) {
  conn.dataset.state = state;
  conn.querySelector(".label").textContent = label;
  if (state === "live") everLive = true;
  banner.hidden = state === "live" || !everLive;
}

function setRun(run) {
  const active = !!run && run.stopped_at === null;
  runPill.dataset.active = String(active);
  const target = active && run.meta && typeof run.meta.target === "string" ? run.meta.target : "";
  runPill.querySelector(".label").textContent = active ? "run " + run.run_id + (target ? " \\u00b7 " + target : "") : "no run";
  runPill.title = active ? "started " + run.started_at + " \\u2014 " + run.run_dir : "";
}

async function getJson(path) {
  const res = await fetch(path, { cache: "no-store" });
  if (!res.ok) throw new Error(path + " answered " + res.status);
  return await res.json();
}

async function loadReady() {
  try {
    // GET /run answers 404 without a run, which browsers log as an error; ask /ready first.
    const ready = await getJson("ready");
    if (typeof ready.zone === "string" && ready.zone !== zone) {
      zone = ready.zone;
      timeFormat = null;
      document.getElementById("zone").textContent = zone;
    }
    if (!ready.run_active) return setRun(null);
    setRun(await getJson("run"));
  } catch {
    // The stream's own reconnect reports the outage.
  }
}

async function loadTypes() {
  try {
    const types = await getJson("types");
    if (!types || typeof types !== "object") return;
    registry = types;
    for (const type of Object.keys(types)) if (!cards.has(type)) makeCard(type);
    for (const [type, entry] of cards) { place(entry, type); render(type); }
    tick();
  } catch {
    // Without GET /types (an older server, or no access) the cards show raw fields.
  }
}

async function loadCurrent() {
  try {
    const snap = unwrapCurrent(await getJson("current?wrap=false"));
    for (const env of Object.values(snap)) upsert(env, false);
  } catch {
    // The stream's snapshot follows.
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
    const snap = unwrapCurrent(JSON.parse(e.data));
    for (const [type, entry] of [...cards]) {
      if (!(type in snap) && !specOf(type)) {
        entry.card.remove();
        cards.delete(type);
        for (const key of [...history.keys()]) {
          if (key.startsWith(sparkKey(type, ""))) history.delete(key);
        }
      }
    }
    for (const env of Object.values(snap)) upsert(env, false);
    tick();
    loadReady();
    loadTypes();
  });
  source.addEventListener("telemetry", (e) => upsert(JSON.parse(e.data), true));
  source.addEventListener("run", (e) => setRun(JSON.parse(e.data)));
  source.addEventListener("forget", (e) => {
    const type = JSON.parse(e.data).type;
    const entry = cards.get(type);
    const spec = specOf(type);
    // GET /types lists seen types too: "registered" means the types file says something of it.
    const registered = !!spec && (spec.description != null || spec.critical ||
      spec.stale_after_s != null || spec.order != null || Object.keys(spec.fields || {}).length > 0);
    if (entry && registered) {
      // A registered type keeps its card, as never seen.
      entry.env = undefined;
      render(type);
    } else if (entry) {
      entry.card.remove();
      cards.delete(type);
      delete registry[type];
    }
    for (const key of [...history.keys()]) {
      if (key.startsWith(sparkKey(type, ""))) history.delete(key);
    }
    tick();
  });
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
// Registry states and the run can change without an event (a restart with a new --types).
setInterval(() => { loadTypes(); loadReady(); }, 30000);
tick();
loadReady().then(loadTypes).then(loadCurrent).finally(connect);
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
  <span class="pill" id="alerts" data-bad="false" title="types in alarm, and stale types">0 alarm &middot; 0 stale</span>
  <span class="spacer"></span>
  <span class="meta" id="zone" title="times are shown in the site zone"></span>
  <span class="meta" id="types">0 types</span>
  <span class="meta" id="last">no events yet</span>
  <button id="night" type="button" aria-pressed="false" title="Dim red theme for dark-adapted eyes">Night</button>
</header>
<p id="banner" role="alert" hidden>disconnected - values may be out of date</p>
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
