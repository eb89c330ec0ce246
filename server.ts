/**
 * The HTTP face of the telemetry service: a `fetch`-style handler over
 * {@linkcode TelemetryService}, and {@linkcode startServer}, which opens a site directory and
 * serves it with `Deno.serve`.
 *
 * Needs `--allow-net=<host>:<port>`, and `--allow-read` and `--allow-write` for the site directory.
 *
 * @example Usage
 * ```ts ignore
 * import { startServer } from "@obs-utils/telemetry/server";
 *
 * await using server = await startServer({ siteDir: "./telemetry", port: 0 });
 * const res = await fetch(`${server.url}/health`);
 * console.log(await res.json()); // { ok: true }
 * ```
 *
 * @module
 */

export {
  type CommittedEvent,
  DEFAULT_MAX_SNAPSHOT_BYTES,
  DEFAULT_MAX_TYPES,
  DEFAULT_SITE_TYPES,
  type EventCommand,
  type KeyedAnswer,
  RUN_ID_PATTERN,
  type RunStart,
  type RunStartCommand,
  type ServiceMessage,
  type ServiceOptions,
  type SnapshotBodyOptions,
  type StreamName,
  TelemetryService,
  type WriteReport,
} from "./core/service.ts";
export {
  IdempotencyConflictError,
  InvalidRequestError,
  NoActiveRunError,
  RunConflictError,
  RunDirNotAllowedError,
  RunIdReusedError,
  ShuttingDownError,
  SiteInUseError,
  SnapshotLimitError,
  StorageError,
  TypeLimitError,
  WriteError,
} from "./core/errors.ts";
export { ConfigError } from "./core/errors.ts";
export {
  type FieldSpec,
  type JsonValue,
  loadTypes,
  parseTypes,
  TypesFileError,
  type TypeSpec,
  type TypesRegistry,
} from "./core/types_registry.ts";
export {
  type CheckResult,
  TYPE_STATES,
  type TypeState,
  type TypeStatus,
} from "./core/freshness.ts";
export type { LogFormat } from "./core/log.ts";
export type { NotificationCounts } from "./http/metrics.ts";
export type { NotifyFormat } from "./notify/post.ts";
export type { SafetyChange, SafetyTypeVerdict, SafetyVerdict, WaiverView } from "./core/safety.ts";
export type { HubActor, HubVia, SafetyEvent, Waiver } from "./core/safety_events.ts";
export { SafetyHubInputError } from "./core/safety_events.ts";
export type { SafetyHubApi } from "./core/service.ts";
export type { BatchSummary, JsonObject, RunRecord } from "./wire/event.ts";
export { DEFAULT_HOST, DEFAULT_PORT } from "./wire/address.ts";
export type { FsyncMode } from "./store/writer.ts";
export { DiskWatch, type DiskWatchOptions } from "./store/disk_watch.ts";
export { DEFAULT_MIN_FREE_BYTES } from "./store/disk.ts";
export { createHandler } from "./server/handler.ts";
export type { HandlerOptions } from "./http/handler.ts";
export { DEFAULT_SHUTDOWN_GRACE_MS, type ServerHandle, startServer } from "./server/serve.ts";
export type { ServerOptions } from "./server/config.ts";
export { ShutdownLifecycle } from "./http/shutdown.ts";
export type { Rejection, TelemetryHandler } from "./http/types.ts";
export { VERSION } from "./http/version.ts";
export { toProblem } from "./http/problems.ts";
export { isLoopback, PUBLIC_READ_PATHS } from "./http/guards.ts";
export { DEFAULT_BODY_TIMEOUT_MS, DEFAULT_MAX_BODY } from "./http/body.ts";
export { ListenerError, type RelistenOptions } from "./http/listener.ts";
export type { AlpacaHandle } from "./alpaca/listener.ts";
export { ALPACA_PROPERTIES, type AlpacaProperty } from "./core/units.ts";
export {
  type ConnectionLimits,
  DEFAULT_HEAD_TIMEOUT_MS,
  DEFAULT_IDLE_TIMEOUT_MS,
  DEFAULT_MAX_CONNS_PER_PEER,
  defaultMaxConns,
} from "./http/conn_guard.ts";
export { type RenderMetricsOptions, ServiceMetrics, type StreamCounts } from "./http/metrics.ts";
export { Histogram } from "./http/prometheus.ts";
export {
  permissionFlags,
  SERVER_ENV_VARS,
  type SpawnedServer,
  type SpawnOptions,
  spawnServer,
} from "./cli/spawn.ts";
