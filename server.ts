/**
 * The HTTP face of the telemetry service: a `fetch`-style handler over
 * {@linkcode TelemetryService}, and {@linkcode startServer}, which opens a site directory and
 * serves it with `Deno.serve`.
 *
 * Needs `--allow-net=<host>:<port>`, and `--allow-read` and `--allow-write` for the site directory.
 *
 * @example Usage
 * ```ts ignore
 * import { startServer } from "@obs-utils/telemetry/server";
 *
 * await using server = await startServer({ siteDir: "./telemetry", port: 0 });
 * const res = await fetch(`${server.url}/health`);
 * console.log(await res.json()); // { ok: true }
 * ```
 *
 * @module
 */

import denoJson from "./deno.json" with { type: "json" };
import {
  type CommittedEvent,
  ServiceError,
  type ServiceOptions,
  shuttingDown,
  TelemetryService,
} from "./service.ts";
import { errorText } from "./storage.ts";
import { DEFAULT_HOST, DEFAULT_PORT, hostForUrl } from "./_address.ts";
import { raceDeadline } from "./_async.ts";
import { dashboardResponse } from "./dashboard.ts";
import { metricsResponse } from "./metrics.ts";
import { StreamHub } from "./stream.ts";

export {
  type CommittedEvent,
  DEFAULT_MAX_TYPES,
  DEFAULT_SITE_TYPES,
  Histogram,
  RUN_ID_PATTERN,
  ServiceError,
  type ServiceMessage,
  type ServiceOptions,
  type ServiceStats,
  type StreamName,
  TelemetryService,
} from "./service.ts";
export {
  DEFAULT_KEEPALIVE_MS,
  DEFAULT_STREAM_QUEUE_BYTES,
  type OpenStreamOptions,
  type ServerSentEventMessage,
  ServerSentEventStream,
  StreamHub,
  type StreamHubOptions,
} from "./stream.ts";
export {
  escapeLabelValue,
  METRICS_CONTENT_TYPE,
  metricsResponse,
  renderMetrics,
  type RenderMetricsOptions,
} from "./metrics.ts";
export { dashboardResponse, renderDashboard } from "./dashboard.ts";
export {
  permissionFlags,
  SERVER_ENV_VARS,
  SERVICE_V8_FLAGS,
  type SpawnedServer,
  type SpawnOptions,
  spawnServer,
} from "./_spawn.ts";
export {
  checkTimeZone,
  dayKey,
  DayKeyer,
  FSYNC_MODES,
  type FsyncMode,
  NdjsonWriter,
  SiteInUseError,
  WriteError,
} from "./storage.ts";

/** The package version, from `deno.json`. */
export const VERSION: string = denoJson.version;
/** Default request body limit: 1 MiB (CONTRACT 2.1). */
export const DEFAULT_MAX_BODY = 1024 * 1024;
/** How long a graceful shutdown waits for in-flight requests, in milliseconds. */
export const DEFAULT_SHUTDOWN_GRACE_MS = 5000;
export { DEFAULT_HOST, DEFAULT_PORT } from "./_address.ts";

/** Options of {@linkcode createHandler}. */
export interface HandlerOptions {
  /**
   * The address the server is bound to. While it is a loopback address, requests must carry a
   * loopback `Host` (DNS-rebinding protection) and any `Origin` must be loopback.
   * @default {"localhost"}
   */
  hostname?: string;
  /** When set, every path but `/health` requires `Authorization: Bearer <token>`. */
  token?: string | undefined;
  /**
   * Largest accepted request body in bytes.
   * @default {1048576}
   */
  maxBody?: number;
  /** Called once when `POST /shutdown` was accepted, after its response is sent. */
  onShutdown?: () => void;
  /** Answers `true` while the server drains; requests then get 503. */
  isShuttingDown?: () => boolean;
  /** Receives unexpected errors (answered with 500). */
  onError?: (err: unknown) => void;
  /**
   * Milliseconds between `: keepalive` comments on `GET /stream`.
   * @default {15000}
   */
  keepaliveMs?: number;
  /**
   * How much event text may wait for one `GET /stream` client before it is dropped.
   * @default {1048576}
   */
  streamQueueBytes?: number;
  /**
   * Ends every open `GET /stream` response when aborted; `startServer` aborts it before it
   * waits for in-flight requests, which open streams would otherwise hold forever.
   */
  signal?: AbortSignal;
}

/** A request handler for `Deno.serve`, or for calling directly with a `Request`. */
export type TelemetryHandler = (req: Request, info?: Deno.ServeHandlerInfo) => Promise<Response>;

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
const JSON_HEADERS = { "content-type": "application/json; charset=utf-8" };
const PROBLEM_HEADERS = {
  "content-type": "application/problem+json; charset=utf-8",
  "cache-control": "no-store",
  "x-content-type-options": "nosniff",
};

/** An error response on its way out; routes throw it, {@linkcode createHandler} renders it. */
class HttpError extends Error {
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
class IncompleteBodyError extends HttpError {}

function json(status: number, body: string): Response {
  return new Response(body, { status, headers: JSON_HEADERS });
}

function problem(status: number, detail: string, headers: Record<string, string> = {}): Response {
  const body = JSON.stringify({
    type: "about:blank",
    title: REASONS[status] ?? "Error",
    status,
    detail,
  });
  return new Response(body, {
    status,
    headers: { ...PROBLEM_HEADERS, ...headers },
  });
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

const LOOPBACK_HOST_HEADER = /^(?:localhost|127\.0\.0\.1|\[::1\])(?::\d{1,5})?$/i;

function isLoopbackOrigin(origin: string): boolean {
  try {
    const url = new URL(origin);
    return (url.protocol === "http:" || url.protocol === "https:") && isLoopback(url.hostname);
  } catch {
    return false; // includes "null"
  }
}

function tokensEqual(a: string, b: string): boolean {
  const x = new TextEncoder().encode(a), y = new TextEncoder().encode(b);
  // Compare every byte whatever the first difference, so timing does not reveal the token.
  let diff = x.length ^ y.length;
  for (let i = 0; i < Math.max(x.length, y.length); i++) diff |= (x[i] ?? 0) ^ (y[i] ?? 0);
  return diff === 0;
}

const JSON_TYPE = /^application\/(?:[\w.+-]+\+)?json\s*(?:;|$)/i;
const NDJSON_TYPE = /^application\/(?:x-)?ndjson\s*(?:;|$)/i;
const strictUtf8 = new TextDecoder("utf-8", { fatal: true });

/**
 * The declared body length, or `undefined` when there is none or it is not one plain number
 * (repeated headers arrive joined as "31, 31"): such bodies take the streamed, limited path.
 */
function contentLength(req: Request): number | undefined {
  const raw = req.headers.get("content-length");
  if (raw === null) return undefined;
  const values = new Set(raw.split(",").map((v) => v.trim()));
  const [only] = values;
  return values.size === 1 && only !== undefined && /^\d{1,15}$/.test(only)
    ? Number(only)
    : undefined;
}

async function readBody(req: Request, maxBody: number): Promise<Uint8Array> {
  try {
    return await readBodyBytes(req, maxBody);
  } catch (err) {
    // A body that ends before its Content-Length, or a chunked body cut mid-chunk, is the
    // client's fault: Deno reports it as BadResource, which must not become a 500.
    if (err instanceof Deno.errors.BadResource || err instanceof Deno.errors.Http) {
      throw new IncompleteBodyError(
        400,
        "The request body ended before it was complete; send the whole body, with a Content-Length that matches it.",
      );
    }
    throw err;
  }
}

async function readBodyBytes(req: Request, maxBody: number): Promise<Uint8Array> {
  const declared = contentLength(req);
  if (declared !== undefined && declared > maxBody) {
    await req.body?.cancel();
    throw tooLarge(maxBody);
  }
  // With a declared length the HTTP layer delivers exactly that many bytes, so the native
  // whole-body read is safe. Touching `req.body` first would build a ReadableStream and push
  // bytes() onto its slow path: about 10 µs a request.
  if (declared !== undefined) return await req.bytes();
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
async function readJsonBody(req: Request, maxBody: number, allowNdjson = false): Promise<{
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
    await req.body?.cancel().catch(() => {});
    throw new HttpError(
      415,
      `Content-Type ${
        JSON.stringify(contentType || "(none)")
      } is not accepted; send the body as application/json${
        allowNdjson ? " or application/x-ndjson" : ""
      }.`,
    );
  }
  const bytes = await readBody(req, maxBody);
  if (bytes.length === 0) return { value: undefined, ndjson: undefined };
  const text = decodeText(bytes);
  if (isNdjson) return { value: undefined, ndjson: text };
  return { value: parseJson(text, "The body"), ndjson: undefined };
}

function parseNdjson(text: string): unknown[] {
  const items: unknown[] = [];
  const lines = text.split("\n");
  for (let i = 0; i < lines.length; i++) {
    const line = lines[i]!.replace(/\r$/, "");
    if (line.trim() === "") continue;
    items.push(parseJson(line, `Line ${i + 1} (item ${items.length})`));
  }
  return items;
}

type Route = (
  req: Request,
  info: Deno.ServeHandlerInfo | undefined,
  arg: string,
) => Promise<Response> | Response;

/**
 * Builds the request handler for a service (CONTRACT 2). It checks, in this order: shutdown
 * (503), Host and Origin (403), the bearer token (401), the route (404, 405), then the body
 * (413, 415, 400).
 *
 * @param service The service to serve.
 * @param options Security and limits.
 * @returns A handler for `Deno.serve`, also callable with a plain `Request` in tests.
 *
 * @example Usage
 * ```ts ignore
 * import { createHandler, TelemetryService } from "@obs-utils/telemetry/server";
 *
 * await using service = await TelemetryService.open({ siteDir: "./telemetry" });
 * const handler = createHandler(service);
 * const res = await handler(new Request("http://localhost/health"));
 * console.log(res.status); // 200
 * ```
 */
export function createHandler(
  service: TelemetryService,
  options: HandlerOptions = {},
): TelemetryHandler {
  const { token, maxBody = DEFAULT_MAX_BODY, onShutdown, isShuttingDown, onError } = options;
  const guardHost = isLoopback(options.hostname ?? DEFAULT_HOST);
  let shutdownRequested = false;
  const streams = new StreamHub(service, {
    ...(options.keepaliveMs !== undefined ? { keepaliveMs: options.keepaliveMs } : {}),
    ...(options.streamQueueBytes !== undefined ? { maxQueueBytes: options.streamQueueBytes } : {}),
    ...(options.signal ? { signal: options.signal } : {}),
  });

  const eventResponse = (e: CommittedEvent) => json(200, e.line);

  const routes = new Map<string, Record<string, Route>>([
    ["/", { GET: () => dashboardResponse() }],
    ["/health", { GET: () => json(200, '{"ok":true}') }],
    ["/ready", {
      GET: () => {
        const run = service.run;
        return json(
          200,
          JSON.stringify({
            ready: true,
            run_active: run !== undefined,
            run_id: run?.run_id ?? null,
            version: VERSION,
          }),
        );
      },
    }],
    ["/run", {
      GET: () => {
        const run = service.run;
        if (!run) throw new HttpError(404, "No run is active; start one with POST /run/start.");
        return json(200, JSON.stringify(run));
      },
    }],
    ["/run/start", {
      POST: async (req) => {
        const { value } = await readJsonBody(req, maxBody);
        const { run, created } = await service.startRun(value);
        return json(created ? 201 : 200, JSON.stringify(run));
      },
    }],
    ["/run/stop", {
      POST: async (req) => {
        await readJsonBody(req, maxBody);
        return json(200, JSON.stringify(await service.stopRun()));
      },
    }],
    ["/event", {
      POST: async (req) => {
        const { value } = await readJsonBody(req, maxBody);
        if (value === undefined) {
          throw new HttpError(
            400,
            'The body is empty; send a JSON object such as {"type": "weather", "data": {"wind_mps": 2.1}}.',
          );
        }
        const [event] = await service.record([value]);
        return eventResponse(event!);
      },
    }],
    ["/events", {
      POST: async (req) => {
        const { value, ndjson } = await readJsonBody(req, maxBody, true);
        let items: unknown[];
        if (ndjson !== undefined) items = parseNdjson(ndjson);
        else if (value === undefined) items = [];
        else if (Array.isArray(value)) items = value;
        else {
          throw new HttpError(
            400,
            "A batch must be a JSON array of events, or NDJSON (one event per line) sent as application/x-ndjson.",
          );
        }
        const events = await service.record(items, { batch: true });
        return json(
          200,
          `{"accepted":${events.length},"events":[${events.map((e) => e.line).join(",")}]}`,
        );
      },
    }],
    ["/current", { GET: () => json(200, service.currentJson()) }],
    ["/stream", { GET: (req) => streams.response(new URL(req.url)) }],
    ["/metrics", { GET: () => metricsResponse(service, { streams }) }],
    ["/current/", {
      GET: (_req, _info, rawType) => {
        let type: string;
        try {
          type = decodeURIComponent(rawType);
        } catch {
          throw new HttpError(400, `The event type in the path is not valid percent-encoding.`);
        }
        const line = service.currentLine(type);
        if (line === undefined) {
          throw new HttpError(
            404,
            `No event of type ${
              JSON.stringify(type)
            } has been recorded yet; GET /current lists the types that have.`,
          );
        }
        return json(200, line);
      },
    }],
    ["/shutdown", {
      POST: async (req, info) => {
        const peer = info?.remoteAddr;
        if (peer && "hostname" in peer && !isLoopback(peer.hostname)) {
          throw new HttpError(
            403,
            "Shutdown is only accepted from the machine the server runs on.",
          );
        }
        await readJsonBody(req, maxBody);
        if (!shutdownRequested) {
          shutdownRequested = true;
          // After this response has been handed to the connection.
          setTimeout(() => onShutdown?.(), 0);
        }
        return json(202, '{"shutting_down":true}');
      },
    }],
  ]);

  async function dispatch(
    req: Request,
    info: Deno.ServeHandlerInfo | undefined,
  ): Promise<Response> {
    if (shutdownRequested || isShuttingDown?.() || service.closing) {
      throw shuttingDown();
    }
    if (guardHost) {
      const host = req.headers.get("host");
      if (host === null || !LOOPBACK_HOST_HEADER.test(host)) {
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
    const url = new URL(req.url);
    const path = url.pathname;
    if (token !== undefined && path !== "/health") {
      const auth = req.headers.get("authorization") ?? "";
      const given = /^Bearer\s+(.+)$/i.exec(auth)?.[1]?.trim();
      if (given === undefined || !tokensEqual(given, token)) {
        throw new HttpError(
          401,
          "This server requires a token; send it as 'Authorization: Bearer <token>'.",
          { "www-authenticate": 'Bearer realm="telemetry"' },
        );
      }
    }
    let methods = routes.get(path);
    let arg = "";
    if (!methods && path.startsWith("/current/")) {
      methods = routes.get("/current/");
      arg = path.slice("/current/".length);
    }
    if (!methods) {
      throw new HttpError(
        404,
        `No endpoint at ${path}; the API has / (dashboard), /health, /ready, /run, /run/start, /run/stop, /event, /events, /current, /stream, /metrics and /shutdown.`,
      );
    }
    const method = req.method === "HEAD" ? "GET" : req.method;
    const route = methods[method];
    if (!route) {
      const allow = Object.keys(methods).flatMap((m) => m === "GET" ? ["GET", "HEAD"] : [m]);
      throw new HttpError(
        405,
        `${req.method} is not allowed on ${path}; use ${allow.join(" or ")}.`,
        { allow: allow.join(", ") },
      );
    }
    return await route(req, info, arg);
  }

  return async function handle(req, info) {
    try {
      return await dispatch(req, info);
    } catch (err) {
      await req.body?.cancel().catch(() => {});
      const stopping = shutdownRequested || isShuttingDown?.() || service.closing;
      if (err instanceof IncompleteBodyError && stopping) {
        const stop = shuttingDown();
        return problem(stop.status, stop.message);
      }
      if (err instanceof HttpError) return problem(err.status, err.message, err.headers);
      if (err instanceof ServiceError) return problem(err.status, err.message);
      onError?.(err);
      return problem(500, `The server failed unexpectedly (${errorText(err)}); check its log.`);
    }
  };
}

/** Options of {@linkcode startServer}: the service's, the handler's, and where to listen. */
export interface ServerOptions extends ServiceOptions {
  /**
   * Address to bind.
   * @default {"localhost"}
   */
  hostname?: string;
  /**
   * Port; 0 picks a free one (tests).
   * @default {6562}
   */
  port?: number;
  /** Bearer token required on every path but `/health`. */
  token?: string | undefined;
  /**
   * Allow a non-loopback `hostname` without a token.
   * @default {false}
   */
  insecure?: boolean;
  /**
   * Largest accepted request body in bytes.
   * @default {1048576}
   */
  maxBody?: number;
  /** Receives unexpected request errors. */
  onError?: (err: unknown) => void;
  /**
   * Longest wait, on shutdown, for in-flight requests before the files are closed anyway.
   * @default {5000}
   */
  shutdownGraceMs?: number;
}

/** A running server from {@linkcode startServer}. */
export interface ServerHandle extends AsyncDisposable {
  /** The bound address; with `port: 0`, the port picked. */
  readonly addr: Deno.NetAddr;
  /** Base URL, for example `http://127.0.0.1:6562`. */
  readonly url: string;
  /** The service behind the server. */
  readonly service: TelemetryService;
  /**
   * Graceful shutdown (CONTRACT 4.4): new requests get 503, in-flight ones finish, files are
   * flushed, fsynced and closed, the lock is released.
   */
  shutdown(): Promise<void>;
  /** Settles when the server has shut down, by any means. */
  readonly finished: Promise<void>;
}

/** Raised by {@linkcode startServer} for a configuration that must not run. */
export class ConfigError extends Error {
  /**
   * Creates the error.
   *
   * @param message What is wrong and which option fixes it.
   */
  constructor(message: string) {
    super(message);
    this.name = "ConfigError";
  }
}

/**
 * Opens the site directory and serves it over HTTP.
 *
 * @param options Site directory, address and behaviour.
 * @returns A handle with the address, `shutdown()` and `finished`.
 * @throws {ConfigError} If binding to a non-loopback address without a token or `insecure`.
 * @throws {SiteInUseError} If another server holds the site directory.
 * @throws {Deno.errors.AddrInUse} If the port is taken.
 * @throws {Deno.errors.NotCapable} If a permission is missing.
 *
 * @example Usage
 * ```ts ignore
 * import { startServer } from "@obs-utils/telemetry/server";
 *
 * const server = await startServer({ siteDir: "./telemetry", hostname: "127.0.0.1", port: 0 });
 * console.log(`listening on ${server.url}`);
 * await server.shutdown();
 * ```
 */
export async function startServer(options: ServerOptions): Promise<ServerHandle> {
  const hostname = options.hostname ?? DEFAULT_HOST;
  const port = options.port ?? DEFAULT_PORT;
  if (!isLoopback(hostname) && !options.token && !options.insecure) {
    throw new ConfigError(
      `Refusing to listen on ${hostname} without a token: anyone on the network could write telemetry. Set --token (or OBS_TELEMETRY_TOKEN), or pass --insecure.`,
    );
  }
  const service = await TelemetryService.open(options);
  let stopping: Promise<void> | undefined;
  const streamsEnd = new AbortController();
  const handler = createHandler(service, {
    signal: streamsEnd.signal,
    hostname,
    token: options.token,
    maxBody: options.maxBody ?? DEFAULT_MAX_BODY,
    onShutdown: () => void shutdown(),
    isShuttingDown: () => stopping !== undefined,
    ...(options.onError ? { onError: options.onError } : {}),
  });
  // Requests being answered; shutdown waits for them before it closes the files.
  let inFlight = 0;
  let drained: PromiseWithResolvers<void> | undefined;
  const counted: TelemetryHandler = async (req, info) => {
    inFlight++;
    try {
      return await handler(req, info);
    } finally {
      if (--inFlight === 0) drained?.resolve();
    }
  };
  let server: Deno.HttpServer<Deno.NetAddr>;
  try {
    server = Deno.serve({ hostname, port, onListen: () => {} }, counted);
  } catch (err) {
    await service.close();
    throw err;
  }
  const graceMs = options.shutdownGraceMs ?? DEFAULT_SHUTDOWN_GRACE_MS;
  // Settles when shutdown() has closed the service, however the shutdown was started.
  const done = Promise.withResolvers<void>();
  function shutdown(): Promise<void> {
    if (stopping) return stopping;
    stopping = (async () => {
      const deadline = Date.now() + graceMs;
      // Open GET /stream responses never finish by themselves; end them first.
      streamsEnd.abort();
      // New requests are answered 503 from now on while the listener stays open, so whoever
      // waits for the port to close (`obs-utils telemetry stop`) knows the lock is free.
      if (inFlight > 0) {
        drained = Promise.withResolvers<void>();
        await raceDeadline(drained.promise, deadline);
      }
      try {
        await service.close();
      } finally {
        // A peer that stopped reading holds its connection (and so server.shutdown()) forever;
        // past the grace period the caller may exit anyway: the files are already closed.
        await raceDeadline(server.shutdown(), deadline);
      }
    })();
    stopping.then(done.resolve, done.reject);
    return stopping;
  }
  server.finished.then(shutdown, shutdown).catch(() => {}); // failures surface via `finished`
  // Callers that never await `finished` must not crash on a failed close; those who do see it.
  done.promise.catch(() => {});
  const finished = done.promise;
  const addr = server.addr;
  // Keep the name the operator chose; "localhost" reads better than the address it resolved to.
  const shown = hostname === "localhost" ? hostname : addr.hostname;
  const urlHost = hostForUrl(shown);
  return {
    addr,
    url: `http://${urlHost}:${addr.port}`,
    service,
    shutdown,
    finished,
    [Symbol.asyncDispose]: shutdown,
  };
}
