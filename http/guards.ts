/**
 * The guards every request passes before its route (docs/http-api.md, docs/operations.md): the
 * request URL built from `Host`, the DNS-rebinding guard of a loopback server, the Origin rule of
 * one bound to the network, and the bearer token with its `--public-read` and
 * `--trust-loopback` exceptions.
 *
 * @example Usage
 * ```ts
 * import { isPublicRead } from "./guards.ts";
 * import assert from "node:assert/strict";
 *
 * assert.equal(isPublicRead("GET", "/current/weather"), true);
 * assert.equal(isPublicRead("POST", "/event"), false);
 * ```
 *
 * @module
 */

import { HttpError } from "./problems.ts";

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
const LOOPBACK_HOST_HEADER = /^(?:localhost|127\.0\.0\.1|\[::1\])(?::\d+)?$/i;

/**
 * The request's URL. Deno builds it from the `Host` header, so a Host the URL parser refuses
 * (a port above 65535, `a b`, an unclosed `[::1`) is the client's error, not the server's.
 *
 * @param req The request.
 * @returns The parsed URL.
 * @throws {HttpError} 400 naming the Host header.
 *
 * @example Usage
 * ```ts
 * import { requestUrl } from "./guards.ts";
 * import assert from "node:assert/strict";
 *
 * assert.equal(requestUrl(new Request("http://localhost:6562/health")).pathname, "/health");
 * ```
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
 *
 * @example Usage
 * ```ts
 * import { parseRequestUrl } from "./guards.ts";
 * import assert from "node:assert/strict";
 *
 * assert.equal(parseRequestUrl(new Request("http://localhost/run"))?.pathname, "/run");
 * ```
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

/** Whether an `Origin` is a page served from this machine (`"null"` is not). */
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

/**
 * The host the client addressed: the `Host` header, or over HTTPS (where HTTP/2 carries it as
 * the `:authority` pseudo-header, which Deno puts in the URL and not in the headers) the URL's
 * host. Over plain HTTP a request without `Host` has none: Deno's URL then says `localhost`
 * whatever the client meant. Browsers always send one or the other.
 *
 * @param req The request.
 * @returns `host[:port]` as the client sent it, or `null`.
 */
function requestHost(req: Request): string | null {
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
 *
 * @example Usage
 * ```ts
 * import { guardLoopback } from "./guards.ts";
 * import assert from "node:assert/strict";
 *
 * const req = new Request("http://localhost/", { headers: { host: "evil.example" } });
 * assert.throws(() => guardLoopback(req), /Host "evil.example" is not accepted/);
 * ```
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
 * The bearer-token guard. Its 401 tells a request without a token (no `Authorization`, or one of
 * another scheme) from one whose token is wrong, and never repeats the token it was given
 * (docs/http-api.md#access): the service log's rejection line quotes the `detail`.
 *
 * @param req The request.
 * @param token The token the server requires.
 * @param publicReads The request's URL when reads are public (`--public-read`): the 401 then
 *   names the method and path that needed the token.
 * @throws {HttpError} 401 with `WWW-Authenticate` when it is missing or wrong (a wrong one with
 *   `error="invalid_token"`, as RFC 6750 says).
 *
 * @example Usage
 * ```ts
 * import { guardToken } from "./guards.ts";
 * import assert from "node:assert/strict";
 *
 * const req = new Request("http://localhost/", { headers: { authorization: "Bearer s3cret" } });
 * guardToken(req, "s3cret");
 * assert.throws(() => guardToken(req, "other"), /The token given is not this server's/);
 * assert.throws(() => guardToken(new Request("http://localhost/"), "s3cret"), /none was given/);
 * ```
 */
export function guardToken(req: Request, token: string, publicReads?: URL): void {
  const auth = req.headers.get("authorization");
  const given = bearerToken(auth);
  if (given !== undefined && tokensEqual(given, token)) return;
  const route = publicReads ? ` for ${req.method} ${publicReads.pathname}` : "";
  if (given === undefined) {
    const publicNote = publicReads ? " (only GET and HEAD on the read routes are public)" : "";
    const none = auth === null
      ? "none was given"
      : "the Authorization header holds none (it is not 'Bearer <token>')";
    throw new HttpError(
      401,
      `This server requires a token${route}${publicNote}, and ${none}; send it as 'Authorization: Bearer <token>'.`,
      { "www-authenticate": 'Bearer realm="telemetry"' },
    );
  }
  throw new HttpError(
    401,
    `The token given${route} is not this server's; send the token the service was started with (its --token or OBS_TELEMETRY_TOKEN) as 'Authorization: Bearer <token>'.`,
    { "www-authenticate": 'Bearer realm="telemetry", error="invalid_token"' },
  );
}

function bearerToken(auth: string | null): string | undefined {
  return /^Bearer\s+(.+)$/i.exec(auth ?? "")?.[1]?.trim() || undefined;
}

/**
 * The paths that take line protocol as InfluxDB does (docs/http-api.md): the token is also
 * accepted there in the forms InfluxDB clients send it.
 *
 * @example Usage
 * ```ts
 * import { INFLUX_WRITE_PATHS } from "./guards.ts";
 * import assert from "node:assert/strict";
 *
 * assert.ok(INFLUX_WRITE_PATHS.includes("/api/v2/write"));
 * ```
 */
export const INFLUX_WRITE_PATHS: readonly string[] = ["/write", "/api/v2/write"];

/**
 * The token of a request to an InfluxDB write route, in the forms its clients send it
 * (docs/http-api.md): `Authorization: Token <t>` (2.x clients, Telegraf), `Authorization:
 * Bearer <t>`, the password of `Authorization: Basic` (1.x clients; the user is ignored), or the
 * `p` query parameter (1.x; `u` is ignored). The header wins over the parameter.
 *
 * @param req The request.
 * @param url Its URL.
 * @returns The token given, or `undefined` when there is none in any form.
 *
 * @example Usage
 * ```ts
 * import { influxToken } from "./guards.ts";
 * import assert from "node:assert/strict";
 *
 * const basic = new Request("http://localhost/write", { headers: { authorization: `Basic ${btoa("me:s3cret")}` } });
 * assert.equal(influxToken(basic, new URL(basic.url)), "s3cret");
 * const query = new Request("http://localhost/write?db=x&u=me&p=s3cret");
 * assert.equal(influxToken(query, new URL(query.url)), "s3cret");
 * ```
 */
export function influxToken(req: Request, url: URL): string | undefined {
  const auth = req.headers.get("authorization");
  if (auth !== null) {
    const scheme = /^(\w+)\s+(.+)$/.exec(auth.trim());
    const kind = scheme?.[1]?.toLowerCase();
    const value = scheme?.[2]?.trim();
    if (kind === "token" || kind === "bearer") return value || undefined;
    if (kind === "basic" && value !== undefined) {
      let decoded: string;
      try {
        decoded = new TextDecoder().decode(Uint8Array.from(atob(value), (c) => c.charCodeAt(0)));
      } catch {
        return undefined;
      }
      const colon = decoded.indexOf(":");
      return colon === -1 ? undefined : decoded.slice(colon + 1) || undefined;
    }
  }
  return url.searchParams.get("p") || undefined;
}

/**
 * The token guard of the InfluxDB write routes: {@linkcode guardToken} with the token in any of
 * the forms of {@linkcode influxToken}, and 401s that name them.
 */
function guardInfluxToken(req: Request, url: URL, token: string): void {
  const given = influxToken(req, url);
  if (given !== undefined && tokensEqual(given, token)) return;
  const forms =
    "as 'Authorization: Token <token>', 'Authorization: Bearer <token>', the basic-auth password or the p query parameter";
  if (given === undefined) {
    throw new HttpError(
      401,
      `This server requires a token for ${req.method} ${url.pathname}, and none was given; send it ${forms}.`,
      { "www-authenticate": 'Bearer realm="telemetry"' },
    );
  }
  throw new HttpError(
    401,
    `The token given for ${req.method} ${url.pathname} is not this server's; send the token the service was started with (its --token or OBS_TELEMETRY_TOKEN) ${forms}.`,
    { "www-authenticate": 'Bearer realm="telemetry", error="invalid_token"' },
  );
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
  "/safety",
  "/safety/indi",
  "/stream",
  "/metrics",
  "/history",
];

/**
 * Tells whether a request is a read that `--public-read` lets in without a token.
 *
 * @param method The request method.
 * @param pathname The request path.
 * @returns `true` for `GET`/`HEAD` on a path of {@linkcode PUBLIC_READ_PATHS}.
 *
 * @example Usage
 * ```ts
 * import { isPublicRead } from "./guards.ts";
 * import assert from "node:assert/strict";
 *
 * assert.equal(isPublicRead("HEAD", "/metrics"), true);
 * assert.equal(isPublicRead("DELETE", "/current/weather"), false);
 * ```
 */
export function isPublicRead(method: string, pathname: string): boolean {
  if (method !== "GET" && method !== "HEAD") return false;
  return PUBLIC_READ_PATHS.some((path) =>
    path === pathname || (path.length > 1 && path.endsWith("/") && pathname.startsWith(path) &&
      pathname.length > path.length)
  );
}

/** Who may do what without the token, and how the Host and Origin are checked (docs/http-api.md, docs/operations.md). *
 * @example Usage
 * ```ts
 * import type { AccessPolicy } from "./guards.ts";
 *
 * const policy: AccessPolicy = { loopbackBind: true, token: "s3cret", publicRead: true };
 * ```
 */
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
 *
 * @example Usage
 * ```ts
 * import { guardOrigin } from "./guards.ts";
 * import assert from "node:assert/strict";
 *
 * const req = new Request("http://10.0.0.5:6562/", { headers: { origin: "https://evil.example" } });
 * assert.throws(() => guardOrigin(req, new URL(req.url)), /origin "https:\/\/evil.example"/);
 * ```
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
 * for `/health` and `/ping`; not for a public read under `--public-read`; not, under `--trust-loopback`,
 * for a request from a loopback peer whose `Host` is a loopback name and whose `Origin`, if
 * any, is loopback. Host and Origin themselves are checked before this, in every mode.
 *
 * @param req The request.
 * @param url Its URL.
 * @param peer The peer's address (`info.remoteAddr.hostname`), `undefined` when unknown.
 * @param policy The server's access settings.
 * @throws {HttpError} 401 when the token is needed and missing or wrong.
 *
 * @example Usage
 * ```ts
 * import { guardAccess } from "./guards.ts";
 * import assert from "node:assert/strict";
 *
 * const policy = { loopbackBind: true, token: "s3cret", trustLoopback: true };
 * const req = new Request("http://localhost:6562/current", { headers: { host: "localhost:6562" } });
 * guardAccess(req, new URL(req.url), "127.0.0.1", policy); // a loopback peer needs no token
 * assert.throws(() => guardAccess(req, new URL(req.url), "10.0.0.9", policy), /requires a token/);
 * ```
 */
export function guardAccess(
  req: Request,
  url: URL,
  peer: string | undefined,
  policy: AccessPolicy,
): void {
  const { token } = policy;
  // `/ping` is InfluxDB's `/health`: clients probe it before they send their token.
  if (token === undefined || url.pathname === "/health" || url.pathname === "/ping") return;
  if (policy.publicRead && isPublicRead(req.method, url.pathname)) return;
  if (policy.trustLoopback && peer !== undefined && isLoopback(peer)) {
    const host = requestHost(req);
    const origin = req.headers.get("origin");
    if (
      host !== null && LOOPBACK_HOST_HEADER.test(host) &&
      (origin === null || isLoopbackOrigin(origin))
    ) return;
  }
  if (INFLUX_WRITE_PATHS.includes(url.pathname)) return guardInfluxToken(req, url, token);
  guardToken(req, token, policy.publicRead ? url : undefined);
}

/**
 * The peer's address, `undefined` when unknown (a direct call in tests, a Unix socket).
 *
 * @param info What `Deno.serve` tells about the connection.
 * @returns The peer's host, such as `127.0.0.1`.
 *
 * @example Usage
 * ```ts
 * import { peerHost } from "./guards.ts";
 * import assert from "node:assert/strict";
 *
 * assert.equal(peerHost(undefined), undefined);
 * ```
 */
export function peerHost(info: Deno.ServeHandlerInfo | undefined): string | undefined {
  const peer = info?.remoteAddr;
  return peer && "hostname" in peer ? peer.hostname : undefined;
}
