/**
 * Validation of request bodies for the service (CONTRACT 2.3, 2.4): what the service accepts,
 * and the {@linkcode ServiceError} that says what to change when it does not. Internal module,
 * re-exported through `service.ts`.
 *
 * @module
 */

import {
  checkEventType,
  describe,
  formatTimestamp,
  isJsonObject,
  type JsonObject,
  parseTimestamp,
} from "./event.ts";
import { errorText } from "./storage.ts";

/** A run id is one safe path segment (CONTRACT 2.3). */
export const RUN_ID_PATTERN: RegExp = /^[A-Za-z0-9][A-Za-z0-9._-]{0,127}$/;

/**
 * How many levels of objects and arrays `data` and `meta` may nest (`data` itself is level 1).
 * Deeper values are refused with 400: whether `JSON.stringify` overflows the stack on them depends
 * on how deep the call stack already is (a 20,000-level run `meta` failed inside the active-run
 * write with a 500 and left files behind), and readers such as Python's `json` give up near
 * 1,000 levels.
 */
const MAX_NESTING = 100;

/**
 * A request the service refused, with the HTTP status that says why (CONTRACT 2.1) and a
 * `detail` sentence that tells the caller what to change.
 *
 * @example Usage
 * ```ts
 * import { ServiceError } from "@obs-utils/telemetry/server";
 * import assert from "node:assert/strict";
 *
 * const err = new ServiceError(409, "No run is active; start one with POST /run/start.");
 * assert.equal(err.status, 409);
 * ```
 */
export class ServiceError extends Error {
  /** The HTTP status code. */
  readonly status: number;
  /**
   * Creates the error.
   *
   * @param status HTTP status code (400, 404, 409, 500, 503, 507).
   * @param detail One full sentence saying what went wrong and how to fix it.
   * @param options The underlying error, if any.
   */
  constructor(status: number, detail: string, options?: { cause?: unknown }) {
    super(detail, options);
    this.name = "ServiceError";
    this.status = status;
  }
}

/** An event request validated and partly serialised, waiting for its seq. */
export interface PreparedEvent {
  type: string;
  data: JsonObject;
  /** `,"ts":…,"type":…,"data":…` */
  middle: string;
  /** `meta` serialised without the server's `run_id`. */
  metaJson: string;
  /** `meta.run_id` as sent by the caller, if any. */
  callerRunId: string | undefined;
  /** The normalised `ts`. */
  ts: string;
  storePermanently: boolean;
  makeCurrent: boolean;
  receivedAt: number;
}

export interface RunStartRequest {
  runId: string | undefined;
  runDir: string | undefined;
  meta: JsonObject;
}

/** Validates a `POST /run/start` body (CONTRACT 2.3); `null` or nothing means "omitted". */
export function parseRunStart(body: unknown): RunStartRequest {
  if (body === undefined || body === null) return { runId: undefined, runDir: undefined, meta: {} };
  if (!isJsonObject(body)) {
    throw new ServiceError(
      400,
      `The run start body must be a JSON object such as {"run_id": "night-1"}, not ${
        describe(body)
      }.`,
    );
  }
  const runId = optionalString(body, "run_id");
  const runDir = optionalString(body, "run_dir");
  if (runId !== undefined && !RUN_ID_PATTERN.test(runId)) {
    throw new ServiceError(
      400,
      `run_id ${
        JSON.stringify(runId.slice(0, 140))
      } is not allowed; use 1 to 128 letters, digits, ".", "_" or "-", starting with a letter or digit.`,
    );
  }
  if (runDir !== undefined && (runDir.length === 0 || runDir.includes("\0"))) {
    throw new ServiceError(400, "run_dir must be a non-empty path without NUL characters.");
  }
  const meta = body.meta ?? {};
  if (!isJsonObject(meta)) {
    throw new ServiceError(400, `"meta" must be a JSON object, not ${describe(meta)}.`);
  }
  if (nestsDeeperThan(meta, MAX_NESTING)) throw tooDeep("", "meta");
  return { runId, runDir, meta };
}

/** Whether objects and arrays nest deeper than `max` levels; iterative, so any depth is safe. */
function nestsDeeperThan(value: unknown, max: number): boolean {
  const stack: [unknown, number][] = [[value, 1]];
  while (stack.length > 0) {
    const [current, depth] = stack.pop()!;
    if (depth > max) return true;
    for (const child of Array.isArray(current) ? current : Object.values(current as object)) {
      if (typeof child === "object" && child !== null) stack.push([child, depth + 1]);
    }
  }
  return false;
}

function tooDeep(where: string, key: string): ServiceError {
  return new ServiceError(
    400,
    `${where}"${key}" nests objects or arrays more than ${MAX_NESTING} levels deep; flatten it.`,
  );
}

function optionalString(body: JsonObject, key: string): string | undefined {
  const value = body[key];
  if (value === undefined || value === null) return undefined;
  if (typeof value !== "string") {
    throw new ServiceError(400, `"${key}" must be a string, not ${describe(value)}.`);
  }
  return value;
}

function optionalBoolean(body: JsonObject, key: string, where: string): boolean {
  const value = body[key];
  if (value === undefined || value === null) return true;
  if (typeof value !== "boolean") {
    throw new ServiceError(400, `${where}"${key}" must be true or false, not ${describe(value)}.`);
  }
  return value;
}

let lastReceivedMs = NaN;
let lastReceivedTs = "";
/** `formatTimestamp` for receive times, which repeat within a millisecond under load. */
function receivedTs(ms: number): string {
  if (ms !== lastReceivedMs) {
    lastReceivedTs = formatTimestamp(ms);
    lastReceivedMs = ms;
  }
  return lastReceivedTs;
}

/** Validates one event request (CONTRACT 2.4) and serialises what does not depend on the seq. */
export function prepareEvent(
  raw: unknown,
  receivedAt: number,
  index: number | undefined,
): PreparedEvent {
  const where = index === undefined ? "" : `Item ${index}: `;
  if (!isJsonObject(raw)) {
    throw new ServiceError(
      400,
      `${where}an event must be a JSON object with "type" and "data", not ${describe(raw)}.`,
    );
  }
  const typeProblem = checkEventType(raw.type);
  if (typeProblem) throw new ServiceError(400, where + typeProblem);
  const type = raw.type as string;
  if (!isJsonObject(raw.data)) {
    throw new ServiceError(
      400,
      `${where}"data" must be a JSON object such as {"wind_mps": 2.1}, not ${describe(raw.data)}.`,
    );
  }
  const meta = raw.meta ?? {};
  if (!isJsonObject(meta)) {
    throw new ServiceError(400, `${where}"meta" must be a JSON object, not ${describe(meta)}.`);
  }
  if (nestsDeeperThan(raw.data, MAX_NESTING)) throw tooDeep(where, "data");
  if (nestsDeeperThan(meta, MAX_NESTING)) throw tooDeep(where, "meta");
  let callerRunId: string | undefined;
  if (meta.run_id !== undefined) {
    if (typeof meta.run_id !== "string") {
      throw new ServiceError(
        400,
        `${where}meta.run_id must be a string, not ${
          describe(meta.run_id)
        }; better, omit it and the server stamps it.`,
      );
    }
    callerRunId = meta.run_id;
  }
  let ts: string;
  if (raw.ts === undefined || raw.ts === null) {
    ts = receivedTs(receivedAt);
  } else if (typeof raw.ts !== "string") {
    throw new ServiceError(
      400,
      `${where}"ts" must be an ISO 8601 string such as "2026-11-22T03:00:00.000Z", not ${
        describe(raw.ts)
      }.`,
    );
  } else {
    try {
      ts = formatTimestamp(parseTimestamp(raw.ts));
    } catch (err) {
      throw new ServiceError(
        400,
        `${where}${
          errorText(err)
        }; send "ts" like "2026-11-22T03:00:00.000Z", or omit it to use the server's time.`,
      );
    }
  }
  let middle: string;
  let metaJson: string;
  try {
    middle = `,"ts":"${ts}","type":${JSON.stringify(type)},"data":${JSON.stringify(raw.data)}`;
    metaJson = JSON.stringify(meta);
  } catch {
    throw new ServiceError(
      400,
      `${where}the event is nested too deeply; flatten "data" or "meta".`,
    );
  }
  return {
    type,
    data: raw.data,
    ts,
    middle,
    metaJson,
    callerRunId,
    storePermanently: optionalBoolean(raw, "store_permanently", where),
    makeCurrent: optionalBoolean(raw, "make_current", where),
    receivedAt,
  };
}
