/**
 * `GET /history` (docs/http-api.md, docs/history.md): the stored files read through the same
 * reader as `read`, streamed. Without `every` the lines exactly as stored (NDJSON) or the CSV
 * rows of `read --format csv`; with `every` one bucket line per bucket and type. The answer is
 * pulled by the connection and cut into time slices that give the event loop back, so a night's
 * query never holds up `POST /event`.
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
import { parseTimeBound, readHistoryBatches, RunNotFoundError } from "../store/history.ts";
import { RUN_ID_PATTERN } from "../store/layout.ts";
import { BucketSet } from "../core/buckets.ts";
import type { TypesRegistry } from "../core/types_registry.ts";
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
 * The most cells (one per bucket plus one per field aggregate) a bucketed answer holds before it
 * ends with `{"truncated": true, "next_since": ...}`, whatever `limit` says (docs/history.md,
 * "Memory"). A cell takes about 250 bytes as the service holds it (measured: 15,000 buckets of
 * 40 fields, 615,000 cells, grew the service by 150 MB), so this is about 50 MB per request:
 * a read route `--public-read` opens to anyone cannot run the recorder out of memory.
 */
export const HISTORY_BUCKET_CELLS = 200_000;
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

/**
 * Answers `GET /history`: checks the query, opens the reader (a run that does not exist is a
 * 404 before anything is sent) and streams the answer.
 *
 * @param url The request URL.
 * @param siteDir The site directory.
 * @param timeZone The site zone.
 * @param types The types registry (units that make `"12.5 m/s"` a number).
 * @returns The streamed answer.
 * @throws {HttpError} 400 for a bad parameter, 404 for an unknown run.
 */
export async function historyResponse(
  url: URL,
  siteDir: string,
  timeZone: string,
  types: TypesRegistry,
): Promise<Response> {
  const query = parseHistoryQuery(url, timeZone, Date.now());
  const batches = readHistoryBatches(siteDir, {
    types: query.types,
    since: query.sinceMs,
    until: query.untilMs,
    run: query.run,
    timeZone,
    // A damaged file is read as far as it can be, like `read` does (docs/history.md).
    onDamage: () => {},
  });
  let first: IteratorResult<string[]>;
  try {
    first = await batches.next();
  } catch (err) {
    if (err instanceof RunNotFoundError) throw new HttpError(404, err.message);
    throw err;
  }
  const source = sliced(batches, first);
  const chunks = query.everyMs === undefined
    ? lineChunks(source, query)
    : bucketChunks(source, query, types);
  const encoder = new TextEncoder();
  const body = new ReadableStream<Uint8Array>({
    async pull(controller) {
      const next = await chunks.next();
      if (next.done) controller.close();
      else controller.enqueue(encoder.encode(next.value));
    },
    async cancel() {
      await chunks.return(undefined);
      await batches.return(undefined);
    },
  });
  const type = query.everyMs === undefined && query.format === "csv"
    ? "text/csv; charset=utf-8; header=present"
    : "application/x-ndjson; charset=utf-8";
  return new Response(body, { status: 200, headers: { "content-type": type } });
}

/**
 * Gives the event loop back, so that other requests run first (docs/history.md). A timer, not
 * a message to itself: a message came back before the loop had served the sockets, and
 * `POST /event` waited behind the whole scan (its p99 went from 9 ms to 180 ms).
 */
function yieldLoop(): Promise<void> {
  return new Promise((resolve) => setTimeout(resolve, 0));
}

/**
 * The batches of a range, with a return to the event loop whenever {@linkcode SLICE_MS} of
 * work has passed since the last one (the reads of the files alone return too seldom: a batch
 * is a whole 64 KiB chunk).
 */
async function* sliced(
  batches: AsyncGenerator<string[]>,
  first: IteratorResult<string[]>,
): AsyncGenerator<string[]> {
  let deadline = performance.now() + SLICE_MS;
  for (let r = first; !r.done; r = await batches.next()) {
    yield r.value;
    if (performance.now() > deadline) {
      await yieldLoop();
      deadline = performance.now() + SLICE_MS;
    }
  }
}

function truncation(nextSinceMs: number): string {
  return JSON.stringify({ truncated: true, next_since: formatTimestamp(nextSinceMs) }) + "\n";
}

/**
 * The stored lines (or their CSV rows) in chunks. Past `limit` the rest of the range is still
 * scanned for its earliest `ts`: continuing from there loses nothing even where `ts` goes back
 * in file order (a clock step).
 */
async function* lineChunks(
  batches: AsyncGenerator<string[]>,
  query: HistoryQuery,
): AsyncGenerator<string> {
  const csv = query.format === "csv";
  let out = csv ? csvRow(["seq", "ts", "type", ...(query.fields ?? ["data"])]) : "";
  let sent = 0;
  let nextSince = Infinity;
  for await (const batch of batches) {
    for (const line of batch) {
      if (sent >= query.limit) {
        const ts = Date.parse(readTs(line) ?? "");
        if (ts < nextSince) nextSince = ts;
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

/** The bucket lines, once the whole range is counted (buckets are held as sums, never events). */
async function* bucketChunks(
  batches: AsyncGenerator<string[]>,
  query: HistoryQuery,
  registry: TypesRegistry,
): AsyncGenerator<string> {
  const set = new BucketSet({
    everyMs: query.everyMs!,
    aggregates: query.aggregates,
    fields: query.fields,
    unitOf: (type, path) => registry.get(type)?.fields[path]?.unit,
    maxBuckets: query.limit,
    maxCells: HISTORY_BUCKET_CELLS,
  });
  // The bucket of the last event, as canonical ts text: a ts between these two strings (they
  // sort as time does) is in the same bucket without parsing the date again.
  let from = "", to = "", start = 0;
  const every = query.everyMs!;
  for await (const batch of batches) {
    for (const line of batch) {
      let event: { ts?: unknown; type?: unknown; data?: unknown };
      try {
        event = JSON.parse(line);
      } catch {
        continue; // a hand-damaged line: not an event
      }
      const ts = event?.ts;
      if (typeof ts !== "string" || typeof event.type !== "string") continue;
      if (!(ts >= from && ts < to && ts.length === 24 && ts[23] === "Z" && ts[19] === ".")) {
        const ms = Date.parse(ts);
        if (Number.isNaN(ms)) continue;
        start = Math.floor(ms / every) * every;
        from = formatTimestamp(start);
        to = formatTimestamp(start + every);
      }
      set.add(start, event.type, event.data);
    }
  }
  let out = "";
  let deadline = performance.now() + SLICE_MS;
  for (const bucket of set.drain()) {
    out += JSON.stringify(bucket) + "\n";
    if (out.length >= CHUNK_CHARS || performance.now() > deadline) {
      yield out;
      out = "";
      await yieldLoop();
      deadline = performance.now() + SLICE_MS;
    }
  }
  const cut = set.truncatedAt;
  if (cut !== undefined) out += truncation(Math.max(cut, query.sinceMs));
  if (out !== "") yield out;
}
