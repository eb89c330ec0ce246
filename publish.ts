/**
 * The publisher (docs/publish.md): the observatory's state on MQTT, for Home Assistant, Node-RED,
 * openHAB and a roof controller. {@linkcode spawnPublisher} runs `obs-utils telemetry publish` as
 * its own process beside the service, with the scoped permissions of
 * {@linkcode publishPermissionFlags}: net to the broker and the service only, read the `--ca`
 * file only. It follows the service's `/stream` and keeps retained, QoS 1, under
 * `<prefix>/<site_id>/`: `state/<type>` (the latest envelope), `availability/<type>` (`online`
 * while fresh, judged as time passes), `safety` and `safety/<profile>` (`{"safe", "since",
 * "reasons"}`), `status` (`online`, last will `offline`), and the Home Assistant discovery
 * configs of every registered field and of each verdict.
 *
 * This entry point loads the MQTT client (npm); `./client`, `./server` and `./cli` never do.
 *
 * @example Run a publisher beside the service until the end of the block
 * ```ts ignore
 * import { spawnPublisher } from "@obs-utils/telemetry/publish";
 *
 * await using publisher = spawnPublisher({ to: "mqtt://127.0.0.1:1883", port: 6562 });
 * ```
 *
 * @example The permissions of a publisher
 * ```ts ignore
 * import { publishPermissionFlags } from "@obs-utils/telemetry/publish";
 *
 * console.log(publishPermissionFlags({ to: "mqtts://broker.lan:8883", ca: "./ca.pem" }).join(" "));
 * ```
 *
 * @module
 */

export {
  type Availability,
  availability,
  type BrokerAddress,
  checkTopicPrefix,
  DEFAULT_DISCOVERY_PREFIX,
  DEFAULT_PREFIX,
  discoveryConfigs,
  type DiscoveryInput,
  type FieldInfo,
  type FreshnessRule,
  idPart,
  IN_FLIGHT,
  jinjaString,
  LatestOutbox,
  type OutboxMessage,
  parseBrokerUrl,
  profilesOf,
  PUBLISH_ENV_VARS,
  PUBLISH_TO_ENV,
  Publisher,
  publisherArgs,
  publisherEnv,
  type PublisherOptions,
  type PublishFlags,
  type PublishLog,
  PublishOptionsError,
  publishPermissionFlags,
  type PublishSettings,
  publishSettings,
  type PublishTarget,
  type RegisteredType,
  SITE_PROFILE,
  SiteTopics,
  type SpawnedPublisher,
  spawnPublisher,
  type SpawnPublisherOptions,
  topicLevel,
  unitClass,
  valueTemplate,
} from "./publish/publish.ts";
