/**
 * Reading a source's bytes with a bound (docs/collect.md, "Faults"): a page or file larger than
 * the bound is refused as soon as the bound is passed, so a hostile or runaway source costs at
 * most the bound in memory.
 *
 * @module
 */

import { BoundExceededError, readAtMost } from "../../wire/bounded_read.ts";

/** The bound of a source's bytes unless its input sets `max_bytes`: 1 MiB. */
export const DEFAULT_MAX_BYTES = 1024 * 1024;

/**
 * Reads a stream to its end, or throws once it passes `max` bytes (the stream is cancelled).
 *
 * @param stream The bytes.
 * @param max The bound.
 * @param what What the bytes are, for the message (`the page at http://...`).
 * @returns The bytes.
 * @throws {RangeError} When the stream holds more than `max` bytes.
 *
 * @example Usage
 * ```ts
 * import { readBounded } from "./read_bounded.ts";
 * import assert from "node:assert/strict";
 *
 * const bytes = await readBounded(new Blob(["{}"]).stream(), 10, "a page");
 * assert.equal(bytes.length, 2);
 * await assert.rejects(readBounded(new Blob(["x".repeat(20)]).stream(), 10, "a page"), RangeError);
 * ```
 */
export async function readBounded(
  stream: ReadableStream<Uint8Array>,
  max: number,
  what: string,
): Promise<Uint8Array> {
  try {
    return await readAtMost(stream, max);
  } catch (err) {
    throw err instanceof BoundExceededError ? tooLarge(what, max) : err;
  }
}

/**
 * The error for a source over its bound.
 *
 * @param what The source.
 * @param max The bound.
 * @returns The error, whose message says which key raises the bound.
 *
 * @example Usage
 * ```ts
 * import { tooLarge } from "./read_bounded.ts";
 * import assert from "node:assert/strict";
 *
 * assert.match(tooLarge("the page", 10).message, /max_bytes/);
 * ```
 */
export function tooLarge(what: string, max: number): RangeError {
  return new RangeError(
    `${what} is larger than ${max} bytes; refused (raise "max_bytes" if it is really that large)`,
  );
}
