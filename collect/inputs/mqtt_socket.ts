/**
 * The one connection to an MQTT broker of this package (docs/collect.md, "MQTT"): MQTT.js
 * (`npm:mqtt`), loaded on first use, over a `Deno.Conn` whose incoming bytes pass the size guard.
 * The collector's `mqtt` input subscribes through it and the publisher publishes through it
 * (docs/publish.md); nothing else loads MQTT.js.
 *
 * @module
 */

import { Duplex } from "node:stream";
import { concatBytes } from "../../wire/bounded_read.ts";
import { MqttSizeGuard } from "./mqtt_guard.ts";

/** The MQTT.js module. */
export type MqttModule = typeof import("npm:mqtt@^5.14.1");

/**
 * The connection to the broker as the stream MQTT.js reads and writes: a `Deno.Conn` (Deno's
 * own socket, under the program's `--allow-net`, one layer fewer than `node:net`) whose
 * incoming bytes pass the size guard ({@linkcode MqttSizeGuard}) first.
 *
 * @example A stream for MQTT.js
 * ```ts ignore
 * import { GuardedSocket } from "./mqtt_socket.ts";
 * const socket = new GuardedSocket(() => Deno.connect({ hostname: "127.0.0.1", port: 1883 }), 1 << 20);
 * ```
 */
export class GuardedSocket extends Duplex {
  #conn: Promise<Deno.Conn>;
  #guard: MqttSizeGuard;
  #wanted: (() => void) | undefined;
  #closed = false;
  /** Why the connection ended, kept because MQTT.js drops errors without a `code`. */
  failure: Error | undefined;

  /**
   * Opens the connection and starts reading it.
   *
   * @param open Opens the socket (plain or TLS).
   * @param limit The largest packet passed on whole (bytes).
   */
  constructor(open: () => Promise<Deno.Conn>, limit: number) {
    // The broker's end of the stream ends ours (and closes it, which MQTT.js listens for).
    super({ allowHalfOpen: false });
    this.#guard = new MqttSizeGuard(limit);
    this.#conn = open();
    this.#conn.catch(() => {});
    this.#pump().catch((err: Error) => {
      this.failure ??= err;
      this.destroy(err);
    });
  }

  async #pump(): Promise<void> {
    const conn = await this.#conn;
    const buf = new Uint8Array(64 * 1024);
    for (;;) {
      const n = await conn.read(buf).catch((err) => {
        if (this.#closed) return null;
        throw err;
      });
      if (n === null) break;
      let full = false;
      for (const part of this.#guard.push(buf.subarray(0, n))) {
        full = !this.push(part.slice()) || full;
      }
      if (full) await new Promise<void>((resolve) => (this.#wanted = resolve));
    }
    this.push(null);
  }

  override _read(): void {
    const wanted = this.#wanted;
    this.#wanted = undefined;
    wanted?.();
  }

  override _write(chunk: Uint8Array, _enc: string, done: (err?: Error | null) => void): void {
    this.#conn.then(async (conn) => {
      for (let at = 0; at < chunk.length;) at += await conn.write(chunk.subarray(at));
    }).then(() => done(), (err: Error) => done(err));
  }

  /**
   * What MQTT.js writes while the stream is corked (one packet's header, topic and payload, and
   * the packets of one tick) goes out in one write, one segment instead of several.
   */
  override _writev(
    chunks: Array<{ chunk: Uint8Array; encoding: string }>,
    done: (err?: Error | null) => void,
  ): void {
    this._write(concatBytes(chunks.map((c) => c.chunk)), "buffer", done);
  }

  override _final(done: (err?: Error | null) => void): void {
    this.#conn.then((conn) => conn.closeWrite()).then(() => done(), () => done());
  }

  override _destroy(err: Error | null, done: (err?: Error | null) => void): void {
    this.#closed = true;
    this.#wanted?.();
    this.#conn.then((conn) => {
      try {
        conn.close();
      } catch { /* already closed */ }
    }, () => {});
    done(err);
  }
}

/**
 * The variables MQTT.js's dependencies read when it is loaded (Deno 2.9, mqtt 5.16):
 * `READABLE_STREAM` (readable-stream) and `DEBUG` (debug), which also lists the environment's
 * names for its `DEBUG_*` options. The collector and the publisher run with `--ignore-env` for
 * these two alone (docs/collect.md, "Permissions"): they read as unset, and the listing holds
 * only the variables the program is granted, so loading MQTT.js needs no `--allow-env` beyond
 * the program's own.
 *
 * @example Usage
 * ```ts
 * import { MQTT_IGNORED_ENV } from "./mqtt_socket.ts";
 * import assert from "node:assert/strict";
 *
 * assert.deepEqual(MQTT_IGNORED_ENV, ["DEBUG", "READABLE_STREAM"]);
 * ```
 */
export const MQTT_IGNORED_ENV: readonly string[] = ["DEBUG", "READABLE_STREAM"];

/**
 * MQTT.js, loaded on first use. Without the program's `--ignore-env` of
 * {@linkcode MQTT_IGNORED_ENV} it cannot load, and the error says what to run instead.
 *
 * @param runAs How the program is meant to be run, for the error: for example
 *   `"the collector as obs-utils telemetry collect, deno task collect, spawnCollector() or the systemd unit do"`.
 * @returns The MQTT.js module.
 * @throws {Error} When it cannot load for want of that `--ignore-env`, saying so; any other
 *   failure (not in the cache offline) as it is.
 *
 * @example Usage
 * ```ts ignore
 * import { loadMqtt } from "./mqtt_socket.ts";
 * const { MqttClient } = await loadMqtt("the publisher as obs-utils telemetry publish does");
 * ```
 */
export async function loadMqtt(runAs: string): Promise<MqttModule> {
  try {
    return await import("npm:mqtt@^5.14.1");
  } catch (err) {
    if (err instanceof Deno.errors.NotCapable) {
      throw new Error(
        `the MQTT client cannot load without --ignore-env=${MQTT_IGNORED_ENV.join(",")} (${
          err.message.split("\n")[0]
        }); run ${runAs}`,
      );
    }
    throw err;
  }
}

/**
 * Opens the socket of a broker URL: TCP for `mqtt://`, TLS for `mqtts://` (trusting `caCerts`
 * when given, else the system's roots and `DENO_CERT`).
 *
 * @param url `mqtt://host:port` or `mqtts://host:port`, with its port.
 * @param caCerts PEM certificates to trust for `mqtts://` instead of the usual roots.
 * @returns A function that opens one connection.
 *
 * @example Usage
 * ```ts ignore
 * import { GuardedSocket, openBroker } from "./mqtt_socket.ts";
 * const socket = new GuardedSocket(openBroker(new URL("mqtt://127.0.0.1:1883")), 1 << 20);
 * ```
 */
export function openBroker(url: URL, caCerts?: readonly string[]): () => Promise<Deno.Conn> {
  const hostname = url.hostname.replace(/^\[|\]$/g, "");
  const port = Number(url.port);
  return async () => {
    const conn = url.protocol === "mqtts:"
      ? await Deno.connectTls({ hostname, port, ...(caCerts ? { caCerts: [...caCerts] } : {}) })
      : await Deno.connect({ hostname, port });
    // MQTT.js writes a packet's header and body apart: with Nagle's algorithm the body waited for
    // the broker's delayed ACK, 40 ms on Linux, before every message.
    if ("setNoDelay" in conn && typeof conn.setNoDelay === "function") conn.setNoDelay(true);
    return conn;
  };
}
