/**
 * Home Assistant MQTT discovery (docs/publish.md, "Home Assistant"): one retained config per field
 * of every registered type, a `sensor` (numbers, text) or a `binary_sensor` (booleans), and one
 * `binary_sensor` with `device_class: safety` per safety verdict (on means unsafe, as Home
 * Assistant reads that class). All of a site's entities belong to one device, the site.
 *
 * @module
 */

import type { FieldInfo } from "../client/types.ts";
import { valueAt } from "../core/freshness.ts";
import { idPart, jinjaString, shortHash } from "./names.ts";
import { SITE_PROFILE, type SiteTopics } from "./topics.ts";

/** What discovery needs of a type's `GET /types` entry. */
export interface RegisteredType {
  /** Its registered fields by dotted path (docs/types.md). */
  readonly fields: Readonly<Record<string, FieldInfo>>;
}

/** What the discovery configs are made from. */
export interface DiscoveryInput {
  /** The checked `--discovery-prefix`. */
  readonly discoveryPrefix: string;
  /** The site's topics. */
  readonly topics: SiteTopics;
  /** The service's version (`GET /ready`), the device's `sw_version`. */
  readonly version: string;
  /** `GET /types`: each type's registered fields. */
  readonly types: Readonly<Record<string, RegisteredType>>;
  /** The latest event's `data` of a type, when one was seen: it decides an unhinted field's kind. */
  readonly data: (type: string) => Readonly<Record<string, unknown>> | undefined;
  /** The safety profiles, `site` first. */
  readonly profiles: readonly string[];
}

/**
 * Home Assistant's device class and spelling of a unit, by the unit as a types file may write it
 * (lower case, no spaces): temperatures, `%` (humidity), pressures, wind speeds, volts, amperes.
 */
const UNIT_CLASSES: Readonly<Record<string, readonly [string, string]>> = {
  "degc": ["temperature", "°C"],
  "°c": ["temperature", "°C"],
  "celsius": ["temperature", "°C"],
  "degf": ["temperature", "°F"],
  "°f": ["temperature", "°F"],
  "fahrenheit": ["temperature", "°F"],
  "k": ["temperature", "K"],
  "kelvin": ["temperature", "K"],
  "%": ["humidity", "%"],
  "hpa": ["pressure", "hPa"],
  "mbar": ["pressure", "mbar"],
  "pa": ["pressure", "Pa"],
  "kpa": ["pressure", "kPa"],
  "inhg": ["pressure", "inHg"],
  "mmhg": ["pressure", "mmHg"],
  "m/s": ["wind_speed", "m/s"],
  "km/h": ["wind_speed", "km/h"],
  "mph": ["wind_speed", "mph"],
  "kn": ["wind_speed", "kn"],
  "v": ["voltage", "V"],
  "mv": ["voltage", "mV"],
  "a": ["current", "A"],
  "ma": ["current", "mA"],
};

/**
 * The device class a unit implies and the unit as Home Assistant spells it for that class
 * (`degC` is `°C`), or `undefined` when the unit implies none.
 *
 * @param unit The registered unit.
 * @returns `[device_class, unit_of_measurement]`, or `undefined`.
 *
 * @example Usage
 * ```ts
 * import { unitClass } from "./discovery.ts";
 * import assert from "node:assert/strict";
 *
 * assert.deepEqual(unitClass("degC"), ["temperature", "°C"]);
 * assert.deepEqual(unitClass("m/s"), ["wind_speed", "m/s"]);
 * assert.equal(unitClass("GB"), undefined);
 * ```
 */
export function unitClass(unit: string): readonly [string, string] | undefined {
  return UNIT_CLASSES[unit.toLowerCase().replace(/\s+/g, "")];
}

/**
 * Whether a field is a `binary_sensor`: its `warn_if` or `alarm_if` is a boolean, or, without a
 * unit or a limit to say it is a number, its latest value is a boolean.
 */
function isBinary(spec: FieldInfo, value: unknown): boolean {
  const equals = spec.alarm_if !== undefined ? spec.alarm_if : spec.warn_if;
  if (typeof equals === "boolean") return true;
  const numeric = spec.unit !== undefined || spec.warn_above !== undefined ||
    spec.warn_below !== undefined || spec.alarm_above !== undefined ||
    spec.alarm_below !== undefined;
  if (numeric || equals !== undefined) return false;
  return typeof value === "boolean";
}

/**
 * Jinja statements that leave a field's value in `ns.v`, read from the envelope as the service
 * reads it (docs/types.md): the key as written first, else the dotted path through nested
 * objects; `none` when absent.
 */
function valueStatements(path: string): string {
  const key = jinjaString(path);
  const parts = path.split(".").map(jinjaString).join(", ");
  return `{% set d = value_json.data %}{% set ns = namespace(v=none) %}` +
    `{% if ${key} in d %}{% set ns.v = d[${key}] %}{% else %}{% set ns.v = d %}` +
    `{% for k in [${parts}] %}{% set ns.v = ns.v[k] if ns.v is mapping and k in ns.v else none %}{% endfor %}` +
    `{% endif %}`;
}

/** ON, OFF, or None (Home Assistant's "unknown") for a value that is not a boolean. */
const BINARY = "{{ 'ON' if v is sameas true else ('OFF' if v is sameas false else 'None') }}";

/**
 * The `value_template` of a field: its value for a `sensor`, ON or OFF for a `binary_sensor`,
 * `None` (unknown to Home Assistant) when the latest event does not hold it.
 *
 * @param path The registered field (a dotted path).
 * @param binary Whether the entity is a `binary_sensor`.
 * @returns The template.
 *
 * @example Usage
 * ```ts
 * import { valueTemplate } from "./discovery.ts";
 * import assert from "node:assert/strict";
 *
 * assert.equal(valueTemplate("wind_mps", false), "{{ value_json.data.get('wind_mps') }}");
 * ```
 */
export function valueTemplate(path: string, binary: boolean): string {
  if (!path.includes(".")) {
    const value = `value_json.data.get(${jinjaString(path)})`;
    return binary ? `{% set v = ${value} %}${BINARY}` : `{{ ${value} }}`;
  }
  return valueStatements(path) + (binary ? `{% set v = ns.v %}${BINARY}` : "{{ ns.v }}");
}

/** One field's config before its unique id is settled. */
interface FieldEntity {
  type: string;
  field: string;
  spec: FieldInfo;
  binary: boolean;
  id: string;
}

/**
 * The unique ids of the fields: `<site_id>_<type>_<field>`, each name as {@linkcode idPart} gives
 * it; ids that still coincide (`a_b` + `c` and `a` + `b_c`) each get `_` and 8 hexadecimal
 * digits of the SHA-256 of their type and field.
 */
function settleIds(entities: FieldEntity[]): void {
  const count = new Map<string, number>();
  for (const e of entities) count.set(e.id, (count.get(e.id) ?? 0) + 1);
  for (const e of entities) {
    if (count.get(e.id)! > 1) e.id = `${e.id}_${shortHash(`${e.type}\u0000${e.field}`)}`;
  }
}

/**
 * Every discovery config of a site: topic -> JSON payload, retained by the publisher. A field's
 * config topic is `<discovery>/sensor/<unique_id>/config` (or `binary_sensor`); a verdict's
 * `<discovery>/binary_sensor/<site_id>/safety/config` (`safety_<profile>` for another profile),
 * whose unique id `<site_id>-safety[-<profile>]` no field's can equal.
 *
 * @param input The site, its registered types and the latest data, the profiles.
 * @returns The configs by topic.
 *
 * @example Usage
 * ```ts
 * import { discoveryConfigs } from "./discovery.ts";
 * import { SiteTopics } from "./topics.ts";
 * import assert from "node:assert/strict";
 *
 * const site = "0b6f9c1e-7a54-4d0e-9a51-3f1c8f1b2d3a";
 * const configs = discoveryConfigs({
 *   discoveryPrefix: "homeassistant",
 *   topics: new SiteTopics("obs", site),
 *   version: "0.7.0",
 *   types: { weather: { fields: { temp: { label: "Temperature", unit: "degC" } } } },
 *   data: () => undefined,
 *   profiles: ["site"],
 * });
 * const temp = JSON.parse(configs.get(`homeassistant/sensor/${site}_weather_temp/config`)!);
 * assert.equal(temp.device_class, "temperature");
 * assert.equal(temp.unit_of_measurement, "°C");
 * assert.ok(configs.has(`homeassistant/binary_sensor/${site}/safety/config`));
 * ```
 */
export function discoveryConfigs(input: DiscoveryInput): Map<string, string> {
  const { discoveryPrefix, topics, version, types } = input;
  const siteId = topics.siteId;
  const device = {
    identifiers: [siteId],
    name: `obs-utils telemetry ${siteId.slice(0, 8)}`,
    manufacturer: "obs-utils",
    sw_version: version,
  };
  const entities: FieldEntity[] = [];
  for (const [type, info] of Object.entries(types)) {
    const data = input.data(type);
    for (const [field, spec] of Object.entries(info.fields)) {
      const binary = isBinary(spec, data === undefined ? undefined : valueAt(data, field));
      entities.push({
        type,
        field,
        spec,
        binary,
        id: `${siteId}_${idPart(type)}_${idPart(field)}`,
      });
    }
  }
  settleIds(entities);
  const configs = new Map<string, string>();
  for (const { type, field, spec, binary, id } of entities) {
    const unit = spec.unit === undefined ? undefined : unitClass(spec.unit);
    const config = {
      name: spec.label ?? field,
      unique_id: id,
      state_topic: topics.state(type),
      value_template: valueTemplate(field, binary),
      ...(spec.unit !== undefined && !binary
        ? { unit_of_measurement: unit?.[1] ?? spec.unit }
        : {}),
      ...(unit !== undefined && !binary ? { device_class: unit[0] } : {}),
      availability: [{ topic: topics.status }, { topic: topics.availability(type) }],
      availability_mode: "all",
      device,
    };
    const component = binary ? "binary_sensor" : "sensor";
    configs.set(`${discoveryPrefix}/${component}/${id}/config`, JSON.stringify(config));
  }
  for (const profile of input.profiles) {
    const site = profile === SITE_PROFILE;
    const config = {
      name: site ? "Safety" : `Safety ${profile}`,
      unique_id: site ? `${siteId}-safety` : `${siteId}-safety-${profile}`,
      state_topic: topics.safety(profile),
      // Unsafe (on) unless the verdict says safe: a payload it cannot read fails closed.
      value_template: "{{ 'OFF' if value_json.safe is sameas true else 'ON' }}",
      device_class: "safety",
      availability: [{ topic: topics.status }],
      availability_mode: "all",
      device,
    };
    const object = site ? "safety" : `safety_${profile}`;
    configs.set(
      `${discoveryPrefix}/binary_sensor/${siteId}/${object}/config`,
      JSON.stringify(config),
    );
  }
  return configs;
}
