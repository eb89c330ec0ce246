/**
 * Request bodies within limits (docs/http-api.md): the declared or streamed length checked
 * against `--max-body`, the `Content-Type` against JSON and NDJSON, strict UTF-8, and the small
 * unread rest a refusal drains first.
 *
 * @example Usage
 * ```ts
 * import { parseNdjson } from "./body.ts";
 * import assert from "node:assert/strict";
 *
 * assert.deepEqual(parseNdjson('{"a":1}\r\n\n2\n'), [{ a: 1 }, 2]);
 * ```
 *
 * @module
 */

import { DEFAULT_BODY_BYTES } from "../wire/event_value.ts";
import { BoundExceededError, readAtMost } from "../wire/bounded_read.ts";

import { errorText } from "../core/errors.ts";
import { LineSplitter } from "../wire/ndjson.ts";
import { HttpError, IncompleteBodyError } from "./problems.ts";

/**
 * Default request body limit: 1 MiB (docs/http-api.md).
 *
 * @example Usage
 * ```ts
 * import { DEFAULT_MAX_BODY } from "./body.ts";
 * import assert from "node:assert/strict";
 *
 * assert.equal(DEFAULT_MAX_BODY, 1048576);
 * ```
 */
export const DEFAULT_MAX_BODY: number = DEFAULT_BODY_BYTES;

const JSON_TYPE = /^application\/(?:[\w.+-]+\+)?json\s*(?:;|$)/i;
const NDJSON_TYPE = /^application\/(?:x-)?ndjson\s*(?:;|$)/i;
const strictUtf8 = new TextDecoder("utf-8", { fatal: true });
const PLAIN_LENGTH = /^\d{1,15}$/;

/**
 * The declared body length, or `undefined` when there is none or it is not one plain number
 * (repeated headers arrive joined as "31, 31"): such bodies take the streamed, limited path.
 */
function contentLength(req: Request): number | undefined {
  const raw = req.headers.get("content-length");
  if (raw === null) return undefined;
  if (PLAIN_LENGTH.test(raw)) return Number(raw); // the usual case, without splitting
  const values = new Set(raw.split(",").map((v) => v.trim()));
  const [only] = values;
  return values.size === 1 && only !== undefined && PLAIN_LENGTH.test(only)
    ? Number(only)
    : undefined;
}

/**
 * A body that ends before its Content-Length, or a chunked body cut mid-chunk, is the client's
 * fault: Deno reports it as BadResource (or Http), which must not become a 500.
 */
function bodyReadError(err: unknown): unknown {
  return err instanceof Deno.errors.BadResource || err instanceof Deno.errors.Http
    ? new IncompleteBodyError(
      400,
      "The request body ended before it was complete; send the whole body, with a Content-Length that matches it.",
    )
    : err;
}

/** A body without a declared length, read in chunks up to `maxBody` bytes. */
async function readUndeclaredBody(req: Request, maxBody: number): Promise<Uint8Array> {
  if (req.body === null) return new Uint8Array(0);
  try {
    return await readAtMost(req.body, maxBody); // the stream is cancelled past the bound
  } catch (err) {
    throw err instanceof BoundExceededError ? tooLarge(maxBody) : err;
  }
}

function tooLarge(maxBody: number): HttpError {
  return new HttpError(
    413,
    `The request body is larger than ${maxBody} bytes; split it into smaller batches (or have the operator raise --max-body).`,
  );
}

function decodeText(bytes: Uint8Array): string {
  try {
    return strictUtf8.decode(bytes);
  } catch {
    throw new HttpError(400, "The body is not valid UTF-8; send JSON encoded as UTF-8.");
  }
}

function parseJson(text: string, what: string): unknown {
  try {
    return JSON.parse(text);
  } catch (err) {
    throw new HttpError(400, `${what} is not valid JSON (${errorText(err)}); send a JSON value.`);
  }
}

/**
 * Reads a POST body that may be empty: `undefined` when there is none. The `Content-Type` is
 * checked before a byte is read, the length before the body is buffered.
 *
 * @param req The request.
 * @param maxBody The largest body accepted, in bytes.
 * @param allowNdjson Also accept `application/x-ndjson`, returned as text in `ndjson`.
 * @returns The parsed JSON value, or the NDJSON text, and the body's bytes as received (what an
 *   `Idempotency-Key`'s hash covers).
 * @throws {HttpError} 415, 413 or 400 naming what to send instead.
 *
 * @example Usage
 * ```ts
 * import { readJsonBody } from "./body.ts";
 * import assert from "node:assert/strict";
 *
 * const req = new Request("http://localhost/event", {
 *   method: "POST",
 *   headers: { "content-type": "application/json" },
 *   body: '{"type":"weather","data":{}}',
 * });
 * assert.deepEqual((await readJsonBody(req, 1024)).value, { type: "weather", data: {} });
 * ```
 */
export async function readJsonBody(req: Request, maxBody: number, allowNdjson = false): Promise<{
  value: unknown;
  ndjson: string | undefined;
  bytes: Uint8Array;
}> {
  const contentType = req.headers.get("content-type") ?? "";
  const isNdjson = allowNdjson && NDJSON_TYPE.test(contentType);
  // Refuse a non-JSON body before reading it, so a large form post is not buffered first.
  const declared = contentLength(req);
  // HTTP/1.1 has a body only with Content-Length or Transfer-Encoding (`curl -X POST` sends
  // neither), while Deno hands every POST a body stream.
  const hasBody = declared === undefined
    ? req.headers.has("transfer-encoding") || req.headers.has("content-length")
    : declared > 0;
  if (hasBody && !isNdjson && !JSON_TYPE.test(contentType)) {
    throw new HttpError(
      415,
      `Content-Type ${
        JSON.stringify(contentType || "(none)")
      } is not accepted; send the body as application/json${
        allowNdjson ? " or application/x-ndjson" : ""
      }.`,
    );
  }
  if (declared !== undefined && declared > maxBody) {
    // Not read, and not cancelled (see drainSmallBody).
    throw tooLarge(maxBody);
  }
  let bytes: Uint8Array;
  try {
    // With a declared length the HTTP layer delivers exactly that many bytes, so the native
    // whole-body read is safe. Touching `req.body` first would build a ReadableStream and push
    // bytes() onto its slow path: about 10 µs a request.
    bytes = declared !== undefined ? await req.bytes() : await readUndeclaredBody(req, maxBody);
  } catch (err) {
    throw bodyReadError(err);
  }
  if (bytes.length === 0) return { value: undefined, ndjson: undefined, bytes };
  const text = decodeText(bytes);
  if (isNdjson) return { value: undefined, ndjson: text, bytes };
  return { value: parseJson(text, "The body"), ndjson: undefined, bytes };
}

/**
 * Parses an `application/x-ndjson` body: one JSON value per line, `"\n"` or `"\r\n"` line
 * breaks, blank lines skipped, the last line with or without a line break.
 *
 * @param text The decoded body.
 * @returns The values, in order.
 * @throws {HttpError} 400 naming the 1-based line (blank lines counted) and 0-based item of the
 * first value that is not JSON.
 *
 * @example Usage
 * ```ts
 * import { parseNdjson } from "./body.ts";
 * import assert from "node:assert/strict";
 *
 * assert.deepEqual(parseNdjson("1\n\n2"), [1, 2]);
 * ```
 */
export function parseNdjson(text: string): unknown[] {
  return parseNdjsonLines(text).items;
}

/**
 * Parses an `application/x-ndjson` body like {@linkcode parseNdjson}, and also says on which
 * 1-based line (blank lines counted) each value stood, so item errors can name the line.
 *
 * @param text The decoded body.
 * @returns The values and their line numbers, in order.
 * @throws {HttpError} 400 naming the line and item of the first value that is not JSON.
 *
 * @example Usage
 * ```ts
 * import { parseNdjsonLines } from "./body.ts";
 * import assert from "node:assert/strict";
 *
 * assert.deepEqual(parseNdjsonLines("1\n\n2"), { items: [1, 2], lines: [1, 3] });
 * ```
 */
export function parseNdjsonLines(text: string): { items: unknown[]; lines: number[] } {
  const items: unknown[] = [];
  const lines: number[] = [];
  const onLine = (line: string, lineNo: number) => {
    if (line.trim() === "") return;
    let item: unknown;
    try {
      item = JSON.parse(line);
    } catch {
      // Parsed again for its message: the line's name is built only for a refusal.
      parseJson(line, `Line ${lineNo} (item ${items.length}, 0-based)`);
    }
    items.push(item);
    lines.push(lineNo);
  };
  const splitter = new LineSplitter();
  splitter.push(text, onLine);
  splitter.end(onLine);
  return { items, lines };
}

/** The most of an unread body that is read (and dropped) before a refusal is answered. */
const DRAIN_BYTES = 64 * 1024;
/** The longest a refusal waits for that body. */
const DRAIN_MS = 1000;

/**
 * Reads and drops the rest of a small request body before a refusal (401, 403, 400...) is sent.
 * Over HTTP/2 (TLS) an answer sent while the client is still sending makes Deno reset the
 * stream, and the client sees a framing error instead of the 401; a cancelled body does the
 * same. A body declared larger than 64 KiB, or slower than a second, is left alone (HTTP/1.1
 * then closes the connection after the answer).
 *
 * @param req The refused request.
 * @returns Once the body is read, or left alone.
 *
 * @example Usage
 * ```ts
 * import { drainSmallBody } from "./body.ts";
 *
 * const req = new Request("http://localhost/event", { method: "POST", body: "{}" });
 * await drainSmallBody(req); // before answering 401 to it
 * ```
 */
export async function drainSmallBody(req: Request): Promise<void> {
  if (req.body === null || req.bodyUsed) return;
  const declared = Number(req.headers.get("content-length") ?? NaN);
  if (Number.isFinite(declared) && declared > DRAIN_BYTES) return;
  let reader: ReadableStreamDefaultReader<Uint8Array>;
  try {
    reader = req.body.getReader();
  } catch {
    return; // locked: a route is reading it
  }
  let timer: ReturnType<typeof setTimeout> | undefined;
  const timeout = new Promise<"timeout">((r) => (timer = setTimeout(() => r("timeout"), DRAIN_MS)));
  try {
    for (let read = 0; read <= DRAIN_BYTES;) {
      const next = await Promise.race([reader.read(), timeout]);
      if (next === "timeout" || next.done) return;
      read += next.value.byteLength;
    }
  } catch {
    // the client went away: nothing to answer
  } finally {
    clearTimeout(timer);
    reader.releaseLock();
  }
}
