/**
 * The shape checks of the small answers of the API (docs/http-api.md, docs/types.md): `/health`,
 * `/ready`, `/types` and `/check`. An answer without the promised shape becomes a
 * `TelemetryHttpError` that asks whether the address is a telemetry server. Web APIs only, like
 * the client.
 *
 * @module
 */

import { isJsonObject } from "../wire/event.ts";
import { httpError } from "./errors.ts";
import type { Answer, Transport } from "./transport.ts";
import type { CheckInfo, HealthInfo, ReadyInfo, SafetyInfo, TypeInfo } from "./types.ts";

/**
 * Reads the answer of `GET /health`.
 *
 * @param transport The client's transport, for the error.
 * @param answer The answer.
 * @returns `{ ok }`.
 * @throws {TelemetryHttpError} If it is not `{ "ok": boolean }`.
 *
 * @example Usage
 * ```ts
 * import { healthOf } from "./answers.ts";
 * import { Transport } from "./transport.ts";
 * import assert from "node:assert/strict";
 *
 * const transport = new Transport({
 *   baseUrl: "http://localhost:6562",
 *   token: undefined,
 *   timeoutMs: 5000,
 *   fetch: undefined,
 * });
 * assert.deepEqual(healthOf(transport, { value: { ok: true }, res: new Response() }), { ok: true });
 * ```
 */
export function healthOf(transport: Transport, { value, res }: Answer): HealthInfo {
  if (!isJsonObject(value) || typeof value.ok !== "boolean") {
    throw transport.shapeError(res, value, "/health", 'an object {"ok": boolean}');
  }
  return { ok: value.ok };
}

/**
 * Reads the answer of `GET /ready`.
 *
 * @param transport The client's transport, for the error.
 * @param answer The answer.
 * @returns Readiness, the run state, the version and, from newer servers, the zone and the
 *   site's id.
 * @throws {TelemetryHttpError} If it is not a readiness object.
 *
 * @example Usage
 * ```ts
 * import { readyOf } from "./answers.ts";
 * import { Transport } from "./transport.ts";
 * import assert from "node:assert/strict";
 *
 * const transport = new Transport({
 *   baseUrl: "http://localhost:6562",
 *   token: undefined,
 *   timeoutMs: 5000,
 *   fetch: undefined,
 * });
 * const value = { ready: true, run_active: false, run_id: null, version: "0.5.0" };
 * assert.equal(readyOf(transport, { value, res: new Response() }).version, "0.5.0");
 * ```
 */
export function readyOf(transport: Transport, { value, res }: Answer): ReadyInfo {
  if (
    !isJsonObject(value) || typeof value.ready !== "boolean" ||
    typeof value.run_active !== "boolean" ||
    !(value.run_id === null || typeof value.run_id === "string") ||
    typeof value.version !== "string"
  ) {
    throw transport.shapeError(res, value, "/ready", "a readiness object");
  }
  return {
    ready: value.ready,
    run_active: value.run_active,
    run_id: value.run_id,
    version: value.version,
    ...(typeof value.zone === "string" ? { zone: value.zone } : {}),
    ...(typeof value.site_id === "string" ? { site_id: value.site_id } : {}),
  };
}

/**
 * Reads the answer of `GET /types`.
 *
 * @param transport The client's transport, for the error.
 * @param answer The answer.
 * @returns The entries keyed by type.
 * @throws {TelemetryHttpError} If it is not an object of type entries.
 *
 * @example Usage
 * ```ts
 * import { typesOf } from "./answers.ts";
 * import { Transport } from "./transport.ts";
 * import assert from "node:assert/strict";
 *
 * const transport = new Transport({
 *   baseUrl: "http://localhost:6562",
 *   token: undefined,
 *   timeoutMs: 5000,
 *   fetch: undefined,
 * });
 * const value = { weather: { state: "ok", reasons: [] } };
 * assert.equal(typesOf(transport, { value, res: new Response() }).weather?.state, "ok");
 * ```
 */
export function typesOf(transport: Transport, { value, res }: Answer): Record<string, TypeInfo> {
  const entries = isJsonObject(value) ? Object.entries(value) : undefined;
  if (
    !entries ||
    !entries.every(([, v]) =>
      isJsonObject(v) && typeof v.state === "string" && Array.isArray(v.reasons)
    )
  ) {
    throw transport.shapeError(res, value, "/types", "an object of type entries");
  }
  return Object.fromEntries(entries) as unknown as Record<string, TypeInfo>;
}

/**
 * Reads the answer of `GET /safety` (docs/safety.md).
 *
 * @param transport The client's transport, for the error.
 * @param answer The answer.
 * @returns The verdict.
 * @throws {TelemetryHttpError} If it is not `{"safe", "since", "clear_at", "reasons", "types"}`.
 *
 * @example Usage
 * ```ts
 * import { safetyOf } from "./answers.ts";
 * import { Transport } from "./transport.ts";
 * import assert from "node:assert/strict";
 *
 * const transport = new Transport({
 *   baseUrl: "http://localhost:6562",
 *   token: undefined,
 *   timeoutMs: 5000,
 *   fetch: undefined,
 * });
 * const value = { safe: true, since: "2026-11-27T03:00:00.000Z", clear_at: null, reasons: [], types: {} };
 * assert.equal(safetyOf(transport, { value, res: new Response(null) }).safe, true);
 * ```
 */
export function safetyOf(transport: Transport, { value, res }: Answer): SafetyInfo {
  if (
    !isJsonObject(value) || typeof value.safe !== "boolean" || typeof value.since !== "string" ||
    !(value.clear_at === null || typeof value.clear_at === "string") ||
    !Array.isArray(value.reasons) || !value.reasons.every((r) => typeof r === "string") ||
    !isJsonObject(value.types) ||
    // Added in 0.7; a 0.6 service answers without them (read as empty).
    !(value.events === undefined || Array.isArray(value.events)) ||
    !(value.waivers === undefined || Array.isArray(value.waivers))
  ) {
    throw transport.shapeError(
      res,
      value,
      "/safety",
      'an object {"safe", "since", "clear_at", "reasons", "types"}',
    );
  }
  return {
    profile: "site",
    events: [],
    waivers: [],
    ...value,
  } as unknown as SafetyInfo;
}

/**
 * Reads the answer of `GET /check`, a 503 included: a failing check is an answer.
 *
 * @param transport The client's transport, for the error.
 * @param answer The answer.
 * @returns `ok` and the `failing` lines.
 * @throws {TelemetryHttpError} If it is not `{"ok", "failing"}`; a 503 that is not (a server
 *   shutting down) as the error it is.
 *
 * @example Usage
 * ```ts
 * import { checkOf } from "./answers.ts";
 * import { Transport } from "./transport.ts";
 * import assert from "node:assert/strict";
 *
 * const transport = new Transport({
 *   baseUrl: "http://localhost:6562",
 *   token: undefined,
 *   timeoutMs: 5000,
 *   fetch: undefined,
 * });
 * const value = { ok: false, failing: ["weather is stale"] };
 * assert.equal(checkOf(transport, { value, res: new Response(null, { status: 503 }) }).ok, false);
 * ```
 */
export function checkOf(transport: Transport, { value, res }: Answer): CheckInfo {
  if (
    !isJsonObject(value) || typeof value.ok !== "boolean" || !Array.isArray(value.failing) ||
    !value.failing.every((f) => typeof f === "string")
  ) {
    // A 503 of a server that is shutting down is a problem+json: report it as the error it is.
    if (res.status === 503) {
      throw httpError(res, JSON.stringify(value), "GET /check", transport.url("/check"));
    }
    throw transport.shapeError(res, value, "/check", 'an object {"ok", "failing"}');
  }
  return value as unknown as CheckInfo;
}
