/**
 * The plain answers of the routes (docs/http-api.md): JSON with its content type only, and the
 * `no-store` mark of an answer of this instant.
 *
 * @example Usage
 * ```ts
 * import { json, noStore } from "./answers.ts";
 * import assert from "node:assert/strict";
 *
 * const res = noStore(json(200, '{"ok":true}'));
 * assert.equal(res.headers.get("cache-control"), "no-store");
 * ```
 *
 * @module
 */

// Successful answers carry only their content type: every extra header costs about a
// microsecond per response, and without validators no browser caches or sniffs them anyway.
const JSON_HEADERS = { "content-type": "application/json; charset=utf-8" };

/**
 * A JSON answer.
 *
 * @param status The status.
 * @param body The JSON text.
 * @returns The response, with its content type.
 *
 * @example Usage
 * ```ts
 * import { json } from "./answers.ts";
 * import assert from "node:assert/strict";
 *
 * assert.equal(json(200, "{}").headers.get("content-type"), "application/json; charset=utf-8");
 * ```
 */
export function json(status: number, body: string): Response {
  return new Response(body, { status, headers: JSON_HEADERS });
}

/**
 * Marks an answer of this instant: no proxy or browser may answer it from a cache.
 *
 * @param res The response.
 * @returns The same response, with `cache-control: no-store`.
 *
 * @example Usage
 * ```ts
 * import { json, noStore } from "./answers.ts";
 * import assert from "node:assert/strict";
 *
 * assert.equal(noStore(json(200, "{}")).headers.get("cache-control"), "no-store");
 * ```
 */
export function noStore(res: Response): Response {
  res.headers.set("cache-control", "no-store");
  return res;
}
