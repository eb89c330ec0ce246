/**
 * Where the service is by default and how its address is written, shared by the client, the
 * server and the command line. Web APIs only: Node and browsers import it through `client.ts`.
 *
 * @module
 */

/** Default port of the service (SPEC 4). */
export const DEFAULT_PORT = 6562;
/** Default host of the service (SPEC 4). */
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
 * import { hostForUrl } from "./_address.ts";
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
 * import { readEnv } from "./_address.ts";
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
