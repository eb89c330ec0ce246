/**
 * Reading a push message's payload (docs/collect.md, "MQTT"): its text as a JSON object or a
 * scalar.
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
