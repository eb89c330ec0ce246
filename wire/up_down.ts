/**
 * Whether a peer (an input, a destination, a receiver, the service) is up or down, told only
 * when it changes: callers log once per change (down, still down is silent, back up), so an
 * outage of a night prints two lines, not thousands. Web APIs only.
 *
 * @example Usage
 * ```ts
 * import { UpDown } from "./up_down.ts";
 * import assert from "node:assert/strict";
 *
 * const lines: string[] = [];
 * const peer = new UpDown("up");
 * for (const ok of [true, false, false, false, true, true]) {
 *   if (ok ? peer.up() : peer.down()) lines.push(ok ? "back up" : "down");
 * }
 * assert.deepEqual(lines, ["down", "back up"]);
 * ```
 *
 * @module
 */

/**
 * The two states of an {@linkcode UpDown}.
 *
 * @example Usage
 * ```ts
 * import { UpDown, type UpDownState } from "./up_down.ts";
 * import assert from "node:assert/strict";
 *
 * const initial: UpDownState = "up";
 * assert.equal(new UpDown(initial).state, "up");
 * ```
 */
export type UpDownState = "up" | "down";

/**
 * A peer's state, up or down (or not known yet), whose {@linkcode UpDown.up} and
 * {@linkcode UpDown.down} say whether they changed it.
 *
 * @example Log each change once
 * ```ts
 * import { UpDown } from "./up_down.ts";
 * import assert from "node:assert/strict";
 *
 * const input = new UpDown();
 * assert.equal(input.up(), true); // the first outcome is a change
 * assert.equal(input.up(), false);
 * assert.equal(input.down(), true);
 * assert.equal(input.state, "down");
 * ```
 */
export class UpDown {
  #state: UpDownState | undefined;

  /**
   * Creates the state.
   *
   * @param initial The state before the first outcome; `undefined` (not known) makes the first
   * outcome, up or down, a change.
   *
   * @example Usage
   * ```ts
   * import { UpDown } from "./up_down.ts";
   * import assert from "node:assert/strict";
   *
   * assert.equal(new UpDown("up").up(), false);
   * assert.equal(new UpDown().up(), true);
   * ```
   */
  constructor(initial?: UpDownState) {
    this.#state = initial;
  }

  /**
   * The state: `"up"`, `"down"`, or `undefined` before the first outcome of a state created
   * without one.
   *
   * @returns The state.
   *
   * @example Usage
   * ```ts
   * import { UpDown } from "./up_down.ts";
   * import assert from "node:assert/strict";
   *
   * const peer = new UpDown();
   * assert.equal(peer.state, undefined);
   * peer.down();
   * assert.equal(peer.state, "down");
   * ```
   */
  get state(): UpDownState | undefined {
    return this.#state;
  }

  /**
   * Records a success.
   *
   * @returns Whether the state changed to up: the caller's cue to log it.
   *
   * @example Usage
   * ```ts
   * import { UpDown } from "./up_down.ts";
   * import assert from "node:assert/strict";
   *
   * const peer = new UpDown("down");
   * assert.equal(peer.up(), true);
   * assert.equal(peer.up(), false);
   * ```
   */
  up(): boolean {
    return this.#set("up");
  }

  /**
   * Records a failure.
   *
   * @returns Whether the state changed to down: the caller's cue to log it.
   *
   * @example Usage
   * ```ts
   * import { UpDown } from "./up_down.ts";
   * import assert from "node:assert/strict";
   *
   * const peer = new UpDown("up");
   * assert.equal(peer.down(), true);
   * assert.equal(peer.down(), false);
   * ```
   */
  down(): boolean {
    return this.#set("down");
  }

  #set(state: UpDownState): boolean {
    if (this.#state === state) return false;
    this.#state = state;
    return true;
  }
}
