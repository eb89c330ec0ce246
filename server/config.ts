/**
 * What `startServer` takes (docs/operations.md), and the checks that refuse a configuration
 * before anything is opened: a network address without a token, half a TLS pair, a file that is
 * not PEM.
 *
 * @module
 */

import type { ServiceOptions } from "../core/service.ts";
import type { TypesRegistry } from "../core/types_registry.ts";
import { isLoopback } from "../http/guards.ts";
import type { RelistenOptions } from "../http/listener.ts";
import type { ConnectionLimits } from "../http/conn_guard.ts";
import type { Rejection } from "../http/types.ts";
import type { NotifyFormat } from "../notify/post.ts";
import { ConfigError } from "../core/errors.ts";

/**
 * Options of {@linkcode startServer}: the service's, the handler's, and where to listen.
 *
 * @example Usage
 * ```ts
 * import type { ServerOptions } from "./config.ts";
 *
 * const options: ServerOptions = { siteDir: "./telemetry", hostname: "127.0.0.1", port: 0 };
 * ```
 */
export interface ServerOptions extends ServiceOptions {
  /**
   * Address to bind.
   * @default {"localhost"}
   */
  hostname?: string;
  /**
   * Port; 0 picks a free one (tests).
   * @default {6562}
   */
  port?: number;
  /** Bearer token required on every path but `/health`. */
  token?: string | undefined;
  /** See {@linkcode HandlerOptions.publicRead} (`--public-read`). */
  publicRead?: boolean;
  /** See {@linkcode HandlerOptions.trustLoopback} (`--trust-loopback`). */
  trustLoopback?: boolean;
  /** See {@linkcode HandlerOptions.wrapCurrent} (`--wrap-current`). */
  wrapCurrent?: boolean;
  /**
   * PEM certificate (chain) file: with {@linkcode ServerOptions.tlsKey}, the server speaks HTTPS
   * only (`--tls-cert`). Read once at start.
   */
  tlsCert?: string;
  /** PEM private key file of {@linkcode ServerOptions.tlsCert} (`--tls-key`). */
  tlsKey?: string;
  /**
   * Allow a non-loopback `hostname` without a token.
   * @default {false}
   */
  insecure?: boolean;
  /**
   * Largest accepted request body in bytes.
   * @default {1048576}
   */
  maxBody?: number;
  /**
   * `GET /history` requests served at once (`--max-history`); the next wait up to 10 s for
   * their turn, then get 503 with `Retry-After` (docs/history.md).
   * @default {2}
   */
  maxHistory?: number;
  /**
   * Longest time, from a request's head, for its body to arrive in full, on the main port and
   * the Alpaca port alike; a slower one is answered 408 (Alpaca: 400) and its connection closed
   * (`--body-timeout`, docs/operations.md).
   * @default {10000}
   */
  bodyTimeoutMs?: number;
  /** Receives unexpected request errors. */
  onError?: (err: unknown) => void;
  /** Receives every 4xx/5xx answer worth a log line (see {@linkcode HandlerOptions.onRejected}). */
  onRejected?: (rejection: Rejection) => void;
  /**
   * Longest wait, on shutdown, for in-flight requests before the files are closed anyway.
   * @default {5000}
   */
  shutdownGraceMs?: number;
  /**
   * How the main port and the Alpaca port listen again when their listener ends by itself (a
   * failed `accept`, such as EMFILE): waiting from `firstDelayMs` doubling up to `maxDelayMs`
   * between tries, for as long as descriptors or memory are short; an error that is not
   * transient (the port taken by another process, a missing permission) gets `attempts` tries
   * in a row, after which the main port shuts the server down and the Alpaca port stays closed.
   * @default {{ attempts: 5, firstDelayMs: 50, maxDelayMs: 2000 }}
   */
  relisten?: RelistenOptions;
  /**
   * Head timeout, idle timeout, connections per peer and of all peers together of the
   * connection guard (`--head-timeout`, `--idle-timeout`, `--max-conns-per-peer`, `--max-conns`;
   * docs/operations.md). `maxConns` bounds the main port and the Alpaca port together.
   * @default {{ headTimeoutMs: 10000, idleTimeoutMs: 60000, maxPerPeer: 64, maxConns: defaultMaxConns() }}
   */
  connectionLimits?: ConnectionLimits;
  /**
   * Whether the connection guard stands in front of `Deno.serve` (docs/operations.md).
   * @default {true on a non-loopback hostname, false on loopback}
   */
  connectionGuard?: boolean;
  /**
   * Port of the ASCOM Alpaca listener on the same host (`--alpaca-port`, docs/safety.md); 0
   * picks a free one. Absent: no Alpaca listener.
   */
  alpacaPort?: number;
  /**
   * UDP port answering Alpaca discovery while `alpacaPort` is set (`--alpaca-discovery-port`);
   * 0 turns discovery off.
   * @default {32227}
   */
  alpacaDiscoveryPort?: number;
  /** The types registry; when absent, `typesFile` is read, else the registry is empty. */
  types?: TypesRegistry;
  /** A types file (`--types`), read and checked before the site directory is opened. */
  typesFile?: string;
  /**
   * Below this many free bytes on the site directory's file system, `GET /check` fails and a
   * warning is logged at most once an hour (`--min-free`).
   * @default {1073741824}
   */
  minFreeBytes?: number;
  /**
   * Receivers of the safety notifications: each change of the verdict and of a critical type's
   * state is POSTed to every one, off the ingest path (`--notify`, docs/safety.md#notifications).
   */
  notify?: readonly string[];
  /**
   * How the notifications are written: the change as JSON, or text with ntfy's headers
   * (`--notify-format`).
   * @default {"json"}
   */
  notifyFormat?: NotifyFormat;
}

/**
 * Reads the certificate and key of `tlsCert`/`tlsKey`, or `undefined` for plain HTTP.
 *
 * @param options The server's options.
 * @returns The PEM texts for `Deno.serve`, or `undefined`.
 * @throws {ConfigError} If only one is given, or a file cannot be read or is not PEM.
 *
 * @example Usage
 * ```ts
 * import { readTls } from "./config.ts";
 * import assert from "node:assert/strict";
 *
 * assert.equal(await readTls({ siteDir: "./telemetry" }), undefined);
 * ```
 */
export async function readTls(
  options: ServerOptions,
): Promise<{ cert: string; key: string } | undefined> {
  const { tlsCert, tlsKey } = options;
  if (tlsCert === undefined && tlsKey === undefined) return undefined;
  if (tlsCert === undefined || tlsKey === undefined) {
    throw new ConfigError(
      `HTTPS needs both --tls-cert and --tls-key; only ${
        tlsCert === undefined ? "--tls-key" : "--tls-cert"
      } was given.`,
    );
  }
  const read = async (file: string, flag: string, marker: RegExp) => {
    let text: string;
    try {
      text = await Deno.readTextFile(file);
    } catch (err) {
      if (err instanceof Deno.errors.NotCapable) throw err;
      throw new ConfigError(
        `Cannot read ${flag} ${file}: ${
          (err as Error).message.replace(/ \(os error \d+\).*$/, "")
        }; give the path of a readable PEM file.`,
      );
    }
    if (!marker.test(text)) {
      throw new ConfigError(
        `${flag} ${file} is not a PEM ${
          flag === "--tls-cert" ? "certificate" : "private key"
        } (no "-----BEGIN" block); give the PEM file, not DER.`,
      );
    }
    return text;
  };
  return {
    cert: await read(tlsCert, "--tls-cert", /-----BEGIN CERTIFICATE-----/),
    key: await read(tlsKey, "--tls-key", /-----BEGIN [A-Z ]*PRIVATE KEY-----/),
  };
}

/**
 * Refuses to expose the service to the network without a token, unless told to (docs/http-api.md).
 *
 * @param hostname The address to bind.
 * @param options The server's options: `token` and `insecure`.
 * @throws {ConfigError} For a non-loopback address without either.
 *
 * @example Usage
 * ```ts
 * import { checkExposure } from "./config.ts";
 * import { ConfigError } from "../core/errors.ts";
 * import assert from "node:assert/strict";
 *
 * checkExposure("0.0.0.0", { siteDir: "./telemetry", token: "s3cret" });
 * assert.throws(() => checkExposure("0.0.0.0", { siteDir: "./telemetry" }), ConfigError);
 * ```
 */
export function checkExposure(hostname: string, options: ServerOptions): void {
  if (!isLoopback(hostname) && !options.token && !options.insecure) {
    throw new ConfigError(
      `Refusing to listen on ${hostname} without a token: anyone on the network could write telemetry. Set --token (or OBS_TELEMETRY_TOKEN), or pass --insecure.`,
    );
  }
}

/**
 * Warns of each access switch that has no effect because no token is set (docs/operations.md).
 *
 * @param options The server's options.
 * @param warn Receives the warning.
 *
 * @example Usage
 * ```ts
 * import { warnIneffective } from "./config.ts";
 * import assert from "node:assert/strict";
 *
 * const warnings: string[] = [];
 * warnIneffective({ siteDir: "./telemetry", publicRead: true }, (m) => warnings.push(m));
 * assert.match(warnings[0]!, /^--public-read has no effect without --token/);
 * ```
 */
export function warnIneffective(options: ServerOptions, warn: (message: string) => void): void {
  for (
    const [on, flag] of [[options.publicRead, "--public-read"], [
      options.trustLoopback,
      "--trust-loopback",
    ]] as const
  ) {
    if (on && !options.token) {
      warn(
        `${flag} has no effect without --token: every request is already let in; set --token (or OBS_TELEMETRY_TOKEN) to require it for the rest.`,
      );
    }
  }
}

/**
 * Why the first listen failed, in the operator's words: Deno checks the TLS pair only when it
 * listens, and names rustls' error, not the flag that is wrong.
 *
 * @param err What `Deno.serve` threw.
 * @param tls Whether the server was to speak HTTPS.
 * @param options The server's options, for the file names.
 * @returns A {@linkcode ConfigError} for a key that does not fit its certificate, else `err`.
 *
 * @example Usage
 * ```ts
 * import { listenFailure } from "./config.ts";
 * import { ConfigError } from "../core/errors.ts";
 * import assert from "node:assert/strict";
 *
 * const err = new Error("KeyMismatch");
 * const options = { siteDir: "./telemetry", tlsCert: "c.pem", tlsKey: "k.pem" };
 * assert.ok(listenFailure(err, true, options) instanceof ConfigError);
 * assert.equal(listenFailure(err, false, options), err);
 * ```
 */
export function listenFailure(err: unknown, tls: boolean, options: ServerOptions): unknown {
  if (
    tls && /KeyMismatch|keys may not be consistent|private key|certificate/i.test(String(err))
  ) {
    return new ConfigError(
      `--tls-key ${options.tlsKey} does not fit --tls-cert ${options.tlsCert} (${
        (err as Error).message
      }); give the private key the certificate was made with.`,
    );
  }
  return err;
}
