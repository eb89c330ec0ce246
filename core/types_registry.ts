/**
 * The types registry of `--types FILE` (docs/types.md): what the operator says about each event
 * type (description, units, labels, limits, how soon it is stale, whether it is critical).
 * Parsing is strict: a file that does not parse or holds an unknown key is refused with one line
 * naming the file, the JSON path and the fix, so a typo never silently disables an alarm.
 *
 * Parsing is runtime-neutral; only {@linkcode loadTypes} reads a file.
 *
 * @example Usage
 * ```ts
 * import { parseTypes } from "./types_registry.ts";
 * import assert from "node:assert/strict";
 *
 * const types = parseTypes('{"weather": {"stale_after_s": 180, "critical": true}}', "types.json");
 * assert.equal(types.get("weather")?.stale_after_s, 180);
 * ```
 *
 * @module
 */

import {
  acceptedUnits,
  ALPACA_PROPERTIES,
  alpacaConverter,
  type AlpacaProperty,
  alpacaUnit,
  isAlpacaProperty,
} from "./units.ts";

/** A JSON value as the registry holds it (`warn_if`, `alarm_if`). */
export type JsonValue = null | boolean | number | string | JsonValue[] | {
  [key: string]: JsonValue;
};

/** What the registry says about one field of a type's `data` (key: a dotted path). */
export interface FieldSpec {
  /** Shown in place of the field name. */
  readonly label?: string;
  /** Unit shown after the value; a `"<number> <unit>"` string in this unit counts as a number. */
  readonly unit?: string;
  /** Warn when the value is above this number. */
  readonly warn_above?: number;
  /** Warn when the value is below this number. */
  readonly warn_below?: number;
  /** Alarm when the value is above this number. */
  readonly alarm_above?: number;
  /** Alarm when the value is below this number. */
  readonly alarm_below?: number;
  /** Warn when the value equals this one. */
  readonly warn_if?: JsonValue;
  /** Alarm when the value equals this one. */
  readonly alarm_if?: JsonValue;
  /**
   * The ASCOM Alpaca ObservingConditions property this field feeds, such as `"temperature"`
   * (docs/types.md); its `unit` must convert to the property's (`core/units.ts`).
   */
  readonly alpaca?: AlpacaProperty;
}

/** What the registry says about one event type. */
export interface TypeSpec {
  /** What the type is, for people. */
  readonly description?: string;
  /** Seconds after its `ts` at which the latest event of the type is stale; absent: never. */
  readonly stale_after_s?: number;
  /** A critical type that is stale, in alarm or never seen fails `GET /check`. */
  readonly critical: boolean;
  /** Place of its card on the dashboard (ascending; absent: after those that have one). */
  readonly order?: number;
  /**
   * Seconds a critical type must stay continuously fine after it was last judged unsafe before
   * the site is safe again (docs/safety.md); absent: 0.
   */
  readonly clear_after_s?: number;
  /**
   * The safety profiles (enclosures) this type is critical for besides the site's own verdict
   * (`critical`), names of 1 to 64 letters, digits, `_` or `-` (docs/safety.md#profiles).
   */
  readonly critical_for?: readonly string[];
  /** Fields by dotted path, in the order of the file. */
  readonly fields: Readonly<Record<string, FieldSpec>>;
}

/** The registry: type name to its description, in the order of the file. */
export type TypesRegistry = ReadonlyMap<string, TypeSpec>;

/** An empty registry (no `--types`). */
export const NO_TYPES: TypesRegistry = new Map();

/** Largest types file accepted, in bytes. */
export const MAX_TYPES_FILE_BYTES = 4 * 1024 * 1024;

/**
 * A types file that cannot be used; the message is one line naming file, JSON path and fix.
 *
 * @example Usage
 * ```ts
 * import { parseTypes, TypesFileError } from "@obs-utils/telemetry/server";
 * import assert from "node:assert/strict";
 *
 * assert.throws(() => parseTypes('{"weather": {"stale_after": 180}}', "types.json"), TypesFileError);
 * ```
 */
export class TypesFileError extends Error {
  /**
   * Creates the error.
   *
   * @param message The one-line explanation.
   */
  constructor(message: string) {
    super(message);
    this.name = "TypesFileError";
  }
}

const TYPE_KEYS = [
  "description",
  "stale_after_s",
  "critical",
  "order",
  "clear_after_s",
  "critical_for",
  "fields",
];
const FIELD_KEYS = [
  "label",
  "unit",
  "warn_above",
  "warn_below",
  "alarm_above",
  "alarm_below",
  "warn_if",
  "alarm_if",
  "alpaca",
];
const LIMIT_KEYS = ["warn_above", "warn_below", "alarm_above", "alarm_below"] as const;

/** `$.weather.fields["system.free_space"]`: a JSON path readers can follow. */
function pathOf(parts: readonly string[]): string {
  return "$" +
    parts.map((p) => /^[A-Za-z_][A-Za-z0-9_]*$/.test(p) ? `.${p}` : `[${JSON.stringify(p)}]`).join(
      "",
    );
}

function isObject(value: unknown): value is Record<string, unknown> {
  return typeof value === "object" && value !== null && !Array.isArray(value);
}

function kind(value: unknown): string {
  if (value === null) return "null";
  if (Array.isArray(value)) return "an array";
  if (typeof value === "object") return "an object";
  return `${typeof value === "string" ? "the string" : "the " + typeof value} ${
    JSON.stringify(value)
  }`;
}

/** Type names follow the rules of `POST /event` (docs/http-api.md). */
function badTypeName(name: string): string | undefined {
  if (name.length === 0 || name.length > 128) return "must be 1 to 128 characters";
  // deno-lint-ignore no-control-regex
  if (/[\u0000-\u001f\u007f-\u009f]/.test(name)) return "must not hold control characters";
  if (!name.isWellFormed()) return "must be well-formed Unicode";
  return undefined;
}

function badFieldPath(path: string): string | undefined {
  if (path.length === 0 || path.length > 256) return "must be 1 to 256 characters";
  if (path.split(".").some((part) => part === "")) {
    return 'must be names joined by single dots, such as "system.free_space"';
  }
  return undefined;
}

/**
 * Parses and validates the text of a types file.
 *
 * @param text The file's text.
 * @param file The file's name, as the messages show it.
 * @returns The registry, types and fields in the file's order.
 * @throws {TypesFileError} For text that is not JSON or a value or key the registry does not
 *   know; the message names the file, the JSON path and the fix.
 *
 * @example Usage
 * ```ts
 * import { parseTypes, TypesFileError } from "./types_registry.ts";
 * import assert from "node:assert/strict";
 *
 * assert.throws(
 *   () => parseTypes('{"weather": {"stale_after": 180}}', "types.json"),
 *   (err: unknown) => err instanceof TypesFileError && /\$\.weather\.stale_after/.test(err.message),
 * );
 * ```
 */
export function parseTypes(text: string, file: string): TypesRegistry {
  const fail = (parts: readonly string[], what: string): never => {
    throw new TypesFileError(`Cannot use --types ${file}: at ${pathOf(parts)} ${what}`);
  };
  let root: unknown;
  try {
    root = JSON.parse(text);
  } catch (err) {
    const why = (err instanceof Error ? err.message : String(err)).replace(/\s+/g, " ");
    return fail([], `the file is not valid JSON (${why}); fix the JSON syntax`);
  }
  if (!isObject(root)) {
    return fail(
      [],
      `expected an object keyed by event type, such as {"weather": {"stale_after_s": 180}}, not ${
        kind(root)
      }`,
    );
  }
  const registry = new Map<string, TypeSpec>();
  /** The field already feeding each Alpaca property: one property, one field. */
  const fed = new Map<string, readonly string[]>();
  for (const [type, raw] of Object.entries(root)) {
    const at = [type];
    const badName = badTypeName(type);
    if (badName) fail(at, `the type name ${badName}`);
    if (!isObject(raw)) {
      fail(
        at,
        `expected an object describing the type (keys ${TYPE_KEYS.join(", ")}), not ${kind(raw)}`,
      );
    }
    registry.set(type, parseTypeSpec(at, raw as Record<string, unknown>, fed, fail));
  }
  return registry;
}

/** One type's entry of the types file, checked key by key (docs/types.md). */
function parseTypeSpec(
  at: string[],
  spec: Record<string, unknown>,
  fed: Map<string, readonly string[]>,
  fail: (parts: readonly string[], what: string) => never,
): TypeSpec {
  for (const key of Object.keys(spec)) {
    if (!TYPE_KEYS.includes(key)) {
      fail(
        [...at, key],
        `unknown key ${JSON.stringify(key)}; a type accepts ${TYPE_KEYS.join(", ")}`,
      );
    }
  }
  const out: {
    description?: string;
    stale_after_s?: number;
    critical: boolean;
    order?: number;
    clear_after_s?: number;
    critical_for?: readonly string[];
    fields: Record<string, FieldSpec>;
  } = { critical: false, fields: {} };
  if (spec.description !== undefined) {
    if (typeof spec.description !== "string") {
      fail([...at, "description"], `expected a string, not ${kind(spec.description)}`);
    }
    out.description = spec.description as string;
  }
  if (spec.stale_after_s !== undefined) {
    const s = spec.stale_after_s;
    if (typeof s !== "number" || !(s > 0) || !Number.isFinite(s)) {
      fail([...at, "stale_after_s"], `expected a number of seconds above 0, not ${kind(s)}`);
    }
    out.stale_after_s = s as number;
  }
  if (spec.critical !== undefined) {
    if (typeof spec.critical !== "boolean") {
      fail([...at, "critical"], `expected true or false, not ${kind(spec.critical)}`);
    }
    out.critical = spec.critical as boolean;
  }
  if (spec.order !== undefined) {
    if (typeof spec.order !== "number" || !Number.isFinite(spec.order)) {
      fail([...at, "order"], `expected a number, not ${kind(spec.order)}`);
    }
    out.order = spec.order as number;
  }
  if (spec.clear_after_s !== undefined) {
    const s = spec.clear_after_s;
    if (typeof s !== "number" || !(s >= 0) || !Number.isFinite(s)) {
      fail([...at, "clear_after_s"], `expected a number of seconds, 0 or more, not ${kind(s)}`);
    }
    out.clear_after_s = s as number;
  }
  if (spec.critical_for !== undefined) {
    const names = parseCriticalFor([...at, "critical_for"], spec.critical_for, fail);
    // Naming the site's own profile says what `critical: true` says.
    if (names.includes(SITE_PROFILE)) out.critical = true;
    out.critical_for = names.filter((name) => name !== SITE_PROFILE);
  }
  if (spec.fields !== undefined) {
    if (!isObject(spec.fields)) {
      fail(
        [...at, "fields"],
        `expected an object keyed by field (dotted paths allowed), not ${kind(spec.fields)}`,
      );
    }
    for (const [path, rawField] of Object.entries(spec.fields as Record<string, unknown>)) {
      const field = parseField([...at, "fields", path], path, rawField, fail);
      if (field.alpaca !== undefined) {
        claimProperty(fed, field.alpaca, [...at, "fields", path], fail);
      }
      out.fields[path] = field;
    }
  }
  return out;
}

/** `critical_for`: a list of distinct profile names (docs/safety.md#profiles). */
function parseCriticalFor(
  at: string[],
  value: unknown,
  fail: (parts: readonly string[], what: string) => never,
): readonly string[] {
  if (!Array.isArray(value)) {
    fail(at, `expected a list of profile names such as ["north-roof"], not ${kind(value)}`);
  }
  const names: string[] = [];
  for (const [i, name] of (value as unknown[]).entries()) {
    if (typeof name !== "string" || !PROFILE_NAME.test(name)) {
      fail(
        [...at, String(i)],
        `a profile name is 1 to 64 letters, digits, "_" or "-", not ${
          typeof name === "string" ? JSON.stringify(name.slice(0, 80)) : kind(name)
        }`,
      );
    }
    if (!names.includes(name as string)) names.push(name as string);
  }
  return names;
}

/**
 * The name of a safety profile (docs/safety.md#profiles): 1 to 64 letters, digits, `_` or `-`.
 *
 * @example Usage
 * ```ts
 * import { PROFILE_NAME } from "./types_registry.ts";
 * import assert from "node:assert/strict";
 *
 * assert.ok(PROFILE_NAME.test("north-roof"));
 * assert.ok(!PROFILE_NAME.test("north roof"));
 * ```
 */
export const PROFILE_NAME = /^[A-Za-z0-9_-]{1,64}$/;

/**
 * The profile of the site's own verdict: the types with `critical: true` (docs/safety.md).
 *
 * @example Usage
 * ```ts
 * import { SITE_PROFILE } from "./types_registry.ts";
 * import assert from "node:assert/strict";
 *
 * assert.equal(SITE_PROFILE, "site");
 * ```
 */
export const SITE_PROFILE = "site";

/**
 * Whether a type is critical for a profile: `critical: true` for `site` (a `critical_for` naming
 * `site` is read as `critical: true`), `critical_for` naming it for the others.
 *
 * @param spec The type's registry entry.
 * @param profile The profile.
 * @returns True when the type's judgement counts in the profile's verdict.
 *
 * @example Usage
 * ```ts
 * import { isCriticalFor } from "./types_registry.ts";
 * import assert from "node:assert/strict";
 *
 * const spec = { critical: false, critical_for: ["north"], fields: {} };
 * assert.equal(isCriticalFor(spec, "north"), true);
 * assert.equal(isCriticalFor(spec, "site"), false);
 * ```
 */
export function isCriticalFor(spec: TypeSpec, profile: string): boolean {
  if (profile === SITE_PROFILE) return spec.critical;
  return spec.critical_for?.includes(profile) ?? false;
}

/**
 * Whether a type counts in any profile's verdict (docs/safety.md#profiles).
 *
 * @param spec The type's registry entry.
 * @returns True when it is critical for the site or for a named profile.
 *
 * @example Usage
 * ```ts
 * import { isCriticalAnywhere } from "./types_registry.ts";
 * import assert from "node:assert/strict";
 *
 * assert.equal(isCriticalAnywhere({ critical: false, critical_for: ["north"], fields: {} }), true);
 * ```
 */
export function isCriticalAnywhere(spec: TypeSpec): boolean {
  return spec.critical || (spec.critical_for?.length ?? 0) > 0;
}

/**
 * The safety profiles of a registry: `site` first (it always exists, and without a critical type
 * it is unsafe), then every profile named by a `critical_for`, in name order; the device number
 * of each Alpaca SafetyMonitor is its index (docs/safety.md#profiles).
 *
 * @param registry The types registry.
 * @returns The profile names.
 *
 * @example Usage
 * ```ts
 * import { parseTypes, safetyProfiles } from "./types_registry.ts";
 * import assert from "node:assert/strict";
 *
 * const types = parseTypes('{"rain": {"critical": true, "critical_for": ["south", "north"]}}', "t.json");
 * assert.deepEqual(safetyProfiles(types), ["site", "north", "south"]);
 * ```
 */
export function safetyProfiles(registry: TypesRegistry): string[] {
  const named = new Set<string>();
  for (const spec of registry.values()) {
    for (const name of spec.critical_for ?? []) named.add(name);
  }
  return [SITE_PROFILE, ...[...named].sort()];
}

function parseField(
  at: string[],
  path: string,
  raw: unknown,
  fail: (parts: readonly string[], what: string) => never,
): FieldSpec {
  const badPath = badFieldPath(path);
  if (badPath) fail(at, `the field path ${badPath}`);
  if (!isObject(raw)) {
    return fail(
      at,
      `expected an object such as {"unit": "m/s", "alarm_above": 15}, not ${kind(raw)}`,
    );
  }
  const field: Record<string, unknown> = {};
  for (const [key, value] of Object.entries(raw)) {
    if (!FIELD_KEYS.includes(key)) {
      fail(
        [...at, key],
        `unknown key ${JSON.stringify(key)}; a field accepts ${FIELD_KEYS.join(", ")}`,
      );
    }
    if ((key === "label" || key === "unit") && typeof value !== "string") {
      fail([...at, key], `expected a string, not ${kind(value)}`);
    }
    if ((LIMIT_KEYS as readonly string[]).includes(key)) {
      if (typeof value !== "number" || !Number.isFinite(value)) {
        fail([...at, key], `expected a number, not ${kind(value)}`);
      }
    }
    field[key] = value;
  }
  const f = field as FieldSpec;
  if (f.alpaca !== undefined) checkAlpaca(at, f, fail);
  if (f.warn_above !== undefined && f.alarm_above !== undefined && f.warn_above > f.alarm_above) {
    fail(
      [...at, "warn_above"],
      `warn_above ${f.warn_above} is above alarm_above ${f.alarm_above}; the warning must come first, so make warn_above the smaller`,
    );
  }
  if (f.warn_below !== undefined && f.alarm_below !== undefined && f.warn_below < f.alarm_below) {
    fail(
      [...at, "warn_below"],
      `warn_below ${f.warn_below} is below alarm_below ${f.alarm_below}; the warning must come first, so make warn_below the larger`,
    );
  }
  return f;
}

/** The `"alpaca"` key of a field: a known property, and a unit that converts to its unit. */
function checkAlpaca(
  at: string[],
  field: FieldSpec,
  fail: (parts: readonly string[], what: string) => never,
): void {
  const property: unknown = field.alpaca;
  if (typeof property !== "string" || !isAlpacaProperty(property)) {
    fail(
      [...at, "alpaca"],
      `${kind(property)} is not an ObservingConditions property; use one of ${
        ALPACA_PROPERTIES.join(", ")
      }`,
    );
  }
  const name = property as AlpacaProperty;
  const units = acceptedUnits(name).join(", ");
  if (field.unit === undefined) {
    fail(
      at,
      `the field feeds Alpaca ${name} but has no "unit"; add "unit": "${
        alpacaUnit(name)
      }" (or another of ${units}) so its values can be converted`,
    );
  }
  if (alpacaConverter(name, field.unit!) === undefined) {
    fail(
      [...at, "unit"],
      `the unit ${JSON.stringify(field.unit)} cannot be converted to Alpaca ${name} (${
        alpacaUnit(name)
      }); record the field in one of ${units}, or remove its "alpaca" key`,
    );
  }
}

/** Records that a field feeds `property`; a second field for the same property is refused. */
function claimProperty(
  fed: Map<string, readonly string[]>,
  property: string,
  at: readonly string[],
  fail: (parts: readonly string[], what: string) => never,
): void {
  const first = fed.get(property);
  if (first !== undefined) {
    fail(
      [...at, "alpaca"],
      `Alpaca ${property} is already fed by ${
        pathOf(first)
      }; one field per property, so remove one of the two "alpaca" keys`,
    );
  }
  fed.set(property, at);
}

/**
 * Reads and validates a types file (`--types FILE`).
 *
 * @param file Path of the JSON file.
 * @returns The registry.
 * @throws {TypesFileError} If the file cannot be read, is too large, is not JSON or holds an
 *   unknown key; one line naming the file, the JSON path and the fix.
 * @throws {Deno.errors.NotCapable} If read permission for the file is missing.
 *
 * @example Usage
 * ```ts ignore
 * import { loadTypes } from "./types_registry.ts";
 *
 * const types = await loadTypes("examples/types.json");
 * console.log([...types.keys()]);
 * ```
 */
export async function loadTypes(file: string): Promise<TypesRegistry> {
  let bytes: Uint8Array;
  try {
    const info = await Deno.stat(file);
    if (!info.isFile) {
      throw new TypesFileError(
        `Cannot use --types ${file}: at $ it is not a regular file; point --types at a JSON file`,
      );
    }
    if (info.size > MAX_TYPES_FILE_BYTES) {
      throw new TypesFileError(
        `Cannot use --types ${file}: at $ the file has ${info.size} bytes, more than the ${MAX_TYPES_FILE_BYTES} allowed; describe fewer types`,
      );
    }
    bytes = await Deno.readFile(file);
  } catch (err) {
    if (err instanceof TypesFileError || err instanceof Deno.errors.NotCapable) throw err;
    const why = err instanceof Deno.errors.NotFound
      ? "the file does not exist"
      : (err instanceof Error ? err.message : String(err));
    throw new TypesFileError(
      `Cannot use --types ${file}: at $ ${why}; check the path given to --types (or OBS_TELEMETRY_TYPES)`,
    );
  }
  let text: string;
  try {
    text = new TextDecoder("utf-8", { fatal: true }).decode(bytes);
  } catch {
    throw new TypesFileError(
      `Cannot use --types ${file}: at $ the file is not valid UTF-8; save it as UTF-8`,
    );
  }
  return parseTypes(text.replace(/^\uFEFF/, ""), file);
}

/**
 * The warnings of a registry's critical types without `stale_after_s` (docs/safety.md): such a
 * type is never stale, so a station that stops sending with good values keeps the site safe all
 * night. Not a refusal: existing types files keep working, and the service says it once at start.
 *
 * @param registry The types registry.
 * @returns One line per such type, naming it and the fix.
 *
 * @example Usage
 * ```ts
 * import { parseTypes, staleLessCriticalWarnings } from "./types_registry.ts";
 * import assert from "node:assert/strict";
 *
 * const types = parseTypes('{"weather": {"critical": true}}', "types.json");
 * assert.equal(staleLessCriticalWarnings(types).length, 1);
 * ```
 */
export function staleLessCriticalWarnings(registry: TypesRegistry): string[] {
  const out: string[] = [];
  for (const [type, spec] of registry) {
    if (!isCriticalAnywhere(spec) || spec.stale_after_s !== undefined) continue;
    out.push(
      `The critical type ${
        JSON.stringify(type)
      } has no stale_after_s, so it is never stale: if its source stops sending, the site stays safe with its last values; add "stale_after_s": 300 (or the seconds it may stay silent) to it in the types file (docs/safety.md)`,
    );
  }
  return out;
}
