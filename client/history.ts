/**
 * The paging loop behind `TelemetryClient.history()` (docs/client.md): `GET /history` read line
 * by line, and continued from `next_since` whenever an answer reached its `limit`, so the caller
 * sees one sequence without a gap or a repeat. Web APIs only.
 *
 * @module
 */

import { TelemetryEvent } from "../wire/event.ts";
import { LineSplitStream } from "../wire/ndjson.ts";
import {
  type Aggregate,
  type HistoryBucket,
  isTruncation,
  MAX_HISTORY_LIMIT,
} from "../wire/history.ts";
import { Exchange, type Transport } from "./transport.ts";
import { TelemetryHttpError } from "./errors.ts";

/** Options of `TelemetryClient.history()` (docs/client.md). */
export interface HistoryOptions {
  /** Only these event types; all when absent or empty. */
  types?: readonly string[] | undefined;
  /**
   * From this instant (inclusive): a `Date`, epoch milliseconds, or text as `read --since` takes
   * it (ISO 8601 with a zone, a night's date, a duration back such as `"12h"`).
   * @default {24 hours ago}
   */
  since?: Date | number | string | undefined;
  /** Up to this instant (exclusive), written like `since`; open when absent. */
  until?: Date | number | string | undefined;
  /** Read this run's stream instead of the site stream. */
  run?: string | undefined;
  /** The data fields of buckets (dotted paths; a path covers the fields below it). */
  fields?: readonly string[] | undefined;
  /** Bucket width, `10s` to `7d`: the answer is buckets instead of events. */
  every?: string | undefined;
  /** The aggregates of each field of a bucket. @default {["mean", "min", "max", "last"]} */
  agg?: readonly Aggregate[] | undefined;
  /** Lines per request (1 to 1,000,000); the client continues past it by itself. */
  limit?: number | undefined;
  /** Aborts the reading. */
  signal?: AbortSignal | undefined;
}

/** Options of `history()` asking for buckets. */
export interface HistoryBucketOptions extends HistoryOptions {
  /** Bucket width, `10s` to `7d`. */
  every: string;
}

function bound(value: Date | number | string): string {
  if (value instanceof Date) return value.toISOString();
  if (typeof value === "number") return new Date(value).toISOString();
  return value;
}

function pathOf(options: HistoryOptions, since: string | undefined, limit: number | undefined) {
  const q = new URLSearchParams();
  if (options.types && options.types.length > 0) q.set("type", options.types.join(","));
  if (since !== undefined) q.set("since", since);
  if (options.until !== undefined) q.set("until", bound(options.until));
  if (options.run !== undefined) q.set("run", options.run);
  if (options.fields && options.fields.length > 0) q.set("fields", options.fields.join(","));
  if (options.every !== undefined) q.set("every", options.every);
  if (options.agg !== undefined) q.set("agg", options.agg.join(","));
  if (limit !== undefined) q.set("limit", String(limit));
  const query = q.toString();
  return query === "" ? "/history" : `/history?${query}`;
}

/** One item of a page: what the caller gets, its key against repeats, and its time. */
interface Item {
  value: TelemetryEvent | HistoryBucket;
  key: string;
  ms: number;
}

function itemOf(line: string, buckets: boolean, path: string): Item | string {
  let value: unknown;
  try {
    value = JSON.parse(line);
  } catch (err) {
    throw new TelemetryHttpError(`GET ${path} failed: a line of the answer is not JSON`, {
      status: 200,
      detail: "A line of the answer is not JSON.",
      body: line.slice(0, 200),
      url: path,
      cause: err,
    });
  }
  if (isTruncation(value)) return value.next_since;
  if (buckets) {
    const b = value as HistoryBucket;
    return { value: b, key: `${b.t} ${b.type}`, ms: Date.parse(b.t) };
  }
  const event = TelemetryEvent.fromJSON(value);
  return { value: event, key: `${event.seq} ${event.ts} ${event.type}`, ms: Date.parse(event.ts) };
}

/**
 * Reads `GET /history` page after page. A page that reached its limit ends with `next_since`;
 * the next page starts there, and the lines it repeats (those of the last page at or after
 * `next_since`) are passed over by their key. A page that would not move on (more lines of one
 * `ts` than the limit) is asked again with twice the limit.
 *
 * @param transport The client's transport.
 * @param options What to read.
 * @returns The events or buckets in the order of the answers.
 */
export async function* historyPages(
  transport: Transport,
  options: HistoryOptions,
): AsyncGenerator<TelemetryEvent | HistoryBucket, void, undefined> {
  const buckets = options.every !== undefined;
  let since = options.since === undefined ? undefined : bound(options.since);
  let limit = options.limit;
  let seen = new Set<string>();
  for (;;) {
    const path = pathOf(options, since, limit);
    const exchange = new Exchange(transport.timeoutMs, options.signal);
    // Keys and times only: the events themselves are the caller's once yielded.
    const page: { key: string; ms: number }[] = [];
    let nextSince: string | undefined;
    let reader: ReadableStreamDefaultReader<string> | undefined;
    let finished = false;
    try {
      const res = await transport.openLines(path, exchange);
      // The scan may take long; what ends it now is the caller's signal.
      exchange.stopClock();
      // A reader, not `for await`: not every runtime's ReadableStream is async-iterable.
      reader = res.body!.pipeThrough(new LineSplitStream()).getReader();
      for (;;) {
        const { done, value: line } = await reader.read();
        if (done) {
          finished = true;
          break;
        }
        if (line === "") continue;
        const item = itemOf(line, buckets, path);
        if (typeof item === "string") {
          nextSince = item;
          continue;
        }
        page.push({ key: item.key, ms: item.ms });
        if (seen.has(item.key)) continue;
        yield item.value;
      }
    } catch (err) {
      throw exchange.translate(
        err,
        `GET ${path}`,
        transport.url(path),
        transport.baseUrl,
        Infinity,
      );
    } finally {
      // A caller that stops early (`break`) lets go of the answer, and so of the connection.
      if (reader && !finished) await reader.cancel().catch(() => {});
      exchange.dispose();
    }
    if (nextSince === undefined) return;
    const nextMs = Date.parse(nextSince);
    if (since !== undefined && nextMs <= Date.parse(bound(since))) {
      const current = limit ?? 100_000;
      if (current >= MAX_HISTORY_LIMIT) {
        throw new RangeError(
          `Cannot read the history past ${nextSince}: more than ${MAX_HISTORY_LIMIT} lines there share one time`,
        );
      }
      limit = Math.min(current * 2, MAX_HISTORY_LIMIT);
    }
    seen = new Set(page.filter((i) => !(i.ms < nextMs)).map((i) => i.key));
    since = nextSince;
  }
}
