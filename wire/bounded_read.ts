/**
 * Reading a stream of bytes with a bound: a request body, a page, an answer. The read stops, and
 * the stream is cancelled, as soon as the bound is passed, so a hostile or runaway sender costs at
 * most the bound in memory; a signal ends it the same way when the bytes are too slow (a request
 * body's deadline). Each caller turns {@linkcode BoundExceededError} into its own answer
 * (an HTTP 413, an Alpaca 400, a collector's refusal). {@linkcode concatBytes} joins the chunks
 * read, and the live stream's batches too. Web APIs only.
 *
 * @module
 */

/**
 * The error of a stream that held more bytes than its bound.
 *
 * @example Usage
 * ```ts
 * import { BoundExceededError } from "./bounded_read.ts";
 * import assert from "node:assert/strict";
 *
 * const err = new BoundExceededError(1024);
 * assert.equal(err.bound, 1024);
 * assert.match(err.message, /1024 bytes/);
 * ```
 */
export class BoundExceededError extends RangeError {
  /** The bound that was passed, in bytes. */
  readonly bound: number;

  /**
   * Makes the error of a stream over `bound` bytes.
   *
   * @param bound The bound that was passed, in bytes.
   *
   * @example Usage
   * ```ts
   * import { BoundExceededError } from "./bounded_read.ts";
   * import assert from "node:assert/strict";
   *
   * assert.equal(new BoundExceededError(16).name, "BoundExceededError");
   * ```
   */
  constructor(bound: number) {
    super(`the stream holds more than ${bound} bytes; reading stopped at the bound`);
    this.name = "BoundExceededError";
    this.bound = bound;
  }
}

/** What {@linkcode readAtMost} is given besides the stream and its bound. */
export interface ReadAtMostOptions {
  /**
   * Ends the read when aborted: the stream is cancelled, the bytes already read are dropped, and
   * the read throws the signal's reason (a deadline: a request body that is too slow).
   */
  signal?: AbortSignal;
}

/**
 * Reads a stream to its end, or throws as soon as it has passed `max` bytes; the stream is then
 * cancelled, and the bytes already read are dropped. A stream of one chunk is returned without a
 * copy. With a `signal`, the read also ends when it aborts, the same way.
 *
 * @param stream The bytes.
 * @param max The bound: the most bytes accepted.
 * @param options The signal that ends the read early.
 * @returns All the bytes of the stream.
 * @throws {BoundExceededError} When the stream holds more than `max` bytes.
 * @throws {unknown} The signal's reason, when it aborted before the stream ended.
 *
 * @example Usage
 * ```ts
 * import { BoundExceededError, readAtMost } from "./bounded_read.ts";
 * import assert from "node:assert/strict";
 *
 * const bytes = await readAtMost(new Blob(["{}"]).stream(), 10);
 * assert.equal(bytes.length, 2);
 * await assert.rejects(
 *   readAtMost(new Blob(["x".repeat(20)]).stream(), 10),
 *   (err) => err instanceof BoundExceededError && err.bound === 10,
 * );
 * ```
 *
 * @example A deadline
 * ```ts
 * import { readAtMost } from "./bounded_read.ts";
 * import assert from "node:assert/strict";
 *
 * const never = new ReadableStream<Uint8Array>(); // a sender that never sends
 * const late = new Error("too slow");
 * const controller = new AbortController();
 * const reading = readAtMost(never, 10, { signal: controller.signal });
 * controller.abort(late);
 * await assert.rejects(reading, (err) => err === late);
 * ```
 */
export async function readAtMost(
  stream: ReadableStream<Uint8Array>,
  max: number,
  options: ReadAtMostOptions = {},
): Promise<Uint8Array> {
  const { signal } = options;
  signal?.throwIfAborted();
  const reader = stream.getReader();
  // A cancelled stream ends its pending read as done: the loop below then throws the reason.
  const onAbort = () => void reader.cancel(signal?.reason).catch(() => {});
  signal?.addEventListener("abort", onAbort, { once: true });
  const chunks: Uint8Array[] = [];
  let size = 0;
  try {
    while (true) {
      const { done, value } = await reader.read();
      signal?.throwIfAborted();
      if (done) break;
      size += value.length;
      if (size > max) {
        await reader.cancel().catch(() => {});
        throw new BoundExceededError(max);
      }
      chunks.push(value);
    }
  } finally {
    signal?.removeEventListener("abort", onAbort);
    reader.releaseLock();
  }
  return concatBytes(chunks);
}

/**
 * Joins chunks of bytes into one array, in order; one chunk is returned as it is, without a copy.
 *
 * @param parts The chunks.
 * @returns Their bytes, one after the other.
 *
 * @example Usage
 * ```ts
 * import { concatBytes } from "./bounded_read.ts";
 * import assert from "node:assert/strict";
 *
 * const joined = concatBytes([new Uint8Array([1, 2]), new Uint8Array([3])]);
 * assert.deepEqual([...joined], [1, 2, 3]);
 * ```
 */
export function concatBytes(parts: readonly Uint8Array[]): Uint8Array {
  if (parts.length === 1) return parts[0]!;
  let size = 0;
  for (const part of parts) size += part.byteLength;
  const out = new Uint8Array(size);
  let at = 0;
  for (const part of parts) {
    out.set(part, at);
    at += part.byteLength;
  }
  return out;
}

/**
 * The compressed bytes handed to the decompressor at a time. A decompressor inflates each piece
 * it is given in full before the bound is looked at, and deflate inflates at most 1,032 times:
 * 1 KiB pieces keep what a gzip bomb makes between two looks near 1 MiB.
 */
const GZIP_PIECE = 1024;

/**
 * Inflates a gzip body with a bound on what it inflates to: the inflation stops as soon as the
 * output passes `max` bytes, so a gzip bomb costs about the bound in memory and time, never its
 * full size. Web APIs only (`DecompressionStream`).
 *
 * @param gzipped The gzip bytes: one member, as every InfluxDB client sends (the runtime's
 *   decompressor takes no second member).
 * @param max The bound: the most inflated bytes accepted.
 * @returns The inflated bytes.
 * @throws {BoundExceededError} When the bytes inflate to more than `max`.
 * @throws {TypeError} When the bytes are not one valid gzip member (the decompressor's error).
 *
 * @example Usage
 * ```ts
 * import { BoundExceededError, gunzipAtMost } from "./bounded_read.ts";
 * import assert from "node:assert/strict";
 * import { gzipSync } from "node:zlib";
 *
 * const text = "weather wind_mps=2.1\n";
 * const inflated = await gunzipAtMost(gzipSync(text), 1024);
 * assert.equal(new TextDecoder().decode(inflated), text);
 * const bomb = gzipSync(new Uint8Array(10 * 1024 * 1024)); // 10 KB that inflate to 10 MiB
 * await assert.rejects(gunzipAtMost(bomb, 1024 * 1024), BoundExceededError);
 * ```
 */
export async function gunzipAtMost(gzipped: Uint8Array, max: number): Promise<Uint8Array> {
  let at = 0;
  const pieces = new ReadableStream<Uint8Array<ArrayBuffer>>({
    pull(controller) {
      if (at >= gzipped.length) return controller.close();
      // A body's bytes are never a SharedArrayBuffer's.
      controller.enqueue(gzipped.subarray(at, at + GZIP_PIECE) as Uint8Array<ArrayBuffer>);
      at += GZIP_PIECE;
    },
  }, { highWaterMark: 0 });
  return await readAtMost(pieces.pipeThrough(new DecompressionStream("gzip")), max);
}
