/**
 * The collector (docs/collect.md): reads the devices an observatory has (HTTP JSON pages, MQTT
 * topics, an INDI server, ASCOM Alpaca devices, weather-station files) and posts their events to
 * the service. {@linkcode spawnCollector} runs it as its own process with the scoped permissions
 * of {@linkcode collectPermissionFlags}: net to its inputs and the service, read its config and
 * its file inputs.
 *
 * This entry point loads the collector's inputs, the MQTT client (npm) among them; `./client`,
 * `./server` and `./cli` never do.
 *
 * @example Run a collector beside the service until the end of the block
 * ```ts ignore
 * import { spawnCollector } from "@obs-utils/telemetry/collect";
 *
 * await using collector = spawnCollector({ config: "./collect.json", port: 6562 });
 * ```
 *
 * @example The permissions of a config
 * ```ts ignore
 * import { collectPermissionFlags, INPUT_KINDS, readCollectConfig } from "@obs-utils/telemetry/collect";
 *
 * const config = readCollectConfig("./collect.json", INPUT_KINDS);
 * console.log(collectPermissionFlags(config, { host: "localhost", port: 6562 }).join(" "));
 * ```
 *
 * @module
 */

export {
  COLLECT_ENV_VARS,
  type CollectConfig,
  CollectConfigError,
  type CollectInputConfig,
  type CollectLog,
  Collector,
  collectorArgs,
  type CollectorOptions,
  collectPermissionFlags,
  type CollectService,
  type ConfigAt,
  DEFAULT_QUEUE_CAPACITY,
  type EventInput,
  type FieldReading,
  type Input,
  INPUT_KINDS,
  type InputCommon,
  type InputKind,
  type InputNeverUp,
  type InputSettings,
  type InputSink,
  type JsonObject,
  type OnceReport,
  Outbox,
  parseCollectConfig,
  readCollectConfig,
  type RecordReading,
  spawnCollector,
  type SpawnCollectorOptions,
  type SpawnedCollector,
} from "./collect/collect.ts";
