/**
 * {@linkcode startServer}: opens a site directory and serves it over HTTP(S) with `Deno.serve`,
 * listening again when the listener fails, until a graceful shutdown (docs/operations.md,
 * docs/storage.md).
 *
 * @module
 */

import { TelemetryService } from "../core/service.ts";
import { ConfigError, errorText } from "../core/errors.ts";
import { recordLockHolder } from "../store/lock.ts";
import { DEFAULT_HOST, DEFAULT_PORT, hostForUrl } from "../wire/address.ts";
import { raceDeadline } from "../wire/async.ts";
import { InFlight, keepListening, type ListenerError, Relistener } from "../http/listener.ts";
import { ConnectionGuard, ConnectionPool, INTERNAL_HOST } from "../http/conn_guard.ts";
import {
  loadTypes,
  staleLessCriticalWarnings,
  type TypesRegistry,
} from "../core/types_registry.ts";
import { DiskWatch } from "../store/disk_watch.ts";
import type { HandlerOptions } from "../http/handler.ts";
import { createHandler } from "./handler.ts";
import { isLoopback } from "../http/guards.ts";
import { ShutdownLifecycle } from "../http/shutdown.ts";
import { checkReceivers, NOTIFY_DRAIN_MS, startNotifications } from "../notify/notifications.ts";
import { type AlpacaHandle, startAlpaca } from "../alpaca/listener.ts";
import { serviceSource } from "../alpaca/source.ts";
import { DEFAULT_ALPACA_DISCOVERY_PORT } from "../alpaca/discovery.ts";
import { readSiteIdentity } from "../store/site_identity.ts";
import {
  checkExposure,
  listenFailure,
  readTls,
  type ServerOptions,
  warnIneffective,
} from "./config.ts";

/**
 * How long a graceful shutdown waits for in-flight requests, in milliseconds.
 *
 * @example Usage
 * ```ts
 * import { DEFAULT_SHUTDOWN_GRACE_MS } from "./serve.ts";
 * import assert from "node:assert/strict";
 *
 * assert.equal(DEFAULT_SHUTDOWN_GRACE_MS, 5000);
 * ```
 */
export const DEFAULT_SHUTDOWN_GRACE_MS = 5000;

/** A running server from {@linkcode startServer}. */
export interface ServerHandle extends AsyncDisposable {
  /** The bound address; with `port: 0`, the port picked. */
  readonly addr: Deno.NetAddr;
  /** Base URL, for example `http://127.0.0.1:6562`. */
  readonly url: string;
  /** The service behind the server. */
  readonly service: TelemetryService;
  /** The ASCOM Alpaca listener, when `alpacaPort` is set (docs/safety.md). */
  readonly alpaca?: AlpacaHandle;
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
 * Opens the site directory and serves it over HTTP.
 *
 * @param options Site directory, address and behaviour.
 * @returns A handle with the address, `shutdown()` and `finished`.
 * @throws {ConfigError} If binding to a non-loopback address without a token or `insecure`, or for
 *   a `notify` URL that is not http(s) or holds a user name or password.
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
  const { hostname, port, types, tls, warn } = await prepare(options);
  const service = await TelemetryService.open(types ? { ...options, types } : options);
  const notifier = await startNotifications(service, {
    ...options,
    log: { info: options.onInfo ?? (() => {}), warn },
  });
  const disk = new DiskWatch(service.siteDir, options.minFreeBytes, { warn });
  let stopping: Promise<void> | undefined;
  const shutdownState = new ShutdownLifecycle(() => void shutdown());
  const handler = createHandler(
    service,
    {
      ...handlerOptions(options, hostname, shutdownState, disk, types),
      notifications: () => notifier.counts,
    },
  );
  // Requests being answered; shutdown waits for them before it closes the files.
  const inFlight = new InFlight();
  const counted = inFlight.wrap(handler);
  // Deno.serve has no head or idle timeout and no bound per peer: with the guard, the service
  // accepts the connections itself and serves each with Deno's HTTP server; over HTTPS, through
  // a Deno.serve on an internal loopback port (docs/operations.md).
  const guarded = options.connectionGuard ?? !isLoopback(hostname);
  const internal = guarded && tls !== undefined;
  // One bound of connections for both listeners: descriptors are the process's (--max-conns).
  const pool = guarded ? new ConnectionPool(options.connectionLimits?.maxConns) : undefined;
  let guard: ConnectionGuard | undefined;
  const serve = internal
    ? (req: Request, info: Deno.ServeHandlerInfo<Deno.NetAddr>) => guard!.serve(req, info, counted)
    : counted;
  const listen = (at: number) =>
    Deno.serve({
      hostname: internal ? INTERNAL_HOST : hostname,
      port: at,
      onListen: () => {},
      ...tls,
    }, serve);
  const explain = (err: unknown) => listenFailure(err, tls !== undefined, options);
  let server = guarded && !internal
    ? undefined
    : await listenOrClose(() => listen(internal ? 0 : port), service, explain);
  if (pool) {
    const front = { hostname, port, handler: counted, upstream: server?.addr, pool, warn };
    guard = await openGuard(front, options, service, server, explain);
  }
  const alpaca = await openAlpaca(service, hostname, options, pool, warn).catch(async (err) => {
    guard?.close();
    await server?.shutdown();
    await service.close();
    throw err;
  });
  // Settles when shutdown() has closed the service, however the shutdown was started.
  const done = Promise.withResolvers<void>();
  // Set when the server ends without being asked: `finished` then rejects with it.
  let failure: ListenerError | undefined;
  function shutdown(why?: ListenerError): Promise<void> {
    if (stopping) return stopping;
    failure ??= why;
    const deadline = Date.now() + (options.shutdownGraceMs ?? DEFAULT_SHUTDOWN_GRACE_MS);
    const parts = { shutdownState, alpaca, disk, inFlight, service, notifier, guard, server };
    stopping = closeInOrder(parts, deadline);
    stopping.then(() => failure ? done.reject(failure) : done.resolve(), done.reject);
    return stopping;
  }
  if (server) {
    const port0 = server.addr.port;
    const where = `${hostForUrl(hostname)}:${guard ? guard.addr.port : port0}`;
    const relisten = new Relistener(options.relisten ?? {}, warn, where);
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
  }
  // Callers that never await `finished` must not crash on a failed close; those who do see it.
  done.promise.catch(() => {});
  // Accepting failed for good: as when the listener cannot be opened again.
  guard?.run().catch((err: ListenerError) => stopping ?? shutdown(err));
  disk.start();
  const addr = guard ? guard.addr : server!.addr;
  const url = await announce(addr, hostname, tls !== undefined, service, warn);
  return {
    addr,
    url,
    service,
    ...(alpaca ? { alpaca } : {}),
    shutdown,
    finished: done.promise,
    [Symbol.asyncDispose]: shutdown,
  };
}

/** What a running server closes, in {@linkcode closeInOrder}'s order. */
interface Parts {
  shutdownState: ShutdownLifecycle;
  alpaca: AlpacaHandle | undefined;
  disk: DiskWatch;
  inFlight: InFlight;
  service: TelemetryService;
  notifier: { close(waitMs: number): Promise<void> };
  guard: ConnectionGuard | undefined;
  /** Deno.serve: on loopback, or on the internal port behind the guard over HTTPS. */
  server: Deno.HttpServer<Deno.NetAddr> | undefined;
}

/** The graceful shutdown (docs/storage.md): requests drained, files closed, then the sockets. */
async function closeInOrder(parts: Parts, deadline: number): Promise<void> {
  const { shutdownState, alpaca, disk, inFlight, service, notifier, guard, server } = parts;
  // Open GET /stream responses never finish by themselves: beginning ends them first.
  shutdownState.begin();
  await alpaca?.close();
  await disk.stop();
  // New requests are answered 503 from now on while the listener stays open, so whoever
  // waits for the port to close (`obs-utils telemetry stop`) knows the lock is free.
  await raceDeadline(inFlight.drained(), deadline);
  try {
    await service.close();
  } finally {
    // A receiver that never answers holds the shutdown no longer than the drain (bounded).
    await notifier.close(Math.min(NOTIFY_DRAIN_MS, Math.max(0, deadline - Date.now())));
    // A peer that stopped reading holds its connection (and so shutdown()) forever; past the
    // grace period the caller may exit anyway: the files are already closed.
    const closed = Promise.all([guard?.shutdown(), server?.shutdown()]).then(() => {});
    await raceDeadline(closed, deadline);
    guard?.closeAll();
  }
}

/** What {@linkcode startServer} settles before it opens anything: refusals come first. */
interface Prepared {
  hostname: string;
  port: number;
  types: TypesRegistry | undefined;
  tls: { cert: string; key: string } | undefined;
  warn: (message: string) => void;
}

/**
 * Checks the options and reads what they name (types file, TLS files) before the site directory
 * is opened, so that a refused configuration leaves nothing behind; prints the start-up warnings.
 */
async function prepare(options: ServerOptions): Promise<Prepared> {
  const hostname = options.hostname ?? DEFAULT_HOST;
  const port = options.port ?? DEFAULT_PORT;
  checkExposure(hostname, options);
  if (options.alpacaPort !== undefined && options.alpacaPort !== 0 && options.alpacaPort === port) {
    throw new ConfigError(
      `--alpaca-port ${port} is also --port: the Alpaca listener needs a port of its own, such as 11111`,
    );
  }
  const types = options.types ??
    (options.typesFile !== undefined ? await loadTypes(options.typesFile) : undefined);
  const tls = await readTls(options);
  checkReceivers(options.notify ?? []);
  const warn = options.onWarning ?? (() => {});
  warnIneffective(options, warn);
  for (const line of types ? staleLessCriticalWarnings(types) : []) warn(line);
  return { hostname, port, types, tls, warn };
}

/**
 * Opens the Alpaca listener when `alpacaPort` is set (docs/safety.md), with the site's `site_id`
 * for its `UniqueID`s; a port that cannot be taken is explained naming the flag to change.
 */
async function openAlpaca(
  service: TelemetryService,
  hostname: string,
  options: ServerOptions,
  pool: ConnectionPool | undefined,
  warn: (message: string) => void,
): Promise<AlpacaHandle | undefined> {
  if (options.alpacaPort === undefined) return undefined;
  const identity = await readSiteIdentity(service.siteDir);
  // The registry the service judges safety by: the devices read the same one.
  const registry = service.types;
  const discoveryPort = options.alpacaDiscoveryPort ?? DEFAULT_ALPACA_DISCOVERY_PORT;
  try {
    return await startAlpaca({
      hostname,
      port: options.alpacaPort,
      discoveryPort,
      types: registry,
      source: serviceSource(service, registry),
      siteId: identity?.site_id ?? "unknown",
      warn,
      ...(options.onError ? { onError: options.onError } : {}),
      ...(options.connectionGuard !== undefined
        ? { connectionGuard: options.connectionGuard }
        : {}),
      ...(options.connectionLimits ? { connectionLimits: options.connectionLimits } : {}),
      ...(pool ? { connectionPool: pool } : {}),
      ...(options.bodyTimeoutMs !== undefined ? { bodyTimeoutMs: options.bodyTimeoutMs } : {}),
      ...(options.relisten ? { relisten: options.relisten } : {}),
    });
  } catch (err) {
    if (err instanceof Deno.errors.AddrInUse) {
      throw new ConfigError(
        `Cannot open the Alpaca listener on ${
          hostForUrl(hostname)
        }:${options.alpacaPort} (TCP) or discovery on UDP ${discoveryPort}: ${
          errorText(err)
        }; choose another --alpaca-port, or --alpaca-discovery-port 0 to turn discovery off`,
      );
    }
    throw err;
  }
}

/** What {@linkcode createHandler} is given by {@linkcode startServer}. */
function handlerOptions(
  options: ServerOptions,
  hostname: string,
  lifecycle: ShutdownLifecycle,
  disk: DiskWatch,
  types: TypesRegistry | undefined,
): HandlerOptions {
  return {
    lifecycle,
    hostname,
    token: options.token,
    ...(options.publicRead !== undefined ? { publicRead: options.publicRead } : {}),
    ...(options.trustLoopback !== undefined ? { trustLoopback: options.trustLoopback } : {}),
    ...(options.wrapCurrent !== undefined ? { wrapCurrent: options.wrapCurrent } : {}),
    ...(options.maxBody !== undefined ? { maxBody: options.maxBody } : {}),
    ...(options.maxHistory !== undefined ? { maxHistory: options.maxHistory } : {}),
    ...(options.bodyTimeoutMs !== undefined ? { bodyTimeoutMs: options.bodyTimeoutMs } : {}),
    ...(options.onError ? { onError: options.onError } : {}),
    ...(types ? { types } : {}),
    disk,
    ...(options.onRejected ? { onRejected: options.onRejected } : {}),
  };
}

/** What {@linkcode openGuard} puts in front of the service. */
interface Front {
  hostname: string;
  port: number;
  /** Plain HTTP: the handler each connection's Deno HTTP server calls. */
  handler: (req: Request, info: Deno.ServeHandlerInfo<Deno.NetAddr>) => Promise<Response>;
  /** HTTPS: where the internal `Deno.serve` listens. */
  upstream: Deno.NetAddr | undefined;
  pool: ConnectionPool;
  warn: (message: string) => void;
}

/**
 * Opens the public listener of the connection guard; when that fails, closes the internal
 * server (HTTPS) and the service, and throws `explain(err)`.
 */
async function openGuard(
  front: Front,
  options: ServerOptions,
  service: TelemetryService,
  server: Deno.HttpServer<Deno.NetAddr> | undefined,
  explain: (err: unknown) => unknown,
): Promise<ConnectionGuard> {
  const { hostname, port, upstream } = front;
  try {
    const listener = Deno.listen({ hostname, port });
    return new ConnectionGuard({
      listener,
      // The internal server is listened again on its own port when it fails (keepListening).
      ...(upstream ? { upstream: () => upstream } : { handler: front.handler }),
      warn: front.warn,
      where: `${hostForUrl(hostname)}:${listener.addr.port}`,
      pool: front.pool,
      ...(options.connectionLimits ? { limits: options.connectionLimits } : {}),
    });
  } catch (err) {
    await server?.shutdown();
    await service.close();
    throw explain(err);
  }
}

/** Listens for the first time; when that fails, closes the service and throws `explain(err)`. */
async function listenOrClose(
  listen: () => Deno.HttpServer<Deno.NetAddr>,
  service: TelemetryService,
  explain: (err: unknown) => unknown,
): Promise<Deno.HttpServer<Deno.NetAddr>> {
  try {
    return listen();
  } catch (err) {
    await service.close();
    throw explain(err);
  }
}

/**
 * Records the server's address in the site lock file, where a second server refused this
 * directory reads it (docs/cli.md), and returns the base URL.
 */
async function announce(
  addr: Deno.NetAddr,
  hostname: string,
  tls: boolean,
  service: TelemetryService,
  warn: (message: string) => void,
): Promise<string> {
  // Keep the name the operator chose; "localhost" reads better than the address it resolved to.
  const shown = hostname === "localhost" ? hostname : addr.hostname;
  await recordLockHolder(service.siteDir, `http://${hostForUrl(shown)}:${addr.port}`).catch(
    (err) => warn(`Could not record the address in the site lock file: ${errorText(err)}`),
  );
  return `${tls ? "https" : "http"}://${hostForUrl(shown)}:${addr.port}`;
}
