/**
 * The `Idempotency-Key` request header of `POST /event` and `POST /events` (docs/http-api.md):
 * its rule (1 to 200 printable ASCII characters), the hash that tells a retry from another
 * request, and the `Idempotent-Replayed: true` answer of a retry. What a key does is the
 * service's (`TelemetryService.submitOnce`, docs/storage.md "Idempotency keys").
 *
 * @example Usage
 * ```ts
 * import { idempotencyKeyOf } from "./idempotent.ts";
 * import assert from "node:assert/strict";
 *
 * const req = new Request("http://localhost/event", { headers: { "idempotency-key": "k-1" } });
 * assert.equal(idempotencyKeyOf(req), "k-1");
 * ```
 *
 * @module
 */

import { createHash } from "node:crypto";
import { HttpError } from "./problems.ts";

/** The request header. */
export const IDEMPOTENCY_KEY_HEADER = "Idempotency-Key";
/** The answer header of a replayed first answer. */
export const IDEMPOTENT_REPLAYED_HEADER = "Idempotent-Replayed";
/** The most characters a key may have. */
export const MAX_IDEMPOTENCY_KEY = 200;

/** Printable ASCII, space to `~`: what survives every HTTP stack and log line unchanged. */
const PRINTABLE = /^[\x20-\x7e]+$/;

/**
 * The request's `Idempotency-Key`, checked.
 *
 * @param req The request.
 * @returns The key, or `undefined` when the request has none.
 * @throws {HttpError} 400 naming the header when it is empty, longer than 200 characters or holds
 *   a character outside printable ASCII.
 *
 * @example Usage
 * ```ts
 * import { idempotencyKeyOf } from "./idempotent.ts";
 * import assert from "node:assert/strict";
 *
 * assert.equal(idempotencyKeyOf(new Request("http://localhost/event")), undefined);
 * const empty = new Request("http://localhost/event", { headers: { "idempotency-key": "" } });
 * assert.throws(() => idempotencyKeyOf(empty), /Idempotency-Key header/);
 * ```
 */
export function idempotencyKeyOf(req: Request): string | undefined {
  const key = req.headers.get(IDEMPOTENCY_KEY_HEADER);
  if (key === null) return undefined;
  if (key.length <= MAX_IDEMPOTENCY_KEY && PRINTABLE.test(key)) return key;
  let found: string;
  if (key.length === 0) found = "it is empty";
  else if (key.length > MAX_IDEMPOTENCY_KEY) found = `it has ${key.length}`;
  else {
    const at = [...key].findIndex((c) => !PRINTABLE.test(c));
    const char = [...key][at]!;
    found = `character ${at + 1} is U+${
      char.codePointAt(0)!.toString(16).toUpperCase().padStart(4, "0")
    }`;
  }
  throw new HttpError(
    400,
    `The ${IDEMPOTENCY_KEY_HEADER} header must be 1 to ${MAX_IDEMPOTENCY_KEY} printable ASCII characters (space to "~"), but ${found}; send a new key, such as a UUID, with each request and the same key with its retries.`,
  );
}

/**
 * The hash that tells a retry from another request under the same key: SHA-256 of the route,
 * the body's kind (JSON or NDJSON) and the body's bytes, the first 22 characters (132 bits) of
 * its base64url.
 * `node:crypto` hashes on this thread, in about 4 µs for an event; `crypto.subtle.digest()` took
 * 54 µs, most of it the trip to another thread and back.
 *
 * @param route `/event` or `/events`.
 * @param ndjson Whether the body was sent as NDJSON.
 * @param body The body's bytes as received.
 * @returns 22 characters.
 *
 * @example Usage
 * ```ts
 * import { requestHash } from "./idempotent.ts";
 * import assert from "node:assert/strict";
 *
 * const body = new TextEncoder().encode('{"type":"a","data":{}}');
 * assert.equal(requestHash("/event", false, body), requestHash("/event", false, body));
 * assert.notEqual(requestHash("/event", false, body), requestHash("/events", false, body));
 * assert.equal(requestHash("/event", false, body).length, 22);
 * ```
 */
export function requestHash(route: string, ndjson: boolean, body: Uint8Array): string {
  return createHash("sha256").update(`POST ${route}\n${ndjson ? "ndjson" : "json"}\n`)
    .update(body).digest("base64url").slice(0, 22);
}

const ANSWER_HEADERS = { "content-type": "application/json; charset=utf-8" };
const REPLAY_HEADERS = { ...ANSWER_HEADERS, [IDEMPOTENT_REPLAYED_HEADER.toLowerCase()]: "true" };

/**
 * The 200 answer of a request sent with a key: its first answer, marked when it is replayed.
 *
 * @param body The answer's JSON body.
 * @param replayed Whether it repeats the key's first answer.
 * @returns The response.
 *
 * @example Usage
 * ```ts
 * import { keyedAnswer } from "./idempotent.ts";
 * import assert from "node:assert/strict";
 *
 * assert.equal(keyedAnswer("{}", true).headers.get("idempotent-replayed"), "true");
 * assert.equal(keyedAnswer("{}", false).headers.get("idempotent-replayed"), null);
 * ```
 */
export function keyedAnswer(body: string, replayed: boolean): Response {
  return new Response(body, { status: 200, headers: replayed ? REPLAY_HEADERS : ANSWER_HEADERS });
}
