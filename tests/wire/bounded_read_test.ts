import assert from "node:assert/strict";
import { gzipSync } from "node:zlib";
import {
  BoundExceededError,
  concatBytes,
  gunzipAtMost,
  readAtMost,
} from "../../wire/bounded_read.ts";

const bytes = (text: string): Uint8Array => new TextEncoder().encode(text);

/** A stream of `chunks` pulled one at a time, which records how far it was read and cancelled. */
function chunked(chunks: readonly Uint8Array[]): {
  stream: ReadableStream<Uint8Array>;
  pulled: () => number;
  cancelled: () => boolean;
} {
  let next = 0;
  let cancelled = false;
  const stream = new ReadableStream<Uint8Array>({
    pull(controller) {
      const chunk = chunks[next++];
      if (chunk === undefined) controller.close();
      else controller.enqueue(chunk);
    },
    cancel() {
      cancelled = true;
    },
  }, { highWaterMark: 0 });
  return { stream, pulled: () => next, cancelled: () => cancelled };
}

Deno.test("readAtMost returns every byte of a stream within the bound, in order", async () => {
  const { stream } = chunked([bytes("ab"), bytes("cd"), bytes("e")]);
  assert.equal(new TextDecoder().decode(await readAtMost(stream, 10)), "abcde");
});

Deno.test("readAtMost accepts a stream of exactly the bound", async () => {
  const { stream } = chunked([bytes("abc"), bytes("de")]);
  assert.equal((await readAtMost(stream, 5)).length, 5);
});

Deno.test("readAtMost returns no bytes for an empty stream", async () => {
  const { stream } = chunked([]);
  assert.equal((await readAtMost(stream, 5)).length, 0);
});

Deno.test("readAtMost returns the one chunk of a stream without copying it", async () => {
  const only = bytes("{}");
  const { stream } = chunked([only]);
  assert.equal(await readAtMost(stream, 5), only);
});

Deno.test("readAtMost throws a BoundExceededError naming the bound once a stream passes it", async () => {
  const { stream } = chunked([bytes("abc"), bytes("def")]);
  await assert.rejects(
    readAtMost(stream, 5),
    (err) => err instanceof BoundExceededError && err.bound === 5 && /5 bytes/.test(err.message),
  );
});

Deno.test("readAtMost cancels a stream as soon as the bound is passed, reading no further chunk", async () => {
  const source = chunked([bytes("abc"), bytes("def"), bytes("ghi"), bytes("jkl")]);
  await assert.rejects(readAtMost(source.stream, 5), BoundExceededError);
  assert.equal(source.cancelled(), true);
  assert.equal(source.pulled(), 2);
});

Deno.test("readAtMost passes on a stream's own error and leaves the stream unlocked", async () => {
  const stream = new ReadableStream<Uint8Array>({
    pull(controller) {
      controller.error(new TypeError("the sender went away"));
    },
  });
  await assert.rejects(readAtMost(stream, 5), {
    name: "TypeError",
    message: "the sender went away",
  });
  assert.equal(stream.locked, false);
});

Deno.test("readAtMost leaves a stream unlocked after passing its bound", async () => {
  const { stream } = chunked([bytes("abcdef")]);
  await assert.rejects(readAtMost(stream, 5), BoundExceededError);
  assert.equal(stream.locked, false);
});

Deno.test("readAtMost ends a read when its signal aborts, with the signal's reason, cancelling the stream", async () => {
  let cancelled: unknown;
  let pulls = 0;
  // A sender that sends one chunk, then nothing: the read waits until the signal aborts.
  const stream = new ReadableStream<Uint8Array>({
    pull(controller) {
      if (pulls++ === 0) controller.enqueue(bytes("ab"));
      return new Promise(() => {}); // never more
    },
    cancel(reason) {
      cancelled = reason;
    },
  }, { highWaterMark: 0 });
  const controller = new AbortController();
  const late = new Error("the body is late");
  const reading = readAtMost(stream, 10, { signal: controller.signal });
  // Held open by a timer, as a server's listener holds the process open.
  await new Promise((r) => setTimeout(r, 10));
  controller.abort(late);
  await assert.rejects(reading, (err) => err === late);
  assert.equal(cancelled, late);
  assert.equal(stream.locked, false);
});

Deno.test("readAtMost reads nothing from a stream when its signal has already aborted", async () => {
  const source = chunked([bytes("ab")]);
  const late = new Error("the body is late");
  await assert.rejects(
    readAtMost(source.stream, 10, { signal: AbortSignal.abort(late) }),
    (err) => err === late,
  );
  assert.equal(source.pulled(), 0);
});

Deno.test("BoundExceededError is a RangeError that says its bound", () => {
  const err = new BoundExceededError(16384);
  assert.ok(err instanceof RangeError);
  assert.equal(err.name, "BoundExceededError");
  assert.equal(err.bound, 16384);
  assert.match(err.message, /more than 16384 bytes/);
});

Deno.test("concatBytes joins chunks into one array, in order", () => {
  const joined = concatBytes([bytes("ab"), bytes(""), bytes("cde")]);
  assert.equal(new TextDecoder().decode(joined), "abcde");
});

Deno.test("concatBytes returns an empty array for no chunks", () => {
  assert.equal(concatBytes([]).length, 0);
});

Deno.test("gunzipAtMost() inflates a gzip member up to its bound", async () => {
  const text = "weather wind_mps=2.1\n".repeat(1000);
  assert.equal(new TextDecoder().decode(await gunzipAtMost(gzipSync(text), text.length)), text);
  await assert.rejects(gunzipAtMost(gzipSync(text), text.length - 1), BoundExceededError);
});

Deno.test("gunzipAtMost() stops a bomb at its bound, inflating little more than the bound", async () => {
  const bomb = gzipSync(new Uint8Array(64 * 1024 * 1024));
  const before = Deno.memoryUsage().rss;
  await assert.rejects(
    gunzipAtMost(bomb, 1024 * 1024),
    (err) => err instanceof BoundExceededError && err.bound === 1024 * 1024,
  );
  const grown = Deno.memoryUsage().rss - before;
  assert.ok(grown < 32 * 1024 * 1024, `grew by ${grown} bytes`);
});

Deno.test("gunzipAtMost() rejects bytes that are not one gzip member, and a cut one, with a TypeError", async () => {
  await assert.rejects(gunzipAtMost(bytes("not gzip at all"), 100), TypeError);
  await assert.rejects(gunzipAtMost(new Uint8Array(0), 100), TypeError);
  const two = concatBytes([gzipSync("a f=1\n"), gzipSync("b f=2\n")]);
  await assert.rejects(gunzipAtMost(two, 100), TypeError);
  const gz = gzipSync("x".repeat(10_000));
  await assert.rejects(gunzipAtMost(gz.subarray(0, gz.length - 8), 100_000), TypeError);
});
