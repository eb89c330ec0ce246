/**
 * The implementation behind the `collect.ts` entry point; its module documentation is there.
 *
 * @module
 */

import { resolve } from "node:path";
import { DEFAULT_HOST, DEFAULT_PORT, readEnv } from "../wire/address.ts";
import { type CollectConfig, readCollectConfig } from "./config.ts";
import { INPUT_KINDS } from "./inputs/mod.ts";
import { spawnDeno } from "../process/spawn.ts";

export {
  type CollectConfig,
  CollectConfigError,
  type CollectInputConfig,
  type InputSettings,
  parseCollectConfig,
  readCollectConfig,
} from "./config.ts";
export type {
  ConfigAt,
  FieldReading,
  Input,
  InputCommon,
  InputKind,
  InputSink,
  RecordReading,
} from "./inputs/input.ts";
export { INPUT_KINDS } from "./inputs/mod.ts";
export type { EventInput } from "../client/types.ts";
export type { JsonObject } from "../wire/event.ts";
export {
  Collector,
  type CollectorOptions,
  type InputNeverUp,
  type OnceReport,
} from "./collector.ts";
export { type CollectLog, DEFAULT_QUEUE_CAPACITY, Outbox } from "./outbox.ts";

/** Environment variables the collector may read. */
export const COLLECT_ENV_VARS: readonly string[] = [
  "OBS_TELEMETRY_COLLECT",
  "OBS_TELEMETRY_HOST",
  "OBS_TELEMETRY_PORT",
  "OBS_TELEMETRY_TOKEN",
];

/** Where the service is, for a collector's `--allow-net`. */
export interface CollectService {
  /** Its host. @default {OBS_TELEMETRY_HOST, else "localhost"} */
  host?: string;
  /** Its port. @default {OBS_TELEMETRY_PORT, else 6562} */
  port?: number;
}

/**
 * The Deno permission flags of a collector (docs/collect.md, "Permissions"): net to its inputs'
 * hosts and the service only, read its config and its `file` inputs only, its variables, and
 * the variables its inputs' libraries read, as unset (`--ignore-env=DEBUG,READABLE_STREAM` with
 * an MQTT input).
 *
 * @param config The parsed config (its `file` is the path read).
 * @param service Where the service is.
 * @returns The `--allow-*` flags.
 *
 * @example Usage
 * ```ts
 * import { collectPermissionFlags, parseCollectConfig, INPUT_KINDS } from "./collect.ts";
 * import assert from "node:assert/strict";
 *
 * const config = parseCollectConfig(
 *   '{"inputs": [{"name": "w", "kind": "http", "type": "weather", "url": "http://10.0.0.5:8080/now"}]}',
 *   "/etc/collect.json",
 *   INPUT_KINDS,
 * );
 * const flags = collectPermissionFlags(config, { host: "127.0.0.1", port: 6562 });
 * assert.equal(flags[0], "--allow-net=10.0.0.5:8080,127.0.0.1:6562");
 * assert.equal(flags[1], "--allow-read=/etc/collect.json");
 * ```
 */
export function collectPermissionFlags(
  config: CollectConfig,
  service: CollectService = {},
): string[] {
  const { host, port } = serviceAddress(service);
  const net = new Set<string>();
  const read = new Set<string>([resolve(config.file)]);
  const ignored = new Set<string>();
  for (const input of config.inputs) {
    const needs = input.kind.needs?.(input.config) ?? {};
    for (const h of needs.net ?? []) net.add(h);
    for (const f of needs.read ?? []) read.add(resolve(f));
    for (const v of needs.ignoreEnv ?? []) ignored.add(v);
  }
  net.add(`${host.includes(":") ? `[${host}]` : host}:${port}`);
  return [
    `--allow-net=${[...net].join(",")}`,
    `--allow-read=${[...read].join(",")}`,
    `--allow-env=${COLLECT_ENV_VARS.join(",")}`,
    // The variables an input's library reads read as unset, by name: MQTT.js's, when the config
    // has an MQTT input (docs/collect.md, "Permissions"). Any other one still fails loudly.
    ...(ignored.size > 0 ? [`--ignore-env=${[...ignored].sort().join(",")}`] : []),
  ];
}

function serviceAddress(service: CollectService): { host: string; port: number } {
  const host = service.host ?? readEnv("OBS_TELEMETRY_HOST") ?? DEFAULT_HOST;
  const port = service.port ?? Number(readEnv("OBS_TELEMETRY_PORT") ?? DEFAULT_PORT);
  if (!Number.isInteger(port) || port < 0 || port > 65535) {
    throw new RangeError(`the service's port must be a number from 0 to 65535, not ${port}`);
  }
  return { host: host.replace(/^\[|\]$/g, ""), port };
}

/** Options of {@linkcode spawnCollector}. */
export interface SpawnCollectorOptions extends CollectService {
  /** The config file. */
  config: string;
  /** The service's token, handed over in the child's environment (not on its command line). */
  token?: string;
  /**
   * Where the child's output goes.
   * @default {"inherit"}
   */
  output?: "inherit" | "null" | "piped";
}

/** A collector running as its own process. */
export interface SpawnedCollector extends AsyncDisposable {
  /** The child process. */
  readonly process: Deno.ChildProcess;
  /** Its process id. */
  readonly pid: number;
  /** Asks it to stop (SIGTERM: it posts what it holds, for at most 5 s) and waits for it. */
  stop(): Promise<Deno.CommandStatus>;
}

/**
 * The `deno` arguments that run a collector under its scoped permissions (what
 * {@linkcode spawnCollector} runs; also the command line for a service manager). Reads the
 * config to learn its inputs.
 *
 * @param options The config and the service.
 * @returns The arguments after `deno`.
 * @throws {CollectConfigError} For a config the collector cannot use.
 *
 * @example Usage
 * ```ts ignore
 * import { collectorArgs } from "@obs-utils/telemetry/collect";
 * console.log(["deno", ...collectorArgs({ config: "/etc/obs-telemetry-collect.json" })].join(" "));
 * ```
 */
export function collectorArgs(options: SpawnCollectorOptions): string[] {
  const file = resolve(options.config);
  const config = readCollectConfig(file, INPUT_KINDS);
  const { host, port } = serviceAddress(options);
  return [
    "run",
    "--no-prompt",
    ...collectPermissionFlags(config, { host, port }),
    new URL("../cli/collect_main.ts", import.meta.url).href,
    "--config",
    file,
    "--host",
    host,
    "--port",
    String(port),
  ];
}

/**
 * Starts `obs-utils telemetry collect` as a child process with the scoped permissions of
 * {@linkcode collectPermissionFlags}. It runs until stopped; its log goes to `output`.
 *
 * @param options The config, the service and where the output goes.
 * @returns The running collector.
 * @throws {CollectConfigError} For a config the collector cannot use (before anything starts).
 *
 * @example Usage
 * ```ts ignore
 * import { spawnCollector } from "@obs-utils/telemetry/collect";
 * await using collector = spawnCollector({ config: "./collect.json", port: 6562 });
 * ```
 */
export function spawnCollector(options: SpawnCollectorOptions): SpawnedCollector {
  const args = collectorArgs(options);
  const output = options.output ?? "inherit";
  return spawnDeno({
    args,
    output,
    ...(options.token !== undefined ? { env: { OBS_TELEMETRY_TOKEN: options.token } } : {}),
    // A collector posts for at most 5 s after SIGTERM; one stuck past 15 s is killed.
    killAfterMs: 15_000,
  });
}
