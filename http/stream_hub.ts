/**
 * Live telemetry over Server-Sent Events (docs/http-api.md): {@linkcode StreamHub} turns the
 * service's accepted events and run changes into one bounded stream per client, in the
 * `text/event-stream` wire format of `wire/sse.ts` (each message encoded once, for all clients).
 *
 * Wire format of `GET /stream`:
 *
 * - first `event: snapshot`, whose `data` is the `GET /current` object;
 * - then `event: telemetry` per accepted event, `data` the envelope line and
 *   `id` `site:<seq>` or `run:<run_id>:<seq>` (the stream the copy went to and its seq, so the id
 *   is unique per site directory; a site-wide type during a run is sent once, as its run copy);
 * - `event: run` when a run starts or stops, `data` the run record;
 * - `: keepalive` comment lines while idle.
 *
 * `Last-Event-ID` is ignored: there is no replay. A client that reconnects gets a fresh snapshot,
 * which holds the latest event of every type; events in between are in the NDJSON files.
 *
 * @example Usage
 * ```ts
 * import { ServerSentEventStream } from "../wire/sse.ts";
 * import assert from "node:assert/strict";
 *
 * const body = ReadableStream.from([{ event: "run", data: '{"run_id":"001"}' }])
 *   .pipeThrough(new ServerSentEventStream())
 *   .pipeThrough(new TextDecoderStream());
 * assert.deepEqual(await Array.fromAsync(body), ['event: run\ndata: {"run_id":"001"}\n\n']);
 * ```
 *
 * @module
 */

import type { ServiceMessage, TelemetryService } from "../core/service.ts";
import { ShuttingDownError } from "../core/errors.ts";
import { encodeServerSentEvent } from "../wire/sse.ts";
import { concatBytes as concat } from "../wire/bounded_read.ts";
import { acceptsGzip, deflatePiece, GzipMember } from "./gzip_live.ts";

/** Default interval of `: keepalive` comments: 15 s (docs/http-api.md). */
export const DEFAULT_KEEPALIVE_MS = 15_000;
/** Default per-client queue bound: 1 MiB of pending event bytes. */
export const DEFAULT_STREAM_QUEUE_BYTES = 1024 * 1024;
/**
 * Default shortest interval between two sends to the clients: 20 ms. An event that follows
 * another within it waits at most this long, so a follower (the publisher, docs/publish.md) sees
 * it within 50 ms even at a steady 200 events a second; the first after a quiet spell goes at once.
 */
export const DEFAULT_STREAM_FLUSH_MS = 20;
/** Bytes of messages that are sent at once, without waiting for the flush interval. */
const FLUSH_BYTES = 256 * 1024;
/** How long an ending stream may take to accept the last chunk it was handed, in ms. */
const END_GRACE_MS = 1000;
/** Snapshot bytes a gzip client compresses at a time (its chunks can be a few bytes each). */
const SNAPSHOT_PIECE_BYTES = 64 * 1024;

/** Options of {@linkcode StreamHub}. */
export interface StreamHubOptions {
  /**
   * Milliseconds between `: keepalive` comments on each stream.
   * @default {15000}
   */
  keepaliveMs?: number;
  /**
   * How many bytes of live messages may wait for one client, beyond the snapshot it is still
   * being sent. A client that falls further behind is dropped: its stream is aborted and
   * {@linkcode StreamHub.dropped} counts it. Bytes are counted before compression; for a gzip
   * client the waiting messages also hold their compressed form (for telemetry about a tenth
   * more).
   * @default {1048576}
   */
  maxQueueBytes?: number;
  /**
   * Shortest interval in milliseconds between two sends to the clients. The first event after
   * a quiet interval goes out at once; events that follow within it are sent together when it
   * ends (or once 256 KiB of them wait), so that under load each client gets one chunk per
   * interval instead of one per event.
   * @default {20}
   */
  flushMs?: number;
  /**
   * When aborted, every open stream ends and new ones are refused with 503. `startServer`
   * aborts it before it waits for in-flight requests, which open streams would otherwise hold
   * forever.
   */
  signal?: AbortSignal;
}

/** Options of {@linkcode StreamHub.open}. */
export interface OpenStreamOptions {
  /** Only these event types in the snapshot and as telemetry; run events always pass. */
  types?: readonly string[];
  /**
   * Send the stream gzip-compressed (`Content-Encoding: gzip`). Live messages are compressed
   * once per fan-out for all such clients; the snapshot per client.
   * @default {false}
   */
  gzip?: boolean;
}

/**
 * Bytes shared by the clients of one fan-out. Their gzip piece is made the first time a gzip
 * client takes them, once for all.
 */
class Chunk {
  readonly bytes: Uint8Array;
  #deflated: Uint8Array | undefined;
  constructor(bytes: Uint8Array) {
    this.bytes = bytes;
  }
  get deflated(): Uint8Array {
    return this.#deflated ??= deflatePiece(this.bytes);
  }
}

const KEEPALIVE = new Chunk(encodeServerSentEvent({ comment: "keepalive" }));
const SNAPSHOT_PREFIX = "event: snapshot\ndata: ";
const SNAPSHOT_SUFFIX = "\n\n";

/** One encoded message waiting for the next fan-out; `type` is absent for run messages. */
interface Encoded {
  type: string | undefined;
  bytes: Uint8Array;
}

/** One connected client. */
interface Client {
  /** Its type filter, and the same as a key shared by clients with the same filter. */
  filter: Set<string> | undefined;
  filterKey: string;
  /** Messages of the batch being collected that were published before it connected. */
  skip: number;
  /** Hands it live bytes (shared with other clients: never modified). */
  deliver(chunk: Chunk): void;
  /** Ends the stream for a server shutdown. */
  end(): void;
}

/** What a {@linkcode StreamClient} starts from. */
interface StreamClientOptions {
  filter: Set<string> | undefined;
  /** The snapshot message, taken when the client joined. */
  snapshot: ReadableStreamDefaultReader<Uint8Array>;
  skip: number;
  /** Compress the body with gzip. */
  gzip: boolean;
  maxQueueBytes: number;
  keepaliveMs: number;
  /** Counts a client dropped for falling behind. */
  dropped: () => void;
  /** Removes the client from the hub. */
  left: (client: Client) => void;
}

/**
 * One `GET /stream` client: its body is pulled as the connection takes bytes, first the snapshot
 * in chunks, then whatever queued up meanwhile, then live chunks as they come. A client with more
 * than `maxQueueBytes` waiting (counted before compression) is dropped. A gzip client's bytes
 * are one gzip member, which a clean end closes with its trailer.
 */
class StreamClient implements Client {
  readonly filter: Set<string> | undefined;
  readonly filterKey: string;
  skip: number;
  /** The response body. */
  readonly body: ReadableStream<Uint8Array>;
  #options: StreamClientOptions;
  #controller!: ReadableStreamDefaultController<Uint8Array>;
  #snapshot: ReadableStreamDefaultReader<Uint8Array> | undefined;
  /** Live chunks the client has not taken yet. */
  #pending: Chunk[] = [];
  #pendingBytes = 0;
  /** Resolves the pull that waits for live bytes. */
  #wake: (() => void) | undefined;
  #ended = false;
  /** Whether the consumer cancelled the body (the connection went away). */
  #cancelled = false;
  /** Set by {@linkcode StreamClient.end} while the connection takes its last chunk. */
  #ending: ReturnType<typeof setTimeout> | undefined;
  #timer: ReturnType<typeof setInterval>;
  #gzip: GzipMember | undefined;

  constructor(options: StreamClientOptions) {
    this.#options = options;
    this.filter = options.filter;
    this.filterKey = options.filter ? [...options.filter].sort().join("\u0000") : "";
    this.skip = options.skip;
    this.#snapshot = options.snapshot;
    this.#gzip = options.gzip ? new GzipMember() : undefined;
    this.#timer = setInterval(() => this.deliver(KEEPALIVE), options.keepaliveMs);
    this.body = new ReadableStream<Uint8Array>({
      start: (c) => {
        this.#controller = c;
      },
      pull: (c) => this.#pull(c),
      // The consumer went away (disconnect or cancelled body): nothing is left to send to.
      cancel: () => {
        this.#cancelled = true;
        this.#cleanup();
      },
    }, { highWaterMark: 0 });
  }

  deliver(chunk: Chunk): void {
    if (this.#ended) return;
    const wake = this.#wake;
    if (wake) {
      // Taken before the enqueue: a consumer that went away cancels the body from inside it,
      // and that cancel clears the waiting pull (it once threw "this.#wake is not a function").
      this.#wake = undefined;
      this.#controller.enqueue(this.#wire(chunk));
      wake();
      return;
    }
    this.#pending.push(chunk);
    this.#pendingBytes += chunk.bytes.byteLength;
    const max = this.#options.maxQueueBytes;
    if (this.#pendingBytes > max) {
      this.#options.dropped();
      this.#cleanup();
      // Erroring (not closing) makes Deno abort the response. Deno logs the reason on stderr; a
      // string keeps that to one line without a stack trace.
      this.#controller.error(
        `GET /stream: dropped a client with more than ${max} bytes of events waiting; it may reconnect for a fresh snapshot`,
      );
    }
  }

  end(): void {
    if (this.#ended || this.#ending !== undefined) return;
    // Waiting for more: everything it was given is taken.
    if (this.#wake !== undefined) return this.#finish();
    if (this.#snapshot === undefined && this.#pending.length === 0) {
      // The connection is still taking the last chunk it was handed (the final fan-out of a
      // shutdown, typically): the stream closes when it asks for more, or is aborted if it does
      // not within END_GRACE_MS.
      this.#ending = setTimeout(() => this.#abort(), END_GRACE_MS);
      return;
    }
    // Behind: a graceful close would hold the server's shutdown open until it caught up.
    this.#abort();
  }

  /** Ends the stream cleanly: a gzip member gets its trailer. */
  #finish(): void {
    this.#cleanup();
    if (this.#gzip) this.#controller.enqueue(this.#gzip.end());
    // Deno writes an enqueued chunk to the connection at once, and cancels the body from inside
    // that enqueue when the peer is gone: a cancelled stream has nothing left to close.
    if (!this.#cancelled) this.#controller.close();
  }

  #abort(): void {
    this.#cleanup();
    // Erroring (not closing) makes Deno abort the response, without a gzip trailer.
    this.#controller.error("GET /stream: aborted a client that was behind, the server is stopping");
  }

  async #pull(c: ReadableStreamDefaultController<Uint8Array>): Promise<void> {
    if (this.#ended) return;
    if (this.#snapshot) {
      const part = await this.#snapshotPart(this.#snapshot);
      if (this.#ended) return;
      if (part) {
        c.enqueue(part);
        return;
      }
      this.#snapshot = undefined;
    }
    if (this.#pending.length > 0) {
      c.enqueue(concat(this.#pending.map((chunk) => this.#wire(chunk))));
      this.#pending = [];
      this.#pendingBytes = 0;
      return;
    }
    if (this.#ending !== undefined) return this.#finish();
    await new Promise<void>((resolve) => (this.#wake = resolve));
  }

  /** The next bytes of the snapshot, or `undefined` at its end; gzip compresses 64 KiB at a time. */
  async #snapshotPart(
    reader: ReadableStreamDefaultReader<Uint8Array>,
  ): Promise<Uint8Array | undefined> {
    if (!this.#gzip) {
      const { value, done } = await reader.read();
      return done ? undefined : value;
    }
    const parts: Uint8Array[] = [];
    let size = 0;
    while (size < SNAPSHOT_PIECE_BYTES) {
      const { value, done } = await reader.read();
      if (done) break;
      parts.push(value);
      size += value.byteLength;
    }
    if (parts.length === 0 || this.#ended) return undefined;
    const plain = concat(parts);
    return this.#gzip.next(plain, deflatePiece(plain));
  }

  /** The bytes a chunk goes out as: itself, or its gzip piece (in the order sent). */
  #wire(chunk: Chunk): Uint8Array {
    return this.#gzip ? this.#gzip.next(chunk.bytes, chunk.deflated) : chunk.bytes;
  }

  #cleanup(): void {
    this.#ended = true;
    clearInterval(this.#timer);
    clearTimeout(this.#ending);
    this.#options.left(this);
    this.#snapshot?.cancel().catch(() => {});
    this.#snapshot = undefined;
    this.#pending = [];
    this.#wake?.();
    this.#wake = undefined;
  }
}

/**
 * Fans the service's messages out to Server-Sent Event clients, each with its own bounded
 * queue, so a slow or stalled client is dropped instead of slowing ingestion or growing memory
 * (docs/http-api.md). The hub listens to the service once: each message is encoded once, the
 * messages of one commit are joined into one chunk, and that chunk's bytes are shared by every
 * client (clients with the same type filter share theirs), so a viewer costs a queue push per
 * commit, not an encoding per event.
 *
 * @example Usage
 * ```ts ignore
 * import { TelemetryService } from "@obs-utils/telemetry/server";
 * import { StreamHub } from "./stream_hub.ts";
 *
 * await using service = await TelemetryService.open({ siteDir: "./telemetry" });
 * const hub = new StreamHub(service, { keepaliveMs: 5000 });
 * const res = hub.response(new URL("http://localhost/stream?type=weather"));
 * console.log(res.headers.get("content-type")); // text/event-stream; charset=utf-8
 * ```
 */
export class StreamHub {
  #service: TelemetryService;
  #keepaliveMs: number;
  #maxQueueBytes: number;
  #signal: AbortSignal | undefined;
  #clients = new Set<Client>();
  #dropped = 0;
  /** Messages published since the last fan-out. */
  #batch: Encoded[] = [];
  #batchBytes = 0;
  #flushMs: number;
  #lastFanOut = -Infinity;
  /** The fan-out is queued: as a microtask, or as a timer (which can be brought forward). */
  #scheduled: "microtask" | ReturnType<typeof setTimeout> | undefined;

  /**
   * Creates the hub of one service; streams open with {@linkcode StreamHub.open}.
   *
   * @param service The service whose events are streamed.
   * @param options Keepalive interval, queue bound and shutdown signal.
   * @throws {RangeError} If `keepaliveMs` or `maxQueueBytes` is not a positive number.
   */
  constructor(service: TelemetryService, options: StreamHubOptions = {}) {
    const { keepaliveMs = DEFAULT_KEEPALIVE_MS, maxQueueBytes = DEFAULT_STREAM_QUEUE_BYTES } =
      options;
    if (!(keepaliveMs > 0) || !(maxQueueBytes > 0)) {
      throw new RangeError(
        `Cannot create the stream hub with keepaliveMs ${keepaliveMs} and maxQueueBytes ${maxQueueBytes}: both must be positive numbers`,
      );
    }
    this.#service = service;
    this.#keepaliveMs = keepaliveMs;
    this.#maxQueueBytes = maxQueueBytes;
    this.#flushMs = options.flushMs ?? DEFAULT_STREAM_FLUSH_MS;
    this.#signal = options.signal;
    this.#signal?.addEventListener("abort", () => this.closeAll(), { once: true });
    service.subscribe((message) => this.#publish(message));
  }

  /** Number of open streams. */
  get clients(): number {
    return this.#clients.size;
  }

  /** Number of streams dropped because their client fell too far behind. */
  get dropped(): number {
    return this.#dropped;
  }

  /**
   * Opens one client's stream: the snapshot, then live events.
   *
   * @param options Optional type filter.
   * @returns The `text/event-stream` body. Cancelling it unsubscribes.
   * @throws {ShuttingDownError} Once the hub's signal was aborted or the service is closing (503).
   *
   * @example Usage
   * ```ts ignore
   * const body = hub.open({ types: ["weather"] });
   * ```
   */
  open(options: OpenStreamOptions = {}): ReadableStream<Uint8Array> {
    if (this.#signal?.aborted || this.#service.closing) {
      throw new ShuttingDownError();
    }
    const filter = options.types && options.types.length > 0 ? new Set(options.types) : undefined;
    // The snapshot is taken now, in the same turn the client joins: every later event follows it.
    const snapshot = this.#service.currentBody({
      ...(filter ? { types: filter } : {}),
      prefix: SNAPSHOT_PREFIX,
      suffix: SNAPSHOT_SUFFIX,
    }).getReader();
    const client = new StreamClient({
      filter,
      snapshot,
      skip: this.#batch.length,
      gzip: options.gzip ?? false,
      maxQueueBytes: this.#maxQueueBytes,
      keepaliveMs: this.#keepaliveMs,
      dropped: () => this.#dropped++,
      left: (gone) => {
        this.#clients.delete(gone);
        if (this.#clients.size === 0) this.#discard();
      },
    });
    this.#clients.add(client);
    return client.body;
  }

  /**
   * The `GET /stream` response for a request URL: `?type=a,b` (repeatable) filters types. When
   * the request's `Accept-Encoding` takes gzip (browsers, Deno's and Node's `fetch`), the body is
   * gzip-compressed: telemetry lines shrink several times over, which is most of what each
   * viewer costs the machine and its network.
   *
   * @param url The request URL.
   * @param acceptEncoding The request's `Accept-Encoding` header, if any.
   * @returns A `200 text/event-stream` response with `cache-control: no-store`.
   * @throws {ShuttingDownError} Once the hub's signal was aborted or the service is closing (503).
   *
   * @example Usage
   * ```ts ignore
   * const res = hub.response(new URL(req.url), req.headers.get("accept-encoding"));
   * ```
   */
  response(url: URL, acceptEncoding: string | null = null): Response {
    const types = url.searchParams.getAll("type").flatMap((v) => v.split(","))
      .filter((t) => t !== ""); // not trimmed: " weather" is a distinct, valid type
    const gzip = acceptsGzip(acceptEncoding);
    return new Response(this.open({ types, gzip }), {
      headers: {
        "content-type": "text/event-stream; charset=utf-8",
        "cache-control": "no-store",
        "x-content-type-options": "nosniff",
        // Reverse proxies such as nginx must not buffer a live stream.
        "x-accel-buffering": "no",
        "vary": "accept-encoding",
        ...(gzip ? { "content-encoding": "gzip" } : {}),
      },
    });
  }

  /**
   * Ends every open stream. Messages still waiting for the flush interval are sent first; a
   * stream that takes everything it was sent (within a second) closes cleanly, one that is
   * behind is aborted, so that no stream holds a graceful server shutdown open.
   *
   * @example Usage
   * ```ts ignore
   * hub.closeAll();
   * ```
   */
  closeAll(): void {
    if (this.#batch.length > 0) this.#fanOut();
    for (const client of [...this.#clients]) client.end();
  }

  /** Encodes a message once and queues it for the fan-out at the end of this commit. */
  #publish(message: ServiceMessage): void {
    if (this.#clients.size === 0) return;
    let encoded: Encoded;
    if (message.kind === "run") {
      encoded = {
        type: undefined,
        bytes: encodeServerSentEvent({ event: "run", data: JSON.stringify(message.run) }),
      };
    } else if (message.kind === "forget") {
      // Sent to the clients that follow that type, like its events.
      encoded = {
        type: message.type,
        bytes: encodeServerSentEvent({
          event: "forget",
          data: JSON.stringify({ type: message.type }),
        }),
      };
    } else {
      const event = message.event;
      const stream = event.stream === "site" ? "site" : `run:${event.runId}`;
      encoded = {
        type: event.type,
        bytes: encodeServerSentEvent({
          event: "telemetry",
          id: `${stream}:${event.seq}`,
          data: event.line,
        }),
      };
    }
    this.#batch.push(encoded);
    this.#batchBytes += encoded.bytes.byteLength;
    if (this.#scheduled === "microtask") return;
    const wait = this.#lastFanOut + this.#flushMs - performance.now();
    if (wait > 0 && this.#batchBytes < FLUSH_BYTES) {
      this.#scheduled ??= setTimeout(() => this.#fanOut(), wait);
      return;
    }
    // At the end of this commit: a microtask runs before any other task.
    if (this.#scheduled !== undefined) clearTimeout(this.#scheduled);
    this.#scheduled = "microtask";
    queueMicrotask(() => this.#fanOut());
  }

  /** No client is left: nothing waits to be sent. */
  #discard(): void {
    if (this.#scheduled !== undefined && this.#scheduled !== "microtask") {
      clearTimeout(this.#scheduled);
      this.#scheduled = undefined;
    }
    this.#batch = [];
    this.#batchBytes = 0;
  }

  /** Hands the batch to every client: one chunk for all unfiltered ones, one per filter. */
  #fanOut(): void {
    if (this.#scheduled !== "microtask" && this.#scheduled !== undefined) {
      clearTimeout(this.#scheduled);
    }
    this.#scheduled = undefined;
    this.#lastFanOut = performance.now();
    const batch = this.#batch;
    this.#batch = [];
    this.#batchBytes = 0;
    let all: Chunk | undefined;
    const byFilter = new Map<string, Chunk | undefined>();
    for (const client of [...this.#clients]) {
      let chunk: Chunk | undefined;
      if (client.skip > 0) {
        // Joined while this batch was collected: its snapshot already holds the earlier part.
        chunk = select(batch.slice(client.skip), client.filter);
        client.skip = 0;
      } else if (!client.filter) chunk = all ??= select(batch, undefined);
      else if (byFilter.has(client.filterKey)) chunk = byFilter.get(client.filterKey);
      else {
        chunk = select(batch, client.filter);
        byFilter.set(client.filterKey, chunk);
      }
      if (chunk) client.deliver(chunk);
    }
  }
}

/** The bytes of the messages a filter lets through, as one chunk; `undefined` when none. */
function select(batch: Encoded[], filter: Set<string> | undefined): Chunk | undefined {
  const parts: Uint8Array[] = [];
  for (const m of batch) {
    if (!filter || m.type === undefined || filter.has(m.type)) parts.push(m.bytes);
  }
  return parts.length === 0 ? undefined : new Chunk(concat(parts));
}
