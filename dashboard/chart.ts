/**
 * The dashboard's charts (`GET /`, docs/dashboard.md): plain browser JavaScript, inlined before the
 * main script under the page's CSP nonce. Each card's numeric fields get an inline SVG chart of
 * the last hours, loaded from `GET /history?every=` (one vertex per bucket) and extended live from
 * the stream, with the field's warn and alarm limits as their own lines and runs and safety
 * changes marked on the time axis. A type with less data than the range is drawn over its data (at
 * least an hour); the line breaks only at a hole longer than three buckets and twice the type's
 * expected spacing; the value and time labels sit beside and below the plot, never over it. It
 * defines functions and state only; the main script calls `chartsInit()` and feeds it events, runs
 * and cards.
 *
 * @module
 */

/**
 * The JavaScript of the dashboard's charts.
 *
 * @example Usage
 * ```ts
 * import { DASHBOARD_CHART_SCRIPT } from "./chart.ts";
 * import assert from "node:assert/strict";
 *
 * assert.match(DASHBOARD_CHART_SCRIPT, /history\?type=/);
 * ```
 */
export const DASHBOARD_CHART_SCRIPT: string = `
// Ranges in hours, and the bucket of each: 300 to 720 points a range (docs/dashboard.md).
const CHART_EVERY_S = { 1: 10, 6: 30, 12: 60, 24: 120, 48: 300 };
const CHART_MAX_POINTS = 1500;
const CHART_MAX_FIELDS = 16;
const CHART_W = 600, CHART_H = 100;
// The shortest time axis: a type with less data than the range is drawn over its data, but over an
// hour at least, so a few minutes of points are not stretched across the whole card.
const CHART_MIN_SPAN_MS = 3600000;
const CHART_NS = "http://www.w3.org/2000/svg";
let chartHours = 12;
// "type\\u0000field" -> [{t: bucket start ms, v: mean, lo, hi, n}], in time order.
const chartSeries = new Map();
// Types whose /history answer is on its way: their live events wait here (at most 500).
const chartPending = new Map();
const chartQueue = [];
let chartLoading = false;
let historyMissing = false;
let chartEpoch = 0;
const chartDirty = new Set();
let chartFlush = 0;
const runMarks = new Map(); // run_id -> {start, stop}
const safetyMarks = []; // {t, safe}, in time order
let chartConnects = 0;

function chartEveryMs() { return CHART_EVERY_S[chartHours] * 1000; }
function chartSpanMs() { return chartHours * 3600000; }
function chartKey(type, field) { return type + "\\u0000" + field; }
function everyParam(s) { return s % 60 === 0 ? s / 60 + "m" : s + "s"; }

function chartClock(ms, seconds) {
  try {
    return new Intl.DateTimeFormat("en-GB", {
      timeZone: zone || "UTC", weekday: "short", hour: "2-digit", minute: "2-digit",
      second: seconds ? "2-digit" : undefined, hourCycle: "h23", timeZoneName: "short",
    }).format(new Date(ms));
  } catch {
    return new Date(ms).toISOString().slice(11, seconds ? 19 : 16) + " UTC";
  }
}

// The numeric fields of an event: registered paths (unit strings count), then other numeric
// leaves as dotted paths, as GET /history buckets name them.
function numericFields(type, data) {
  const out = [];
  if (!data || typeof data !== "object") return out;
  const spec = specOf(type);
  const fields = spec && spec.fields ? spec.fields : {};
  const taken = new Set();
  for (const [path, f] of Object.entries(fields)) {
    taken.add(path);
    const n = numericValue(valueAt(data, path), f.unit);
    if (n !== undefined) out.push([path, n]);
  }
  const walk = (obj, prefix, depth) => {
    for (const [k, v] of Object.entries(obj)) {
      const path = prefix + k;
      if (out.length >= CHART_MAX_FIELDS) return;
      if (typeof v === "number" && Number.isFinite(v) && !taken.has(path)) out.push([path, v]);
      else if (v && typeof v === "object" && !Array.isArray(v) && depth < 4) walk(v, path + ".", depth + 1);
    }
  };
  walk(data, "", 0);
  return out.slice(0, CHART_MAX_FIELDS);
}

function chartTrim(points) {
  const cutoff = Date.now() - chartSpanMs() - chartEveryMs();
  let drop = 0;
  while (drop < points.length && (points[drop].t < cutoff || points.length - drop > CHART_MAX_POINTS)) drop++;
  if (drop) points.splice(0, drop);
}

function chartAdd(type, t, fields) {
  const every = chartEveryMs();
  if (t < Date.now() - chartSpanMs() - every) return;
  const b = Math.floor(t / every) * every;
  for (const [field, v] of fields) {
    const key = chartKey(type, field);
    let points = chartSeries.get(key);
    if (!points) {
      if ([...chartSeries.keys()].filter((k) => k.startsWith(chartKey(type, ""))).length >= CHART_MAX_FIELDS) continue;
      chartSeries.set(key, points = []);
    }
    let i = points.length - 1;
    while (i >= 0 && points[i].t > b) i--;
    const p = points[i];
    if (p && p.t === b) {
      p.v = (p.v * p.n + v) / (p.n + 1);
      p.n++;
      p.lo = Math.min(p.lo, v);
      p.hi = Math.max(p.hi, v);
    } else {
      points.splice(i + 1, 0, { t: b, v, lo: v, hi: v, n: 1 });
    }
    chartTrim(points);
  }
}

// A telemetry.safety event of the site's verdict: one of another profile names it in data.profile.
function safetySiteChange(env) {
  const d = env.data;
  return !!d && typeof d === "object" && (d.profile === undefined || d.profile === "site");
}

function addSafetyMark(t, safe) {
  if (Number.isNaN(t) || safetyMarks.some((m) => m.t === t)) return;
  let i = safetyMarks.length;
  while (i > 0 && safetyMarks[i - 1].t > t) i--;
  safetyMarks.splice(i, 0, { t, safe: !!safe });
  while (safetyMarks.length > 200) safetyMarks.shift();
}

// An event for the charts: live ones extend their series; a safety change is a mark.
function chartEvent(env, live) {
  const t = Date.parse(env.ts);
  if (Number.isNaN(t)) return;
  if (env.type === "telemetry.safety") {
    // The marks are the site's verdict; a profile's changes are the banner's (docs/dashboard.md).
    if (safetySiteChange(env)) {
      addSafetyMark(t, env.data.safe);
      chartRedrawAll();
    }
    return;
  }
  // The service's other types (the safety hub's audit events) have no chart.
  if (env.type.startsWith("telemetry.")) return;
  if (!live && !historyMissing) return; // a snapshot value is in /history already
  const pending = chartPending.get(env.type);
  if (pending) {
    if (pending.length < 500) pending.push(env);
    return;
  }
  chartAdd(env.type, t, numericFields(env.type, env.data));
  chartMarkDirty(env.type);
}

function chartRun(run) {
  if (!run || typeof run.run_id !== "string") return;
  const start = Date.parse(run.started_at);
  if (Number.isNaN(start)) return;
  const stop = run.stopped_at ? Date.parse(run.stopped_at) : null;
  runMarks.set(run.run_id, { start, stop: Number.isNaN(stop) ? null : stop });
  const cutoff = Date.now() - 48 * 3600000;
  for (const [id, m] of runMarks) if (runMarks.size > 50 || (m.stop !== null && m.stop < cutoff)) runMarks.delete(id);
  chartRedrawAll();
}

async function historyLines(query, from) {
  const lines = [];
  let since = from;
  // A truncated answer continues from its next_since, which replaces the first page's since (a
  // second since= is a 400); a few pages at most.
  for (let page = 0; page < 5; page++) {
    const res = await fetch(query + "&since=" + encodeURIComponent(since), { cache: "no-store" });
    if (res.status === 404) { historyMissing = true; return null; }
    if (!res.ok) throw new Error("history answered " + res.status);
    let next = null;
    for (const line of (await res.text()).split("\\n")) {
      if (!line) continue;
      const obj = JSON.parse(line);
      if (obj && obj.truncated === true) next = obj.next_since;
      else lines.push(obj);
    }
    if (!next) break;
    since = next;
  }
  return lines;
}

function chartSince() {
  const every = chartEveryMs();
  return new Date(Math.floor((Date.now() - chartSpanMs()) / every) * every).toISOString();
}

async function loadTypeHistory(type, epoch) {
  const every = chartEveryMs();
  const query = "history?type=" + encodeURIComponent(type) + "&every=" + everyParam(every / 1000) +
    "&agg=mean,min,max";
  let buckets = null;
  try {
    buckets = await historyLines(query, chartSince());
  } catch {
    // Offline or refused: the live points still come.
  }
  const pending = chartPending.get(type) || [];
  chartPending.delete(type);
  if (epoch !== chartEpoch) return;
  const entry = cards.get(type);
  // An older service without GET /history: the card's latest value starts the chart.
  if (historyMissing && entry && entry.env) pending.unshift(entry.env);
  let last = -Infinity;
  if (buckets) {
    for (const key of [...chartSeries.keys()]) if (key.startsWith(chartKey(type, ""))) chartSeries.delete(key);
    for (const b of buckets) {
      const t = Date.parse(b.t);
      if (b.type !== type || Number.isNaN(t) || !b.fields) continue;
      last = Math.max(last, t);
      for (const [field, agg] of Object.entries(b.fields)) {
        if (!agg || typeof agg.mean !== "number") continue;
        const key = chartKey(type, field);
        let points = chartSeries.get(key);
        if (!points) chartSeries.set(key, points = []);
        if (points.length < CHART_MAX_POINTS) {
          points.push({ t, v: agg.mean, lo: agg.min ?? agg.mean, hi: agg.max ?? agg.mean, n: agg.count ?? b.count ?? 1 });
        }
      }
    }
  }
  // Live events that came while loading: those in a bucket the answer had are in it already.
  for (const env of pending) {
    const t = Date.parse(env.ts);
    if (Math.floor(t / every) * every > last) chartAdd(type, t, numericFields(type, env.data));
  }
  chartMarkDirty(type);
}

async function loadSafetyMarks(epoch) {
  try {
    const lines = await historyLines("history?type=telemetry.safety", chartSince());
    if (!lines || epoch !== chartEpoch) return;
    for (const env of lines) {
      if (env && env.type === "telemetry.safety" && safetySiteChange(env)) addSafetyMark(Date.parse(env.ts), env.data.safe);
    }
    chartRedrawAll();
  } catch {
    // The live safety events still mark the axis.
  }
}

async function chartPump() {
  if (chartLoading) return;
  chartLoading = true;
  try {
    // One request at a time: a phone on a slow link, a service on two cores.
    while (chartQueue.length > 0) {
      const type = chartQueue.shift();
      if (!historyMissing) {
        await loadTypeHistory(type, chartEpoch);
        continue;
      }
      // No GET /history: the charts grow from the card's latest value and the live events.
      const entry = cards.get(type);
      const envs = (entry && entry.env ? [entry.env] : []).concat(chartPending.get(type) || []);
      for (const env of envs) chartAdd(type, Date.parse(env.ts), numericFields(type, env.data));
      chartPending.delete(type);
      chartMarkDirty(type);
    }
  } finally {
    chartLoading = false;
  }
}

function chartLoad(type) {
  if (type.startsWith("telemetry.") || chartPending.has(type)) return;
  if (historyMissing) return chartMarkDirty(type);
  chartPending.set(type, []);
  chartQueue.push(type);
  chartPump();
}

function chartReloadAll() {
  chartEpoch++;
  chartSeries.clear();
  chartPending.clear();
  chartQueue.length = 0;
  safetyMarks.length = 0;
  if (!historyMissing) loadSafetyMarks(chartEpoch);
  for (const type of cards.keys()) chartLoad(type);
  chartRedrawAll();
}

function chartMarkDirty(type) {
  chartDirty.add(type);
  if (!chartFlush) chartFlush = setTimeout(() => {
    chartFlush = 0;
    for (const t of chartDirty) drawCharts(t);
    chartDirty.clear();
  }, 200);
}
function chartRedrawAll() {
  for (const type of cards.keys()) chartMarkDirty(type);
}

function svgEl(tag, attrs) {
  const e = document.createElementNS(CHART_NS, tag);
  for (const [k, v] of Object.entries(attrs)) e.setAttribute(k, String(v));
  return e;
}

function chartFigure(section, type, field) {
  for (const fig of section.children) if (fig.dataset.field === field) return fig;
  const fig = el("figure", "chart");
  fig.dataset.field = field;
  const cap = el("figcaption");
  cap.append(el("span", "name"), el("span", "span"));
  const plot = el("div", "plot");
  const svg = svgEl("svg", {
    viewBox: "0 0 " + CHART_W + " " + CHART_H, preserveAspectRatio: "none", class: "chart-svg",
    role: "img",
  });
  const tip = el("div", "tip");
  tip.hidden = true;
  plot.append(svg, tip);
  // The labels get a column and a row of their own (style.ts), so they never cover the line.
  const scale = el("div", "scale");
  scale.append(el("span", "hi"), el("span", "lo"));
  const axis = el("div", "axis");
  axis.append(el("span", "t0"), el("span", "t1", "now"));
  fig.append(cap, scale, plot, axis);
  const hover = (e) => chartHover(fig, e);
  plot.addEventListener("pointermove", hover);
  plot.addEventListener("pointerdown", hover);
  plot.addEventListener("pointerleave", () => { tip.hidden = true; svg.querySelector(".cursor")?.setAttribute("visibility", "hidden"); });
  section.append(fig);
  return fig;
}

function chartHover(fig, e) {
  const view = fig.chartView;
  const tip = fig.querySelector(".tip");
  if (!view || view.points.length === 0) return;
  const rect = fig.querySelector("svg").getBoundingClientRect();
  const frac = Math.min(1, Math.max(0, (e.clientX - rect.left) / rect.width));
  const t = view.t0 + frac * view.span;
  let best = view.points[0];
  for (const p of view.points) if (Math.abs(p.t + view.every / 2 - t) < Math.abs(best.t + view.every / 2 - t)) best = p;
  const fmt = (v) => String(Math.round(v * 100) / 100);
  const unit = view.unit ? " " + view.unit : "";
  tip.textContent = chartClock(best.t + view.every / 2, view.every < 60000) + " \\u00b7 " + fmt(best.v) + unit +
    (best.n > 1 && best.hi > best.lo ? " (" + fmt(best.lo) + "\\u2013" + fmt(best.hi) + ")" : "");
  tip.hidden = false;
  const x = chartX(view, best.t);
  // Anchored on the side with room, so the card never clips it (CSSOM, allowed by the CSP).
  const left = x < CHART_W / 2;
  tip.style.left = left ? (x / CHART_W) * 100 + "%" : "auto";
  tip.style.right = left ? "auto" : (1 - x / CHART_W) * 100 + "%";
  const cursor = fig.querySelector(".cursor");
  cursor.setAttribute("x1", x.toFixed(1));
  cursor.setAttribute("x2", x.toFixed(1));
  cursor.setAttribute("visibility", "visible");
}

function chartX(view, t) {
  return Math.min(CHART_W, Math.max(0, ((t + view.every / 2 - view.t0) / view.span) * CHART_W));
}

const LIMITS = [["alarm_above", "alarm"], ["alarm_below", "alarm"], ["warn_above", "warn"], ["warn_below", "warn"]];

function drawCharts(type) {
  const entry = cards.get(type);
  if (!entry) return;
  let section = entry.card.querySelector("section.charts");
  if (!section) {
    section = el("section", "charts");
    entry.card.insertBefore(section, entry.card.querySelector("footer"));
  }
  const spec = specOf(type);
  const fields = spec && spec.fields ? spec.fields : {};
  const names = [];
  for (const key of chartSeries.keys()) if (key.startsWith(chartKey(type, ""))) names.push(key.slice(type.length + 1));
  const registered = Object.keys(fields);
  names.sort((a, b) => {
    const x = registered.indexOf(a), y = registered.indexOf(b);
    if (x !== y) return (x < 0 ? Infinity : x) - (y < 0 ? Infinity : y);
    return a < b ? -1 : a > b ? 1 : 0;
  });
  for (const fig of [...section.children]) if (!names.includes(fig.dataset.field)) fig.remove();
  const axis = chartAxis(type);
  for (const field of names) {
    const fig = chartFigure(section, type, field);
    section.append(fig); // keeps the order above
    drawChart(fig, type, field, fields[field] || null, axis);
  }
  section.hidden = names.length === 0;
}

// The time axis of a type's charts (docs/dashboard.md, "The charts"): the range, or, when the
// type's oldest point in it begins later than a hole (chartHole) after the range's start, from just
// before that point (an hour at least), so an hour of data fills the chart instead of its right
// edge. Data that begins within a hole of the start may go on before it: the whole range. The
// fields of a type share the axis.
function chartAxis(type) {
  const every = chartEveryMs(), range = chartSpanMs(), now = Date.now();
  const start = now - range;
  let first = Infinity, hole = 3 * every;
  for (const [key, points] of chartSeries) {
    if (!key.startsWith(chartKey(type, ""))) continue;
    const shown = points.filter((p) => p.t + every > start);
    if (shown.length === 0) continue;
    first = Math.min(first, shown[0].t);
    hole = Math.max(hole, chartHole(type, shown, every));
  }
  if (first === Infinity || first - start <= hole) return { t0: start, span: range, zoomed: false };
  const span = Math.min(range, Math.max(CHART_MIN_SPAN_MS, now - first + every));
  return { t0: now - span, span, zoomed: span < range };
}

// Where the line breaks (docs/dashboard.md, "Gaps"): at a hole longer than three buckets and twice
// the spacing expected of the type, its stale_after_s when the types file has one, else the median
// spacing of its points (from four points on: two or three points say nothing of a cadence). So a
// type sent every 2 minutes is one line at 1 h (10 s buckets), not a row of dots.
function chartHole(type, points, every) {
  const spec = specOf(type);
  let expected = 0;
  if (spec && typeof spec.stale_after_s === "number") {
    expected = spec.stale_after_s * 1000;
  } else if (points.length >= 4) {
    const gaps = [];
    for (let i = 1; i < points.length; i++) gaps.push(points[i].t - points[i - 1].t);
    gaps.sort((a, b) => a - b);
    expected = gaps[Math.floor(gaps.length / 2)];
  }
  return Math.max(3 * every, 2 * expected);
}

// "1 h", "1 h 5 min": the span of a zoomed time axis, in whole minutes.
function chartSpanText(ms) {
  const min = Math.round(ms / 60000);
  return Math.floor(min / 60) + " h" + (min % 60 ? " " + (min % 60) + " min" : "");
}

function drawChart(fig, type, field, f, axis) {
  const every = chartEveryMs();
  const { t0, span } = axis;
  const points = (chartSeries.get(chartKey(type, field)) || []).filter((p) => p.t + every > t0);
  const view = { points, t0, span, every, unit: f && f.unit ? f.unit : "" };
  fig.chartView = view;
  const limits = [];
  for (const [key, level] of LIMITS) if (f && typeof f[key] === "number") limits.push([key, level, f[key]]);
  let lo = Infinity, hi = -Infinity;
  for (const p of points) { lo = Math.min(lo, p.v); hi = Math.max(hi, p.v); }
  for (const l of limits) { lo = Math.min(lo, l[2]); hi = Math.max(hi, l[2]); }
  if (lo === Infinity) { lo = 0; hi = 1; }
  if (hi === lo) { lo -= 1; hi += 1; }
  const pad = (hi - lo) * 0.06;
  lo -= pad;
  hi += pad;
  const y = (v) => (CHART_H - ((v - lo) / (hi - lo)) * CHART_H).toFixed(2);
  const svg = fig.querySelector("svg");
  svg.dataset.lo = String(lo);
  svg.dataset.hi = String(hi);
  svg.dataset.t0 = String(t0);
  svg.dataset.span = String(span);
  svg.dataset.every = String(every); // the bucket: tells the ranges apart when both zoom to 1 h
  const parts = [];
  const now = Date.now();
  for (const m of runMarks.values()) {
    const a = chartX(view, m.start - every / 2), b = chartX(view, (m.stop ?? now) - every / 2);
    if (b <= 0 || a >= CHART_W) continue;
    parts.push(svgEl("rect", { class: "run-span", x: a.toFixed(1), y: 0, width: Math.max(0.5, b - a).toFixed(1), height: CHART_H }));
    if (a > 0) parts.push(svgEl("line", { class: "mark run start", x1: a.toFixed(1), x2: a.toFixed(1), y1: 0, y2: CHART_H }));
    if (m.stop !== null && b < CHART_W) parts.push(svgEl("line", { class: "mark run stop", x1: b.toFixed(1), x2: b.toFixed(1), y1: 0, y2: CHART_H }));
  }
  for (const m of safetyMarks) {
    if (m.t < t0) continue;
    const x = chartX(view, m.t - every / 2).toFixed(1);
    parts.push(svgEl("line", { class: "mark safety " + (m.safe ? "safe" : "unsafe"), x1: x, x2: x, y1: 0, y2: CHART_H }));
  }
  for (const [key, level, value] of limits) {
    const line = svgEl("line", { class: "limit " + level, x1: 0, x2: CHART_W, y1: y(value), y2: y(value) });
    line.dataset.limit = key;
    line.dataset.value = String(value);
    parts.push(line);
  }
  // One vertex per point; a hole (chartHole) breaks the line, and a point alone between holes gets
  // a zero-length stroke ("h0"), which the round cap shows as a dot.
  let d = "";
  const hole = chartHole(type, points, every);
  const gapAt = (i) => i === 0 || i === points.length || points[i].t - points[i - 1].t > hole;
  for (let i = 0; i < points.length; i++) {
    d += (gapAt(i) ? "M" : "L") + chartX(view, points[i].t).toFixed(1) + "," + y(points[i].v);
    if (gapAt(i) && gapAt(i + 1)) d += "h0";
  }
  const path = svgEl("path", { class: "series", d: d || "M0,0" });
  path.dataset.vertices = String(points.length);
  if (!d) path.setAttribute("visibility", "hidden");
  parts.push(path, svgEl("line", { class: "cursor", x1: 0, x2: 0, y1: 0, y2: CHART_H, visibility: "hidden" }));
  svg.replaceChildren(...parts);
  svg.dataset.vertices = String(points.length);
  svg.dataset.hole = String(hole);
  const label = f && f.label ? f.label : field;
  fig.querySelector(".name").textContent = label + (view.unit ? " (" + view.unit + ")" : "");
  fig.querySelector(".span").textContent = !points.length
    ? "no history yet"
    : axis.zoomed
    ? "last " + chartSpanText(span) + " (all data)"
    : "last " + chartHours + " h";
  const fmt = (v) => String(Math.round(v * 100) / 100);
  fig.querySelector(".hi").textContent = fmt(hi);
  fig.querySelector(".lo").textContent = fmt(lo);
  fig.querySelector(".t0").textContent = chartClock(t0, false);
}

function setRange(hours, save) {
  if (!(hours in CHART_EVERY_S)) hours = 12;
  chartHours = hours;
  for (const b of document.querySelectorAll("#range button")) {
    b.setAttribute("aria-pressed", String(Number(b.dataset.hours) === hours));
  }
  if (save) {
    try { localStorage.setItem("telemetry-range", String(hours)); } catch { /* private mode */ }
  }
}

function chartsInit() {
  let saved = 12;
  try { saved = Number(localStorage.getItem("telemetry-range") || "12"); } catch { /* private mode */ }
  setRange(saved, false);
  for (const b of document.querySelectorAll("#range button")) {
    b.addEventListener("click", () => {
      setRange(Number(b.dataset.hours), true);
      chartReloadAll();
    });
  }
  // The time axis slides: redraw every 30 s, and reload after a reconnect (events may be missed).
  setInterval(() => {
    for (const points of chartSeries.values()) chartTrim(points);
    chartRedrawAll();
  }, 30000);
}

function chartsConnected() {
  chartConnects++;
  if (chartConnects === 1) {
    if (!historyMissing) loadSafetyMarks(chartEpoch);
    for (const type of cards.keys()) chartLoad(type);
  } else {
    chartReloadAll();
  }
}
`;
