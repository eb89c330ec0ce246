/**
 * The one derivation of the service's Deno permissions from the `run` flag table
 * (docs/cli.md#permissions): every row of `RUN_FLAGS` that says what its value needs (`grants`)
 * adds that and nothing else. `spawnServer()`, the launcher behind `deno task start` and the
 * installed `obs-utils`, the systemd unit and the compile tasks all use these flags.
 *
 * @example Usage
 * ```ts
 * import { runPermissionFlags } from "./permissions.ts";
 * import assert from "node:assert/strict";
 *
 * const flags = runPermissionFlags({ siteDir: "/srv/t", host: "localhost", port: 7000 });
 * assert.equal(flags[0], "--allow-net=localhost:7000");
 * assert.equal(flags[1], "--allow-read=/srv/t");
 * ```
 *
 * @module
 */

import { hostForUrl, readEnv } from "../wire/address.ts";
import { isLoopback } from "../http/guards.ts";
import { INTERNAL_HOST } from "../http/conn_guard.ts";
import { DEFAULT_ALPACA_DISCOVERY_PORT } from "../alpaca/discovery.ts";
import { RUN_FLAGS, type RunFlag, type RunFlagValues, SERVER_ENV_VARS } from "./flags.ts";

/** The values a permission derivation needs: where the service listens and stores, at least. */
export type PermissionValues =
  & Pick<RunFlagValues, "siteDir" | "host" | "port">
  & Partial<RunFlagValues>;

/** The paths of the rows that grant `kind`, in the order of the table. */
function pathsOf(values: PermissionValues, kind: RunFlag["grants"]): string[] {
  return RUN_FLAGS.filter((flag) => flag.grants === kind).flatMap((flag) => {
    const value: unknown = values[flag.key];
    if (value === undefined) return [];
    return Array.isArray(value) ? value.map(String) : [String(value)];
  });
}

/** The value of the one row that grants `kind` (the host, the port). */
function netPart(values: PermissionValues, kind: "net-host" | "net-port"): string {
  const flag = RUN_FLAGS.find((row) => row.grants === kind);
  if (flag === undefined) throw new Error(`no run flag grants ${kind}`);
  return String(values[flag.key]);
}

/**
 * The scoped Deno permission flags of a service run with these flag values: net for its one
 * address and the hosts it notifies (`--notify`), read and write for the directories it stores in, read for the files it reads once,
 * the `OBS_TELEMETRY_*` variables of the table and the free space of its file system. Nothing
 * more.
 *
 * @param values The `run` flag values (as `resolveRunFlags()` returns them); paths are granted
 *   as given, so a relative one is relative to the directory the service starts in.
 * @param extraEnv Variables granted besides {@linkcode SERVER_ENV_VARS} (the launcher's mark).
 * @returns Flags for `deno run` or `deno compile`, in a fixed order.
 *
 * @example Usage
 * ```ts
 * import { runPermissionFlags } from "./permissions.ts";
 * import assert from "node:assert/strict";
 *
 * const flags = runPermissionFlags({
 *   siteDir: "/srv/t",
 *   host: "0.0.0.0",
 *   port: 6562,
 *   typesFile: "/etc/obs/types.json",
 * });
 * assert.deepEqual(flags.slice(0, 3), [
 *   "--allow-net=0.0.0.0:6562,127.0.0.1",
 *   "--allow-read=/srv/t,/etc/obs/types.json",
 *   "--allow-write=/srv/t",
 * ]);
 * ```
 */
export function runPermissionFlags(
  values: PermissionValues,
  extraEnv: readonly string[] = [],
): string[] {
  const stored = pathsOf(values, "read-write");
  const read = [...stored, ...pathsOf(values, "read")];
  const bind = netPart(values, "net-host");
  const host = hostForUrl(bind);
  // Bound to the network over HTTPS, the service's Deno.serve listens on an internal 127.0.0.1
  // port behind the connection guard (docs/operations.md, "Connections"), picked at start: any
  // port there. Over plain HTTP the guard needs none, but a unit's flags stay the same either way.
  const internal = isLoopback(bind) ? "" : `,${INTERNAL_HOST}`;
  const receivers = connectTargets(pathsOf(values, "net-connect")).map((target) => `,${target}`);
  return [
    netFlag(
      `${host}:${netPart(values, "net-port")}${internal}${receivers.join("")}${
        alpacaNet(values, bind)
      }`,
    ),
    `--allow-read=${read.join(",")}`,
    `--allow-write=${stored.join(",")}`,
    `--allow-env=${[...SERVER_ENV_VARS, ...extraEnv].join(",")}`,
    // Free space of the site directory's file system (telemetry_disk_free_bytes, --min-free).
    "--allow-sys=statfs",
  ];
}

/**
 * The `host:port` each URL connects to, as `--allow-net` names it (the scheme's port when the URL
 * has none), without repeats: the notification receivers (docs/safety.md#notifications).
 */
function connectTargets(urls: readonly string[]): string[] {
  return [
    ...new Set(urls.map((text) => {
      const url = new URL(text);
      return `${url.hostname}:${url.port || (url.protocol === "https:" ? "443" : "80")}`;
    })),
  ];
}

/**
 * What the Alpaca flags add to `--allow-net` (docs/cli.md#permissions): the Alpaca port on the
 * host, and for discovery its UDP port plus the askers it answers. A UDP answer goes to whoever
 * asked: on loopback that is 127.0.0.1 or ::1 (any port); bound to the network it is any address
 * of the network, which Deno cannot scope, so `--allow-net` is then granted without a list
 * (`*`).
 */
function alpacaNet(values: PermissionValues, bind: string): string {
  const alpaca = valueOf(values, "net-alpaca");
  if (alpaca === undefined) return "";
  const host = hostForUrl(bind);
  const discovery = valueOf(values, "net-discovery") ?? String(DEFAULT_ALPACA_DISCOVERY_PORT);
  // Behind the connection guard on a network bind, 127.0.0.1 (any port) is granted already.
  const tcp = `,${host}:${alpaca}`;
  if (discovery === "0") return tcp;
  if (!isLoopback(bind)) return "*";
  const udpHost = bind === "localhost" ? "127.0.0.1" : host;
  const own = udpHost === "127.0.0.1" || udpHost === "[::1]" ? "" : `,${udpHost}:${discovery}`;
  return `${tcp}${own},127.0.0.1,[::1]`;
}

/** The value of the one row that grants `kind`, or `undefined` when it is not set. */
function valueOf(values: PermissionValues, kind: RunFlag["grants"]): string | undefined {
  const flag = RUN_FLAGS.find((row) => row.grants === kind);
  const value: unknown = flag === undefined ? undefined : values[flag.key];
  return value === undefined ? undefined : String(value);
}

/** `--allow-net=<list>`, or `--allow-net` alone when the list holds `*` (any address). */
function netFlag(list: string): string {
  return list.endsWith("*") ? "--allow-net" : `--allow-net=${list}`;
}

/**
 * The `run` flags whose values grant a permission of this kind, for advice that names a flag
 * the operator can set (docs/cli.md#permissions).
 *
 * @param kind The kind of a denied access as Deno names it: `net`, `read` or `write`.
 * @returns The flags, such as `["--host", "--port", "--notify"]`; empty for a kind no flag
 *   grants.
 *
 * @example Usage
 * ```ts
 * import { flagsGranting } from "./permissions.ts";
 * import assert from "node:assert/strict";
 *
 * assert.deepEqual(flagsGranting("net"), [
 *   "--host",
 *   "--port",
 *   "--alpaca-port",
 *   "--alpaca-discovery-port",
 *   "--notify",
 * ]);
 * ```
 */
export function flagsGranting(kind: string): string[] {
  const kinds: Record<string, readonly string[]> = {
    net: ["net-host", "net-port", "net-connect", "net-alpaca", "net-discovery"],
    read: ["read", "read-write"],
    write: ["read-write"],
  };
  const wanted = kinds[kind] ?? [];
  return RUN_FLAGS.filter((flag) => flag.grants !== undefined && wanted.includes(flag.grants))
    .map((flag) => `--${flag.name}`);
}

/**
 * The variable the launcher sets in the service it starts (and grants it alone besides
 * {@linkcode SERVER_ENV_VARS}), so the service's advice names a `run` flag, never a Deno flag
 * the operator cannot add to the launcher's command line.
 */
export const LAUNCHED_ENV = "OBS_TELEMETRY_LAUNCHED";

/** Whether this process is the service the launcher started. */
function launched(): boolean {
  return readEnv(LAUNCHED_ENV) === "1";
}

/**
 * One line for a permission the service was denied, naming what the operator can change: the
 * `run` flags under the launcher, `deno task compile`'s flags in a compiled binary, and the Deno
 * flag to add when the operator wrote the `deno run` line themselves.
 *
 * @param err A `Deno.errors.NotCapable`.
 * @returns The line, without the `error: ` prefix.
 *
 * @example Usage
 * ```ts
 * import { permissionAdvice } from "./permissions.ts";
 * import assert from "node:assert/strict";
 *
 * const err = new Error('Requires net access to "localhost:7000", run again with the --allow-net flag');
 * assert.match(permissionAdvice(err), /add --allow-net=localhost:7000$/);
 * ```
 */
export function permissionAdvice(err: Error): string {
  const m = /Requires (\w+) access to "?([^",]+)"?/.exec(err.message);
  if (!m) return `Permission denied: ${err.message.split("\n")[0]}`;
  const [, kind, target] = m as unknown as [string, string, string];
  const denied = `Permission denied: requires ${kind} access to ${target}`;
  if (kind === "all") {
    // A path below /dev, /proc or /sys (relative, or a flag without a check of its own): Deno
    // opens one only under --allow-all, which no scoped program should hold.
    return `${denied}; Deno opens paths below /dev, /proc and /sys only with --allow-all, which the service is never given: choose a path elsewhere (${
      flagsGranting("read").join(", ")
    })`;
  }
  const flags = flagsGranting(kind).join(", ");
  if (launched()) {
    return flags === ""
      ? `${denied}; the service needs no such access: please report this`
      : `${denied}; the service is allowed only what its run flags name: give it with ${flags}`;
  }
  if (Deno.build.standalone) {
    return `${denied}; this binary holds the permissions of 'deno task compile' (port 6562 on localhost, ./telemetry); for other run flags use the 'obs-utils' of 'deno task install'`;
  }
  return `${denied}; add --allow-${kind}=${target}`;
}
