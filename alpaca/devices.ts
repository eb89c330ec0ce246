/**
 * The two ASCOM Alpaca devices of the service (docs/safety.md, "ASCOM Alpaca (N.I.N.A.)"):
 * `safetymonitor/0`, whose `issafe` is the safety verdict, and `observingconditions/0`, whose
 * properties are the registered fields that carry an `"alpaca"` key in the types file, converted
 * into Alpaca's units. Each member answers a value or an ASCOM error number; a request the device
 * cannot understand throws {@linkcode AlpacaRequestError} (HTTP 400).
 *
 * @module
 */

import type { TypesRegistry } from "../core/types_registry.ts";
import { type LatestEvent, numericValue, valueAt } from "../core/freshness.ts";
import {
  ALPACA_PROPERTIES,
  ALPACA_PROPERTY_NAMES,
  alpacaConverter,
  type AlpacaProperty,
  alpacaUnit,
  isAlpacaProperty,
} from "../core/units.ts";
import { VERSION } from "../http/version.ts";

/**
 * ASCOM error numbers the devices answer (docs/safety.md): the member is not implemented
 * (`NOT_IMPLEMENTED`), a value given is not valid (`INVALID_VALUE`), the value is not set yet,
 * no event having been recorded (`VALUE_NOT_SET`).
 *
 * @example Usage
 * ```ts
 * import { INVALID_VALUE, NOT_IMPLEMENTED, VALUE_NOT_SET } from "./devices.ts";
 * import assert from "node:assert/strict";
 *
 * assert.deepEqual([NOT_IMPLEMENTED, INVALID_VALUE, VALUE_NOT_SET], [1024, 1025, 1026]);
 * ```
 */
export const NOT_IMPLEMENTED = 0x400;
/** ASCOM error number: a value given is not valid (see {@linkcode NOT_IMPLEMENTED}). */
export const INVALID_VALUE = 0x401;
/** ASCOM error number: the value has not been set yet (see {@linkcode NOT_IMPLEMENTED}). */
export const VALUE_NOT_SET = 0x402;

/** Where the devices read the service's state. */
export interface AlpacaSource {
  /** The safety verdict's `safe` (docs/safety.md). */
  isSafe(): boolean;
  /** The latest event of a type, or `undefined` when none was recorded. */
  latest(type: string): LatestEvent | undefined;
  /** The service clock, in ms since the epoch. */
  now(): number;
}

/**
 * A request the device cannot understand: answered HTTP 400 with a plain-text message.
 *
 * @example Usage
 * ```ts
 * import { AlpacaDevices, AlpacaRequestError } from "./devices.ts";
 * import assert from "node:assert/strict";
 *
 * const devices = new AlpacaDevices(new Map(), { isSafe: () => true, latest: () => undefined, now: Date.now });
 * assert.throws(() => devices.call("safetymonitor", "GET", "nothing", new Map()), AlpacaRequestError);
 * ```
 */
export class AlpacaRequestError extends Error {
  /**
   * Creates the error.
   *
   * @param message What is wrong with the request and what to send instead.
   */
  constructor(message: string) {
    super(message);
    this.name = "AlpacaRequestError";
  }
}

/** What a member answers: a value (absent for a method), or an ASCOM error. */
export type MemberResult =
  | { readonly value?: unknown }
  | { readonly error: number; readonly message: string };

/** The request parameters, keyed by lower-case name (Alpaca names are case-insensitive). */
export type AlpacaParams = ReadonlyMap<string, string>;

/** One field feeding an ObservingConditions property. */
interface Mapped {
  readonly type: string;
  readonly path: string;
  readonly unit: string;
  readonly label: string | undefined;
  readonly description: string | undefined;
  readonly convert: (value: number) => number;
}

/**
 * The devices the service serves, as they appear in URLs (each is device number 0).
 *
 * @example Usage
 * ```ts
 * import { ALPACA_DEVICES, DEVICE_NAMES, DEVICE_TYPE_NAMES } from "./devices.ts";
 * import assert from "node:assert/strict";
 *
 * assert.deepEqual(ALPACA_DEVICES.map((d) => DEVICE_TYPE_NAMES[d]), ["SafetyMonitor", "ObservingConditions"]);
 * assert.equal(DEVICE_NAMES.safetymonitor, "obs-utils telemetry safety");
 * ```
 */
export const ALPACA_DEVICES = ["safetymonitor", "observingconditions"] as const;

/** One of {@linkcode ALPACA_DEVICES}. */
export type AlpacaDevice = typeof ALPACA_DEVICES[number];

/** The device names in ASCOM's spelling (`DeviceType` of the management API; see {@linkcode ALPACA_DEVICES}). */
export const DEVICE_TYPE_NAMES: Readonly<Record<AlpacaDevice, string>> = {
  safetymonitor: "SafetyMonitor",
  observingconditions: "ObservingConditions",
};

/** The `name` of each device (see {@linkcode ALPACA_DEVICES}). */
export const DEVICE_NAMES: Readonly<Record<AlpacaDevice, string>> = {
  safetymonitor: "obs-utils telemetry safety",
  observingconditions: "obs-utils telemetry conditions",
};

const DESCRIPTIONS: Readonly<Record<AlpacaDevice, string>> = {
  safetymonitor:
    "The safety verdict of the obs-utils telemetry service: safe only while every critical type of the types file is fresh, out of alarm and not clearing",
  observingconditions:
    "Weather values recorded by the obs-utils telemetry service, from the types-file fields that carry an alpaca key",
};

const INTERFACE_VERSIONS: Readonly<Record<AlpacaDevice, number>> = {
  safetymonitor: 3,
  observingconditions: 2,
};

const COMMON_GET = [
  "connected",
  "connecting",
  "description",
  "devicestate",
  "driverinfo",
  "driverversion",
  "interfaceversion",
  "name",
  "supportedactions",
];
const COMMON_PUT = [
  "action",
  "commandblind",
  "commandbool",
  "commandstring",
  "connect",
  "connected",
  "disconnect",
];

/**
 * The members of the two devices over one types registry and one source.
 *
 * @example Usage
 * ```ts
 * import { AlpacaDevices } from "./devices.ts";
 * import assert from "node:assert/strict";
 *
 * const devices = new AlpacaDevices(new Map(), {
 *   isSafe: () => true,
 *   latest: () => undefined,
 *   now: Date.now,
 * });
 * assert.deepEqual(devices.call("safetymonitor", "GET", "issafe", new Map()), { value: true });
 * ```
 */
export class AlpacaDevices {
  #source: AlpacaSource;
  #mapped = new Map<AlpacaProperty, Mapped>();

  /**
   * Creates the devices.
   *
   * @param types The types registry; its fields' `alpaca` keys feed ObservingConditions.
   * @param source Where the values and the verdict come from.
   */
  constructor(types: TypesRegistry, source: AlpacaSource) {
    this.#source = source;
    for (const [type, spec] of types) {
      for (const [path, field] of Object.entries(spec.fields)) {
        if (field.alpaca === undefined || field.unit === undefined) continue;
        const convert = alpacaConverter(field.alpaca, field.unit);
        // The registry refused the file already when the unit does not convert.
        if (convert === undefined) continue;
        this.#mapped.set(field.alpaca, {
          type,
          path,
          unit: field.unit,
          label: field.label,
          description: spec.description,
          convert,
        });
      }
    }
  }

  /** The mapped properties, for the setup page: property to `type`, field and units. */
  get mappings(): ReadonlyMap<AlpacaProperty, Readonly<Omit<Mapped, "convert">>> {
    return this.#mapped;
  }

  /**
   * Answers one member of one device.
   *
   * @param device The device.
   * @param method `GET` or `PUT`.
   * @param member The member, lower case, as in the URL.
   * @param params The request's parameters by lower-case name.
   * @returns The value, or an ASCOM error.
   * @throws {AlpacaRequestError} For an unknown member, a method the member does not take, or
   *   a missing or malformed required parameter.
   */
  call(device: AlpacaDevice, method: string, member: string, params: AlpacaParams): MemberResult {
    const common = method === "GET" ? COMMON_GET : COMMON_PUT;
    if (common.includes(member)) return this.#common(device, method, member, params);
    const own = device === "safetymonitor"
      ? this.#safety(method, member)
      : this.#conditions(method, member, params);
    if (own !== undefined) return own;
    throw this.#unknown(device, method, member);
  }

  #unknown(device: AlpacaDevice, method: string, member: string): AlpacaRequestError {
    const known = this.#members(device);
    const other = method === "GET" ? "PUT" : "GET";
    if (known[other].includes(member)) {
      return new AlpacaRequestError(`${device} ${member} takes ${other}, not ${method}`);
    }
    return new AlpacaRequestError(
      `${device} has no member ${JSON.stringify(member.slice(0, 64))}; it answers GET ${
        known.GET.join(", ")
      } and PUT ${known.PUT.join(", ")}`,
    );
  }

  #members(device: AlpacaDevice): { GET: string[]; PUT: string[] } {
    if (device === "safetymonitor") return { GET: [...COMMON_GET, "issafe"], PUT: COMMON_PUT };
    return {
      GET: [
        ...COMMON_GET,
        ...ALPACA_PROPERTIES,
        "averageperiod",
        "sensordescription",
        "timesincelastupdate",
      ],
      PUT: [...COMMON_PUT, "averageperiod", "refresh"],
    };
  }

  #common(
    device: AlpacaDevice,
    method: string,
    member: string,
    params: AlpacaParams,
  ): MemberResult {
    if (method === "PUT") {
      if (member === "connected") {
        readBoolean(params, "Connected");
        return {};
      }
      if (member === "connect" || member === "disconnect") return {};
      return {
        error: NOT_IMPLEMENTED,
        message:
          `${member} is not implemented: this ${device} has no device-specific actions or commands`,
      };
    }
    switch (member) {
      case "connected":
        return { value: true };
      case "connecting":
        return { value: false };
      case "description":
        return { value: DESCRIPTIONS[device] };
      case "driverinfo":
        return {
          value: `obs-utils telemetry ${VERSION}: ASCOM Alpaca ${
            DEVICE_TYPE_NAMES[device]
          } served by the telemetry service (read-only)`,
        };
      case "driverversion":
        return { value: VERSION };
      case "interfaceversion":
        return { value: INTERFACE_VERSIONS[device] };
      case "name":
        return { value: DEVICE_NAMES[device] };
      case "supportedactions":
        return { value: [] };
      default: // devicestate
        return { value: this.#deviceState(device) };
    }
  }

  #deviceState(device: AlpacaDevice): { Name: string; Value: unknown }[] {
    if (device === "safetymonitor") return [{ Name: "IsSafe", Value: this.#source.isSafe() }];
    const state: { Name: string; Value: unknown }[] = [];
    for (const property of ALPACA_PROPERTIES) {
      const answer = this.#property(property);
      // Properties without a value are left out, as ASCOM's DeviceState asks.
      if ("value" in answer) {
        state.push({ Name: ALPACA_PROPERTY_NAMES[property], Value: answer.value });
      }
    }
    return state;
  }

  #safety(method: string, member: string): MemberResult | undefined {
    if (method === "GET" && member === "issafe") return { value: this.#source.isSafe() };
    return undefined;
  }

  #conditions(method: string, member: string, params: AlpacaParams): MemberResult | undefined {
    if (method === "PUT") {
      if (member === "refresh") return {};
      if (member !== "averageperiod") return undefined;
      const text = required(params, "AveragePeriod");
      const period = Number(text);
      if (text.trim() === "" || period !== 0) {
        return {
          error: INVALID_VALUE,
          message: `AveragePeriod ${
            JSON.stringify(text.slice(0, 64))
          } is not accepted: values are not averaged, so the only period is 0`,
        };
      }
      return {};
    }
    if (isAlpacaProperty(member)) return this.#property(member);
    if (member === "averageperiod") return { value: 0.0 };
    if (member === "sensordescription") {
      return this.#sensor(params, (property, mapped) => ({
        value: mapped.label ?? mapped.description ??
          `${mapped.type} ${mapped.path} (${mapped.unit}), ${alpacaUnit(property)} in Alpaca`,
      }));
    }
    if (member === "timesincelastupdate") return this.#sinceUpdate(params);
    return undefined;
  }

  #property(property: AlpacaProperty): MemberResult {
    const mapped = this.#mapped.get(property);
    if (mapped === undefined) return notMapped(property);
    const latest = this.#source.latest(mapped.type);
    if (latest === undefined) {
      return {
        error: VALUE_NOT_SET,
        message: `no ${mapped.type} event has been recorded yet, so ${property} has no value`,
      };
    }
    const raw = numericValue(valueAt(latest.data, mapped.path), mapped.unit);
    if (raw === undefined) {
      return {
        error: VALUE_NOT_SET,
        message:
          `the latest ${mapped.type} event (${latest.ts}) has no number at ${mapped.path}, so ${property} has no value`,
      };
    }
    return { value: mapped.convert(raw) };
  }

  #sensor(
    params: AlpacaParams,
    answer: (property: AlpacaProperty, mapped: Mapped) => MemberResult,
  ): MemberResult {
    const name = required(params, "SensorName");
    const property = name.toLowerCase();
    if (!isAlpacaProperty(property)) return unknownSensor(name);
    const mapped = this.#mapped.get(property);
    return mapped === undefined ? notMapped(property) : answer(property, mapped);
  }

  #sinceUpdate(params: AlpacaParams): MemberResult {
    // An empty SensorName asks for the most recent update of any sensor (ASCOM TimeSinceLastUpdate).
    if (required(params, "SensorName") === "") {
      const times = [...new Set([...this.#mapped.values()].map((m) => m.type))]
        .map((type) => this.#source.latest(type)?.ts)
        .filter((ts): ts is string => ts !== undefined)
        .map((ts) => Date.parse(ts));
      if (times.length === 0) {
        return {
          error: VALUE_NOT_SET,
          message: "no event of a type that feeds a sensor has been recorded yet",
        };
      }
      return { value: (this.#source.now() - Math.max(...times)) / 1000 };
    }
    return this.#sensor(params, (property, mapped) => {
      const latest = this.#source.latest(mapped.type);
      if (latest === undefined) {
        return {
          error: VALUE_NOT_SET,
          message:
            `no ${mapped.type} event has been recorded yet, so ${property} was never updated`,
        };
      }
      return { value: (this.#source.now() - Date.parse(latest.ts)) / 1000 };
    });
  }
}

function notMapped(property: AlpacaProperty): MemberResult {
  return {
    error: NOT_IMPLEMENTED,
    message:
      `${property} is not configured: add "alpaca": "${property}" (with its "unit") to the field that records it in the types file (--types), then restart the service`,
  };
}

function unknownSensor(name: string): MemberResult {
  return {
    error: INVALID_VALUE,
    message: `SensorName ${
      JSON.stringify(name.slice(0, 64))
    } is not an ObservingConditions sensor; use one of ${
      Object.values(ALPACA_PROPERTY_NAMES).join(", ")
    }`,
  };
}

/** A required parameter's text. */
function required(params: AlpacaParams, name: string): string {
  const text = params.get(name.toLowerCase());
  if (text === undefined) {
    throw new AlpacaRequestError(`the parameter ${name} is missing; send ${name}=<value>`);
  }
  return text;
}

/** A required boolean parameter: `true` or `false` in any letter case. */
function readBoolean(params: AlpacaParams, name: string): boolean {
  const text = required(params, name).trim().toLowerCase();
  if (text !== "true" && text !== "false") {
    throw new AlpacaRequestError(
      `${name} must be True or False, not ${
        JSON.stringify(params.get(name.toLowerCase())!.slice(0, 64))
      }`,
    );
  }
  return text === "true";
}
