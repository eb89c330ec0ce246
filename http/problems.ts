/**
 * problem+json answers (docs/http-api.md): {@linkcode HttpError}, which routes and guards throw,
 * {@linkcode problem}, which renders one, and {@linkcode toProblem}, the one table from a domain
 * error to its status and the advice an HTTP caller needs.
 *
 * @module
 */

import {
  errorText,
  IdempotencyConflictError,
  InvalidRequestError,
  NoActiveRunError,
  RunConflictError,
  RunDirNotAllowedError,
  RunIdReusedError,
  ShuttingDownError,
  SnapshotLimitError,
  StorageError,
  TypeLimitError,
  WriteError,
} from "../core/errors.ts";

const REASONS: Record<number, string> = {
  400: "Bad Request",
  401: "Unauthorized",
  403: "Forbidden",
  404: "Not Found",
  405: "Method Not Allowed",
  408: "Request Timeout",
  409: "Conflict",
  413: "Content Too Large",
  415: "Unsupported Media Type",
  422: "Unprocessable Content",
  500: "Internal Server Error",
  503: "Service Unavailable",
  507: "Insufficient Storage",
};

const PROBLEM_HEADERS = {
  "content-type": "application/problem+json; charset=utf-8",
  "cache-control": "no-store",
  "x-content-type-options": "nosniff",
};

/** An error response on its way out; routes throw it, {@linkcode toProblem} renders it. */
export class HttpError extends Error {
  readonly status: number;
  readonly headers: Record<string, string>;
  constructor(status: number, detail: string, headers: Record<string, string> = {}) {
    super(detail);
    this.name = "HttpError";
    this.status = status;
    this.headers = headers;
  }
}

/** The body ended early: the client's fault, unless the server cut it off while stopping. */
export class IncompleteBodyError extends HttpError {}

/**
 * A request body that did not arrive in full within `--body-timeout` of its head
 * (docs/operations.md): answered 408, and the connection is closed after the answer.
 */
export class BodyTimeoutError extends HttpError {
  /** The timeout that passed, in milliseconds. */
  readonly timeoutMs: number;
  constructor(timeoutMs: number) {
    super(
      408,
      `The request body did not arrive in full within ${
        timeoutMs / 1000
      } s of its head; send the whole body at once (or have the operator raise --body-timeout).`,
    );
    this.name = "BodyTimeoutError";
    this.timeoutMs = timeoutMs;
  }
}

/**
 * A problem+json answer (`type` `about:blank`, the status's reason as `title`), never cached or
 * sniffed.
 *
 * @param status The HTTP status.
 * @param detail What went wrong and what to do about it.
 * @param headers Extra headers, such as `allow` or `www-authenticate`.
 * @returns The response.
 */
export function problem(
  status: number,
  detail: string,
  headers: Record<string, string> = {},
): Response {
  const body = JSON.stringify({
    type: "about:blank",
    title: REASONS[status] ?? "Error",
    status,
    detail,
  });
  const res = new Response(body, {
    status,
    headers: { ...PROBLEM_HEADERS, ...headers },
  });
  details.set(res, detail);
  return res;
}

/** The `detail` of each problem response made here, for the log line of a rejection. */
const details = new WeakMap<Response, string>();

/**
 * The `detail` of a problem response made by {@linkcode problem}, without reading its body.
 *
 * @param res A response.
 * @returns Its detail, or `undefined` for a response that is not a problem made here.
 */
export function problemDetail(res: Response): string | undefined {
  return details.get(res);
}

/** The refusals of an answer that refused parts of its request, one log line each. */
const refusalsOf = new WeakMap<Response, readonly string[]>();

/**
 * Marks an answer that is not problem+json (InfluxDB's `{"error": ...}`, docs/http-api.md)
 * with its `detail` for the log line of a rejection, and with the refusals of the parts of the
 * request it refused, which the log then reports one by one instead.
 *
 * @param res The answer.
 * @param detail What went wrong, as its body says it.
 * @param refusals The parts refused, one sentence each, when it refused only parts.
 * @returns The same answer.
 *
 * @example Usage
 * ```ts
 * import { answerRefusals, problemDetail, withDetail } from "./problems.ts";
 * import assert from "node:assert/strict";
 *
 * const res = withDetail(new Response('{"error":"partial write"}', { status: 400 }), "partial write", ["line 2: missing fields"]);
 * assert.equal(problemDetail(res), "partial write");
 * assert.deepEqual(answerRefusals(res), ["line 2: missing fields"]);
 * ```
 */
export function withDetail(
  res: Response,
  detail: string,
  refusals?: readonly string[],
): Response {
  details.set(res, detail);
  if (refusals !== undefined) refusalsOf.set(res, refusals);
  return res;
}

/**
 * The refusals an answer was marked with by {@linkcode withDetail}, one per refused part.
 *
 * @param res A response.
 * @returns The refusals, or `undefined` for an answer that refused the request as a whole.
 */
export function answerRefusals(res: Response): readonly string[] | undefined {
  return refusalsOf.get(res);
}

/** The detail of every unexpected 500: what failed stays in the server's log, not the answer. */
export const UNEXPECTED_DETAIL =
  "The server failed unexpectedly; nothing is known to be stored. Retry, and if it persists, check the server's log.";

/** The one place where HTTP advice is added to what the service says. */
const SHUTTING_DOWN = "The server is shutting down; retry once it is back.";

/**
 * Maps an error to its problem+json answer (docs/http-api.md): the one table from the service's
 * domain errors to HTTP statuses, adding the route or flag that fixes each.
 *
 * @param err Anything a route threw.
 * @returns The response, or `undefined` for an unexpected error (the caller logs it and
 *   answers 500).
 *
 * @example Usage
 * ```ts
 * import { toProblem } from "@obs-utils/telemetry/server";
 * import assert from "node:assert/strict";
 *
 * assert.equal(toProblem(new Error("a bug")), undefined);
 * ```
 */
export function toProblem(err: unknown): Response | undefined {
  if (err instanceof HttpError) return problem(err.status, err.message, err.headers);
  if (err instanceof RunDirNotAllowedError) {
    const roots = err.runRoots.length > 0
      ? `the site directory ${err.siteDir} or an --allow-run-root (${err.runRoots.join(", ")})`
      : `the site directory ${err.siteDir}`;
    return problem(
      400,
      `run_dir "${err.requested}" resolves to ${err.resolved}, which is not inside ${roots}; use a path below it, or have the operator add --allow-run-root.`,
    );
  }
  if (err instanceof InvalidRequestError) return problem(400, err.message);
  if (err instanceof TypeLimitError) return problem(400, `${err.message} or raise --max-types.`);
  if (err instanceof SnapshotLimitError) {
    return problem(413, `${err.message}, or raise --max-snapshot.`);
  }
  if (err instanceof RunConflictError) {
    const next = err.requestedRunId === undefined ? "a new one" : `"${err.requestedRunId}"`;
    return problem(
      409,
      `Run "${err.activeRunId}" is active; stop it with POST /run/stop before starting ${next}.`,
    );
  }
  if (err instanceof RunIdReusedError) return problem(409, `${err.message}.`);
  if (err instanceof IdempotencyConflictError) {
    return problem(
      422,
      `${err.message}. A retry must send the same body to the same route; send a new Idempotency-Key with a new request.`,
    );
  }
  if (err instanceof NoActiveRunError) {
    return problem(409, "No run is active; start one with POST /run/start.");
  }
  if (err instanceof ShuttingDownError) return problem(503, SHUTTING_DOWN);
  if (err instanceof WriteError) {
    return err.diskFull ? problem(507, diskFullDetail(err)) : problem(
      500,
      `The event could not be written (${
        errorText(err)
      }); nothing was stored. Check the site directory and retry.`,
    );
  }
  if (err instanceof StorageError) return problem(500, `${err.message}.`);
  return undefined;
}

/** The 507 `detail`: which file system is full, and what to do (docs/http-api.md). */
function diskFullDetail(err: WriteError): string {
  const where = err.mountPoint !== undefined
    ? `the file system mounted at ${err.mountPoint}${
      err.path === undefined ? "" : ` (writing ${err.path})`
    }`
    : err.path !== undefined
    ? `the file system holding ${err.path}`
    : "the file system holding the site directory";
  return `The disk is full: ${where} has no space left; nothing was written and no seq was used. Free space there (or raise the quota) and retry.`;
}

/**
 * The 503 answer while the server shuts down.
 *
 * @returns A problem+json response.
 */
export function shuttingDownResponse(): Response {
  return problem(503, SHUTTING_DOWN);
}
