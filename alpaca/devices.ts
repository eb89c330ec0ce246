/**
 * The ASCOM Alpaca devices of the service (docs/safety.md, "ASCOM Alpaca (N.I.N.A.)"): one
 * `safetymonitor` per safety profile (`safetymonitor/0` is the site's verdict, the other profiles
 * follow in name order), whose `issafe` is its profile's verdict and whose actions, when the
 * source has them, are the safety hub's (`SafetyEvents`, `SetExternalEvents`,
 * `ClearExternalEvents`), and `observingconditions/0`, whose properties are the registered fields
 * that carry an `"alpaca"` key in the types file, converted into Alpaca's units. Each member
 * answers a value or an ASCOM error number; a request the device cannot understand throws
 * {@linkcode AlpacaRequestError} (HTTP 400).
 *
 * Each device has a connected state of its own, kept here and shared by every client, as an ASCOM
 * device's is: connected at start-up, so a client that never connects keeps working; while
 * disconnected only the members that describe the device answer, the others NotConnected.
 *
 * @module
 */

import { SITE_PROFILE, type TypesRegistry } from "../core/types_registry.ts";
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
 * (`NOT_IMPLEMENTED`), a value given is not valid (`INVALID_VALUE`), the device is disconnected
 * (`NOT_CONNECTED`), the value is not ready yet, no event having been recorded
 * (`INVALID_OPERATION`), the action name is not one the device supports
 * (`ACTION_NOT_IMPLEMENTED`).
 *
 * @example Usage
 * ```ts
 * import {
 *   ACTION_NOT_IMPLEMENTED,
 *   INVALID_OPERATION,
 *   INVALID_VALUE,
 *   NOT_CONNECTED,
 *   NOT_IMPLEMENTED,
 * } from "./devices.ts";
 * import assert from "node:assert/strict";
 *
 * assert.deepEqual(
 *   [NOT_IMPLEMENTED, INVALID_VALUE, NOT_CONNECTED, INVALID_OPERATION, ACTION_NOT_IMPLEMENTED],
 *   [1024, 1025, 1031, 1035, 1036],
 * );
 * ```
 */
export const NOT_IMPLEMENTED = 0x400;
/** ASCOM error number: a value given is not valid (see {@linkcode NOT_IMPLEMENTED}). */
export const INVALID_VALUE = 0x401;
/** ASCOM error number: the device is disconnected (see {@linkcode NOT_IMPLEMENTED}). */
export const NOT_CONNECTED = 0x407;
/** ASCOM error number: not possible now, here "not ready" (see {@linkcode NOT_IMPLEMENTED}). */
export const INVALID_OPERATION = 0x40b;
/** ASCOM error number: the device has no action of that name (see {@linkcode NOT_IMPLEMENTED}). */
export const ACTION_NOT_IMPLEMENTED = 0x40c;

/**
 * The devices the service serves, as they appear in URLs.
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

/** One device served: its type and its device number, as in `/api/v1/{type}/{number}/...`. */
export interface AlpacaDeviceRef {
  /** The device type, lower case as in URLs. */
  readonly type: AlpacaDevice;
  /** The device number. */
  readonly number: number;
  /**
   * A safety monitor's profile (docs/safety.md#profiles): `site` for `safetymonitor/0`, a
   * `critical_for` name for the others; absent for other device types.
   */
  readonly profile?: string;
}

/** What a member answers: a value (absent for a method), or an ASCOM error. */
export type MemberResult =
  | { readonly value?: unknown }
  | { readonly error: number; readonly message: string; readonly value?: unknown };

/** One call of a device-specific action (`PUT action`), for {@linkcode AlpacaActions}. */
export interface ActionCall {
  /** The device called. */
  readonly device: AlpacaDeviceRef;
  /** The action's name as {@linkcode AlpacaActions.names} spells it. */
  readonly name: string;
  /** The `Parameters` form field (or `ActionParameters`), as sent. */
  readonly parameters: string;
  /** The request's `ClientID`, when it carried one. */
  readonly clientId: number | undefined;
  /**
   * The peer's address as the listener saw it (behind the connection guard, the real peer the
   * guard accepted; never a header the client sent), `unknown` when it cannot be told.
   */
  readonly peer: string;
}

/**
 * Device-specific actions a `safetymonitor` serves through `PUT action` and lists in
 * `supportedactions` (docs/safety.md). Without them, `supportedactions` is `[]` and `action`
 * answers NotImplemented.
 */
export interface AlpacaActions {
  /** The action names, in the order `supportedactions` lists them. */
  readonly names: readonly string[];
  /**
   * Runs one action; the device has checked the name (any letter case) and the connection.
   *
   * @param call The device, the action and its parameters.
   * @returns The action's `Value` (a string), or an ASCOM error such as InvalidValue.
   */
  run(call: ActionCall): MemberResult | Promise<MemberResult>;
}

/** Where the devices read the service's state. */
export interface AlpacaSource {
  /**
   * The safety profiles, one `safetymonitor` each, numbered in this order: `site` first, then
   * the others by name (docs/safety.md#profiles). Default: `["site"]`.
   */
  readonly profiles?: readonly string[];
  /**
   * A profile's safety verdict's `safe` (docs/safety.md).
   *
   * @param profile The profile of the safety monitor asked (`site` for `safetymonitor/0`).
   * @returns True when the profile is safe.
   */
  isSafe(profile: string): boolean;
  /** The latest event of a type, or `undefined` when none was recorded. */
  latest(type: string): LatestEvent | undefined;
  /** The service clock, in ms since the epoch. */
  now(): number;
  /** The safety monitors' device-specific actions, if any. */
  actions?: AlpacaActions;
}

/**
 * A request the device cannot understand: answered HTTP 400 with a plain-text message.
 *
 * @example Usage
 * ```ts
 * import { AlpacaDevices, AlpacaParams, AlpacaRequestError } from "./devices.ts";
 * import assert from "node:assert/strict";
 *
 * const devices = new AlpacaDevices(new Map(), { isSafe: () => true, latest: () => undefined, now: Date.now });
 * const device = devices.find("safetymonitor", "0")!;
 * await assert.rejects(
 *   devices.call({ device, method: "GET", member: "nothing", params: AlpacaParams.query(new URLSearchParams()) }),
 *   AlpacaRequestError,
 * );
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

/**
 * A request's parameters. The names of a GET's query parameters are case-insensitive; the names
 * of a PUT's form fields are case-sensitive, as the Alpaca reference makes them
 * (docs/safety.md): a form field with other casing is not that parameter.
 *
 * @example Usage
 * ```ts
 * import { AlpacaParams } from "./devices.ts";
 * import assert from "node:assert/strict";
 *
 * assert.equal(AlpacaParams.query(new URLSearchParams("sensorname=Pressure")).get("SensorName"), "Pressure");
 * const form = AlpacaParams.form(new URLSearchParams("aVERAGEpERIOD=0"));
 * assert.equal(form.get("AveragePeriod"), undefined);
 * assert.equal(form.otherCasing("AveragePeriod"), "aVERAGEpERIOD");
 * ```
 */
export class AlpacaParams {
  #entries: (readonly [string, string])[] = [];
  #caseSensitive: boolean;

  private constructor(entries: Iterable<readonly [string, string]>, caseSensitive: boolean) {
    this.#caseSensitive = caseSensitive;
    for (const entry of entries) this.#entries.push(entry);
  }

  /**
   * The parameters of a GET's query string: names case-insensitive.
   *
   * @param search The query.
   * @returns The parameters.
   */
  static query(search: URLSearchParams): AlpacaParams {
    return new AlpacaParams(search, false);
  }

  /**
   * The fields of a PUT's form body: names case-sensitive.
   *
   * @param search The decoded form.
   * @returns The parameters.
   */
  static form(search: URLSearchParams): AlpacaParams {
    return new AlpacaParams(search, true);
  }

  /**
   * The value of the first parameter of that name.
   *
   * @param name The name as the Alpaca reference spells it (`ClientTransactionID`).
   * @returns The value, or `undefined` when the request has none of that name.
   */
  get(name: string): string | undefined {
    const key = name.toLowerCase();
    const found = this.#caseSensitive
      ? this.#entries.find(([n]) => n === name)
      : this.#entries.find(([n]) => n.toLowerCase() === key);
    return found?.[1];
  }

  /**
   * For a form: the name sent with other casing when the exact name is absent, so that the
   * answer can say which casing to use.
   *
   * @param name The name as the Alpaca reference spells it.
   * @returns The name as sent, or `undefined`.
   */
  otherCasing(name: string): string | undefined {
    if (!this.#caseSensitive || this.get(name) !== undefined) return undefined;
    const key = name.toLowerCase();
    return this.#entries.find(([n]) => n.toLowerCase() === key)?.[0];
  }
}

/** One call of a member. */
export interface MemberRequest {
  /** The device, as {@linkcode AlpacaDevices.find} found it. */
  readonly device: AlpacaDeviceRef;
  /** `GET` or `PUT`. */
  readonly method: string;
  /** The member, lower case, as in the URL. */
  readonly member: string;
  /** The request's parameters. */
  readonly params: AlpacaParams;
  /** The request's `ClientID`, when it carried one (handed to actions). */
  readonly clientId?: number;
  /** The peer's address (handed to actions): `unknown` when left out. */
  readonly peer?: string;
}

/** One field feeding an ObservingConditions property. */
interface Mapped {
  readonly type: string;
  readonly path: string;
  readonly unit: string;
  readonly label: string | undefined;
  readonly description: string | undefined;
  readonly convert: (value: number) => number;
}

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

/**
 * The `name` of a device: {@linkcode DEVICE_NAMES}, with the profile in brackets for a safety
 * monitor other than `site`'s (`obs-utils telemetry safety (north)`).
 *
 * @param device The device.
 * @returns Its name, as `name` and the management API's `DeviceName` give it.
 *
 * @example Usage
 * ```ts
 * import { deviceName } from "./devices.ts";
 * import assert from "node:assert/strict";
 *
 * assert.equal(deviceName({ type: "safetymonitor", number: 0, profile: "site" }), "obs-utils telemetry safety");
 * assert.equal(deviceName({ type: "safetymonitor", number: 1, profile: "north" }), "obs-utils telemetry safety (north)");
 * ```
 */
export function deviceName(device: AlpacaDeviceRef): string {
  const profile = namedProfile(device);
  return profile === undefined
    ? DEVICE_NAMES[device.type]
    : `${DEVICE_NAMES[device.type]} (${profile})`;
}

/** A safety monitor's profile other than `site`, else undefined. */
function namedProfile(device: AlpacaDeviceRef): string | undefined {
  return device.profile === undefined || device.profile === SITE_PROFILE
    ? undefined
    : device.profile;
}

function description(device: AlpacaDeviceRef): string {
  if (device.type === "observingconditions") {
    return "Weather values recorded by the obs-utils telemetry service, from the types-file fields that carry an alpaca key";
  }
  const profile = namedProfile(device);
  return profile === undefined
    ? "The safety verdict of the obs-utils telemetry service: safe only while every critical type of the types file is fresh, out of alarm and not clearing, and no external event holds the site"
    : `The safety verdict of the profile ${profile} of the obs-utils telemetry service: safe only while every type critical for ${profile} (critical_for in the types file) is fresh, out of alarm and not clearing, and no external event holds it`;
}

const INTERFACE_VERSIONS: Readonly<Record<AlpacaDevice, number>> = {
  safetymonitor: 3,
  observingconditions: 2,
};

/**
 * What a GET member answers as `Value` with an error, the type's default, as ASCOM's own
 * devices do: every GET answer carries `Value` (docs/safety.md). Members not named answer 0.
 */
const ERROR_VALUES: Readonly<Record<string, unknown>> = {
  connected: false,
  connecting: false,
  issafe: false,
  description: "",
  driverinfo: "",
  driverversion: "",
  name: "",
  sensordescription: "",
  devicestate: [],
  supportedactions: [],
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
const MEMBERS: Readonly<Record<AlpacaDevice, { GET: string[]; PUT: string[] }>> = {
  safetymonitor: { GET: [...COMMON_GET, "issafe"], PUT: COMMON_PUT },
  observingconditions: {
    GET: [
      ...COMMON_GET,
      ...ALPACA_PROPERTIES,
      "averageperiod",
      "sensordescription",
      "timesincelastupdate",
    ],
    PUT: [...COMMON_PUT, "averageperiod", "refresh"],
  },
};

/**
 * The members that answer while a device is disconnected: those that connect it and those that
 * describe it. `disconnect` is among them so that disconnecting twice is harmless.
 */
const WHILE_DISCONNECTED = new Set([
  "connected",
  "connecting",
  "connect",
  "disconnect",
  "description",
  "driverinfo",
  "driverversion",
  "interfaceversion",
  "name",
  "supportedactions",
]);

const DEVICE_NUMBER = /^(?:0|[1-9]\d{0,8})$/;

/**
 * The members of the devices over one types registry and one source, with each device's
 * connected state.
 *
 * @example Usage
 * ```ts
 * import { AlpacaDevices, AlpacaParams } from "./devices.ts";
 * import assert from "node:assert/strict";
 *
 * const devices = new AlpacaDevices(new Map(), {
 *   isSafe: () => true,
 *   latest: () => undefined,
 *   now: Date.now,
 * });
 * const device = devices.find("safetymonitor", "0")!;
 * const params = AlpacaParams.query(new URLSearchParams());
 * assert.deepEqual(await devices.call({ device, method: "GET", member: "issafe", params }), { value: true });
 * ```
 */
export class AlpacaDevices {
  #source: AlpacaSource;
  #mapped = new Map<AlpacaProperty, Mapped>();
  #devices: readonly AlpacaDeviceRef[];
  /** Connected or not, by device (`type/number`); every device starts connected. */
  #connected = new Map<string, boolean>();

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
    const profiles = source.profiles ?? [SITE_PROFILE];
    this.#devices = [
      ...profiles.map((profile, number) => ({ type: "safetymonitor" as const, number, profile })),
      { type: "observingconditions", number: 0 },
    ];
    for (const device of this.#devices) this.#connected.set(key(device), true);
  }

  /** Every device served, in the order of the management API's `configureddevices`. */
  get devices(): readonly AlpacaDeviceRef[] {
    return this.#devices;
  }

  /** The mapped properties, for the setup page: property to `type`, field and units. */
  get mappings(): ReadonlyMap<AlpacaProperty, Readonly<Omit<Mapped, "convert">>> {
    return this.#mapped;
  }

  /**
   * The device a URL names.
   *
   * @param type The device type as in the URL (lower case).
   * @param number The device number as in the URL.
   * @returns The device, or `undefined` when none is served by that type and number.
   */
  find(type: string, number: string): AlpacaDeviceRef | undefined {
    if (!DEVICE_NUMBER.test(number)) return undefined;
    const n = Number(number);
    return this.#devices.find((device) => device.type === type && device.number === n);
  }

  /**
   * Answers one member of one device. The answer of a GET carries a `value` even with an error:
   * the default of the member's type.
   *
   * @param request The device, the method, the member and the parameters.
   * @returns The value, or an ASCOM error.
   * @throws {AlpacaRequestError} For an unknown member, a method the member does not take, or
   *   a missing or malformed required parameter.
   */
  async call(request: MemberRequest): Promise<MemberResult> {
    const { device, method, member } = request;
    const members = MEMBERS[device.type];
    if (!(method === "GET" ? members.GET : members.PUT).includes(member)) {
      throw unknownMember(device, method, member);
    }
    const result = await this.#answer(request);
    if (method === "GET" && "error" in result) {
      return { ...result, value: ERROR_VALUES[member] ?? 0 };
    }
    return result;
  }

  #answer(request: MemberRequest): MemberResult | Promise<MemberResult> {
    const { device, method, member, params } = request;
    if (!this.#connected.get(key(device)) && !WHILE_DISCONNECTED.has(member)) {
      return {
        error: NOT_CONNECTED,
        message: `${
          key(device)
        } is disconnected (a client sent disconnect, or connected with Connected=False); PUT connect, or connected with Connected=True, to connect it again`,
      };
    }
    if (method === "PUT") {
      switch (member) {
        case "connected":
          this.#connected.set(key(device), readBoolean(params, "Connected"));
          return {};
        case "connect":
          this.#connected.set(key(device), true);
          return {};
        case "disconnect":
          this.#connected.set(key(device), false);
          return {};
        case "action":
          return this.#action(request);
        case "commandblind":
        case "commandbool":
        case "commandstring":
          return {
            error: NOT_IMPLEMENTED,
            message:
              `${member} is not implemented: the ${device.type} takes no device-specific commands`,
          };
      }
      return this.#conditionsPut(member, params);
    }
    switch (member) {
      case "connected":
        return { value: this.#connected.get(key(device)) };
      case "connecting":
        // Connecting and disconnecting complete at once.
        return { value: false };
      case "description":
        return { value: description(device) };
      case "driverinfo":
        return {
          value: `obs-utils telemetry ${VERSION}: ASCOM Alpaca ${
            DEVICE_TYPE_NAMES[device.type]
          } served by the telemetry service (${
            this.#actions(device) === undefined
              ? "read-only"
              : "read-only but for the external events of its actions"
          })`,
        };
      case "driverversion":
        return { value: VERSION };
      case "interfaceversion":
        return { value: INTERFACE_VERSIONS[device.type] };
      case "name":
        return { value: deviceName(device) };
      case "supportedactions":
        return { value: [...(this.#actions(device)?.names ?? [])] };
      case "devicestate":
        return { value: this.#deviceState(device) };
      case "issafe":
        return { value: this.#isSafe(device) };
    }
    return this.#conditionsGet(member, params);
  }

  #isSafe(device: AlpacaDeviceRef): boolean {
    return this.#source.isSafe(device.profile ?? SITE_PROFILE);
  }

  /** The actions of a device: the source's for a safety monitor, none for the others. */
  #actions(device: AlpacaDeviceRef): AlpacaActions | undefined {
    return device.type === "safetymonitor" ? this.#source.actions : undefined;
  }

  async #action(request: MemberRequest): Promise<MemberResult> {
    const { device, params } = request;
    // The Alpaca reference's names; ActionName and ActionParameters when those are absent
    // (docs/safety.md, "Actions: the safety hub over Alpaca").
    const name = requiredEither(params, "Action", "ActionName");
    const parameters = requiredEither(params, "Parameters", "ActionParameters");
    const actions = this.#actions(device);
    if (actions === undefined) {
      return {
        error: NOT_IMPLEMENTED,
        message:
          `action is not implemented: the ${device.type} has no device-specific actions (supportedactions is [])`,
      };
    }
    // Action names compare in any letter case, as ASCOM clients compare SupportedActions.
    const known = actions.names.find((n) => n.toLowerCase() === name.toLowerCase());
    if (known === undefined) {
      return {
        error: ACTION_NOT_IMPLEMENTED,
        message: `${key(device)} has no action ${JSON.stringify(name.slice(0, 64))}; it has ${
          actions.names.join(", ")
        } (see supportedactions)`,
      };
    }
    return await actions.run({
      device,
      name: known,
      parameters,
      clientId: request.clientId,
      peer: request.peer ?? "unknown",
    });
  }

  #deviceState(device: AlpacaDeviceRef): { Name: string; Value: unknown }[] {
    if (device.type === "safetymonitor") {
      return [{ Name: "IsSafe", Value: this.#isSafe(device) }];
    }
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

  #conditionsPut(member: string, params: AlpacaParams): MemberResult {
    if (member === "refresh") return {};
    // averageperiod
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

  #conditionsGet(member: string, params: AlpacaParams): MemberResult {
    if (isAlpacaProperty(member)) return this.#property(member);
    if (member === "averageperiod") return { value: 0.0 };
    if (member === "sensordescription") {
      return this.#sensor(params, (property, mapped) => ({
        value: mapped.label ?? mapped.description ??
          `${mapped.type} ${mapped.path} (${mapped.unit}), ${alpacaUnit(property)} in Alpaca`,
      }));
    }
    return this.#sinceUpdate(params);
  }

  /** A property's value; the wind has no direction while its speed is 0 (ASCOM's rule). */
  #property(property: AlpacaProperty): MemberResult {
    const answer = this.#reading(property);
    if (property === "winddirection" && "value" in answer) {
      const speed = this.#reading("windspeed");
      if ("value" in speed && speed.value === 0) return { value: 0 };
    }
    return answer;
  }

  #reading(property: AlpacaProperty): MemberResult {
    const mapped = this.#mapped.get(property);
    if (mapped === undefined) return notMapped(property);
    const latest = this.#source.latest(mapped.type);
    if (latest === undefined) {
      return notReady(`no ${mapped.type} event has been recorded yet, so ${property} has no value`);
    }
    const raw = numericValue(valueAt(latest.data, mapped.path), mapped.unit);
    if (raw === undefined) {
      return notReady(
        `the latest ${mapped.type} event (${latest.ts}) has no number at ${mapped.path}, so ${property} has no value`,
      );
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

  /** Seconds since a type's latest event by its `ts`, -1 when it has none (never below 0 else). */
  #age(type: string): number {
    const ts = this.#source.latest(type)?.ts;
    if (ts === undefined) return -1;
    return Math.max(0, (this.#source.now() - Date.parse(ts)) / 1000);
  }

  #sinceUpdate(params: AlpacaParams): MemberResult {
    // An empty SensorName asks for the most recent update of any sensor (ASCOM
    // TimeSinceLastUpdate): the youngest age among the mapped types, -1 when none has an event.
    if (required(params, "SensorName") === "") {
      const ages = [...new Set([...this.#mapped.values()].map((m) => m.type))]
        .map((type) => this.#age(type))
        .filter((age) => age >= 0);
      return { value: ages.length === 0 ? -1 : Math.min(...ages) };
    }
    return this.#sensor(params, (_, mapped) => ({ value: this.#age(mapped.type) }));
  }
}

function key(device: AlpacaDeviceRef): string {
  return `${device.type}/${device.number}`;
}

function unknownMember(device: AlpacaDeviceRef, method: string, member: string): Error {
  const known = MEMBERS[device.type];
  const other = method === "GET" ? "PUT" : "GET";
  if ((other === "GET" ? known.GET : known.PUT).includes(member)) {
    return new AlpacaRequestError(`${device.type} ${member} takes ${other}, not ${method}`);
  }
  return new AlpacaRequestError(
    `${device.type} has no member ${JSON.stringify(member.slice(0, 64))}; it answers GET ${
      known.GET.join(", ")
    } and PUT ${known.PUT.join(", ")}`,
  );
}

function notMapped(property: AlpacaProperty): MemberResult {
  return {
    error: NOT_IMPLEMENTED,
    message:
      `${property} is not configured: add "alpaca": "${property}" (with its "unit") to the field that records it in the types file (--types), then restart the service`,
  };
}

/** A mapped property without a value yet: InvalidOperation, which ASCOM reads as "not ready". */
function notReady(why: string): MemberResult {
  return { error: INVALID_OPERATION, message: `not ready: ${why}` };
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

/** A required parameter's text; a form field with other casing is named in the refusal. */
function required(params: AlpacaParams, name: string): string {
  const text = params.get(name);
  if (text !== undefined) return text;
  const sent = params.otherCasing(name);
  if (sent !== undefined) {
    throw new AlpacaRequestError(
      `the parameter ${name} is missing: ${
        JSON.stringify(sent.slice(0, 64))
      } was sent, but PUT form parameter names are case-sensitive; send ${name}=<value> with exactly this casing`,
    );
  }
  throw new AlpacaRequestError(`the parameter ${name} is missing; send ${name}=<value>`);
}

/**
 * A required parameter sent under the Alpaca reference's name (`standard`) or, when that is
 * absent, under another accepted name (`alternative`, with its exact casing too).
 */
function requiredEither(params: AlpacaParams, standard: string, alternative: string): string {
  const text = params.get(standard) ?? params.get(alternative);
  if (text !== undefined) return text;
  // Sent with other casing: the refusal names the casing to use.
  if (params.otherCasing(standard) !== undefined) return required(params, standard);
  if (params.otherCasing(alternative) !== undefined) return required(params, alternative);
  throw new AlpacaRequestError(
    `the parameter ${standard} is missing; send ${standard}=<value> (${alternative}=<value> is accepted too)`,
  );
}

/** A required boolean parameter: `true` or `false` in any letter case. */
function readBoolean(params: AlpacaParams, name: string): boolean {
  const sent = required(params, name);
  const text = sent.trim().toLowerCase();
  if (text !== "true" && text !== "false") {
    throw new AlpacaRequestError(
      `${name} must be True or False, not ${JSON.stringify(sent.slice(0, 64))}`,
    );
  }
  return text === "true";
}
