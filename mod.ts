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
  checkEventType,
  daysInMonth,
  describe,
  type Envelope,
  formatTimestamp,
  isJsonObject,
  type JsonObject,
  MAX_TYPE_LENGTH,
  parseTimestamp,
  type RunRecord,
  TelemetryEvent,
  type TelemetryEventField,
} from "./event.ts";
export {
  type ClientOptions,
  DEFAULT_CLIENT_HOST,
  DEFAULT_CLIENT_PORT,
  DEFAULT_TIMEOUT_MS,
  type DisconnectedMessage,
  type EventInput,
  type FetchFunction,
  type FollowMessage,
  type FollowOptions,
  type HealthInfo,
  type ParsedServerSentEvent,
  type PostEventOptions,
  type ReadyInfo,
  type RequestOptions,
  type RunInfo,
  type RunMessage,
  ServerSentEventParserStream,
  type SnapshotMessage,
  type StartRunOptions,
  TelemetryClient,
  TelemetryConnectionError,
  TelemetryHttpError,
  type TelemetryHttpErrorOptions,
  type TelemetryMessage,
} from "./client.ts";
export {
  checkTimeZone,
  type CommittedEvent,
  ConfigError,
  createHandler,
  dashboardResponse,
  dayKey,
  DayKeyer,
  DEFAULT_HOST,
  DEFAULT_KEEPALIVE_MS,
  DEFAULT_MAX_BODY,
  DEFAULT_MAX_TYPES,
  DEFAULT_PORT,
  DEFAULT_SHUTDOWN_GRACE_MS,
  DEFAULT_SITE_TYPES,
  DEFAULT_STREAM_QUEUE_BYTES,
  escapeLabelValue,
  FSYNC_MODES,
  type FsyncMode,
  type HandlerOptions,
  Histogram,
  isLoopback,
  METRICS_CONTENT_TYPE,
  NdjsonWriter,
  type OpenStreamOptions,
  permissionFlags,
  renderDashboard,
  type RenderMetricsOptions,
  RUN_ID_PATTERN,
  SERVER_ENV_VARS,
  type ServerHandle,
  type ServerOptions,
  type ServerSentEventMessage,
  ServerSentEventStream,
  SERVICE_V8_FLAGS,
  type ServiceMessage,
  type ServiceOptions,
  SiteInUseError,
  type SpawnedServer,
  type SpawnOptions,
  spawnServer,
  startServer,
  StreamHub,
  type StreamHubOptions,
  type StreamName,
  type TelemetryHandler,
  TelemetryService,
  VERSION,
  WriteError,
} from "./server.ts";
export {
  legacyDateToTs,
  migrate,
  MigrateConflictError,
  MIGRATED_FROM,
  MigrateError,
  type MigrateFileSummary,
  type MigrateInputSummary,
  type MigrateOptions,
  type MigratePhase,
  type MigrateProgress,
  type MigrateSkipped,
  type MigrateSummary,
  REJECTS_FILE,
} from "./migrate.ts";
export {
  DEFAULT_SITE_DIR,
  ENV_VARS,
  formatAge,
  HELP_TEXT,
  renderTable,
  runCli,
  UsageError,
} from "./cli.ts";
