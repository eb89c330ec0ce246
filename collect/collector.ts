/**
 * The collector (docs/collect.md): runs every input of a config, polled ones every `every_s`
 * and push ones through `listen`, each retried with capped back-off and logged once per change
 * of state, none stopping the others; applies the measurement-time rules and merging, and hands
 * events to the queue to the service.
 *
 * @module
 */

import type { EventInput } from "../client/client.ts";
import type { JsonObject } from "../wire/event.ts";
import { sleep } from "../wire/async.ts";
import { Backoff } from "../wire/backoff.ts";
import { UpDown } from "../wire/up_down.ts";
import type { CollectConfig, CollectInputConfig } from "./config.ts";
import type { Input, InputSink } from "./inputs/input.ts";
import { FieldMerger } from "./field_merge.ts";
import type { CollectLog, Outbox } from "./outbox.ts";

/** Longest wait before a failed input is tried again. */
const MAX_BACKOFF_MS = 60_000;
/** The least time a poll may take before it is given up (twice `every_s` when longer). */
const POLL_LIMIT_MS = 30_000;
/** How long a stopping collector tries to post what it holds. */
export const STOP_FLUSH_MS = 5_000;

/** Options of a {@linkcode Collector}. */
export interface CollectorOptions {
  /** The parsed config. */
  readonly config: CollectConfig;
  /** Where log lines go. */
  readonly log: CollectLog;
}

/** One running input with its bookkeeping. */
interface Running {
  readonly entry: CollectInputConfig;
  readonly input: Input;
  readonly merger: FieldMerger;
  /** Last source time posted, per type: an unchanged one posts nothing. */
  /** Per type, the source time of the last event, and its data for a merged record (as JSON). */
  readonly lastSourceTs: Map<string, { ts: number; data: string | undefined }>;
  /** Not known until the first outcome. */
  readonly state: UpDown;
  /** Whether it was up at least once (`--once` fails for an input that never was). */
  everUp: boolean;
  /** Why it last went down, or failed while down. */
  lastFailure: string | undefined;
  warned: Set<string>;
}

/** An input that never came up during {@linkcode Collector.onceReport}, and why. */
export interface InputNeverUp {
  /** The input's `name`. */
  readonly name: string;
  /** Its `kind`. */
  readonly kind: string;
  /** Why: its last failure, or that it gave no answer in the time. */
  readonly reason: string;
}

/** What {@linkcode Collector.onceReport} read, and which inputs gave nothing because down. */
export interface OnceReport {
  /** The events, in the order read. */
  readonly events: EventInput[];
  /** The inputs that never came up, in the config's order; empty when every one did. */
  readonly neverUp: InputNeverUp[];
}

/**
 * Runs a config's inputs.
 *
 * @example Read every input once
 * ```ts ignore
 * import { Collector } from "./collector.ts";
 * import { readCollectConfig } from "./config.ts";
 * import { INPUT_KINDS } from "./inputs/mod.ts";
 *
 * const config = readCollectConfig("collect.json", INPUT_KINDS);
 * const events = await new Collector({ config, log: console.log }).once(5000);
 * ```
 */
export class Collector {
  readonly #config: CollectConfig;
  readonly #log: CollectLog;
  #deliver: (event: EventInput) => void = () => {};
  /** Whether failed inputs are tried again (not with `--once`). */
  #retrying = true;

  /**
   * Creates the collector; nothing runs until {@linkcode Collector.run} or {@linkcode Collector.once}.
   *
   * @param options The config and the log.
   */
  constructor(options: CollectorOptions) {
    this.#config = options.config;
    this.#log = options.log;
  }

  /**
   * Runs until `signal` aborts, then stops the inputs and posts what it can within
   * {@linkcode STOP_FLUSH_MS}.
   *
   * @param outbox The queue to the service.
   * @param signal Stops the collector.
   * @returns The events left unposted at the end.
   */
  async run(outbox: Outbox, signal: AbortSignal): Promise<number> {
    this.#deliver = (event) => outbox.push(event);
    const running = this.#start();
    const sending = outbox.run(signal);
    try {
      await Promise.all(running.map((r) => this.#loop(r, signal)));
    } finally {
      for (const r of running) r.merger.flush();
      await sending;
      const left = await outbox.drain(Date.now() + STOP_FLUSH_MS);
      if (left > 0) {
        this.#log(
          "warn",
          `stopped with ${left} events not posted: the service did not take them in time`,
        );
      }
      await this.#close(running);
    }
    return outbox.size;
  }

  /**
   * Reads every polled input once and listens to push inputs for `listenMs`; returns the events
   * it would post, posting nothing. An input that never came up gives nothing and is not
   * reported here: {@linkcode Collector.onceReport} says which did not.
   *
   * @param listenMs How long push inputs listen.
   * @returns The events, in the order read.
   */
  async once(listenMs: number): Promise<EventInput[]> {
    return (await this.onceReport(listenMs)).events;
  }

  /**
   * Reads every polled input once and listens to push inputs for `listenMs` (`collect --once`);
   * returns the events it would post, posting nothing, and the inputs that never came up in that
   * time (down, or no answer), each with why: `--once` fails for them (docs/collect.md).
   *
   * @param listenMs How long push inputs listen, and the longest wait for a polled one.
   * @returns The events, in the order read, and the inputs that never came up.
   */
  async onceReport(listenMs: number): Promise<OnceReport> {
    const events: EventInput[] = [];
    this.#deliver = (event) => events.push(event);
    this.#retrying = false;
    const running = this.#start();
    const stop = new AbortController();
    try {
      const timer = setTimeout(() => stop.abort(), listenMs);
      await Promise.all(running.map(async (r) => {
        if (r.input.poll) {
          await this.#pollOnce(r, stop.signal);
        } else {
          await this.#loop(r, stop.signal);
        }
      }));
      clearTimeout(timer);
      for (const r of running) r.merger.flush();
    } finally {
      stop.abort();
      await this.#close(running);
    }
    const neverUp = running.filter((r) => !r.everUp).map((r) => ({
      name: r.entry.settings.name,
      kind: r.entry.settings.kind,
      reason: r.lastFailure ?? `no answer within ${listenMs / 1000} s`,
    }));
    return { events, neverUp };
  }

  #start(): Running[] {
    return this.#config.inputs.map((entry) => {
      const r: Running = {
        entry,
        input: entry.kind.create(entry.config, entry.settings),
        merger: new FieldMerger(entry.settings.mergeMs, (type, data, ts) => {
          this.#emit(r, type, data, ts, "merged");
        }),
        lastSourceTs: new Map(),
        state: new UpDown(),
        everUp: false,
        lastFailure: undefined,
        warned: new Set(),
      };
      return r;
    });
  }

  async #close(running: Running[]): Promise<void> {
    for (const r of running) {
      r.merger.close();
      try {
        await r.input.close?.();
      } catch (err) {
        this.#log("warn", `input ${r.entry.settings.name}: closing failed: ${reason(err)}`);
      }
    }
  }

  /**
   * One input's life: poll every `every_s`, or listen; back-off after a failure, from `every_s`
   * for a polled input and from 1 s for a push one, doubling up to a minute (or `every_s`).
   */
  async #loop(r: Running, signal: AbortSignal): Promise<void> {
    const every = r.entry.settings.everyMs;
    const firstMs = r.input.poll ? every : 1000;
    const backoff = new Backoff({ firstMs, maxMs: Math.max(firstMs, MAX_BACKOFF_MS) });
    while (!signal.aborted) {
      const started = Date.now();
      let ok: boolean;
      if (r.input.poll) {
        ok = await this.#pollOnce(r, signal);
      } else {
        ok = await this.#listenOnce(r, signal, () => backoff.reset());
      }
      if (signal.aborted) break;
      if (ok) backoff.reset();
      const wait = ok && r.input.poll ? every - (Date.now() - started) : backoff.next();
      await sleep(Math.max(0, wait), signal);
    }
  }

  /** Polls once; true when the source answered. */
  async #pollOnce(r: Running, signal: AbortSignal): Promise<boolean> {
    // A poll that never settles (an open that blocks, a source that stalls) must not hold this
    // input's loop, nor the collector's stop: it is given up after the limit, or at the stop.
    const limitMs = Math.max(2 * r.entry.settings.everyMs, POLL_LIMIT_MS);
    const limit = AbortSignal.any([signal, AbortSignal.timeout(limitMs)]);
    let onAbort: (() => void) | undefined;
    const given = new Promise<never>((_, reject) => {
      onAbort = () =>
        reject(new Error(`the read did not end within ${Math.round(limitMs / 1000)} s`));
      limit.addEventListener("abort", onAbort, { once: true });
    });
    try {
      const polling = r.input.poll!(this.#sink(r), limit);
      polling.catch(() => {}); // given up on: its late failure is nobody's
      await Promise.race([polling, given]);
      this.#up(r);
      return true;
    } catch (err) {
      if (!signal.aborted) this.#down(r, err);
      return false;
    } finally {
      limit.removeEventListener("abort", onAbort!);
    }
  }

  /** Listens until the connection ends; true when it ended because `signal` aborted. */
  async #listenOnce(r: Running, signal: AbortSignal, connected: () => void): Promise<boolean> {
    try {
      await r.input.listen!(this.#sink(r), signal, () => {
        connected();
        this.#up(r);
      });
      if (signal.aborted) return true;
      this.#down(r, new Error("the connection ended"));
    } catch (err) {
      if (!signal.aborted) this.#down(r, err);
    }
    return signal.aborted;
  }

  #sink(r: Running): InputSink {
    return {
      record: (reading) => {
        const type = reading.type ?? r.entry.settings.type;
        if (type === undefined) {
          this.#warn(r, "type", 'a record without a type was dropped: set "type" on the input');
          return;
        }
        this.#emit(
          r,
          type,
          reading.data,
          reading.sourceTs,
          reading.sourceTs !== undefined ? "source" : "now",
        );
      },
      field: (reading) => r.merger.add(reading, Date.now()),
      warn: (key, message) => this.#warn(r, key, message),
    };
  }

  /**
   * Turns a record into an event. A source time equal to the last one of this input and type
   * posts nothing (docs/collect.md, "Measurement time"); for a merged record, only when its data
   * is unchanged too: values timed in whole seconds (INDI) may change twice in one second. Without
   * a source time, the event is stamped now.
   */
  #emit(
    r: Running,
    type: string,
    data: Record<string, unknown>,
    sourceTs: number | undefined,
    from: "source" | "merged" | "now",
  ): void {
    const ts = sourceTs ?? Date.now();
    if (from !== "now") {
      const json = from === "merged" ? JSON.stringify(data) : undefined;
      const last = r.lastSourceTs.get(type);
      if (last?.ts === ts && last.data === json) return;
      r.lastSourceTs.set(type, { ts, data: json });
    }
    const settings = r.entry.settings;
    this.#deliver({
      type,
      data: data as JsonObject,
      ts: new Date(ts),
      ...(settings.meta ? { meta: settings.meta as JsonObject } : {}),
      ...(settings.storePermanently !== undefined
        ? { storePermanently: settings.storePermanently }
        : {}),
    });
  }

  #up(r: Running): void {
    r.everUp = true;
    if (!r.state.up()) return;
    r.warned.clear();
    this.#log("info", `input ${r.entry.settings.name} (${r.entry.settings.kind}) up`);
  }

  #down(r: Running, err: unknown): void {
    r.lastFailure = reason(err);
    if (!r.state.down()) return;
    r.warned.clear();
    const retry = this.#retrying ? "; retrying with back-off" : "";
    this.#log(
      "warn",
      `input ${r.entry.settings.name} (${r.entry.settings.kind}) down: ${reason(err)}${retry}`,
    );
  }

  #warn(r: Running, key: string, message: string): void {
    if (r.warned.has(key)) return;
    r.warned.add(key);
    this.#log("warn", `input ${r.entry.settings.name}: ${message}`);
  }
}

function reason(err: unknown): string {
  return (err instanceof Error ? err.message : String(err)).split("\n")[0]!;
}
