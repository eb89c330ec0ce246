/**
 * The connection guard: the service's own accept layer in front of Deno's HTTP server, which has
 * no header-read timeout, no idle timeout and no bound on connections (docs/operations.md). It
 * accepts every TCP connection itself. Over plain HTTP it hands the connection to Deno's HTTP
 * server for that one connection (the one `Deno.serve` runs on each connection it accepts), so
 * the bytes go from the socket to Deno's HTTP parser as on a loopback bind, with no copy in
 * JavaScript. Over HTTPS it pipes the encrypted bytes to the service's `Deno.serve` on an internal
 * loopback port: Deno closes a TLS connection only once its handshake is done, so the guard holds
 * the raw socket of a peer that never sends one.
 *
 * It closes a connection whose first request head does not complete within the head timeout, one
 * without a next request for longer than the idle timeout after its last answer, and, past the
 * bound of connections of one peer or of all peers together ({@linkcode ConnectionPool}, shared
 * by the service's listeners), the oldest connection without a request in flight. Out of
 * descriptors, it closes one such connection and accepts again: it never stops for that.
 *
 * The handler sees the real peer, and each request is counted from its head until its answer is
 * sent, so a long answer (`GET /stream`) is never idle; an answer marked by
 * {@linkcode closeAfterAnswer} (a body timeout) closes its connection once it is sent.
 *
 * @module
 */

import { Backoff } from "../wire/backoff.ts";
import { errorText } from "../core/errors.ts";
import { ListenerError, TRANSIENT } from "./listener.ts";

/** The limits of the connection guard (docs/operations.md). */
export interface ConnectionLimits {
  /**
   * Longest wait for the first complete request head, from the connection's start (over HTTPS,
   * the TLS handshake included).
   * @default {10000}
   */
  headTimeoutMs?: number;
  /**
   * Longest wait on a kept-alive connection, from the end of an answer, for the next complete
   * request head. @default {60000}
   */
  idleTimeoutMs?: number;
  /** Most connections one peer address may hold open. @default {64} */
  maxPerPeer?: number;
  /**
   * Most connections all peers together may hold open, on every listener sharing the
   * {@linkcode ConnectionPool}. @default {{@linkcode defaultMaxConns}()}
   */
  maxConns?: number;
}

/** Default of {@linkcode ConnectionLimits.headTimeoutMs} (`--head-timeout`). */
export const DEFAULT_HEAD_TIMEOUT_MS = 10_000;
/** Default of {@linkcode ConnectionLimits.idleTimeoutMs} (`--idle-timeout`). */
export const DEFAULT_IDLE_TIMEOUT_MS = 60_000;
/** Default of {@linkcode ConnectionLimits.maxPerPeer} (`--max-conns-per-peer`). */
export const DEFAULT_MAX_CONNS_PER_PEER = 64;
/** The least default of {@linkcode ConnectionLimits.maxConns} (`--max-conns`). */
export const MIN_DEFAULT_MAX_CONNS = 64;
/**
 * Descriptors the service keeps for itself, out of the bound of connections: measured 36 at rest
 * with both listeners (the runtime's, the site files, the lock), and room for a night's rotation,
 * a run's files, history readers and notifications.
 */
export const SERVICE_DESCRIPTORS = 64;
/** The soft descriptor limit assumed when it cannot be read: a login shell's. */
const ASSUMED_DESCRIPTOR_LIMIT = 1024;

/**
 * The default of `--max-conns` (docs/operations.md): a quarter of what the soft descriptor limit
 * leaves once the service has its own, at least {@linkcode MIN_DEFAULT_MAX_CONNS}. A guarded
 * connection holds one descriptor over HTTP and three over HTTPS (the client's, both ends of the
 * internal one), so the bound keeps three quarters of them for connections at most and a quarter
 * spare.
 *
 * @param softLimit The soft limit of open files (`ulimit -n`).
 * @returns The bound of all connections together.
 *
 * @example Usage
 * ```ts
 * import { defaultMaxConns } from "./conn_guard.ts";
 * import assert from "node:assert/strict";
 *
 * assert.equal(defaultMaxConns(1024), 240);
 * assert.equal(defaultMaxConns(65536), 16368);
 * assert.equal(defaultMaxConns(256), 64);
 * ```
 */
export function defaultMaxConns(softLimit: number = descriptorLimit()): number {
  return Math.max(MIN_DEFAULT_MAX_CONNS, Math.floor((softLimit - SERVICE_DESCRIPTORS) / 4));
}

/**
 * The soft limit of open files of this process, from `/proc/self/limits`. Deno lets a process
 * read that file only with every permission (`--allow-all`), so it is read only then (a partial
 * grant would make Deno prompt); otherwise, or off Linux, it is taken as 1,024, a login shell's.
 *
 * @returns The limit.
 *
 * @example Usage
 * ```ts ignore
 * import { descriptorLimit } from "./conn_guard.ts";
 *
 * console.log(descriptorLimit()); // 1024 under a login shell's limit
 * ```
 */
export function descriptorLimit(): number {
  if (Deno.build.os !== "linux" || !allGranted()) return ASSUMED_DESCRIPTOR_LIMIT;
  try {
    const text = Deno.readTextFileSync("/proc/self/limits");
    const soft = /^Max open files\s+(\d+)/m.exec(text)?.[1];
    return soft === undefined ? ASSUMED_DESCRIPTOR_LIMIT : Number(soft);
  } catch {
    return ASSUMED_DESCRIPTOR_LIMIT;
  }
}

function allGranted(): boolean {
  const names = ["read", "write", "net", "env", "run", "sys", "ffi", "import"] as const;
  return names.every((name) => {
    try {
      return Deno.permissions.querySync({ name }).state === "granted";
    } catch {
      return false;
    }
  });
}

/** Answers after which the guard closes the connection (see {@linkcode closeAfterAnswer}). */
const closing = new WeakSet<Response>();

/**
 * Marks an answer after which the connection guard closes its connection, instead of waiting for
 * the rest of the request: a body that timed out (docs/operations.md). `Deno.serve` says
 * `connection: close` on such an answer by itself, but keeps reading the body the client is
 * still trickling; behind the guard the connection is closed once the answer is sent.
 *
 * @param res The answer.
 * @returns The same answer.
 *
 * @example Usage
 * ```ts
 * import { closeAfterAnswer } from "./conn_guard.ts";
 * import assert from "node:assert/strict";
 *
 * const res = closeAfterAnswer(new Response("slow", { status: 408 }));
 * assert.equal(res.status, 408);
 * ```
 */
export function closeAfterAnswer(res: Response): Response {
  closing.add(res);
  return res;
}

/**
 * Tells whether an answer was marked by {@linkcode closeAfterAnswer}, so that an answer made
 * from it (a route's own error shape) can keep the mark.
 *
 * @param res An answer.
 * @returns `true` when its connection is to be closed once it is sent.
 *
 * @example Usage
 * ```ts
 * import { closeAfterAnswer, closesAfterAnswer } from "./conn_guard.ts";
 * import assert from "node:assert/strict";
 *
 * assert.equal(closesAfterAnswer(closeAfterAnswer(new Response(null, { status: 408 }))), true);
 * assert.equal(closesAfterAnswer(new Response(null, { status: 400 })), false);
 * ```
 */
export function closesAfterAnswer(res: Response): boolean {
  return closing.has(res);
}

/**
 * Where the service's `Deno.serve` listens behind the guard over HTTPS, on a port picked at start
 * (see {@linkcode GuardOptions.upstream}).
 *
 * @example Usage
 * ```ts
 * import { INTERNAL_HOST } from "./conn_guard.ts";
 * import assert from "node:assert/strict";
 *
 * assert.equal(INTERNAL_HOST, "127.0.0.1");
 * ```
 */
export const INTERNAL_HOST = "127.0.0.1";

/**
 * How long after its last answer a connection of Deno's per-connection server is closed, when it
 * is to be closed once answered: the answer is handed to the server when its request counts as
 * answered, and written to the socket on the server's next turn; a close before would lose it.
 */
const LINGER_MS = 100;
const CHUNK = 64 * 1024;
/** The peer of a request whose connection the guard no longer knows. */
const UNKNOWN_PEER: Deno.NetAddr = { transport: "tcp", hostname: "unknown", port: 0 };
const encoder = new TextEncoder();

/** A request handler, as `Deno.serve` calls it. */
type Handler = (req: Request, info: Deno.ServeHandlerInfo<Deno.NetAddr>) => Promise<Response>;

/** What the guard needs of Deno's per-connection HTTP server ({@linkcode serveConnection}). */
type ServeConnection = (
  conn: Deno.Conn,
  signal: CancelSignal,
  handler: Handler,
  onError: (error: unknown) => Response,
  onListen: () => void,
) => Deno.HttpServer<Deno.NetAddr>;

/**
 * Where the server registers the listener that closes its connection at once: the one thing it
 * does with the `AbortSignal` it is given. A real signal would call that listener after the
 * connection ended by itself too, where it throws (the server's resource is gone) as an uncaught
 * error; here {@linkcode Served.close} calls it and ignores that.
 */
interface CancelSignal {
  addEventListener(type: "abort", listener: () => void, options?: unknown): void;
}

/**
 * Deno's HTTP server on one accepted connection, the one `Deno.serve` runs on each connection
 * it accepts (`serveHttpOnConnection`, in `Deno[Deno.internal]`, Deno 2.9): `Deno.serve` takes
 * no listener of another's making, and the guard accepts the connections itself.
 *
 * @throws {Error} If this Deno has no such function: the guard cannot serve plain HTTP without
 *   it, and the service does not listen on the network unguarded.
 */
function serveConnection(): ServeConnection {
  const deno = Deno as unknown as { internal?: symbol } & Record<symbol, unknown>;
  const internal = deno.internal === undefined ? undefined : deno[deno.internal];
  const serve = (internal as { serveHttpOnConnection?: unknown } | undefined)
    ?.serveHttpOnConnection;
  if (typeof serve !== "function") {
    throw new Error(
      `Deno ${Deno.version.deno} has no per-connection HTTP server (serveHttpOnConnection), which ` +
        "the connection guard of a network bind needs; run the service with Deno 2.9 " +
        "(docs/operations.md).",
    );
  }
  return serve as ServeConnection;
}

/** One accepted connection in the guard's books, however it is served. */
abstract class Guarded {
  readonly peer: Deno.NetAddr;
  readonly key: string;
  /** Requests whose answer is not sent yet. */
  active = 0;
  /** Requests seen on this connection. */
  requests = 0;
  /** When the current wait began: the connection's start, or the end of its last answer. */
  since: number;
  /** An answer was marked to close the connection once it is sent ({@linkcode closeAfterAnswer}). */
  closeWhenAnswered = false;
  /** The connection is being closed once its last answer has left ({@linkcode closeSoon}). */
  lingering = false;
  closed = false;
  /** Drops the connection from its guard's and its pool's books (set by the guard). */
  forget: () => void = () => {};

  constructor(conn: Deno.TcpConn, now: number) {
    this.peer = conn.remoteAddr;
    this.key = conn.remoteAddr.hostname;
    this.since = now;
  }

  /** Closes the connection once the answer just sent has left. */
  abstract closeSoon(): void;

  /** Closes the connection at once, whatever it is doing. */
  abstract close(): void;
}

/**
 * A plain HTTP connection, served by a Deno HTTP server of its own: its bytes go from the socket
 * to Deno's HTTP parser, as on a loopback bind.
 */
class Served extends Guarded {
  /** Closes the connection at once, once its server runs. */
  #cancel: (() => void) | undefined;
  #linger: ReturnType<typeof setTimeout> | undefined;

  /**
   * Hands `conn` to a Deno HTTP server of its own, which answers with `handler`; `ended` is called
   * once the connection is gone, however it ended.
   *
   * @throws {Error} If that server cannot be closed from here (another Deno than 2.9).
   */
  serve(
    conn: Deno.TcpConn,
    serveOn: ServeConnection,
    handler: Handler,
    onError: (error: unknown) => Response,
    ended: () => void,
  ): void {
    const signal: CancelSignal = { addEventListener: (_type, listener) => this.#cancel = listener };
    const server = serveOn(conn, signal, handler, onError, () => {});
    // A reset by the peer rejects `finished`: that is an end like any other.
    server.finished.then(ended, ended);
    if (this.#cancel === undefined) {
      // A server that ignores the signal: its connections could not be closed, and no bound or
      // deadline would hold. Refuse them all, loudly, rather than serve unguarded.
      void server.shutdown().catch(() => {});
      throw new Error(
        `Deno ${Deno.version.deno}'s per-connection HTTP server cannot be closed by the connection guard; run the service with Deno 2.9 (docs/operations.md).`,
      );
    }
  }

  /** Closes the connection {@linkcode LINGER_MS} from now. */
  closeSoon(): void {
    if (this.closed || this.lingering) return;
    this.lingering = true;
    this.#linger = setTimeout(() => this.close(), LINGER_MS);
  }

  close(): void {
    clearTimeout(this.#linger);
    if (this.closed) return;
    this.closed = true;
    try {
      this.#cancel?.();
    } catch {
      // Already ended by itself: its server's resource is gone.
    }
  }
}

/**
 * An HTTPS connection and its internal twin: the encrypted bytes are piped, both ways, to the
 * service's `Deno.serve` on loopback. Deno closes a TLS connection only once its handshake is
 * done, so one whose peer never sends it could not be closed at its deadline; the guard holds
 * the raw socket instead.
 */
class Piped extends Guarded {
  #conn: Deno.TcpConn;
  #upstream: Deno.TcpConn | undefined;
  #finishing: ReturnType<typeof setTimeout> | undefined;

  constructor(conn: Deno.TcpConn, now: number) {
    super(conn, now);
    this.#conn = conn;
  }

  /**
   * Pipes the connection both ways through `upstream`. When the service ends its side (it closed
   * the connection after an answer), the client's is closed too: nothing more can be answered on
   * it, and a client that keeps it open would hold three descriptors for nothing.
   */
  async pipe(upstream: Deno.TcpConn): Promise<void> {
    this.#upstream = upstream;
    if (this.closed) return this.close();
    const inbound = pump(this.#conn, upstream);
    await pump(upstream, this.#conn);
    this.close();
    await inbound;
  }

  /**
   * Stops passing the client's bytes on: the service reads the end of its request, ends the
   * connection after its answer, and {@linkcode pipe} closes the client's. A service that does
   * not is closed after a second.
   */
  closeSoon(): void {
    const upstream = this.#upstream;
    if (this.closed || upstream === undefined) return this.close();
    if (this.lingering) return;
    this.lingering = true;
    upstream.closeWrite().catch(() => {});
    this.#finishing = setTimeout(() => this.close(), 1000);
  }

  close(): void {
    clearTimeout(this.#finishing);
    if (this.closed && this.#upstream === undefined) return;
    this.closed = true;
    for (const c of [this.#conn, this.#upstream]) {
      try {
        c?.close();
      } catch {
        // Already closed.
      }
    }
    this.#upstream = undefined;
  }
}

async function writeAll(conn: Deno.Conn, bytes: Uint8Array): Promise<void> {
  let off = 0;
  while (off < bytes.length) off += await conn.write(bytes.subarray(off));
}

async function pump(from: Deno.Conn, to: Deno.Conn): Promise<void> {
  const buf = new Uint8Array(CHUNK);
  try {
    for (;;) {
      const n = await from.read(buf);
      if (n === null) break;
      await writeAll(to, buf.subarray(0, n));
    }
  } catch {
    // A reset or a closed peer ends the pipe like an end of stream.
  }
  try {
    await to.closeWrite();
  } catch {
    // Already closed.
  }
}

/** Refuses a connection: a 503 problem+json when it speaks plain HTTP, then closes it. */
async function refuse(conn: Deno.TcpConn, detail: string, plain: boolean): Promise<void> {
  if (plain) {
    const body = JSON.stringify({
      type: "about:blank",
      title: "Service Unavailable",
      status: 503,
      detail,
    });
    const head = "HTTP/1.1 503 Service Unavailable\r\n" +
      "content-type: application/problem+json; charset=utf-8\r\ncache-control: no-store\r\n" +
      `connection: close\r\ncontent-length: ${encoder.encode(body).length}\r\n\r\n`;
    await raceTimeout(writeAll(conn, encoder.encode(head + body)), 1000).catch(() => {});
  }
  try {
    conn.close();
  } catch {
    // Already closed.
  }
}

function raceTimeout<T>(p: Promise<T>, ms: number): Promise<T | undefined> {
  let timer: ReturnType<typeof setTimeout> | undefined;
  return Promise.race([
    p,
    new Promise<undefined>((r) => timer = setTimeout(() => r(undefined), ms)),
  ]).finally(() => clearTimeout(timer));
}

/**
 * The connections of every guarded listener of one service, oldest first, and their bound
 * (`--max-conns`, docs/operations.md): descriptors are the process's, so the main port and the
 * Alpaca port share it, and either evicts from both.
 *
 * @example Usage
 * ```ts
 * import { ConnectionPool } from "./conn_guard.ts";
 * import assert from "node:assert/strict";
 *
 * const pool = new ConnectionPool(240);
 * assert.equal(pool.max, 240);
 * assert.equal(pool.size, 0);
 * ```
 */
export class ConnectionPool {
  /** The bound of all connections together. */
  readonly max: number;
  #all = new Set<Guarded>();

  /**
   * Creates the pool of a service's guarded listeners.
   *
   * @param max The bound of all their connections together.
   */
  constructor(max: number = defaultMaxConns()) {
    this.max = max;
  }

  /** Open connections, on every listener. */
  get size(): number {
    return this.#all.size;
  }

  /** @internal Counts a connection in. */
  add(guarded: Guarded): void {
    this.#all.add(guarded);
  }

  /** @internal Counts a connection out. */
  delete(guarded: Guarded): void {
    this.#all.delete(guarded);
  }

  /**
   * @internal Closes the oldest connection without a request in flight, of one peer or of all:
   * first one that never sent a whole request head, else an idle kept-alive one (a client's
   * pool, which has proved itself); `false` when every one has a request in flight.
   */
  evict(among: Iterable<Guarded> = this.#all): boolean {
    for (const neverServed of [true, false]) {
      for (const guarded of among) {
        if (guarded.active > 0 || guarded.closed || (neverServed && guarded.requests > 0)) {
          continue;
        }
        guarded.close();
        guarded.forget();
        return true;
      }
    }
    return false;
  }
}

/** What {@linkcode ConnectionGuard} is given: `handler` (HTTP) or `upstream` (HTTPS). */
export interface GuardOptions {
  /** The public listener; the guard accepts from it. */
  listener: Deno.TcpListener;
  /**
   * Plain HTTP: the service's handler, which each connection's Deno HTTP server calls with the
   * real peer.
   */
  handler?: Handler;
  /**
   * HTTPS: where the service's `Deno.serve` listens on loopback now (it may be opened again on
   * another port); the guard pipes the encrypted bytes there, and that server hands each request
   * to {@linkcode ConnectionGuard.serve}.
   */
  upstream?: () => Deno.NetAddr;
  /** The limits. */
  limits?: ConnectionLimits;
  /**
   * The connections counted against `--max-conns`, shared with the service's other guarded
   * listener. @default {a pool of its own, of `limits.maxConns`}
   */
  pool?: ConnectionPool;
  /** Receives the warn lines (at most one every 10 s per kind). */
  warn: (message: string) => void;
  /** Where the public listener is, for the log. */
  where: string;
}

/**
 * The accept layer in front of Deno's HTTP server (module documentation). Create it with the
 * public listener and the handler (HTTP) or the internal server (HTTPS), then
 * {@linkcode ConnectionGuard.run} accepts until {@linkcode ConnectionGuard.close};
 * {@linkcode ConnectionGuard.shutdown} ends the connections once their answers are sent.
 *
 * @example Usage
 * ```ts ignore
 * const guard = new ConnectionGuard({
 *   listener: Deno.listen({ hostname: "0.0.0.0", port: 6562 }),
 *   handler: (req, info) => Promise.resolve(new Response(info.remoteAddr.hostname)),
 *   warn: console.warn,
 *   where: "0.0.0.0:6562",
 * });
 * void guard.run();
 * ```
 */
export class ConnectionGuard {
  #listener: Deno.TcpListener;
  #handler: Handler | undefined;
  #serveOn: ServeConnection | undefined;
  #upstream: (() => Deno.NetAddr) | undefined;
  #headMs: number;
  #idleMs: number;
  #perPeer: number;
  #pool: ConnectionPool;
  #warn: (message: string) => void;
  #where: string;
  /** HTTPS: open connections by the local port of their internal twin. */
  #byPort = new Map<number, Piped>();
  /** Open connections by peer address, oldest first. */
  #byPeer = new Map<string, Set<Guarded>>();
  #all = new Set<Guarded>();
  #sweep: ReturnType<typeof setInterval> | undefined;
  #closing = false;
  /** Set by {@linkcode ConnectionGuard.shutdown}: a connection closes once it is idle. */
  #draining: PromiseWithResolvers<void> | undefined;
  #lastLine = new Map<string, { at: number; more: number }>();

  /**
   * Creates the guard; it accepts nothing before {@linkcode ConnectionGuard.run}.
   *
   * @param options The listener, the handler or the internal server, the limits, the log.
   * @throws {Error} If this Deno has no per-connection HTTP server (Deno 2.9 has), for HTTP.
   */
  constructor(options: GuardOptions) {
    this.#listener = options.listener;
    this.#handler = options.handler;
    this.#upstream = options.upstream;
    if (this.#upstream === undefined) this.#serveOn = serveConnection();
    const limits = options.limits ?? {};
    this.#headMs = limits.headTimeoutMs ?? DEFAULT_HEAD_TIMEOUT_MS;
    this.#idleMs = limits.idleTimeoutMs ?? DEFAULT_IDLE_TIMEOUT_MS;
    this.#perPeer = limits.maxPerPeer ?? DEFAULT_MAX_CONNS_PER_PEER;
    this.#pool = options.pool ?? new ConnectionPool(limits.maxConns);
    this.#warn = options.warn;
    this.#where = options.where;
  }

  /** The public address. */
  get addr(): Deno.NetAddr {
    return this.#listener.addr;
  }

  /** Open connections of this listener (for tests and metrics). */
  get size(): number {
    return this.#all.size;
  }

  /**
   * Accepts connections until {@linkcode ConnectionGuard.close}. A failed accept (EMFILE) closes
   * the oldest connection without a request in flight, of any listener of the pool, and tries
   * again after a wait; only an error that is not transient, five times in a row, ends it,
   * rejecting with a {@linkcode ListenerError}.
   */
  async run(): Promise<void> {
    const every = Math.max(20, Math.min(1000, Math.min(this.#headMs, this.#idleMs) / 5));
    this.#sweep = setInterval(() => this.#expire(), every);
    // Out of descriptors, accept fails at once: wait, 10 ms doubling to 2 s, before the next try.
    const backoff = new Backoff({ firstMs: 10, maxMs: 2000 });
    let fatal = 0;
    try {
      while (!this.#closing) {
        let conn: Deno.TcpConn;
        try {
          conn = await this.#listener.accept();
        } catch (err) {
          if (this.#closing) return;
          const text = errorText(err);
          if (!TRANSIENT.test(text) && ++fatal >= 5) {
            throw new ListenerError(`Cannot accept connections on ${this.#where}: ${text}`, {
              cause: err,
            });
          }
          this.#log(
            "accept",
            `Could not accept a connection on ${this.#where} (${text}); ` +
              `closing the oldest connection without a request and trying again.`,
          );
          this.#pool.evict();
          await new Promise((r) => setTimeout(r, backoff.next()));
          continue;
        }
        backoff.reset();
        fatal = 0;
        this.#admit(conn);
      }
    } finally {
      clearInterval(this.#sweep);
    }
  }

  #admit(conn: Deno.TcpConn): void {
    const key = conn.remoteAddr.hostname;
    const plain = this.#upstream === undefined;
    let peers = this.#byPeer.get(key);
    if (!peers) this.#byPeer.set(key, peers = new Set());
    if (peers.size >= this.#perPeer && !this.#pool.evict(peers)) {
      this.#log(
        "peer",
        `Refused a connection from ${key}: it holds ${peers.size} connections, all busy (--max-conns-per-peer ${this.#perPeer}).`,
      );
      void refuse(
        conn,
        `This address holds ${peers.size} connections already; close some, or ask the operator to raise --max-conns-per-peer.`,
        plain,
      );
      if (peers.size === 0) this.#byPeer.delete(key);
      return;
    }
    const pool = this.#pool;
    if (pool.size >= pool.max && !pool.evict()) {
      this.#log(
        "total",
        `Refused a connection from ${key}: ${pool.size} connections are open, all busy (--max-conns ${pool.max}).`,
      );
      void refuse(
        conn,
        `The service holds ${pool.size} connections already, all busy; retry later, or ask the operator to raise --max-conns.`,
        plain,
      );
      if (peers.size === 0) this.#byPeer.delete(key);
      return;
    }
    const now = Date.now();
    const guarded = plain ? new Served(conn, now) : new Piped(conn, now);
    guarded.forget = () => this.#forget(guarded);
    peers.add(guarded);
    this.#all.add(guarded);
    pool.add(guarded);
    if (guarded instanceof Piped) {
      void this.#connect(guarded, conn);
      return;
    }
    try {
      // Small answers leave at once rather than after Nagle's wait for the client's ACK.
      conn.setNoDelay(true);
      const handler = this.#handler!;
      guarded.serve(
        conn,
        this.#serveOn!,
        (req, info) => this.#request(guarded, req, info, handler),
        (err) => this.#failed(err),
        () => {
          guarded.closed = true;
          this.#forget(guarded);
        },
      );
    } catch (err) {
      // Reset before it could be served, or a Deno the guard cannot close connections of.
      this.#log("serve", `Could not serve a connection on ${this.#where}: ${errorText(err)}`);
      guarded.close();
      this.#forget(guarded);
    }
  }

  /** HTTPS: connects the internal twin of `piped` and pipes both ways until either side ends. */
  async #connect(piped: Piped, conn: Deno.TcpConn): Promise<void> {
    let port = -1;
    try {
      conn.setNoDelay(true);
      const to = this.#upstream!();
      let upstream: Deno.TcpConn;
      try {
        upstream = await Deno.connect({ hostname: to.hostname, port: to.port });
      } catch (err) {
        // Out of descriptors: make room for the next one (this client sees its connection end).
        if (!TRANSIENT.test(errorText(err))) throw err;
        this.#log(
          "accept",
          `Could not reach the service behind ${this.#where} (${
            errorText(err)
          }); closing the oldest connection without a request.`,
        );
        this.#pool.evict();
        return;
      }
      upstream.setNoDelay(true);
      port = upstream.localAddr.port;
      this.#byPort.set(port, piped);
      await piped.pipe(upstream);
    } catch {
      // The service is gone: the client sees the connection end.
    } finally {
      piped.close();
      if (this.#byPort.get(port) === piped) this.#byPort.delete(port);
      this.#forget(piped);
    }
  }

  /**
   * HTTPS: answers a request that came through the guard to the internal `Deno.serve`: `handler`
   * gets the real peer instead of the internal one. A request that did not come through the
   * guard is handed on as it is.
   *
   * @param req The request.
   * @param info What `Deno.serve` gave the handler.
   * @param handler The service's handler.
   * @returns The handler's answer.
   */
  serve(
    req: Request,
    info: Deno.ServeHandlerInfo<Deno.NetAddr>,
    handler: Handler,
  ): Promise<Response> {
    if (info.remoteAddr.hostname !== this.#upstream?.().hostname) return handler(req, info);
    const piped = this.#byPort.get(info.remoteAddr.port);
    // A request read just before its connection was closed and forgotten, or one sent to the
    // internal port directly: its peer is unknown, and never taken for loopback (which
    // --trust-loopback and POST /shutdown would trust).
    if (piped === undefined) return handler(req, { ...info, remoteAddr: { ...UNKNOWN_PEER } });
    return this.#request(
      piped,
      req,
      { remoteAddr: piped.peer, completed: info.completed },
      handler,
    );
  }

  /**
   * One request: counted from its head until its answer is sent, so its connection is not idle
   * meanwhile; an answer marked by {@linkcode closeAfterAnswer} closes the connection once sent.
   */
  #request(
    guarded: Guarded,
    req: Request,
    info: Deno.ServeHandlerInfo<Deno.NetAddr>,
    handler: Handler,
  ): Promise<Response> {
    guarded.active++;
    guarded.requests++;
    const ended = () => this.#ended(guarded);
    info.completed.then(ended, ended);
    const answer = handler(req, info);
    answer.then((res) => {
      if (closing.has(res)) guarded.closeWhenAnswered = true;
    }, () => {});
    return answer;
  }

  #ended(guarded: Guarded): void {
    guarded.active--;
    if (guarded.closeWhenAnswered) return guarded.closeSoon();
    if (guarded.active > 0) return;
    if (this.#draining) return guarded.closeSoon();
    guarded.since = Date.now();
  }

  /** An answer the handler could not give (it answers every error itself): a plain 500. */
  #failed(err: unknown): Response {
    this.#log("error", `Could not answer a request on ${this.#where}: ${errorText(err)}`);
    return new Response("Internal Server Error", { status: 500 });
  }

  #forget(guarded: Guarded): void {
    this.#all.delete(guarded);
    this.#pool.delete(guarded);
    const peers = this.#byPeer.get(guarded.key);
    peers?.delete(guarded);
    if (peers?.size === 0) this.#byPeer.delete(guarded.key);
    if (this.#all.size === 0) this.#draining?.resolve();
  }

  /**
   * Closes the connections whose head or idle time ran out: a connection must complete its first
   * request head within the head timeout of its start (over HTTPS, with the TLS handshake), and
   * the next one within the idle timeout of its last answer.
   */
  #expire(): void {
    const now = Date.now();
    for (const guarded of this.#all) {
      if (guarded.active > 0 || guarded.closed || guarded.lingering) continue;
      const limit = guarded.requests === 0 ? this.#headMs : this.#idleMs;
      if (now - guarded.since >= limit) {
        guarded.close();
        this.#forget(guarded);
      }
    }
  }

  /** Stops accepting; the open connections stay until {@linkcode ConnectionGuard.shutdown}. */
  close(): void {
    if (this.#closing) return;
    this.#closing = true;
    try {
      this.#listener.close();
    } catch {
      // Already closed.
    }
  }

  /**
   * Stops accepting and ends every connection as soon as it has no request in flight: the idle
   * ones at once, the others once their answers are sent.
   *
   * @returns Settles once every connection of this listener is closed.
   */
  shutdown(): Promise<void> {
    this.close();
    this.#draining ??= Promise.withResolvers<void>();
    for (const guarded of this.#all) if (guarded.active === 0) guarded.closeSoon();
    if (this.#all.size === 0) this.#draining.resolve();
    return this.#draining.promise;
  }

  /** Closes every connection still open at once (after the shutdown's grace period). */
  closeAll(): void {
    for (const guarded of this.#all) {
      guarded.close();
      this.#pool.delete(guarded);
    }
    this.#all.clear();
    this.#byPeer.clear();
    this.#draining?.resolve();
    clearInterval(this.#sweep);
  }

  /** One warn line per kind every 10 s at most; the rest are counted into the next. */
  #log(kind: string, line: string): void {
    const now = Date.now();
    const last = this.#lastLine.get(kind);
    if (last && now - last.at < 10_000) {
      last.more++;
      return;
    }
    const more = last && last.more > 0 ? ` (${last.more} similar since the last line)` : "";
    this.#lastLine.set(kind, { at: now, more: 0 });
    this.#warn(line + more);
  }
}
