/**
 * What the broker should retain, and what it has yet to be sent (docs/publish.md, "No backlog"):
 * one payload per topic, the latest. A topic set again before it was sent is sent once, with its
 * latest payload; one set while its previous payload is in flight waits for that to be
 * acknowledged, so a topic's payloads reach the broker in order. Memory is bounded by the number
 * of topics, however slow the broker.
 *
 * @module
 */

/** One message to send: a retained payload (`""` removes a topic's retained message). */
export interface OutboxMessage {
  /** The topic. */
  readonly topic: string;
  /** The payload. */
  readonly payload: string;
}

/**
 * The latest payload per topic and which topics are still to be sent.
 *
 * @example A slow broker gets the latest payload only
 * ```ts
 * import { LatestOutbox } from "./outbox.ts";
 * import assert from "node:assert/strict";
 *
 * const outbox = new LatestOutbox();
 * outbox.set("obs/s/state/weather", "1");
 * outbox.set("obs/s/state/weather", "2");
 * outbox.set("obs/s/status", "online");
 * assert.deepEqual(outbox.take(), { topic: "obs/s/state/weather", payload: "2" });
 * outbox.set("obs/s/state/weather", "3"); // waits: "2" is in flight
 * assert.deepEqual(outbox.take(), { topic: "obs/s/status", payload: "online" });
 * assert.equal(outbox.take(), undefined);
 * outbox.settled("obs/s/state/weather", true);
 * assert.deepEqual(outbox.take(), { topic: "obs/s/state/weather", payload: "3" });
 * ```
 */
export class LatestOutbox {
  /** Every topic's latest payload: what the broker should retain. */
  #retained = new Map<string, string>();
  /** Topics whose latest payload is not sent yet, in the order they became due. */
  #due = new Set<string>();
  /** Topics sent and not yet acknowledged, with the payload sent. */
  #inFlight = new Map<string, string>();
  #onDue: () => void;

  /**
   * Creates an empty outbox.
   *
   * @param onDue Called when a topic becomes due (the sender may take it).
   */
  constructor(onDue: () => void = () => {}) {
    this.#onDue = onDue;
  }

  /** How many topics are due. */
  get due(): number {
    return this.#due.size;
  }

  /** How many topics have a retained payload (removals not yet sent included). */
  get size(): number {
    return this.#retained.size;
  }

  /**
   * The payload the broker should retain for a topic.
   *
   * @param topic The topic.
   * @returns The payload, or `undefined` when none.
   */
  get(topic: string): string | undefined {
    const payload = this.#retained.get(topic);
    return payload === "" ? undefined : payload;
  }

  /**
   * The topics with a retained payload.
   *
   * @returns The topics (removals not yet sent left out).
   */
  topics(): string[] {
    return [...this.#retained].filter(([, p]) => p !== "").map(([t]) => t);
  }

  /**
   * Sets a topic's payload; it is due unless the broker already has exactly that payload.
   *
   * @param topic The topic.
   * @param payload The payload; `""` removes the retained message (see {@linkcode remove}).
   */
  set(topic: string, payload: string): void {
    if (this.#retained.get(topic) === payload && !this.#due.has(topic)) return;
    this.#retained.set(topic, payload);
    this.#due.delete(topic);
    this.#due.add(topic);
    this.#onDue();
  }

  /**
   * Removes a topic's retained message at the broker (an empty retained payload), if it has one.
   *
   * @param topic The topic.
   */
  remove(topic: string): void {
    if (this.#retained.has(topic)) this.set(topic, "");
  }

  /** Makes every topic due again: after a (re)connection, the broker may have lost them all. */
  resendAll(): void {
    this.#inFlight.clear();
    const all = [...this.#retained.keys()];
    this.#due.clear();
    for (const topic of all) this.#due.add(topic);
    if (all.length > 0) this.#onDue();
  }

  /**
   * The next due topic not in flight, with its latest payload, now in flight.
   *
   * @returns The message, or `undefined` when nothing can be sent now.
   */
  take(): OutboxMessage | undefined {
    for (const topic of this.#due) {
      if (this.#inFlight.has(topic)) continue;
      this.#due.delete(topic);
      const payload = this.#retained.get(topic)!;
      this.#inFlight.set(topic, payload);
      return { topic, payload };
    }
    return undefined;
  }

  /**
   * A message in flight was acknowledged (`ok`) or failed.
   *
   * @param topic Its topic.
   * @param ok Whether the broker acknowledged it.
   */
  settled(topic: string, ok: boolean): void {
    const sent = this.#inFlight.get(topic);
    if (sent === undefined) return;
    this.#inFlight.delete(topic);
    if (!ok) {
      this.#due.add(topic);
    } else if (sent === "" && this.#retained.get(topic) === "") {
      // A removal the broker took: nothing of it is left to retain.
      this.#retained.delete(topic);
    }
    if (this.#due.size > 0) this.#onDue();
  }
}
