/**
 * The dashboard's style sheet (`GET /`, docs/http-api.md): a dark theme, a dim red night theme
 * for dark-adapted eyes, and the cards' grid. Inlined under the page's CSP nonce.
 *
 * @module
 */

/**
 * The CSS of the dashboard page.
 *
 * @example Usage
 * ```ts
 * import { DASHBOARD_STYLE } from "./style.ts";
 * import assert from "node:assert/strict";
 *
 * assert.match(DASHBOARD_STYLE, /:root\.night/);
 * ```
 */
export const DASHBOARD_STYLE: string = `
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
#range { display: inline-flex; }
#range button { border-radius: 0; margin-left: -1px; padding: .2rem .5rem; }
#range button:first-child { border-radius: 6px 0 0 6px; }
#range button:last-child { border-radius: 0 6px 6px 0; }
#range button[aria-pressed="true"] { border-color: var(--accent); color: var(--accent); position: relative; }
#safety {
  display: flex; flex-wrap: wrap; align-items: baseline; gap: .3rem 1rem; margin: .9rem 1rem 0;
  padding: .6rem 1rem; border: 1px solid var(--line); border-left: 6px solid var(--ok);
  border-radius: 8px; background: var(--panel);
}
#safety[hidden] { display: none; }
#safety .verdict { font-size: 1.25rem; font-weight: 800; letter-spacing: .08em; color: var(--ok); }
#safety[data-safe="false"] { border-left-color: var(--bad); }
#safety[data-safe="false"] .verdict { color: var(--bad); }
#safety[data-clearing="true"] { border-left-color: var(--warn); }
#safety .clear { color: var(--warn); font-weight: 600; font-variant-numeric: tabular-nums; }
#safety .since { color: var(--muted); font-size: .85rem; }
#safety .reasons { flex: 1 0 100%; margin: 0; padding: 0 0 0 1.1rem; font-size: .88rem; }
/* A waiver is never silent (docs/dashboard.md): amber, with a WAIVED tag, safe site or not. */
#safety[data-safe="true"][data-waived="true"] { border-left-color: var(--warn); }
#safety .waivers, #safety .profiles {
  flex: 1 0 100%; margin: 0; padding: 0; list-style: none; font-size: .88rem;
}
#safety .waivers li { color: var(--warn); }
#safety .waivers .type { font-weight: 600; }
#safety .waivers .tag {
  padding: 0 .35rem; border-radius: 4px; background: var(--warn); color: var(--bg);
  letter-spacing: .06em;
}
#safety .profiles li { display: flex; gap: .35rem; white-space: nowrap; min-width: 0; }
#safety .profiles .name { font-weight: 600; }
#safety .profiles .pv { font-weight: 800; letter-spacing: .06em; color: var(--ok); }
#safety .profiles li[data-safe="false"] .pv { color: var(--bad); }
#safety .profiles .why { color: var(--muted); overflow: hidden; text-overflow: ellipsis; }
.charts { display: grid; flex: 1; align-content: start; gap: .35rem; padding: .2rem .8rem .6rem; }
.card:has(> .charts:not([hidden])) > dl { flex: 0 0 auto; }
/* The value labels get a column left of the plot and the time labels a row under it: over the plot
   they covered the line (docs/dashboard.md, "The charts"). */
.chart { margin: 0; display: grid; grid-template-columns: minmax(2rem, max-content) minmax(0, 1fr); column-gap: .3rem; }
.chart figcaption { grid-column: 1 / -1; display: flex; justify-content: space-between; color: var(--muted); font-size: .75rem; }
.chart .plot { grid-column: 2; position: relative; height: 64px; touch-action: pan-y; }
.chart .scale {
  grid-column: 1; display: flex; flex-direction: column; justify-content: space-between; align-items: flex-end;
  color: var(--muted); font-size: .65rem; line-height: 1; font-variant-numeric: tabular-nums; pointer-events: none;
}
.chart-svg {
  display: block; width: 100%; height: 100%; background: var(--panel-2); border-radius: 4px;
}
.chart-svg .series { fill: none; stroke: var(--accent); stroke-width: 1.5; stroke-linejoin: round; stroke-linecap: round; vector-effect: non-scaling-stroke; }
.chart-svg line { vector-effect: non-scaling-stroke; stroke-width: 1; }
.chart-svg .limit.warn { stroke: var(--warn); stroke-dasharray: 5 3; }
.chart-svg .limit.alarm { stroke: var(--bad); stroke-dasharray: 5 3; }
.chart-svg .run-span { fill: var(--accent); fill-opacity: .08; }
.chart-svg .mark.run { stroke: var(--accent); stroke-opacity: .6; }
.chart-svg .mark.safety.unsafe { stroke: var(--bad); stroke-width: 2; }
.chart-svg .mark.safety.safe { stroke: var(--ok); stroke-width: 2; }
.chart-svg .cursor { stroke: var(--text); stroke-opacity: .7; }
.chart .tip {
  position: absolute; top: -1.6rem; padding: .1rem .4rem; border: 1px solid var(--line); border-radius: 4px;
  background: var(--bg); color: var(--value); font-size: .72rem; white-space: nowrap; pointer-events: none; z-index: 1;
}
.chart .axis { grid-column: 2; display: flex; justify-content: space-between; color: var(--muted); font-size: .65rem; }
@media (max-width: 480px) { .top { padding: .6rem .75rem; } main { padding: .75rem; gap: .7rem; } }
`;
