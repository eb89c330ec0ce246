/**
 * The dashboard's SAFE / UNSAFE banner (`GET /`, docs/dashboard.md): plain browser JavaScript,
 * inlined before the main script under the page's CSP nonce. It shows the site's verdict of
 * `GET /safety` with its reasons (an external event's among them, `external: ...`), and "safe at
 * HH:MM:SS (site zone)" while a latch clears; every waiver in force as its own WAIVED line, safe
 * site or not (a waiver is never silent); and one compact line per other profile (the names
 * `critical_for` gives in `GET /types`), from `GET /safety?profile=P`. It asks again on every
 * `telemetry.safety` event (a profile's included), on every `telemetry.safety.external` and
 * `telemetry.safety.waiver` event (an external event or a waiver changes the reasons without
 * changing the verdict), after every event of a type that decides a verdict and when one turns
 * stale (a latch starting or a reason changing while the site stays unsafe is no
 * `telemetry.safety` event), when `clear_at` passes, and every 5 s. Against an older service
 * without `/safety` (404) the banner stays hidden, and one that ignores `?profile=` shows no
 * profile lines.
 *
 * @module
 */

/**
 * The JavaScript of the dashboard's safety banner.
 *
 * @example Usage
 * ```ts
 * import { DASHBOARD_SAFETY_SCRIPT } from "./safety_banner.ts";
 * import assert from "node:assert/strict";
 *
 * assert.match(DASHBOARD_SAFETY_SCRIPT, /fetch\("safety"/);
 * assert.match(DASHBOARD_SAFETY_SCRIPT, /telemetry\.safety\.waiver/);
 * ```
 */
export const DASHBOARD_SAFETY_SCRIPT: string = `
let safetyState = null;
// The verdicts of the profiles other than the site, in name order (docs/safety.md#profiles).
let safetyOthers = [];
let safetyMissing = false;
let safetyBusy = false;
let safetyAsked = 0;
let safetySoonTimer = 0;
// The poll: the verdict also changes with time alone (docs/dashboard.md, "The safety banner").
const SAFETY_POLL_MS = 5000;
// The service's audit events of the safety hub: they change what the banner shows, often
// without changing the verdict (docs/safety.md#audit).
const SAFETY_HUB_TYPES = ["telemetry.safety.external", "telemetry.safety.waiver"];

function safetyClock(ms) {
  try {
    return new Intl.DateTimeFormat("en-GB", {
      timeZone: zone || "UTC", hour: "2-digit", minute: "2-digit", second: "2-digit", hourCycle: "h23",
    }).format(new Date(ms));
  } catch {
    return new Date(ms).toISOString().slice(11, 19);
  }
}

// Whether a type of GET /types decides a verdict: the site's (critical) or a profile's.
function safetyDecides(spec) {
  return !!spec && (!!spec.critical || (Array.isArray(spec.critical_for) && spec.critical_for.length > 0));
}

// The profiles besides the site, by name: GET /types lists each type's critical_for.
function safetyProfileNames() {
  const names = new Set();
  for (const spec of Object.values(registry || {})) {
    if (spec && Array.isArray(spec.critical_for)) {
      for (const name of spec.critical_for) if (typeof name === "string" && name !== "site") names.add(name);
    }
  }
  return [...names].sort();
}

// Called when GET /types was read again: a profile added or gone is asked for at once.
let safetyNamesShown = "";
function safetyTypesLoaded() {
  const names = safetyProfileNames().join(",");
  if (names === safetyNamesShown) return;
  safetyNamesShown = names;
  loadSafety();
}

// One profile's verdict; null when the service does not know it, the last one when offline.
async function safetyProfile(name) {
  const last = safetyOthers.find((v) => v.profile === name) || null;
  try {
    const res = await fetch("safety?profile=" + encodeURIComponent(name), { cache: "no-store" });
    if (!res.ok) {
      await res.body?.cancel();
      return res.status === 404 ? null : last;
    }
    const v = await res.json();
    // A service without profiles ignores ?profile= and answers the site's verdict: not this one.
    return v && v.profile === name && typeof v.safe === "boolean" ? v : null;
  } catch {
    return last;
  }
}

let safetyAgain = false;
async function loadSafety() {
  // One question at a time; one asked meanwhile is asked again after it (its answer may be newer).
  if (safetyBusy) {
    safetyAgain = true;
    return;
  }
  safetyBusy = true;
  safetyAgain = false;
  safetyAsked = Date.now();
  try {
    const names = safetyProfileNames();
    const others = Promise.all(names.map(safetyProfile));
    const res = await fetch("safety", { cache: "no-store" });
    if (res.status === 404) {
      // An older service: no verdict to show.
      safetyMissing = true;
      safetyState = null;
    } else if (res.ok) {
      safetyMissing = false;
      safetyState = await res.json();
    } else {
      await res.body?.cancel();
    }
    safetyOthers = (await others).filter((v) => v !== null);
  } catch {
    // Offline: the last verdict stays, and the disconnected banner says why.
  } finally {
    safetyBusy = false;
    drawSafety();
    if (safetyAgain) loadSafety();
  }
}

// A telemetry.safety event carries a profile's new verdict: show it at once, then ask for the
// rest. One of a profile other than the site (data.profile) changes that profile's line only.
function safetyEvent(env) {
  const d = env && env.data;
  if (!d || typeof d.safe !== "boolean") return;
  const fresh = { safe: d.safe, reasons: Array.isArray(d.reasons) ? d.reasons : [], clear_at: d.clear_at ?? null, since: env.ts };
  if (typeof d.profile === "string" && d.profile !== "site") {
    safetyOthers = safetyOthers.map((v) => v.profile === d.profile ? Object.assign({}, v, fresh) : v);
  } else {
    safetyState = Object.assign({}, safetyState || {}, fresh);
  }
  drawSafety();
  loadSafety();
}

// An event of the service's own types, live from the stream: the verdict's, or the hub's.
function safetyStreamEvent(env) {
  if (env.type === "telemetry.safety") safetyEvent(env);
  else if (SAFETY_HUB_TYPES.includes(env.type)) loadSafety();
}

// An event of a type that decides a verdict, or one turning stale, may change the verdict's
// reasons without changing the verdict (a latch starts clearing: no telemetry.safety event): ask
// again, at most once a second however fast the type posts.
function safetySoon() {
  if (safetyMissing || safetySoonTimer) return;
  const wait = Math.max(0, 1000 - (Date.now() - safetyAsked));
  safetySoonTimer = setTimeout(() => {
    safetySoonTimer = 0;
    loadSafety();
  }, wait);
}

// Every waiver in force, the site's and the profiles' (a profile's own type is waived there only),
// once per type.
function safetyWaivers() {
  const byType = new Map();
  for (const v of [safetyState, ...safetyOthers]) {
    for (const w of (v && Array.isArray(v.waivers) ? v.waivers : [])) {
      if (w && typeof w.type === "string" && !byType.has(w.type)) byType.set(w.type, w);
    }
  }
  return [...byType.values()];
}

// The reasons without the WAIVED lines, which the banner shows as waivers of their own.
function safetyReasons(v, waivers) {
  const reasons = v && Array.isArray(v.reasons) ? v.reasons.map(String) : [];
  return reasons.filter((r) => !waivers.some((w) => r.startsWith(w.type + ": WAIVED until ")));
}

// "weather WAIVED until 04:00:00 (UTC) — anemometer iced — by 192.0.2.7"
function safetyWaiverLine(w) {
  const until = Date.parse(w.until);
  const when = Number.isNaN(until) ? String(w.until) : safetyClock(until) + " (" + (zone || "UTC") + ")";
  const li = el("li", "waiver");
  li.append(el("span", "type", String(w.type)), " ", el("b", "tag", "WAIVED"),
    " until " + when + " \\u2014 " + String(w.reason ?? "") + " \\u2014 by " + String(w.peer ?? "unknown"));
  return li;
}

// "north UNSAFE — dome: temp_c 61 above alarm 50"
function safetyProfileLine(v, waivers) {
  const li = el("li", "profile");
  li.dataset.profile = v.profile;
  li.dataset.safe = String(v.safe);
  const reasons = safetyReasons(v, waivers);
  li.append(el("span", "name", v.profile), " ", el("span", "pv", v.safe ? "SAFE" : "UNSAFE"));
  if (reasons.length > 0) li.append(el("span", "why", " \\u2014 " + reasons.join("; ")));
  li.title = reasons.join("\\n");
  return li;
}

function drawSafety() {
  const box = document.getElementById("safety");
  const s = safetyState;
  box.dataset.missing = String(safetyMissing);
  if (!s || typeof s.safe !== "boolean") {
    box.hidden = true;
    return;
  }
  box.hidden = false;
  const clearAt = typeof s.clear_at === "string" ? Date.parse(s.clear_at) : NaN;
  const clearing = !s.safe && !Number.isNaN(clearAt);
  const waivers = safetyWaivers();
  box.dataset.safe = String(s.safe);
  box.dataset.clearing = String(clearing);
  box.dataset.waived = String(waivers.length > 0);
  box.querySelector(".verdict").textContent = s.safe ? "SAFE" : "UNSAFE";
  const clear = box.querySelector(".clear");
  clear.hidden = !clearing;
  clear.textContent = clearing ? "safe at " + safetyClock(clearAt) + " (" + (zone || "UTC") + ")" : "";
  const since = Date.parse(s.since);
  box.querySelector(".since").textContent = Number.isNaN(since) ? "" : "since " + safetyClock(since);
  const list = box.querySelector(".reasons");
  const reasons = safetyReasons(s, waivers).slice(0, 20);
  list.replaceChildren(...reasons.map((r) => el("li", "", r)));
  list.hidden = reasons.length === 0;
  const waived = box.querySelector(".waivers");
  waived.replaceChildren(...waivers.slice(0, 20).map(safetyWaiverLine));
  waived.hidden = waivers.length === 0;
  const profiles = box.querySelector(".profiles");
  profiles.replaceChildren(...safetyOthers.map((v) => safetyProfileLine(v, waivers)));
  profiles.hidden = safetyOthers.length === 0;
}

function safetyInit() {
  // The verdict changes with time too (a latch ending, a type going stale): poll, and ask again
  // just after clear_at. Against a service without /safety, ask rarely. (A 15 s poll left the
  // alarm's reasons up for 15 s after /safety said clearing.)
  let polled = Date.now();
  setInterval(() => {
    const now = Date.now();
    const s = safetyState;
    const clearAt = s && !s.safe && typeof s.clear_at === "string" ? Date.parse(s.clear_at) : NaN;
    const due = !Number.isNaN(clearAt) && now >= clearAt + 300 && now - safetyAsked > 2000;
    const every = safetyMissing ? 300000 : SAFETY_POLL_MS;
    if (due || now - polled >= every) {
      polled = now;
      loadSafety();
    }
  }, 1000);
  loadSafety();
}
`;
