/**
 * The safety hub's records (docs/safety.md#safety-events): the SafetyEvent objects of ASCOM's
 * draft ISafetyMonitorV4 (`SafetyEvents`, `SetExternalEvents`, `ClearExternalEvents`), the
 * external events other programs add to hold a site shut, and the waivers that stop judging a
 * dead sensor's type for a bounded time. Parsing and checking only: no clock, no I/O.
 * `core/safety.ts` judges with them, `core/safety_watch.ts` keeps them, `store/safety_hub.ts`
 * saves them.
 *
 * @example Usage
 * ```ts
 * import { parseSafetyEvents } from "./safety_events.ts";
 * import assert from "node:assert/strict";
 *
 * const [event] = parseSafetyEvents(
 *   '[{"Source":"UPS","Name":"mains","Id":"ups-1","Type":"Power","Trigger":"Offline","Description":"on battery"}]',
 *   "2026-11-27T03:00:00.000Z",
 * );
 * assert.equal(event!.EventTimeUtc, "2026-11-27T03:00:00.000Z");
 * ```
 *
 * @module
 */

import type { AlpacaProperty } from "./units.ts";

/**
 * The names of the draft's `SafetyEventType` enumeration (docs/safety.md#safety-events), as its
 * JSON carries them. `Pressure` and `Temperature`, the names of an earlier draft, are accepted too.
 *
 * @example Usage
 * ```ts
 * import { SAFETY_EVENT_TYPES } from "./safety_events.ts";
 * import assert from "node:assert/strict";
 *
 * assert.ok(SAFETY_EVENT_TYPES.includes("CloudCover"));
 * ```
 */
export const SAFETY_EVENT_TYPES: readonly string[] = [
  "ValueNotSet",
  "CloudCover",
  "DewPoint",
  "Humidity",
  "AtmosphericPressure",
  "Pressure",
  "RainRate",
  "SkyBrightness",
  "SkyQuality",
  "SkyTemperature",
  "StarFWHM",
  "AmbientTemperature",
  "Temperature",
  "WindDirection",
  "WindGust",
  "WindSpeed",
  "Safety",
  "Security",
  "Power",
  ...numbered("Reserved", 10),
  ...numbered("LocallyDefined", 10),
];

/**
 * The names of the draft's `SafetyEventTrigger` enumeration (docs/safety.md#safety-events).
 *
 * @example Usage
 * ```ts
 * import { SAFETY_EVENT_TRIGGERS } from "./safety_events.ts";
 * import assert from "node:assert/strict";
 *
 * assert.ok(SAFETY_EVENT_TRIGGERS.includes("AboveThreshold"));
 * ```
 */
export const SAFETY_EVENT_TRIGGERS: readonly string[] = [
  "ValueNotSet",
  "BelowThreshold",
  "AtThreshold",
  "AboveThreshold",
  "Active",
  "Inactive",
  "Offline",
  "Unsafe",
  "ForcedState",
  "ErrorCondition",
  ...numbered("Reserved", 10),
  ...numbered("LocallyDefined", 10),
];

function numbered(stem: string, count: number): string[] {
  return Array.from({ length: count }, (_, i) => `${stem}${i + 1}`);
}

/** The `SafetyEventType` name of each Alpaca ObservingConditions property. */
const TYPE_OF_PROPERTY: Readonly<Record<AlpacaProperty, string>> = {
  cloudcover: "CloudCover",
  dewpoint: "DewPoint",
  humidity: "Humidity",
  pressure: "AtmosphericPressure",
  rainrate: "RainRate",
  skybrightness: "SkyBrightness",
  skyquality: "SkyQuality",
  skytemperature: "SkyTemperature",
  starfwhm: "StarFWHM",
  temperature: "AmbientTemperature",
  winddirection: "WindDirection",
  windgust: "WindGust",
  windspeed: "WindSpeed",
};

/**
 * The `SafetyEventType` of a field: its Alpaca property's, else `Safety`.
 *
 * @param property The field's `alpaca` key, if any.
 * @returns The enumeration name.
 *
 * @example Usage
 * ```ts
 * import { eventTypeOf } from "./safety_events.ts";
 * import assert from "node:assert/strict";
 *
 * assert.equal(eventTypeOf("windspeed"), "WindSpeed");
 * assert.equal(eventTypeOf(undefined), "Safety");
 * ```
 */
export function eventTypeOf(property: AlpacaProperty | undefined): string {
  return property === undefined ? "Safety" : TYPE_OF_PROPERTY[property];
}

/** One SafetyEvent of the draft ISafetyMonitorV4, as its JSON spells it. */
export interface SafetyEvent {
  /** Who raised it: a program, a device, this service. */
  readonly Source: string;
  /** The rule or condition. */
  readonly Name: string;
  /** Unique among the events of the device. */
  readonly Id: string;
  /** A `SafetyEventType` name ({@linkcode SAFETY_EVENT_TYPES}). */
  readonly Type: string;
  /** A `SafetyEventTrigger` name ({@linkcode SAFETY_EVENT_TRIGGERS}). */
  readonly Trigger: string;
  /** What is wrong, for people (at most {@linkcode MAX_DESCRIPTION} characters). */
  readonly Description: string;
  /** When the condition began (ISO 8601 UTC). */
  readonly EventTimeUtc: string;
}

/**
 * How an external event or a waiver came in: the Alpaca device, the HTTP API, the CLI, or the
 * service itself (the event that holds the site shut when its hub file is damaged).
 */
export type HubVia = "alpaca" | "http" | "cli" | "service";

const VIAS: readonly HubVia[] = ["alpaca", "http", "cli", "service"];

/** Who changed the hub, for the audit events (docs/safety.md#audit). */
export interface HubActor {
  /** The path the change came by. */
  readonly via: HubVia;
  /** The peer's address. */
  readonly peer: string;
  /** The Alpaca `ClientID`, when it sent one. */
  readonly client_id?: number;
}

/** An external event as the service keeps it. */
export interface ExternalEvent {
  /** The event, as set. */
  readonly event: SafetyEvent;
  /**
   * The profile it holds shut, or null for every profile: set through `safetymonitor/0` or a
   * route without `?profile=` (docs/safety.md#profiles).
   */
  readonly profile: string | null;
  /**
   * The path it was set by. One set by an authenticated path (`http`, `cli`: the token rules) or
   * by the service is never replaced or cleared through the Alpaca port, which has no
   * authentication: a LAN peer cannot lift another program's hold (docs/safety.md#safety-events).
   */
  readonly via: HubVia;
}

/** A waiver: a critical type that is not judged until `until` (docs/safety.md#waivers). */
export interface Waiver {
  /** The critical type. */
  readonly type: string;
  /** When it ends (ISO 8601 UTC). */
  readonly until: string;
  /** Why, for people. */
  readonly reason: string;
  /** Who set it (the peer's address). */
  readonly peer: string;
  /**
   * The length it was given, in seconds: a restart never leaves it more than this, however the
   * wall clock was set while the service was stopped (absent: 12 hours).
   */
  readonly for_s?: number;
}

/** The external events and waivers, as saved in the site directory (docs/safety.md#safety-events). */
export interface HubState {
  /** Format version. */
  readonly version: 1;
  /** External events, in the order they were first set. */
  readonly external: readonly ExternalEvent[];
  /** Waivers, one per type. */
  readonly waivers: readonly Waiver[];
}

/**
 * At most this many external events are held at once.
 *
 * @example Usage
 * ```ts
 * import { MAX_EXTERNAL_EVENTS } from "./safety_events.ts";
 * import assert from "node:assert/strict";
 *
 * assert.equal(MAX_EXTERNAL_EVENTS, 256);
 * ```
 */
export const MAX_EXTERNAL_EVENTS = 256;
/** The longest `Description` of an external event, in characters. */
export const MAX_DESCRIPTION = 1000;
/** The longest `Source`, `Name` and `Id`, and a waiver's reason, in characters. */
export const MAX_NAME = 200;
/** The shortest waiver, in seconds. */
export const MIN_WAIVER_S = 60;
/** The longest waiver, in seconds (12 hours). */
export const MAX_WAIVER_S = 43_200;
/**
 * The `Id`s of the service's own (internal) events start with this; an external event may not
 * take one, and `ClearExternalEvents` never removes one.
 */
export const INTERNAL_ID_PREFIX = "telemetry:";
/** The `Source` of the service's own events. */
export const INTERNAL_SOURCE = "obs-utils telemetry";

/**
 * A `SetExternalEvents` or `ClearExternalEvents` parameter, or a waiver, that cannot be taken:
 * ASCOM InvalidValue (0x401) on the Alpaca port, 400 on HTTP, exit 2 in the CLI. Nothing changed.
 *
 * @example Usage
 * ```ts
 * import { parseSafetyEvents, SafetyHubInputError } from "./safety_events.ts";
 * import assert from "node:assert/strict";
 *
 * assert.throws(() => parseSafetyEvents("", "2026-11-27T03:00:00Z"), SafetyHubInputError);
 * ```
 */
export class SafetyHubInputError extends Error {
  /**
   * Creates the error.
   *
   * @param message What is wrong and what to send instead.
   */
  constructor(message: string) {
    super(message);
    this.name = "SafetyHubInputError";
  }
}

/** Unicode Cc: no place in an `Id` that is printed, logged and put in a URL path. */
// deno-lint-ignore no-control-regex
const CONTROL = /[\u0000-\u001f\u007f-\u009f]/;

const EXAMPLE_EVENT =
  '[{"Source": "UPS", "Name": "mains", "Id": "ups-mains", "Type": "Power", "Trigger": "Offline", "Description": "on battery"}]';

/**
 * Parses `SetExternalEvents`' `ActionParameters`: a JSON array of SafetyEvent objects.
 *
 * @param text The parameter (null or empty is refused).
 * @param nowIso The time given to an event without `EventTimeUtc`.
 * @returns The events, checked.
 * @throws {SafetyHubInputError} When the text is not such an array or an event is not valid.
 *
 * @example Usage
 * ```ts
 * import { parseSafetyEvents, SafetyHubInputError } from "./safety_events.ts";
 * import assert from "node:assert/strict";
 *
 * assert.throws(() => parseSafetyEvents('[{"Source": "x"}]', "2026-11-27T03:00:00Z"), SafetyHubInputError);
 * ```
 */
export function parseSafetyEvents(text: string | null | undefined, nowIso: string): SafetyEvent[] {
  if (text === null || text === undefined || text.trim() === "") {
    throw new SafetyHubInputError(
      `SetExternalEvents needs a JSON array of SafetyEvent objects, such as ${EXAMPLE_EVENT}; the parameter was empty`,
    );
  }
  return checkSafetyEvents(parseJson(text, "a JSON array of SafetyEvent objects"), nowIso);
}

/**
 * Checks a parsed JSON array of SafetyEvent objects (`PUT /safety/events`).
 *
 * @param value The parsed body.
 * @param nowIso The time given to an event without `EventTimeUtc`.
 * @returns The events, with only the draft's seven keys.
 * @throws {SafetyHubInputError} When an event is not valid, an `Id` comes twice or is reserved.
 *
 * @example Usage
 * ```ts
 * import { checkSafetyEvents } from "./safety_events.ts";
 * import assert from "node:assert/strict";
 *
 * const events = checkSafetyEvents(
 *   [{ Source: "dome", Name: "rain", Id: "dome-rain", Type: "RainRate", Trigger: "Active", Description: "wet" }],
 *   "2026-11-27T03:00:00.000Z",
 * );
 * assert.equal(events[0]!.Id, "dome-rain");
 * ```
 */
export function checkSafetyEvents(value: unknown, nowIso: string): SafetyEvent[] {
  if (!Array.isArray(value) || value.length === 0) {
    throw new SafetyHubInputError(
      `expected a non-empty JSON array of SafetyEvent objects, such as ${EXAMPLE_EVENT}`,
    );
  }
  if (value.length > MAX_EXTERNAL_EVENTS) {
    throw new SafetyHubInputError(
      `${value.length} events is more than the ${MAX_EXTERNAL_EVENTS} external events a site holds`,
    );
  }
  const seen = new Set<string>();
  return value.map((raw, i) => {
    const event = checkSafetyEvent(raw, i, nowIso);
    if (seen.has(event.Id)) {
      throw new SafetyHubInputError(`event ${i}: the Id ${JSON.stringify(event.Id)} comes twice`);
    }
    seen.add(event.Id);
    return event;
  });
}

function checkSafetyEvent(raw: unknown, i: number, nowIso: string): SafetyEvent {
  const at = `event ${i}`;
  if (typeof raw !== "object" || raw === null || Array.isArray(raw)) {
    throw new SafetyHubInputError(`${at}: expected a SafetyEvent object, such as ${EXAMPLE_EVENT}`);
  }
  const e = raw as Record<string, unknown>;
  const text = (key: string, max: number, allowEmpty: boolean): string => {
    const v = e[key];
    if (typeof v !== "string" || (!allowEmpty && v.trim() === "") || v.length > max) {
      throw new SafetyHubInputError(
        `${at}: ${key} must be a ${
          allowEmpty ? "" : "non-empty "
        }string of at most ${max} characters${v === undefined ? "; it is missing" : ""}`,
      );
    }
    return v;
  };
  const id = text("Id", MAX_NAME, false);
  if (id.startsWith(INTERNAL_ID_PREFIX) || CONTROL.test(id)) {
    throw new SafetyHubInputError(
      `${at}: the Id ${
        JSON.stringify(id)
      } is not allowed: Ids starting with "${INTERNAL_ID_PREFIX}" are the service's own, and an Id has no control characters`,
    );
  }
  const named = (key: "Type" | "Trigger", names: readonly string[]): string => {
    const v = e[key];
    if (typeof v !== "string" || !names.includes(v)) {
      throw new SafetyHubInputError(
        `${at}: ${key} must be one of the draft ISafetyMonitorV4 names (${
          names.filter((n) => !/\d$/.test(n)).join(", ")
        }, ...), not ${JSON.stringify(v ?? null)}`,
      );
    }
    return v;
  };
  let time = nowIso;
  if (e.EventTimeUtc !== undefined && e.EventTimeUtc !== null) {
    const v = e.EventTimeUtc;
    if (typeof v !== "string" || v.length > 64 || Number.isNaN(Date.parse(v))) {
      throw new SafetyHubInputError(
        `${at}: EventTimeUtc must be an ISO 8601 time such as "2026-11-27T03:00:00Z", or left out`,
      );
    }
    time = v;
  }
  return {
    Source: text("Source", MAX_NAME, true),
    Name: text("Name", MAX_NAME, true),
    Id: id,
    Type: named("Type", SAFETY_EVENT_TYPES),
    Trigger: named("Trigger", SAFETY_EVENT_TRIGGERS),
    Description: text("Description", MAX_DESCRIPTION, true),
    EventTimeUtc: time,
  };
}

/**
 * Parses `ClearExternalEvents`' `ActionParameters`: a JSON array of event `Id`s.
 *
 * @param text The parameter (null or empty is refused).
 * @returns The `Id`s, each once.
 * @throws {SafetyHubInputError} When it is not a non-empty array of strings.
 *
 * @example Usage
 * ```ts
 * import { parseEventIds } from "./safety_events.ts";
 * import assert from "node:assert/strict";
 *
 * assert.deepEqual(parseEventIds('["ups-mains"]'), ["ups-mains"]);
 * ```
 */
export function parseEventIds(text: string | null | undefined): string[] {
  const example = '["ups-mains"]';
  if (text === null || text === undefined || text.trim() === "") {
    throw new SafetyHubInputError(
      `ClearExternalEvents needs a JSON array of event Ids, such as ${example}; the parameter was empty`,
    );
  }
  const value = parseJson(text, `a JSON array of event Ids such as ${example}`);
  if (
    !Array.isArray(value) || value.length === 0 ||
    !value.every((id) => typeof id === "string" && id !== "")
  ) {
    throw new SafetyHubInputError(
      `ClearExternalEvents needs a non-empty JSON array of event Ids (strings), such as ${example}`,
    );
  }
  return [...new Set(value as string[])];
}

function parseJson(text: string, what: string): unknown {
  try {
    return JSON.parse(text);
  } catch {
    throw new SafetyHubInputError(`expected ${what}; the parameter is not JSON`);
  }
}

/**
 * Checks a waiver's length and reason (`PUT /safety/waivers`, `safety waive`).
 *
 * @param forS Seconds, {@linkcode MIN_WAIVER_S} to {@linkcode MAX_WAIVER_S}.
 * @param reason Why, 1 to {@linkcode MAX_NAME} characters.
 * @throws {SafetyHubInputError} When either is out of bounds.
 *
 * @example Usage
 * ```ts
 * import { checkWaiver, SafetyHubInputError } from "./safety_events.ts";
 * import assert from "node:assert/strict";
 *
 * assert.throws(() => checkWaiver(86_400, "dead anemometer"), SafetyHubInputError);
 * checkWaiver(7200, "dead anemometer");
 * ```
 */
export function checkWaiver(forS: unknown, reason: unknown): void {
  if (
    typeof forS !== "number" || !Number.isInteger(forS) || forS < MIN_WAIVER_S ||
    forS > MAX_WAIVER_S
  ) {
    throw new SafetyHubInputError(
      `for_s must be a whole number of seconds from ${MIN_WAIVER_S} to ${MAX_WAIVER_S} (12 hours), not ${
        JSON.stringify(forS ?? null)
      }`,
    );
  }
  if (typeof reason !== "string" || reason.trim() === "" || reason.length > MAX_NAME) {
    throw new SafetyHubInputError(
      `a waiver needs a reason of 1 to ${MAX_NAME} characters (say why the sensor is bypassed)`,
    );
  }
}

/**
 * Reads the saved hub back, or null when it is not one this version wrote (the watch then holds
 * every profile shut with an external event saying so, docs/safety.md#safety-events).
 *
 * @param value The parsed file.
 * @returns The state, or null.
 *
 * @example Usage
 * ```ts
 * import { parseHubState } from "./safety_events.ts";
 * import assert from "node:assert/strict";
 *
 * assert.deepEqual(parseHubState({ version: 1, external: [], waivers: [] }), { version: 1, external: [], waivers: [] });
 * assert.equal(parseHubState({ version: 1, external: [{}], waivers: [] }), null);
 * ```
 */
export function parseHubState(value: unknown): HubState | null {
  if (typeof value !== "object" || value === null) return null;
  const v = value as Record<string, unknown>;
  if (v.version !== 1 || !Array.isArray(v.external) || !Array.isArray(v.waivers)) return null;
  const external: ExternalEvent[] = [];
  for (const raw of v.external) {
    const x = raw as Record<string, unknown> | null;
    if (typeof x !== "object" || x === null) return null;
    if (x.profile !== null && typeof x.profile !== "string") return null;
    if (!VIAS.includes(x.via as HubVia)) return null;
    try {
      const [event] = checkSafetyEvents([x.event], "");
      external.push({ event: event!, profile: x.profile as string | null, via: x.via as HubVia });
    } catch {
      return null;
    }
  }
  const waivers: Waiver[] = [];
  for (const raw of v.waivers) {
    const w = raw as Record<string, unknown> | null;
    if (
      typeof w !== "object" || w === null || typeof w.type !== "string" ||
      typeof w.until !== "string" || Number.isNaN(Date.parse(w.until)) ||
      typeof w.reason !== "string" || typeof w.peer !== "string"
    ) return null;
    if (w.for_s !== undefined && (typeof w.for_s !== "number" || !(w.for_s > 0))) return null;
    waivers.push({
      type: w.type,
      until: w.until,
      reason: w.reason,
      peer: w.peer,
      ...(w.for_s === undefined ? {} : { for_s: w.for_s as number }),
    });
  }
  if (external.length > MAX_EXTERNAL_EVENTS) return null;
  return { version: 1, external, waivers };
}
