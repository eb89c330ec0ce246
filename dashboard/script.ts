/**
 * The dashboard's script (`GET /`, docs/http-api.md, docs/types.md): plain browser JavaScript,
 * no build step, that loads `/ready`, `/types` and `/current`, then follows `/stream` with
 * `EventSource`, one card per type. Inlined under the page's CSP nonce.
 *
 * @module
 */

import { FUTURE_TOLERANCE_MS } from "../core/freshness.ts";

/**
 * The JavaScript of the dashboard page.
 *
 * @example Usage
 * ```ts
 * import { DASHBOARD_SCRIPT } from "./script.ts";
 * import assert from "node:assert/strict";
 *
 * assert.match(DASHBOARD_SCRIPT, /new EventSource/);
 * ```
 */
export const DASHBOARD_SCRIPT: string = `
const FUTURE_TOLERANCE_MS = ${FUTURE_TOLERANCE_MS};
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

// The empty page's hint posts to the address the page was loaded from (scheme, host, port and any
// path prefix of a proxy), never a default one: a service on another port or behind TLS would
// otherwise be told a command that does not reach it.
function shellWord(s) {
  return /^[A-Za-z0-9_.:/@%+=,~\\[\\]-]+$/.test(s) ? s : "'" + s.replace(/'/g, "'\\\\''") + "'";
}
document.getElementById("hint").textContent = "curl -d '" + JSON.stringify({ type: "weather", data: { wind_mps: 2.1 } }) +
  "' -H 'content-type: application/json' " +
  shellWord(location.href.replace(/[?#].*$/, "").replace(/[^/]*$/, "") + "event");

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

// The same rules as the server's GET /types (core/freshness.ts): alarm before warn.
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
  if (chartConnects > 0) chartLoad(type);
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
  // The service's own types (docs/http-api.md) are not cards: telemetry.safety and the safety
  // hub's audit events are the banner.
  if (env.type.startsWith("telemetry.")) {
    chartEvent(env, flash);
    if (flash) safetyStreamEvent(env);
    return;
  }
  chartEvent(env, flash);
  if (flash && safetyDecides(specOf(env.type))) safetySoon();
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
    // A ts further ahead than clocks differ establishes no freshness (docs/types.md).
    const ahead = !neverSeen && ts - now > FUTURE_TOLERANCE_MS &&
      (limit !== null || Boolean(spec && spec.critical));
    const isStale = ahead || (limit !== null && (neverSeen || now - ts > limit));
    card.querySelector(".age").textContent = neverSeen ? "" : formatAge(now - ts);
    const badge = card.querySelector(".badge");
    badge.hidden = !isStale;
    badge.textContent = !isStale
      ? ""
      : neverSeen
      ? "STALE never seen"
      : ahead
      ? "STALE ts " + formatSpan(ts - now) + " ahead"
      : "STALE " + formatSpan(now - ts);
    card.classList.toggle("stale", isStale);
    // A type that decides a verdict turning stale changes its reasons: ask /safety now, not at the
    // poll.
    if (safetyDecides(spec) && entry.staleShown !== isStale) {
      if (entry.staleShown !== undefined) safetySoon();
      entry.staleShown = isStale;
    }
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
  chartRun(run);
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
      drawSafety();
      chartRedrawAll();
    }
    if (!ready.run_active) return setRun(null);
    setRun(await getJson("run"));
  } catch {
    // The stream's own reconnect reports the outage.
  }
}

// Forgets seen so far, and the one that forgot each type: an answer asked for before a type was
// forgotten must not bring its card back (GET /types and GET /current answer what they knew).
let forgets = 0;
const forgottenAt = new Map();
function forgottenSince(type, asked) {
  return (forgottenAt.get(type) || 0) > asked;
}

async function loadTypes() {
  const asked = forgets;
  try {
    const types = await getJson("types");
    if (!types || typeof types !== "object") return;
    for (const type of Object.keys(types)) {
      if (forgottenSince(type, asked)) delete types[type];
    }
    registry = types;
    safetyTypesLoaded();
    for (const type of Object.keys(types)) {
      if (!cards.has(type) && !type.startsWith("telemetry.")) makeCard(type);
    }
    for (const [type, entry] of cards) { place(entry, type); render(type); }
    tick();
  } catch {
    // Without GET /types (an older server, or no access) the cards show raw fields.
  }
}

async function loadCurrent() {
  const asked = forgets;
  try {
    const snap = unwrapCurrent(await getJson("current?wrap=false"));
    for (const env of Object.values(snap)) {
      if (!forgottenSince(env.type, asked)) upsert(env, false);
    }
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
    chartsConnected();
    loadSafety();
  });
  source.addEventListener("telemetry", (e) => upsert(JSON.parse(e.data), true));
  source.addEventListener("run", (e) => setRun(JSON.parse(e.data)));
  source.addEventListener("forget", (e) => {
    const type = JSON.parse(e.data).type;
    forgottenAt.set(type, ++forgets);
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
    for (const key of [...chartSeries.keys()]) {
      if (key.startsWith(chartKey(type, ""))) chartSeries.delete(key);
    }
    if (cards.has(type)) chartMarkDirty(type);
    if (safetyDecides(spec)) safetySoon();
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

chartsInit();
safetyInit();
setInterval(tick, 1000);
// Registry states and the run can change without an event (a restart with a new --types).
setInterval(() => { loadTypes(); loadReady(); }, 30000);
tick();
loadReady().then(loadTypes).then(loadCurrent).finally(connect);
`;
