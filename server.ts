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
  type CheckResult,
  type CommittedEvent,
  ConfigError,
  createHandler,
  DEFAULT_HOST,
  DEFAULT_MAX_BODY,
  DEFAULT_MAX_SNAPSHOT_BYTES,
  DEFAULT_MAX_TYPES,
  DEFAULT_MIN_FREE_BYTES,
  DEFAULT_PORT,
  DEFAULT_SHUTDOWN_GRACE_MS,
  DEFAULT_SITE_TYPES,
  DiskWatch,
  type DiskWatchOptions,
  type EventCommand,
  type FieldSpec,
  type FsyncMode,
  type HandlerOptions,
  Histogram,
  InvalidRequestError,
  isLoopback,
  type JsonObject,
  type JsonValue,
  ListenerError,
  loadTypes,
  type LogFormat,
  NoActiveRunError,
  parseTypes,
  permissionFlags,
  PUBLIC_READ_PATHS,
  type Rejection,
  type RelistenOptions,
  type RenderMetricsOptions,
  RUN_ID_PATTERN,
  RunConflictError,
  RunDirNotAllowedError,
  type RunRecord,
  type RunStart,
  type RunStartCommand,
  SERVER_ENV_VARS,
  type ServerHandle,
  type ServerOptions,
  type ServiceMessage,
  ServiceMetrics,
  type ServiceOptions,
  ShutdownLifecycle,
  ShuttingDownError,
  SiteInUseError,
  type SnapshotBodyOptions,
  SnapshotLimitError,
  type SpawnedServer,
  type SpawnOptions,
  spawnServer,
  startServer,
  StorageError,
  type StreamCounts,
  type StreamName,
  type TelemetryHandler,
  TelemetryService,
  toProblem,
  TYPE_STATES,
  TypeLimitError,
  TypesFileError,
  type TypeSpec,
  type TypesRegistry,
  type TypeState,
  type TypeStatus,
  VERSION,
  WriteError,
  type WriteReport,
} from "./http/server.ts";
