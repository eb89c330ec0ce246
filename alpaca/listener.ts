/**
 * The ASCOM Alpaca listener (docs/safety.md, "ASCOM Alpaca (N.I.N.A.)"): a second listener on
 * `--host`, port `--alpaca-port`, that serves the Alpaca Device API v1 for one `safetymonitor`
 * per safety profile and `observingconditions/0`, the Management API and the setup pages, and
 * nothing else of the service. Alpaca has no authentication: the listener needs no token; the
 * only change it takes is the safety hub's external events (the safety monitors' actions), each
 * recorded with the peer's address. Bound to loopback it keeps the Host check of the main
 * listener, and bound to the network it stands behind the same connection guard (head and idle
 * timeouts, connections per peer and, with the main port, of all peers), which hands the handler
 * the peer it accepted. Like the main port it listens again when an accept fails for want of
 * descriptors, and a `PUT` body slower than `--body-timeout` is answered 400 and its connection
 * closed.
 *
 * Every device answer is HTTP 200 with `ClientTransactionID`, `ServerTransactionID`,
 * `ErrorNumber` and `ErrorMessage`, and `Value` (every GET, errors included); a request the
 * device cannot understand (an unknown device or member, a malformed `ClientID` or
 * `ClientTransactionID`, a required form field missing or sent with other casing) is HTTP 400
 * with a plain-text message. Query parameter names of a GET are case-insensitive, form field
 * names of a PUT case-sensitive: a `ClientTransactionID` with other casing is not one (0).
 *
 * @module
 */

import type { TypesRegistry } from "../core/types_registry.ts";
import { hostForUrl } from "../wire/address.ts";
import { BoundExceededError, readAtMost } from "../wire/bounded_read.ts";
import { guardLoopback, isLoopback, parseRequestUrl, peerHost } from "../http/guards.ts";
import { BodyTimeoutError, HttpError } from "../http/problems.ts";
import { BodyDeadlines, DEFAULT_BODY_TIMEOUT_MS } from "../http/body.ts";
import { keepListening, Relistener, type RelistenOptions } from "../http/listener.ts";
import {
  closeAfterAnswer,
  ConnectionGuard,
  type ConnectionLimits,
  type ConnectionPool,
} from "../http/conn_guard.ts";
import {
  type AlpacaDeviceRef,
  AlpacaDevices,
  AlpacaParams,
  AlpacaRequestError,
  type AlpacaSource,
  type MemberResult,
} from "./devices.ts";
import { type ConfiguredDevice, configuredDevices, managementValue } from "./management.ts";
import { deviceSetupPage, serverSetupPage } from "./setup.ts";
import { type DiscoveryHandle, startDiscovery } from "./discovery.ts";

export type { ActionCall, AlpacaActions, AlpacaSource } from "./devices.ts";

/**
 * Largest `PUT` body the Alpaca listener reads, in bytes (1 MiB): room for `SetExternalEvents`
 * with the 256 external events a site holds, each with a `Description` of 1,000 characters,
 * form-encoded (docs/safety.md).
 *
 * @example Usage
 * ```ts
 * import { ALPACA_MAX_BODY } from "./listener.ts";
 * import assert from "node:assert/strict";
 *
 * assert.equal(ALPACA_MAX_BODY, 1048576);
 * ```
 */
export const ALPACA_MAX_BODY = 1024 * 1024;
/** The largest value of `ClientID`, `ClientTransactionID` and `ServerTransactionID` (uint32). */
const UINT32_MAX = 4_294_967_295;

/** What {@linkcode createAlpacaHandler} answers from. */
export interface AlpacaHandlerOptions {
  /** The types registry (the `alpaca` keys of its fields). */
  types: TypesRegistry;
  /** The verdict and the latest events. */
  source: AlpacaSource;
  /** The site's `site_id`, for the `UniqueID`s and the description. */
  siteId: string;
  /** The address the listener is bound to: on loopback, the Host check applies. */
  hostname: string;
  /** Receives an unexpected error of a request (answered 500), for the service log. */
  onError?: (err: unknown) => void;
  /**
   * Longest time, from a request's head, for a `PUT` body to arrive in full (`--body-timeout`).
   * @default {10000}
   */
  bodyTimeoutMs?: number;
}

/**
 * The Alpaca request handler. `info` is what `Deno.serve` (or the connection guard, with the real
 * peer) tells about the connection; the peer's address it gives is recorded with each change made
 * through an action, `unknown` without it.
 */
export type AlpacaHandler = (
  req: Request,
  info?: Deno.ServeHandlerInfo<Deno.NetAddr>,
) => Promise<Response>;

const TEXT = { "content-type": "text/plain; charset=utf-8" };
const HTML = { "content-type": "text/html; charset=utf-8" };
const JSON_TYPE = { "content-type": "application/json" };

/** An answer that is not the Alpaca JSON: plain text (or HTML) with its status. */
class PlainAnswer extends Error {
  constructor(
    readonly status: number,
    message: string,
    readonly html = false,
    /** The methods a 405 names in its `Allow` header. */
    readonly allow?: string,
  ) {
    super(message);
  }
}

/**
 * Creates the Alpaca request handler (docs/safety.md).
 *
 * @param options The registry, the source, the site and the bound address.
 * @returns The handler.
 *
 * @example Usage
 * ```ts
 * import { createAlpacaHandler } from "./listener.ts";
 * import assert from "node:assert/strict";
 *
 * const handler = await createAlpacaHandler({
 *   types: new Map(),
 *   source: { isSafe: () => false, latest: () => undefined, now: Date.now },
 *   siteId: "0b6f9c1e-7a54-4d0e-9a51-3f1c8f1b2d3a",
 *   hostname: "127.0.0.1",
 * });
 * const url = "http://localhost/api/v1/safetymonitor/0/issafe?ClientTransactionID=7";
 * const res = await handler(new Request(url, { headers: { host: "localhost" } }));
 * const body = await res.json();
 * assert.equal(body.Value, false);
 * assert.equal(body.ClientTransactionID, 7);
 * ```
 */
export async function createAlpacaHandler(options: AlpacaHandlerOptions): Promise<AlpacaHandler> {
  const devices = new AlpacaDevices(options.types, options.source);
  const configured = await configuredDevices(options.siteId, devices.devices);
  const loopback = isLoopback(options.hostname);
  const bodies = new BodyDeadlines(options.bodyTimeoutMs ?? DEFAULT_BODY_TIMEOUT_MS);
  // PUTs come seldom and this handler is told no shutdown: the timer goes with the last read.
  bodies.close();
  let serverTransaction = 0;
  const nextTransaction = () =>
    serverTransaction = serverTransaction >= UINT32_MAX ? 1 : serverTransaction + 1;
  const answer = (url: URL, req: Request, peer: string) =>
    respond(req, url, peer, {
      devices,
      configured,
      types: options.types,
      siteId: options.siteId,
      nextTransaction,
      bodies,
    });
  return async (req, info) => {
    try {
      const url = parseRequestUrl(req);
      if (loopback) guardLoopback(req, url);
      if (url === null) throw new PlainAnswer(400, "The Host header is not a valid host and port.");
      // The connection's peer, never a header: a client names no address for itself here.
      return await answer(url, req, peerHost(info) ?? "unknown");
    } catch (err) {
      if (err instanceof PlainAnswer) {
        return new Response(
          err.html ? `<!doctype html><p>${err.message}</p>\n` : `${err.message}\n`,
          {
            status: err.status,
            headers: {
              ...(err.html ? HTML : TEXT),
              ...(err.allow ? { allow: err.allow } : {}),
            },
          },
        );
      }
      if (err instanceof AlpacaRequestError) {
        return new Response(`${err.message}\n`, { status: 400, headers: TEXT });
      }
      if (err instanceof BodyTimeoutError) {
        // Alpaca answers what it cannot take with 400 text; the rest of the body is not waited
        // for (docs/safety.md).
        const text = `The PUT body did not arrive in full within ${
          err.timeoutMs / 1000
        } s of its head; send the form at once (or have the operator raise --body-timeout).\n`;
        return closeAfterAnswer(new Response(text, { status: 400, headers: TEXT }));
      }
      if (err instanceof HttpError) {
        return new Response(`${err.message}\n`, { status: err.status, headers: TEXT });
      }
      options.onError?.(err);
      return new Response("The Alpaca request failed unexpectedly; see the service log.\n", {
        status: 500,
        headers: TEXT,
      });
    }
  };
}

interface Answering {
  devices: AlpacaDevices;
  configured: readonly ConfiguredDevice[];
  types: TypesRegistry;
  siteId: string;
  nextTransaction: () => number;
  bodies: BodyDeadlines;
}

const API_PATH = /^\/api\/v1\/([^/]*)\/([^/]*)\/([^/]*)$/;
const SETUP_PATH = /^\/setup\/v1\/([^/]*)\/([^/]*)\/setup$/;

async function respond(
  req: Request,
  url: URL,
  peer: string,
  at: Answering,
): Promise<Response> {
  const method = req.method;
  const path = url.pathname;
  if (method !== "GET" && method !== "PUT") {
    throw new PlainAnswer(
      405,
      `The Alpaca API answers GET and PUT, not ${method.slice(0, 16)}.`,
      false,
      "GET, PUT",
    );
  }
  const api = API_PATH.exec(path);
  if (api) {
    const [, type, number, member] = api as unknown as [string, string, string, string];
    const device = deviceOf(at.devices, type, number);
    const params = await readParams(req, url, at.bodies);
    const clientId = uint32(params, "ClientID");
    const client = uint32(params, "ClientTransactionID") ?? 0;
    const result = await at.devices.call({
      device,
      method,
      member,
      params,
      peer,
      ...(clientId === undefined ? {} : { clientId }),
    });
    return alpacaJson(result, client, at.nextTransaction());
  }
  if (method !== "GET") {
    throw new PlainAnswer(405, `${path.slice(0, 100)} answers GET only.`, false, "GET");
  }
  if (path.startsWith("/management/")) {
    const params = await readParams(req, url, at.bodies);
    const client = clientTransaction(params);
    const value = managementValue(path, at.siteId, at.configured);
    if (value === undefined) {
      throw new PlainAnswer(
        400,
        "The management API has /management/apiversions, /management/v1/description and /management/v1/configureddevices.",
      );
    }
    return alpacaJson({ value }, client, at.nextTransaction());
  }
  if (path === "/setup" || path === "/setup/") {
    return new Response(serverSetupPage(at.siteId, at.devices.devices), { headers: HTML });
  }
  const setup = SETUP_PATH.exec(path);
  if (setup) {
    const [, type, number] = setup as unknown as [string, string, string];
    const device = at.devices.find(type, number);
    if (device === undefined) {
      throw new PlainAnswer(403, "No such device here: see /setup for the devices.", true);
    }
    return new Response(deviceSetupPage(device, at.types, at.devices), { headers: HTML });
  }
  throw new PlainAnswer(
    404,
    `The Alpaca port serves only ${
      at.devices.devices.map((d) => `/api/v1/${d.type}/${d.number}`).join(", ")
    }, /management and /setup.`,
  );
}

function deviceOf(devices: AlpacaDevices, type: string, number: string): AlpacaDeviceRef {
  const device = devices.find(type, number);
  if (device === undefined) {
    throw new AlpacaRequestError(
      `There is no device ${
        JSON.stringify(`${type.slice(0, 40)}/${number.slice(0, 12)}`)
      } here; the devices are ${
        deviceList(devices.devices)
      } (see /management/v1/configureddevices).`,
    );
  }
  return device;
}

/**
 * The devices as an error names them: `safetymonitor/0, safetymonitor/1 (profile north) and
 * observingconditions/0`.
 */
function deviceList(devices: readonly AlpacaDeviceRef[]): string {
  const names = devices.map((d) =>
    `${d.type}/${d.number}${
      d.profile === undefined || d.number === 0 ? "" : ` (profile ${d.profile})`
    }`
  );
  return names.length < 2 ? names.join("") : `${names.slice(0, -1).join(", ")} and ${names.at(-1)}`;
}

/** The Alpaca JSON answer: always HTTP 200; `Value` whenever the result has one. */
function alpacaJson(result: MemberResult, client: number, server: number): Response {
  const body = {
    ...("value" in result ? { Value: result.value } : {}),
    ClientTransactionID: client,
    ServerTransactionID: server,
    ErrorNumber: "error" in result ? result.error : 0,
    ErrorMessage: "error" in result ? result.message : "",
  };
  return new Response(JSON.stringify(body), { headers: JSON_TYPE });
}

/** `ClientTransactionID` as the answer echoes it (0 when absent); `ClientID` is checked too. */
function clientTransaction(params: AlpacaParams): number {
  uint32(params, "ClientID");
  return uint32(params, "ClientTransactionID") ?? 0;
}

/**
 * A `ClientID` or `ClientTransactionID`: `undefined` when the request has none by that name (a
 * form field with other casing is none), a whole number from 0 to 4294967295 else.
 */
function uint32(params: AlpacaParams, name: string): number | undefined {
  const text = params.get(name);
  if (text === undefined) return undefined;
  const n = Number(text);
  if (!/^\d{1,10}$/.test(text) || n > UINT32_MAX) {
    throw new AlpacaRequestError(
      `${name} must be a whole number from 0 to ${UINT32_MAX}, not ${
        JSON.stringify(text.slice(0, 40))
      }`,
    );
  }
  return n;
}

/**
 * The request's parameters: the query string of a GET (names case-insensitive), the
 * `application/x-www-form-urlencoded` body of a PUT (names case-sensitive; at most
 * {@linkcode ALPACA_MAX_BODY} bytes, within `--body-timeout`).
 */
async function readParams(req: Request, url: URL, bodies: BodyDeadlines): Promise<AlpacaParams> {
  return req.method === "PUT"
    ? AlpacaParams.form(new URLSearchParams(await readForm(req, bodies)))
    : AlpacaParams.query(url.searchParams);
}

async function readForm(req: Request, bodies: BodyDeadlines): Promise<string> {
  const type = (req.headers.get("content-type") ?? "").split(";")[0]!.trim().toLowerCase();
  const declared = Number(req.headers.get("content-length") ?? "NaN");
  if (declared > ALPACA_MAX_BODY) {
    await req.body?.cancel();
    throw tooLarge();
  }
  const bytes = await readBounded(req, bodies);
  if (bytes.length === 0) return "";
  if (type !== "application/x-www-form-urlencoded") {
    throw new AlpacaRequestError(
      `A PUT carries its parameters as application/x-www-form-urlencoded, not ${
        JSON.stringify(type.slice(0, 60) || "(none)")
      }`,
    );
  }
  try {
    return new TextDecoder("utf-8", { fatal: true }).decode(bytes);
  } catch {
    throw new AlpacaRequestError("The PUT body is not valid UTF-8; send the form as UTF-8.");
  }
}

async function readBounded(req: Request, bodies: BodyDeadlines): Promise<Uint8Array> {
  const body = req.body;
  if (body === null) return new Uint8Array();
  try {
    return await bodies.within((signal) => readAtMost(body, ALPACA_MAX_BODY, { signal }));
  } catch (err) {
    throw err instanceof BoundExceededError ? tooLarge() : err;
  }
}

function tooLarge(): AlpacaRequestError {
  return new AlpacaRequestError(
    `The PUT body is over ${ALPACA_MAX_BODY} bytes; send fewer external events at once (at most 256 are held).`,
  );
}

/** Options of {@linkcode startAlpaca}. */
export interface AlpacaOptions extends AlpacaHandlerOptions {
  /** The Alpaca HTTP port; 0 picks a free one (tests). */
  port: number;
  /** The UDP discovery port; 0 turns discovery off. */
  discoveryPort: number;
  /** Whether the connection guard stands in front (default: on a non-loopback host). */
  connectionGuard?: boolean;
  /**
   * The guard's limits (`--head-timeout`, `--idle-timeout`, `--max-conns-per-peer`,
   * `--max-conns`).
   */
  connectionLimits?: ConnectionLimits;
  /** The connections counted against `--max-conns`, shared with the main port's guard. */
  connectionPool?: ConnectionPool;
  /** How the listener is opened again when it ends by itself (EMFILE). */
  relisten?: RelistenOptions;
  /** Receives warn lines. */
  warn: (message: string) => void;
}

/** A running Alpaca listener, from {@linkcode startAlpaca}. */
export interface AlpacaHandle {
  /** The Alpaca HTTP address (with the port picked, for port 0). */
  readonly addr: Deno.NetAddr;
  /** The discovery socket's address, when discovery is on. */
  readonly discovery: { hostname: string; port: number } | undefined;
  /** Stops answering: closes the discovery socket, the guard and the listener. */
  close(): Promise<void>;
}

/**
 * Opens the Alpaca listener and, unless `discoveryPort` is 0, the discovery socket.
 *
 * @param options Where to listen and what to answer.
 * @returns The handle.
 * @throws {Deno.errors.AddrInUse} If a port is taken.
 *
 * @example Usage
 * ```ts ignore
 * const alpaca = await startAlpaca({ ...handlerOptions, port: 11111, discoveryPort: 32227, warn: console.warn });
 * await alpaca.close();
 * ```
 */
export async function startAlpaca(options: AlpacaOptions): Promise<AlpacaHandle> {
  const handler = await createAlpacaHandler(options);
  const guarded = options.connectionGuard ?? !isLoopback(options.hostname);
  const listen = (port: number) =>
    Deno.serve({ hostname: options.hostname, port, onListen: () => {} }, handler);
  let stopped = false;
  const closers: (() => Promise<void>)[] = [];
  const close = async () => {
    stopped = true;
    for (const closer of closers.reverse()) await closer().catch(() => {});
  };
  try {
    let addr: Deno.NetAddr;
    if (guarded) {
      const guard = new ConnectionGuard({
        listener: Deno.listen({ hostname: options.hostname, port: options.port }),
        handler,
        warn: options.warn,
        where: `${hostForUrl(options.hostname)}:${options.port} (Alpaca)`,
        ...(options.connectionLimits ? { limits: options.connectionLimits } : {}),
        ...(options.connectionPool ? { pool: options.connectionPool } : {}),
      });
      const running = guard.run().catch((err) => options.warn(`Alpaca: ${err.message}`));
      closers.push(async () => {
        guard.close();
        guard.closeAll();
        await running;
      });
      addr = guard.addr;
    } else {
      let server = listen(options.port);
      closers.push(() => server.shutdown());
      addr = server.addr;
      relistenAlpaca(server, addr, options, {
        stopped: () => stopped,
        listen: () => listen(server.addr.port),
        replaced: (next) => void (server = next),
      });
    }
    let discovery: DiscoveryHandle | undefined;
    if (options.discoveryPort !== 0) {
      discovery = await startDiscovery({
        hostname: options.hostname,
        port: options.discoveryPort,
        alpacaPort: addr.port,
        warn: options.warn,
      });
      closers.push(() => discovery!.close());
    }
    return { addr, discovery: discovery?.addr, close };
  } catch (err) {
    await close();
    throw err;
  }
}

/**
 * Listens again, on the same port, when `Deno.serve` ends the Alpaca listener on a failed accept
 * (EMFILE), as the main port does (docs/operations.md): the process never ends for it. Should
 * it keep failing for another reason (the port taken by another program), the Alpaca port stays
 * closed, with a warning, and the service goes on recording.
 */
function relistenAlpaca(
  server: Deno.HttpServer<Deno.NetAddr>,
  addr: Deno.NetAddr,
  options: AlpacaOptions,
  on: {
    stopped: () => boolean;
    listen: () => Deno.HttpServer<Deno.NetAddr>;
    replaced: (next: Deno.HttpServer<Deno.NetAddr>) => void;
  },
): void {
  const where = `${hostForUrl(options.hostname)}:${addr.port} (Alpaca)`;
  const relisten = new Relistener(options.relisten ?? {}, options.warn, where);
  keepListening(server, {
    relisten,
    ...on,
    failed: () => {
      options.warn(`${relisten.failure().message}; the Alpaca port stays closed until a restart.`);
      return Promise.resolve();
    },
  });
}
