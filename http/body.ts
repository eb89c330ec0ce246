/**
 * Request bodies within limits (docs/http-api.md): the declared or streamed length checked
 * against `--max-body`, the time it takes against `--body-timeout` (docs/operations.md), the
 * `Content-Type` against JSON and NDJSON, strict UTF-8, and the small unread rest a refusal
 * drains first.
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
import { BodyTimeoutError, HttpError, IncompleteBodyError } from "./problems.ts";

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

/**
 * Default request body timeout: 10 s from the request's head (`--body-timeout`,
 * docs/operations.md).
 *
 * @example Usage
 * ```ts
 * import { DEFAULT_BODY_TIMEOUT_MS } from "./body.ts";
 * import assert from "node:assert/strict";
 *
 * assert.equal(DEFAULT_BODY_TIMEOUT_MS, 10_000);
 * ```
 */
export const DEFAULT_BODY_TIMEOUT_MS = 10_000;

/** A body being read, and how to end its read. */
interface PendingBody {
  /** Epoch milliseconds after which the read ends. */
  at: number;
  abort: (reason: BodyTimeoutError) => void;
}

/**
 * The deadline of every request body being read (`--body-timeout`, docs/operations.md): a body
 * not received in full within the timeout of its head ends its read with a
 * {@linkcode BodyTimeoutError}, answered 408. `Deno.serve` has no such timeout: a sender of a
 * byte a second holds its connection for as long as its `Content-Length` says.
 *
 * One timer serves all the reads (a timer per request costs 3 to 4 µs, more than the rest of a
 * body's read), armed for the oldest pending deadline and unref'd, so it never keeps a process
 * alive: a read that only this timer could end is a server's, and its listener keeps the process
 * alive. A read that ends leaves the timer armed: at a steady load the reads come one after
 * another, and arming and clearing a timer for each cost about a tenth of an event's CPU (issue
 * 35, bench/RESULTS.md). When it fires with no read pending it is not armed again, so an idle
 * server holds at most one unref'd timer, for at most the timeout; once
 * {@linkcode BodyDeadlines.close} was called (a server's shutdown began), the last read to end
 * clears it, and a stopped server leaves none behind.
 *
 * @example Usage
 * ```ts
 * import { BodyDeadlines } from "./body.ts";
 * import { BodyTimeoutError } from "./problems.ts";
 * import assert from "node:assert/strict";
 *
 * const deadlines = new BodyDeadlines(50);
 * let timer: ReturnType<typeof setTimeout> | undefined;
 * const late = new Promise((resolve) => timer = setTimeout(resolve, 1000)); // a body 1 s late
 * await assert.rejects(deadlines.race(late), BodyTimeoutError);
 * clearTimeout(timer);
 * ```
 */
export class BodyDeadlines {
  /** The timeout, in milliseconds. */
  readonly timeoutMs: number;
  /** The reads in progress, oldest (so soonest deadline) first. */
  #pending = new Set<PendingBody>();
  #timer: ReturnType<typeof setTimeout> | undefined;
  /** Set by {@linkcode BodyDeadlines.close}: the timer goes as soon as no read is pending. */
  #closing = false;

  /**
   * Creates the deadlines of one listener's bodies.
   *
   * @param timeoutMs How long a body may take from its head.
   */
  constructor(timeoutMs: number = DEFAULT_BODY_TIMEOUT_MS) {
    this.timeoutMs = timeoutMs;
  }

  /**
   * Waits for a read that cannot be told to stop (`req.bytes()`), under the deadline counted from
   * now (a route reads its body as soon as the head passed the guards, which do not wait). The
   * cheapest wrap measured: 0.7 µs a request.
   *
   * @param reading The read.
   * @returns What the read returned.
   * @throws {BodyTimeoutError} When the deadline passed first; the read is then left to settle
   *   unobserved (it fails once the answer is sent).
   */
  race<T>(reading: Promise<T>): Promise<T> {
    return new Promise<T>((resolve, reject) => {
      const pending = this.#enter(reject);
      reading.then((value) => {
        this.#leave(pending);
        resolve(value);
      }, (err) => {
        this.#leave(pending);
        reject(err);
      });
    });
  }

  /**
   * Runs a read that ends when its signal aborts (`readAtMost()`), under the deadline counted
   * from now.
   *
   * @param read The read; when the deadline passes, its signal aborts with a
   *   {@linkcode BodyTimeoutError}, which the read throws.
   * @returns What the read returned.
   * @throws {BodyTimeoutError} When the deadline passed first.
   */
  async within<T>(read: (signal: AbortSignal) => Promise<T>): Promise<T> {
    const controller = new AbortController();
    const pending = this.#enter((reason) => controller.abort(reason));
    try {
      return await read(controller.signal);
    } finally {
      this.#leave(pending);
    }
  }

  /**
   * The server is stopping: from now on the timer is cleared as soon as no read is pending (at
   * once if none is), so that nothing of it outlives the server. Reads still go on under their
   * deadlines, and later reads arm it again as needed: called at once, the deadlines never keep
   * the timer between reads (for a listener whose reads are rare). Safe to call twice.
   */
  close(): void {
    this.#closing = true;
    if (this.#pending.size === 0) this.#clear();
  }

  /**
   * A read ended. The timer stays armed even with no read left: the next read's deadline is
   * later than the one it was armed for, and {@linkcode BodyDeadlines.#expire} arms it again for
   * that read, or not at all when none is pending. Once closing, the last read clears it.
   */
  #leave(pending: PendingBody): void {
    this.#pending.delete(pending);
    if (this.#closing && this.#pending.size === 0) this.#clear();
  }

  #clear(): void {
    if (this.#timer === undefined) return;
    clearTimeout(this.#timer);
    this.#timer = undefined;
  }

  #enter(abort: (reason: BodyTimeoutError) => void): PendingBody {
    const pending = { at: Date.now() + this.timeoutMs, abort };
    this.#pending.add(pending);
    if (this.#timer === undefined) this.#arm(pending.at);
    return pending;
  }

  #arm(at: number): void {
    const timer = setTimeout(() => this.#expire(), Math.max(0, at - Date.now()));
    Deno.unrefTimer(timer);
    this.#timer = timer;
  }

  /** Ends the reads whose deadline passed, then waits for the next one, if any. */
  #expire(): void {
    this.#timer = undefined;
    const now = Date.now();
    for (const pending of this.#pending) {
      if (pending.at > now) return this.#arm(pending.at);
      this.#pending.delete(pending);
      pending.abort(new BodyTimeoutError(this.timeoutMs));
    }
  }
}

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
async function readUndeclaredBody(
  req: Request,
  maxBody: number,
  signal: AbortSignal | undefined,
): Promise<Uint8Array> {
  if (req.body === null) return new Uint8Array(0);
  try {
    // The stream is cancelled past the bound, or when the body's deadline passes.
    return await readAtMost(req.body, maxBody, signal ? { signal } : {});
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
 * @param deadlines The body's deadline (`--body-timeout`); without it the read may take as long
 *   as the client does.
 * @returns The parsed JSON value, or the NDJSON text, and the body's bytes as received (what an
 *   `Idempotency-Key`'s hash covers).
 * @throws {HttpError} 415, 413 or 400 naming what to send instead.
 * @throws {BodyTimeoutError} 408 when the body did not arrive in full within the timeout.
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
export async function readJsonBody(
  req: Request,
  maxBody: number,
  allowNdjson = false,
  deadlines?: BodyDeadlines,
): Promise<{
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
    // bytes() onto its slow path: about 10 µs a request. Its deadline does not touch it: the
    // read is left behind, and fails once the answer is sent.
    if (declared !== undefined) {
      bytes = deadlines ? await deadlines.race(req.bytes()) : await req.bytes();
    } else {
      bytes = deadlines
        ? await deadlines.within((signal) => readUndeclaredBody(req, maxBody, signal))
        : await readUndeclaredBody(req, maxBody, undefined);
    }
  } catch (err) {
    throw bodyReadError(err);
  }
  if (bytes.length === 0) return { value: undefined, ndjson: undefined, bytes };
  const text = decodeText(bytes);
  if (isNdjson) return { value: undefined, ndjson: text, bytes };
  return { value: parseJson(text, "The body"), ndjson: undefined, bytes };
}

/**
 * Reads a JSON body that must be there (`POST /event`, the safety hub's `PUT`s): as
 * {@linkcode readJsonBody}, and an empty body is a 400 saying what to send.
 *
 * @param req The request.
 * @param maxBody The largest body accepted, in bytes.
 * @param deadlines The body's deadline (`--body-timeout`).
 * @param example What to send, for the 400: `a JSON object such as {...}`.
 * @returns The parsed JSON value, and the body's bytes as received.
 * @throws {HttpError} 400 for an empty body, and what {@linkcode readJsonBody} throws.
 *
 * @example Usage
 * ```ts
 * import { readRequiredJson } from "./body.ts";
 * import assert from "node:assert/strict";
 *
 * const req = new Request("http://localhost/safety/events", { method: "PUT" });
 * await assert.rejects(readRequiredJson(req, 1024, undefined, "a JSON array"), /The body is empty; send a JSON array\./);
 * ```
 */
export async function readRequiredJson(
  req: Request,
  maxBody: number,
  deadlines: BodyDeadlines | undefined,
  example: string,
): Promise<{ value: unknown; bytes: Uint8Array }> {
  const { value, bytes } = await readJsonBody(req, maxBody, false, deadlines);
  if (value === undefined) throw new HttpError(400, `The body is empty; send ${example}.`);
  return { value, bytes };
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

/**
 * Reads a request body of any content type as bytes, within the same limits as
 * {@linkcode readJsonBody}: a declared length over `maxBody` is refused before a byte is read, an
 * undeclared one is read up to the bound and no further, and the read ends at the body's
 * deadline. For the routes whose bodies are not JSON (line protocol, docs/http-api.md).
 *
 * @param req The request.
 * @param maxBody The largest body accepted, in bytes.
 * @param deadlines The body's deadline (`--body-timeout`).
 * @returns The body's bytes as received (empty when there is none).
 * @throws {HttpError} 413 when it is larger than `maxBody`, 400 when it ended early.
 * @throws {BodyTimeoutError} 408 when the body did not arrive in full within the timeout.
 *
 * @example Usage
 * ```ts
 * import { readBodyBytes } from "./body.ts";
 * import assert from "node:assert/strict";
 *
 * const req = new Request("http://localhost/write", { method: "POST", body: "roof open=t" });
 * assert.equal((await readBodyBytes(req, 1024)).length, 11);
 * await assert.rejects(readBodyBytes(new Request("http://localhost/write", { method: "POST", body: "x".repeat(20) }), 10), /larger than 10 bytes/);
 * ```
 */
export async function readBodyBytes(
  req: Request,
  maxBody: number,
  deadlines?: BodyDeadlines,
): Promise<Uint8Array> {
  const declared = contentLength(req);
  if (declared !== undefined && declared > maxBody) throw tooLarge(maxBody);
  try {
    if (declared !== undefined) {
      return deadlines ? await deadlines.race(req.bytes()) : await req.bytes();
    }
    return deadlines
      ? await deadlines.within((signal) => readUndeclaredBody(req, maxBody, signal))
      : await readUndeclaredBody(req, maxBody, undefined);
  } catch (err) {
    throw bodyReadError(err);
  }
}
