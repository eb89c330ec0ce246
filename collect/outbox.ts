/**
 * The collector's queue to the service (docs/collect.md, "Faults"): bounded (the oldest event
 * dropped, counted, one warning), posted in order in `POST /events` batches, each with an
 * `Idempotency-Key` it keeps on every retry, kept whole through any transient failure and drained
 * when the service returns.
 *
 * @module
 */

import type { EventInput, TelemetryClient } from "../client/client.ts";
import { TelemetryHttpError } from "../client/errors.ts";
import { sleep } from "../wire/async.ts";
import { Backoff } from "../wire/backoff.ts";
import { UpDown } from "../wire/up_down.ts";

/** A collector log line: level and message (the program adds the time). */
export type CollectLog = (level: "info" | "warn" | "error", message: string) => void;

/** Events the queue holds at most, by default. */
export const DEFAULT_QUEUE_CAPACITY = 10_000;
/** Events in one `POST /events`. */
const BATCH = 500;
/**
 * Bytes of events (data, meta and the rest) in one `POST /events`, roughly: well under the
 * service's default `--max-body` (1 MiB), so a backlog of large records drains in batches too.
 */
const BATCH_BYTES = 512 * 1024;
/** The wait after the first failed post; it doubles after each further one. */
const FIRST_BACKOFF_MS = 500;
/** Longest wait between two tries while the service is down. */
const MAX_BACKOFF_MS = 10_000;

/** Answers that refuse the events themselves: retrying the same batch would never succeed. */
const REFUSED = new Set([400, 413, 422]);

/**
 * Whether an error refuses the events themselves: the service's answer to a bad event, or the
 * client's own check of one (a `TypeError` or `RangeError` before sending). Anything else (no
 * answer, 5xx, 401, 429) is transient: the events stay queued.
 */
function refusal(err: unknown): boolean {
  if (err instanceof TelemetryHttpError) return REFUSED.has(err.status);
  return err instanceof TypeError || err instanceof RangeError;
}

/**
 * The queue and its sender.
 *
 * @example Usage
 * ```ts ignore
 * import { Outbox } from "./outbox.ts";
 * import { TelemetryClient } from "../client/client.ts";
 *
 * const outbox = new Outbox(new TelemetryClient(), console.log);
 * outbox.push({ type: "weather", data: { t: 1 } });
 * const stop = new AbortController();
 * await outbox.run(stop.signal);
 * ```
 */
export class Outbox {
  readonly #client: TelemetryClient;
  readonly #log: CollectLog;
  readonly #capacity: number;
  /** Events waiting, from `#head` on; the batch in flight is out of it, in `#flight`. */
  #items: EventInput[] = [];
  #head = 0;
  /**
   * The batch being posted, oldest first: never dropped by a full queue, since the service may
   * have taken it; it leaves as it is posted or refused, and stays, with its key, while posts of
   * it fail.
   */
  #flight: EventInput[] = [];
  /** The `Idempotency-Key` of the batch in flight (of its first event, one at a time). */
  #flightKey: string | undefined;
  /** The batch in flight was refused: its events are posted one at a time. */
  #oneAtATime = false;
  #dropped = 0;
  #overflowing = false;
  /** Whether the service takes events: one line when it stops, one when it takes them again. */
  readonly #service = new UpDown("up");
  #refused = 0;
  #wake: (() => void) | undefined;

  /**
   * Creates the queue.
   *
   * @param client The service's client.
   * @param log Where the lines go.
   * @param capacity Events held at most.
   */
  constructor(client: TelemetryClient, log: CollectLog, capacity = DEFAULT_QUEUE_CAPACITY) {
    this.#client = client;
    this.#log = log;
    this.#capacity = capacity;
  }

  /** Events waiting, with those in flight. */
  get size(): number {
    return this.#flight.length + this.#waiting;
  }

  /** Events waiting, not in flight. */
  get #waiting(): number {
    return this.#items.length - this.#head;
  }

  /** Events dropped because the queue was full. */
  get dropped(): number {
    return this.#dropped;
  }

  /** Events the service refused (a bad event: logged and left out, not retried). */
  get refused(): number {
    return this.#refused;
  }

  /**
   * Queues one event; when full, the oldest waiting (not in flight) is dropped and counted (one
   * warning per spell of overflow). While a batch as large as the queue is in flight, the queue
   * holds one event more: the newest.
   *
   * @param event The event.
   */
  push(event: EventInput): void {
    if (this.size >= this.#capacity && this.#waiting > 0) this.#drop(1);
    this.#items.push(event);
    this.#compact();
    this.#wake?.();
  }

  /** Drops the `n` oldest waiting events, counted, with one warning per spell of overflow. */
  #drop(n: number): void {
    this.#head += n;
    this.#dropped += n;
    if (!this.#overflowing) {
      this.#overflowing = true;
      this.#log(
        "warn",
        `the queue to the service is full (${this.#capacity} events): dropping the oldest until the service takes them`,
      );
    }
  }

  /**
   * Posts what is queued, in order, until `signal` aborts; retries with capped back-off while the
   * service is down.
   *
   * @param signal Ends the loop (after the batch in flight).
   */
  async run(signal: AbortSignal): Promise<void> {
    const backoff = new Backoff({ firstMs: FIRST_BACKOFF_MS, maxMs: MAX_BACKOFF_MS });
    while (!signal.aborted) {
      if (this.size === 0) {
        // One listener at a time: a night of empty spells must not pile listeners on `signal`.
        await new Promise<void>((resolve) => {
          const done = (): void => {
            signal.removeEventListener("abort", done);
            this.#wake = undefined;
            resolve();
          };
          this.#wake = done;
          signal.addEventListener("abort", done, { once: true });
        });
        continue;
      }
      // The batch in flight is not aborted with the loop: the service may be storing it, and
      // drain() would only wait for its answer again. The client's own timeout bounds it.
      if (await this.#sendOne(undefined)) {
        backoff.reset();
      } else {
        await backoff.wait(signal);
      }
    }
  }

  /**
   * Posts what is left until it is empty or `deadline` (epoch ms) passes: at the end of a run.
   *
   * @param deadline When to give up.
   * @returns The events left unposted.
   */
  async drain(deadline: number): Promise<number> {
    while (this.size > 0 && Date.now() < deadline) {
      const signal = AbortSignal.timeout(Math.max(1, deadline - Date.now()));
      if (!await this.#sendOne(signal)) await sleep(200, signal);
    }
    return this.size;
  }

  /**
   * Sends the batch in flight, or the oldest waiting batch when none is; true when it left the
   * queue (posted, or refused as bad). A batch keeps its `Idempotency-Key` until it leaves, so a
   * retry of a batch the service stored without answering is answered, not stored again.
   */
  async #sendOne(signal: AbortSignal | undefined): Promise<boolean> {
    if (this.#flight.length === 0) {
      this.#batch();
      this.#flightKey = crypto.randomUUID();
      this.#oneAtATime = false;
    }
    if (this.#oneAtATime) return await this.#oneByOne(signal);
    try {
      await this.#post(this.#flight, signal);
      this.#taken(this.#flight.length);
      return true;
    } catch (err) {
      if (refusal(err)) {
        this.#oneAtATime = true;
        this.#flightKey = crypto.randomUUID();
        return await this.#oneByOne(signal);
      }
      this.#failed(err);
      return false; // the batch stays in flight, with its key, for the next try
    }
  }

  /**
   * One post of events with the key in flight. The client sends it once: the queue's loop, with
   * its back-off and its log lines, is the one that retries.
   */
  async #post(events: EventInput[], signal: AbortSignal | undefined): Promise<void> {
    // The minimal answer: the collector needs only to know the batch was stored, not its
    // envelopes back (docs/http-api.md, "Prefer: return=minimal").
    await this.#client.postEvents(events, {
      idempotencyKey: this.#flightKey!,
      retries: 0,
      minimal: true,
      ...(signal ? { signal } : {}),
    });
  }

  /**
   * Takes the oldest events out of the waiting ones into `#flight`, up to {@linkcode BATCH} of them
   * and about {@linkcode BATCH_BYTES}.
   */
  #batch(): EventInput[] {
    const end = Math.min(this.#items.length, this.#head + BATCH);
    let bytes = 0;
    let i = this.#head;
    while (i < end) {
      // The whole event (its meta may be as large as its data), as the body will carry it.
      bytes += JSON.stringify(this.#items[i]!)?.length ?? 0;
      if (bytes > BATCH_BYTES && i > this.#head) break;
      i++;
    }
    this.#flight = this.#items.slice(this.#head, i);
    this.#head = i;
    this.#compact();
    return this.#flight;
  }

  /**
   * A batch the service refused: each event alone, each with a key of its own, so one bad event
   * costs only itself. A transient failure keeps the rest in flight, the event being posted with
   * its key.
   *
   * @returns Whether the whole batch left (false: a transient failure).
   */
  async #oneByOne(signal: AbortSignal | undefined): Promise<boolean> {
    while (this.#flight.length > 0) {
      const event = this.#flight[0]!;
      try {
        await this.#post([event], signal);
      } catch (err) {
        if (!refusal(err)) {
          this.#failed(err);
          return false; // the rest stays in flight, in order
        }
        this.#refused++;
        const why = err instanceof TelemetryHttpError ? err.detail : (err as Error).message;
        this.#log("error", `the service refused an event of type "${event.type}": ${why}`);
      }
      this.#taken(1);
      this.#flightKey = crypto.randomUUID();
    }
    return true;
  }

  /** The `n` oldest events in flight left: posted, or refused as bad. */
  #taken(n: number): void {
    this.#flight = this.#flight.slice(n);
    if (this.#service.up()) this.#log("info", "the service takes events again");
    if (this.size === 0 && this.#overflowing) {
      this.#overflowing = false;
      this.#log("info", `the queue is drained; ${this.#dropped} events were dropped in all`);
    }
  }

  #failed(err: unknown): void {
    if (!this.#service.down()) return;
    const why = (err instanceof Error ? err.message : String(err)).split("\n")[0];
    this.#log(
      "warn",
      `the service does not take events (${why}); queueing them (at most ${this.#capacity})`,
    );
  }

  /** Drops the consumed head of the array now and then, so memory follows the queue's size. */
  #compact(): void {
    if (this.#head > 1024 && this.#head * 2 > this.#items.length) {
      this.#items = this.#items.slice(this.#head);
      this.#head = 0;
    }
  }
}
