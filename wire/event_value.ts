/**
 * The rules for the values of an event (docs/http-api.md) that every writer of stream lines
 * applies: the service to each request (`core/commands.ts`) and the legacy migration to each
 * record (`migrate/convert.ts`), so that no line is stored that the service would refuse.
 * Runtime-neutral, no allocation on the way for a value that passes.
 *
 * @module
 */

/**
 * How many levels of objects and arrays `data` and `meta` may nest (`data` itself is level 1).
 * Deeper values are refused with 400: whether `JSON.stringify` overflows the stack on them depends
 * on how deep the call stack already is (a 20,000-level run `meta` failed inside the active-run
 * write with a 500 and left files behind), and readers such as Python's `json` give up near
 * 1,000 levels.
 *
 * @example Usage
 * ```ts
 * import { MAX_NESTING } from "./event_value.ts";
 * import assert from "node:assert/strict";
 *
 * assert.equal(MAX_NESTING, 100);
 * ```
 */
export const MAX_NESTING = 100;

/**
 * The request body limit of a service started without `--max-body` (docs/http-api.md): 1 MiB.
 * An event larger as JSON is refused by such a service; the legacy migration rejects a record
 * whose event would be (docs/migration.md).
 *
 * @example Usage
 * ```ts
 * import { DEFAULT_BODY_BYTES } from "./event_value.ts";
 * import assert from "node:assert/strict";
 *
 * assert.equal(DEFAULT_BODY_BYTES, 1048576);
 * ```
 */
export const DEFAULT_BODY_BYTES: number = 1024 * 1024;

/** What {@linkcode scanValue} found wrong with a `data` or `meta` value. */
const Scan = { Ok: 0, TooDeep: 1, NonFinite: 2 } as const;
type Scan = typeof Scan[keyof typeof Scan];

/**
 * The one walk over `data` and `meta` (this runs for every event): whether objects and arrays
 * nest deeper than `max` levels, and whether a number is not finite (`1e999` parses to
 * `Infinity`, which `JSON.stringify` would silently write as `null`). The recursion stops at
 * `max`, so any input is safe, and it allocates nothing; the path of a bad number is worked out
 * only when there is one ({@linkcode nonFinitePath}).
 */
function scanValue(value: unknown, max: number): Scan {
  return max < 1 ? Scan.TooDeep : scanChildren(value, max - 1);
}

/** Checks a container's children, which may nest `left` further levels. */
function scanChildren(value: unknown, left: number): Scan {
  if (Array.isArray(value)) {
    for (let i = 0; i < value.length; i++) {
      const found = scanChild(value[i], left);
      if (found !== Scan.Ok) return found;
    }
    return Scan.Ok;
  }
  const object = value as Record<string, unknown>;
  for (const key in object) {
    const found = scanChild(object[key], left);
    if (found !== Scan.Ok) return found;
  }
  return Scan.Ok;
}

function scanChild(child: unknown, left: number): Scan {
  if (typeof child === "number") return Number.isFinite(child) ? Scan.Ok : Scan.NonFinite;
  if (typeof child !== "object" || child === null) return Scan.Ok;
  if (left === 0) return Scan.TooDeep;
  return scanChildren(child, left - 1);
}

/** A key as a path step: `.wind` for a plain name, `["a b"]` otherwise. */
function pathStep(key: string): string {
  return /^[A-Za-z_$][\w$]*$/.test(key) ? `.${key}` : `[${JSON.stringify(key)}]`;
}

/**
 * The path of the first number that is not finite, such as `data.sky.cloud[2]`; `undefined`
 * when there is none. Called only after {@linkcode scanValue} found one, on a value known to
 * nest within the limit.
 */
function nonFinitePath(value: unknown, path: string): string | undefined {
  if (typeof value === "number") return Number.isFinite(value) ? undefined : path;
  if (typeof value !== "object" || value === null) return undefined;
  if (Array.isArray(value)) {
    for (let i = 0; i < value.length; i++) {
      const found = nonFinitePath(value[i], `${path}[${i}]`);
      if (found !== undefined) return found;
    }
    return undefined;
  }
  for (const key in value as Record<string, unknown>) {
    const found = nonFinitePath((value as Record<string, unknown>)[key], path + pathStep(key));
    if (found !== undefined) return found;
  }
  return undefined;
}

/**
 * What is wrong with a `data` or `meta` value for the service (docs/http-api.md): objects and
 * arrays nested more than {@linkcode MAX_NESTING} levels, or a number that is not finite. The
 * service refuses such an event with 400; a migration rejects such a record (docs/migration.md).
 *
 * @param value The value, `data` or `meta` of an event (any value: the walk is bounded).
 * @param key Which of the two it is, named in the answer.
 * @returns The sentence saying what to change, or `undefined` when the value is fine.
 *
 * @example Usage
 * ```ts
 * import { valueProblem } from "./event_value.ts";
 * import assert from "node:assert/strict";
 *
 * assert.equal(valueProblem({ wind_mps: 2.1 }, "data"), undefined);
 * assert.match(valueProblem({ sky: { t: Infinity } }, "data")!, /^the number at data\.sky\.t is not finite/);
 * let deep: unknown = {};
 * for (let i = 0; i < 200; i++) deep = { deep };
 * assert.match(valueProblem(deep, "meta")!, /more than 100 levels deep/);
 * ```
 */
export function valueProblem(value: unknown, key: "data" | "meta"): string | undefined {
  const found = scanValue(value, MAX_NESTING);
  if (found === Scan.TooDeep) {
    return `"${key}" nests objects or arrays more than ${MAX_NESTING} levels deep; flatten it.`;
  }
  if (found === Scan.NonFinite) {
    const path = nonFinitePath(value, key) ?? key;
    return `the number at ${path} is not finite (too large for a 64-bit float, such as 1e999); send a finite number, or a string if the value is really that large.`;
  }
  return undefined;
}
