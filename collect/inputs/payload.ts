/**
 * Reading the values of a push message (docs/collect.md, "MQTT"): a payload's text as a JSON
 * object or a scalar, a JSON Pointer into it, and a source time as `ts_format` writes it.
 *
 * @module
 */

/** What a payload holds: the fields of a JSON object, or one scalar. */
export type Payload =
  | { kind: "object"; value: Record<string, unknown> }
  | { kind: "scalar"; value: number | boolean | string }
  | { kind: "bad"; reason: string };

const NUMBER = /^[-+]?(\d+\.?\d*|\.\d+)([eE][-+]?\d+)?$/;

/**
 * Reads a payload's text: a JSON object is its fields; a number, `true`/`false` or other text
 * is one scalar (a JSON string loses its quotes); JSON `null`, an array or a broken object is
 * refused.
 *
 * @example
 * ```ts
 * import { readPayload } from "./payload.ts";
 * import assert from "node:assert/strict";
 * assert.deepEqual(readPayload(" 12.5\n"), { kind: "scalar", value: 12.5 });
 * assert.deepEqual(readPayload('{"t": 3}'), { kind: "object", value: { t: 3 } });
 * ```
 */
export function readPayload(text: string): Payload {
  const trimmed = text.trim();
  if (trimmed === "true" || trimmed === "false") {
    return { kind: "scalar", value: trimmed === "true" };
  }
  if (NUMBER.test(trimmed)) {
    const n = Number(trimmed);
    if (Number.isFinite(n)) return { kind: "scalar", value: n };
  }
  if (trimmed.startsWith("{") || trimmed.startsWith("[") || trimmed === "null") {
    let parsed: unknown;
    try {
      parsed = JSON.parse(trimmed);
    } catch (err) {
      return { kind: "bad", reason: `not JSON: ${(err as Error).message}` };
    }
    if (parsed !== null && typeof parsed === "object" && !Array.isArray(parsed)) {
      return { kind: "object", value: parsed as Record<string, unknown> };
    }
    return {
      kind: "bad",
      reason: "a JSON array or null is not a value; send an object or a scalar",
    };
  }
  if (trimmed.startsWith('"')) {
    try {
      const s = JSON.parse(trimmed);
      if (typeof s === "string") return { kind: "scalar", value: s };
    } catch { /* plain text that starts with a quote */ }
  }
  if (trimmed === "") return { kind: "bad", reason: "an empty payload" };
  return { kind: "scalar", value: trimmed };
}

/**
 * The value a JSON Pointer (RFC 6901) names in `doc`, or `undefined`. A pointer without a
 * leading `/` is read as one key, as key names are written in configs.
 *
 * @example
 * ```ts
 * import { pointer } from "./payload.ts";
 * import assert from "node:assert/strict";
 * assert.equal(pointer({ a: { "b/c": 1 } }, "/a/b~1c"), 1);
 * assert.equal(pointer({ t: 2 }, "t"), 2);
 * ```
 */
export function pointer(doc: unknown, ptr: string): unknown {
  if (!ptr.startsWith("/")) return (doc as Record<string, unknown> | undefined)?.[ptr];
  let at: unknown = doc;
  for (const raw of ptr.slice(1).split("/")) {
    const key = raw.replaceAll("~1", "/").replaceAll("~0", "~");
    if (at === null || typeof at !== "object" || !Object.hasOwn(at, key)) return undefined;
    at = (at as Record<string, unknown>)[key];
  }
  return at;
}

/**
 * A source time in epoch milliseconds, read as `format` says (`iso` by default: an ISO 8601
 * string, UTC when it has no zone), or `undefined` when it cannot be read.
 *
 * @example
 * ```ts
 * import { sourceTime } from "./payload.ts";
 * import assert from "node:assert/strict";
 * assert.equal(sourceTime(1700000000, "unix"), 1700000000000);
 * assert.equal(sourceTime("2026-11-27T01:02:03", "iso"), Date.UTC(2026, 10, 27, 1, 2, 3));
 * ```
 */
export function sourceTime(
  value: unknown,
  format: "iso" | "unix" | "unix_ms" | undefined,
): number | undefined {
  let ms: number;
  if (format === "unix" || format === "unix_ms") {
    const n = typeof value === "string" ? Number(value) : value;
    if (typeof n !== "number" || !Number.isFinite(n)) return undefined;
    ms = format === "unix" ? n * 1000 : n;
  } else {
    if (typeof value !== "string") return undefined;
    const zoned = /([zZ]|[+-]\d\d:?\d\d)$/.test(value) ? value : `${value}Z`;
    ms = Date.parse(zoned);
  }
  return Number.isFinite(ms) ? Math.round(ms) : undefined;
}
