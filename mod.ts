/**
 * `@obs-utils/telemetry`: record observatory telemetry (weather, environment sensors, system
 * status) as time-stamped events in append-only NDJSON files, with the latest event of each type
 * kept in memory.
 *
 * - {@linkcode startServer} runs the HTTP service in-process (`./server`).
 * - {@linkcode TelemetryEvent} is the immutable event envelope (`./event`, runtime-neutral).
 *
 * @example Usage
 * ```ts ignore
 * import { startServer } from "@obs-utils/telemetry";
 *
 * await using server = await startServer({ siteDir: "./telemetry", port: 0 });
 * console.log(`telemetry service on ${server.url}`);
 * ```
 *
 * @module
 */

export {
  checkEventType,
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
  checkTimeZone,
  type CommittedEvent,
  ConfigError,
  createHandler,
  dayKey,
  DayKeyer,
  DEFAULT_HOST,
  DEFAULT_MAX_BODY,
  DEFAULT_MAX_TYPES,
  DEFAULT_PORT,
  DEFAULT_SITE_TYPES,
  FSYNC_MODES,
  type FsyncMode,
  type HandlerOptions,
  Histogram,
  isLoopback,
  NdjsonWriter,
  RUN_ID_PATTERN,
  type ServerHandle,
  type ServerOptions,
  ServiceError,
  type ServiceMessage,
  type ServiceOptions,
  type ServiceStats,
  SiteInUseError,
  startServer,
  type StreamName,
  type TelemetryHandler,
  TelemetryService,
  VERSION,
  WriteError,
} from "./server.ts";
