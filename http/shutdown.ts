/**
 * The shutdown state of a server, shared by the guards (503 once it began), the live streams
 * (they end) and `POST /shutdown` (docs/http-api.md, docs/operations.md).
 *
 * @module
 */

/**
 * The one shutdown state of a server. It runs until {@linkcode ShutdownLifecycle.begin}; from
 * then on requests are answered 503 and {@linkcode ShutdownLifecycle.signal} has aborted, which
 * ends every open `GET /stream`.
 *
 * @example Usage
 * ```ts
 * import { ShutdownLifecycle } from "@obs-utils/telemetry/server";
 * import assert from "node:assert/strict";
 *
 * const shutdown = new ShutdownLifecycle();
 * shutdown.begin();
 * assert.equal(shutdown.stopping, true);
 * assert.equal(shutdown.signal.aborted, true);
 * ```
 */
export class ShutdownLifecycle {
  #controller = new AbortController();
  #onRequest: (() => void) | undefined;

  /**
   * Creates the shutdown state of a running server.
   *
   * @param onRequest Called once, after the answer was handed over, when `POST /shutdown` asks
   *   the server to stop.
   */
  constructor(onRequest?: () => void) {
    this.#onRequest = onRequest;
  }

  /** `true` once shutdown has begun. */
  get stopping(): boolean {
    return this.#controller.signal.aborted;
  }

  /** Aborts when shutdown begins. */
  get signal(): AbortSignal {
    return this.#controller.signal;
  }

  /** Begins shutdown: new requests get 503 and open streams end. Safe to call twice. */
  begin(): void {
    this.#controller.abort();
  }

  /** A `POST /shutdown` was accepted: begins shutdown and, on the next turn, tells the owner. */
  request(): void {
    if (this.stopping) return;
    this.begin();
    // After the 202 has been handed to the connection.
    setTimeout(() => this.#onRequest?.(), 0);
  }
}
