/**
 * The implementation behind the `publish.ts` entry point; its module documentation is there.
 *
 * @module
 */

import { resolve } from "node:path";
import { resolveBaseUrl } from "../wire/address.ts";
import { spawnDeno } from "../process/spawn.ts";
import { MQTT_IGNORED_ENV } from "../collect/inputs/mqtt_socket.ts";
import { PUBLISH_TO_ENV, PublishOptionsError, publishSettings } from "./options.ts";

export {
  type BrokerAddress,
  checkTopicPrefix,
  DEFAULT_DISCOVERY_PREFIX,
  DEFAULT_PREFIX,
  parseBrokerUrl,
  PUBLISH_TO_ENV,
  type PublishFlags,
  PublishOptionsError,
  type PublishSettings,
  publishSettings,
} from "./options.ts";
export { IN_FLIGHT, type PublishLog } from "./broker.ts";
export type { FieldInfo } from "../client/types.ts";
export { type Availability, availability, type FreshnessRule } from "./availability.ts";
export {
  discoveryConfigs,
  type DiscoveryInput,
  type RegisteredType,
  unitClass,
  valueTemplate,
} from "./discovery.ts";
export { idPart, jinjaString, topicLevel } from "./names.ts";
export { LatestOutbox, type OutboxMessage } from "./outbox.ts";
export { profilesOf, Publisher, type PublisherOptions } from "./publisher.ts";
export { SITE_PROFILE, SiteTopics } from "./topics.ts";

/** Environment variables the publisher may read: `--to`, and the service's address and token. */
export const PUBLISH_ENV_VARS: readonly string[] = [
  PUBLISH_TO_ENV,
  "OBS_TELEMETRY_HOST",
  "OBS_TELEMETRY_PORT",
  "OBS_TELEMETRY_TOKEN",
];

/** What a publisher's permissions follow from: the broker, its CA, the service. */
export interface PublishTarget {
  /** The broker, `mqtt://[user:password@]host:port` or `mqtts://...` (`--to`). */
  to: string;
  /** A PEM file of the CA that signed an `mqtts://` broker's certificate (`--ca`). */
  ca?: string;
  /** The service's host. @default {OBS_TELEMETRY_HOST, else "localhost"} */
  host?: string;
  /** The service's port. @default {OBS_TELEMETRY_PORT, else 6562} */
  port?: number;
}

/** The flags checked, the service's address, and the CA file as an absolute path. */
function targetOf(options: SpawnPublisherOptions) {
  const settings = publishSettings({
    to: options.to,
    prefix: options.prefix,
    discoveryPrefix: options.discoveryPrefix,
    noDiscovery: options.discovery === false,
    ca: options.ca,
  }, () => undefined);
  let service: URL;
  try {
    service = new URL(resolveBaseUrl({
      ...(options.host !== undefined ? { host: options.host } : {}),
      ...(options.port !== undefined ? { port: options.port } : {}),
    }));
  } catch (err) {
    const flag = options.host !== undefined && !(err instanceof RangeError) ? "--host" : "--port";
    throw new PublishOptionsError(flag, `cannot be used: ${(err as Error).message}`);
  }
  return {
    ...settings,
    ca: settings.ca === undefined ? undefined : resolve(settings.ca),
    service: { hostname: service.hostname, port: Number(service.port || 80) },
  };
}

/**
 * The Deno permission flags of a publisher (docs/publish.md, "Permissions"): net to the broker
 * and the service only, read the `--ca` file only, its variables, and MQTT.js's two variables as
 * unset (`--ignore-env=DEBUG,READABLE_STREAM`, as for the collector).
 *
 * @param options The broker, its CA, the service.
 * @returns The `--allow-*` and `--ignore-env` flags.
 * @throws {PublishOptionsError} For a `--to`, `--ca`, `--host` or `--port` it cannot use.
 *
 * @example Usage
 * ```ts
 * import { publishPermissionFlags } from "./publish.ts";
 * import assert from "node:assert/strict";
 *
 * const flags = publishPermissionFlags({ to: "mqtt://ha:secret@10.0.0.2", host: "127.0.0.1", port: 6562 });
 * assert.deepEqual(flags, [
 *   "--allow-net=10.0.0.2:1883,127.0.0.1:6562",
 *   "--allow-env=OBS_TELEMETRY_PUBLISH,OBS_TELEMETRY_HOST,OBS_TELEMETRY_PORT,OBS_TELEMETRY_TOKEN",
 *   "--ignore-env=DEBUG,READABLE_STREAM",
 * ]);
 * ```
 */
export function publishPermissionFlags(options: PublishTarget): string[] {
  const { broker, ca, service } = targetOf(options);
  const net = new Set([`${broker.host}:${broker.port}`, `${service.hostname}:${service.port}`]);
  return [
    `--allow-net=${[...net].join(",")}`,
    ...(ca === undefined ? [] : [`--allow-read=${ca}`]),
    `--allow-env=${PUBLISH_ENV_VARS.join(",")}`,
    `--ignore-env=${[...MQTT_IGNORED_ENV].sort().join(",")}`,
  ];
}

/** Options of {@linkcode spawnPublisher} and {@linkcode publisherArgs}: the flags of `publish`. */
export interface SpawnPublisherOptions extends PublishTarget {
  /** The topic prefix (`--prefix`). @default {"obs"} */
  prefix?: string;
  /** The Home Assistant discovery prefix (`--discovery-prefix`). @default {"homeassistant"} */
  discoveryPrefix?: string;
  /** `false` publishes no discovery configs (`--no-discovery`). @default {true} */
  discovery?: boolean;
  /** The service speaks HTTPS (`--tls`). */
  tls?: boolean;
  /** The service's token, handed over in the child's environment (not on its command line). */
  token?: string;
  /**
   * Where the child's output goes.
   * @default {"inherit"}
   */
  output?: "inherit" | "null" | "piped";
}

/**
 * The `deno` arguments that run a publisher under its scoped permissions: what
 * {@linkcode spawnPublisher} runs. The broker URL (which may hold a password) and the token are
 * not among them: the child reads them from {@linkcode publisherEnv}'s variables.
 *
 * @param options The flags.
 * @returns The arguments after `deno`.
 * @throws {PublishOptionsError} For a flag value it cannot use.
 *
 * @example Usage
 * ```ts ignore
 * import { publisherArgs } from "@obs-utils/telemetry/publish";
 * console.log(["deno", ...publisherArgs({ to: "mqtt://127.0.0.1:1883" })].join(" "));
 * ```
 */
export function publisherArgs(options: SpawnPublisherOptions): string[] {
  const { ca, service, prefix, discoveryPrefix } = targetOf(options);
  return [
    "run",
    "--no-prompt",
    ...publishPermissionFlags(options),
    new URL("../cli/publish_main.ts", import.meta.url).href,
    "--host",
    service.hostname.replace(/^\[|\]$/g, ""),
    "--port",
    String(service.port),
    "--prefix",
    prefix,
    ...(discoveryPrefix === undefined
      ? ["--no-discovery"]
      : ["--discovery-prefix", discoveryPrefix]),
    ...(ca === undefined ? [] : ["--ca", ca]),
    ...(options.tls ? ["--tls"] : []),
  ];
}

/**
 * The variables a publisher started with {@linkcode publisherArgs} reads its broker URL and its
 * token from.
 *
 * @param options The broker URL and the token.
 * @returns `OBS_TELEMETRY_PUBLISH`, and `OBS_TELEMETRY_TOKEN` when a token is given.
 *
 * @example Usage
 * ```ts
 * import { publisherEnv } from "./publish.ts";
 * import assert from "node:assert/strict";
 *
 * assert.deepEqual(publisherEnv({ to: "mqtt://127.0.0.1:1883" }), {
 *   OBS_TELEMETRY_PUBLISH: "mqtt://127.0.0.1:1883",
 * });
 * ```
 */
export function publisherEnv(
  options: Pick<SpawnPublisherOptions, "to" | "token">,
): Record<string, string> {
  return {
    [PUBLISH_TO_ENV]: options.to,
    ...(options.token !== undefined ? { OBS_TELEMETRY_TOKEN: options.token } : {}),
  };
}

/** A publisher running as its own process. */
export interface SpawnedPublisher extends AsyncDisposable {
  /** The child process. */
  readonly process: Deno.ChildProcess;
  /** Its process id. */
  readonly pid: number;
  /**
   * Asks it to stop (SIGTERM: it publishes every verdict unsafe and the status `offline`, for at
   * most 2 s) and waits for it.
   */
  stop(): Promise<Deno.CommandStatus>;
}

/**
 * Starts `obs-utils telemetry publish` as a child process with the scoped permissions of
 * {@linkcode publishPermissionFlags}, its broker URL and token in its environment. It runs until
 * stopped; its log goes to `output`.
 *
 * @param options The flags and where the output goes.
 * @returns The running publisher.
 * @throws {PublishOptionsError} For a flag value it cannot use (before anything starts).
 *
 * @example Usage
 * ```ts ignore
 * import { spawnPublisher } from "@obs-utils/telemetry/publish";
 * await using publisher = spawnPublisher({ to: "mqtt://127.0.0.1:1883", port: 6562 });
 * ```
 */
export function spawnPublisher(options: SpawnPublisherOptions): SpawnedPublisher {
  const args = publisherArgs(options);
  return spawnDeno({
    args,
    env: publisherEnv(options),
    output: options.output ?? "inherit",
    // A publisher's last words take at most 2 s after SIGTERM; one stuck past 10 s is killed.
    killAfterMs: 10_000,
  });
}
