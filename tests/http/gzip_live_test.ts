/**
 * gzip for shared live bytes (`http/gzip_live.ts`): pieces compressed once decode in any order of
 * concatenation a client is sent them, with a standard decoder, and the header check follows
 * RFC 9110's `Accept-Encoding` rules.
 * @module
 */
import assert from "node:assert/strict";
import { Buffer } from "node:buffer";
import { gunzipSync } from "node:zlib";
import { acceptsGzip, deflatePiece, GzipMember } from "../../http/gzip_live.ts";
import { Rng, seedFromEnv } from "../_shared/fault_util.ts";

const encoder = new TextEncoder();

/** Decodes with the web platform's gzip decoder, as browsers and `fetch` do. */
async function webGunzip(parts: Uint8Array[]): Promise<Uint8Array> {
  const body = ReadableStream.from(parts as Uint8Array<ArrayBuffer>[]).pipeThrough(
    new DecompressionStream("gzip"),
  );
  return await new Response(body).bytes();
}

Deno.test("shared pieces framed per client decode to exactly what each client was sent", async () => {
  const seed = seedFromEnv(20261125);
  const rng = new Rng(seed);
  // A pool of pieces, as fan-outs make them: some telemetry-like text, some random bytes.
  const pool = Array.from({ length: 12 }, (_, i) => {
    const plain = i % 3 === 0 ? rng.bytes(rng.int(0, 3000)) : encoder.encode(
      `event: telemetry\nid: site:${i}\ndata: {"seq":${i},"type":"t${rng.int(0, 9)}"}\n\n`
        .repeat(rng.int(1, 400)),
    );
    return { plain, deflated: deflatePiece(plain) };
  });
  for (let client = 0; client < 20; client++) {
    const member = new GzipMember();
    const sent: Uint8Array[] = [];
    const wire: Uint8Array[] = [];
    for (let n = rng.int(0, 15); n > 0; n--) {
      const piece = rng.pick(pool);
      sent.push(piece.plain);
      wire.push(member.next(piece.plain, piece.deflated));
    }
    wire.push(member.end());
    const expected = new Uint8Array(Buffer.concat(sent));
    assert.deepEqual(new Uint8Array(gunzipSync(Buffer.concat(wire))), expected, `seed ${seed}`);
    assert.deepEqual(await webGunzip(wire), expected, `seed ${seed}`);
  }
});

Deno.test("a piece decodes completely before the member's end arrives", async () => {
  const text = 'event: run\ndata: {"run_id":"001"}\n\n';
  const plain = encoder.encode(text);
  const member = new GzipMember();
  const { readable, writable } = new DecompressionStream("gzip");
  const writer = writable.getWriter() as WritableStreamDefaultWriter<Uint8Array>;
  const reader = readable.pipeThrough(new TextDecoderStream()).getReader();
  const wrote = writer.write(member.next(plain, deflatePiece(plain)));
  // Nothing more is written until the whole piece came out of the decoder.
  let got = "";
  while (got.length < text.length) {
    const { value, done } = await reader.read();
    assert.ok(!done, "the decoder ended early");
    got += value;
  }
  assert.equal(got, text);
  await wrote;
  const rest = (async () => {
    let tail = "";
    for (let r = await reader.read(); !r.done; r = await reader.read()) tail += r.value;
    return tail;
  })();
  await writer.write(member.end());
  await writer.close();
  assert.equal(await rest, "");
});

Deno.test("a member ended before any piece is a valid empty gzip body", () => {
  assert.equal(gunzipSync(new GzipMember().end()).byteLength, 0);
});

Deno.test("a corrupted trailer is caught by the decoder's CRC check", () => {
  const plain = encoder.encode("data: x\n\n");
  const member = new GzipMember();
  const wire = Buffer.concat([member.next(plain, deflatePiece(plain)), member.end()]);
  wire[wire.byteLength - 6]! ^= 1;
  assert.throws(() => gunzipSync(wire), /check|crc/i);
});

Deno.test("acceptsGzip() follows the Accept-Encoding rules of RFC 9110", () => {
  const cases: [string | null, boolean][] = [
    [null, false],
    ["", false],
    ["identity", false],
    ["gzip", true],
    ["GZIP", true],
    ["x-gzip", true],
    ["gzip, deflate, br, zstd", true],
    ["br;q=1.0, gzip;q=0.8", true],
    ["gzip;q=0", false],
    ["gzip; q=0.000", false],
    ["*", true],
    ["*;q=0", false],
    ["*, gzip;q=0", false],
    ["gzip;q=0, *", false],
    ["br, *;q=0.1", true],
    ["deflate", false],
    ["gzipx", false],
  ];
  for (const [header, expected] of cases) {
    assert.equal(acceptsGzip(header), expected, `Accept-Encoding: ${header}`);
  }
});
