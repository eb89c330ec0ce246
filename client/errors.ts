/**
 * The client's error classes and how they are built from a failed call or an error answer:
 * {@linkcode TelemetryConnectionError} when no server answers, {@linkcode TelemetryHttpError}
 * when one answers with an error or something that is not the telemetry API. Web APIs only;
 * `client.ts` re-exports the public names.
 *
 * @module
 */

import { isJsonObject } from "../wire/event.ts";

/** How many characters of a response body an error keeps. */
const BODY_PREVIEW = 512;

/**
 * Raised when the service cannot be reached: connection refused, unknown host, network failure,
 * or no complete answer within the timeout (docs/http-api.md).
 *
 * @example Usage
 * ```ts
 * import { TelemetryConnectionError } from "@obs-utils/telemetry/client";
 * import assert from "node:assert/strict";
 *
 * const err = new TelemetryConnectionError("Cannot reach http://localhost:6562: refused", {
 *   url: "http://localhost:6562/health",
 * });
 * assert.equal(err.name, "TelemetryConnectionError");
 * ```
 */
export class TelemetryConnectionError extends Error {
  /** The URL of the request that failed. */
  readonly url: string;

  /**
   * Creates the error.
   *
   * @param message What failed and how to fix it.
   * @param options The URL and the underlying error.
   */
  constructor(message: string, options: { url: string; cause?: unknown }) {
    super(message, { cause: options.cause });
    this.name = "TelemetryConnectionError";
    this.url = options.url;
  }
}

/** Fields of {@linkcode TelemetryHttpError}. */
export interface TelemetryHttpErrorOptions {
  /** HTTP status of the answer. */
  status: number;
  /** The server's `detail` sentence, or the client's explanation for a body that has none. */
  detail: string;
  /** The start of the raw response body. */
  body: string;
  /** The URL of the request. */
  url: string;
  /** The underlying error, if any. */
  cause?: unknown;
}

/**
 * Raised when the service answers with an error status, or with a body that is not what the
 * API promises (not JSON, or the wrong shape; then `status` may be 2xx).
 *
 * @example Usage
 * ```ts ignore
 * import { TelemetryClient, TelemetryHttpError } from "@obs-utils/telemetry/client";
 *
 * try {
 *   await new TelemetryClient().stopRun();
 * } catch (err) {
 *   if (!(err instanceof TelemetryHttpError) || err.status !== 409) throw err;
 *   console.log(err.detail); // "No run is active; ..."
 * }
 * ```
 */
export class TelemetryHttpError extends Error {
  /** HTTP status of the answer. */
  readonly status: number;
  /** The server's `detail` sentence (RFC 9457), or the client's explanation. */
  readonly detail: string;
  /** The start of the raw response body (at most 512 characters). */
  readonly body: string;
  /** The URL of the request. */
  readonly url: string;

  /**
   * Creates the error.
   *
   * @param message The full message.
   * @param options Status, detail, body, URL and cause.
   */
  constructor(message: string, options: TelemetryHttpErrorOptions) {
    super(message, { cause: options.cause });
    this.name = "TelemetryHttpError";
    this.status = options.status;
    this.detail = options.detail;
    this.body = options.body;
    this.url = options.url;
  }
}

/**
 * The start of a response body, as an error keeps it: at most 512 characters.
 *
 * @param text The whole body.
 * @returns Its first 512 characters.
 *
 * @example Usage
 * ```ts
 * import { preview } from "./errors.ts";
 * import assert from "node:assert/strict";
 *
 * assert.equal(preview("x".repeat(600)).length, 512);
 * ```
 */
export function preview(text: string): string {
  return text.length > BODY_PREVIEW ? text.slice(0, BODY_PREVIEW) : text;
}

/**
 * The most specific message of an error chain (Node's fetch says only "fetch failed").
 *
 * @param err The error `fetch` or a body read threw.
 * @returns The deepest message of its `cause` chain (four levels at most), with a `code`.
 *
 * @example Usage
 * ```ts
 * import { causeText } from "./errors.ts";
 * import assert from "node:assert/strict";
 *
 * const refused = Object.assign(new Error("connect refused"), { code: "ECONNREFUSED" });
 * assert.equal(
 *   causeText(new TypeError("fetch failed", { cause: refused })),
 *   "connect refused (ECONNREFUSED)",
 * );
 * ```
 */
export function causeText(err: Error): string {
  let text = err.message;
  let cause: unknown = err.cause;
  for (let depth = 0; depth < 4 && cause instanceof Error; depth++) {
    const code = (cause as { code?: unknown }).code;
    text = typeof code === "string" && !cause.message.includes(code)
      ? `${cause.message} (${code})`
      : cause.message || text;
    cause = cause.cause;
  }
  return text;
}

/**
 * Builds the error for a non-2xx answer, preferring the problem+json `detail` (docs/http-api.md).
 *
 * @param res The answer.
 * @param text Its body, already read.
 * @param what The request, for example `"POST /run/stop"`.
 * @param url The request URL.
 * @returns The error to throw.
 *
 * @example Usage
 * ```ts
 * import { httpError } from "./errors.ts";
 * import assert from "node:assert/strict";
 *
 * const body = '{"status":409,"detail":"No run is active."}';
 * const err = httpError(new Response(body, { status: 409 }), body, "POST /run/stop", "http://localhost:6562/run/stop");
 * assert.equal(err.message, "POST /run/stop failed with 409: No run is active.");
 * ```
 */
export function httpError(
  res: Response,
  text: string,
  what: string,
  url: string,
): TelemetryHttpError {
  let detail: string | undefined;
  try {
    const value: unknown = JSON.parse(text);
    if (isJsonObject(value) && typeof value.detail === "string") detail = value.detail;
  } catch {
    // Not JSON (a proxy's HTML page, say): the body preview below carries what there is.
  }
  const reason = res.statusText ? ` ${res.statusText}` : "";
  detail ??= `The server answered ${res.status}${reason} without a problem-details body.`;
  return new TelemetryHttpError(`${what} failed with ${res.status}${reason}: ${detail}`, {
    status: res.status,
    detail,
    body: preview(text),
    url,
  });
}
