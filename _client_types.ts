/**
 * The option and answer types of {@linkcode TelemetryClient}, re-exported by `client.ts`. Web
 * types only, like the client.
 *
 * @module
 */

import type { JsonObject, RunRecord } from "./event.ts";
import type { FetchFunction } from "./_transport.ts";

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
   * Bearer token sent as `Authorization: Bearer <token>` (CONTRACT 2.8).
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
}

/** Per-call options shared by the client's methods. */
export interface RequestOptions {
  /**
   * Aborts the call. The call then rejects with the signal's `reason`, not with a
   * {@linkcode TelemetryConnectionError}.
   */
  signal?: AbortSignal;
}

/** Options of {@linkcode TelemetryClient.postEvent}. */
export interface PostEventOptions extends RequestOptions {
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

/** Options of {@linkcode TelemetryClient.startRun}; all optional (SPEC 4.4). */
export interface StartRunOptions extends RequestOptions {
  /** Run identifier, one safe path segment such as `"m31-1"`; derived when omitted. */
  runId?: string;
  /** Run directory; a relative value is resolved under the site directory. */
  runDir?: string;
  /** Metadata stored with the run record as given. */
  meta?: JsonObject;
}

/**
 * A run record as the service sends it (CONTRACT 2.3). The client keeps the wire's snake_case
 * field names, as the envelope's `meta.run_id` does, so a record can be logged or compared with
 * `GET /run` output unchanged.
 */
export type RunInfo = RunRecord;

/** The answer of `GET /ready` (CONTRACT 2.2), field names as on the wire. */
export interface ReadyInfo {
  /** Always `true` when the server answers. */
  ready: boolean;
  /** Whether a run is active. */
  run_active: boolean;
  /** The active run's id, or `null`. */
  run_id: string | null;
  /** The server's package version. */
  version: string;
}

/** The answer of `GET /health` (CONTRACT 2.2). */
export interface HealthInfo {
  /** `true` when the server is alive. */
  ok: boolean;
}
