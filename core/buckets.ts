/**
 * Stored events summed up into time buckets (docs/history.md, "Buckets"): per bucket of
 * `every` milliseconds (aligned to multiples of `every` since the Unix epoch) and per type, the
 * number of events and, for each numeric field (dotted paths; a `"<number> <unit>"` string of a
 * field whose registered unit it names counts as that number), its mean, min, max, last value in
 * file order and count of values. Pure: `GET /history?every=` and `read --every` both feed it.
 *
 * @example Usage
 * ```ts
 * import { BucketSet } from "./buckets.ts";
 * import assert from "node:assert/strict";
 *
 * const set = new BucketSet({ everyMs: 60_000, aggregates: ["mean", "max"] });
 * set.add(Date.parse("2026-05-10T03:00:10Z"), "weather", { wind: { mps: 2 } });
 * set.add(Date.parse("2026-05-10T03:00:50Z"), "weather", { wind: { mps: 4 } });
 * assert.deepEqual([...set.drain()], [{
 *   t: "2026-05-10T03:00:00.000Z",
 *   type: "weather",
 *   count: 2,
 *   fields: { "wind.mps": { mean: 3, max: 4 } },
 * }]);
 * ```
 *
 * @module
 */

import { formatTimestamp } from "../wire/event.ts";
import type { Aggregate, FieldAggregates, HistoryBucket } from "../wire/history.ts";
import { numericValue } from "./freshness.ts";

/** Options of a {@linkcode BucketSet}. */
export interface BucketOptions {
  /** The bucket width in milliseconds. */
  everyMs: number;
  /** The aggregates each field gets, in this order. */
  aggregates: readonly Aggregate[];
  /** Only these fields (dotted paths; a path also covers the fields below it); all when absent. */
  fields?: readonly string[] | undefined;
  /** The registered unit of a type's field, which makes `"<number> <unit>"` strings count. */
  unitOf?: ((type: string, path: string) => string | undefined) | undefined;
  /**
   * The most buckets (one per start and type) held; past it the latest starts are given up and
   * {@linkcode BucketSet.truncatedAt} says where to continue.
   * @default {Infinity}
   */
  maxBuckets?: number | undefined;
  /**
   * The most cells held: one per bucket plus one per field aggregate in it (the memory a set
   * holds grows with cells, not with events). Past it the latest starts are given up as for
   * `maxBuckets`, but never the earliest one held, so that a continued scan always moves on.
   * @default {Infinity}
   */
  maxCells?: number | undefined;
}

/**
 * A flat `data` given by its keys and values, for {@linkcode BucketSet.addFlat}: held by the
 * caller and filled anew for each event.
 */
export interface FlatRow {
  /** The keys, in the order they stand in `data` (an object's keys right after it). */
  keys: readonly string[];
  /** The index of each key's object among the keys, or -1 for a key of `data` itself. */
  parents: readonly number[];
  /** Each key's number, or `NaN` for any other value (an object too). */
  numbers: Float64Array;
  /**
   * The text of a key's value when it is a string (else `undefined`), asked only for a field
   * whose registered unit may make it count; absent when no string may count.
   */
  text: ((i: number) => string | undefined) | undefined;
  /** How many keys the event has. */
  n: number;
  /** Another number for every other list of keys (of any row handed to the same set). */
  shape: number;
}

interface FieldAcc {
  n: number;
  sum: number;
  min: number;
  max: number;
  last: number;
}

/**
 * A field path as a tree of keys: a walk looks each key up in its parent's map instead of
 * building the dotted path per event (that string, hashed anew for every value, was most of
 * the cost of a bucket); the path is written once, when the node is made.
 */
interface Node {
  path: string;
  children: Map<string, Node> | undefined;
  acc: FieldAcc | undefined;
}

interface TypeAcc {
  count: number;
  root: Node;
  /** The shape of the last {@linkcode BucketSet.addFlat} into it, and the nodes of its keys. */
  flatShape: number;
  flatNodes: (Node | undefined)[];
}

/** The buckets of one start, and the cells they hold. */
interface Start {
  types: Map<string, TypeAcc>;
  cells: number;
}

/** Deeper than the service ever stores (docs/http-api.md): no walk goes further. */
const MAX_DEPTH = 32;

/**
 * The buckets of a scan, held as running sums (never the events), handed out in time order.
 *
 * @example Usage
 * ```ts
 * import { BucketSet } from "./buckets.ts";
 * import assert from "node:assert/strict";
 *
 * const set = new BucketSet({ everyMs: 10_000, aggregates: ["count"], maxBuckets: 1 });
 * set.add(0, "a", { x: 1 });
 * set.add(10_000, "a", { x: 2 });
 * assert.equal(set.truncatedAt, 10_000);
 * assert.equal([...set.drain()].length, 1);
 * ```
 */
export class BucketSet {
  #every: number;
  #aggregates: readonly Aggregate[];
  #fields: readonly string[] | undefined;
  #unitOf: ((type: string, path: string) => string | undefined) | undefined;
  #max: number;
  #maxCells: number;
  #starts = new Map<number, Start>();
  #held = 0;
  #cells = 0;
  /** The start an event is being counted into (its new field aggregates are its cells). */
  #current: Start | undefined;
  #cutoff = Infinity;
  /** The bucket of the last {@linkcode addFlat}: its start, type and place. */
  #flatAcc: TypeAcc | undefined;
  #flatStart = NaN;
  #flatType = "";
  #flatHeld: Start | undefined;

  /**
   * Creates an empty set.
   *
   * @param options Width, aggregates, fields, units and the most buckets held.
   */
  constructor(options: BucketOptions) {
    this.#every = options.everyMs;
    this.#aggregates = options.aggregates;
    this.#fields = options.fields && options.fields.length > 0 ? options.fields : undefined;
    this.#unitOf = options.unitOf;
    this.#max = options.maxBuckets ?? Infinity;
    this.#maxCells = options.maxCells ?? Infinity;
  }

  /**
   * The start (epoch milliseconds) of the earliest bucket given up to stay within `maxBuckets`:
   * a scan continued from there loses nothing. `undefined` while nothing was given up.
   */
  get truncatedAt(): number | undefined {
    return Number.isFinite(this.#cutoff) ? this.#cutoff : undefined;
  }

  /**
   * Counts one event into its bucket.
   *
   * @param tsMs The event's `ts` in epoch milliseconds.
   * @param type The event's type.
   * @param data The event's `data`.
   */
  add(tsMs: number, type: string, data: unknown): void {
    const acc = this.#count(tsMs, type);
    if (acc === undefined) return;
    this.#walk(acc.root, type, data, 0);
    if (this.#cells > this.#maxCells) this.#giveUpLatest();
  }

  /**
   * Counts one event whose `data` is given as its keys and values in order (an object's keys
   * right after it, each naming its object in `parents`): what {@linkcode add} does with `data`
   * built from them, without building it (the bucket scan of stored lines, `bucket_scan.ts`). The
   * keys of one object must be distinct and none an array index (those an object would enumerate
   * first); no value is an array. A number stands in `numbers`; any other value (an object, a
   * string, a boolean, `null`) is `NaN` there, and a string's text is given by `text`.
   *
   * @param tsMs The event's `ts` in epoch milliseconds.
   * @param type The event's type.
   * @param row The keys and values (only the first `row.n` count); `row.shape` is another number
   *   for every other list of keys (of any row handed to the same set), so that the fields of the
   *   keys are looked up once per bucket and type, not per event.
   *
   * @example Usage
   * ```ts
   * import { BucketSet } from "./buckets.ts";
   * import assert from "node:assert/strict";
   *
   * const set = new BucketSet({ everyMs: 60_000, aggregates: ["mean"] });
   * const row = {
   *   keys: ["temp", "sky"],
   *   parents: [-1, -1],
   *   numbers: new Float64Array([2, NaN]),
   *   text: undefined,
   *   n: 2,
   *   shape: 1,
   * };
   * set.addFlat(0, "weather", row);
   * row.numbers[0] = 4;
   * set.addFlat(1_000, "weather", row);
   * assert.deepEqual([...set.drain()][0]!.fields, { temp: { mean: 3 } });
   * ```
   */
  addFlat(tsMs: number, type: string, row: FlatRow): void {
    const start = Math.floor(tsMs / this.#every) * this.#every;
    let acc = this.#flatAcc;
    if (acc !== undefined && start === this.#flatStart && type === this.#flatType) {
      // The bucket of the last event (never one given up: those are at or past the cutoff).
      if (start >= this.#cutoff) return;
      acc.count++;
      this.#current = this.#flatHeld;
    } else {
      acc = this.#count(tsMs, type);
      if (acc === undefined) return;
      this.#flatStart = start;
      this.#flatType = type;
      this.#flatHeld = this.#current;
    }
    this.#flatAcc = acc;
    const n = row.n;
    let nodes = acc.flatNodes;
    if (row.shape !== acc.flatShape || n > nodes.length) {
      nodes = [];
      const parents = row.parents;
      for (let i = 0; i < n; i++) {
        const p = parents[i]!;
        const parent = p < 0 ? acc.root : nodes[p];
        // Below an object the fields leave out, nothing is a field either.
        nodes.push(parent === undefined ? undefined : this.#child(parent, row.keys[i]!));
      }
      acc.flatShape = row.shape;
      acc.flatNodes = nodes;
    }
    const numbers = row.numbers, text = this.#unitOf && row.text;
    for (let i = 0; i < n; i++) {
      const node = nodes[i];
      if (node === undefined) continue;
      const v = numbers[i]!;
      if (v !== v) { // NaN: not a number
        // A string counts only for a field with a unit: its text is made only then.
        if (text && this.#unitOf!(type, node.path) !== undefined) {
          const value = text(i);
          if (value !== undefined) this.#walk(node, type, value, 1);
        }
        continue;
      }
      if (v === Infinity || v === -Infinity) continue;
      const f = node.acc;
      if (!f) {
        node.acc = { n: 1, sum: v, min: v, max: v, last: v };
        this.#current!.cells++;
        this.#cells++;
      } else {
        f.n++;
        f.sum += v;
        if (v < f.min) f.min = v;
        if (v > f.max) f.max = v;
        f.last = v;
      }
    }
    if (this.#cells > this.#maxCells) this.#giveUpLatest();
  }

  /** Counts an event into its bucket: the bucket's type, or `undefined` when given up. */
  #count(tsMs: number, type: string): TypeAcc | undefined {
    const start = Math.floor(tsMs / this.#every) * this.#every;
    if (start >= this.#cutoff || !Number.isFinite(start)) return undefined;
    let held = this.#starts.get(start);
    if (!held) this.#starts.set(start, held = { types: new Map(), cells: 0 });
    let acc = held.types.get(type);
    if (!acc) {
      const root: Node = { path: "", children: undefined, acc: undefined };
      held.types.set(type, acc = { count: 0, root, flatShape: -1, flatNodes: [] });
      held.cells++;
      this.#cells++;
      if (++this.#held > this.#max) {
        this.#giveUpLatest();
        if (start >= this.#cutoff) return undefined;
      }
    }
    acc.count++;
    this.#current = held;
    return acc;
  }

  /** The node of `key` below `node`, made when first met; `undefined` for a field not asked. */
  #child(node: Node, key: string): Node | undefined {
    let child = node.children?.get(key);
    if (!child) {
      const path = node.path === "" ? key : `${node.path}.${key}`;
      if (this.#fields && !this.#fields.some((f) => related(f, path))) return undefined;
      child = { path, children: undefined, acc: undefined };
      (node.children ??= new Map()).set(key, child);
    }
    return child;
  }

  /**
   * Hands out the buckets in time order (types by name within a start), forgetting each as it
   * goes; empty buckets do not exist.
   *
   * @returns The buckets, each as its line of `GET /history?every=`.
   */
  *drain(): Generator<HistoryBucket> {
    // A typed array sorts numbers natively: no comparator call per pair (docs/history.md).
    const starts = Float64Array.from(this.#starts.keys()).sort();
    for (const start of starts) {
      const { types } = this.#starts.get(start)!;
      this.#starts.delete(start);
      const t = formatTimestamp(start);
      for (const type of [...types.keys()].sort()) {
        const acc = types.get(type)!;
        const fields: Record<string, FieldAggregates> = {};
        this.#collect(acc.root, fields);
        yield { t, type, count: acc.count, fields };
      }
    }
    this.#held = 0;
    this.#cells = 0;
    this.#flatAcc = undefined;
  }

  #aggregatesOf(f: FieldAcc): FieldAggregates {
    const out: FieldAggregates = {};
    for (const a of this.#aggregates) {
      out[a] = a === "mean" ? f.sum / f.n : a === "count" ? f.n : f[a];
    }
    return out;
  }

  /**
   * Gives up the latest starts, whole, until the set holds no more than `maxBuckets` buckets
   * and `maxCells` cells (the earliest start is kept for the cells: a page always moves on).
   */
  #giveUpLatest(): void {
    // Over the cells, an eighth of them is freed: lines going back in time (a clock step) then
    // sort the starts once per eighth, not once per line (docs/history.md, "Memory").
    const cells = this.#cells > this.#maxCells ? this.#maxCells - this.#maxCells / 8 : Infinity;
    const starts = Float64Array.from(this.#starts.keys()).sort().reverse();
    for (let i = 0; i < starts.length; i++) {
      if (this.#held <= this.#max && (this.#cells <= cells || i === starts.length - 1)) break;
      const start = starts[i]!;
      const held = this.#starts.get(start)!;
      this.#held -= held.types.size;
      this.#cells -= held.cells;
      this.#starts.delete(start);
      this.#cutoff = Math.min(this.#cutoff, start);
    }
  }

  /** The fields of a tree, depth first in the order first met. */
  #collect(node: Node, out: Record<string, FieldAggregates>): void {
    if (node.acc) out[node.path] = this.#aggregatesOf(node.acc);
    if (node.children) { for (const child of node.children.values()) this.#collect(child, out); }
  }

  #walk(node: Node, type: string, value: unknown, depth: number): void {
    if (typeof value === "object" && value !== null && !Array.isArray(value)) {
      if (depth >= MAX_DEPTH) return;
      for (const key in value) {
        const child = this.#child(node, key);
        if (child !== undefined) {
          this.#walk(child, type, (value as Record<string, unknown>)[key], depth + 1);
        }
      }
      return;
    }
    if (depth === 0) return;
    const n = typeof value === "number"
      ? (Number.isFinite(value) ? value : undefined)
      : typeof value === "string" && this.#unitOf
      ? numericValue(value, this.#unitOf(type, node.path))
      : undefined;
    if (n === undefined) return;
    const f = node.acc;
    if (!f) {
      node.acc = { n: 1, sum: n, min: n, max: n, last: n };
      this.#current!.cells++;
      this.#cells++;
    } else {
      f.n++;
      f.sum += n;
      if (n < f.min) f.min = n;
      if (n > f.max) f.max = n;
      f.last = n;
    }
  }
}

/** Whether `path` is the asked `field`, below it, or above it (on the way down to it). */
function related(field: string, path: string): boolean {
  if (field === path) return true;
  if (path.length > field.length) return path.startsWith(field) && path[field.length] === ".";
  return field.startsWith(path) && field[path.length] === ".";
}
