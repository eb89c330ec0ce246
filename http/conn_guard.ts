/**
 * The connection guard: the service's own accept layer in front of `Deno.serve`, which has no
 * header-read timeout, no idle timeout and no bound on connections (docs/operations.md). It
 * accepts every TCP connection itself, pipes its bytes to the `Deno.serve` bound to an internal
 * loopback port, and closes a connection whose first request head does not complete within the
 * head timeout, one idle between requests for longer than the idle timeout, and, past the bound
 * of connections of one peer or of all peers together ({@linkcode ConnectionPool}, shared by the
 * service's listeners), the oldest connection without a request in flight. Out of descriptors,
 * it closes one such connection and accepts again: it never stops for that.
 *
 * The handler learns the real peer from the internal connection's port
 * ({@linkcode ConnectionGuard.serve}), and tells the guard when a request starts and when its
 * answer is sent, so a long answer (`GET /stream`) is never idle; an answer marked by
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
   * Longest wait for a complete request head: from the connection's start, or from the first
   * byte of the next request on a kept-alive connection.
   * @default {10000}
   */
  headTimeoutMs?: number;
  /** Longest wait, between requests, for the first byte of the next one. @default {60000} */
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
 * connection holds three descriptors (the client's, both ends of the internal one), so the bound
 * keeps three quarters of them for connections and a quarter spare.
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
 * Where the service's `Deno.serve` listens behind the guard, on a port picked at start.
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

const CHUNK = 64 * 1024;
/** The peer of a request whose connection the guard no longer knows. */
const UNKNOWN_PEER: Deno.NetAddr = { transport: "tcp", hostname: "unknown", port: 0 };
const encoder = new TextEncoder();

/** One accepted connection and its internal twin. */
class Guarded {
  readonly peer: Deno.NetAddr;
  readonly key: string;
  /** Requests whose answer is not sent yet. */
  active = 0;
  /** Requests seen on this connection. */
  requests = 0;
  /** When the current wait began: the start, the end of the last answer, or the next head. */
  since: number;
  /** Whether the current wait is for a head (bytes came) rather than an idle gap. */
  inHead = true;
  /** An answer was marked to close the connection once it is sent ({@linkcode closeAfterAnswer}). */
  closeWhenAnswered = false;
  closed = false;
  /** Drops the connection from its guard's and its pool's books (set by the guard). */
  forget: () => void = () => {};
  #conn: Deno.TcpConn;
  #upstream: Deno.TcpConn | undefined;
  #finishing: ReturnType<typeof setTimeout> | undefined;

  constructor(conn: Deno.TcpConn, now: number) {
    this.#conn = conn;
    this.peer = conn.remoteAddr;
    this.key = conn.remoteAddr.hostname;
    this.since = now;
  }

  /**
   * Pipes the connection both ways through `upstream`. When the service ends its side (it closed
   * the connection after an answer), the client's is closed too: nothing more can be answered on
   * it, and a client that keeps it open would hold three descriptors for nothing.
   */
  async pipe(upstream: Deno.TcpConn, clock: () => number): Promise<void> {
    this.#upstream = upstream;
    if (this.closed) return this.close();
    const inbound = this.#inbound(upstream, clock);
    await pump(upstream, this.#conn);
    this.close();
    await inbound;
  }

  /** Client to service; a byte that comes between requests starts the wait for a head. */
  async #inbound(upstream: Deno.TcpConn, clock: () => number): Promise<void> {
    const buf = new Uint8Array(CHUNK);
    try {
      for (;;) {
        const n = await this.#conn.read(buf);
        if (n === null) break;
        if (this.active === 0 && !this.inHead) {
          this.inHead = true;
          this.since = clock();
        }
        await writeAll(upstream, buf.subarray(0, n));
      }
    } catch {
      // A reset or a closed peer ends the pipe like an end of stream.
    }
    try {
      await upstream.closeWrite();
    } catch {
      // Already closed.
    }
  }

  /**
   * Stops passing the client's bytes on, once an answer marked to close was sent: the service
   * reads the end of its request, ends the connection after the answer, and {@linkcode pipe}
   * closes the client's. A service that does not is closed after a second.
   */
  finish(): void {
    const upstream = this.#upstream;
    if (this.closed || upstream === undefined) return this.close();
    upstream.closeWrite().catch(() => {});
    this.#finishing = setTimeout(() => this.close(), 1000);
  }

  /** Refuses the connection: a 503 problem+json when it speaks plain HTTP, then closes it. */
  async refuse(detail: string, plain: boolean): Promise<void> {
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
      await raceTimeout(writeAll(this.#conn, encoder.encode(head + body)), 1000).catch(() => {});
    }
    this.close();
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

/** What {@linkcode ConnectionGuard} is given. */
export interface GuardOptions {
  /** The public listener; the guard accepts from it. */
  listener: Deno.TcpListener;
  /** Where the service's `Deno.serve` listens now (it may be opened again on another port). */
  upstream: () => Deno.NetAddr;
  /** The limits. */
  limits?: ConnectionLimits;
  /**
   * The connections counted against `--max-conns`, shared with the service's other guarded
   * listener. @default {a pool of its own, of `limits.maxConns`}
   */
  pool?: ConnectionPool;
  /** Whether the service speaks plain HTTP (a refusal can then be a 503). */
  plain: boolean;
  /** Receives the warn lines (at most one every 10 s per kind). */
  warn: (message: string) => void;
  /** Where the public listener is, for the log. */
  where: string;
}

/**
 * The accept layer in front of `Deno.serve` (module documentation). Create it with the public
 * listener, then {@linkcode ConnectionGuard.run} accepts until {@linkcode ConnectionGuard.close};
 * the `Deno.serve` behind it hands each request to {@linkcode ConnectionGuard.serve}.
 *
 * @example Usage
 * ```ts ignore
 * const inner = Deno.serve(
 *   { hostname: "127.0.0.1", port: 0 },
 *   (req, info) => guard.serve(req, info, handler),
 * );
 * const guard = new ConnectionGuard({
 *   listener: Deno.listen({ hostname: "0.0.0.0", port: 6562 }),
 *   upstream: () => inner.addr,
 *   plain: true,
 *   warn: console.warn,
 *   where: "0.0.0.0:6562",
 * });
 * void guard.run();
 * ```
 */
export class ConnectionGuard {
  #listener: Deno.TcpListener;
  #upstream: () => Deno.NetAddr;
  #headMs: number;
  #idleMs: number;
  #perPeer: number;
  #pool: ConnectionPool;
  #plain: boolean;
  #warn: (message: string) => void;
  #where: string;
  /** Open connections by the local port of their internal twin. */
  #byPort = new Map<number, Guarded>();
  /** Open connections by peer address, oldest first. */
  #byPeer = new Map<string, Set<Guarded>>();
  #all = new Set<Guarded>();
  #sweep: ReturnType<typeof setInterval> | undefined;
  #now = Date.now();
  #closing = false;
  #lastLine = new Map<string, { at: number; more: number }>();

  constructor(options: GuardOptions) {
    this.#listener = options.listener;
    this.#upstream = options.upstream;
    const limits = options.limits ?? {};
    this.#headMs = limits.headTimeoutMs ?? DEFAULT_HEAD_TIMEOUT_MS;
    this.#idleMs = limits.idleTimeoutMs ?? DEFAULT_IDLE_TIMEOUT_MS;
    this.#perPeer = limits.maxPerPeer ?? DEFAULT_MAX_CONNS_PER_PEER;
    this.#pool = options.pool ?? new ConnectionPool(limits.maxConns);
    this.#plain = options.plain;
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
    const guarded = new Guarded(conn, this.#now = Date.now());
    let peers = this.#byPeer.get(guarded.key);
    if (!peers) this.#byPeer.set(guarded.key, peers = new Set());
    if (peers.size >= this.#perPeer && !this.#pool.evict(peers)) {
      this.#log(
        "peer",
        `Refused a connection from ${guarded.key}: it holds ${peers.size} connections, all busy (--max-conns-per-peer ${this.#perPeer}).`,
      );
      void guarded.refuse(
        `This address holds ${peers.size} connections already; close some, or ask the operator to raise --max-conns-per-peer.`,
        this.#plain,
      );
      if (peers.size === 0) this.#byPeer.delete(guarded.key);
      return;
    }
    const pool = this.#pool;
    if (pool.size >= pool.max && !pool.evict()) {
      this.#log(
        "total",
        `Refused a connection from ${guarded.key}: ${pool.size} connections are open, all busy (--max-conns ${pool.max}).`,
      );
      void guarded.refuse(
        `The service holds ${pool.size} connections already, all busy; retry later, or ask the operator to raise --max-conns.`,
        this.#plain,
      );
      if (peers.size === 0) this.#byPeer.delete(guarded.key);
      return;
    }
    guarded.forget = () => this.#forget(guarded);
    peers.add(guarded);
    this.#all.add(guarded);
    pool.add(guarded);
    void this.#connect(guarded, conn);
  }

  async #connect(guarded: Guarded, conn: Deno.TcpConn): Promise<void> {
    let port = -1;
    try {
      conn.setNoDelay(true);
      const to = this.#upstream();
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
      this.#byPort.set(port, guarded);
      await guarded.pipe(upstream, () => this.#now);
    } catch {
      // The service is gone: the client sees the connection end.
    } finally {
      guarded.close();
      if (this.#byPort.get(port) === guarded) this.#byPort.delete(port);
      this.#forget(guarded);
    }
  }

  #forget(guarded: Guarded): void {
    this.#all.delete(guarded);
    this.#pool.delete(guarded);
    const peers = this.#byPeer.get(guarded.key);
    peers?.delete(guarded);
    if (peers?.size === 0) this.#byPeer.delete(guarded.key);
  }

  /** Closes the connections whose head or idle time ran out. */
  #expire(): void {
    const now = this.#now = Date.now();
    for (const guarded of this.#all) {
      if (guarded.active > 0 || guarded.closed) continue;
      const limit = guarded.inHead ? this.#headMs : this.#idleMs;
      if (now - guarded.since >= limit) {
        guarded.close();
        this.#forget(guarded);
      }
    }
  }

  /**
   * Answers a request that came through the guard: `handler` gets the real peer instead of the
   * internal one, the request is counted until its answer is sent, and an answer marked by
   * {@linkcode closeAfterAnswer} closes the connection once sent. A request that did not come
   * through the guard is handed on as it is.
   *
   * @param req The request.
   * @param info What `Deno.serve` gave the handler.
   * @param handler The service's handler.
   * @returns The handler's answer.
   */
  serve(
    req: Request,
    info: Deno.ServeHandlerInfo<Deno.NetAddr>,
    handler: (req: Request, info: Deno.ServeHandlerInfo<Deno.NetAddr>) => Promise<Response>,
  ): Promise<Response> {
    if (info.remoteAddr.hostname !== this.#upstream().hostname) return handler(req, info);
    const guarded = this.#byPort.get(info.remoteAddr.port);
    // A request read just before its connection was closed and forgotten, or one sent to the
    // internal port directly: its peer is unknown, and never taken for loopback (which
    // --trust-loopback and POST /shutdown would trust).
    if (guarded === undefined) return handler(req, { ...info, remoteAddr: { ...UNKNOWN_PEER } });
    guarded.active++;
    guarded.requests++;
    info.completed.then(() => this.#ended(guarded), () => this.#ended(guarded));
    const answer = handler(req, { remoteAddr: guarded.peer, completed: info.completed });
    answer.then((res) => {
      if (closing.has(res)) guarded.closeWhenAnswered = true;
    }, () => {});
    return answer;
  }

  #ended(guarded: Guarded): void {
    if (guarded.closeWhenAnswered) return guarded.finish();
    if (--guarded.active > 0) return;
    guarded.inHead = false;
    guarded.since = this.#now = Date.now();
  }

  /** Stops accepting; the open connections stay until {@linkcode ConnectionGuard.closeAll}. */
  close(): void {
    if (this.#closing) return;
    this.#closing = true;
    try {
      this.#listener.close();
    } catch {
      // Already closed.
    }
  }

  /** Closes every connection still open (after the shutdown's grace period). */
  closeAll(): void {
    for (const guarded of this.#all) {
      guarded.close();
      this.#pool.delete(guarded);
    }
    this.#all.clear();
    this.#byPeer.clear();
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
