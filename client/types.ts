/**
 * The option and answer types of {@linkcode TelemetryClient}, re-exported by `client.ts`. Web
 * types only, like the client.
 *
 * @module
 */

import type { JsonObject, RunRecord } from "../wire/event.ts";
import type { FetchFunction } from "./transport.ts";

/** Options of the {@linkcode TelemetryClient} constructor. */
export interface ClientOptions {
  /**
   * Base address of the service, for example `"http://127.0.0.1:6562"`. When given, `host` and
   * `port` are ignored. A path prefix (a reverse proxy) is kept.
   */
  baseUrl?: string | URL;
  /**
   * Host of the service when `baseUrl` is not given; IPv6 addresses may omit the brackets.
   * @default {OBS_TELEMETRY_HOST, else "localhost"}
   */
  host?: string;
  /**
   * Port of the service when `baseUrl` is not given.
   * @default {OBS_TELEMETRY_PORT, else 6562}
   */
  port?: number;
  /**
   * Bearer token sent as `Authorization: Bearer <token>` (docs/http-api.md).
   * @default {OBS_TELEMETRY_TOKEN, else none}
   */
  token?: string;
  /**
   * Milliseconds a call may take before it fails with {@linkcode TelemetryConnectionError};
   * `Infinity` disables the limit. For {@linkcode TelemetryClient.follow} it limits connecting.
   * @default {5000}
   */
  timeoutMs?: number;
  /**
   * The `fetch` to use instead of the global one (called unbound, as browsers require).
   *
   * HTTPS with a private CA (a server run with `--tls-cert`): the runtime's own trust serves
   * every client at once (`DENO_CERT=ca.pem` or `deno run --cert ca.pem`; Node:
   * `NODE_EXTRA_CA_CERTS=ca.pem`). To trust a CA for one client only, pass a `fetch` that does; on Deno, with
   * `const http = Deno.createHttpClient({ caCerts: [pem] })` made once:
   * `fetch: (input, init) => fetch(input, { ...init, client: http })`.
   * @default {globalThis.fetch}
   */
  fetch?: FetchFunction;
  /**
   * How many times a post (`postEvent`, `postEvents`, `insert`, `insertCurrent`) is sent again
   * when no answer came back (the connection failed or `timeoutMs` passed), after 250 ms, then
   * twice as long each time. Every post carries an `Idempotency-Key`, the same on each try, so a
   * post the service stored but could not answer is answered again, never stored twice
   * (docs/client.md). 0 sends each post once.
   * @default {2}
   */
  retries?: number;
}

/** Per-call options shared by the client's methods. */
export interface RequestOptions {
  /**
   * Aborts the call. The call then rejects with the signal's `reason`, not with a
   * {@linkcode TelemetryConnectionError}.
   */
  signal?: AbortSignal;
}

/** Options of the posts: {@linkcode TelemetryClient.postEvents}, and of `postEvent` with its own. */
export interface PostOptions extends RequestOptions {
  /**
   * The post's `Idempotency-Key` (1 to 200 printable ASCII characters, docs/http-api.md): give
   * the same key again to retry a post yourself, for example after a restart of your program.
   * @default {a new crypto.randomUUID() per call, the same on its retries}
   */
  idempotencyKey?: string;
  /**
   * How many times this post is sent again when no answer came back.
   * @default {the client's `retries`}
   */
  retries?: number;
}

/** Options of {@linkcode TelemetryClient.postEvents}. */
export interface PostEventsOptions extends PostOptions {
  /**
   * Ask for the minimal answer (`Prefer: return=minimal`, docs/http-api.md): how many events
   * were accepted and the seqs of the first and the last, instead of every envelope. The service
   * then sends about 60 bytes instead of every event back; a server that predates the minimal
   * answer sends the envelopes, and the client counts them into the same summary.
   * @default {false}
   */
  minimal?: boolean;
}

/** Options of {@linkcode TelemetryClient.postEvent}. */
export interface PostEventOptions extends PostOptions {
  /**
   * Caller metadata copied into the envelope; the server adds `run_id` during a run.
   * @default {{}}
   */
  meta?: JsonObject;
  /**
   * When the reading was taken: an ISO 8601 date-time with `Z` or an offset, or a `Date`.
   * @default {the server's receive time}
   */
  ts?: string | Date;
  /**
   * `false` updates only the in-memory snapshot; nothing is written to disk.
   * @default {true}
   */
  storePermanently?: boolean;
  /**
   * `false` writes the event without updating the snapshot (the legacy `insert`).
   * @default {true}
   */
  makeCurrent?: boolean;
}

/** One item of {@linkcode TelemetryClient.postEvents}: an event type, its data and its options. */
export interface EventInput {
  /** Event type, for example `"weather"`. */
  type: string;
  /** Payload: a plain JSON object. */
  data: JsonObject;
  /** See {@linkcode PostEventOptions.meta}. */
  meta?: JsonObject;
  /** See {@linkcode PostEventOptions.ts}. */
  ts?: string | Date;
  /** See {@linkcode PostEventOptions.storePermanently}. */
  storePermanently?: boolean;
  /** See {@linkcode PostEventOptions.makeCurrent}. */
  makeCurrent?: boolean;
}

/** Options of {@linkcode TelemetryClient.startRun}; all optional (docs/http-api.md). */
export interface StartRunOptions extends RequestOptions {
  /** Run identifier, one safe path segment such as `"m31-1"`; derived when omitted. */
  runId?: string;
  /** Run directory; a relative value is resolved under the site directory. */
  runDir?: string;
  /** Metadata stored with the run record as given. */
  meta?: JsonObject;
}

/**
 * A run record as the service sends it (docs/http-api.md). The client keeps the wire's snake_case
 * field names, as the envelope's `meta.run_id` does, so a record can be logged or compared with
 * `GET /run` output unchanged.
 */
export type RunInfo = RunRecord;

/** The answer of `GET /ready` (docs/http-api.md), field names as on the wire. */
export interface ReadyInfo {
  /** Always `true` when the server answers. */
  ready: boolean;
  /** Whether a run is active. */
  run_active: boolean;
  /** The active run's id, or `null`. */
  run_id: string | null;
  /** The server's package version. */
  version: string;
  /** The site time zone (IANA name) the dashboard shows times in; absent from older servers. */
  zone?: string;
  /**
   * The site's id (a UUID, the `site_id` of its `.site.json`, docs/storage.md); absent from
   * servers before 0.7.
   */
  site_id?: string;
}

/** What the types registry says about one field (docs/types.md); keys are dotted paths. */
export interface FieldInfo {
  /** Shown in place of the field name. */
  label?: string;
  /** Unit of the value. */
  unit?: string;
  /** Warn above this number. */
  warn_above?: number;
  /** Warn below this number. */
  warn_below?: number;
  /** Alarm above this number. */
  alarm_above?: number;
  /** Alarm below this number. */
  alarm_below?: number;
  /** Warn when the value equals this one. */
  warn_if?: unknown;
  /** Alarm when the value equals this one. */
  alarm_if?: unknown;
}

/** The freshness state of a type: `stale`, else `alarm`, else `warn`, else `ok`. */
export type TypeStateName = "ok" | "warn" | "alarm" | "stale";

/** One entry of `GET /types` (docs/types.md). */
export interface TypeInfo {
  /** The registry's description, or `null`. */
  description: string | null;
  /** Whether the type is critical for `GET /check`. */
  critical: boolean;
  /** Seconds after its `ts` the type goes stale, or `null` (never). */
  stale_after_s: number | null;
  /** Dashboard order, or `null`. */
  order: number | null;
  /** Registered fields by dotted path. */
  fields: Record<string, FieldInfo>;
  /** `ts` of the latest event, or `null` when never seen. */
  last_ts: string | null;
  /** Seconds since `last_ts`, or `null` when never seen. */
  age_s: number | null;
  /** The state. */
  state: TypeStateName;
  /** Why it is not `ok`, such as `"wind_mps 16.2 m/s above alarm 15"`. */
  reasons: string[];
}

/** The answer of `GET /check` (docs/types.md), whether 200 or 503. */
export interface CheckInfo {
  /** `true` when every critical type is fresh and out of alarm and the disk has room. */
  ok: boolean;
  /** One line per failure, such as `"weather: stale for 412 s (limit 180 s)"`. */
  failing: string[];
  /** The critical types and their state. */
  critical: Record<string, TypeStateName>;
  /** Free bytes on the site directory's file system, or `null` when unknown. */
  disk_free_bytes: number | null;
  /** The `--min-free` threshold in bytes. */
  min_free_bytes: number;
}

/** One critical type in the answer of `GET /safety` (docs/safety.md). */
export interface SafetyTypeInfo {
  /** Its usual state; a latched type keeps `ok` or `warn`. */
  state: TypeStateName;
  /** False while stale, never seen, in alarm or latched. */
  safe: boolean;
  /** While latched: when the latch ends if nothing changes (ISO 8601 UTC); else `null`. */
  latched_until: string | null;
  /** While waived: when the waiver ends (ISO 8601 UTC); else `null` (docs/safety.md#waivers). */
  waived_until: string | null;
}

/**
 * A SafetyEvent of ASCOM's draft ISafetyMonitorV4 (docs/safety.md#safety-events): one reason a
 * safety monitor is unsafe, the service's own or set by another program.
 */
export interface SafetyEventInfo {
  /** Who raised it. */
  Source: string;
  /** The rule or condition. */
  Name: string;
  /** Unique among the events; the service's own start with `telemetry:`. */
  Id: string;
  /** A `SafetyEventType` name, such as `WindSpeed`, `Power` or `Safety`. */
  Type: string;
  /** A `SafetyEventTrigger` name, such as `AboveThreshold`, `Offline` or `Active`. */
  Trigger: string;
  /** What is wrong, for people. */
  Description: string;
  /** When the condition began (ISO 8601 UTC); set by the service when left out. */
  EventTimeUtc?: string;
}

/** A waiver in force (docs/safety.md#waivers). */
export interface WaiverInfo {
  /** The critical type not judged. */
  type: string;
  /** When the waiver ends (ISO 8601 UTC). */
  until: string;
  /** Why it was set. */
  reason: string;
  /** Who set it (the peer's address). */
  peer: string;
}

/** Options of {@linkcode TelemetryClient.safety} and the safety hub's calls. */
export interface SafetyOptions extends RequestOptions {
  /**
   * The profile (docs/safety.md#profiles): a `critical_for` name of the types file. Default
   * `site`; an external event set for `site` holds every profile.
   */
  profile?: string;
}

/** The answer of `GET /safety` (docs/safety.md): the latched safety verdict. */
export interface SafetyInfo {
  /** The profile judged (`site` unless asked for another). */
  profile: string;
  /** True when at least one critical type is registered and every one of them is safe. */
  safe: boolean;
  /** When `safe` last changed (ISO 8601 UTC). */
  since: string;
  /** When the latest latch ends if nothing else changes, or `null`. */
  clear_at: string | null;
  /** Why the site is unsafe, such as `"weather: stale for 412 s (limit 180 s)"`. */
  reasons: string[];
  /** Each critical type's verdict. */
  types: Record<string, SafetyTypeInfo>;
  /** The SafetyEvents: one per reason it is unsafe, then the external events; empty when safe. */
  events: SafetyEventInfo[];
  /** The waivers in force over its types. */
  waivers: WaiverInfo[];
}

/** The answer of `GET /health` (docs/http-api.md). */
export interface HealthInfo {
  /** `true` when the server is alive. */
  ok: boolean;
}
