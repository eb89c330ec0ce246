/**
 * Live telemetry over Server-Sent Events (CONTRACT 2.6): {@linkcode StreamHub} turns the
 * service's accepted events and run changes into one bounded stream per client, written in the
 * `text/event-stream` wire format by {@linkcode ServerSentEventStream} (from `sse.ts`).
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
 * import { ServerSentEventStream } from "./sse.ts";
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

import type { ServiceMessage, TelemetryService } from "./service.ts";
import { ShuttingDownError } from "./_errors.ts";
import { type ServerSentEventMessage, ServerSentEventStream } from "./sse.ts";

// The encoder lives in sse.ts with its parser; server.ts exports it from here.
export { type ServerSentEventMessage, ServerSentEventStream } from "./sse.ts";

/** Default interval of `: keepalive` comments: 15 s (CONTRACT 2.6). */
export const DEFAULT_KEEPALIVE_MS = 15_000;
/** Default per-client queue bound: 1 MiB of pending event text. */
export const DEFAULT_STREAM_QUEUE_BYTES = 1024 * 1024;

/** Options of {@linkcode StreamHub}. */
export interface StreamHubOptions {
  /**
   * Milliseconds between `: keepalive` comments on each stream.
   * @default {15000}
   */
  keepaliveMs?: number;
  /**
   * How much event text (in UTF-16 code units, plus a fixed overhead per message) may wait for
   * one client beyond its snapshot. A client that falls further behind is dropped: its stream is
   * aborted and {@linkcode StreamHub.dropped} counts it.
   * @default {1048576}
   */
  maxQueueBytes?: number;
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
}

/** Per-message bookkeeping overhead counted against the queue bound. */
const MESSAGE_OVERHEAD = 64;

function messageSize(message: ServerSentEventMessage): number {
  return MESSAGE_OVERHEAD + (message.data?.length ?? 0) + (message.comment?.length ?? 0);
}

/** One connected client. */
interface Client {
  /** Ends the stream for a server shutdown. */
  end(): void;
}

/**
 * Fans the service's messages out to Server-Sent Event clients, each with its own bounded
 * queue, so a slow or stalled client is dropped instead of slowing ingestion or growing memory
 * (CONTRACT 2.6). Listeners run synchronously in the commit loop and only enqueue.
 *
 * @example Usage
 * ```ts ignore
 * import { TelemetryService } from "@obs-utils/telemetry/server";
 * import { StreamHub } from "./stream.ts";
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
    this.#signal = options.signal;
    this.#signal?.addEventListener("abort", () => this.closeAll(), { once: true });
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
    const snapshot: ServerSentEventMessage = { event: "snapshot", data: this.#snapshot(filter) };
    // The snapshot may legitimately be large; only what queues up behind it is bounded.
    const limit = this.#maxQueueBytes + messageSize(snapshot);
    let controller!: ReadableStreamDefaultController<ServerSentEventMessage>;
    let unsubscribe = (): void => {};
    let timer: ReturnType<typeof setInterval> | undefined;
    let ended = false;
    const cleanup = (): void => {
      ended = true;
      unsubscribe();
      clearInterval(timer);
      this.#clients.delete(client);
    };
    const client: Client = {
      end() {
        if (ended) return;
        // A client that has not taken everything yet would hold a graceful close open, so its
        // response is aborted instead.
        const idle = controller.desiredSize === limit;
        cleanup();
        if (idle) controller.close();
        else {controller.error(
            "GET /stream: aborted a client that was behind, the server is stopping",
          );}
      },
    };
    const push = (message: ServerSentEventMessage): void => {
      if (ended) return;
      controller.enqueue(message);
      if ((controller.desiredSize ?? 0) < 0) {
        this.#dropped++;
        cleanup();
        // Erroring (not closing) discards the queue and makes Deno abort the response. Deno
        // logs the reason on stderr; a string keeps that to one line without a stack trace.
        controller.error(
          `GET /stream: dropped a client with more than ${limit} bytes of events waiting; it may reconnect for a fresh snapshot`,
        );
      }
    };
    const listener = (message: ServiceMessage): void => {
      if (message.kind === "run") {
        push({ event: "run", data: JSON.stringify(message.run) });
        return;
      }
      const event = message.event;
      if (filter && !filter.has(event.type)) return;
      const stream = event.stream === "site" ? "site" : `run:${event.runId}`;
      push({ event: "telemetry", id: `${stream}:${event.seq}`, data: event.line });
    };

    const source = new ReadableStream<ServerSentEventMessage>({
      start: (c) => {
        controller = c;
        c.enqueue(snapshot);
        this.#clients.add(client);
        unsubscribe = this.#service.subscribe(listener);
        timer = setInterval(() => push({ comment: "keepalive" }), this.#keepaliveMs);
      },
      // The consumer went away (disconnect or cancelled body): nothing is left to send to.
      cancel: cleanup,
    }, { highWaterMark: limit, size: messageSize });
    return source.pipeThrough(new ServerSentEventStream());
  }

  /**
   * The `GET /stream` response for a request URL: `?type=a,b` (repeatable) filters types.
   *
   * @param url The request URL.
   * @returns A `200 text/event-stream` response with `cache-control: no-store`.
   * @throws {ShuttingDownError} Once the hub's signal was aborted or the service is closing (503).
   *
   * @example Usage
   * ```ts ignore
   * const res = hub.response(new URL(req.url));
   * ```
   */
  response(url: URL): Response {
    const types = url.searchParams.getAll("type").flatMap((v) => v.split(","))
      .filter((t) => t !== ""); // not trimmed: " weather" is a distinct, valid type
    return new Response(this.open({ types }), {
      headers: {
        "content-type": "text/event-stream; charset=utf-8",
        "cache-control": "no-store",
        "x-content-type-options": "nosniff",
        // Reverse proxies such as nginx must not buffer a live stream.
        "x-accel-buffering": "no",
      },
    });
  }

  /**
   * Ends every open stream: idle ones close cleanly, ones with queued data are aborted, so that
   * no stream holds a graceful server shutdown open.
   *
   * @example Usage
   * ```ts ignore
   * hub.closeAll();
   * ```
   */
  closeAll(): void {
    for (const client of [...this.#clients]) client.end();
  }

  #snapshot(filter: Set<string> | undefined): string {
    if (!filter) return this.#service.currentJson();
    let out = "{";
    for (const [type] of this.#service.currentData()) {
      if (!filter.has(type)) continue;
      const line = this.#service.currentLine(type);
      if (line === undefined) continue;
      if (out.length > 1) out += ",";
      out += JSON.stringify(type) + ":" + line;
    }
    return out + "}";
  }
}
