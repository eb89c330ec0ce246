/**
 * Merging values heard one at a time (MQTT topics, INDI elements) into whole records per type
 * (docs/collect.md, "Merging"): the latest value of every field is kept, and the record is
 * handed on at most once per `merge_ms`, stamped with the newest measurement time among the
 * values merged since the type's last record (so one wrong future time stamps one record only).
 *
 * @module
 */

import type { FieldReading } from "./inputs/input.ts";

/** What a merger hands on: a type's whole record and its measurement time. */
export type MergedRecord = (type: string, data: Record<string, unknown>, tsMs: number) => void;

interface Pending {
  data: Record<string, unknown>;
  /** The newest measurement time of the values merged since the last record. */
  newest: number;
  lastEmit: number;
  timer: ReturnType<typeof setTimeout> | undefined;
}

/**
 * The merger of one input.
 *
 * @example Two values of one type become one record
 * ```ts
 * import { FieldMerger } from "./field_merge.ts";
 * import assert from "node:assert/strict";
 *
 * const seen: unknown[] = [];
 * const merger = new FieldMerger(50, (type, data, ts) => seen.push({ type, data, ts }));
 * merger.add({ type: "w", field: "t", value: 1, sourceTs: 10 }, 99);
 * merger.add({ type: "w", field: "a.b", value: true, sourceTs: 20 }, 99);
 * merger.flush();
 * assert.deepEqual(seen, [{ type: "w", data: { t: 1, a: { b: true } }, ts: 20 }]);
 * merger.close();
 * ```
 */
export class FieldMerger {
  readonly #mergeMs: number;
  readonly #emit: MergedRecord;
  readonly #types = new Map<string, Pending>();

  /**
   * Creates the merger.
   *
   * @param mergeMs The least time between two records of one type.
   * @param emit Where records go.
   */
  constructor(mergeMs: number, emit: MergedRecord) {
    this.#mergeMs = mergeMs;
    this.#emit = emit;
  }

  /**
   * Takes one value. A JSON object is merged key by key; a dotted field name nests
   * (`A.B` -> `{"A": {"B": v}}`).
   *
   * @param reading The value.
   * @param readAt When it was read (epoch ms): its time when the source gives none.
   */
  add(reading: FieldReading, readAt: number): void {
    let pending = this.#types.get(reading.type);
    if (pending === undefined) {
      pending = { data: {}, newest: -Infinity, lastEmit: -Infinity, timer: undefined };
      this.#types.set(reading.type, pending);
    }
    const value = reading.value;
    if (value !== null && typeof value === "object" && !Array.isArray(value)) {
      for (const [key, v] of Object.entries(value)) setPath(pending.data, key.split("."), v);
    } else {
      setPath(pending.data, reading.field.split("."), value);
    }
    pending.newest = Math.max(pending.newest, reading.sourceTs ?? readAt);
    if (pending.timer === undefined) {
      // Values that arrive together (one INDI vector, one burst of topics) wait for this turn
      // of the event loop to end, so they leave as one record.
      const wait = Math.max(0, pending.lastEmit + this.#mergeMs - Date.now());
      const type = reading.type;
      pending.timer = setTimeout(() => this.#flushType(type), wait);
    }
  }

  /** Hands on every type that has values not handed on yet (at the end, and for `--once`). */
  flush(): void {
    for (const type of [...this.#types.keys()]) {
      if (this.#types.get(type)!.timer !== undefined) this.#flushType(type);
    }
  }

  /** Cancels the timers; values not flushed are dropped. */
  close(): void {
    for (const pending of this.#types.values()) clearTimeout(pending.timer);
    this.#types.clear();
  }

  #flushType(type: string): void {
    const pending = this.#types.get(type);
    if (pending === undefined) return;
    clearTimeout(pending.timer);
    pending.timer = undefined;
    pending.lastEmit = Date.now();
    const newest = pending.newest;
    pending.newest = -Infinity;
    this.#emit(type, structuredClone(pending.data), newest);
  }
}

function setPath(into: Record<string, unknown>, path: string[], value: unknown): void {
  let at = into;
  for (const key of path.slice(0, -1)) {
    const next = at[key];
    if (next === null || typeof next !== "object" || Array.isArray(next)) at[key] = {};
    at = at[key] as Record<string, unknown>;
  }
  at[path[path.length - 1]!] = value;
}
