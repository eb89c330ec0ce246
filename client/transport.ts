/**
 * One HTTP exchange of the client with the service, and what its failures read like: the
 * `fetch` call with a timeout and the caller's abort signal ({@linkcode Exchange}), the request
 * headers, and the errors of an answer of the wrong shape ({@linkcode Transport.shapeError}; the
 * error classes are `errors.ts`'s). Web APIs only: Node and browsers
 * import it through `client.ts`, which re-exports the public names.
 *
 * @module
 */

import { isJsonObject, type JsonObject, type RunRecord, TelemetryEvent } from "../wire/event.ts";
import {
  causeText,
  httpError,
  preview,
  TelemetryConnectionError,
  TelemetryHttpError,
} from "./errors.ts";

/**
 * A `fetch`-compatible function, for {@linkcode ClientOptions.fetch}. The global `fetch`
 * satisfies it.
 */
export type FetchFunction = (
  input: string | URL | Request,
  init?: RequestInit,
) => Promise<Response>;

/**
 * Reads a `GET /current` object into events, one per type.
 *
 * @param value The parsed answer or `snapshot` message.
 * @returns The envelopes keyed by event type.
 * @throws {TypeError} If a value is not an event envelope.
 *
 * @example Usage
 * ```ts
 * import { toSnapshot } from "./transport.ts";
 * import assert from "node:assert/strict";
 *
 * assert.deepEqual(toSnapshot({}), {});
 * ```
 */
export function toSnapshot(value: JsonObject): Record<string, TelemetryEvent> {
  // fromEntries defines own properties, so a type named "__proto__" stays an ordinary key.
  return Object.fromEntries(
    Object.entries(value).map(([type, envelope]) => [type, TelemetryEvent.fromJSON(envelope)]),
  );
}

/**
 * Whether a parsed answer is a run record (docs/http-api.md).
 *
 * @param value The parsed answer or `run` message.
 * @returns `true` if every field of a run record is there with its type.
 *
 * @example Usage
 * ```ts
 * import { isRunRecord } from "./transport.ts";
 * import assert from "node:assert/strict";
 *
 * assert.equal(isRunRecord({ run_id: "001" }), false);
 * ```
 */
export function isRunRecord(value: unknown): value is RunRecord {
  return isJsonObject(value) && typeof value.run_id === "string" &&
    typeof value.run_dir === "string" && typeof value.started_at === "string" &&
    (value.stopped_at === null || typeof value.stopped_at === "string") &&
    typeof value.events === "number" && isJsonObject(value.meta);
}

/**
 * The state of one HTTP exchange: its abort controller, its timeout and the caller's signal
 * joined into one, and the way failures read.
 *
 * @example Usage
 * ```ts
 * import { Exchange } from "./transport.ts";
 * import assert from "node:assert/strict";
 *
 * const exchange = new Exchange(5000, undefined);
 * assert.equal(exchange.controller.signal.aborted, false);
 * exchange.dispose();
 * ```
 */
export class Exchange {
  /** Aborts the `fetch` and its body; the timeout and the caller's signal abort it too. */
  readonly controller: AbortController = new AbortController();
  #timer: ReturnType<typeof setTimeout> | undefined;
  #timedOut = false;
  #callerSignal: AbortSignal | undefined;
  #onCallerAbort: () => void;

  /**
   * Starts the clock.
   *
   * @param timeoutMs Milliseconds until the exchange aborts; `Infinity` for never.
   * @param callerSignal The caller's signal, whose abort aborts the exchange.
   */
  constructor(timeoutMs: number, callerSignal: AbortSignal | undefined) {
    this.#callerSignal = callerSignal;
    this.#onCallerAbort = () => this.controller.abort(callerSignal?.reason);
    if (callerSignal?.aborted) this.controller.abort(callerSignal.reason);
    else callerSignal?.addEventListener("abort", this.#onCallerAbort, { once: true });
    if (Number.isFinite(timeoutMs)) {
      this.#timer = setTimeout(() => {
        this.#timedOut = true;
        this.controller.abort(new DOMException("The request timed out", "TimeoutError"));
      }, timeoutMs);
    }
  }

  /** Stops the timeout clock (a stream keeps running after its headers). */
  stopClock(): void {
    clearTimeout(this.#timer);
  }

  /** Whether the timeout aborted the exchange. */
  get timedOut(): boolean {
    return this.#timedOut;
  }

  /** Whether the caller's signal aborted. */
  get callerAborted(): boolean {
    return this.#callerSignal?.aborted === true;
  }

  /**
   * Turns a failure of `fetch` or of reading the body into what the caller should see.
   *
   * @param err What `fetch` or the body read threw.
   * @param what The request, for example `"GET /health"`.
   * @param url The request URL.
   * @param baseUrl The client's base address, for the message.
   * @param timeoutMs The timeout, for the message.
   * @returns The caller's abort reason, a {@linkcode TelemetryConnectionError}, or `err`.
   */
  translate(err: unknown, what: string, url: string, baseUrl: string, timeoutMs: number): unknown {
    if (this.callerAborted) return this.#callerSignal!.reason;
    if (this.#timedOut) {
      return new TelemetryConnectionError(
        `Cannot ${what} at ${baseUrl}: no complete answer within ${timeoutMs} ms; check that the server is running and responsive, or raise timeoutMs`,
        { url, cause: err },
      );
    }
    // fetch reports refused connections, DNS failures and resets as TypeError on every runtime.
    if (err instanceof TypeError) {
      return new TelemetryConnectionError(
        `Cannot ${what} at ${baseUrl}: ${
          causeText(err)
        }; start the server with "obs-utils telemetry run", or point the client at it with baseUrl or OBS_TELEMETRY_HOST/OBS_TELEMETRY_PORT`,
        { url, cause: err },
      );
    }
    return err;
  }

  /** Stops the clock and lets go of the caller's signal. */
  dispose(): void {
    clearTimeout(this.#timer);
    this.#callerSignal?.removeEventListener("abort", this.#onCallerAbort);
  }
}

/** Options of {@linkcode Transport.call}. */
export interface CallOptions {
  /** The JSON request body, already serialised. */
  body?: string;
  /** The caller's abort signal. */
  signal?: AbortSignal | undefined;
  /** Answer `undefined` instead of throwing on 404. */
  nullOn404?: boolean;
  /** Statuses besides 2xx whose JSON body is the answer (`GET /check` answers 503). */
  okStatuses?: readonly number[];
  /** Sent as the `Idempotency-Key` header (docs/http-api.md). */
  idempotencyKey?: string | undefined;
  /** More request headers, such as the command line's `Telemetry-Via` (docs/safety.md#audit). */
  headers?: Readonly<Record<string, string>>;
}

/** A 2xx answer read as JSON, with its response for the status in later errors. */
export interface Answer {
  /** The parsed body. */
  value: unknown;
  /** The response, body already read. */
  res: Response;
}

/** What a {@linkcode Transport} needs, resolved and checked by the client's constructor. */
export interface TransportOptions {
  /** The base address without a trailing `/`. */
  baseUrl: string;
  /** The bearer token, or `undefined` for none. */
  token: string | undefined;
  /** Milliseconds per call; `Infinity` for no limit. */
  timeoutMs: number;
  /** The `fetch` to call instead of the global one. */
  fetch: FetchFunction | undefined;
}

/**
 * Sends the client's requests: one {@linkcode Exchange} per call, the headers, and the client's
 * errors for answers that fail or do not have the shape the API promises.
 *
 * @example Usage
 * ```ts
 * import { Transport } from "./transport.ts";
 * import assert from "node:assert/strict";
 *
 * const transport = new Transport({
 *   baseUrl: "http://localhost:6562",
 *   token: undefined,
 *   timeoutMs: 5000,
 *   fetch: () => Promise.resolve(Response.json({ ok: true })),
 * });
 * const { value } = await transport.call("GET", "/health", {});
 * assert.deepEqual(value, { ok: true });
 * ```
 */
export class Transport {
  /** The base address, for example `"http://localhost:6562"`, without trailing `/`. */
  readonly baseUrl: string;
  /** Milliseconds per call; `Infinity` for no limit. */
  readonly timeoutMs: number;
  #token: string | undefined;
  #fetch: FetchFunction | undefined;

  /**
   * Creates the transport; no request is made.
   *
   * @param options The resolved address, token, timeout and `fetch`.
   */
  constructor(options: TransportOptions) {
    this.baseUrl = options.baseUrl;
    this.timeoutMs = options.timeoutMs;
    this.#token = options.token;
    this.#fetch = options.fetch;
  }

  /**
   * The URL of a path of the service.
   *
   * @param path A path such as `"/health"`.
   * @returns The base address followed by the path.
   */
  url(path: string): string {
    return `${this.baseUrl}${path}`;
  }

  /**
   * Sends one request and reads the whole answer as JSON; 2xx only (and 404 if allowed).
   *
   * @param method The HTTP method.
   * @param path The path, query included.
   * @param options The body, the caller's signal and whether 404 answers `undefined`.
   * @returns The parsed answer and its response.
   * @throws {TelemetryConnectionError} If no server answers within the timeout.
   * @throws {TelemetryHttpError} If the answer is an error or not JSON.
   */
  call(
    method: "GET" | "POST" | "PUT" | "DELETE",
    path: string,
    options: CallOptions,
  ): Promise<Answer>;
  /**
   * Sends one request and reads the whole answer as JSON; `undefined` for a 404.
   *
   * @param method The HTTP method.
   * @param path The path, query included.
   * @param options The body and the caller's signal.
   * @returns The parsed answer and its response, or `undefined` for a 404.
   * @throws {TelemetryConnectionError} If no server answers within the timeout.
   * @throws {TelemetryHttpError} If the answer is an error other than 404 or not JSON.
   */
  call(
    method: "GET" | "POST" | "PUT" | "DELETE",
    path: string,
    options: CallOptions & { nullOn404: true },
  ): Promise<Answer | undefined>;
  async call(
    method: "GET" | "POST" | "PUT" | "DELETE",
    path: string,
    options: CallOptions,
  ): Promise<Answer | undefined> {
    const url = this.url(path);
    const what = `${method} ${path}`;
    const exchange = new Exchange(this.timeoutMs, options.signal);
    try {
      const doFetch = this.#fetch ?? globalThis.fetch;
      let res: Response;
      let text: string;
      try {
        const init: RequestInit = {
          method,
          headers: {
            ...options.headers,
            ...this.#headers("application/json", options.body !== undefined),
          },
          signal: exchange.controller.signal,
        };
        if (options.body !== undefined) init.body = options.body;
        if (options.idempotencyKey !== undefined) {
          (init.headers as Record<string, string>)["idempotency-key"] = options.idempotencyKey;
        }
        res = await doFetch(url, init);
        text = await res.text();
      } catch (err) {
        throw exchange.translate(err, what, url, this.baseUrl, this.timeoutMs);
      }
      if (res.status === 404 && options.nullOn404) return undefined;
      if (!res.ok && !options.okStatuses?.includes(res.status)) {
        throw httpError(res, text, what, url);
      }
      // 204 No Content (DELETE /current/{type}) has no body to parse.
      if (res.status === 204) return { value: null, res };
      try {
        return { value: JSON.parse(text), res };
      } catch (err) {
        throw new TelemetryHttpError(
          `${what} failed: the server answered ${res.status} with a body that is not JSON; is ${this.baseUrl} a telemetry server?`,
          {
            status: res.status,
            detail: `The answer is not JSON (content type ${
              JSON.stringify(res.headers.get("content-type") ?? "none")
            }).`,
            body: preview(text),
            url,
            cause: err,
          },
        );
      }
    } finally {
      exchange.dispose();
    }
  }

  /**
   * Opens the event stream; resolves with the 2xx response whose body is the stream.
   *
   * @param path `/stream` with its query.
   * @param exchange The exchange, which the caller keeps to abort the stream later.
   * @param lastEventId Sent as `Last-Event-ID` unless empty.
   * @returns The response, body unread.
   * @throws {TelemetryConnectionError} If no server answers within the timeout.
   * @throws {TelemetryHttpError} If the answer is an error or not an event stream.
   */
  /**
   * Sends a `GET` whose answer is read as it comes (`GET /history`); resolves with the 2xx
   * response, body unread.
   *
   * @param path The path with its query.
   * @param exchange The exchange, which the caller keeps to abort the answer later.
   * @returns The response, body unread.
   * @throws {TelemetryConnectionError} If no server answers within the timeout.
   * @throws {TelemetryHttpError} If the answer is an error.
   */
  async openLines(path: string, exchange: Exchange): Promise<Response> {
    const url = this.url(path);
    const what = `GET ${path}`;
    const doFetch = this.#fetch ?? globalThis.fetch;
    let res: Response;
    try {
      res = await doFetch(url, {
        headers: this.#headers("application/x-ndjson", false),
        signal: exchange.controller.signal,
      });
      if (res.ok && res.body) return res;
      const text = await res.text();
      throw httpError(res, text, what, url);
    } catch (err) {
      throw exchange.translate(err, what, url, this.baseUrl, this.timeoutMs);
    }
  }

  async open(path: string, exchange: Exchange, lastEventId: string): Promise<Response> {
    const url = this.url(path);
    const what = `GET ${path}`;
    const doFetch = this.#fetch ?? globalThis.fetch;
    let res: Response;
    try {
      res = await doFetch(url, {
        headers: this.#headers("text/event-stream", false, lastEventId),
        signal: exchange.controller.signal,
      });
    } catch (err) {
      throw exchange.translate(err, what, url, this.baseUrl, this.timeoutMs);
    }
    const contentType = res.headers.get("content-type") ?? "";
    if (res.ok && res.body && /^text\/event-stream\s*(?:;|$)/i.test(contentType)) return res;
    let text: string;
    try {
      text = await res.text();
    } catch (err) {
      throw exchange.translate(err, what, url, this.baseUrl, this.timeoutMs);
    }
    if (!res.ok) throw httpError(res, text, what, url);
    throw new TelemetryHttpError(
      `${what} failed: the server answered ${res.status} with ${
        JSON.stringify(contentType || "no content type")
      } instead of text/event-stream; is ${this.baseUrl} a telemetry server of version 0.3 or later?`,
      {
        status: res.status,
        detail: "The answer is not an event stream.",
        body: preview(text),
        url,
      },
    );
  }

  /**
   * Reads an answer as an event envelope.
   *
   * @param answer The answer.
   * @param path The path, for the message.
   * @returns The event.
   * @throws {TelemetryHttpError} If it is not an envelope.
   */
  toEvent(answer: Answer, path: string): TelemetryEvent {
    try {
      return TelemetryEvent.fromJSON(answer.value);
    } catch (err) {
      if (!(err instanceof TypeError)) throw err;
      throw this.shapeError(answer.res, answer.value, path, "an event envelope", err);
    }
  }

  /**
   * Reads an answer as a run record.
   *
   * @param answer The answer.
   * @param path The path, for the message.
   * @returns The run record.
   * @throws {TelemetryHttpError} If it is not a run record.
   */
  toRun(answer: Answer, path: string): RunRecord {
    if (!isRunRecord(answer.value)) {
      throw this.shapeError(answer.res, answer.value, path, "a run record");
    }
    return answer.value;
  }

  /**
   * Reads an answer as the snapshot, one event per type.
   *
   * @param answer The answer.
   * @param path The path, for the message.
   * @returns The envelopes keyed by event type.
   * @throws {TelemetryHttpError} If it is not an object of envelopes.
   */
  toSnapshot(answer: Answer, path: string): Record<string, TelemetryEvent> {
    const { value, res } = answer;
    if (!isJsonObject(value)) {
      throw this.shapeError(res, value, path, "an object keyed by event type");
    }
    try {
      return toSnapshot(value);
    } catch (err) {
      if (!(err instanceof TypeError)) throw err;
      throw this.shapeError(res, value, path, "an object of event envelopes", err);
    }
  }

  /**
   * Builds the error for a 2xx JSON answer that does not have the shape the API promises.
   *
   * @param res The answer.
   * @param value Its parsed body.
   * @param path The path, for the message.
   * @param expected What it should have been, for example `"a run record"`.
   * @param cause Why it is not, if known.
   * @returns The error to throw.
   */
  shapeError(
    res: Response,
    value: unknown,
    path: string,
    expected: string,
    cause?: unknown,
  ): TelemetryHttpError {
    const why = cause instanceof Error ? ` (${cause.message})` : "";
    return new TelemetryHttpError(
      `${path} answered ${res.status} with JSON that is not ${expected}${why}; is ${this.baseUrl} a telemetry server?`,
      {
        status: res.status,
        detail: `The answer is not ${expected}${why}.`,
        body: preview(JSON.stringify(value) ?? ""),
        url: this.url(path),
        cause,
      },
    );
  }

  #headers(accept: string, hasBody: boolean, lastEventId = ""): Record<string, string> {
    const headers: Record<string, string> = { accept };
    if (hasBody) headers["content-type"] = "application/json";
    if (this.#token !== undefined) headers.authorization = `Bearer ${this.#token}`;
    if (lastEventId !== "") headers["last-event-id"] = lastEventId;
    return headers;
  }
}
