/**
 * Forwarding a site's telemetry to a fleet store (docs/fleet.md): {@linkcode forward} sends every
 * stored line to NATS JetStream or PostgreSQL and follows new ones, with a cursor that moves only
 * after the destination acknowledged; {@linkcode archive} moves JetStream into PostgreSQL;
 * {@linkcode spawnForwarder} runs the forwarder as its own process with scoped permissions, like
 * `spawnServer()` does for the service.
 *
 * This entry point is the only one that loads the NATS and PostgreSQL clients (npm
 * `@nats-io/transport-node`, `@nats-io/jetstream`, `@nats-io/kv`, `postgres`); `./client` and `./event` stay
 * dependency-free.
 *
 * @example Forward to JetStream until SIGTERM
 * ```ts ignore
 * import { forward } from "@obs-utils/telemetry/forward";
 *
 * const stop = new AbortController();
 * Deno.addSignalListener("SIGTERM", () => stop.abort());
 * await forward({
 *   siteDir: "./telemetry",
 *   to: "nats://fleet-hub:4222",
 *   unit: "pan012",
 *   signal: stop.signal,
 * });
 * ```
 *
 * @module
 */

export {
  archive,
  type ArchiveOptions,
  type ArchiveStats,
  checkForwardOptions,
  type DamagedFile,
  DEFAULT_DURABLE,
  DEFAULT_NATS_STREAM,
  DEFAULT_SUBJECT_PREFIX,
  type DestinationKind,
  EVENTS_TABLE,
  type FleetLog,
  forward,
  FORWARD_ENV_VARS,
  forwarderArgs,
  forwarderPermissionFlags,
  type ForwardOptions,
  type ForwardStats,
  forwardStatus,
  HEADER_RUN_ID,
  HEADER_STREAM,
  HEADER_UNIT,
  type SentBatch,
  SiteIdentityMissingError,
  type SpawnedForwarder,
  spawnForwarder,
  type SpawnForwarderOptions,
  type StreamLag,
  UnitHeldError,
  UNITS_BUCKET,
  UNITS_TABLE,
} from "./fleet/forward.ts";
