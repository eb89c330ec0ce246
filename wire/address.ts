/**
 * Where the service is by default, how its address is written, and how a client resolves its
 * address and token from its options and the environment; shared by the client, the server and
 * the command line. Web APIs only: Node and browsers import it through `client.ts`.
 *
 * @module
 */

/** Default port of the service (docs/http-api.md). */
export const DEFAULT_PORT = 6562;
/** Default host of the service (docs/http-api.md). */
export const DEFAULT_HOST = "localhost";

/**
 * Writes a host for a URL or a `host:port` pair: an IPv6 address gets its brackets, anything
 * else (a name, an IPv4 address, an already bracketed address) is left as it is.
 *
 * @param host A host name or an IP address.
 * @returns The host as it stands in a URL.
 *
 * @example Usage
 * ```ts
 * import { hostForUrl } from "./address.ts";
 * import assert from "node:assert/strict";
 *
 * assert.equal(hostForUrl("::1"), "[::1]");
 * assert.equal(hostForUrl("[::1]"), "[::1]");
 * assert.equal(hostForUrl("localhost"), "localhost");
 * ```
 */
export function hostForUrl(host: string): string {
  return host.includes(":") && !host.startsWith("[") ? `[${host}]` : host;
}

/** The slice of the Deno and Node globals that reading the environment may use, all optional. */
interface RuntimeGlobals {
  Deno?: {
    env?: { get(name: string): string | undefined };
    permissions?: { querySync?(desc: { name: "env"; variable: string }): { state: string } };
  };
  process?: { env?: Record<string, string | undefined> };
}

/**
 * Reads an environment variable on Deno or Node, without a prompt and without throwing when
 * Deno's `--allow-env` does not cover it; an empty value counts as unset.
 *
 * @param name The variable, for example `"OBS_TELEMETRY_PORT"`.
 * @returns Its value, or `undefined` when unset, empty, unreadable or in a browser.
 *
 * @example Usage
 * ```ts
 * import { readEnv } from "./address.ts";
 * import assert from "node:assert/strict";
 *
 * assert.equal(readEnv("OBS_TELEMETRY_SURELY_UNSET_VARIABLE"), undefined);
 * ```
 */
export function readEnv(name: string): string | undefined {
  const g = globalThis as RuntimeGlobals;
  try {
    if (g.Deno) {
      // A missing --allow-env must neither throw nor prompt, so ask before reading.
      const state = g.Deno.permissions?.querySync?.({ name: "env", variable: name }).state;
      return (state === "granted" ? g.Deno.env?.get(name) : undefined) || undefined;
    }
    return g.process?.env?.[name] || undefined;
  } catch {
    return undefined;
  }
}

/** Set once the client has said that Deno would not let it read its variables. */
let warnedUnreadable = false;

/**
 * {@linkcode readEnv} for a client default: the first time a variable is needed that Deno may
 * not read (no `--allow-env` for it, not explicitly denied), says once on the console that a
 * value set there is ignored and how to grant it. Deno cannot tell whether an unreadable
 * variable is set, so the line says "if".
 */
function clientEnv(name: string): string | undefined {
  const g = globalThis as RuntimeGlobals;
  if (!warnedUnreadable && g.Deno) {
    let state: string | undefined;
    try {
      state = g.Deno.permissions?.querySync?.({ name: "env", variable: name }).state;
    } catch {
      state = undefined;
    }
    if (state === "prompt") {
      warnedUnreadable = true;
      // deno-lint-ignore no-console
      console.warn(
        `@obs-utils/telemetry client: Deno may not read ${name}; if it is set, it is ignored and the default applies. Run with --allow-env=OBS_TELEMETRY_HOST,OBS_TELEMETRY_PORT,OBS_TELEMETRY_TOKEN or pass the value to the client.`,
      );
    }
  }
  return readEnv(name);
}

/** Where a client finds the service, as {@linkcode resolveBaseUrl} takes it. */
export interface AddressOptions {
  /** Base address; when given, `host` and `port` are ignored and a path prefix is kept. */
  baseUrl?: string | URL;
  /** Host, IPv6 with or without brackets; else `OBS_TELEMETRY_HOST`, else {@linkcode DEFAULT_HOST}. */
  host?: string;
  /** Port; else `OBS_TELEMETRY_PORT`, else {@linkcode DEFAULT_PORT}. */
  port?: number;
}

/**
 * Resolves the client's base address: `baseUrl`, else `host`/`port`, else the environment
 * variables `OBS_TELEMETRY_HOST`/`OBS_TELEMETRY_PORT` (see {@linkcode readEnv}), else
 * `localhost:6562`.
 *
 * @param options The address as the caller gave it; unchecked values are checked here.
 * @returns An origin plus any path prefix, without a trailing `/`.
 * @throws {TypeError} If `baseUrl` is not an absolute http(s) URL or `host` is malformed.
 * @throws {RangeError} If `port` or `OBS_TELEMETRY_PORT` is not an integer from 1 to 65535.
 *
 * @example Usage
 * ```ts
 * import { resolveBaseUrl } from "./address.ts";
 * import assert from "node:assert/strict";
 *
 * assert.equal(resolveBaseUrl({ host: "::1", port: 8080 }), "http://[::1]:8080");
 * assert.equal(resolveBaseUrl({ baseUrl: "https://example.org/telemetry/" }), "https://example.org/telemetry");
 * ```
 */
export function resolveBaseUrl(options: AddressOptions): string {
  if (options.baseUrl !== undefined) {
    const raw = String(options.baseUrl);
    let url: URL;
    try {
      url = new URL(raw);
    } catch (err) {
      throw new TypeError(
        `Cannot use baseUrl "${raw}": not an absolute URL; pass something like "http://127.0.0.1:6562"`,
        { cause: err },
      );
    }
    if (url.protocol !== "http:" && url.protocol !== "https:") {
      throw new TypeError(`Cannot use baseUrl "${raw}": the scheme must be http: or https:`);
    }
    return `${url.origin}${url.pathname.replace(/\/+$/, "")}`;
  }
  let host = options.host;
  if (host !== undefined && (typeof host !== "string" || host === "")) {
    throw new TypeError(`Cannot use host ${JSON.stringify(host)}: expected a non-empty string`);
  }
  host ??= clientEnv("OBS_TELEMETRY_HOST") || DEFAULT_HOST;
  let port: number;
  if (options.port !== undefined) {
    port = checkPort(options.port, "port");
  } else {
    const fromEnv = clientEnv("OBS_TELEMETRY_PORT");
    port = fromEnv ? checkPort(Number(fromEnv), `OBS_TELEMETRY_PORT "${fromEnv}"`) : DEFAULT_PORT;
  }
  host = hostForUrl(host);
  const url = `http://${host}:${port}`;
  try {
    return new URL(url).origin;
  } catch (err) {
    throw new TypeError(`Cannot use host "${host}": "${url}" is not a valid URL`, { cause: err });
  }
}

function checkPort(port: unknown, what: string): number {
  if (typeof port !== "number" || !Number.isInteger(port) || port < 1 || port > 65535) {
    throw new RangeError(
      `Cannot use ${
        what === "port" ? `port ${String(port)}` : what
      } as a port: expected an integer from 1 to 65535`,
    );
  }
  return port;
}

/**
 * The client's bearer token: the one given, else `OBS_TELEMETRY_TOKEN` (see
 * {@linkcode readEnv}). The caller checks its shape.
 *
 * @param token The token as the caller gave it, if any.
 * @returns The token to send, or `undefined` for none.
 *
 * @example Usage
 * ```ts
 * import { resolveToken } from "./address.ts";
 * import assert from "node:assert/strict";
 *
 * assert.equal(resolveToken("s3cret"), "s3cret");
 * ```
 */
export function resolveToken(token: string | undefined): string | undefined {
  return token ?? clientEnv("OBS_TELEMETRY_TOKEN");
}
