/**
 * Waiting helpers shared by the client, the command line and the server. Web APIs only.
 *
 * @module
 */

/**
 * Waits `ms` milliseconds, or less when `signal` aborts; never rejects.
 *
 * @param ms How long to wait.
 * @param signal Ends the wait early when aborted.
 * @returns When the time is up or the signal aborted.
 *
 * @example Usage
 * ```ts
 * import { sleep } from "./async.ts";
 * import assert from "node:assert/strict";
 *
 * const started = Date.now();
 * await sleep(10_000, AbortSignal.abort());
 * assert.ok(Date.now() - started < 1000);
 * ```
 */
export function sleep(ms: number, signal?: AbortSignal): Promise<void> {
  return new Promise((resolve) => {
    if (signal?.aborted) return resolve();
    const done = (): void => {
      clearTimeout(timer);
      signal?.removeEventListener("abort", done);
      resolve();
    };
    const timer = setTimeout(done, ms);
    signal?.addEventListener("abort", done, { once: true });
  });
}

/**
 * Waits for `promise`, or until the epoch-millisecond `deadline`, whichever comes first. A
 * rejection of `promise` before the deadline is passed on.
 *
 * @param promise What to wait for.
 * @param deadline Epoch milliseconds after which waiting stops.
 * @returns When either happened.
 *
 * @example Usage
 * ```ts
 * import { raceDeadline } from "./async.ts";
 * import assert from "node:assert/strict";
 *
 * const started = Date.now();
 * await raceDeadline(new Promise<void>(() => {}), Date.now() + 20);
 * assert.ok(Date.now() - started < 1000);
 * ```
 */
export async function raceDeadline(promise: Promise<void>, deadline: number): Promise<void> {
  let timer: ReturnType<typeof setTimeout> | undefined;
  try {
    await Promise.race([
      promise,
      new Promise<void>((resolve) =>
        timer = setTimeout(resolve, Math.max(0, deadline - Date.now()))
      ),
    ]);
  } finally {
    clearTimeout(timer);
  }
}
