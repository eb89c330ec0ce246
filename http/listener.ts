/**
 * The listener's life beside the service: counting the requests in flight so shutdown can wait
 * for them, and listening again when Deno.serve ends its listener on a failed accept (EMFILE…)
 * instead of stopping (docs/operations.md).
 *
 * @module
 */

import { Backoff } from "../wire/backoff.ts";
import { errorText } from "../core/errors.ts";
import type { TelemetryHandler } from "./types.ts";

/** How a listener that ended by itself is opened again. */
export interface RelistenOptions {
  /**
   * Tries in a row that fail with an error that is not transient (the port taken by another
   * program, a missing permission) before giving up. Out of descriptors or memory, it tries for
   * as long as that lasts.
   */
  attempts?: number;
  /** The first wait, doubled after each try. */
  firstDelayMs?: number;
  /** The longest wait between tries. */
  maxDelayMs?: number;
}

/**
 * The reason `ServerHandle.finished` rejects when the listener ended by itself and
 * could not be opened again: the server shut down (files closed, lock released) without being
 * asked to, so its owner should exit non-zero and let a supervisor restart it (docs/operations.md).
 *
 * @example Usage
 * ```ts ignore
 * import { ListenerError, startServer } from "@obs-utils/telemetry/server";
 * const server = await startServer({ siteDir: "./telemetry" });
 * await server.finished.catch((err) => Deno.exit(err instanceof ListenerError ? 1 : 2));
 * ```
 */
export class ListenerError extends Error {
  /**
   * Creates the error.
   *
   * @param message What ended the listener and why it stays down.
   * @param options The last error.
   */
  constructor(message: string, options: { cause: unknown }) {
    super(message, options);
    this.name = "ListenerError";
  }
}

/** The requests being answered, so that shutdown can wait for them. */
export class InFlight {
  #count = 0;
  #drained: PromiseWithResolvers<void> | undefined;

  /** A handler that counts the requests it is answering. */
  wrap(handler: TelemetryHandler): TelemetryHandler {
    const settle = () => {
      if (--this.#count === 0) this.#drained?.resolve();
    };
    // No async frame of its own: one reaction on the answer's promise (ingestion's hot path).
    return (req, info) => {
      this.#count++;
      let answer: Promise<Response>;
      try {
        answer = handler(req, info);
      } catch (err) {
        settle();
        throw err;
      }
      answer.then(settle, settle);
      return answer;
    };
  }

  /** Settles once no request is being answered (at once when none is). */
  drained(): Promise<void> {
    if (this.#count === 0) return Promise.resolve();
    this.#drained ??= Promise.withResolvers<void>();
    return this.#drained.promise;
  }
}

/** What {@linkcode keepListening} does when a listener ends. */
export interface Relisten {
  relisten: Relistener;
  /** Whether a shutdown began: then the end was requested. */
  stopped: () => boolean;
  /** Listens again on the same address. */
  listen: () => Deno.HttpServer<Deno.NetAddr>;
  /** Told the new listener. */
  replaced: (next: Deno.HttpServer<Deno.NetAddr>) => void;
  /** Called when listening again failed for good; shuts the server down. */
  failed: () => Promise<void>;
}

/**
 * Deno.serve ends its listener on the first failed accept (EMFILE, ENFILE, ECONNABORTED...).
 * That is no reason to stop (docs/operations.md): listen again on the same address, keeping the lock and
 * the open files; only when that keeps failing does the server stop, with an error.
 */
export function keepListening(current: Deno.HttpServer<Deno.NetAddr>, on: Relisten): void {
  current.finished.then(() => undefined, (err: unknown) => err).then(async (err) => {
    if (on.stopped()) return;
    const next = await on.relisten.run(err, on.stopped, on.listen);
    if (on.stopped()) {
      await next?.shutdown();
      return;
    }
    if (next) {
      on.replaced(next);
      keepListening(next, on);
      return;
    }
    await on.failed();
  }).catch(() => {}); // failures surface via `finished`
}

/**
 * Errors of a failed `accept`, `listen` or `connect` that pass once descriptors or memory are
 * back (EMFILE, ENFILE, ENOMEM, ENOBUFS, ECONNABORTED, EAGAIN).
 *
 * @example Usage
 * ```ts
 * import { TRANSIENT } from "./listener.ts";
 * import assert from "node:assert/strict";
 *
 * assert.ok(TRANSIENT.test("Too many open files (os error 24)"));
 * assert.ok(!TRANSIENT.test("Address already in use (os error 98)"));
 * ```
 */
export const TRANSIENT: RegExp =
  /os error (24|23|12|103|105|11)\b|too many open files|EMFILE|ENFILE|ENOMEM|ENOBUFS|ECONNABORTED/i;

/**
 * Listens again after the listener ended by itself, with bounded backoff (up to 2 s between
 * tries); logs one line when it went down (at most one every 10 s, counting the rest) and one
 * when it is back. Out of descriptors it never gives up (docs/operations.md): only an error that is
 * not transient, `attempts` times in a row, ends it.
 */
export class Relistener {
  #attempts: number;
  #firstDelayMs: number;
  #maxDelayMs: number;
  #warn: (message: string) => void;
  #where: string;
  #lastLine = -Infinity;
  #suppressed = 0;
  #lastError: unknown;
  #tries = 0;
  #downLogged = false;

  constructor(
    options: RelistenOptions,
    warn: (message: string) => void,
    where: string,
  ) {
    this.#attempts = Math.max(1, options.attempts ?? 5);
    this.#firstDelayMs = Math.max(0, options.firstDelayMs ?? 50);
    this.#maxDelayMs = Math.max(this.#firstDelayMs, options.maxDelayMs ?? 2000);
    this.#warn = warn;
    this.#where = where;
  }

  /** Tries to listen again; `undefined` when it gave up or shutdown began. */
  async run(
    cause: unknown,
    stopped: () => boolean,
    listen: () => Deno.HttpServer<Deno.NetAddr>,
  ): Promise<Deno.HttpServer<Deno.NetAddr> | undefined> {
    this.#lastError = cause;
    this.#downLogged = this.#log(
      `The listener on ${this.#where} stopped accepting connections (${
        cause === undefined ? "it closed" : errorText(cause)
      }); listening again, the files stay open.`,
    );
    const backoff = new Backoff({ firstMs: this.#firstDelayMs, maxMs: this.#maxDelayMs });
    let fatalTries = 0;
    for (this.#tries = 1;; this.#tries++) {
      await new Promise((r) => setTimeout(r, backoff.next()));
      if (stopped()) return undefined;
      try {
        const server = listen();
        // Said only when its "stopped" line was: a flapping listener stays at a line in 10 s.
        if (this.#downLogged) {
          this.#warn(`Listening again on ${this.#where} after ${this.#tries} tries.`);
        }
        return server;
      } catch (err) {
        this.#lastError = err;
        if (TRANSIENT.test(errorText(err))) fatalTries = 0;
        else if (++fatalTries >= this.#attempts) return undefined;
      }
    }
  }

  /** The error `finished` rejects with after {@linkcode Relistener.run} gave up. */
  failure(): ListenerError {
    return new ListenerError(
      `Cannot listen on ${this.#where} again after ${this.#tries} tries: ${
        errorText(this.#lastError)
      }`,
      { cause: this.#lastError },
    );
  }

  /**
   * Warns at most once every 10 s, as the connection guard does: a flood that ends the listener
   * at every accept is one line, not one a second; `false` when the line was suppressed.
   */
  #log(line: string): boolean {
    const now = Date.now();
    if (now - this.#lastLine < 10_000) {
      this.#suppressed++;
      return false;
    }
    this.#lastLine = now;
    const more = this.#suppressed > 0 ? ` (${this.#suppressed} similar lines suppressed)` : "";
    this.#suppressed = 0;
    this.#warn(line + more);
    return true;
  }
}
