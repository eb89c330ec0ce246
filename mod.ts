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
  type Envelope,
  formatTimestamp,
  type JsonObject,
  parseTimestamp,
  type RunRecord,
  TelemetryEvent,
} from "./event.ts";
export {
  type ClientOptions,
  type EventInput,
  type FollowMessage,
  type FollowOptions,
  type PostEventOptions,
  type ReadyInfo,
  type StartRunOptions,
  TelemetryClient,
  TelemetryConnectionError,
  TelemetryHttpError,
} from "./client.ts";
export {
  type CommittedEvent,
  ConfigError,
  createHandler,
  type FsyncMode,
  type HandlerOptions,
  InvalidRequestError,
  NoActiveRunError,
  RunConflictError,
  type ServerHandle,
  type ServerOptions,
  type ServiceOptions,
  ShuttingDownError,
  SiteInUseError,
  type SpawnedServer,
  type SpawnOptions,
  spawnServer,
  startServer,
  TelemetryService,
  TypeLimitError,
  VERSION,
  WriteError,
} from "./server.ts";
export { migrate, MigrateError, type MigrateOptions, type MigrateSummary } from "./migrate.ts";
export { runCli } from "./cli.ts";
