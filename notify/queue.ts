/**
 * Notifications of safety changes (docs/safety.md#notifications), without HTTP: each receiver
 * has its own bounded queue, sent in order off the ingest path, each message retried with a
 * capped back-off for an hour, then dropped with one warning. How a message is sent (the POST,
 * its format) is injected, and so are the clock and the timers, so the schedule is tested with
 * short delays and no network.
 *
 * @example Usage
 * ```ts
 * import { Notifier } from "./queue.ts";
 * import assert from "node:assert/strict";
 *
 * const sent: string[] = [];
 * const notifier = new Notifier({
 *   receivers: ["http://127.0.0.1:9/hook"],
 *   send: (url, message) => {
 *     sent.push(`${url} ${message.kind} ${message.safe}`);
 *     return Promise.resolve();
 *   },
 * });
 * notifier.notify({ kind: "safety", safe: false, reasons: ["weather: stale"], ts: "2026-11-27T03:00:00.000Z", site: "s" });
 * await notifier.close(1000);
 * assert.deepEqual(sent, ["http://127.0.0.1:9/hook safety false"]);
 * assert.deepEqual(notifier.counts, { sent: 1, failed: 0, dropped: 0 });
 * ```
 *
 * @module
 */

import { Backoff } from "../wire/backoff.ts";
import { UpDown } from "../wire/up_down.ts";
import type { LogFields } from "../core/log.ts";
import type { SafetyChange } from "../core/safety.ts";
import type { NotificationCounts } from "../http/metrics.ts";

/** A notification as it is sent: the change and the site it is about. */
export interface Notification extends SafetyChange {
  /** The site directory's `site_id` (docs/storage.md). */
  site: string;
}

/** Where the notifier prints its lines: the service log (docs/operations.md). */
export interface NotifyLog {
  /** An info line. */
  info(msg: string, fields?: LogFields): void;
  /** A warn line. */
  warn(msg: string, fields?: LogFields): void;
}

/** Options of {@linkcode Notifier}. */
export interface NotifierOptions {
  /** The receivers' URLs, each with its own queue. */
  receivers: readonly string[];
  /**
   * Sends one message to one receiver; resolves when it accepted it, rejects otherwise. It must
   * stop when `signal` aborts (the per-try timeout, a shutdown).
   */
  send: (receiver: string, message: Notification, signal: AbortSignal) => Promise<void>;
  /**
   * Messages each receiver's queue holds; when full, the oldest waiting one is dropped.
   * @default {1000}
   */
  capacity?: number;
  /**
   * The wait after the first failed try, doubled after each further one.
   * @default {1000}
   */
  firstDelayMs?: number;
  /**
   * The longest wait between two tries.
   * @default {60000}
   */
  maxDelayMs?: number;
  /**
   * How long a message is tried, from when it was queued, before it is dropped.
   * @default {3600000}
   */
  maxAgeMs?: number;
  /**
   * Longest one try may take before it is aborted and counted as failed.
   * @default {10000}
   */
  timeoutMs?: number;
  /**
   * The clock, ms since the epoch.
   * @default {Date.now}
   */
  now?: () => number;
  /**
   * Runs `fn` after `ms`; returns what cancels it.
   * @default {setTimeout and clearTimeout}
   */
  setTimer?: (fn: () => void, ms: number) => () => void;
  /**
   * The log lines: one when a receiver goes down or comes back, one per batch of dropped
   * messages.
   * @default {no lines}
   */
  log?: NotifyLog;
}

/** Messages each receiver's queue holds (docs/safety.md#notifications). */
export const DEFAULT_NOTIFY_CAPACITY = 1000;
/** The longest wait between two tries of one message. */
export const DEFAULT_NOTIFY_MAX_DELAY_MS = 60_000;
/** How long a message is tried before it is dropped. */
export const DEFAULT_NOTIFY_MAX_AGE_MS = 3_600_000;
/** Longest one try may take. */
export const DEFAULT_NOTIFY_TIMEOUT_MS = 10_000;

function defaultSetTimer(fn: () => void, ms: number): () => void {
  const id = setTimeout(fn, ms);
  return () => clearTimeout(id);
}

/**
 * A receiver's URL as the log shows it: scheme, host and path. The query is left out, as it
 * may hold a token.
 *
 * @param url The receiver's URL.
 * @returns The shown text.
 *
 * @example Usage
 * ```ts
 * import { shownReceiver } from "./queue.ts";
 * import assert from "node:assert/strict";
 *
 * assert.equal(shownReceiver("https://ntfy.sh/obs?auth=secret"), "https://ntfy.sh/obs");
 * ```
 */
export function shownReceiver(url: string): string {
  try {
    const u = new URL(url);
    return `${u.origin}${u.pathname}`;
  } catch {
    return url;
  }
}

function minutes(ms: number): string {
  return `${Math.round(ms / 60_000)} min`;
}

/** One queued message and when it was queued. */
interface Queued {
  message: Notification;
  queuedAt: number;
}

/** The shared counters and settings every receiver's queue uses. */
interface Shared {
  readonly options: Required<Omit<NotifierOptions, "receivers" | "log">>;
  readonly log: NotifyLog | undefined;
  readonly counts: { sent: number; failed: number; dropped: number };
}

/** One receiver: its queue, whether it is up, and the try in flight or the retry pending. */
class Receiver {
  readonly url: string;
  #shared: Shared;
  #queue: Queued[] = [];
  /** The wait before the next try; its attempts are the failed tries of the message at the head. */
  readonly #backoff: Backoff;
  readonly #state = new UpDown("up");
  /** The try in flight, so that a shutdown can abort it and wait for it. */
  #inFlight: { abort: AbortController; done: Promise<void> } | undefined;
  #cancelRetry: (() => void) | undefined;
  /** One warning per overflow, until the queue has room again. */
  #overflowing = false;
  #closing = false;
  /** Set once a shutdown's drain is over: no try starts after it. */
  #stopped = false;
  #idle: PromiseWithResolvers<void> | undefined;

  constructor(url: string, shared: Shared) {
    this.url = url;
    this.#shared = shared;
    const { firstDelayMs, maxDelayMs } = shared.options;
    this.#backoff = new Backoff({ firstMs: firstDelayMs, maxMs: maxDelayMs });
  }

  /** Messages waiting, the one in flight included. */
  get waiting(): number {
    return this.#queue.length;
  }

  push(message: Notification): void {
    const { options, counts } = this.#shared;
    if (this.#queue.length >= options.capacity) {
      // The newest message says how the site is now: the oldest waiting one goes (never the one
      // in flight, which may be arriving).
      this.#queue.splice(this.#inFlight ? 1 : 0, 1);
      counts.dropped++;
      if (!this.#overflowing) {
        this.#overflowing = true;
        this.#shared.log?.warn(
          `notification queue of ${
            shownReceiver(this.url)
          } is full (${options.capacity} messages): dropping the oldest until it has room`,
        );
      }
    }
    this.#queue.push({ message, queuedAt: options.now() });
    this.#pump();
  }

  /** Starts the next try unless one is in flight or a retry is pending. */
  #pump(): void {
    if (this.#stopped || this.#inFlight || this.#cancelRetry) return;
    this.#expire();
    const head = this.#queue[0];
    if (head === undefined) {
      this.#overflowing = false;
      this.#idle?.resolve();
      return;
    }
    const abort = new AbortController();
    const cancelTimeout = this.#shared.options.setTimer(
      () => abort.abort(new Error(`no answer within ${this.#shared.options.timeoutMs} ms`)),
      this.#shared.options.timeoutMs,
    );
    const done = this.#try(head, abort.signal).finally(() => {
      cancelTimeout();
      this.#inFlight = undefined;
    }).then((ok) => this.#settled(head, ok));
    this.#inFlight = { abort, done };
  }

  /** One try; resolves with whether it succeeded, with the error as a string otherwise. */
  async #try(head: Queued, signal: AbortSignal): Promise<true | string> {
    try {
      await this.#shared.options.send(this.url, head.message, signal);
      return true;
    } catch (err) {
      const reason = signal.aborted ? signal.reason : err;
      return reason instanceof Error ? reason.message : String(reason);
    }
  }

  #settled(head: Queued, ok: true | string): void {
    const { counts, log } = this.#shared;
    if (ok === true) {
      counts.sent++;
      if (this.#queue[0] === head) this.#queue.shift();
      if (this.#state.up()) {
        log?.info(
          `notification receiver ${
            shownReceiver(this.url)
          } is up again after ${this.#backoff.attempts} failed tries`,
        );
      }
      this.#backoff.reset();
      this.#pump();
      return;
    }
    // A try a shutdown aborted says nothing about the receiver: its message is counted as dropped.
    if (this.#stopped) return;
    counts.failed++;
    const delay = this.#backoff.next();
    if (this.#state.down()) {
      const { maxAgeMs, maxDelayMs } = this.#shared.options;
      log?.warn(
        `notification receiver ${
          shownReceiver(this.url)
        } is down (${ok}); retrying each message for ${minutes(maxAgeMs)}, at most ${
          maxDelayMs / 1000
        } s apart`,
      );
    }
    if (this.#closing) {
      this.#idle?.resolve();
      return;
    }
    this.#cancelRetry = this.#shared.options.setTimer(() => {
      this.#cancelRetry = undefined;
      this.#pump();
    }, delay);
  }

  /** Drops the messages tried for longer than the maximum age, with one warning for them all. */
  #expire(): void {
    const { now, maxAgeMs } = this.#shared.options;
    const limit = now() - maxAgeMs;
    let n = 0;
    while (n < this.#queue.length && this.#queue[n]!.queuedAt <= limit) n++;
    if (n === 0) return;
    this.#queue.splice(0, n);
    this.#shared.counts.dropped += n;
    this.#shared.log?.warn(
      `dropped ${n} notification${n === 1 ? "" : "s"} to ${
        shownReceiver(this.url)
      } after trying for ${minutes(maxAgeMs)}`,
    );
    // Those behind the dropped ones have not failed yet.
    this.#backoff.reset();
  }

  /**
   * Stops retrying: a receiver that is down gets no more tries; one that is up gets until the
   * deadline to take what is queued. Then the try in flight is aborted.
   *
   * @returns The messages left unsent, now dropped.
   */
  async close(deadline: Promise<void>): Promise<number> {
    this.#closing = true;
    this.#cancelRetry?.();
    this.#cancelRetry = undefined;
    if (this.#state.state !== "down" && this.#queue.length > 0) {
      this.#idle = Promise.withResolvers<void>();
      this.#pump();
      await Promise.race([this.#idle.promise, deadline]);
    }
    this.#stopped = true;
    const inFlight = this.#inFlight;
    inFlight?.abort.abort(new Error("shutting down"));
    await inFlight?.done;
    const left = this.#queue.length;
    this.#queue = [];
    this.#shared.counts.dropped += left;
    return left;
  }
}

/**
 * Sends notifications to every receiver, off the caller's path: {@linkcode Notifier.notify}
 * only queues. Each receiver has its own queue of at most `capacity` messages, sent one at a
 * time in order; a failed try is retried after a wait that doubles from `firstDelayMs` up to
 * `maxDelayMs`, until the message has waited `maxAgeMs`. The log gets one line when a receiver
 * goes down, one when it is up again, and one per batch of dropped messages: never one per try.
 *
 * @example Usage
 * ```ts
 * import { Notifier } from "./queue.ts";
 * import assert from "node:assert/strict";
 *
 * let tries = 0;
 * const notifier = new Notifier({
 *   receivers: ["http://127.0.0.1:9/hook"],
 *   send: () => ++tries < 3 ? Promise.reject(new Error("refused")) : Promise.resolve(),
 *   firstDelayMs: 1,
 * });
 * notifier.notify({ kind: "safety", safe: true, reasons: [], ts: "2026-11-27T03:00:00.000Z", site: "s" });
 * for (let i = 0; i < 100 && notifier.counts.sent === 0; i++) await new Promise((r) => setTimeout(r, 5));
 * assert.deepEqual(notifier.counts, { sent: 1, failed: 2, dropped: 0 });
 * await notifier.close(0);
 * ```
 */
export class Notifier {
  #receivers: Receiver[];
  #shared: Shared;
  #closed: Promise<void> | undefined;

  /**
   * Creates a notifier; nothing is sent until {@linkcode Notifier.notify}.
   *
   * @param options The receivers, how to send, and the schedule.
   */
  constructor(options: NotifierOptions) {
    this.#shared = {
      options: {
        send: options.send,
        capacity: options.capacity ?? DEFAULT_NOTIFY_CAPACITY,
        firstDelayMs: options.firstDelayMs ?? 1000,
        maxDelayMs: options.maxDelayMs ?? DEFAULT_NOTIFY_MAX_DELAY_MS,
        maxAgeMs: options.maxAgeMs ?? DEFAULT_NOTIFY_MAX_AGE_MS,
        timeoutMs: options.timeoutMs ?? DEFAULT_NOTIFY_TIMEOUT_MS,
        now: options.now ?? Date.now,
        setTimer: options.setTimer ?? defaultSetTimer,
      },
      log: options.log,
      counts: { sent: 0, failed: 0, dropped: 0 },
    };
    this.#receivers = [...new Set(options.receivers)].map((url) => new Receiver(url, this.#shared));
  }

  /** The counters `telemetry_notifications_total{result}` reports. */
  get counts(): NotificationCounts {
    return { ...this.#shared.counts };
  }

  /** Messages waiting across all receivers, those in flight included. */
  get waiting(): number {
    return this.#receivers.reduce((n, r) => n + r.waiting, 0);
  }

  /**
   * Queues a message for every receiver and returns at once; after
   * {@linkcode Notifier.close} it is ignored.
   *
   * @param message The notification.
   */
  notify(message: Notification): void {
    if (this.#closed) return;
    for (const receiver of this.#receivers) receiver.push(message);
  }

  /**
   * Stops: no more retries; receivers that are up get until `drainMs` to take what is queued,
   * then every try in flight is aborted. What is left is dropped, with one warning.
   *
   * @param drainMs The longest wait for the queues to drain.
   * @returns When every try has ended. Calling it again returns the same promise.
   */
  close(drainMs: number): Promise<void> {
    this.#closed ??= this.#close(drainMs);
    return this.#closed;
  }

  async #close(drainMs: number): Promise<void> {
    let cancel = () => {};
    const deadline = new Promise<void>((resolve) => {
      cancel = this.#shared.options.setTimer(resolve, Math.max(0, drainMs));
    });
    try {
      const left = await Promise.all(this.#receivers.map((r) => r.close(deadline)));
      const n = left.reduce((a, b) => a + b, 0);
      if (n > 0) {
        this.#shared.log?.warn(
          `dropped ${n} unsent notification${n === 1 ? "" : "s"} at shutdown`,
        );
      }
    } finally {
      cancel();
    }
  }
}
