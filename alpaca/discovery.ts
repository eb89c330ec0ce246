/**
 * Alpaca discovery (docs/safety.md, "ASCOM Alpaca (N.I.N.A.)"): a UDP socket on
 * `--alpaca-discovery-port` (default 32227) that answers each `alpacadiscovery1` datagram with
 * `{"AlpacaPort": P}`, so N.I.N.A. and other clients find the Alpaca port by themselves.
 *
 * It uses `node:dgram`, which Deno 2 serves without `--unstable-net` (its own
 * `Deno.listenDatagram` needs that flag, which the compile tasks and the installed command do
 * not carry). Sending the answer needs net permission for the asker's address
 * (docs/cli.md#permissions).
 *
 * @module
 */

import dgram from "node:dgram";
import { errorText } from "../core/errors.ts";

/**
 * The default discovery port, as the Alpaca specification fixes it.
 *
 * @example Usage
 * ```ts
 * import { DEFAULT_ALPACA_DISCOVERY_PORT } from "./discovery.ts";
 * import assert from "node:assert/strict";
 *
 * assert.equal(DEFAULT_ALPACA_DISCOVERY_PORT, 32227);
 * ```
 */
export const DEFAULT_ALPACA_DISCOVERY_PORT = 32227;

const QUESTION = "alpacadiscovery1";
/** Most answers sent per second: a flood of questions never becomes a flood of answers. */
const MAX_ANSWERS_PER_SECOND = 200;

/** A running discovery responder. */
export interface DiscoveryHandle {
  /** The address the socket is bound to (with the port picked, for port 0). */
  readonly addr: { hostname: string; port: number };
  /** Closes the socket. */
  close(): Promise<void>;
}

/** Options of {@linkcode startDiscovery}. */
export interface DiscoveryOptions {
  /** Address to bind: the service's `--host` (`localhost` binds 127.0.0.1). */
  hostname: string;
  /** UDP port; 0 picks a free one (tests). */
  port: number;
  /** The Alpaca HTTP port the answers name. */
  alpacaPort: number;
  /** Receives warn lines (an answer that could not be sent, at most one a minute). */
  warn: (message: string) => void;
}

/** The address `node:dgram` binds for a host name, and the socket family it needs. */
function bindAddress(hostname: string): { address: string; type: "udp4" | "udp6" } {
  const host = hostname.replace(/^\[(.*)\]$/, "$1");
  if (host === "localhost") return { address: "127.0.0.1", type: "udp4" };
  return { address: host, type: host.includes(":") ? "udp6" : "udp4" };
}

/**
 * Binds the discovery socket and answers until closed.
 *
 * @param options Where to bind and what to answer.
 * @returns The handle.
 * @throws {Error} If the socket cannot be bound (the port taken, a missing permission).
 *
 * @example Usage
 * ```ts ignore
 * const discovery = await startDiscovery({ hostname: "0.0.0.0", port: 32227, alpacaPort: 11111, warn: console.warn });
 * await discovery.close();
 * ```
 */
export function startDiscovery(options: DiscoveryOptions): Promise<DiscoveryHandle> {
  const { address, type } = bindAddress(options.hostname);
  const socket = dgram.createSocket({ type, reuseAddr: true });
  const answer = new TextEncoder().encode(JSON.stringify({ AlpacaPort: options.alpacaPort }));
  let second = 0, answered = 0, lastWarn = 0;
  const warnOnce = (message: string) => {
    if (Date.now() - lastWarn < 60_000) return;
    lastWarn = Date.now();
    options.warn(message);
  };
  socket.on("message", (message: Uint8Array, peer: dgram.RemoteInfo) => {
    if (message.length > 64 || new TextDecoder().decode(message).trim() !== QUESTION) return;
    const now = Math.floor(Date.now() / 1000);
    if (now !== second) [second, answered] = [now, 0];
    if (++answered > MAX_ANSWERS_PER_SECOND) return;
    socket.send(answer, peer.port, peer.address, (err) => {
      if (err) {
        warnOnce(`Could not answer Alpaca discovery from ${peer.address}: ${errorText(err)}`);
      }
    });
  });
  return new Promise((resolve, reject) => {
    const failed = (err: Error & { code?: string }) => {
      socket.close();
      // node:dgram reports a taken port as EADDRINUSE; the callers know Deno's class.
      reject(
        err.code === "EADDRINUSE"
          ? new Deno.errors.AddrInUse(`UDP ${address}:${options.port} is in use`, { cause: err })
          : err,
      );
    };
    socket.once("error", failed);
    socket.bind(options.port, address, () => {
      socket.off("error", failed);
      socket.on("error", (err) => warnOnce(`Alpaca discovery: ${errorText(err)}`));
      const bound = socket.address();
      resolve({
        addr: { hostname: bound.address, port: bound.port },
        close: () => new Promise<void>((done) => socket.close(() => done())),
      });
    });
  });
}
