/**
 * The Alpaca setup pages (docs/safety.md, "ASCOM Alpaca (N.I.N.A.)"): small read-only HTML pages
 * saying where each value comes from. Nothing is set here: the types file is the configuration.
 * Every text from the types file is escaped.
 *
 * @module
 */

import { isCriticalFor, SITE_PROFILE, type TypesRegistry } from "../core/types_registry.ts";
import { ALPACA_PROPERTIES, ALPACA_PROPERTY_NAMES, alpacaUnit } from "../core/units.ts";
import {
  type AlpacaDeviceRef,
  type AlpacaDevices,
  DEVICE_TYPE_NAMES,
  deviceName,
} from "./devices.ts";
import { VERSION } from "../http/version.ts";

/**
 * Text made safe inside HTML elements and quoted attributes.
 *
 * @param text Any text.
 * @returns The text with `&`, `<`, `>`, `"` and `'` escaped.
 *
 * @example Usage
 * ```ts
 * import { escapeHtml } from "./setup.ts";
 * import assert from "node:assert/strict";
 *
 * assert.equal(escapeHtml('<b a="1">&'), "&lt;b a=&quot;1&quot;&gt;&amp;");
 * ```
 */
export function escapeHtml(text: string): string {
  return text.replace(/[&<>"']/g, (c) => ESCAPES[c]!);
}

const ESCAPES: Readonly<Record<string, string>> = {
  "&": "&amp;",
  "<": "&lt;",
  ">": "&gt;",
  '"': "&quot;",
  "'": "&#39;",
};

function page(title: string, body: string): string {
  return `<!doctype html>
<html lang="en"><head><meta charset="utf-8"><title>${escapeHtml(title)}</title>
<style>body{font-family:sans-serif;max-width:50em;margin:2em auto}td,th{padding:.2em .6em;text-align:left}</style>
</head><body><h1>${escapeHtml(title)}</h1>
${body}
<p>Read-only: the values are configured in the types file (<code>--types</code>) of the telemetry service; change that file and restart the service.</p>
</body></html>
`;
}

/**
 * The page of `/setup`: the server and links to each device's page.
 *
 * @param siteId The site's `site_id`.
 * @param devices The devices served (`AlpacaDevices.devices`).
 * @returns The HTML.
 *
 * @example Usage
 * ```ts
 * import { serverSetupPage } from "./setup.ts";
 * import assert from "node:assert/strict";
 *
 * assert.match(serverSetupPage("x", [{ type: "safetymonitor", number: 0 }]), /safetymonitor\/0\/setup/);
 * ```
 */
export function serverSetupPage(siteId: string, devices: readonly AlpacaDeviceRef[]): string {
  const links = devices.map((device) =>
    `<li><a href="/setup/v1/${device.type}/${device.number}/setup">${
      escapeHtml(DEVICE_TYPE_NAMES[device.type])
    } ${device.number}: ${escapeHtml(deviceName(device))}</a></li>`
  ).join("\n");
  return page(
    "obs-utils telemetry: ASCOM Alpaca",
    `<p>obs-utils telemetry ${escapeHtml(VERSION)}, site ${
      escapeHtml(siteId)
    }.</p>\n<ul>\n${links}\n</ul>`,
  );
}

/** The body of a safety monitor's page: its profile's critical types and its actions. */
function safetySetup(device: AlpacaDeviceRef, types: TypesRegistry): string {
  const profile = device.profile ?? SITE_PROFILE;
  const site = profile === SITE_PROFILE;
  const critical = [...types].filter(([, spec]) => isCriticalFor(spec, profile)).map(([type]) =>
    `<li>${escapeHtml(type)}</li>`
  );
  const list = critical.length === 0
    ? '<p>No critical type is registered, so IsSafe is false: mark types <code>"critical": true</code> in the types file.</p>'
    : `<ul>\n${critical.join("\n")}\n</ul>`;
  const verdict = site
    ? "IsSafe is the service's safety verdict (<code>GET /safety</code> on its HTTP port)"
    : `IsSafe is the verdict of the safety profile <code>${
      escapeHtml(profile)
    }</code> (<code>GET /safety?profile=${
      escapeHtml(encodeURIComponent(profile))
    }</code> on the service's HTTP port), over the types whose <code>critical_for</code> names it`;
  const held = site
    ? "An external event set through this device holds every profile."
    : "An external event set through this device holds only this profile; one set through safetymonitor 0 holds every profile.";
  return `<p>${verdict}: true only while every type below is fresh, out of alarm and not clearing, and no external event holds it.</p>
${list}
<p>Actions: <code>SafetyEvents</code> (why it is unsafe, as JSON), <code>SetExternalEvents</code> and <code>ClearExternalEvents</code> (events other programs set to hold it shut). ${held}</p>`;
}

/**
 * The page of `/setup/v1/{device}/{number}/setup`: where each of the device's values comes from.
 *
 * @param device The device.
 * @param types The types registry (a safety monitor lists its profile's critical types).
 * @param devices The devices, for the mapped fields.
 * @returns The HTML.
 *
 * @example Usage
 * ```ts
 * import { AlpacaDevices } from "./devices.ts";
 * import { deviceSetupPage } from "./setup.ts";
 * import assert from "node:assert/strict";
 *
 * const types = new Map([
 *   ["weather", { critical: true, fields: {} }],
 *   ["dome", { critical: false, critical_for: ["north"], fields: {} }],
 * ]);
 * const devices = new AlpacaDevices(types, {
 *   profiles: ["site", "north"],
 *   isSafe: () => false,
 *   latest: () => undefined,
 *   now: Date.now,
 * });
 * assert.match(deviceSetupPage(devices.find("safetymonitor", "0")!, types, devices), /weather/);
 * assert.doesNotMatch(deviceSetupPage(devices.find("safetymonitor", "1")!, types, devices), /weather/);
 * ```
 */
export function deviceSetupPage(
  device: AlpacaDeviceRef,
  types: TypesRegistry,
  devices: AlpacaDevices,
): string {
  const title = `${DEVICE_TYPE_NAMES[device.type]} ${device.number}: ${deviceName(device)}`;
  if (device.type === "safetymonitor") return page(title, safetySetup(device, types));
  const rows = ALPACA_PROPERTIES.map((property) => {
    const mapped = devices.mappings.get(property);
    const source = mapped === undefined
      ? `not configured (add <code>"alpaca": "${property}"</code> to a field)`
      : `${escapeHtml(mapped.type)} <code>${escapeHtml(mapped.path)}</code>${
        mapped.label === undefined ? "" : ` (${escapeHtml(mapped.label)})`
      }, recorded in ${escapeHtml(mapped.unit)}`;
    return `<tr><td>${ALPACA_PROPERTY_NAMES[property]}</td><td>${
      escapeHtml(alpacaUnit(property))
    }</td><td>${source}</td></tr>`;
  }).join("\n");
  return page(
    title,
    `<table>\n<tr><th>Property</th><th>Unit</th><th>From</th></tr>\n${rows}\n</table>`,
  );
}
