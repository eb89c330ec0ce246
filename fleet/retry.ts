/**
 * Retrying a fleet peer (docs/fleet.md): capped exponential back-off (at most 30 s) with jitter,
 * and one log line per change of state (down, still down is silent, back up), so an outage of a
 * night prints two lines, not thousands.
 *
 * @module
 */
import { Backoff } from "../wire/backoff.ts";
import { UpDown } from "../wire/up_down.ts";

/** The longest wait between two attempts (docs/fleet.md). */
export const MAX_BACKOFF_MS = 30_000;

/** A log sink: level and one line. */
export type FleetLog = (level: "info" | "warn" | "error", message: string) => void;

/**
 * A fleet peer's back-off (docs/fleet.md): from 250 ms, doubling up to {@linkcode MAX_BACKOFF_MS},
 * each wait spread by ±20 % so that units retrying one hub do not knock in step.
 *
 * @returns A back-off whose next wait is the first.
 *
 * @example Usage
 * ```ts
 * import { fleetBackoff, MAX_BACKOFF_MS } from "./retry.ts";
 * import assert from "node:assert/strict";
 *
 * const backoff = fleetBackoff();
 * const first = backoff.next();
 * assert.ok(first >= 200 && first <= 300);
 * for (let i = 0; i < 20; i++) assert.ok(backoff.next() <= MAX_BACKOFF_MS);
 * ```
 */
export function fleetBackoff(): Backoff {
  return new Backoff({ firstMs: 250, maxMs: MAX_BACKOFF_MS, jitter: 0.2 });
}

/**
 * Logs a peer's availability once per change: "down" with the reason, then "back".
 *
 * @example One line each way, however many tries fail
 * ```ts
 * import { PeerState } from "./retry.ts";
 * import assert from "node:assert/strict";
 *
 * const lines: string[] = [];
 * const peer = new PeerState("destination nats://hub:4222", (level, line) => lines.push(`${level} ${line}`));
 * peer.ok();
 * for (let i = 0; i < 3; i++) peer.failed(new Error("connection refused"), "retrying");
 * peer.ok();
 * assert.deepEqual(lines, [
 *   "warn destination nats://hub:4222 unavailable (connection refused); retrying",
 *   "info destination nats://hub:4222 available again",
 * ]);
 * ```
 */
export class PeerState {
  readonly #name: string;
  readonly #log: FleetLog;
  readonly #state = new UpDown("up");

  /**
   * Creates the state of a peer that is up until its first failure.
   *
   * @param name The peer as the log names it.
   * @param log Where the lines go.
   */
  constructor(name: string, log: FleetLog) {
    this.#name = name;
    this.#log = log;
  }

  /**
   * Records a failure; logs it only when the peer was up.
   *
   * @param err Why the attempt failed.
   * @param retrying What happens meanwhile, for the log line.
   */
  failed(err: unknown, retrying: string): void {
    if (!this.#state.down()) return;
    const reason = err instanceof Error ? err.message : String(err);
    this.#log("warn", `${this.#name} unavailable (${reason}); ${retrying}`);
  }

  /** Records a success; logs it only when the peer was down. */
  ok(): void {
    if (!this.#state.up()) return;
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
