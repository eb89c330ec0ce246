/**
 * {@linkcode createRouteHandler}: the request handler of a service (docs/http-api.md). Every request
 * passes the guards, is dispatched to its route, and has any error it throws answered as
 * problem+json; each answer is counted for `/metrics`, and a refusal is reported to the log.
 *
 * @module
 */

import type { TelemetryService } from "../core/service.ts";
import { ShuttingDownError } from "../core/errors.ts";
import {
  answerRefusals,
  BodyTimeoutError,
  HttpError,
  IncompleteBodyError,
  problem,
  problemDetail,
  shuttingDownResponse,
  toProblem,
  UNEXPECTED_DETAIL,
} from "./problems.ts";
import {
  type AccessPolicy,
  guardAccess,
  guardLoopback,
  guardOrigin,
  isLoopback,
  parseRequestUrl,
  peerHost,
  requestUrl,
} from "./guards.ts";
import {
  BodyDeadlines,
  DEFAULT_BODY_TIMEOUT_MS,
  DEFAULT_MAX_BODY,
  drainSmallBody,
} from "./body.ts";
import {
  errorAnswers,
  type Route,
  type RouteContext,
  type RouteHandler,
  routeLabel,
  Router,
} from "./router.ts";
import { DEFAULT_HOST } from "../wire/address.ts";
import { ServiceMetrics } from "./metrics.ts";
import type { NotificationCounts } from "./metrics.ts";
import { StreamHub } from "./stream_hub.ts";
import { apiRoutes } from "./routes.ts";
import { DEFAULT_MAX_HISTORY } from "./history.ts";
import type { TypesRegistry } from "../core/types_registry.ts";
import { DiskWatch } from "../store/disk_watch.ts";
import { ShutdownLifecycle } from "./shutdown.ts";
import type { Rejection, TelemetryHandler } from "./types.ts";
import { closeAfterAnswer } from "./conn_guard.ts";

/** Options of `createHandler()` (`server/handler.ts`) and {@linkcode createRouteHandler}. */
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
   * With a token: `GET`/`HEAD` on the read routes ({@linkcode PUBLIC_READ_PATHS}) need none;
   * every `POST`, `PUT` and `DELETE` still does (docs/operations.md).
   * @default {false}
   */
  publicRead?: boolean;
  /**
   * With a token: a request from a loopback peer whose `Host` is a loopback name (and whose
   * `Origin`, if any, is loopback) needs none; every other peer still does (docs/operations.md).
   * @default {false}
   */
  trustLoopback?: boolean;
  /**
   * `GET /current` answers `{"current": {...}}`, the shape the older Python client reads;
   * `?wrap=false` and `?wrap=true` choose per request in either mode (docs/operations.md).
   * @default {false}
   */
  wrapCurrent?: boolean;
  /**
   * Largest accepted request body in bytes.
   * @default {1048576}
   */
  maxBody?: number;
  /**
   * `GET /history` requests served at once (`--max-history`); the next wait up to 10 s for
   * their turn, then get 503 with `Retry-After` (docs/history.md).
   * @default {2}
   */
  maxHistory?: number;
  /**
   * Longest time, from a request's head, for its body to arrive in full; a slower one is
   * answered 408 and its connection closed (docs/operations.md).
   * @default {10000}
   */
  bodyTimeoutMs?: number;
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
   * Receives every 4xx/5xx answer but a 404 on `GET /current/{type}` (docs/operations.md), after the
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
  /**
   * The types registry (`--types`) that `GET /types`, `GET /check` and `/metrics` judge by.
   * @default {an empty registry}
   */
  types?: TypesRegistry;
  /**
   * Free-space readings of the site directory for `GET /check` and `/metrics`.
   * @default {a watch with the default `--min-free` of 1 GiB that reads on each request}
   */
  disk?: DiskWatch;
  /**
   * The safety notifications' counters, for `telemetry_notifications_total` in `/metrics`
   * (docs/safety.md#notifications); `startServer` passes its notifier's.
   * @default {no such family}
   */
  notifications?: () => NotificationCounts;
}

/**
 * Builds the request handler of the API (docs/http-api.md) with the routes of the features served
 * beside it (`pages`, such as the dashboard's `/`). It checks, in this order: shutdown (503), Host
 * and Origin (403), the bearer token (401), the route (404, 405), then the body (413, 415, 400).
 * The public face is `createHandler()` in `server/handler.ts`, which adds the dashboard.
 *
 * @param service The service to serve.
 * @param options Security and limits.
 * @param pages Routes served before the API's own, behind the same guards.
 * @returns A handler for `Deno.serve`, also callable with a plain `Request` in tests.
 *
 * @example Usage
 * ```ts ignore
 * import { createRouteHandler } from "./handler.ts";
 * import { TelemetryService } from "../core/service.ts";
 *
 * await using service = await TelemetryService.open({ siteDir: "./telemetry" });
 * const handler = createRouteHandler(service, {}, []);
 * const res = await handler(new Request("http://localhost/health"));
 * console.log(res.status); // 200
 * ```
 */
export function createRouteHandler(
  service: TelemetryService,
  options: HandlerOptions,
  pages: readonly Route[],
): TelemetryHandler {
  const dispatcher = new Dispatcher(service, options, pages);
  return (req, info) => dispatcher.dispatch(req, info);
}

/** The label of a path that is no route (docs/http-api.md). */
const OTHER_ROUTE = "other";
/** The label of `GET /check`, whose 503 is not logged. */
const CHECK_ROUTE = "/check";
/** The label of `GET /history`, whose answers give way to the other requests. */
const HISTORY_ROUTE = "/history";
/** The label of `GET /current/{type}`, whose 404 is not logged. */
const CURRENT_TYPE_ROUTE = "/current/{type}";

/**
 * A request that passed the guards: its route label, and either the handler with what it gets
 * or, for a path or method without one, the 404 or 405 to answer.
 */
type Admitted =
  | { label: string; handler: RouteHandler; ctx: RouteContext; refused?: undefined }
  | { label: string; refused: HttpError };

/** One handler's guards, route table and error answers; {@linkcode createRouteHandler} wraps it. */
class Dispatcher {
  #service: TelemetryService;
  #shutdown: ShutdownLifecycle;
  #access: AccessPolicy;
  #metrics: ServiceMetrics;
  #router: Router;
  /** The routes whose error answers have their own shape, by label. */
  #errorAnswers: Map<string, (res: Response) => Response>;
  #onError: ((err: unknown) => void) | undefined;
  #onRejected: ((rejection: Rejection) => void) | undefined;
  /** Requests other than `GET /history` being answered now. */
  #answering = 0;

  constructor(service: TelemetryService, options: HandlerOptions, pages: readonly Route[]) {
    this.#service = service;
    this.#onError = options.onError;
    this.#onRejected = options.onRejected;
    const shutdown = this.#shutdown = options.lifecycle ??
      new ShutdownLifecycle(options.onShutdown);
    this.#access = {
      loopbackBind: isLoopback(options.hostname ?? DEFAULT_HOST),
      token: options.token,
      publicRead: options.publicRead ?? false,
      trustLoopback: options.trustLoopback ?? false,
    };
    const streams = new StreamHub(service, {
      ...(options.keepaliveMs !== undefined ? { keepaliveMs: options.keepaliveMs } : {}),
      ...(options.streamQueueBytes !== undefined
        ? { maxQueueBytes: options.streamQueueBytes }
        : {}),
      signal: shutdown.signal,
    });
    const types = options.types ?? service.types;
    const disk = options.disk ?? new DiskWatch(service.siteDir);
    const metrics = this.#metrics = new ServiceMetrics(service, {
      types,
      ...(options.notifications ? { notifications: options.notifications } : {}),
    });
    const maxBody = options.maxBody ?? DEFAULT_MAX_BODY;
    const maxHistory = options.maxHistory ?? DEFAULT_MAX_HISTORY;
    const othersBusy = () => this.#answering > 0;
    const wrapCurrent = options.wrapCurrent ?? false;
    const bodies = new BodyDeadlines(options.bodyTimeoutMs ?? DEFAULT_BODY_TIMEOUT_MS);
    // The deadlines' timer outlives a read (see BodyDeadlines): not the server.
    shutdown.signal.addEventListener("abort", () => bodies.close(), { once: true });
    const routes = apiRoutes(service, {
      maxBody,
      maxHistory,
      othersBusy,
      bodies,
      shutdown,
      streams,
      metrics,
      types,
      disk,
      wrapCurrent,
      pages,
    });
    this.#router = new Router(routes);
    this.#errorAnswers = errorAnswers(routes);
  }

  /**
   * Answers a request: guards, route, error answer; then counts and reports the answer. The
   * requests being answered other than `GET /history` are counted while their handler runs:
   * while any is, the history answers give the event loop to it first (docs/history.md). The
   * count is kept here rather than in a function of its own: an async frame per request is
   * a promise and a context more for every event.
   */
  async dispatch(req: Request, info: Deno.ServeHandlerInfo | undefined): Promise<Response> {
    let route: string | undefined;
    let res: Response;
    try {
      const admitted = this.#admit(req, info);
      route = admitted.label;
      if (admitted.refused) throw admitted.refused;
      if (route === HISTORY_ROUTE) res = await admitted.handler(admitted.ctx);
      else {
        this.#answering++;
        try {
          res = await admitted.handler(admitted.ctx);
        } finally {
          this.#answering--;
        }
      }
    } catch (err) {
      await drainSmallBody(req);
      res = this.#handleError(err);
    }
    route ??= this.#routeOf(req);
    if (res.status >= 400) res = this.#errorAnswers.get(route)?.(res) ?? res;
    const status = res.status;
    this.#metrics.countResponse(route, status);
    if (status >= 400 && this.#onRejected) this.#report(req, info, res, route, status);
    return req.method === "HEAD" ? headOnly(res) : res;
  }

  #stopping(): boolean {
    return this.#shutdown.stopping || this.#service.closing;
  }

  /**
   * The guards, in this order: shutdown (503), Host and Origin (403), the token (401). Throws
   * the refusal; returns the request's URL, parsed once.
   */
  #guard(req: Request, info: Deno.ServeHandlerInfo | undefined): URL {
    if (this.#stopping()) throw new ShuttingDownError();
    const access = this.#access;
    const parsed = parseRequestUrl(req);
    if (access.loopbackBind) guardLoopback(req, parsed);
    const url = parsed ?? requestUrl(req); // requestUrl throws the 400 naming the Host
    if (!access.loopbackBind) guardOrigin(req, url);
    if (access.token !== undefined) guardAccess(req, url, peerHost(info), access);
    return url;
  }

  /**
   * Checks a request and finds what answers it. A path or method without a handler comes back
   * as its 404 or 405, so that the answer is counted under its route label. Synchronous.
   */
  #admit(req: Request, info: Deno.ServeHandlerInfo | undefined): Admitted {
    const url = this.#guard(req, info);
    const found = this.#router.match(url);
    if (!found) return { label: OTHER_ROUTE, refused: notFound(url) };
    const label = routeLabel(found.route);
    const { methods } = found.route;
    const handler =
      methods[(req.method === "HEAD" ? "GET" : req.method) as "GET" | "POST" | "PUT" | "DELETE"];
    if (!handler) return { label, refused: methodNotAllowed(req, url, found.route) };
    return { label, handler, ctx: { req, info, url, params: found.params } };
  }

  /** The route label of a request that was refused before its route was found. */
  #routeOf(req: Request): string {
    let url: URL;
    try {
      url = new URL(req.url);
    } catch {
      return OTHER_ROUTE;
    }
    const found = this.#router.match(url);
    return found ? routeLabel(found.route) : OTHER_ROUTE;
  }

  #handleError(err: unknown): Response {
    // A body cut off because the server is stopping is not the client's fault.
    if (err instanceof IncompleteBodyError && this.#stopping()) return shuttingDownResponse();
    const mapped = toProblem(err);
    // The rest of a body that timed out is not waited for (docs/operations.md).
    if (mapped) return err instanceof BodyTimeoutError ? closeAfterAnswer(mapped) : mapped;
    this.#onError?.(err);
    // The raw message may name paths and internals: it goes to the log, never to the client.
    return problem(500, UNEXPECTED_DETAIL);
  }

  #report(
    req: Request,
    info: Deno.ServeHandlerInfo | undefined,
    res: Response,
    route: string,
    status: number,
  ): void {
    const read = req.method === "GET" || req.method === "HEAD";
    // A reader polling for a type not seen yet is not a fault (docs/operations.md), and a failing
    // /check is the answer a monitor asked for (docs/types.md), polled every few seconds: its
    // reasons are in the body, and a warn line per poll would bury the real rejections.
    if (read && status === 404 && route === CURRENT_TYPE_ROUTE) return;
    if (read && status === 503 && route === CHECK_ROUTE) return;
    // The 503s of a shutdown that was asked for are the service's own state, not a client's
    // fault: `stop` polls until the port closes, and a clean stop logs no warning
    // (docs/operations.md, "Logs").
    if (status === 503 && this.#stopping()) return;
    try {
      const peer = peerHost(info) ?? "unknown";
      // An answer that refused parts of its request (the lines of a line-protocol write) is
      // logged one line per part refused.
      const parts = answerRefusals(res) ?? [problemDetail(res) ?? ""];
      for (const detail of parts) {
        this.#onRejected?.({ method: req.method, route, status, peer, detail });
      }
    } catch {
      // A log that cannot be written (stderr closed) must not turn the answer into a failure.
    }
  }
}

function notFound(url: URL): HttpError {
  return new HttpError(
    404,
    `No endpoint at ${url.pathname}; the API has / (dashboard), /health, /ready, /run, /run/start, /run/stop, /event, /events, /write, /api/v2/write, /ping, /current, /types, /check, /safety, /safety/indi, /safety/events, /safety/waivers, /stream, /history, /metrics and /shutdown.`,
  );
}

function methodNotAllowed(req: Request, url: URL, route: Route): HttpError {
  const allow = Object.keys(route.methods).flatMap((m) => m === "GET" ? ["GET", "HEAD"] : [m]);
  return new HttpError(
    405,
    `${req.method} is not allowed on ${url.pathname}; use ${allow.join(" or ")}.`,
    { allow: allow.join(", ") },
  );
}

/**
 * The answer to a HEAD: the GET's status and headers without its body. Over HTTP/2 (TLS) a
 * streamed body on a HEAD answer is a protocol error that resets the stream.
 */
function headOnly(res: Response): Response {
  if (res.body === null) return res;
  void res.body.cancel().catch(() => {});
  return new Response(null, {
    status: res.status,
    statusText: res.statusText,
    headers: res.headers,
  });
}
