/**
 * The telemetry event envelope and {@linkcode TelemetryEvent}, the immutable object the client
 * returns for it. Web APIs only: this module runs unchanged on Deno, Node >= 20 and browsers.
 *
 * Every NDJSON line the service writes is one envelope with exactly the keys `seq`, `ts`, `type`,
 * `data` and `meta`, in that order, so `JSON.stringify(event)` of a {@linkcode TelemetryEvent} is
 * byte-for-byte the line on disk.
 *
 * @example Usage
 * ```ts
 * import { TelemetryEvent } from "@obs-utils/telemetry/event";
 * import assert from "node:assert/strict";
 *
 * const line = '{"seq":7,"ts":"2026-11-22T03:00:00.000Z","type":"weather","data":{"wind_mps":2.1},"meta":{}}';
 * const event = TelemetryEvent.fromJSON(JSON.parse(line));
 * assert.equal(event.data.wind_mps, 2.1);
 * assert.equal(event._id, "7");
 * assert.equal(JSON.stringify(event), line);
 * ```
 *
 * @module
 */

export {
  type BatchSummary,
  checkEventType,
  daysInMonth,
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
} from "./wire/event.ts";
