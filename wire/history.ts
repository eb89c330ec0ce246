/**
 * What the service, the client and the command line share about history answers
 * (docs/history.md, "Buckets"): the bucket line of `GET /history?every=`, the truncation line,
 * the aggregate names and the bucket width. Web APIs only.
 *
 * @example Usage
 * ```ts
 * import { parseEvery, parseAggregates } from "./history.ts";
 * import assert from "node:assert/strict";
 *
 * assert.equal(parseEvery("5m"), 300_000);
 * assert.deepEqual(parseAggregates("max,mean"), ["max", "mean"]);
 * ```
 *
 * @module
 */

/** One aggregate name: `mean`, `min`, `max`, `last` or `count`. */
export type Aggregate = "mean" | "min" | "max" | "last" | "count";

/** The aggregates a bucket can carry per field. */
export const AGGREGATES: readonly Aggregate[] = ["mean", "min", "max", "last", "count"];

/** The aggregates of a bucket when none are asked for. */
export const DEFAULT_AGGREGATES: readonly Aggregate[] = ["mean", "min", "max", "last"];

/** The aggregates of one numeric field in one bucket; only those asked for are present. */
export interface FieldAggregates {
  /** The mean of the field's numeric values. */
  mean?: number;
  /** The smallest value. */
  min?: number;
  /** The largest value. */
  max?: number;
  /** The last value in file order. */
  last?: number;
  /** How many numeric values the field had. */
  count?: number;
}

/**
 * One bucket of one type: a line of `GET /history?every=` (docs/history.md, "Buckets").
 *
 * @example Usage
 * ```ts
 * import type { HistoryBucket } from "./history.ts";
 *
 * const bucket: HistoryBucket = {
 *   t: "2026-05-10T03:00:00.000Z",
 *   type: "weather",
 *   count: 60,
 *   fields: { wind_mps: { mean: 2.1, max: 4.0 } },
 * };
 * ```
 */
export interface HistoryBucket {
  /** The bucket's start, UTC, a multiple of `every` since the Unix epoch. */
  t: string;
  /** The event type. */
  type: string;
  /** The events of the type in the bucket. */
  count: number;
  /** The numeric fields (dotted paths) and their aggregates. */
  fields: Record<string, FieldAggregates>;
}

/** The last line of a history answer that reached its `limit`. */
export interface HistoryTruncated {
  /** Always `true`. */
  truncated: true;
  /** The `since` to continue from; lines whose `ts` equals it may come again. */
  next_since: string;
}

/** The narrowest bucket, in milliseconds (10 s). */
export const MIN_EVERY_MS = 10_000;
/** The widest bucket, in milliseconds (7 days). */
export const MAX_EVERY_MS = 7 * 86_400_000;

/** Lines of a history answer when no `limit` is given. */
export const DEFAULT_HISTORY_LIMIT = 100_000;
/** The largest `limit` of a history answer. */
export const MAX_HISTORY_LIMIT = 1_000_000;

const DURATION = /^(\d{1,9})(s|m|h|d)$/;
const UNIT_MS = { s: 1000, m: 60_000, h: 3_600_000, d: 86_400_000 } as const;

/**
 * Reads a bucket width: a whole number of `s`, `m`, `h` or `d`, from 10 s to 7 d.
 *
 * @param text The width as written, for example `"5m"`.
 * @returns The width in milliseconds.
 * @throws {RangeError} If the text is not such a duration or is out of range; the message says
 *   what to write.
 *
 * @example Usage
 * ```ts
 * import { parseEvery } from "./history.ts";
 * import assert from "node:assert/strict";
 *
 * assert.equal(parseEvery("10s"), 10_000);
 * assert.throws(() => parseEvery("5s"), RangeError);
 * ```
 */
export function parseEvery(text: string): number {
  const m = DURATION.exec(text.trim());
  if (!m) {
    throw new RangeError(
      `every must be a duration such as 10s, 5m, 1h or 1d, not ${JSON.stringify(text)}`,
    );
  }
  const ms = Number(m[1]) * UNIT_MS[m[2] as keyof typeof UNIT_MS];
  if (ms < MIN_EVERY_MS || ms > MAX_EVERY_MS) {
    throw new RangeError(`every must be from 10s to 7d, not ${JSON.stringify(text)}`);
  }
  return ms;
}

/**
 * Reads a list of aggregates separated by commas; each name once.
 *
 * @param text For example `"mean,max"`; `undefined` gives {@linkcode DEFAULT_AGGREGATES}.
 * @returns The aggregates, in the order written.
 * @throws {RangeError} For an unknown, repeated or empty name.
 *
 * @example Usage
 * ```ts
 * import { parseAggregates } from "./history.ts";
 * import assert from "node:assert/strict";
 *
 * assert.deepEqual(parseAggregates(undefined), ["mean", "min", "max", "last"]);
 * assert.throws(() => parseAggregates("median"), RangeError);
 * ```
 */
export function parseAggregates(text: string | undefined): Aggregate[] {
  if (text === undefined) return [...DEFAULT_AGGREGATES];
  const names = text.split(",").map((n) => n.trim());
  const seen = new Set<string>();
  for (const name of names) {
    if (!(AGGREGATES as readonly string[]).includes(name) || seen.has(name)) {
      throw new RangeError(
        `agg must name each of ${AGGREGATES.join(", ")} at most once, separated by commas, not ${
          JSON.stringify(text)
        }`,
      );
    }
    seen.add(name);
  }
  return names as Aggregate[];
}

/**
 * Tells a truncation line from a bucket or an event.
 *
 * @param value A parsed line of a history answer.
 * @returns Whether it is `{"truncated": true, "next_since": ...}`.
 *
 * @example Usage
 * ```ts
 * import { isTruncation } from "./history.ts";
 * import assert from "node:assert/strict";
 *
 * assert.ok(isTruncation({ truncated: true, next_since: "2026-05-10T03:00:00.000Z" }));
 * assert.ok(!isTruncation({ t: "2026-05-10T03:00:00.000Z", type: "weather" }));
 * ```
 */
export function isTruncation(value: unknown): value is HistoryTruncated {
  return typeof value === "object" && value !== null &&
    (value as { truncated?: unknown }).truncated === true &&
    typeof (value as { next_since?: unknown }).next_since === "string";
}
