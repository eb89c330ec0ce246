/**
 * JSON Pointers (RFC 6901) into a parsed JSON value: how `fields` and `ts` name a value of a JSON
 * source (docs/collect.md).
 *
 * @module
 */

/**
 * Whether `text` is a JSON Pointer: empty (the whole value) or `/`-separated tokens.
 *
 * @param text The pointer text.
 * @returns True for `""`, `/a`, `/a/0/b~1c`.
 *
 * @example Usage
 * ```ts
 * import { isJsonPointer } from "./json_pointer.ts";
 * import assert from "node:assert/strict";
 *
 * assert.ok(isJsonPointer("/weather/temp"));
 * assert.ok(!isJsonPointer("weather.temp"));
 * ```
 */
export function isJsonPointer(text: string): boolean {
  return text === "" || (text.startsWith("/") && !/~[^01]|~$/.test(text));
}

/**
 * The value a JSON Pointer names, or `undefined` when nothing is there.
 *
 * @param value The parsed JSON document.
 * @param pointer A pointer accepted by {@linkcode isJsonPointer}.
 * @returns The value at the pointer.
 *
 * @example Usage
 * ```ts
 * import { resolvePointer } from "./json_pointer.ts";
 * import assert from "node:assert/strict";
 *
 * assert.equal(resolvePointer({ a: [{ "b/c": 4 }] }, "/a/0/b~1c"), 4);
 * assert.equal(resolvePointer({ a: 1 }, "/missing"), undefined);
 * ```
 */
export function resolvePointer(value: unknown, pointer: string): unknown {
  if (pointer === "") return value;
  let at: unknown = value;
  for (const raw of pointer.slice(1).split("/")) {
    const token = raw.replaceAll("~1", "/").replaceAll("~0", "~");
    if (Array.isArray(at)) {
      if (!/^(0|[1-9]\d*)$/.test(token)) return undefined;
      at = at[Number(token)];
    } else if (at !== null && typeof at === "object") {
      if (!Object.hasOwn(at, token)) return undefined;
      at = (at as Record<string, unknown>)[token];
    } else {
      return undefined;
    }
  }
  return at;
}
