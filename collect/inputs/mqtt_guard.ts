/**
 * The size bound of the `mqtt` input (docs/collect.md): a filter on the bytes a broker sends,
 * in front of the MQTT client's parser, so that no packet larger than the bound is ever held in
 * memory. A PUBLISH over the bound is passed on with its topic and packet id (so the client still
 * acknowledges it, QoS 1) and its payload replaced by a short marker naming the size; its payload
 * bytes are skipped as they arrive. Any other packet over the bound is a broken broker: the
 * filter throws and the connection is dropped.
 *
 * The filter speaks MQTT 3.1.1 (the `mqtt` input's protocol version): fixed header, remaining
 * length as a variable byte integer, PUBLISH's topic and packet id.
 *
 * @module
 */

const PUBLISH = 3;

/** The start of the payload that stands for one over the bound; the size follows in ASCII. */
const MARKER = new TextEncoder().encode("\u0000obs-telemetry:oversized:");

/**
 * The size of the payload an oversized PUBLISH had, when `payload` is the guard's marker;
 * otherwise `undefined`.
 *
 * @example
 * ```ts
 * import { oversizedPayload } from "./mqtt_guard.ts";
 * import assert from "node:assert/strict";
 * assert.equal(oversizedPayload(new TextEncoder().encode("12.5")), undefined);
 * ```
 */
export function oversizedPayload(payload: Uint8Array): number | undefined {
  if (payload.length <= MARKER.length || payload.length > MARKER.length + 16) return undefined;
  for (let i = 0; i < MARKER.length; i++) if (payload[i] !== MARKER[i]) return undefined;
  const size = Number(new TextDecoder().decode(payload.subarray(MARKER.length)));
  return Number.isSafeInteger(size) ? size : undefined;
}

/** The bytes of an MQTT variable byte integer. */
function varint(n: number): number[] {
  const out: number[] = [];
  do {
    let byte = n % 128;
    n = Math.floor(n / 128);
    if (n > 0) byte |= 0x80;
    out.push(byte);
  } while (n > 0);
  return out;
}

type State =
  | { at: "header" }
  | { at: "length"; first: number; value: number; mul: number; count: number }
  | { at: "pass"; left: number }
  | { at: "head"; first: number; total: number; need: number; got: number[] }
  | { at: "skip"; left: number };

/**
 * Filters the byte stream a broker sends (see the module documentation); push each chunk in,
 * pass what comes out to the MQTT parser.
 *
 * @example
 * ```ts
 * import { MqttSizeGuard } from "./mqtt_guard.ts";
 * import assert from "node:assert/strict";
 * const guard = new MqttSizeGuard(1024);
 * const pingresp = new Uint8Array([0xd0, 0]);
 * assert.deepEqual(guard.push(pingresp), [pingresp]);
 * ```
 */
export class MqttSizeGuard {
  #limit: number;
  #state: State = { at: "header" };

  /** @param limit The largest packet (remaining length, bytes) passed on whole. */
  constructor(limit: number) {
    this.#limit = limit;
  }

  /**
   * Takes the next bytes from the broker and returns the bytes to parse. Throws when a packet
   * other than PUBLISH is over the bound or the stream is not MQTT.
   */
  push(chunk: Uint8Array): Uint8Array[] {
    const out: Uint8Array[] = [];
    let i = 0;
    while (i < chunk.length) {
      const s = this.#state;
      if (s.at === "pass" || s.at === "skip") {
        const n = Math.min(s.left, chunk.length - i);
        if (s.at === "pass") out.push(chunk.subarray(i, i + n));
        s.left -= n;
        i += n;
        if (s.left === 0) this.#state = { at: "header" };
      } else if (s.at === "header") {
        this.#state = { at: "length", first: chunk[i++]!, value: 0, mul: 1, count: 0 };
      } else if (s.at === "length") {
        const byte = chunk[i++]!;
        s.value += (byte & 0x7f) * s.mul;
        s.mul *= 128;
        s.count++;
        if (byte & 0x80) {
          if (s.count === 4) throw new Error("the broker sent a malformed MQTT packet length");
          continue;
        }
        this.#begin(s.first, s.value, out);
      } else {
        s.got.push(chunk[i++]!);
        if (s.got.length === 2) {
          s.need = 2 + ((s.got[0]! << 8) | s.got[1]!) + this.#idBytes(s);
          if (s.need > s.total) throw new Error("the broker sent a malformed MQTT PUBLISH");
        }
        if (s.got.length === s.need) this.#rewrite(s, out);
      }
    }
    return out;
  }

  #idBytes(s: { first: number }): number {
    return ((s.first >> 1) & 3) > 0 ? 2 : 0;
  }

  #begin(first: number, length: number, out: Uint8Array[]): void {
    if (length <= this.#limit) {
      out.push(new Uint8Array([first, ...varint(length)]));
      this.#state = length === 0 ? { at: "header" } : { at: "pass", left: length };
      return;
    }
    if (first >> 4 !== PUBLISH) {
      throw new Error(`the broker sent an MQTT packet of ${length} bytes, over ${this.#limit}`);
    }
    this.#state = { at: "head", first, total: length, need: 2, got: [] };
  }

  /** Passes on an oversized PUBLISH's topic and packet id with the marker as its payload. */
  #rewrite(s: { first: number; total: number; got: number[] }, out: Uint8Array[]): void {
    const payloadSize = s.total - s.got.length;
    const marker = [...MARKER, ...new TextEncoder().encode(String(payloadSize))];
    const length = s.got.length + marker.length;
    out.push(new Uint8Array([s.first, ...varint(length), ...s.got, ...marker]));
    this.#state = payloadSize > 0 ? { at: "skip", left: payloadSize } : { at: "header" };
  }
}
