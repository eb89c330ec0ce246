/**
 * The dashboard's SAFE / UNSAFE banner (`GET /`, docs/dashboard.md): plain browser JavaScript,
 * inlined before the main script under the page's CSP nonce. It shows the verdict of
 * `GET /safety` with its reasons, and "safe at HH:MM:SS (site zone)" while a latch clears. It asks
 * again on every `telemetry.safety` event, after every event of a critical type and when one turns
 * stale (a latch starting or a reason changing while the site stays unsafe is no `telemetry.safety`
 * event), when `clear_at` passes, and every 5 s. Against an older service without `/safety` (404)
 * the banner stays hidden.
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
 * ```
 */
export const DASHBOARD_SAFETY_SCRIPT: string = `
let safetyState = null;
let safetyMissing = false;
let safetyBusy = false;
let safetyAsked = 0;
let safetySoonTimer = 0;
// The poll: the verdict also changes with time alone (docs/dashboard.md, "The safety banner").
const SAFETY_POLL_MS = 5000;

function safetyClock(ms) {
  try {
    return new Intl.DateTimeFormat("en-GB", {
      timeZone: zone || "UTC", hour: "2-digit", minute: "2-digit", second: "2-digit", hourCycle: "h23",
    }).format(new Date(ms));
  } catch {
    return new Date(ms).toISOString().slice(11, 19);
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
  } catch {
    // Offline: the last verdict stays, and the disconnected banner says why.
  } finally {
    safetyBusy = false;
    drawSafety();
    if (safetyAgain) loadSafety();
  }
}

// A telemetry.safety event carries the new verdict: show it at once, then ask for the rest.
function safetyEvent(env) {
  const d = env && env.data;
  if (!d || typeof d.safe !== "boolean") return;
  safetyState = Object.assign({}, safetyState || {}, {
    safe: d.safe, reasons: Array.isArray(d.reasons) ? d.reasons : [], clear_at: d.clear_at ?? null, since: env.ts,
  });
  drawSafety();
  loadSafety();
}

// An event of a critical type, or one turning stale, may change the verdict's reasons without
// changing the verdict (a latch starts clearing: no telemetry.safety event): ask again, at most once
// a second however fast the type posts.
function safetySoon() {
  if (safetyMissing || safetySoonTimer) return;
  const wait = Math.max(0, 1000 - (Date.now() - safetyAsked));
  safetySoonTimer = setTimeout(() => {
    safetySoonTimer = 0;
    loadSafety();
  }, wait);
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
  box.dataset.safe = String(s.safe);
  box.dataset.clearing = String(clearing);
  box.querySelector(".verdict").textContent = s.safe ? "SAFE" : "UNSAFE";
  const clear = box.querySelector(".clear");
  clear.hidden = !clearing;
  clear.textContent = clearing ? "safe at " + safetyClock(clearAt) + " (" + (zone || "UTC") + ")" : "";
  const since = Date.parse(s.since);
  box.querySelector(".since").textContent = Number.isNaN(since) ? "" : "since " + safetyClock(since);
  const list = box.querySelector(".reasons");
  const reasons = Array.isArray(s.reasons) ? s.reasons.slice(0, 20) : [];
  list.replaceChildren(...reasons.map((r) => el("li", "", String(r))));
  list.hidden = reasons.length === 0;
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
