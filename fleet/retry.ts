/**
 * Retrying a fleet peer (docs/fleet.md): capped exponential back-off (at most 30 s) with jitter,
 * and one log line per change of state (down, still down is silent, back up), so an outage of a
 * night prints two lines, not thousands.
 *
 * @module
 */
import { sleep } from "../wire/async.ts";

/** The longest wait between two attempts (docs/fleet.md). */
export const MAX_BACKOFF_MS = 30_000;

/** A log sink: level and one line. */
export type FleetLog = (level: "info" | "warn" | "error", message: string) => void;

/** Back-off state of one peer: doubles from `initialMs` up to `maxMs`, with ±20 % jitter. */
export class Backoff {
  readonly #initial: number;
  readonly #max: number;
  #next: number;

  constructor(initialMs = 250, maxMs = MAX_BACKOFF_MS) {
    this.#initial = initialMs;
    this.#max = maxMs;
    this.#next = initialMs;
  }

  /** The wait before the next attempt; each call doubles the following one, up to the cap. */
  next(): number {
    const base = this.#next;
    this.#next = Math.min(this.#max, this.#next * 2);
    return Math.min(this.#max, Math.round(base * (0.8 + Math.random() * 0.4)));
  }

  /** After a success: the next failure waits `initialMs` again. */
  reset(): void {
    this.#next = this.#initial;
  }

  /** Sleeps for {@linkcode next}, or less when `signal` aborts. */
  async wait(signal?: AbortSignal): Promise<void> {
    await sleep(this.next(), signal);
  }
}

/** Logs a peer's availability once per change: "down" with the reason, then "back". */
export class PeerState {
  readonly #name: string;
  readonly #log: FleetLog;
  #down = false;

  constructor(name: string, log: FleetLog) {
    this.#name = name;
    this.#log = log;
  }

  /** Whether the last attempt failed. */
  get down(): boolean {
    return this.#down;
  }

  /** Records a failure; logs it only when the peer was up. */
  failed(err: unknown, retrying: string): void {
    if (this.#down) return;
    this.#down = true;
    const reason = err instanceof Error ? err.message : String(err);
    this.#log("warn", `${this.#name} unavailable (${reason}); ${retrying}`);
  }

  /** Records a success; logs it only when the peer was down. */
  ok(): void {
    if (!this.#down) return;
    this.#down = false;
    this.#log("info", `${this.#name} available again`);
  }
}

/**
 * A missing Deno permission is not an outage: retrying cannot grant it, so the fleet process
 * stops with the message instead.
 *
 * @example
 * ```ts
 * import { isPermissionFault } from "./retry.ts";
 * import assert from "node:assert/strict";
 *
 * assert.ok(isPermissionFault(new Deno.errors.NotCapable("net access to hub:4222")));
 * assert.ok(!isPermissionFault(new Error("connection refused")));
 * ```
 */
export function isPermissionFault(err: unknown): boolean {
  return err instanceof Deno.errors.NotCapable || err instanceof Deno.errors.PermissionDenied;
}
