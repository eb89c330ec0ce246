/**
 * The Alpaca Management API of the service (docs/safety.md, "ASCOM Alpaca (N.I.N.A.)"): the API
 * versions, the server's description and its configured devices, whose `UniqueID`s are derived
 * from the site's `site_id` (and a safety monitor's profile name) so that a client keeps its
 * settings across restarts.
 *
 * @module
 */

import { type AlpacaDeviceRef, DEVICE_TYPE_NAMES, deviceName } from "./devices.ts";
import { SITE_PROFILE } from "../core/types_registry.ts";
import { VERSION } from "../http/version.ts";

/** One entry of `/management/v1/configureddevices`. */
export interface ConfiguredDevice {
  /** The device's `name`. */
  readonly DeviceName: string;
  /** `SafetyMonitor` or `ObservingConditions`. */
  readonly DeviceType: string;
  /** The device number in its URLs. */
  readonly DeviceNumber: number;
  /** Stable for a site: derived from its `site_id` (and a safety monitor's profile). */
  readonly UniqueID: string;
}

/**
 * The `UniqueID` of a device of a site: the SHA-256 of the `site_id` and the device, written as
 * a UUID (RFC 9562 version 8, "custom"), the same at every start of the same site directory. A
 * safety monitor of a profile other than `site` is named by its profile, not its number: a
 * profile added to the types file renumbers the devices after it, and each keeps its `UniqueID`.
 *
 * @param siteId The site's `site_id` (`<site_dir>/.site.json`).
 * @param device The device.
 * @returns The UUID text, lower case.
 *
 * @example Usage
 * ```ts
 * import { deviceUniqueId } from "./management.ts";
 * import assert from "node:assert/strict";
 *
 * const site = "0b6f9c1e-7a54-4d0e-9a51-3f1c8f1b2d3a";
 * const id = await deviceUniqueId(site, { type: "safetymonitor", number: 0, profile: "site" });
 * assert.equal(id, await deviceUniqueId(site, { type: "safetymonitor", number: 0 }));
 * assert.notEqual(id, await deviceUniqueId(site, { type: "observingconditions", number: 0 }));
 * assert.equal(
 *   await deviceUniqueId(site, { type: "safetymonitor", number: 1, profile: "north" }),
 *   await deviceUniqueId(site, { type: "safetymonitor", number: 2, profile: "north" }),
 * );
 * assert.match(id, /^[0-9a-f]{8}-[0-9a-f]{4}-8[0-9a-f]{3}-[89ab][0-9a-f]{3}-[0-9a-f]{12}$/);
 * ```
 */
export async function deviceUniqueId(siteId: string, device: AlpacaDeviceRef): Promise<string> {
  const { type, number, profile } = device;
  // `site`'s safety monitor keeps the input it had before profiles existed.
  const which = profile === undefined || profile === SITE_PROFILE
    ? `${type}/${number}`
    : `${type}/profile/${profile}`;
  const input = new TextEncoder().encode(`obs-utils-telemetry/alpaca/${siteId}/${which}`);
  const bytes = new Uint8Array(await crypto.subtle.digest("SHA-256", input)).slice(0, 16);
  bytes[6] = (bytes[6]! & 0x0f) | 0x80; // version 8
  bytes[8] = (bytes[8]! & 0x3f) | 0x80; // RFC 9562 variant
  const hex = [...bytes].map((b) => b.toString(16).padStart(2, "0")).join("");
  return `${hex.slice(0, 8)}-${hex.slice(8, 12)}-${hex.slice(12, 16)}-${hex.slice(16, 20)}-${
    hex.slice(20)
  }`;
}

/**
 * The configured devices of a site, in the order of the management API's answer.
 *
 * @param siteId The site's `site_id`.
 * @param served The devices served (`AlpacaDevices.devices`).
 * @returns Each device with its `UniqueID`.
 *
 * @example Usage
 * ```ts
 * import { configuredDevices } from "./management.ts";
 * import assert from "node:assert/strict";
 *
 * const devices = await configuredDevices("0b6f9c1e-7a54-4d0e-9a51-3f1c8f1b2d3a", [
 *   { type: "safetymonitor", number: 0 },
 *   { type: "observingconditions", number: 0 },
 * ]);
 * assert.deepEqual(devices.map((d) => d.DeviceType), ["SafetyMonitor", "ObservingConditions"]);
 * ```
 */
export async function configuredDevices(
  siteId: string,
  served: readonly AlpacaDeviceRef[],
): Promise<ConfiguredDevice[]> {
  const devices: ConfiguredDevice[] = [];
  for (const device of served) {
    devices.push({
      DeviceName: deviceName(device),
      DeviceType: DEVICE_TYPE_NAMES[device.type],
      DeviceNumber: device.number,
      UniqueID: await deviceUniqueId(siteId, device),
    });
  }
  return devices;
}

/** The `Value` of `/management/v1/description`. */
export interface ServerDescription {
  /** The server's name. */
  readonly ServerName: string;
  /** Who makes it. */
  readonly Manufacturer: string;
  /** The package version. */
  readonly ManufacturerVersion: string;
  /** Where it is: the site, by its `site_id`. */
  readonly Location: string;
}

/**
 * The server's description.
 *
 * @param siteId The site's `site_id`, named as the location.
 * @returns The `Value` of `/management/v1/description`.
 *
 * @example Usage
 * ```ts
 * import { serverDescription } from "./management.ts";
 * import assert from "node:assert/strict";
 *
 * assert.equal(serverDescription("x").ServerName, "obs-utils telemetry");
 * ```
 */
export function serverDescription(siteId: string): ServerDescription {
  return {
    ServerName: "obs-utils telemetry",
    Manufacturer: "obs-utils",
    ManufacturerVersion: VERSION,
    Location: `site ${siteId}`,
  };
}

/**
 * The answer of a management path, or `undefined` for a path that is not one.
 *
 * @param pathname The request's path.
 * @param siteId The site's `site_id`.
 * @param devices The configured devices (computed once at start).
 * @returns The `Value` to answer.
 *
 * @example Usage
 * ```ts
 * import { managementValue } from "./management.ts";
 * import assert from "node:assert/strict";
 *
 * assert.deepEqual(managementValue("/management/apiversions", "x", []), [1]);
 * assert.equal(managementValue("/management/v2/description", "x", []), undefined);
 * ```
 */
export function managementValue(
  pathname: string,
  siteId: string,
  devices: readonly ConfiguredDevice[],
): unknown {
  switch (pathname) {
    case "/management/apiversions":
      return [1];
    case "/management/v1/description":
      return serverDescription(siteId);
    case "/management/v1/configureddevices":
      return devices;
    default:
      return undefined;
  }
}
