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
import { type ServiceOptions, TelemetryService } from "./service.ts";
import { errorText, ShuttingDownError } from "./_errors.ts";
import { recordLockHolder } from "./_fs.ts";
import {
  DEFAULT_MAX_BODY,
  guardLoopback,
  guardToken,
  HttpError,
  IncompleteBodyError,
  isLoopback,
  json,
  parseNdjsonLines,
  problem,
  problemDetail,
  readJsonBody,
  requestUrl,
  shuttingDownResponse,
  toProblem,
  UNEXPECTED_DETAIL,
} from "./_http.ts";
import { parseEvent, parseEvents, parseRunStart } from "./_request.ts";
import { type Route, route, Router } from "./_router.ts";
import { DEFAULT_HOST, DEFAULT_PORT, hostForUrl } from "./_address.ts";
import { raceDeadline } from "./_async.ts";
import { dashboardResponse } from "./dashboard.ts";
import { InFlight, keepListening, type ListenerError, Relistener } from "./_listener.ts";
import type { RelistenOptions } from "./_listener.ts";
import { ServiceMetrics } from "./metrics.ts";
import { StreamHub } from "./stream.ts";

export {
  type CommittedEvent,
  DEFAULT_MAX_SNAPSHOT_BYTES,
  DEFAULT_MAX_TYPES,
  DEFAULT_SITE_TYPES,
  type EventCommand,
  RUN_ID_PATTERN,
  type RunStart,
  type RunStartCommand,
  type ServiceMessage,
  type ServiceOptions,
  type SnapshotBodyOptions,
  type StreamName,
  TelemetryService,
  type WriteReport,
} from "./service.ts";
export {
  InvalidRequestError,
  NoActiveRunError,
  RunConflictError,
  RunDirNotAllowedError,
  ShuttingDownError,
  SiteInUseError,
  SnapshotLimitError,
  StorageError,
  TypeLimitError,
  WriteError,
} from "./_errors.ts";
export { DEFAULT_MAX_BODY, isLoopback, toProblem } from "./_http.ts";
export { ListenerError, type RelistenOptions } from "./_listener.ts";
export type { JsonObject, RunRecord } from "./event.ts";
export {
  Histogram,
  type RenderMetricsOptions,
  ServiceMetrics,
  type StreamCounts,
} from "./metrics.ts";
export {
  permissionFlags,
  SERVER_ENV_VARS,
  type SpawnedServer,
  type SpawnOptions,
  spawnServer,
} from "./_spawn.ts";
export type { FsyncMode } from "./_ndjson_writer.ts";
export type { LogFormat } from "./_log.ts";

/** The package version, from `deno.json`. */
export const VERSION: string = denoJson.version;
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
  /**
   * Called once when `POST /shutdown` was accepted, after its response is sent (ignored when
   * `lifecycle` is given: it has its own).
   */
  onShutdown?: () => void;
  /**
   * The server's shutdown state: from its start, requests get 503 and streams end.
   * @default {a new one that calls `onShutdown`}
   */
  lifecycle?: ShutdownLifecycle;
  /** Receives unexpected errors (answered with 500). */
  onError?: (err: unknown) => void;
  /**
   * Receives every 4xx/5xx answer but a 404 on `GET /current/{type}` (CONTRACT 9.4), after the
   * answer is made; the service log writes it at `warn`, rate-limited.
   */
  onRejected?: (rejection: Rejection) => void;
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
}

/** A request answered with 4xx or 5xx, as {@linkcode HandlerOptions.onRejected} receives it. */
export interface Rejection {
  /** The request method. */
  method: string;
  /** The route pattern, such as `/current/{type}`; `other` for an unknown path. */
  route: string;
  /** The status answered. */
  status: number;
  /** The peer's address (`127.0.0.1`, `::1`), or `unknown` outside `Deno.serve`. */
  peer: string;
  /** The answer's `detail`. */
  detail: string;
}

/** A request handler for `Deno.serve`, or for calling directly with a `Request`. */
export type TelemetryHandler = (req: Request, info?: Deno.ServeHandlerInfo) => Promise<Response>;

/**
 * The one shutdown state of a server. It runs until {@linkcode ShutdownLifecycle.begin}; from
 * then on requests are answered 503 and {@linkcode ShutdownLifecycle.signal} has aborted, which
 * ends every open `GET /stream`.
 *
 * @example Usage
 * ```ts
 * import { ShutdownLifecycle } from "@obs-utils/telemetry/server";
 * import assert from "node:assert/strict";
 *
 * const lifecycle = new ShutdownLifecycle();
 * lifecycle.begin();
 * assert.equal(lifecycle.stopping, true);
 * assert.equal(lifecycle.signal.aborted, true);
 * ```
 */
export class ShutdownLifecycle {
  #controller = new AbortController();
  #onRequest: (() => void) | undefined;

  /**
   * Creates a running lifecycle.
   *
   * @param onRequest Called once, after the answer was handed over, when `POST /shutdown` asks
   *   the server to stop.
   */
  constructor(onRequest?: () => void) {
    this.#onRequest = onRequest;
  }

  /** `true` once shutdown has begun. */
  get stopping(): boolean {
    return this.#controller.signal.aborted;
  }

  /** Aborts when shutdown begins. */
  get signal(): AbortSignal {
    return this.#controller.signal;
  }

  /** Begins shutdown: new requests get 503 and open streams end. Safe to call twice. */
  begin(): void {
    this.#controller.abort();
  }

  /** A `POST /shutdown` was accepted: begins shutdown and, on the next turn, tells the owner. */
  request(): void {
    if (this.stopping) return;
    this.begin();
    // After the 202 has been handed to the connection.
    setTimeout(() => this.#onRequest?.(), 0);
  }
}

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
  const { token, maxBody = DEFAULT_MAX_BODY, onError, onRejected } = options;
  const lifecycle = options.lifecycle ?? new ShutdownLifecycle(options.onShutdown);
  const guardHost = isLoopback(options.hostname ?? DEFAULT_HOST);
  const streams = new StreamHub(service, {
    ...(options.keepaliveMs !== undefined ? { keepaliveMs: options.keepaliveMs } : {}),
    ...(options.streamQueueBytes !== undefined ? { maxQueueBytes: options.streamQueueBytes } : {}),
    signal: lifecycle.signal,
  });
  const metrics = new ServiceMetrics(service);
  const router = new Router(apiRoutes(service, { maxBody, lifecycle, streams, metrics }));
  const stopping = () => lifecycle.stopping || service.closing;

  /** The route label of a request (CONTRACT 9.3): its pattern, or `other`. */
  function routeOf(req: Request): string {
    let url: URL;
    try {
      url = new URL(req.url);
    } catch {
      return OTHER_ROUTE;
    }
    const found = router.match(url);
    return found ? routeLabel(found.route) : OTHER_ROUTE;
  }

  async function dispatch(
    req: Request,
    info: Deno.ServeHandlerInfo | undefined,
    seen: { route: string | undefined },
  ): Promise<Response> {
    if (stopping()) throw new ShuttingDownError();
    if (guardHost) guardLoopback(req);
    const url = requestUrl(req);
    if (token !== undefined && url.pathname !== "/health") guardToken(req, token);
    const found = router.match(url);
    if (!found) {
      seen.route = OTHER_ROUTE;
      throw new HttpError(
        404,
        `No endpoint at ${url.pathname}; the API has / (dashboard), /health, /ready, /run, /run/start, /run/stop, /event, /events, /current, /stream, /metrics and /shutdown.`,
      );
    }
    seen.route = routeLabel(found.route);
    const { methods } = found.route;
    const handler = methods[(req.method === "HEAD" ? "GET" : req.method) as "GET" | "POST"];
    if (!handler) {
      const allow = Object.keys(methods).flatMap((m) => m === "GET" ? ["GET", "HEAD"] : [m]);
      throw new HttpError(
        405,
        `${req.method} is not allowed on ${url.pathname}; use ${allow.join(" or ")}.`,
        { allow: allow.join(", ") },
      );
    }
    return await handler({ req, info, url, params: found.params });
  }

  return async function handle(req, info) {
    const seen: { route: string | undefined } = { route: undefined };
    let res: Response;
    try {
      res = await dispatch(req, info, seen);
    } catch (err) {
      res = await answerError(req, err);
    }
    const status = res.status;
    const route = seen.route ?? routeOf(req);
    metrics.countResponse(route, status);
    if (status >= 400 && onRejected) reportRejection(req, info, res, route, status);
    return res;
  };

  async function answerError(req: Request, err: unknown): Promise<Response> {
    await req.body?.cancel().catch(() => {});
    // A body cut off because the server is stopping is not the client's fault.
    if (err instanceof IncompleteBodyError && stopping()) return shuttingDownResponse();
    const mapped = toProblem(err);
    if (mapped) return mapped;
    onError?.(err);
    // The raw message may name paths and internals: it goes to the log, never to the client.
    return problem(500, UNEXPECTED_DETAIL);
  }

  function reportRejection(
    req: Request,
    info: Deno.ServeHandlerInfo | undefined,
    res: Response,
    route: string,
    status: number,
  ): void {
    // A reader polling for a type not seen yet is not a fault (CONTRACT 9.4).
    if (
      status === 404 && route === CURRENT_TYPE_ROUTE &&
      (req.method === "GET" || req.method === "HEAD")
    ) return;
    const peer = info?.remoteAddr;
    try {
      onRejected?.({
        method: req.method,
        route,
        status,
        peer: peer && "hostname" in peer ? peer.hostname : "unknown",
        detail: problemDetail(res) ?? "",
      });
    } catch {
      // A log that cannot be written (stderr closed) must not turn the answer into a failure.
    }
  }
}

/** The route label of a path that is no route (CONTRACT 9.3). */
const OTHER_ROUTE = "other";
/** The label of `GET /current/{type}`, whose 404 is not logged. */
const CURRENT_TYPE_ROUTE = "/current/{type}";
const routeLabels = new WeakMap<Route, string>();

/** A route's pattern as people write it: `/current/:type(.*)` is `/current/{type}`. */
function routeLabel(route: Route): string {
  let label = routeLabels.get(route);
  if (label === undefined) {
    label = route.pattern.pathname.replace(/:(\w+)(\([^)]*\))?/g, "{$1}");
    routeLabels.set(route, label);
  }
  return label;
}

/** What the API routes need besides the service. */
interface RouteDeps {
  maxBody: number;
  lifecycle: ShutdownLifecycle;
  streams: StreamHub;
  metrics: ServiceMetrics;
}

/** The API (CONTRACT 2) as data: one row per path, one handler per method. */
function apiRoutes(service: TelemetryService, deps: RouteDeps): Route[] {
  const { maxBody, lifecycle, streams, metrics } = deps;
  return [
    route("/", { GET: () => dashboardResponse() }),
    route("/health", { GET: () => json(200, '{"ok":true}') }),
    route("/ready", { GET: () => json(200, readyBody(service)) }),
    route("/run", {
      GET: () => {
        const run = service.run;
        if (!run) throw new HttpError(404, "No run is active; start one with POST /run/start.");
        return json(200, JSON.stringify(run));
      },
    }),
    route("/run/start", {
      POST: async ({ req }) => {
        const { value } = await readJsonBody(req, maxBody);
        const { run, created } = await service.startRun(parseRunStart(value));
        return json(created ? 201 : 200, JSON.stringify(run));
      },
    }),
    route("/run/stop", {
      POST: async ({ req }) => {
        await readJsonBody(req, maxBody);
        return json(200, JSON.stringify(await service.stopRun()));
      },
    }),
    route("/event", { POST: ({ req }) => postEvent(service, req, maxBody) }),
    route("/events", { POST: ({ req }) => postEvents(service, req, maxBody) }),
    // Streamed in chunks: a snapshot of any size is answered, and no answer holds the loop long.
    route("/current", { GET: () => jsonStream(service.currentBody()) }),
    route("/current/:type(.*)", { GET: ({ params }) => currentOfType(service, params.type ?? "") }),
    route("/stream", { GET: ({ url }) => streams.response(url) }),
    route("/metrics", { GET: () => metrics.response({ streams }) }),
    route("/shutdown", {
      POST: async ({ req, info }) => {
        const peer = info?.remoteAddr;
        if (peer && "hostname" in peer && !isLoopback(peer.hostname)) {
          throw new HttpError(
            403,
            "Shutdown is only accepted from the machine the server runs on.",
          );
        }
        await readJsonBody(req, maxBody);
        lifecycle.request();
        return json(202, '{"shutting_down":true}');
      },
    }),
  ];
}

function jsonStream(body: ReadableStream<Uint8Array>): Response {
  return new Response(body, {
    status: 200,
    headers: { "content-type": "application/json; charset=utf-8" },
  });
}

function readyBody(service: TelemetryService): string {
  const run = service.run;
  return JSON.stringify({
    ready: true,
    run_active: run !== undefined,
    run_id: run?.run_id ?? null,
    version: VERSION,
  });
}

async function postEvent(
  service: TelemetryService,
  req: Request,
  maxBody: number,
): Promise<Response> {
  const { value } = await readJsonBody(req, maxBody);
  if (value === undefined) {
    throw new HttpError(
      400,
      'The body is empty; send a JSON object such as {"type": "weather", "data": {"wind_mps": 2.1}}.',
    );
  }
  const [event] = await service.submit([parseEvent(value)]);
  return json(200, event!.line);
}

async function postEvents(
  service: TelemetryService,
  req: Request,
  maxBody: number,
): Promise<Response> {
  const { value, ndjson } = await readJsonBody(req, maxBody, true);
  let items: unknown[];
  let lines: number[] | undefined;
  if (ndjson !== undefined) ({ items, lines } = parseNdjsonLines(ndjson));
  else if (value === undefined) items = [];
  else if (Array.isArray(value)) items = value;
  else {
    throw new HttpError(
      400,
      "A batch must be a JSON array of events, or NDJSON (one event per line) sent as application/x-ndjson.",
    );
  }
  const events = await service.submit(parseEvents(items, true, lines));
  return json(
    200,
    `{"accepted":${events.length},"events":[${events.map((e) => e.line).join(",")}]}`,
  );
}

function currentOfType(service: TelemetryService, rawType: string): Response {
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
  /** Receives every 4xx/5xx answer worth a log line (see {@linkcode HandlerOptions.onRejected}). */
  onRejected?: (rejection: Rejection) => void;
  /**
   * Longest wait, on shutdown, for in-flight requests before the files are closed anyway.
   * @default {5000}
   */
  shutdownGraceMs?: number;
  /**
   * How the server listens again when the listener ends by itself (a failed `accept`, such as
   * EMFILE): at most `attempts` tries, waiting from `firstDelayMs` doubling up to `maxDelayMs`
   * between them. An error that is not transient (the port taken by another process, a missing
   * permission) gets at most 5 tries.
   * @default {{ attempts: 40, firstDelayMs: 50, maxDelayMs: 2000 }}
   */
  relisten?: RelistenOptions;
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
  /**
   * Resolves when the server has shut down as asked ({@linkcode ServerHandle.shutdown},
   * `POST /shutdown`); rejects when the shutdown failed or the server ended without being asked
   * (a {@linkcode ListenerError}).
   */
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
  checkExposure(hostname, options);
  const service = await TelemetryService.open(options);
  let stopping: Promise<void> | undefined;
  const lifecycle = new ShutdownLifecycle(() => void shutdown());
  const handler = createHandler(service, {
    lifecycle,
    hostname,
    token: options.token,
    maxBody: options.maxBody ?? DEFAULT_MAX_BODY,
    ...(options.onError ? { onError: options.onError } : {}),
    ...(options.onRejected ? { onRejected: options.onRejected } : {}),
  });
  // Requests being answered; shutdown waits for them before it closes the files.
  const inFlight = new InFlight();
  const counted = inFlight.wrap(handler);
  const listen = (at: number) => Deno.serve({ hostname, port: at, onListen: () => {} }, counted);
  let server: Deno.HttpServer<Deno.NetAddr>;
  try {
    server = listen(port);
  } catch (err) {
    await service.close();
    throw err;
  }
  const graceMs = options.shutdownGraceMs ?? DEFAULT_SHUTDOWN_GRACE_MS;
  const warn = options.onWarning ?? (() => {});
  // Settles when shutdown() has closed the service, however the shutdown was started.
  const done = Promise.withResolvers<void>();
  // Set when the server ends without being asked: `finished` then rejects with it.
  let failure: ListenerError | undefined;
  function shutdown(): Promise<void> {
    if (stopping) return stopping;
    stopping = (async () => {
      const deadline = Date.now() + graceMs;
      // Open GET /stream responses never finish by themselves: beginning ends them first.
      lifecycle.begin();
      // New requests are answered 503 from now on while the listener stays open, so whoever
      // waits for the port to close (`obs-utils telemetry stop`) knows the lock is free.
      await raceDeadline(inFlight.drained(), deadline);
      try {
        await service.close();
      } finally {
        // A peer that stopped reading holds its connection (and so server.shutdown()) forever;
        // past the grace period the caller may exit anyway: the files are already closed.
        await raceDeadline(server.shutdown(), deadline);
      }
    })();
    stopping.then(() => failure ? done.reject(failure) : done.resolve(), done.reject);
    return stopping;
  }
  const port0 = server.addr.port;
  const relisten = new Relistener(options.relisten ?? {}, warn, `${hostForUrl(hostname)}:${port0}`);
  keepListening(server, {
    relisten,
    stopped: () => stopping !== undefined,
    listen: () => listen(port0),
    replaced: (next) => void (server = next),
    failed: () => {
      failure = relisten.failure();
      return shutdown();
    },
  });
  // Callers that never await `finished` must not crash on a failed close; those who do see it.
  done.promise.catch(() => {});
  const addr = server.addr;
  // Keep the name the operator chose; "localhost" reads better than the address it resolved to.
  const shown = hostname === "localhost" ? hostname : addr.hostname;
  // A second server refused this directory names this one's address (CONTRACT 9.5).
  await recordLockHolder(service.siteDir, `http://${hostForUrl(shown)}:${addr.port}`).catch(
    (err) => warn(`Could not record the address in the site lock file: ${errorText(err)}`),
  );
  return {
    addr,
    url: `http://${hostForUrl(shown)}:${addr.port}`,
    service,
    shutdown,
    finished: done.promise,
    [Symbol.asyncDispose]: shutdown,
  };
}

/** Refuses to expose the service to the network without a token, unless told to (CONTRACT 2.8). */
function checkExposure(hostname: string, options: ServerOptions): void {
  if (!isLoopback(hostname) && !options.token && !options.insecure) {
    throw new ConfigError(
      `Refusing to listen on ${hostname} without a token: anyone on the network could write telemetry. Set --token (or OBS_TELEMETRY_TOKEN), or pass --insecure.`,
    );
  }
}
