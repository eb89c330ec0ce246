/**
 * The implementation behind the `client.ts` entry point; its module documentation is there.
 *
 * @module
 */

import {
  type BatchSummary,
  describe,
  isJsonObject,
  type JsonObject,
  type TelemetryEvent,
} from "../wire/event.ts";
import { DEFAULT_HOST, DEFAULT_PORT, resolveBaseUrl, resolveToken } from "../wire/address.ts";
import { type Answer, Transport } from "./transport.ts";
import { Backoff } from "../wire/backoff.ts";
import { TelemetryConnectionError } from "./errors.ts";
import { checkOf, healthOf, readyOf, safetyOf, typesOf } from "./answers.ts";
import { type FollowMessage, type FollowOptions, followStream } from "./follow.ts";
import { type HistoryBucketOptions, type HistoryOptions, historyPages } from "./history.ts";
import type { HistoryBucket } from "../wire/history.ts";
import {
  checkDelay,
  checkFetch,
  checkIdempotencyKey,
  checkOptionsObject,
  checkRetries,
  checkSignal,
  checkTimeout,
  checkToken,
  checkType,
  eventsBody,
  newIdempotencyKey,
  runStartBody,
  streamPath,
  stringifyBody,
  toWire,
} from "./args.ts";
import type {
  CheckInfo,
  ClientOptions,
  EventInput,
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
  StartRunOptions,
  TypeInfo,
  WaiverInfo,
} from "./types.ts";

// The errors and the types the commands of cli/ import from here; the client face re-exports
// every name from its own module.
export type { EventInput, FieldInfo, TypeInfo } from "./types.ts";
export { TelemetryConnectionError, TelemetryHttpError } from "./errors.ts";

/** The default port of the service (docs/operations.md). */
export const DEFAULT_CLIENT_PORT: number = DEFAULT_PORT;
/** The default host of the service (docs/operations.md). */
export const DEFAULT_CLIENT_HOST: string = DEFAULT_HOST;
/** The default per-request timeout in milliseconds. */
export const DEFAULT_TIMEOUT_MS = 5000;
/** How many times a post is sent again by default when no answer came back (docs/client.md). */
export const DEFAULT_POST_RETRIES = 2;
/** The wait before a post's first retry; each next one waits twice as long, up to 2 s. */
const RETRY_FIRST_MS = 250;
const RETRY_MAX_MS = 2000;

/**
 * A client for the telemetry service (docs/client.md). Every method that talks to the
 * server throws {@linkcode TelemetryConnectionError} when no server answers in time and
 * {@linkcode TelemetryHttpError} when it answers with an error; argument errors are thrown as
 * `TypeError` (or `RangeError`) before any request is made.
 *
 * @example Usage
 * ```ts ignore
 * import { TelemetryClient } from "@obs-utils/telemetry/client";
 *
 * const client = new TelemetryClient({ baseUrl: "http://127.0.0.1:6562" });
 * await client.startRun({ runId: "m31-1", meta: { target: "M31" } });
 * await client.postEvent("status", { dome: "open" });
 * const run = await client.stopRun();
 * console.log(`${run.events} events in ${run.run_dir}`);
 * ```
 */
export class TelemetryClient {
  /** The resolved base address, for example `"http://localhost:6562"`, without trailing `/`. */
  readonly baseUrl: string;
  #transport: Transport;
  #retries: number;

  /**
   * Creates a client. Resolution: `baseUrl`, else `host`/`port`, else the environment variables
   * `OBS_TELEMETRY_HOST`/`OBS_TELEMETRY_PORT` (read only when the runtime allows it without a
   * prompt), else `localhost:6562`. No request is made.
   *
   * @param options Address, token, timeout and `fetch`.
   * @throws {TypeError} If `baseUrl`, `host`, `token` or `fetch` is malformed.
   * @throws {RangeError} If `port`, `OBS_TELEMETRY_PORT` or `timeoutMs` is out of range.
   */
  constructor(options: ClientOptions = {}) {
    checkOptionsObject(options, "Cannot create a TelemetryClient");
    this.baseUrl = resolveBaseUrl(options);
    this.#transport = new Transport({
      baseUrl: this.baseUrl,
      token: checkToken(resolveToken(options.token)),
      timeoutMs: checkTimeout(options.timeoutMs ?? DEFAULT_TIMEOUT_MS),
      fetch: checkFetch(options.fetch),
    });
    this.#retries = checkRetries(
      options.retries,
      "Cannot create a TelemetryClient",
      DEFAULT_POST_RETRIES,
    );
  }

  /**
   * Checks that the server is alive (`GET /health`).
   *
   * @param options An optional abort signal.
   * @returns `{ ok: true }`.
   * @throws {TelemetryConnectionError} If no server answers within `timeoutMs`.
   * @throws {TelemetryHttpError} If the answer is an error or not `{ "ok": boolean }`.
   *
   * @example Usage
   * ```ts ignore
   * import { TelemetryClient } from "@obs-utils/telemetry/client";
   * console.log(await new TelemetryClient().health()); // { ok: true }
   * ```
   */
  async health(options: RequestOptions = {}): Promise<HealthInfo> {
    const signal = this.#requestSignal(options, "Cannot check health");
    return healthOf(this.#transport, await this.#transport.call("GET", "/health", { signal }));
  }

  /**
   * Reads readiness and run state (`GET /ready`).
   *
   * @param options An optional abort signal.
   * @returns Readiness, whether a run is active, its id and the server version.
   * @throws {TelemetryConnectionError} If no server answers within `timeoutMs`.
   * @throws {TelemetryHttpError} If the answer is an error or has the wrong shape.
   *
   * @example Usage
   * ```ts ignore
   * import { TelemetryClient } from "@obs-utils/telemetry/client";
   * const { run_active, run_id } = await new TelemetryClient().ready();
   * ```
   */
  async ready(options: RequestOptions = {}): Promise<ReadyInfo> {
    const signal = this.#requestSignal(options, "Cannot check readiness");
    return readyOf(this.#transport, await this.#transport.call("GET", "/ready", { signal }));
  }

  /**
   * Reads every registered type and every type in the snapshot with its freshness state
   * (`GET /types`, docs/types.md).
   *
   * @param options An optional abort signal.
   * @returns The entries keyed by type: registry description, `last_ts`, `age_s`, `state` and
   *   `reasons`.
   * @throws {TelemetryConnectionError} If no server answers within `timeoutMs`.
   * @throws {TelemetryHttpError} If the answer is an error or not an object of type entries.
   *
   * @example Usage
   * ```ts ignore
   * import { TelemetryClient } from "@obs-utils/telemetry/client";
   * const types = await new TelemetryClient().types();
   * for (const [type, info] of Object.entries(types)) console.log(type, info.state, info.reasons);
   * ```
   */
  async types(options: RequestOptions = {}): Promise<Record<string, TypeInfo>> {
    const signal = this.#requestSignal(options, "Cannot read the types");
    return typesOf(this.#transport, await this.#transport.call("GET", "/types", { signal }));
  }

  /**
   * Asks whether the unit is healthy (`GET /check`, docs/types.md): every critical type fresh and
   * out of alarm, and free disk space above `--min-free`. A failing check is an answer, not an
   * error: it resolves with `ok: false` and the reasons.
   *
   * @param options An optional abort signal.
   * @returns `ok` and, when it is false, the `failing` lines.
   * @throws {TelemetryConnectionError} If no server answers within `timeoutMs`.
   * @throws {TelemetryHttpError} If the answer is another error or has the wrong shape.
   *
   * @example Usage
   * ```ts ignore
   * import { TelemetryClient } from "@obs-utils/telemetry/client";
   * const check = await new TelemetryClient().check();
   * if (!check.ok) console.log(check.failing.join("\n"));
   * ```
   */
  async check(options: RequestOptions = {}): Promise<CheckInfo> {
    const signal = this.#requestSignal(options, "Cannot run the check");
    const answer = await this.#transport.call("GET", "/check", { signal, okStatuses: [503] });
    return checkOf(this.#transport, answer);
  }

  /**
   * Reads the latched safety verdict (`GET /safety`, docs/safety.md): whether the site (or one
   * profile, docs/safety.md#profiles) may observe, why not, its SafetyEvents and waivers, and
   * when a latch ends. An unsafe site is an answer, not an error.
   *
   * @param options The profile (default `site`) and an optional abort signal.
   * @returns The `GET /safety` document.
   * @throws {TelemetryConnectionError} If no server answers within `timeoutMs`.
   * @throws {TelemetryHttpError} If the answer is an error (404 for an unknown profile) or has
   *   the wrong shape.
   *
   * @example Usage
   * ```ts ignore
   * import { TelemetryClient } from "@obs-utils/telemetry/client";
   * const verdict = await new TelemetryClient().safety({ profile: "north" });
   * if (!verdict.safe) console.log(verdict.reasons.join("\n"));
   * ```
   */
  async safety(options: SafetyOptions = {}): Promise<SafetyInfo> {
    const signal = this.#requestSignal(options, "Cannot read the safety verdict");
    const path = `/safety${profileQuery(options)}`;
    return safetyOf(this.#transport, await this.#transport.call("GET", path, { signal }));
  }

  /**
   * Holds the site (or one profile) unsafe with external events (`PUT /safety/events`,
   * docs/safety.md#safety-events): a UPS on battery, work in the dome. An event with the `Id`
   * of one already set replaces it. The service saves them before it answers; they stay until
   * {@linkcode TelemetryClient.clearSafetyEvent}, across restarts.
   *
   * @param events SafetyEvent objects (`EventTimeUtc` may be left out).
   * @param options The profile (default `site`: every profile) and an optional abort signal.
   * @returns The profile's verdict after the change.
   * @throws {TelemetryConnectionError} If no server answers within `timeoutMs`.
   * @throws {TelemetryHttpError} 400 for an event the service refuses (its message says why),
   *   401 without the token.
   *
   * @example Usage
   * ```ts ignore
   * import { TelemetryClient } from "@obs-utils/telemetry/client";
   * await new TelemetryClient({ token: "..." }).setSafetyEvents([{
   *   Source: "UPS", Name: "mains", Id: "ups-mains", Type: "Power", Trigger: "Offline",
   *   Description: "on battery",
   * }]);
   * ```
   */
  async setSafetyEvents(
    events: readonly SafetyEventInfo[],
    options: SafetyOptions = {},
  ): Promise<SafetyInfo> {
    const signal = this.#requestSignal(options, "Cannot set the safety events");
    const path = `/safety/events${profileQuery(options)}`;
    const body = JSON.stringify(events);
    return safetyOf(this.#transport, await this.#transport.call("PUT", path, { signal, body }));
  }

  /**
   * Clears one external event (`DELETE /safety/events/{id}`, docs/safety.md#safety-events);
   * the service's own events clear only when their condition does.
   *
   * @param id The event's `Id`.
   * @param options The profile asking (default `site`) and an optional abort signal.
   * @returns `true` when it was cleared, `false` when there was no such external event (404).
   * @throws {TelemetryConnectionError} If no server answers within `timeoutMs`.
   * @throws {TelemetryHttpError} For another error answer (401 without the token...).
   *
   * @example Usage
   * ```ts ignore
   * import { TelemetryClient } from "@obs-utils/telemetry/client";
   * await new TelemetryClient({ token: "..." }).clearSafetyEvent("ups-mains");
   * ```
   */
  async clearSafetyEvent(id: string, options: SafetyOptions = {}): Promise<boolean> {
    const signal = this.#requestSignal(options, "Cannot clear the safety event");
    const path = `/safety/events/${encodeURIComponent(id)}${profileQuery(options)}`;
    const answer = await this.#transport.call("DELETE", path, { signal, nullOn404: true });
    return answer !== undefined;
  }

  /**
   * Stops judging a critical type for a bounded time (`PUT /safety/waivers`,
   * docs/safety.md#waivers): a dead sensor on a clear night. The waiver shows in every verdict
   * while it lasts; then the type counts again, and latches as usual if it is unsafe then.
   *
   * @param type The critical type.
   * @param forS Seconds, 60 to 43,200 (12 hours).
   * @param reason Why, for everyone who reads the verdict.
   * @param options An optional abort signal.
   * @returns The waiver.
   * @throws {TelemetryConnectionError} If no server answers within `timeoutMs`.
   * @throws {TelemetryHttpError} 400 for a type that is not critical or a length out of bounds,
   *   401 without the token.
   *
   * @example Usage
   * ```ts ignore
   * import { TelemetryClient } from "@obs-utils/telemetry/client";
   * const waiver = await new TelemetryClient({ token: "..." }).waiveType("weather", 7200, "anemometer dead");
   * console.log(waiver.until);
   * ```
   */
  async waiveType(
    type: string,
    forS: number,
    reason: string,
    options: RequestOptions = {},
  ): Promise<WaiverInfo> {
    const signal = this.#requestSignal(options, "Cannot waive the type");
    const body = JSON.stringify({ type, for_s: forS, reason });
    const { value, res } = await this.#transport.call("PUT", "/safety/waivers", { signal, body });
    if (
      !isJsonObject(value) || typeof value.type !== "string" || typeof value.until !== "string"
    ) {
      throw this.#transport.shapeError(
        res,
        value,
        "/safety/waivers",
        'a waiver {"type", "until", ...}',
      );
    }
    return value as unknown as WaiverInfo;
  }

  /**
   * Ends a waiver early (`DELETE /safety/waivers/{type}`, docs/safety.md#waivers).
   *
   * @param type The waived type.
   * @param options An optional abort signal.
   * @returns `true` when it ended, `false` when the type had no waiver (404).
   * @throws {TelemetryConnectionError} If no server answers within `timeoutMs`.
   * @throws {TelemetryHttpError} For another error answer (401 without the token...).
   *
   * @example Usage
   * ```ts ignore
   * import { TelemetryClient } from "@obs-utils/telemetry/client";
   * await new TelemetryClient({ token: "..." }).unwaiveType("weather");
   * ```
   */
  async unwaiveType(type: string, options: RequestOptions = {}): Promise<boolean> {
    const signal = this.#requestSignal(options, "Cannot end the waiver");
    const path = `/safety/waivers/${encodeURIComponent(type)}`;
    const answer = await this.#transport.call("DELETE", path, { signal, nullOn404: true });
    return answer !== undefined;
  }

  /**
   * Reads the active run's record (`GET /run`).
   *
   * @param options An optional abort signal.
   * @returns The run record with a live `events` count, or `null` when no run is active.
   * @throws {TelemetryConnectionError} If no server answers within `timeoutMs`.
   * @throws {TelemetryHttpError} If the answer is an error other than 404, or not a run record.
   *
   * @example Usage
   * ```ts ignore
   * import { TelemetryClient } from "@obs-utils/telemetry/client";
   * const run = await new TelemetryClient().getRun();
   * console.log(run ? `run ${run.run_id}: ${run.events} events` : "no run");
   * ```
   */
  async getRun(options: RequestOptions = {}): Promise<RunInfo | null> {
    const signal = this.#requestSignal(options, "Cannot read the run");
    const answer = await this.#transport.call("GET", "/run", { signal, nullOn404: true });
    return answer ? this.#transport.toRun(answer, "/run") : null;
  }

  /**
   * Starts a run (`POST /run/start`, docs/http-api.md). With no `runId` and no `runDir` the server
   * derives the next numeric run directory (`001`, `002`, ...). Starting the run that is already
   * active returns its record (an idempotent retry).
   *
   * @param options `runId`, `runDir`, `meta` and an optional abort signal.
   * @returns The run record.
   * @throws {TypeError} If an option has the wrong type; no request is made.
   * @throws {TelemetryConnectionError} If no server answers within `timeoutMs`.
   * @throws {TelemetryHttpError} 409 if a different run is active or the run id was used for another
   *   directory (docs/http-api.md), 400 for a bad id or directory.
   *
   * @example Usage
   * ```ts ignore
   * import { TelemetryClient } from "@obs-utils/telemetry/client";
   * const run = await new TelemetryClient().startRun({ runId: "m31-1", meta: { target: "M31" } });
   * console.log(run.run_dir);
   * ```
   */
  async startRun(options: StartRunOptions = {}): Promise<RunInfo> {
    const action = "Cannot start a run";
    const signal = this.#requestSignal(options, action);
    const json = runStartBody(options, action);
    const answer = await this.#transport.call("POST", "/run/start", { signal, body: json });
    return this.#transport.toRun(answer, "/run/start");
  }

  /**
   * Stops the active run (`POST /run/stop`); later events go to the site stream.
   *
   * @param options An optional abort signal.
   * @returns The final run record, with `stopped_at` and `events` filled.
   * @throws {TelemetryConnectionError} If no server answers within `timeoutMs`.
   * @throws {TelemetryHttpError} 409 when no run is active.
   *
   * @example Usage
   * ```ts ignore
   * import { TelemetryClient } from "@obs-utils/telemetry/client";
   * const run = await new TelemetryClient().stopRun();
   * console.log(`${run.run_id}: ${run.events} events`);
   * ```
   */
  async stopRun(options: RequestOptions = {}): Promise<RunInfo> {
    const signal = this.#requestSignal(options, "Cannot stop the run");
    const answer = await this.#transport.call("POST", "/run/stop", { signal });
    return this.#transport.toRun(answer, "/run/stop");
  }

  /**
   * Records one event (`POST /event`) in the current context: the run stream while a run is
   * active (with `meta.run_id`), else the site stream.
   *
   * @param type Event type, for example `"weather"`: 1 to 128 characters, no control characters.
   * @param data Payload; a plain JSON object.
   * @param options `meta`, `ts`, `storePermanently`, `makeCurrent`, the post's `idempotencyKey`
   *   and `retries` (docs/client.md), and an abort signal.
   * @returns The envelope exactly as the server wrote it to disk.
   * @throws {TypeError} If an argument has the wrong type; no request is made.
   * @throws {TelemetryConnectionError} If no server answers within `timeoutMs`, on every try.
   * @throws {TelemetryHttpError} If the server refuses the event; `detail` says what to fix.
   *
   * @example Usage
   * ```ts ignore
   * import { TelemetryClient } from "@obs-utils/telemetry/client";
   * const event = await new TelemetryClient().postEvent("weather", { wind_mps: 2.1 });
   * console.log(event.seq, event.meta.run_id);
   * ```
   */
  async postEvent(
    type: string,
    data: JsonObject,
    options: PostEventOptions = {},
  ): Promise<TelemetryEvent> {
    const action = `Cannot post an event of type ${
      typeof type === "string" ? JSON.stringify(type.slice(0, 60)) : "?"
    }`;
    const signal = this.#requestSignal(options, action);
    const body = stringifyBody(toWire(type, data, options, action), action);
    const answer = await this.#post("/event", body, signal, options, action);
    return this.#transport.toEvent(answer, "/event");
  }

  /**
   * Records several events in one request (`POST /events`, docs/http-api.md): all or nothing, in
   * order.
   *
   * @param items The events; each is validated before anything is sent.
   * @param options The post's `idempotencyKey` and `retries` (docs/client.md), an abort signal,
   *   and `minimal: true` for the minimal answer instead of every envelope.
   * @returns The envelopes as written, in the order of `items`; with `minimal: true`, how many
   *   were accepted and the seqs of the first and the last.
   * @throws {TypeError} If `items` is not an array or an item is malformed (the message names its
   * index); no request is made.
   * @throws {TelemetryConnectionError} If no server answers within `timeoutMs`, on every try.
   * @throws {TelemetryHttpError} If the server refuses the batch; `detail` names the bad item.
   *
   * @example Usage
   * ```ts ignore
   * import { TelemetryClient } from "@obs-utils/telemetry/client";
   * const client = new TelemetryClient();
   * const events = await client.postEvents([
   *   { type: "weather", data: { wind_mps: 2.1 } },
   *   { type: "environment", data: { humidity: 41 }, storePermanently: false },
   * ]);
   * const { accepted, first_seq, last_seq } = await client.postEvents(
   *   [{ type: "weather", data: { wind_mps: 2.3 } }],
   *   { minimal: true },
   * );
   * ```
   */
  postEvents(
    items: readonly EventInput[],
    options: PostEventsOptions & { minimal: true },
  ): Promise<BatchSummary>;
  /**
   * Records several events in one request (`POST /events`) and returns their envelopes; see the
   * first signature.
   *
   * @param items The events.
   * @param options The post's `idempotencyKey`, `retries` and abort signal.
   * @returns The envelopes as written, in the order of `items`.
   *
   * @example Usage
   * ```ts ignore
   * import { TelemetryClient } from "@obs-utils/telemetry/client";
   * const [event] = await new TelemetryClient().postEvents([{ type: "weather", data: {} }]);
   * ```
   */
  postEvents(
    items: readonly EventInput[],
    options?: PostEventsOptions & { minimal?: false | undefined },
  ): Promise<TelemetryEvent[]>;
  /**
   * Records several events in one request (`POST /events`), with `minimal` known only at run
   * time; see the first signature.
   *
   * @param items The events.
   * @param options As for the first signature.
   * @returns The envelopes, or with `minimal: true` the minimal answer.
   *
   * @example Usage
   * ```ts ignore
   * import { TelemetryClient } from "@obs-utils/telemetry/client";
   * const quiet = Deno.args.includes("--quiet");
   * const answer = await new TelemetryClient().postEvents([], { minimal: quiet });
   * ```
   */
  postEvents(
    items: readonly EventInput[],
    options?: PostEventsOptions,
  ): Promise<TelemetryEvent[] | BatchSummary>;
  async postEvents(
    items: readonly EventInput[],
    options: PostEventsOptions = {},
  ): Promise<TelemetryEvent[] | BatchSummary> {
    const action = "Cannot post events";
    const signal = this.#requestSignal(options, action);
    const minimal = options.minimal;
    if (minimal !== undefined && typeof minimal !== "boolean") {
      throw new TypeError(`${action}: "minimal" must be true or false, not ${describe(minimal)}`);
    }
    const body = eventsBody(items, action);
    const headers = minimal ? MINIMAL_HEADERS : undefined;
    const { value, res } = await this.#post("/events", body, signal, options, action, headers);
    if (minimal && isSummary(value)) {
      return { accepted: value.accepted, first_seq: value.first_seq, last_seq: value.last_seq };
    }
    if (!isJsonObject(value) || !Array.isArray(value.events)) {
      throw this.#transport.shapeError(
        res,
        value,
        "/events",
        minimal
          ? 'an object {"accepted": n, "first_seq": seq, "last_seq": seq}'
          : 'an object {"accepted": n, "events": [...]}',
      );
    }
    const events = value.events.map((e: unknown) =>
      this.#transport.toEvent({ value: e, res }, "/events")
    );
    if (!minimal) return events;
    // A server that predates the minimal answer sends every envelope: the same summary.
    const n = events.length;
    return n === 0
      ? { accepted: 0, first_seq: null, last_seq: null }
      : { accepted: n, first_seq: events[0]!.seq, last_seq: events[n - 1]!.seq };
  }

  /**
   * Reads the latest event of every type (`GET /current`).
   *
   * @param options An optional abort signal.
   * @returns An object keyed by event type; `{}` when nothing was posted yet.
   * @throws {TelemetryConnectionError} If no server answers within `timeoutMs`.
   * @throws {TelemetryHttpError} If the answer is an error or not an object of envelopes.
   *
   * @example Usage
   * ```ts ignore
   * import { TelemetryClient } from "@obs-utils/telemetry/client";
   * for (const [type, event] of Object.entries(await new TelemetryClient().current())) {
   *   console.log(type, event.ts, event.data);
   * }
   * ```
   */
  async current(options: RequestOptions = {}): Promise<Record<string, TelemetryEvent>> {
    const signal = this.#requestSignal(options, "Cannot read the current snapshot");
    // The plain map whatever the server's --wrap-current (docs/operations.md); a server that predates
    // the parameter ignores it and answers the plain map anyway.
    const answer = await this.#transport.call("GET", "/current?wrap=false", { signal });
    return this.#transport.toSnapshot(answer, "/current");
  }

  /**
   * Reads the latest event of one type (`GET /current/{type}`).
   *
   * @param type The event type.
   * @param options An optional abort signal.
   * @returns The full envelope, `meta` included.
   * @throws {TypeError} If `type` is not a valid event type; no request is made.
   * @throws {TelemetryConnectionError} If no server answers within `timeoutMs`.
   * @throws {TelemetryHttpError} 404 when no event of that type was posted (see
   * {@linkcode TelemetryClient.getCurrent} for a `null` instead).
   *
   * @example Usage
   * ```ts ignore
   * import { TelemetryClient } from "@obs-utils/telemetry/client";
   * const weather = await new TelemetryClient().currentEvent("weather");
   * ```
   */
  async currentEvent(type: string, options: RequestOptions = {}): Promise<TelemetryEvent> {
    const action = "Cannot read the current event";
    const signal = this.#requestSignal(options, action);
    checkType(type, action, '"type"');
    const path = `/current/${encodeURIComponent(type)}`;
    const answer = await this.#transport.call("GET", path, { signal });
    return this.#transport.toEvent(answer, path);
  }

  /**
   * Reads the latest event of one type, or `null` when there is none (docs/client.md `get_current`).
   *
   * @param col The event type (the legacy "collection").
   * @param options An optional abort signal.
   * @returns The full envelope, `meta` included, or `null`.
   * @throws {TypeError} If `col` is not a valid event type; no request is made.
   * @throws {TelemetryConnectionError} If no server answers within `timeoutMs`.
   * @throws {TelemetryHttpError} If the server answers an error other than 404.
   *
   * @example Usage
   * ```ts ignore
   * import { TelemetryClient } from "@obs-utils/telemetry/client";
   * const weather = await new TelemetryClient().getCurrent("weather");
   * console.log(weather?.data.wind_mps ?? "no weather yet");
   * ```
   */
  async getCurrent(col: string, options: RequestOptions = {}): Promise<TelemetryEvent | null> {
    const action = "Cannot read the current event";
    const signal = this.#requestSignal(options, action);
    checkType(col, action, '"col"');
    const path = `/current/${encodeURIComponent(col)}`;
    const answer = await this.#transport.call("GET", path, { signal, nullOn404: true });
    return answer ? this.#transport.toEvent(answer, path) : null;
  }

  /**
   * Legacy-compatible: posts an event that becomes the current one (docs/client.md `insert_current`).
   *
   * @param type The event type.
   * @param data Payload; a plain JSON object.
   * @param storePermanently `false` updates only the in-memory snapshot, without a file write.
   * @returns The event's seq as a string (its legacy `_id`).
   * @throws {TypeError} If an argument has the wrong type; no request is made.
   * @throws {TelemetryConnectionError} If no server answers within `timeoutMs`.
   * @throws {TelemetryHttpError} If the server refuses the event.
   *
   * @example Usage
   * ```ts ignore
   * import { TelemetryClient } from "@obs-utils/telemetry/client";
   * const id = await new TelemetryClient().insertCurrent("status", { mount: "tracking" }, false);
   * ```
   */
  async insertCurrent(type: string, data: JsonObject, storePermanently = true): Promise<string> {
    if (typeof storePermanently !== "boolean") {
      throw new TypeError(
        `Cannot insert the current event: "storePermanently" must be a boolean, not ${
          describe(storePermanently)
        }`,
      );
    }
    const event = await this.postEvent(type, data, { storePermanently });
    return event._id;
  }

  /**
   * Legacy-compatible insert: writes the event to disk without making it the current one
   * (`make_current: false`).
   *
   * @param type The event type.
   * @param data Payload; a plain JSON object.
   * @returns The event's seq as a string (its legacy `_id`).
   * @throws {TypeError} If an argument has the wrong type; no request is made.
   * @throws {TelemetryConnectionError} If no server answers within `timeoutMs`.
   * @throws {TelemetryHttpError} If the server refuses the event.
   *
   * @example Usage
   * ```ts ignore
   * import { TelemetryClient } from "@obs-utils/telemetry/client";
   * const id = await new TelemetryClient().insert("observations", { exptime: 120 });
   * ```
   */
  async insert(type: string, data: JsonObject): Promise<string> {
    const event = await this.postEvent(type, data, { makeCurrent: false });
    return event._id;
  }

  /**
   * Legacy-compatible lookup: always `null`, because the service keeps no history (docs/client.md);
   * read the NDJSON files instead. Makes no request.
   *
   * @param _col The legacy collection (ignored).
   * @param _id The legacy record id (ignored).
   * @returns `null`.
   *
   * @example Usage
   * ```ts
   * import { TelemetryClient } from "@obs-utils/telemetry/client";
   * import assert from "node:assert/strict";
   *
   * assert.equal(await new TelemetryClient().find("weather", "42"), null);
   * ```
   */
  find(_col: string, _id: string): Promise<null> {
    return Promise.resolve(null);
  }

  /**
   * Removes a type from the server's current snapshot (`DELETE /current/{type}`, docs/http-api.md):
   * it leaves `GET /current`, the metrics and the dashboard until a new event of that type
   * arrives, across restarts and crashes too. The stored files keep every event.
   *
   * @param type The event type.
   * @param options An optional abort signal.
   * @returns `true` when the type was removed, `false` when the snapshot had no such type (404).
   * @throws {TypeError} If `type` is not a valid event type; no request is made.
   * @throws {TelemetryConnectionError} If no server answers within `timeoutMs`.
   * @throws {TelemetryHttpError} For any other error answer (401 without the token...).
   *
   * @example Usage
   * ```ts ignore
   * import { TelemetryClient } from "@obs-utils/telemetry/client";
   * const removed = await new TelemetryClient().forget("old-sensor");
   * ```
   */
  async forget(type: string, options: RequestOptions = {}): Promise<boolean> {
    const action = "Cannot forget the current event";
    const signal = this.#requestSignal(options, action);
    checkType(type, action, '"type"');
    const path = `/current/${encodeURIComponent(type)}`;
    const answer = await this.#transport.call("DELETE", path, { signal, nullOn404: true });
    return answer !== undefined;
  }

  /**
   * Legacy-compatible no-op: the server manages its own snapshot (docs/client.md). Makes no request.
   *
   * @param _type The event type (ignored).
   * @returns A promise that resolves when nothing has been done.
   *
   * @example Usage
   * ```ts
   * import { TelemetryClient } from "@obs-utils/telemetry/client";
   * await new TelemetryClient().clearCurrent("weather");
   * ```
   */
  clearCurrent(_type: string): Promise<void> {
    return Promise.resolve();
  }

  /**
   * Asks the server to exit gracefully (`POST /shutdown`, answered 202 before it drains). Does
   * not wait for the exit.
   *
   * @param options An optional abort signal.
   * @returns A promise that resolves once the server accepted the request.
   * @throws {TelemetryConnectionError} If no server answers within `timeoutMs`.
   * @throws {TelemetryHttpError} 403 from a non-loopback peer, 503 if it is already stopping.
   *
   * @example Usage
   * ```ts ignore
   * import { TelemetryClient } from "@obs-utils/telemetry/client";
   * await new TelemetryClient().shutdown();
   * ```
   */
  async shutdown(options: RequestOptions = {}): Promise<void> {
    const signal = this.#requestSignal(options, "Cannot shut the server down");
    await this.#transport.call("POST", "/shutdown", { signal });
  }

  /**
   * Follows the live event stream (`GET /stream`, docs/http-api.md) as an async iterator: a
   * `snapshot` first, then `telemetry` and `run` messages as they happen. When the connection
   * drops (or cannot be opened, or a 5xx answers) it yields a `disconnected` message and
   * reconnects after a capped exponential back-off (`retryMs`, doubled per failed attempt, at
   * most `maxRetryMs`); a successful reconnection starts with a fresh `snapshot`. Aborting
   * `signal`, or leaving the `for await` loop, closes the connection and ends the iteration
   * without an error.
   *
   * @param options `types` filter, abort `signal` and the reconnection timings.
   * @returns An async generator of {@linkcode FollowMessage}s.
   * @throws {TypeError} If an option has the wrong type (when iteration starts; no request).
   * @throws {TelemetryHttpError} For a 4xx answer (bad token, unknown filter, no `/stream`
   * endpoint) or a message whose data is not what the API promises; retrying would not help.
   *
   * @example Usage
   * ```ts ignore
   * import { TelemetryClient } from "@obs-utils/telemetry/client";
   *
   * const controller = new AbortController();
   * for await (const message of new TelemetryClient().follow({ types: ["weather"], signal: controller.signal })) {
   *   if (message.kind === "telemetry") console.log(message.event.data);
   *   if (message.kind === "disconnected") console.warn(`reconnecting in ${message.retryMs} ms`);
   * }
   * ```
   */
  async *follow(options: FollowOptions = {}): AsyncGenerator<FollowMessage, void, undefined> {
    const action = "Cannot follow the event stream";
    checkOptionsObject(options, action);
    const signal = checkSignal(options.signal, action);
    const retryMs = checkDelay(options.retryMs, "retryMs", 500);
    const maxRetryMs = checkDelay(options.maxRetryMs, "maxRetryMs", 30_000);
    const idleTimeoutMs = checkDelay(options.idleTimeoutMs, "idleTimeoutMs", 45_000);
    const path = streamPath(options.types, action);
    yield* followStream(this.#transport, { path, signal, retryMs, maxRetryMs, idleTimeoutMs });
  }

  /**
   * Reads stored events (or, with `every`, buckets of them) from `GET /history`
   * (docs/client.md, docs/history.md), as they arrive: memory stays small for any range. When
   * an answer reaches its `limit` the client continues from its `next_since` by itself and
   * passes over the lines it repeats, so the loop sees every event once, in file order
   * (buckets: in time order).
   *
   * @param options Types, `since` (default 24 hours ago), `until`, `run`, `fields`, `every`,
   *   `agg`, `limit` per request and an abort `signal`.
   * @returns The events, or the buckets when `every` is given.
   * @throws {TelemetryHttpError} For a bad parameter (400 naming it) or an unknown run (404).
   * @throws {TelemetryConnectionError} If no server answers.
   *
   * @example Usage
   * ```ts ignore
   * import { TelemetryClient } from "@obs-utils/telemetry/client";
   *
   * const client = new TelemetryClient();
   * for await (const event of client.history({ types: ["weather"], since: "12h" })) {
   *   console.log(event.ts, event.data);
   * }
   * for await (const b of client.history({ types: ["weather"], every: "5m", agg: ["mean", "max"] })) {
   *   console.log(b.t, b.fields["wind_mps"]?.max);
   * }
   * ```
   */
  history(options: HistoryBucketOptions): AsyncGenerator<HistoryBucket, void, undefined>;
  /**
   * Reads stored events from `GET /history`; see the overload with `every` for buckets.
   *
   * @param options Types, `since`, `until`, `run`, `limit` per request and an abort `signal`.
   * @returns The events, in file order.
   *
   * @example Usage
   * ```ts ignore
   * import { TelemetryClient } from "@obs-utils/telemetry/client";
   *
   * for await (const event of new TelemetryClient().history({ since: "2026-05-10" })) {
   *   console.log(event.seq);
   * }
   * ```
   */
  history(
    options?: HistoryOptions & { every?: undefined },
  ): AsyncGenerator<TelemetryEvent, void, undefined>;
  history(
    options: HistoryOptions = {},
  ): AsyncGenerator<TelemetryEvent | HistoryBucket, void, undefined> {
    const action = "Cannot read the history";
    checkOptionsObject(options, action);
    checkSignal(options.signal, action);
    return historyPages(this.#transport, options);
  }

  /**
   * One post, sent again with the same `Idempotency-Key` while no answer comes back, at most
   * `retries` times (docs/client.md): the service answers a key it has stored once more, without
   * storing it again.
   */
  async #post(
    path: "/event" | "/events",
    body: string,
    signal: AbortSignal | undefined,
    options: PostOptions,
    action: string,
    headers?: Readonly<Record<string, string>>,
  ): Promise<Answer> {
    const idempotencyKey = checkIdempotencyKey(options.idempotencyKey, action) ??
      newIdempotencyKey();
    const retries = checkRetries(options.retries, action, this.#retries);
    let backoff: Backoff | undefined;
    for (let attempt = 0;; attempt++) {
      try {
        return await this.#transport.call("POST", path, {
          signal,
          body,
          idempotencyKey,
          ...(headers ? { headers } : {}),
        });
      } catch (err) {
        if (!(err instanceof TelemetryConnectionError) || attempt >= retries) throw err;
        backoff ??= new Backoff({ firstMs: RETRY_FIRST_MS, maxMs: RETRY_MAX_MS });
        await backoff.wait(signal);
        if (signal?.aborted) throw signal.reason;
      }
    }
  }

  #requestSignal(options: RequestOptions, action: string): AbortSignal | undefined {
    checkOptionsObject(options, action);
    return checkSignal(options.signal, action);
  }
}

/** The request header of a post that asks for the minimal answer (docs/http-api.md). */
const MINIMAL_HEADERS: Readonly<Record<string, string>> = { prefer: "return=minimal" };

/** Whether an answer is the minimal answer of `POST /events`. */
function isSummary(value: unknown): value is BatchSummary {
  if (!isJsonObject(value)) return false;
  const seq = (x: unknown) => x === null || (Number.isSafeInteger(x) && (x as number) >= 0);
  return Number.isSafeInteger(value.accepted) && (value.accepted as number) >= 0 &&
    seq(value.first_seq) && seq(value.last_seq) && !("events" in value);
}

/** `?profile=P` of the safety routes, or nothing for the default (`site`). */
function profileQuery(options: SafetyOptions): string {
  return options.profile === undefined ? "" : `?profile=${encodeURIComponent(options.profile)}`;
}
