/**
 * The implementation behind the `server.ts` entry point; its module documentation is there.
 *
 * @module
 */

import denoJson from "../deno.json" with { type: "json" };
import { type ServiceOptions, TelemetryService } from "../core/service.ts";
import { errorText, ShuttingDownError } from "../core/errors.ts";
import { recordLockHolder } from "../store/lock.ts";
import {
  type AccessPolicy,
  DEFAULT_MAX_BODY,
  guardAccess,
  guardLoopback,
  guardOrigin,
  HttpError,
  IncompleteBodyError,
  isLoopback,
  parseRequestUrl,
  problem,
  problemDetail,
  requestUrl,
  shuttingDownResponse,
  toProblem,
  UNEXPECTED_DETAIL,
} from "./problems.ts";
import { type Route, type RouteContext, type RouteHandler, Router } from "./router.ts";
import { DEFAULT_HOST, DEFAULT_PORT, hostForUrl } from "../wire/address.ts";
import { raceDeadline } from "../wire/async.ts";
import { InFlight, keepListening, type ListenerError, Relistener } from "./listener.ts";
import type { RelistenOptions } from "./listener.ts";
import { ServiceMetrics } from "./metrics.ts";
import { StreamHub } from "./stream_hub.ts";
import { apiRoutes } from "./routes.ts";
import { loadTypes, NO_TYPES, type TypesRegistry } from "../core/types_registry.ts";
import { DiskWatch } from "../store/disk_watch.ts";
import { DEFAULT_MIN_FREE_BYTES } from "../store/disk.ts";

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
} from "../core/service.ts";
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
} from "../core/errors.ts";
export { DEFAULT_MAX_BODY, isLoopback, PUBLIC_READ_PATHS, toProblem } from "./problems.ts";
export { ListenerError, type RelistenOptions } from "./listener.ts";
export type { JsonObject, RunRecord } from "../wire/event.ts";
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
} from "../cli/spawn.ts";
export type { FsyncMode } from "../store/writer.ts";
export {
  type FieldSpec,
  type JsonValue,
  loadTypes,
  parseTypes,
  TypesFileError,
  type TypeSpec,
  type TypesRegistry,
} from "../core/types_registry.ts";
export {
  type CheckResult,
  TYPE_STATES,
  type TypeState,
  type TypeStatus,
} from "../core/freshness.ts";
export { DiskWatch, type DiskWatchOptions } from "../store/disk_watch.ts";
export { DEFAULT_MIN_FREE_BYTES } from "../store/disk.ts";
export type { LogFormat } from "../core/log.ts";

/** The package version, from `deno.json`. */
export const VERSION: string = denoJson.version;
/** How long a graceful shutdown waits for in-flight requests, in milliseconds. */
export const DEFAULT_SHUTDOWN_GRACE_MS = 5000;
export { DEFAULT_HOST, DEFAULT_PORT } from "../wire/address.ts";

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
   * With a token: `GET`/`HEAD` on the read routes ({@linkcode PUBLIC_READ_PATHS}) need none;
   * every `POST` and `DELETE` still does (docs/operations.md).
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
 * Builds the request handler for a service (docs/http-api.md). It checks, in this order: shutdown
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
  const access: AccessPolicy = {
    loopbackBind: guardHost,
    token,
    publicRead: options.publicRead ?? false,
    trustLoopback: options.trustLoopback ?? false,
  };
  const wrapCurrent = options.wrapCurrent ?? false;
  const streams = new StreamHub(service, {
    ...(options.keepaliveMs !== undefined ? { keepaliveMs: options.keepaliveMs } : {}),
    ...(options.streamQueueBytes !== undefined ? { maxQueueBytes: options.streamQueueBytes } : {}),
    signal: lifecycle.signal,
  });
  const types = options.types ?? NO_TYPES;
  const disk = options.disk ?? new DiskWatch(service.siteDir);
  const metrics = new ServiceMetrics(service, { types });
  const router = new Router(
    apiRoutes(service, { maxBody, lifecycle, streams, metrics, types, disk, wrapCurrent }),
  );
  const stopping = () => lifecycle.stopping || service.closing;

  /** The route label of a request (docs/http-api.md): its pattern, or `other`. */
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

  /**
   * Checks a request (guards) and finds what answers it. Throws a guard's refusal; a path or
   * method without a handler comes back as a handler that throws its 404 or 405, so that the
   * answer is counted under its route label. Synchronous, and the URL is parsed once.
   */
  function admit(req: Request, info: Deno.ServeHandlerInfo | undefined): Admitted {
    if (stopping()) throw new ShuttingDownError();
    const parsed = parseRequestUrl(req);
    if (guardHost) guardLoopback(req, parsed);
    const url = parsed ?? requestUrl(req); // requestUrl throws the 400 naming the Host
    if (!guardHost) guardOrigin(req, url);
    if (access.token !== undefined) guardAccess(req, url, peerHost(info), access);
    const found = router.match(url);
    if (!found) {
      return refusal(
        OTHER_ROUTE,
        new HttpError(
          404,
          `No endpoint at ${url.pathname}; the API has / (dashboard), /health, /ready, /run, /run/start, /run/stop, /event, /events, /current, /types, /check, /stream, /metrics and /shutdown.`,
        ),
      );
    }
    const label = routeLabel(found.route);
    const { methods } = found.route;
    const handler =
      methods[(req.method === "HEAD" ? "GET" : req.method) as "GET" | "POST" | "DELETE"];
    if (!handler) {
      const allow = Object.keys(methods).flatMap((m) => m === "GET" ? ["GET", "HEAD"] : [m]);
      return refusal(
        label,
        new HttpError(
          405,
          `${req.method} is not allowed on ${url.pathname}; use ${allow.join(" or ")}.`,
          { allow: allow.join(", ") },
        ),
      );
    }
    return { label, handler, ctx: { req, info, url, params: found.params } };
  }

  return async function handle(req, info) {
    let route: string | undefined;
    let res: Response;
    try {
      const admitted = admit(req, info);
      route = admitted.label;
      if (admitted.refused) throw admitted.refused;
      res = await admitted.handler(admitted.ctx);
    } catch (err) {
      await drainSmallBody(req);
      res = answerError(err);
    }
    const status = res.status;
    route ??= routeOf(req);
    metrics.countResponse(route, status);
    if (status >= 400 && onRejected) reportRejection(req, info, res, route, status);
    return req.method === "HEAD" ? headOnly(res) : res;
  };

  function answerError(err: unknown): Response {
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
    const read = req.method === "GET" || req.method === "HEAD";
    // A reader polling for a type not seen yet is not a fault (docs/operations.md), and a failing
    // /check is the answer a monitor asked for (docs/types.md), polled every few seconds: its
    // reasons are in the body, and a warn line per poll would bury the real rejections.
    if (read && status === 404 && route === CURRENT_TYPE_ROUTE) return;
    if (read && status === 503 && route === CHECK_ROUTE) return;
    try {
      onRejected?.({
        method: req.method,
        route,
        status,
        peer: peerHost(info) ?? "unknown",
        detail: problemDetail(res) ?? "",
      });
    } catch {
      // A log that cannot be written (stderr closed) must not turn the answer into a failure.
    }
  }
}

/**
 * A request that passed the guards: its route label, and either the handler with what it gets
 * or, for a path or method without one, the 404 or 405 to answer.
 */
type Admitted =
  | { label: string; handler: RouteHandler; ctx: RouteContext; refused?: undefined }
  | { label: string; refused: HttpError };

function refusal(label: string, refused: HttpError): Admitted {
  return { label, refused };
}

/** The peer's address, `undefined` when unknown (a direct call in tests, a Unix socket). */
function peerHost(info: Deno.ServeHandlerInfo | undefined): string | undefined {
  const peer = info?.remoteAddr;
  return peer && "hostname" in peer ? peer.hostname : undefined;
}

/** The route label of a path that is no route (docs/http-api.md). */
const OTHER_ROUTE = "other";
/** The most of an unread body that is read (and dropped) before a refusal is answered. */
const DRAIN_BYTES = 64 * 1024;
/** The longest a refusal waits for that body. */
const DRAIN_MS = 1000;

/**
 * Reads and drops the rest of a small request body before a refusal (401, 403, 400...) is sent.
 * Over HTTP/2 (TLS) an answer sent while the client is still sending makes Deno reset the
 * stream, and the client sees a framing error instead of the 401; a cancelled body does the
 * same. A body declared larger than 64 KiB, or slower than a second, is left alone (HTTP/1.1
 * then closes the connection after the answer).
 */
async function drainSmallBody(req: Request): Promise<void> {
  if (req.body === null || req.bodyUsed) return;
  const declared = Number(req.headers.get("content-length") ?? NaN);
  if (Number.isFinite(declared) && declared > DRAIN_BYTES) return;
  let reader: ReadableStreamDefaultReader<Uint8Array>;
  try {
    reader = req.body.getReader();
  } catch {
    return; // locked: a route is reading it
  }
  let timer: ReturnType<typeof setTimeout> | undefined;
  const timeout = new Promise<"timeout">((r) => (timer = setTimeout(() => r("timeout"), DRAIN_MS)));
  try {
    for (let read = 0; read <= DRAIN_BYTES;) {
      const next = await Promise.race([reader.read(), timeout]);
      if (next === "timeout" || next.done) return;
      read += next.value.byteLength;
    }
  } catch {
    // the client went away: nothing to answer
  } finally {
    clearTimeout(timer);
    reader.releaseLock();
  }
}

/** The label of `GET /check`, whose 503 is not logged. */
const CHECK_ROUTE = "/check";
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
  /** See {@linkcode HandlerOptions.publicRead} (`--public-read`). */
  publicRead?: boolean;
  /** See {@linkcode HandlerOptions.trustLoopback} (`--trust-loopback`). */
  trustLoopback?: boolean;
  /** See {@linkcode HandlerOptions.wrapCurrent} (`--wrap-current`). */
  wrapCurrent?: boolean;
  /**
   * PEM certificate (chain) file: with {@linkcode ServerOptions.tlsKey}, the server speaks HTTPS
   * only (`--tls-cert`). Read once at start.
   */
  tlsCert?: string;
  /** PEM private key file of {@linkcode ServerOptions.tlsCert} (`--tls-key`). */
  tlsKey?: string;
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
  /** The types registry; when absent, `typesFile` is read, else the registry is empty. */
  types?: TypesRegistry;
  /** A types file (`--types`), read and checked before the site directory is opened. */
  typesFile?: string;
  /**
   * Below this many free bytes on the site directory's file system, `GET /check` fails and a
   * warning is logged at most once an hour (`--min-free`).
   * @default {1073741824}
   */
  minFreeBytes?: number;
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
   * Graceful shutdown (docs/storage.md): new requests get 503, in-flight ones finish, files are
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

/**
 * Raised by {@linkcode startServer} for a configuration that must not run.
 *
 * @example Usage
 * ```ts ignore
 * import { ConfigError, startServer } from "@obs-utils/telemetry/server";
 * // A non-loopback address without a token is refused unless `insecure` is set.
 * await startServer({ siteDir: "./telemetry", hostname: "0.0.0.0" }).catch((err) => {
 *   if (err instanceof ConfigError) console.error(err.message);
 * });
 * ```
 */
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
  const types = options.types ??
    (options.typesFile !== undefined ? await loadTypes(options.typesFile) : NO_TYPES);
  const tls = await readTls(options);
  for (
    const [on, flag] of [[options.publicRead, "--public-read"], [
      options.trustLoopback,
      "--trust-loopback",
    ]] as const
  ) {
    if (on && !options.token) {
      options.onWarning?.(
        `${flag} has no effect without --token: every request is already let in; set --token (or OBS_TELEMETRY_TOKEN) to require it for the rest.`,
      );
    }
  }
  const service = await TelemetryService.open(options);
  const disk = new DiskWatch(service.siteDir, options.minFreeBytes ?? DEFAULT_MIN_FREE_BYTES, {
    warn: options.onWarning ?? (() => {}),
  });
  let stopping: Promise<void> | undefined;
  const lifecycle = new ShutdownLifecycle(() => void shutdown());
  const handler = createHandler(service, {
    lifecycle,
    hostname,
    token: options.token,
    publicRead: options.publicRead ?? false,
    trustLoopback: options.trustLoopback ?? false,
    wrapCurrent: options.wrapCurrent ?? false,
    maxBody: options.maxBody ?? DEFAULT_MAX_BODY,
    ...(options.onError ? { onError: options.onError } : {}),
    types,
    disk,
    ...(options.onRejected ? { onRejected: options.onRejected } : {}),
  });
  // Requests being answered; shutdown waits for them before it closes the files.
  const inFlight = new InFlight();
  const counted = inFlight.wrap(handler);
  const listen = (at: number) =>
    Deno.serve({ hostname, port: at, onListen: () => {}, ...(tls ?? {}) }, counted);
  let server: Deno.HttpServer<Deno.NetAddr>;
  try {
    server = listen(port);
  } catch (err) {
    await service.close();
    // Deno checks the pair only when it listens; say which flag is wrong, not rustls' word.
    if (
      tls && /KeyMismatch|keys may not be consistent|private key|certificate/i.test(String(err))
    ) {
      throw new ConfigError(
        `--tls-key ${options.tlsKey} does not fit --tls-cert ${options.tlsCert} (${
          (err as Error).message
        }); give the private key the certificate was made with.`,
      );
    }
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
      await disk.stop();
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
  disk.start();
  const addr = server.addr;
  // Keep the name the operator chose; "localhost" reads better than the address it resolved to.
  const shown = hostname === "localhost" ? hostname : addr.hostname;
  // A second server refused this directory names this one's address (docs/cli.md).
  await recordLockHolder(service.siteDir, `http://${hostForUrl(shown)}:${addr.port}`).catch(
    (err) => warn(`Could not record the address in the site lock file: ${errorText(err)}`),
  );
  return {
    addr,
    url: `${tls ? "https" : "http"}://${hostForUrl(shown)}:${addr.port}`,
    service,
    shutdown,
    finished: done.promise,
    [Symbol.asyncDispose]: shutdown,
  };
}

/**
 * Reads the certificate and key of `tlsCert`/`tlsKey`, or `undefined` for plain HTTP.
 *
 * @throws {ConfigError} If only one is given, or a file cannot be read or is not PEM.
 */
async function readTls(options: ServerOptions): Promise<{ cert: string; key: string } | undefined> {
  const { tlsCert, tlsKey } = options;
  if (tlsCert === undefined && tlsKey === undefined) return undefined;
  if (tlsCert === undefined || tlsKey === undefined) {
    throw new ConfigError(
      `HTTPS needs both --tls-cert and --tls-key; only ${
        tlsCert === undefined ? "--tls-key" : "--tls-cert"
      } was given.`,
    );
  }
  const read = async (file: string, flag: string, marker: RegExp) => {
    let text: string;
    try {
      text = await Deno.readTextFile(file);
    } catch (err) {
      if (err instanceof Deno.errors.NotCapable) throw err;
      throw new ConfigError(
        `Cannot read ${flag} ${file}: ${
          (err as Error).message.replace(/ \(os error \d+\).*$/, "")
        }; give the path of a readable PEM file.`,
      );
    }
    if (!marker.test(text)) {
      throw new ConfigError(
        `${flag} ${file} is not a PEM ${
          flag === "--tls-cert" ? "certificate" : "private key"
        } (no "-----BEGIN" block); give the PEM file, not DER.`,
      );
    }
    return text;
  };
  return {
    cert: await read(tlsCert, "--tls-cert", /-----BEGIN CERTIFICATE-----/),
    key: await read(tlsKey, "--tls-key", /-----BEGIN [A-Z ]*PRIVATE KEY-----/),
  };
}

/** Refuses to expose the service to the network without a token, unless told to (docs/http-api.md). */
function checkExposure(hostname: string, options: ServerOptions): void {
  if (!isLoopback(hostname) && !options.token && !options.insecure) {
    throw new ConfigError(
      `Refusing to listen on ${hostname} without a token: anyone on the network could write telemetry. Set --token (or OBS_TELEMETRY_TOKEN), or pass --insecure.`,
    );
  }
}
