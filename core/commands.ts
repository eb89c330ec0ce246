/**
 * Request bodies into typed commands (docs/http-api.md): what the service accepts, and the
 * {@linkcode InvalidRequestError} that says what to change when it does not.
 *
 * @module
 */

import {
  checkEventType,
  describe,
  isJsonObject,
  type JsonObject,
  normalizeTimestamp,
  RESERVED_TYPE_PREFIX,
  reservedTypeProblem,
} from "../wire/event.ts";
import { valueProblem } from "../wire/event_value.ts";
import { errorText, InvalidRequestError, itemPrefix } from "./errors.ts";

import { RUN_ID_PATTERN } from "../store/layout.ts";

/** Unicode Cc (C0, DEL, C1): no place in a directory name, a log line or a terminal. */
// deno-lint-ignore no-control-regex
const CONTROL = /[\u0000-\u001f\u007f-\u009f]/;

/** An event request, validated and partly serialised, waiting for its seq. */
export interface EventCommand {
  /** The event type. */
  type: string;
  /** The payload. */
  data: JsonObject;
  /** `data` serialised. */
  dataJson: string;
  /** `meta` serialised without the server's `run_id`. */
  metaJson: string;
  /** `meta.run_id` as sent by the caller, if any. */
  callerRunId: string | undefined;
  /** The normalised `ts`; `undefined` stamps the receive time. */
  ts: string | undefined;
  /** `false`: update the snapshot only, write nothing. */
  storePermanently: boolean;
  /** `false`: write without updating the snapshot. */
  makeCurrent: boolean;
  /** The 0-based index in a batch request, named in errors; `undefined` outside a batch. */
  item: number | undefined;
}

/** What to start: `POST /run/start` (docs/http-api.md), every field optional. */
export interface RunStartCommand {
  /** The run id; derived when omitted. */
  runId?: string | undefined;
  /** The run directory, relative to the site directory or absolute. */
  runDir?: string | undefined;
  /** Metadata stored with the run record. */
  meta?: JsonObject | undefined;
}

/**
 * Validates a `POST /run/start` body (docs/http-api.md); `null` or nothing means "omitted".
 *
 * @param body The parsed JSON body.
 * @returns The command.
 * @throws {InvalidRequestError} Saying which field to change.
 */
export function parseRunStart(body: unknown): RunStartCommand {
  if (body === undefined || body === null) return { runId: undefined, runDir: undefined, meta: {} };
  if (!isJsonObject(body)) {
    throw new InvalidRequestError(
      `The run start body must be a JSON object such as {"run_id": "night-1"}, not ${
        describe(body)
      }.`,
    );
  }
  const runId = optionalString(body, "run_id");
  const runDir = optionalString(body, "run_dir");
  if (runId !== undefined && !RUN_ID_PATTERN.test(runId)) {
    throw new InvalidRequestError(
      `run_id ${
        JSON.stringify(runId.slice(0, 140))
      } is not allowed; use 1 to 128 letters, digits, ".", "_" or "-", starting with a letter or digit.`,
    );
  }
  if (runDir !== undefined && (runDir.length === 0 || CONTROL.test(runDir))) {
    throw new InvalidRequestError(
      "run_dir must be a non-empty path without NUL or other control characters.",
    );
  }
  if (runDir !== undefined && !runDir.isWellFormed()) {
    // The file system would store a lone surrogate as U+FFFD: a directory other than the named one.
    throw new InvalidRequestError(
      "run_dir contains a lone UTF-16 surrogate; send well-formed Unicode.",
    );
  }
  const meta = body.meta ?? {};
  if (!isJsonObject(meta)) {
    throw new InvalidRequestError(`"meta" must be a JSON object, not ${describe(meta)}.`);
  }
  checkValue(meta, "meta");
  return { runId, runDir, meta };
}

/** Refuses a `data` or `meta` value the service never stores (docs/http-api.md). */
function checkValue(value: unknown, key: "data" | "meta"): void {
  const problem = valueProblem(value, key);
  if (problem !== undefined) throw new InvalidRequestError(problem);
}

/** The fields of an event object (docs/http-api.md); anything else is refused. */
export const EVENT_FIELDS: readonly string[] = [
  "type",
  "data",
  "meta",
  "ts",
  "store_permanently",
  "make_current",
];
const EVENT_FIELD_SET: ReadonlySet<string> = new Set(EVENT_FIELDS);
/** Names people send for the event time; the detail points them to `ts`. */
const TIME_ALIASES: ReadonlySet<string> = new Set(["date", "timestamp", "time"]);

/** Refuses a top-level field the event object does not have (docs/http-api.md). */
function checkFields(raw: JsonObject): void {
  for (const key in raw) {
    if (EVENT_FIELD_SET.has(key)) continue;
    const shown = JSON.stringify(key.length > 60 ? `${key.slice(0, 60)}...` : key);
    throw new InvalidRequestError(
      `unknown field ${shown}${
        TIME_ALIASES.has(key) ? "; the event time is `ts`" : ""
      }; an event accepts only ${EVENT_FIELDS.map((f) => `"${f}"`).join(", ")}.`,
    );
  }
}

function optionalString(body: JsonObject, key: string): string | undefined {
  const value = body[key];
  if (value === undefined || value === null) return undefined;
  if (typeof value !== "string") {
    throw new InvalidRequestError(`"${key}" must be a string, not ${describe(value)}.`);
  }
  return value;
}

function optionalBoolean(body: JsonObject, key: string): boolean {
  const value = body[key];
  if (value === undefined || value === null) return true;
  if (typeof value !== "boolean") {
    throw new InvalidRequestError(
      `"${key}" must be true or false, not ${describe(value)}.`,
    );
  }
  return value;
}

const NO_META: JsonObject = Object.freeze({});

/**
 * Validates one event request (docs/http-api.md) and serialises what does not depend on the seq.
 *
 * @param raw The parsed JSON of one event.
 * @param index Its 0-based index in a batch, named in errors; `undefined` outside a batch.
 * @param line Its 1-based line in an NDJSON body, named in errors instead of the index.
 * @returns The command.
 * @throws {InvalidRequestError} Naming the field to change.
 */
export function parseEvent(raw: unknown, index?: number, line?: number): EventCommand {
  if (index === undefined) return checkEvent(raw, undefined);
  // In a batch the item's prefix ("Line 3 (item 2, 0-based): ") is only built for a refusal.
  try {
    return checkEvent(raw, index);
  } catch (err) {
    if (!(err instanceof InvalidRequestError)) throw err;
    throw new InvalidRequestError(itemPrefix(index, line) + err.message, { cause: err.cause });
  }
}

/** {@linkcode parseEvent} without the item's prefix in its errors. */
function checkEvent(raw: unknown, index: number | undefined): EventCommand {
  if (!isJsonObject(raw)) {
    throw new InvalidRequestError(
      `an event must be a JSON object with "type" and "data", not ${describe(raw)}.`,
    );
  }
  checkFields(raw);
  const typeProblem = checkEventType(raw.type);
  if (typeProblem) throw new InvalidRequestError(typeProblem);
  const type = raw.type as string;
  if (type.startsWith(RESERVED_TYPE_PREFIX)) {
    throw new InvalidRequestError(reservedTypeProblem(type));
  }
  if (!isJsonObject(raw.data)) {
    throw new InvalidRequestError(
      `"data" must be a JSON object such as {"wind_mps": 2.1}, not ${describe(raw.data)}.`,
    );
  }
  // Most events carry no meta: nothing to check, and its JSON is known.
  const noMeta = raw.meta === undefined || raw.meta === null;
  const meta = noMeta ? NO_META : raw.meta;
  if (!isJsonObject(meta)) {
    throw new InvalidRequestError(`"meta" must be a JSON object, not ${describe(meta)}.`);
  }
  checkValue(raw.data, "data");
  if (!noMeta) checkValue(meta, "meta");
  let callerRunId: string | undefined;
  if (meta.run_id !== undefined) {
    if (typeof meta.run_id !== "string") {
      throw new InvalidRequestError(
        `meta.run_id must be a string, not ${
          describe(meta.run_id)
        }; better, omit it and the server stamps it.`,
      );
    }
    callerRunId = meta.run_id;
  }
  let ts: string | undefined;
  if (raw.ts === undefined || raw.ts === null) {
    ts = undefined;
  } else if (typeof raw.ts !== "string") {
    throw new InvalidRequestError(
      `"ts" must be an ISO 8601 string such as "2026-11-22T03:00:00.000Z", not ${
        describe(raw.ts)
      }.`,
    );
  } else {
    try {
      // A `ts` already in the envelope's form is kept as it came (wire/event.ts).
      ts = normalizeTimestamp(raw.ts);
    } catch (err) {
      throw new InvalidRequestError(
        `${
          errorText(err)
        }; send "ts" like "2026-11-22T03:00:00.000Z", or omit it to use the server's time.`,
      );
    }
  }
  let dataJson: string;
  let metaJson: string;
  try {
    dataJson = JSON.stringify(raw.data);
    metaJson = noMeta ? "{}" : JSON.stringify(meta);
  } catch {
    throw new InvalidRequestError(
      `the event is nested too deeply; flatten "data" or "meta".`,
    );
  }
  return {
    type,
    data: raw.data,
    ts,
    dataJson,
    metaJson,
    callerRunId,
    storePermanently: optionalBoolean(raw, "store_permanently"),
    makeCurrent: optionalBoolean(raw, "make_current"),
    item: index,
  };
}

/**
 * Validates the events of one request, all or nothing.
 *
 * @param items The parsed JSON of each event.
 * @param batch Name the 0-based index of a bad item in the error even when there is only one.
 * @param lines The 1-based NDJSON line of each item, when the batch came as NDJSON: errors then
 *   name the line people see in their editor.
 * @returns One command per item, in order.
 * @throws {InvalidRequestError} Naming the first bad item.
 */
export function parseEvents(
  items: readonly unknown[],
  batch: boolean,
  lines?: readonly number[],
): EventCommand[] {
  const commands: EventCommand[] = new Array(items.length);
  for (let i = 0; i < items.length; i++) {
    commands[i] = parseEvent(items[i], batch ? i : undefined, batch ? lines?.[i] : undefined);
  }
  return commands;
}
