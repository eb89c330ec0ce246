/**
 * `GET /history` (docs/http-api.md, docs/history.md): the stored files read through the same
 * reader as `read`, streamed. Without `every` the lines exactly as stored (NDJSON) or the CSV
 * rows of `read --format csv`; with `every` one bucket line per bucket and type. The answer is
 * pulled by the connection and cut into time slices that give the event loop back, so a night's
 * query never holds up `POST /event`. Only `--max-history` requests are served at once, the next
 * wait their turn in a bounded queue, and `limit` ends the reading as well as the answer.
 *
 * @module
 */

import { formatTimestamp } from "../wire/event.ts";
import { checkEventType } from "../wire/event.ts";
import { csvRow, eventCells } from "../wire/csv.ts";
import { readTs } from "../wire/ndjson.ts";
import {
  type Aggregate,
  DEFAULT_HISTORY_LIMIT,
  MAX_HISTORY_LIMIT,
  parseAggregates,
  parseEvery,
} from "../wire/history.ts";
import {
  parseTimeBound,
  type RawLineFilter,
  readHistoryBatches,
  readHistoryRegions,
  RunNotFoundError,
} from "../store/history.ts";
import type { StoredRegion } from "../store/site_files.ts";
import { RUN_ID_PATTERN } from "../store/layout.ts";
import { BucketSet } from "../core/buckets.ts";
import { BucketScan } from "../core/bucket_scan.ts";
import type { TypesRegistry } from "../core/types_registry.ts";
import { ShuttingDownError } from "../core/errors.ts";
import { Slots, SlotsBusyError } from "../wire/slots.ts";
import { HttpError } from "./problems.ts";

/** The query of `GET /history`, checked. */
export interface HistoryQuery {
  types: string[];
  sinceMs: number;
  untilMs: number | undefined;
  run: string | undefined;
  fields: string[] | undefined;
  everyMs: number | undefined;
  aggregates: Aggregate[];
  format: "ndjson" | "csv";
  limit: number;
}

const PARAMS = ["type", "since", "until", "run", "fields", "every", "agg", "format", "limit"];
const DAY_MS = 86_400_000;
/**
 * Work done between two returns to the event loop: short enough that `POST /event` waits at
 * most about this long per turn of the loop it needs (docs/history.md).
 */
const SLICE_MS = 4;
/**
 * The most cells (one per bucket plus one per numeric field in it) the bucketed answers served
 * at once hold together: the budget one answer had alone before there were turns. Each of the
 * `--max-history` holds its share before it ends with `{"truncated": true, "next_since": ...}`,
 * whatever `limit` says (docs/history.md, "Memory"). A cell takes 250 to 450 bytes as the service
 * holds it (measured: 15,000 buckets of 40 flat fields, 615,000 cells, grew the service by 150
 * MB; 194,000 cells of 14 fields, one nested, by 83 MB), so this is 50 to 90 MB in all: a read
 * route `--public-read` opens to anyone cannot run the recorder out of memory, however many ask.
 */
export const HISTORY_CELLS = 200_000;
/** Requests of `GET /history` served at once unless `--max-history` says otherwise. */
export const DEFAULT_MAX_HISTORY = 2;
/** The longest a request of `GET /history` waits for its turn before its 503. */
export const HISTORY_WAIT_MS = 10_000;
/**
 * Requests that may wait for their turn at once; the next is refused at once. Each holds no
 * body (a `GET`) and no timer of its own (docs/history.md, "Readers at once").
 */
export const HISTORY_MAX_WAITING = 64;
/** The `Retry-After` of a 503 of `GET /history`, in seconds: the longest wait once more. */
const RETRY_AFTER_S = HISTORY_WAIT_MS / 1000;
/**
 * The fewest lines a page reads past the ones it holds, for its `next_since` (docs/history.md,
 * "A limit"): past its `limit` a page reads as many lines again as it holds, at least these
 * many, and then stops, so that `limit` bounds the reading as well as the answer.
 */
export const HISTORY_LOOKAHEAD_LINES = 10_000;
/**
 * The longest the answers being read wait for other requests to be answered before the next
 * slice runs anyway: under a steady stream of events history still moves on.
 */
const YIELD_MAX_MS = 50;
/** Text handed to the connection at once. */
const CHUNK_CHARS = 64 * 1024;

function bad(name: string, detail: string): HttpError {
  return new HttpError(400, `The query parameter ${name} ${detail}`);
}

/** The one value of a parameter given at most once. */
function single(url: URL, name: string): string | undefined {
  const values = url.searchParams.getAll(name);
  if (values.length > 1) throw bad(name, "may be given once; separate several values by commas.");
  return values[0];
}

/**
 * Reads and checks the query of `GET /history`; each bad parameter is a 400 naming it.
 *
 * @param url The request URL.
 * @param timeZone The site zone (night dates of `since`/`until`).
 * @param now The time of the request, epoch milliseconds.
 * @returns The query.
 * @throws {HttpError} 400 for a bad or unknown parameter.
 */
export function parseHistoryQuery(url: URL, timeZone: string, now: number): HistoryQuery {
  for (const name of url.searchParams.keys()) {
    if (!PARAMS.includes(name)) {
      throw bad(
        JSON.stringify(name).slice(0, 60),
        `is unknown; GET /history takes ${PARAMS.join(", ")}.`,
      );
    }
  }
  const types = url.searchParams.getAll("type").flatMap((v) => v.split(",")).map((t) => t.trim())
    .filter((t) => t !== "");
  for (const type of types) {
    const problem = checkEventType(type);
    if (problem) throw bad("type", `holds ${JSON.stringify(type).slice(0, 80)}: ${problem}`);
  }
  const bound = (name: "since" | "until") => {
    const text = single(url, name);
    if (text === undefined) return undefined;
    try {
      return parseTimeBound(text, { timeZone, now: () => now });
    } catch (err) {
      throw bad(name, `cannot be read: ${(err as Error).message}.`);
    }
  };
  const sinceMs = bound("since") ?? now - DAY_MS;
  const untilMs = bound("until");
  if (untilMs !== undefined && sinceMs >= untilMs) {
    throw bad(
      "since",
      `(${formatTimestamp(sinceMs)}) must be before until (${formatTimestamp(untilMs)}).`,
    );
  }
  const run = single(url, "run");
  if (run !== undefined && !RUN_ID_PATTERN.test(run)) {
    throw bad("run", `must be a run id matching ${RUN_ID_PATTERN.source}, such as night-1.`);
  }
  const format = single(url, "format") ?? "ndjson";
  if (format !== "ndjson" && format !== "csv") {
    throw bad("format", `must be ndjson or csv, not ${JSON.stringify(format).slice(0, 60)}.`);
  }
  const everyText = single(url, "every");
  const aggText = single(url, "agg");
  let everyMs: number | undefined;
  let aggregates: Aggregate[] = [];
  if (everyText !== undefined) {
    try {
      everyMs = parseEvery(everyText);
      aggregates = parseAggregates(aggText);
    } catch (err) {
      throw bad(everyMs === undefined ? "every" : "agg", `is wrong: ${(err as Error).message}.`);
    }
    if (format !== "ndjson") throw bad("format", "must be ndjson with every: buckets are JSON.");
  } else if (aggText !== undefined) {
    throw bad("agg", "applies only with every (for example every=5m&agg=mean,max).");
  }
  const fields = fieldsOf(single(url, "fields"), everyMs !== undefined || format === "csv");
  return {
    types,
    sinceMs,
    untilMs,
    run,
    fields,
    everyMs,
    aggregates,
    format,
    limit: limitOf(single(url, "limit")),
  };
}

function fieldsOf(text: string | undefined, applies: boolean): string[] | undefined {
  if (text === undefined) return undefined;
  if (!applies) {
    throw bad("fields", "applies to format=csv or to every=; ndjson answers whole lines.");
  }
  const fields = text.split(",").map((f) => f.trim());
  if (fields.some((f) => f === "" || f.split(".").some((k) => k === ""))) {
    throw bad(
      "fields",
      `must be data field names separated by commas, dotted for nested ones (wind,wind.mps), not ${
        JSON.stringify(text).slice(0, 80)
      }.`,
    );
  }
  return fields;
}

function limitOf(text: string | undefined): number {
  if (text === undefined) return DEFAULT_HISTORY_LIMIT;
  const n = /^\d{1,7}$/.test(text) ? Number(text) : NaN;
  if (!(n >= 1 && n <= MAX_HISTORY_LIMIT)) {
    throw bad(
      "limit",
      `must be a whole number of lines from 1 to ${MAX_HISTORY_LIMIT}, not ${
        JSON.stringify(text).slice(0, 40)
      }.`,
    );
  }
  return n;
}

/** Where `GET /history` reads, and how many it serves at once. */
export interface HistoryRouteOptions {
  /** The site directory. */
  siteDir: string;
  /** The site zone (night dates of `since`/`until`). */
  timeZone: string;
  /** The types registry (units that make `"12.5 m/s"` a number). */
  types: TypesRegistry;
  /**
   * Requests served at once (`--max-history`); the next wait up to 10 s for their turn.
   * @default {2}
   */
  maxHistory?: number | undefined;
  /** Aborts when the server stops: the requests still waiting are answered 503. */
  signal?: AbortSignal | undefined;
  /**
   * Whether other requests are being answered: the answers being read then give them the event
   * loop first (docs/history.md).
   * @default {never}
   */
  othersBusy?: (() => boolean) | undefined;
}

/**
 * The handler of `GET /history`: checks the query (400 before any wait), waits for a turn among
 * the `maxHistory` served at once (503 with `Retry-After` when the queue is full or after 10 s),
 * opens the reader (a run that does not exist is a 404 before anything is sent) and streams the
 * answer. The turn is given back when the answer ends, fails or the client goes away.
 *
 * @param options Where to read, and how many to serve at once.
 * @returns The handler: the request URL in, the streamed answer out.
 * @throws {RangeError} If `maxHistory` is not a whole number of at least 1.
 *
 * @example Usage
 * ```ts ignore
 * import { historyRoute } from "./history.ts";
 * import { NO_TYPES } from "../core/types_registry.ts";
 *
 * const answer = historyRoute({ siteDir: "./telemetry", timeZone: "UTC", types: NO_TYPES });
 * const res = await answer(new URL("http://localhost/history?since=12h&limit=10"));
 * console.log(res.status, await res.text());
 * ```
 */
export function historyRoute(options: HistoryRouteOptions): (url: URL) => Promise<Response> {
  const maxHistory = options.maxHistory ?? DEFAULT_MAX_HISTORY;
  if (!Number.isSafeInteger(maxHistory) || maxHistory < 1) {
    throw new RangeError(
      `maxHistory (--max-history) must be a whole number of at least 1, not ${maxHistory}`,
    );
  }
  const slots = new Slots({
    size: maxHistory,
    maxWaiting: HISTORY_MAX_WAITING,
    waitMs: HISTORY_WAIT_MS,
    signal: options.signal,
  });
  const reader: Reader = {
    ...options,
    cells: Math.floor(HISTORY_CELLS / maxHistory),
    pacer: new Pacer(options.othersBusy ?? (() => false)),
  };
  return async (url) => {
    const query = parseHistoryQuery(url, options.timeZone, Date.now());
    let release: () => void;
    try {
      release = await slots.take();
    } catch (err) {
      if (options.signal?.aborted) throw new ShuttingDownError();
      if (err instanceof SlotsBusyError) throw busy(err, maxHistory);
      throw err;
    }
    try {
      return await historyResponse(query, reader, release);
    } catch (err) {
      release();
      throw err;
    }
  };
}

/** The 503 of a request that got no turn (docs/http-api.md). */
function busy(err: SlotsBusyError, maxHistory: number): HttpError {
  const why = err.reason === "full"
    ? `and ${HISTORY_MAX_WAITING} more are waiting for their turn`
    : `and this one waited ${RETRY_AFTER_S} s without its turn`;
  return new HttpError(
    503,
    `GET /history serves ${maxHistory} request${
      maxHistory === 1 ? "" : "s"
    } at once (--max-history) ${why}; retry after ${RETRY_AFTER_S} s, ask for less (a shorter range, a smaller limit), or have the operator raise --max-history.`,
    { "retry-after": String(RETRY_AFTER_S) },
  );
}

/** What a request reads with: the route's options, its share of the cells, the shared turns. */
interface Reader extends HistoryRouteOptions {
  cells: number;
  pacer: Pacer;
}

/** Set once the answer ended or was given up: the reading stops at its next batch. */
interface Reading {
  stopped: boolean;
}

/** Opens the reader and streams the answer; `release` is called once the answer ends. */
async function historyResponse(
  query: HistoryQuery,
  reader: Reader,
  release: () => void,
): Promise<Response> {
  const options = {
    types: query.types,
    since: query.sinceMs,
    until: query.untilMs,
    run: query.run,
    timeZone: reader.timeZone,
    // A damaged file is read as far as it can be, like `read` does (docs/history.md).
    onDamage: () => {},
  };
  // Buckets read the lines as bytes, in place (core/bucket_scan.ts); the other answers as text.
  const raw = query.everyMs === undefined ? undefined : readHistoryRegions(reader.siteDir, options);
  const batches: AsyncGenerator<string[] | StoredRegion> = raw?.regions ??
    readHistoryBatches(reader.siteDir, options);
  let first: IteratorResult<string[] | StoredRegion>;
  try {
    first = await batches.next();
  } catch (err) {
    if (err instanceof RunNotFoundError) throw new HttpError(404, err.message);
    throw err;
  }
  const reading: Reading = { stopped: false };
  // The turn is given back at once, even while a slice of work is still under way: that slice
  // ends at its next batch (a client that goes away frees its turn at once, docs/history.md).
  const finish = () => {
    reading.stopped = true;
    release();
  };
  const source = sliced(batches, first, reading, reader.pacer);
  const chunks = raw === undefined
    ? lineChunks(source as AsyncGenerator<string[]>, query)
    : bucketChunks(source as AsyncGenerator<StoredRegion>, raw.filter, query, reader, reading);
  const encoder = new TextEncoder();
  let cancelled = false;
  const body = new ReadableStream<Uint8Array>({
    async pull(controller) {
      let next: IteratorResult<string>;
      try {
        next = await chunks.next();
      } catch (err) {
        finish();
        throw err;
      }
      if (cancelled) return; // the stream is closed already
      if (next.done) {
        finish();
        controller.close();
      } else controller.enqueue(encoder.encode(next.value));
    },
    async cancel() {
      cancelled = true;
      finish();
      await chunks.return(undefined);
      // Before its first pull nothing has opened the generators that close the files: close here.
      await batches.return(undefined);
    },
  });
  const type = query.everyMs === undefined && query.format === "csv"
    ? "text/csv; charset=utf-8; header=present"
    : "application/x-ndjson; charset=utf-8";
  return new Response(body, { status: 200, headers: { "content-type": type } });
}

/**
 * The turns of work of every answer being read (docs/history.md, "Readers at once"): an answer
 * that worked a slice waits for a timer, and each timer lets one answer go on, in turn, so that
 * the loop runs at most one slice of history between two looks at its sockets, however many
 * answers are served. While other requests are being answered (an event being recorded) no turn
 * is given, for up to {@linkcode YIELD_MAX_MS} at a time: recording goes first. A timer, not a
 * message to itself: a message came back before the loop had served the sockets, and
 * `POST /event` waited behind the whole scan (its p99 went from 9 ms to 180 ms).
 */
class Pacer {
  #waiting: (() => void)[] = [];
  #armed = false;
  #busy: () => boolean;
  /** Since when turns have been held back for other requests; -1 while they are not. */
  #heldSince = -1;

  constructor(busy: () => boolean) {
    this.#busy = busy;
  }

  /** Resolves when this answer's turn to work again has come. */
  pause(): Promise<void> {
    return new Promise((resolve) => {
      this.#waiting.push(resolve);
      if (!this.#armed) this.#arm();
    });
  }

  #arm(): void {
    this.#armed = true;
    setTimeout(() => {
      this.#armed = false;
      const now = performance.now();
      if (this.#busy() && (this.#heldSince < 0 || now - this.#heldSince < YIELD_MAX_MS)) {
        if (this.#heldSince < 0) this.#heldSince = now;
        this.#arm();
        return;
      }
      this.#heldSince = -1;
      this.#waiting.shift()?.();
      if (this.#waiting.length > 0) this.#arm();
    }, 0);
  }
}

/**
 * The batches of a range, with a pause for the answer's next turn whenever {@linkcode SLICE_MS}
 * of work has passed since the last one (the reads of the files alone return too seldom: a
 * batch is a whole 64 KiB chunk). It ends early once the reading is stopped, and closes the files
 * however it ends.
 */
async function* sliced<T>(
  batches: AsyncGenerator<T>,
  first: IteratorResult<T>,
  reading: Reading,
  pacer: Pacer,
): AsyncGenerator<T> {
  try {
    let deadline = performance.now() + SLICE_MS;
    for (let r = first; !r.done && !reading.stopped; r = await batches.next()) {
      yield r.value;
      if (performance.now() > deadline) {
        await pacer.pause();
        deadline = performance.now() + SLICE_MS;
      }
    }
  } finally {
    await batches.return(undefined);
  }
}

function truncation(nextSinceMs: number): string {
  return JSON.stringify({ truncated: true, next_since: formatTimestamp(nextSinceMs) }) + "\n";
}

/** How many lines a page reads past the point where its answer was cut (docs/history.md). */
function lookahead(linesHeld: number): number {
  return Math.max(linesHeld, HISTORY_LOOKAHEAD_LINES);
}

/**
 * The stored lines (or their CSV rows) in chunks. Past `limit` the lines that follow are read
 * for their earliest `ts`, as many as the page holds (at least {@linkcode HISTORY_LOOKAHEAD_LINES}),
 * and no more: continuing from there loses nothing even where `ts` goes back in file order (a
 * clock step) within that reach, and the reading stays bounded by `limit`.
 */
async function* lineChunks(
  batches: AsyncGenerator<string[]>,
  query: HistoryQuery,
): AsyncGenerator<string> {
  const csv = query.format === "csv";
  let out = csv ? csvRow(["seq", "ts", "type", ...(query.fields ?? ["data"])]) : "";
  let sent = 0, past = 0;
  const reach = lookahead(query.limit);
  let nextSince = Infinity;
  scan: for await (const batch of batches) {
    for (const line of batch) {
      if (sent >= query.limit) {
        const ts = Date.parse(readTs(line) ?? "");
        if (ts < nextSince) nextSince = ts;
        if (++past >= reach) break scan;
        continue;
      }
      if (csv) {
        const cells = eventCells(line, query.fields);
        if (!cells) continue;
        out += csvRow(cells);
      } else out += line + "\n";
      sent++;
    }
    if (out.length >= CHUNK_CHARS) {
      yield out;
      out = "";
    }
  }
  if (Number.isFinite(nextSince)) out += truncation(Math.max(nextSince, query.sinceMs));
  if (out !== "") yield out;
}

/**
 * The bucket lines, once the range is counted (buckets are held as sums, never events). Once
 * the set is cut (at `limit` buckets or at its share of the cells), the lines that follow are
 * still counted into the buckets kept, as many as were read before the cut (at least
 * {@linkcode HISTORY_LOOKAHEAD_LINES}), and then the reading stops.
 */
async function* bucketChunks(
  regions: AsyncGenerator<StoredRegion>,
  filter: RawLineFilter,
  query: HistoryQuery,
  reader: Reader,
  reading: Reading,
): AsyncGenerator<string> {
  const set = new BucketSet({
    everyMs: query.everyMs!,
    aggregates: query.aggregates,
    fields: query.fields,
    unitOf: (type, path) => reader.types.get(type)?.fields[path]?.unit,
    maxBuckets: query.limit,
    maxCells: reader.cells,
  });
  // Lines in the service's own layout are counted without parsing them whole (core/bucket_scan.ts).
  const scan = new BucketScan(set, { everyMs: query.everyMs!, strings: true });
  let stopAt = Infinity;
  scan: for await (const { bytes } of regions) {
    let at = 0;
    while (at < bytes.length) {
      const cut = set.truncatedAt !== undefined;
      at = scan.addRegion(bytes, filter, at, stopAt - scan.kept, !cut);
      if (!cut && set.truncatedAt !== undefined) stopAt = scan.kept + lookahead(scan.kept);
      if (scan.kept >= stopAt) break scan;
    }
  }
  if (reading.stopped) return; // the client went away: nothing more to send
  let out = "";
  let deadline = performance.now() + SLICE_MS;
  for (const bucket of set.drain()) {
    out += JSON.stringify(bucket) + "\n";
    if (out.length >= CHUNK_CHARS || performance.now() > deadline) {
      yield out;
      out = "";
      // A turn is given back once a slice of work has passed, not for every chunk handed out.
      if (performance.now() > deadline) {
        await reader.pacer.pause();
        deadline = performance.now() + SLICE_MS;
      }
    }
  }
  const cut = set.truncatedAt;
  if (cut !== undefined) out += truncation(Math.max(cut, query.sinceMs));
  if (out !== "") yield out;
}
