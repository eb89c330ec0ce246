/**
 * Fetch-based client for the telemetry service. Web APIs only (`fetch`, `URL`, `AbortSignal`,
 * streams): the same module runs on Deno, Node >= 20 and in browsers.
 *
 * {@linkcode TelemetryClient} has one method per operation of the Python client (docs/client.md,
 * docs/client.md), in camelCase, plus {@linkcode TelemetryClient.follow} for the live event stream.
 * Two error classes tell failures apart: {@linkcode TelemetryConnectionError} when no server
 * answers (refused, unknown host, timeout) and {@linkcode TelemetryHttpError} when one answers
 * with an error or with something that is not the telemetry API.
 *
 * Node users import the same module as `@obs-utils/telemetry/client` (for example through
 * `npx jsr add @obs-utils/telemetry`).
 *
 * On Deno, reading the `OBS_TELEMETRY_*` defaults needs `--allow-env` (without it the defaults
 * `localhost:6562` apply, without a prompt) and every call needs `--allow-net=<host>:<port>`.
 *
 * @example Usage
 * ```ts ignore
 * import { TelemetryClient } from "@obs-utils/telemetry/client";
 *
 * const client = new TelemetryClient(); // OBS_TELEMETRY_HOST/PORT, else localhost:6562
 * const event = await client.postEvent("weather", { wind_mps: 2.1 });
 * console.log(event.seq, event._id, JSON.stringify(event));
 * console.log((await client.getCurrent("weather"))?.data);
 * ```
 *
 * @module
 */

export {
  DEFAULT_CLIENT_HOST,
  DEFAULT_CLIENT_PORT,
  DEFAULT_POST_RETRIES,
  DEFAULT_TIMEOUT_MS,
  TelemetryClient,
} from "./client/client.ts";
export type {
  CheckInfo,
  ClientOptions,
  EventInput,
  FieldInfo,
  HealthInfo,
  PostEventOptions,
  PostEventsOptions,
  PostOptions,
  ReadyInfo,
  RequestOptions,
  RunInfo,
  SafetyEventInfo,
  SafetyInfo,
  SafetyOptions,
  SafetyTypeInfo,
  StartRunOptions,
  TypeInfo,
  TypeStateName,
  WaiverInfo,
} from "./client/types.ts";
export {
  TelemetryConnectionError,
  TelemetryHttpError,
  type TelemetryHttpErrorOptions,
} from "./client/errors.ts";
export {
  type DisconnectedMessage,
  type FollowMessage,
  type FollowOptions,
  type ForgetMessage,
  type RunMessage,
  type SnapshotMessage,
  type TelemetryMessage,
} from "./client/follow.ts";
export type { FetchFunction } from "./client/transport.ts";
export type { HistoryBucketOptions, HistoryOptions } from "./client/history.ts";
export type {
  Aggregate,
  FieldAggregates,
  HistoryBucket,
  HistoryTruncated,
} from "./wire/history.ts";
// What the methods take and return, so that one import serves (docs/client.md).
export {
  type BatchSummary,
  type Envelope,
  type JsonObject,
  type RunRecord,
  TelemetryEvent,
  type TelemetryEventField,
} from "./wire/event.ts";
export { type ParsedServerSentEvent, ServerSentEventParserStream } from "./wire/sse.ts";
