/**
 * `@obs-utils/telemetry`: record observatory telemetry (weather, environment sensors, system
 * status) as time-stamped events in append-only NDJSON files, with the latest event of each type
 * kept in memory.
 *
 * - {@linkcode startServer} runs the HTTP service in-process; {@linkcode spawnServer} runs it as
 *   a detached process with scoped permissions (`./server`).
 * - {@linkcode TelemetryClient} talks to it from Deno, Node or a browser (`./client`).
 * - {@linkcode TelemetryEvent} is the immutable event envelope (`./event`).
 * - {@linkcode migrate} converts the legacy file database (`./migrate`).
 * - {@linkcode readHistory} reads stored events back from the files (`./history`).
 * - {@linkcode runCli} is the `obs-utils` command line (`./cli`).
 *
 * @example Usage
 * ```ts ignore
 * import { startServer, TelemetryClient } from "@obs-utils/telemetry";
 *
 * await using server = await startServer({ siteDir: "./telemetry", port: 0 });
 * const client = new TelemetryClient({ baseUrl: server.url });
 * const event = await client.postEvent("weather", { wind_mps: 2.1 });
 * console.log(event.seq, event.ts);
 * ```
 *
 * @module
 */

export {
  type BatchSummary,
  type Envelope,
  formatTimestamp,
  type JsonObject,
  parseTimestamp,
  type RunRecord,
  TelemetryEvent,
  type TelemetryEventField,
} from "./event.ts";
export {
  type Aggregate,
  type CheckInfo,
  type ClientOptions,
  type DisconnectedMessage,
  type EventInput,
  type FetchFunction,
  type FieldAggregates,
  type FieldInfo,
  type FollowMessage,
  type FollowOptions,
  type ForgetMessage,
  type HealthInfo,
  type HistoryBucket,
  type HistoryBucketOptions,
  type HistoryOptions,
  type HistoryTruncated,
  type PostEventOptions,
  type PostEventsOptions,
  type PostOptions,
  type ReadyInfo,
  type RequestOptions,
  type RunInfo,
  type RunMessage,
  type SafetyEventInfo,
  type SafetyInfo,
  type SafetyOptions,
  type SafetyTypeInfo,
  type SnapshotMessage,
  type StartRunOptions,
  TelemetryClient,
  TelemetryConnectionError,
  TelemetryHttpError,
  type TelemetryMessage,
  type TypeInfo,
  type TypeStateName,
  type WaiverInfo,
} from "./client.ts";
export {
  ALPACA_PROPERTIES,
  type AlpacaHandle,
  type AlpacaProperty,
  type CommittedEvent,
  ConfigError,
  type ConnectionLimits,
  type EventCommand,
  type FieldSpec,
  type FsyncMode,
  type HubActor,
  type HubVia,
  IdempotencyConflictError,
  InvalidRequestError,
  type JsonValue,
  type KeyedAnswer,
  ListenerError,
  type LogFormat,
  NoActiveRunError,
  type NotifyFormat,
  type Rejection,
  type RelistenOptions,
  RunConflictError,
  RunIdReusedError,
  type RunStart,
  type RunStartCommand,
  type SafetyChange,
  type SafetyEvent,
  type SafetyHubApi,
  SafetyHubInputError,
  type SafetyTypeVerdict,
  type SafetyVerdict,
  type ServerHandle,
  type ServerOptions,
  type ServiceMessage,
  type ServiceOptions,
  ShuttingDownError,
  SiteInUseError,
  type SnapshotBodyOptions,
  type SpawnedServer,
  type SpawnOptions,
  spawnServer,
  startServer,
  type StreamName,
  TelemetryService,
  TypeLimitError,
  TypesFileError,
  type TypeSpec,
  type TypesRegistry,
  VERSION,
  type Waiver,
  type WaiverView,
  WriteError,
  type WriteReport,
} from "./server.ts";
export {
  migrate,
  MigrateError,
  type MigrateFileSummary,
  type MigrateGroupBy,
  type MigrateInputSummary,
  type MigrateOptions,
  type MigratePhase,
  type MigrateProgress,
  type MigrateReject,
  type MigrateSkipped,
  type MigrateSummary,
} from "./migrate.ts";
export {
  DamagedFileError,
  findRunDir,
  parseTimeBound,
  readHistory,
  readHistoryLines,
  type ReadHistoryOptions,
  RunNotFoundError,
  type TimeBound,
} from "./history.ts";
export { runCli } from "./cli.ts";
