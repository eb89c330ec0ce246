/**
 * The HTTP mechanics under the routes: reading and parsing bodies within limits, the Host,
 * Origin and token guards, problem+json answers, and {@linkcode toProblem}, the one table from a
 * domain error to its status and the advice an HTTP caller needs.
 *
 * @module
 */

import {
  errorText,
  InvalidRequestError,
  NoActiveRunError,
  RunConflictError,
  RunDirNotAllowedError,
  ShuttingDownError,
  SnapshotLimitError,
  StorageError,
  TypeLimitError,
  WriteError,
} from "../core/errors.ts";
import { LineSplitter } from "../wire/ndjson.ts";

const REASONS: Record<number, string> = {
  400: "Bad Request",
  401: "Unauthorized",
  403: "Forbidden",
  404: "Not Found",
  405: "Method Not Allowed",
  409: "Conflict",
  413: "Content Too Large",
  415: "Unsupported Media Type",
  500: "Internal Server Error",
  503: "Service Unavailable",
  507: "Insufficient Storage",
};

// Successful answers carry only their content type: every extra header costs about a
// microsecond per response, and without validators no browser caches or sniffs them anyway.
/** Default request body limit: 1 MiB (docs/http-api.md). */
export const DEFAULT_MAX_BODY = 1024 * 1024;

const JSON_HEADERS = { "content-type": "application/json; charset=utf-8" };
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

export function json(status: number, body: string): Response {
  return new Response(body, { status, headers: JSON_HEADERS });
}

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

/**
 * Tells whether a host name or address is loopback: `localhost`, `127.0.0.0/8` or `::1`.
 *
 * @param host A host name or IP address, IPv6 with or without brackets.
 * @returns `true` for loopback.
 *
 * @example Usage
 * ```ts
 * import { isLoopback } from "@obs-utils/telemetry/server";
 * import assert from "node:assert/strict";
 *
 * assert.equal(isLoopback("[::1]"), true);
 * assert.equal(isLoopback("0.0.0.0"), false);
 * ```
 */
export function isLoopback(host: string): boolean {
  const h = host.toLowerCase().replace(/^\[(.*)\]$/, "$1");
  return h === "localhost" || h === "::1" || /^127\.\d{1,3}\.\d{1,3}\.\d{1,3}$/.test(h) ||
    /^::ffff:127\.\d{1,3}\.\d{1,3}\.\d{1,3}$/.test(h);
}

// Any number of port digits: the port's range is checked by `requestUrl()`, answering 400.
export const LOOPBACK_HOST_HEADER = /^(?:localhost|127\.0\.0\.1|\[::1\])(?::\d+)?$/i;

/**
 * The request's URL. Deno builds it from the `Host` header, so a Host the URL parser refuses
 * (a port above 65535, `a b`, an unclosed `[::1`) is the client's error, not the server's.
 *
 * @param req The request.
 * @returns The parsed URL.
 * @throws {HttpError} 400 naming the Host header.
 */
export function requestUrl(req: Request): URL {
  const url = parseRequestUrl(req);
  if (url === null) throw badHost(req);
  return url;
}

/**
 * The request's URL, or `null` when its `Host` makes it unparsable (see {@linkcode requestUrl}).
 * The server parses each request's URL once, with this, and hands it to the guards.
 *
 * @param req The request.
 * @returns The parsed URL, or `null`.
 */
export function parseRequestUrl(req: Request): URL | null {
  try {
    return new URL(req.url);
  } catch (err) {
    if (!(err instanceof TypeError)) throw err;
    return null;
  }
}

function badHost(req: Request): HttpError {
  return new HttpError(
    400,
    `Host ${
      JSON.stringify((req.headers.get("host") ?? "(none)").slice(0, 200))
    } is not a valid host and port; send a host name or address and a port from 0 to 65535, such as localhost:6562.`,
  );
}

/** The detail of every unexpected 500: what failed stays in the server's log, not the answer. */
export const UNEXPECTED_DETAIL =
  "The server failed unexpectedly; nothing is known to be stored. Retry, and if it persists, check the server's log.";

export function isLoopbackOrigin(origin: string): boolean {
  try {
    const url = new URL(origin);
    return (url.protocol === "http:" || url.protocol === "https:") && isLoopback(url.hostname);
  } catch {
    return false; // includes "null"
  }
}

export function tokensEqual(a: string, b: string): boolean {
  const x = new TextEncoder().encode(a), y = new TextEncoder().encode(b);
  // Compare every byte whatever the first difference, so timing does not reveal the token.
  let diff = x.length ^ y.length;
  for (let i = 0; i < Math.max(x.length, y.length); i++) diff |= (x[i] ?? 0) ^ (y[i] ?? 0);
  return diff === 0;
}

const JSON_TYPE = /^application\/(?:[\w.+-]+\+)?json\s*(?:;|$)/i;
const NDJSON_TYPE = /^application\/(?:x-)?ndjson\s*(?:;|$)/i;
const strictUtf8 = new TextDecoder("utf-8", { fatal: true });
const PLAIN_LENGTH = /^\d{1,15}$/;

/**
 * The declared body length, or `undefined` when there is none or it is not one plain number
 * (repeated headers arrive joined as "31, 31"): such bodies take the streamed, limited path.
 */
function contentLength(req: Request): number | undefined {
  const raw = req.headers.get("content-length");
  if (raw === null) return undefined;
  if (PLAIN_LENGTH.test(raw)) return Number(raw); // the usual case, without splitting
  const values = new Set(raw.split(",").map((v) => v.trim()));
  const [only] = values;
  return values.size === 1 && only !== undefined && PLAIN_LENGTH.test(only)
    ? Number(only)
    : undefined;
}

/**
 * A body that ends before its Content-Length, or a chunked body cut mid-chunk, is the client's
 * fault: Deno reports it as BadResource (or Http), which must not become a 500.
 */
function bodyReadError(err: unknown): unknown {
  return err instanceof Deno.errors.BadResource || err instanceof Deno.errors.Http
    ? new IncompleteBodyError(
      400,
      "The request body ended before it was complete; send the whole body, with a Content-Length that matches it.",
    )
    : err;
}

/** A body without a declared length, read in chunks up to `maxBody` bytes. */
async function readUndeclaredBody(req: Request, maxBody: number): Promise<Uint8Array> {
  if (req.body === null) return new Uint8Array(0);
  const chunks: Uint8Array[] = [];
  let total = 0;
  for await (const chunk of req.body) {
    total += chunk.length;
    if (total > maxBody) throw tooLarge(maxBody); // leaving the loop cancels the stream
    chunks.push(chunk);
  }
  if (chunks.length === 1) return chunks[0]!;
  const out = new Uint8Array(total);
  let off = 0;
  for (const c of chunks) {
    out.set(c, off);
    off += c.length;
  }
  return out;
}

function tooLarge(maxBody: number): HttpError {
  return new HttpError(
    413,
    `The request body is larger than ${maxBody} bytes; split it into smaller batches (or have the operator raise --max-body).`,
  );
}

function decodeText(bytes: Uint8Array): string {
  try {
    return strictUtf8.decode(bytes);
  } catch {
    throw new HttpError(400, "The body is not valid UTF-8; send JSON encoded as UTF-8.");
  }
}

function parseJson(text: string, what: string): unknown {
  try {
    return JSON.parse(text);
  } catch (err) {
    throw new HttpError(400, `${what} is not valid JSON (${errorText(err)}); send a JSON value.`);
  }
}

/** Reads a POST body that may be empty: `undefined` when there is none. */
export async function readJsonBody(req: Request, maxBody: number, allowNdjson = false): Promise<{
  value: unknown;
  ndjson: string | undefined;
}> {
  const contentType = req.headers.get("content-type") ?? "";
  const isNdjson = allowNdjson && NDJSON_TYPE.test(contentType);
  // Refuse a non-JSON body before reading it, so a large form post is not buffered first.
  const declared = contentLength(req);
  // HTTP/1.1 has a body only with Content-Length or Transfer-Encoding (`curl -X POST` sends
  // neither), while Deno hands every POST a body stream.
  const hasBody = declared === undefined
    ? req.headers.has("transfer-encoding") || req.headers.has("content-length")
    : declared > 0;
  if (hasBody && !isNdjson && !JSON_TYPE.test(contentType)) {
    throw new HttpError(
      415,
      `Content-Type ${
        JSON.stringify(contentType || "(none)")
      } is not accepted; send the body as application/json${
        allowNdjson ? " or application/x-ndjson" : ""
      }.`,
    );
  }
  if (declared !== undefined && declared > maxBody) {
    // Not read, and not cancelled (see answerError in server.ts).
    throw tooLarge(maxBody);
  }
  let bytes: Uint8Array;
  try {
    // With a declared length the HTTP layer delivers exactly that many bytes, so the native
    // whole-body read is safe. Touching `req.body` first would build a ReadableStream and push
    // bytes() onto its slow path: about 10 µs a request.
    bytes = declared !== undefined ? await req.bytes() : await readUndeclaredBody(req, maxBody);
  } catch (err) {
    throw bodyReadError(err);
  }
  if (bytes.length === 0) return { value: undefined, ndjson: undefined };
  const text = decodeText(bytes);
  if (isNdjson) return { value: undefined, ndjson: text };
  return { value: parseJson(text, "The body"), ndjson: undefined };
}

/**
 * Parses an `application/x-ndjson` body: one JSON value per line, `"\n"` or `"\r\n"` line
 * breaks, blank lines skipped, the last line with or without a line break.
 *
 * @param text The decoded body.
 * @returns The values, in order.
 * @throws {HttpError} 400 naming the 1-based line (blank lines counted) and 0-based item of the
 * first value that is not JSON.
 */
export function parseNdjson(text: string): unknown[] {
  return parseNdjsonLines(text).items;
}

/**
 * Parses an `application/x-ndjson` body like {@linkcode parseNdjson}, and also says on which
 * 1-based line (blank lines counted) each value stood, so item errors can name the line.
 *
 * @param text The decoded body.
 * @returns The values and their line numbers, in order.
 * @throws {HttpError} 400 naming the line and item of the first value that is not JSON.
 */
export function parseNdjsonLines(text: string): { items: unknown[]; lines: number[] } {
  const items: unknown[] = [];
  const lines: number[] = [];
  const onLine = (line: string, lineNo: number) => {
    if (line.trim() === "") return;
    let item: unknown;
    try {
      item = JSON.parse(line);
    } catch {
      // Parsed again for its message: the line's name is built only for a refusal.
      parseJson(line, `Line ${lineNo} (item ${items.length}, 0-based)`);
    }
    items.push(item);
    lines.push(lineNo);
  };
  const splitter = new LineSplitter();
  splitter.push(text, onLine);
  splitter.end(onLine);
  return { items, lines };
}

/**
 * The host the client addressed: the `Host` header, or over HTTPS (where HTTP/2 carries it as
 * the `:authority` pseudo-header, which Deno puts in the URL and not in the headers) the URL's
 * host. Over plain HTTP a request without `Host` has none: Deno's URL then says `localhost`
 * whatever the client meant. Browsers always send one or the other.
 *
 * @param req The request.
 * @returns `host[:port]` as the client sent it, or `null`.
 */
export function requestHost(req: Request): string | null {
  const header = req.headers.get("host");
  if (header !== null) return header;
  try {
    const url = new URL(req.url);
    return url.protocol === "https:" ? url.host : null;
  } catch {
    return null;
  }
}

/**
 * The DNS-rebinding guard of a loopback server (docs/http-api.md): the `Host` must be loopback, and
 * so must any `Origin`.
 *
 * @param req The request.
 * @param url Its URL as {@linkcode parseRequestUrl} gave it (parsed here when not given).
 * @throws {HttpError} 403 naming the header to fix, 400 for a loopback Host with a bad port.
 */
export function guardLoopback(req: Request, url: URL | null = parseRequestUrl(req)): void {
  const host = requestHost(req);
  const loopbackName = host !== null && LOOPBACK_HOST_HEADER.test(host);
  if (loopbackName && url === null) throw badHost(req); // a port past 65535
  if (!loopbackName) {
    throw new HttpError(
      403,
      `Host ${
        JSON.stringify(host ?? "(none)")
      } is not accepted; address the server as localhost, 127.0.0.1 or [::1].`,
    );
  }
  const origin = req.headers.get("origin");
  if (origin !== null && !isLoopbackOrigin(origin)) {
    throw new HttpError(
      403,
      `Requests from origin ${
        JSON.stringify(origin)
      } are not accepted; only pages served from this machine may call the API.`,
    );
  }
}

/**
 * The bearer-token guard.
 *
 * @param req The request.
 * @param token The token the server requires.
 * @param publicReads The request's URL when reads are public (`--public-read`): the 401 then
 *   names the method and path that needed the token.
 * @throws {HttpError} 401 with `WWW-Authenticate` when it is missing or wrong.
 */
export function guardToken(req: Request, token: string, publicReads?: URL): void {
  const auth = req.headers.get("authorization") ?? "";
  const given = /^Bearer\s+(.+)$/i.exec(auth)?.[1]?.trim();
  if (given === undefined || !tokensEqual(given, token)) {
    throw new HttpError(
      401,
      publicReads
        ? `This server requires a token for ${req.method} ${publicReads.pathname} (only GET and HEAD on the read routes are public); send it as 'Authorization: Bearer <token>'.`
        : "This server requires a token; send it as 'Authorization: Bearer <token>'.",
      { "www-authenticate": 'Bearer realm="telemetry"' },
    );
  }
}

/**
 * The paths whose `GET`/`HEAD` need no token under `--public-read` (docs/operations.md): the dashboard
 * and every read route. A path ending in `/` also covers the paths below it (`/current/{type}`).
 * Data, not routes: a path listed here before its route exists is simply a 404 until it does.
 *
 * @example Usage
 * ```ts
 * import { PUBLIC_READ_PATHS } from "@obs-utils/telemetry/server";
 * import assert from "node:assert/strict";
 *
 * assert.ok(PUBLIC_READ_PATHS.includes("/current"));
 * assert.ok(!PUBLIC_READ_PATHS.includes("/event"));
 * ```
 */
export const PUBLIC_READ_PATHS: readonly string[] = [
  "/",
  "/health",
  "/ready",
  "/run",
  "/current",
  "/current/",
  "/types",
  "/check",
  "/stream",
  "/metrics",
];

/**
 * Tells whether a request is a read that `--public-read` lets in without a token.
 *
 * @param method The request method.
 * @param pathname The request path.
 * @returns `true` for `GET`/`HEAD` on a path of {@linkcode PUBLIC_READ_PATHS}.
 */
export function isPublicRead(method: string, pathname: string): boolean {
  if (method !== "GET" && method !== "HEAD") return false;
  return PUBLIC_READ_PATHS.some((path) =>
    path === pathname || (path.length > 1 && path.endsWith("/") && pathname.startsWith(path) &&
      pathname.length > path.length)
  );
}

/** Who may do what without the token, and how the Host and Origin are checked (docs/http-api.md, docs/operations.md). */
export interface AccessPolicy {
  /** Bound to a loopback address: the `Host` must be a loopback name (DNS rebinding). */
  loopbackBind: boolean;
  /** The bearer token; without it every request is let in (after Host and Origin). */
  token?: string | undefined;
  /** `--public-read`: reads of {@linkcode PUBLIC_READ_PATHS} need no token. */
  publicRead?: boolean;
  /** `--trust-loopback`: a loopback peer addressing a loopback name needs no token. */
  trustLoopback?: boolean;
}

/**
 * The Origin rule of a server bound to a non-loopback address: a page may call the API only
 * when it was served by this server itself (its origin's host is the request's `Host`) or from
 * this machine. Browsers send no Origin on their same-origin reads; a foreign one is a page of
 * another site trying to use the visitor's network position.
 *
 * @param req The request.
 * @param url Its URL (built from the `Host`).
 * @throws {HttpError} 403 naming the Origin.
 */
export function guardOrigin(req: Request, url: URL): void {
  const origin = req.headers.get("origin");
  if (origin === null || isLoopbackOrigin(origin)) return;
  let host: string | undefined;
  try {
    const parsed = new URL(origin);
    if (parsed.protocol === "http:" || parsed.protocol === "https:") host = parsed.host;
  } catch {
    host = undefined; // "null" and garbage
  }
  if (host !== undefined && host.toLowerCase() === url.host.toLowerCase()) return;
  throw new HttpError(
    403,
    `Requests from origin ${
      JSON.stringify(origin)
    } are not accepted; only pages served by this server or from its machine may call the API.`,
  );
}

/**
 * Decides whether a request needs the token, and checks it when it does (docs/http-api.md, docs/operations.md): not
 * for `/health`; not for a public read under `--public-read`; not, under `--trust-loopback`,
 * for a request from a loopback peer whose `Host` is a loopback name and whose `Origin`, if
 * any, is loopback. Host and Origin themselves are checked before this, in every mode.
 *
 * @param req The request.
 * @param url Its URL.
 * @param peer The peer's address (`info.remoteAddr.hostname`), `undefined` when unknown.
 * @param policy The server's access settings.
 * @throws {HttpError} 401 when the token is needed and missing or wrong.
 */
export function guardAccess(
  req: Request,
  url: URL,
  peer: string | undefined,
  policy: AccessPolicy,
): void {
  const { token } = policy;
  if (token === undefined || url.pathname === "/health") return;
  if (policy.publicRead && isPublicRead(req.method, url.pathname)) return;
  if (policy.trustLoopback && peer !== undefined && isLoopback(peer)) {
    const host = requestHost(req);
    const origin = req.headers.get("origin");
    if (
      host !== null && LOOPBACK_HOST_HEADER.test(host) &&
      (origin === null || isLoopbackOrigin(origin))
    ) return;
  }
  guardToken(req, token, policy.publicRead ? url : undefined);
}

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
