/**
 * The reconnect loop behind `TelemetryClient.follow()` (docs/http-api.md): open `GET /stream`, turn
 * its Server-Sent Events into typed messages, and when the connection drops (or cannot be opened,
 * or a 5xx answers) say so and reconnect after a capped exponential back-off. The options and
 * messages defined here are re-exported by `client.ts`. Web APIs only.
 *
 * @module
 */

import { isJsonObject, type RunRecord, TelemetryEvent } from "../wire/event.ts";
import { sleep } from "../wire/async.ts";
import { Backoff } from "../wire/backoff.ts";
import { type ParsedServerSentEvent, ServerSentEventParserStream } from "../wire/sse.ts";
import { Exchange, isRunRecord, toSnapshot, type Transport } from "./transport.ts";
import { causeText, preview, TelemetryConnectionError, TelemetryHttpError } from "./errors.ts";

/** Options of {@linkcode TelemetryClient.follow}. */
export interface FollowOptions {
  /** Only these event types (`GET /stream?type=a,b`); types may not contain a comma. */
  types?: readonly string[];
  /** Ends the iteration cleanly (no error) when aborted. */
  signal?: AbortSignal;
  /**
   * First reconnection delay in milliseconds (at least 10); doubles after each failed attempt
   * in a row. A `retry:` field sent by the server replaces it.
   * @default {500}
   */
  retryMs?: number;
  /**
   * Longest reconnection delay in milliseconds.
   * @default {30000}
   */
  maxRetryMs?: number;
  /**
   * A connection that delivers nothing (not even the server's 15 s keepalive comment) for this
   * many milliseconds is considered dead and is reopened.
   * @default {45000}
   */
  idleTimeoutMs?: number;
}

/** A `snapshot` message of {@linkcode TelemetryClient.follow}: sent on every (re)connect. */
export interface SnapshotMessage {
  /** Discriminant. */
  kind: "snapshot";
  /** The latest event per type, as {@linkcode TelemetryClient.current} returns it. */
  current: Record<string, TelemetryEvent>;
}

/** A `telemetry` message of {@linkcode TelemetryClient.follow}: one accepted event. */
export interface TelemetryMessage {
  /** Discriminant. */
  kind: "telemetry";
  /** The event. */
  event: TelemetryEvent;
  /** The SSE id: `site:<seq>` or `run:<run_id>:<seq>`, for example `"site:42"`. */
  id: string;
}

/** A `run` message of {@linkcode TelemetryClient.follow}: a run started or stopped. */
export interface RunMessage {
  /** Discriminant. */
  kind: "run";
  /** The run record; `stopped_at` is `null` for a start. */
  run: RunRecord;
}

/**
 * A `forget` message of {@linkcode TelemetryClient.follow}: a type left the snapshot
 * (`DELETE /current/{type}`, docs/http-api.md) until its next event.
 */
export interface ForgetMessage {
  /** Discriminant. */
  kind: "forget";
  /** The forgotten event type. */
  type: string;
}

/**
 * A `disconnected` message of {@linkcode TelemetryClient.follow}: the stream dropped or could
 * not be opened, and the client reconnects after `retryMs`. The next message after a successful
 * reconnection is a fresh `snapshot`, which replaces anything missed in between.
 */
export interface DisconnectedMessage {
  /** Discriminant. */
  kind: "disconnected";
  /** Why: a {@linkcode TelemetryConnectionError}, or a 5xx {@linkcode TelemetryHttpError}. */
  error: TelemetryConnectionError | TelemetryHttpError;
  /** Failed attempts in a row, starting at 1. */
  attempt: number;
  /** Milliseconds until the next attempt. */
  retryMs: number;
}

/** What {@linkcode TelemetryClient.follow} yields. */
export type FollowMessage =
  | SnapshotMessage
  | TelemetryMessage
  | RunMessage
  | ForgetMessage
  | DisconnectedMessage;

/** The loop's settings, checked by `TelemetryClient.follow()` before the first request. */
export interface FollowLoopOptions {
  /** `/stream` with its `?type=` filter. */
  path: string;
  /** Ends the loop cleanly when aborted. */
  signal: AbortSignal | undefined;
  /** First reconnection delay in milliseconds, unless the server sent `retry:`. */
  retryMs: number;
  /** Longest reconnection delay in milliseconds. */
  maxRetryMs: number;
  /** Milliseconds without a byte after which a connection counts as dead. */
  idleTimeoutMs: number;
}

/** Why a connection ended; the loop reconnects after it. */
type Failure = TelemetryConnectionError | TelemetryHttpError;

/** What carries over from one connection to the next. */
interface Resume {
  /** Sent as `Last-Event-ID` on reconnection. */
  lastEventId: string;
  /** The server's last `retry:` field, which replaces `retryMs`. */
  serverRetry: number | undefined;
}

const ACTION = "Cannot follow the event stream";

/**
 * Follows `GET /stream` until `signal` aborts or the consumer stops: yields its messages, and a
 * `disconnected` message before each reconnection; a 4xx answer or a message that is not what
 * the API promises ends it with an error, since retrying would not help.
 *
 * @param transport The client's transport.
 * @param options The path, signal and timings.
 * @returns An async generator of {@linkcode FollowMessage}s.
 * @throws {TelemetryHttpError} For a 4xx answer or a malformed message.
 *
 * @example Usage
 * ```ts
 * import { followStream } from "./follow.ts";
 * import { Transport } from "./transport.ts";
 * import assert from "node:assert/strict";
 *
 * const body = 'event: snapshot\ndata: {}\n\n';
 * const transport = new Transport({
 *   baseUrl: "http://localhost:6562",
 *   token: undefined,
 *   timeoutMs: 5000,
 *   fetch: () => Promise.resolve(new Response(body, { headers: { "content-type": "text/event-stream" } })),
 * });
 * const options = { path: "/stream", signal: undefined, retryMs: 500, maxRetryMs: 30_000, idleTimeoutMs: 45_000 };
 * for await (const message of followStream(transport, options)) {
 *   assert.deepEqual(message, { kind: "snapshot", current: {} });
 *   break;
 * }
 * ```
 */
export async function* followStream(
  transport: Transport,
  options: FollowLoopOptions,
): AsyncGenerator<FollowMessage, void, undefined> {
  const { signal } = options;
  const resume: Resume = { lastEventId: "", serverRetry: undefined };
  // Made at the first failure after a connection, from the `retry:` that connection sent.
  let backoff: Backoff | undefined;
  while (!signal?.aborted) {
    const exchange = new Exchange(transport.timeoutMs, signal);
    let failure: Failure | undefined;
    try {
      let res: Response | undefined;
      try {
        res = await transport.open(options.path, exchange, resume.lastEventId);
      } catch (err) {
        if (signal?.aborted) return;
        failure = retryable(err);
      }
      if (res) {
        exchange.stopClock();
        backoff = undefined;
        failure = yield* readStream(transport, res, exchange, resume, options);
        if (failure === undefined) return; // the signal aborted
      }
    } finally {
      exchange.controller.abort();
      exchange.dispose();
    }
    if (signal?.aborted) return;
    // At least 10 ms, so that `retry: 0` from a server that then refuses cannot spin a core.
    const firstMs = Math.max(10, resume.serverRetry ?? options.retryMs);
    backoff ??= new Backoff({ firstMs, maxMs: options.maxRetryMs });
    const delay = backoff.next();
    yield { kind: "disconnected", error: failure!, attempt: backoff.attempts, retryMs: delay };
    await sleep(delay, signal);
  }
}

/** Passes on a failure to open the stream that a reconnection may cure; throws the others. */
function retryable(err: unknown): Failure {
  if (err instanceof TelemetryHttpError && err.status < 500) throw err;
  if (!(err instanceof TelemetryConnectionError || err instanceof TelemetryHttpError)) throw err;
  return err;
}

/**
 * Reads one open stream to its end: yields its messages and returns why it ended, or
 * `undefined` when the signal aborted.
 */
async function* readStream(
  transport: Transport,
  res: Response,
  exchange: Exchange,
  resume: Resume,
  options: FollowLoopOptions,
): AsyncGenerator<FollowMessage, Failure | undefined, undefined> {
  const url = transport.url(options.path);
  const idle = new IdleTimer(options.idleTimeoutMs, () => {
    exchange.controller.abort(new DOMException("The stream went idle", "TimeoutError"));
  });
  const parser = new ServerSentEventParserStream();
  const reader = res.body!
    .pipeThrough(new TextDecoderStream())
    .pipeThrough(idle.watch())
    .pipeThrough(parser)
    .getReader();
  try {
    while (true) {
      let next: ReadableStreamReadResult<ParsedServerSentEvent>;
      try {
        next = await reader.read();
      } catch (err) {
        // The body fails in runtime-specific ways when the connection drops (TypeError
        // on Deno and Node, AbortError after our idle timer): all mean "reconnect".
        if (options.signal?.aborted) return undefined;
        return dropped(transport.baseUrl, url, err, idle.fired ? options.idleTimeoutMs : undefined);
      }
      if (next.done) {
        return new TelemetryConnectionError(
          `${ACTION} at ${transport.baseUrl}: the server closed the stream; reconnecting`,
          { url },
        );
      }
      resume.lastEventId = parser.lastEventId;
      resume.serverRetry = parser.retry ?? resume.serverRetry;
      const message = toFollowMessage(next.value, url, res.status);
      if (message) yield message;
    }
  } finally {
    reader.cancel().catch(() => {});
    idle.stop();
  }
}

/** The failure for a body that broke off: idle for `idleMs`, or dropped by the network. */
function dropped(
  baseUrl: string,
  url: string,
  err: unknown,
  idleMs: number | undefined,
): TelemetryConnectionError {
  return new TelemetryConnectionError(
    idleMs !== undefined
      ? `${ACTION} at ${baseUrl}: nothing arrived for ${idleMs} ms, not even a keepalive; reconnecting`
      : `${ACTION} at ${baseUrl}: the connection dropped (${
        err instanceof Error ? causeText(err) : String(err)
      }); reconnecting`,
    { url, cause: err },
  );
}

/** Calls `onIdle` once nothing passed {@linkcode IdleTimer.watch} for `ms` milliseconds. */
class IdleTimer {
  /** Whether the timer went off. */
  fired = false;
  #ms: number;
  #onIdle: () => void;
  #timer: ReturnType<typeof setTimeout> | undefined;

  constructor(ms: number, onIdle: () => void) {
    this.#ms = ms;
    this.#onIdle = onIdle;
    this.#touch();
  }

  /** A pass-through stream whose every chunk restarts the clock. */
  watch(): TransformStream<string, string> {
    return new TransformStream<string, string>({
      transform: (chunk, controller) => {
        this.#touch();
        controller.enqueue(chunk);
      },
    });
  }

  stop(): void {
    clearTimeout(this.#timer);
  }

  #touch(): void {
    clearTimeout(this.#timer);
    if (Number.isFinite(this.#ms)) {
      this.#timer = setTimeout(() => {
        this.fired = true;
        this.#onIdle();
      }, this.#ms);
    }
  }
}

/** Turns one parsed event into a message; `undefined` for an event name this client skips. */
function toFollowMessage(
  message: ParsedServerSentEvent,
  url: string,
  status: number,
): FollowMessage | undefined {
  // Event names this client does not know are skipped, so a newer server can add some.
  if (!["snapshot", "telemetry", "run", "forget"].includes(message.event)) return undefined;
  const fail = (what: string, cause?: unknown): TelemetryHttpError =>
    new TelemetryHttpError(
      `GET /stream failed: a "${message.event}" message is not ${what}; the server does not follow the telemetry API`,
      {
        status,
        detail: `The "${message.event}" message data is not ${what}.`,
        body: preview(message.data),
        url,
        cause,
      },
    );
  let value: unknown;
  try {
    value = JSON.parse(message.data);
  } catch (err) {
    throw fail("JSON", err);
  }
  if (message.event === "telemetry") {
    try {
      return { kind: "telemetry", event: TelemetryEvent.fromJSON(value), id: message.id };
    } catch (err) {
      throw fail("an event envelope", err);
    }
  }
  if (message.event === "run") {
    if (!isRunRecord(value)) throw fail("a run record");
    return { kind: "run", run: value };
  }
  if (message.event === "forget") {
    if (!isJsonObject(value) || typeof value.type !== "string") throw fail('{"type": string}');
    return { kind: "forget", type: value.type };
  }
  if (!isJsonObject(value)) throw fail("an object keyed by event type");
  try {
    return { kind: "snapshot", current: toSnapshot(value) };
  } catch (err) {
    throw fail("an object of event envelopes", err);
  }
}
