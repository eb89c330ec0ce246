/**
 * Freshness and limits (docs/types.md): the state of each event type, judged on the latest event's
 * own `ts` (the measurement time, not the receive time) against the types registry, at a time
 * the caller gives. Pure: no clock, no I/O, so every rule is tested with an injected "now".
 *
 * @example Usage
 * ```ts
 * import { judgeType } from "./freshness.ts";
 * import assert from "node:assert/strict";
 *
 * const spec = { critical: true, stale_after_s: 180, fields: { wind_mps: { unit: "m/s", alarm_above: 15 } } };
 * const now = Date.parse("2026-11-25T12:00:00Z");
 * const status = judgeType(spec, { ts: "2026-11-25T11:59:00.000Z", data: { wind_mps: 16.2 } }, now);
 * assert.equal(status.state, "alarm");
 * assert.deepEqual(status.reasons, ["wind_mps 16.2 m/s above alarm 15"]);
 * ```
 *
 * @module
 */

import { formatBytes } from "../store/disk.ts";
import type { FieldSpec, JsonValue, TypeSpec, TypesRegistry } from "./types_registry.ts";

/** The states of a type, from best to worst as `GET /check` sees them. */
export const TYPE_STATES = ["ok", "warn", "alarm", "stale"] as const;

/** The state of a type. */
export type TypeState = typeof TYPE_STATES[number];

/** The latest event of a type, as far as freshness cares. */
export interface LatestEvent {
  /** The event's `ts` (ISO 8601 UTC). */
  readonly ts: string;
  /** The event's `data`. */
  readonly data: Readonly<Record<string, unknown>>;
}

/** One entry of `GET /types`. */
export interface TypeStatus {
  /** The registry's description, or null. */
  description: string | null;
  /** Whether the type is critical for `GET /check`. */
  critical: boolean;
  /** Seconds after `ts` the type goes stale, or null (never). */
  stale_after_s: number | null;
  /** Dashboard order, or null. */
  order: number | null;
  /** The registered fields (dotted paths). */
  fields: Readonly<Record<string, FieldSpec>>;
  /** `ts` of the latest event, or null when never seen. */
  last_ts: string | null;
  /** Seconds since `last_ts` (one decimal), or null when never seen. */
  age_s: number | null;
  /** `stale`, else `alarm`, else `warn`, else `ok`. */
  state: TypeState;
  /** Why the state is not `ok`, such as `wind_mps 16.2 m/s above alarm 15`. */
  reasons: string[];
}

/** The `GET /check` answer. */
export interface CheckResult {
  /** True when every critical type is fresh and out of alarm and the disk has room. */
  ok: boolean;
  /** One line per failure, such as `weather: stale for 412 s`. */
  failing: string[];
  /** The critical types checked, by name, with their state (`stale` when never seen). */
  critical: Record<string, TypeState>;
  /** Free bytes on the site directory's file system, or null when it cannot be told. */
  disk_free_bytes: number | null;
  /** The `--min-free` threshold in bytes. */
  min_free_bytes: number;
}

/**
 * The value at a dotted path of `data`: the key as written first (a key may hold a dot), else
 * walking nested objects.
 *
 * @param data An event's data.
 * @param path A field key of the registry, such as `system.free_space`.
 * @returns The value, or `undefined` when absent.
 *
 * @example Usage
 * ```ts
 * import { valueAt } from "./freshness.ts";
 * import assert from "node:assert/strict";
 *
 * assert.equal(valueAt({ system: { free_space: 12 } }, "system.free_space"), 12);
 * ```
 */
export function valueAt(data: Readonly<Record<string, unknown>>, path: string): unknown {
  if (Object.hasOwn(data, path)) return data[path];
  let at: unknown = data;
  for (const part of path.split(".")) {
    if (typeof at !== "object" || at === null || Array.isArray(at) || !Object.hasOwn(at, part)) {
      return undefined;
    }
    at = (at as Record<string, unknown>)[part];
  }
  return at;
}

const QUANTITY = /^\s*([-+]?(?:\d+\.?\d*|\.\d+)(?:[eE][-+]?\d+)?)\s+(\S(?:.*\S)?)\s*$/;

/**
 * A field's value as a number when it is one: a finite number, or a `"<number> <unit>"` string
 * whose unit is the field's `unit` (the older Python serializer writes `"3397.0 m"`).
 *
 * @param value The raw value.
 * @param unit The registered unit, if any.
 * @returns The number, or `undefined` for anything else.
 *
 * @example Usage
 * ```ts
 * import { numericValue } from "./freshness.ts";
 * import assert from "node:assert/strict";
 *
 * assert.equal(numericValue("3397.0 m", "m"), 3397);
 * assert.equal(numericValue("3397.0 ft", "m"), undefined);
 * ```
 */
export function numericValue(value: unknown, unit: string | undefined): number | undefined {
  if (typeof value === "number") return Number.isFinite(value) ? value : undefined;
  if (typeof value !== "string" || unit === undefined || value.length > 200) return undefined;
  const m = QUANTITY.exec(value);
  if (!m || m[2] !== unit) return undefined;
  const n = Number(m[1]);
  return Number.isFinite(n) ? n : undefined;
}

function sameValue(a: unknown, b: JsonValue): boolean {
  if (a === b) return true;
  if (typeof a !== "object" || typeof b !== "object" || a === null || b === null) return false;
  return JSON.stringify(a) === JSON.stringify(b);
}

function show(value: unknown): string {
  return typeof value === "string" ? JSON.stringify(value) : String(JSON.stringify(value));
}

/**
 * The limit a field's value is past, as a level and a reason, or undefined when within all.
 *
 * @param path The field key.
 * @param spec Its registry entry.
 * @param raw The value in the event.
 * @returns `alarm` before `warn`; the reason reads like `wind_mps 16.2 m/s above alarm 15`.
 *
 * @example Usage
 * ```ts
 * import { fieldLevel } from "./freshness.ts";
 * import assert from "node:assert/strict";
 *
 * assert.deepEqual(fieldLevel("rain", { alarm_if: true }, true), {
 *   level: "alarm",
 *   reason: "rain is true (alarm if true)",
 * });
 * ```
 */
export function fieldLevel(
  path: string,
  spec: FieldSpec,
  raw: unknown,
): { level: "warn" | "alarm"; reason: string } | undefined {
  if (raw === undefined) return undefined;
  const n = numericValue(raw, spec.unit);
  const unit = spec.unit ? ` ${spec.unit}` : "";
  for (const level of ["alarm", "warn"] as const) {
    const above = spec[`${level}_above`];
    const below = spec[`${level}_below`];
    const equal = spec[`${level}_if`];
    if (n !== undefined && above !== undefined && n > above) {
      return { level, reason: `${path} ${n}${unit} above ${level} ${above}` };
    }
    if (n !== undefined && below !== undefined && n < below) {
      return { level, reason: `${path} ${n}${unit} below ${level} ${below}` };
    }
    if (equal !== undefined && sameValue(raw, equal)) {
      return { level, reason: `${path} is ${show(raw)} (${level} if ${show(equal)})` };
    }
  }
  return undefined;
}

/**
 * How far in the future an event's `ts` may lie and still count (docs/types.md): clocks of
 * stations and hosts differ by a little, never by minutes. A `ts` further ahead establishes no
 * freshness: it would keep a type fresh long after its sender stopped.
 */
export const FUTURE_TOLERANCE_MS = 60_000;

/** Whole seconds for a reason: `412`. */
function wholeSeconds(ms: number): number {
  return Math.floor(ms / 1000);
}

/**
 * The state of one type at `nowMs`.
 *
 * @param spec The registry entry, or undefined for a type the registry does not describe.
 * @param latest The latest event, or undefined when none was seen.
 * @param nowMs The time to judge at, in ms since the epoch.
 * @returns The `GET /types` entry.
 *
 * @example Usage
 * ```ts
 * import { judgeType } from "./freshness.ts";
 * import assert from "node:assert/strict";
 *
 * const spec = { critical: false, stale_after_s: 90, fields: {} };
 * const now = Date.parse("2026-11-25T12:00:00Z");
 * assert.equal(judgeType(spec, { ts: "2026-11-25T11:58:30.000Z", data: {} }, now).state, "ok");
 * assert.equal(judgeType(spec, { ts: "2026-11-25T11:58:29.999Z", data: {} }, now).state, "stale");
 * ```
 */
export function judgeType(
  spec: TypeSpec | undefined,
  latest: LatestEvent | undefined,
  nowMs: number,
): TypeStatus {
  const status: TypeStatus = {
    description: spec?.description ?? null,
    critical: spec?.critical ?? false,
    stale_after_s: spec?.stale_after_s ?? null,
    order: spec?.order ?? null,
    fields: spec?.fields ?? {},
    last_ts: latest?.ts ?? null,
    age_s: null,
    state: "ok",
    reasons: [],
  };
  if (!latest) {
    if (spec?.stale_after_s !== undefined || spec?.critical) {
      status.state = "stale";
      status.reasons.push("never seen");
    }
    return status;
  }
  const ts = Date.parse(latest.ts);
  const ageMs = Number.isNaN(ts) ? 0 : nowMs - ts;
  status.age_s = Math.round(ageMs / 100) / 10;
  let state: TypeState = "ok";
  if (spec?.stale_after_s !== undefined && ageMs > spec.stale_after_s * 1000) {
    state = "stale";
    status.reasons.push(`stale for ${wholeSeconds(ageMs)} s (limit ${spec.stale_after_s} s)`);
  }
  if (spec !== undefined && ageMs < -FUTURE_TOLERANCE_MS) {
    // A ts further ahead than clocks differ proves nothing about now: counted, it would keep the
    // type fresh (and GET /check green) until the present caught up, long after its sender died.
    // A type whose freshness matters is stale; another one warns (docs/types.md).
    const judged = spec.stale_after_s !== undefined || spec.critical;
    state = judged ? "stale" : "warn";
    status.reasons.push(
      `ts ${wholeSeconds(-ageMs)} s in the future (more than ${FUTURE_TOLERANCE_MS / 1000} s ahead${
        judged ? ", so freshness cannot be established" : ""
      }); check the sender's clock`,
    );
  }
  for (const [path, field] of Object.entries(spec?.fields ?? {})) {
    const past = fieldLevel(path, field, valueAt(latest.data, path));
    if (!past) continue;
    status.reasons.push(past.reason);
    if (state === "ok" || (state === "warn" && past.level === "alarm")) state = past.level;
  }
  status.state = state;
  return status;
}

/**
 * `GET /types`: every registered type and every type in the snapshot, registered ones first in
 * the file's order, then the others by name.
 *
 * @param registry The types registry.
 * @param latest The latest event of a type, or undefined.
 * @param snapshotTypes The types in the snapshot.
 * @param nowMs The time to judge at.
 * @returns The entries keyed by type.
 *
 * @example Usage
 * ```ts
 * import { typesReport } from "./freshness.ts";
 * import assert from "node:assert/strict";
 *
 * const registry = new Map([["weather", { critical: true, stale_after_s: 180, fields: {} }]]);
 * const report = typesReport(registry, () => undefined, [], Date.now());
 * assert.equal(report.weather?.state, "stale");
 * ```
 */
export function typesReport(
  registry: TypesRegistry,
  latest: (type: string) => LatestEvent | undefined,
  snapshotTypes: Iterable<string>,
  nowMs: number,
): Record<string, TypeStatus> {
  const entries: [string, TypeStatus][] = [];
  for (const [type, spec] of registry) entries.push([type, judgeType(spec, latest(type), nowMs)]);
  const others = [...snapshotTypes].filter((t) => !registry.has(t)).sort();
  for (const type of others) entries.push([type, judgeType(undefined, latest(type), nowMs)]);
  return Object.fromEntries(entries);
}

/**
 * `GET /check`: fails when a critical type is stale (never seen counts as stale) or in alarm, or
 * when free disk space is below `minFreeBytes`.
 *
 * @param registry The types registry.
 * @param latest The latest event of a type, or undefined.
 * @param nowMs The time to judge at.
 * @param disk Free bytes (null: unknown, not a failure) and the threshold.
 * @returns The result; `ok` false lists one line per failure.
 *
 * @example Usage
 * ```ts
 * import { checkReport } from "./freshness.ts";
 * import assert from "node:assert/strict";
 *
 * const registry = new Map([["weather", { critical: true, stale_after_s: 180, fields: {} }]]);
 * const result = checkReport(registry, () => undefined, Date.now(), { freeBytes: 5e9, minFreeBytes: 1e9 });
 * assert.deepEqual(result.failing, ["weather: stale, never seen"]);
 * ```
 */
export function checkReport(
  registry: TypesRegistry,
  latest: (type: string) => LatestEvent | undefined,
  nowMs: number,
  disk: { freeBytes: number | null; minFreeBytes: number },
): CheckResult {
  const failing: string[] = [];
  const critical: Record<string, TypeState> = {};
  for (const [type, spec] of registry) {
    if (!spec.critical) continue;
    const seen = latest(type);
    const status = judgeType(spec, seen, nowMs);
    if (!seen) {
      critical[type] = "stale";
      failing.push(`${type}: stale, never seen`);
      continue;
    }
    critical[type] = status.state;
    // The first reason of a stale type says why: too old, or a ts too far ahead to count.
    if (status.state === "stale") failing.push(`${type}: ${status.reasons[0]}`);
    if (status.state === "stale" || status.state === "alarm") {
      const alarms = Object.entries(spec.fields).flatMap(([path, field]) => {
        const past = fieldLevel(path, field, valueAt(seen.data, path));
        return past?.level === "alarm" ? [past.reason] : [];
      });
      for (const reason of alarms) failing.push(`${type}: ${reason}`);
    }
  }
  const { freeBytes, minFreeBytes } = disk;
  if (freeBytes !== null && freeBytes < minFreeBytes) {
    failing.push(
      `disk: ${formatBytes(freeBytes)} free, below --min-free ${formatBytes(minFreeBytes)}`,
    );
  }
  return {
    ok: failing.length === 0,
    failing,
    critical,
    disk_free_bytes: freeBytes,
    min_free_bytes: minFreeBytes,
  };
}
