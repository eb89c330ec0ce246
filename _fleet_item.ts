/**
 * One stored event on its way to the fleet (CONTRACT 13): its identity
 * `(unit, stream, run_id, seq)`, its idempotency key, and the row PostgreSQL stores. The payload
 * is the NDJSON line exactly as the service wrote it; nothing here re-serialises it.
 *
 * @module
 */

/** Default subject prefix: subjects are `<prefix>.<unit>.<stream>`. */
export const DEFAULT_SUBJECT_PREFIX = "telemetry";
/** Default JetStream stream name. */
export const DEFAULT_NATS_STREAM = "TELEMETRY";
/** Default durable consumer name of the archivers. */
export const DEFAULT_DURABLE = "telemetry-archive";

/** Headers every published line carries (CONTRACT 13). */
export const HEADER_UNIT = "Telemetry-Unit";
/** The stream the line belongs to: `site` or `run`. */
export const HEADER_STREAM = "Telemetry-Stream";
/** The run's id, empty for the site stream. */
export const HEADER_RUN_ID = "Telemetry-Run-Id";

/** The two kinds of stream a site directory holds. */
export type StreamKind = "site" | "run";

/** A stored line to forward, with where it comes from. */
export interface ForwardItem {
  /** `site` for the site stream, `run` for a run's stream. */
  readonly stream: StreamKind;
  /** The run's id, `""` for the site stream. */
  readonly runId: string;
  /** The line's seq (unique within its stream). */
  readonly seq: number;
  /** The NDJSON line without its newline, exactly as stored. */
  readonly line: string;
}

/** A row of `telemetry_events` (CONTRACT 13), with `data` and `meta` as JSON text. */
export interface EventRow {
  unit: string;
  stream: StreamKind;
  run_id: string;
  seq: number;
  ts: string;
  type: string;
  data: string;
  meta: string;
}

/** A unit name is one NATS subject token and a path-safe word: letters, digits, `_` and `-`. */
const UNIT = /^[A-Za-z0-9_-]{1,64}$/;

/**
 * Why `unit` cannot name an observatory in the fleet, or `undefined` when it can.
 *
 * @example
 * ```ts ignore
 * checkUnit("pan012"); // undefined
 * checkUnit("pan.012"); // "unit must be 1 to 64 letters, digits, '_' or '-' ..."
 * ```
 */
export function checkUnit(unit: string): string | undefined {
  if (UNIT.test(unit)) return undefined;
  return `unit ${JSON.stringify(unit)} must be 1 to 64 letters, digits, '_' or '-' ` +
    `(it is a NATS subject token and part of every event's key), for example "pan012".`;
}

/** The idempotency key: `<unit>/site/<seq>` or `<unit>/run/<run_id>/<seq>`. */
export function idempotencyKey(unit: string, item: ForwardItem): string {
  return item.stream === "site"
    ? `${unit}/site/${item.seq}`
    : `${unit}/run/${item.runId}/${item.seq}`;
}

/**
 * PostgreSQL cannot store U+0000 in `text` or `jsonb`; such a character (legal in JSON) becomes
 * U+FFFD in the row. Everything else is stored as written.
 */
function pgSafe(json: string): string {
  return json.includes("\\u0000") ? json.replaceAll("\\u0000", "\\ufffd") : json;
}

/**
 * The `telemetry_events` row of a stored line.
 *
 * @throws {SyntaxError} when the line is not a JSON object with `seq`, `ts` and `type`.
 */
export function toRow(unit: string, item: ForwardItem): EventRow {
  const value = JSON.parse(item.line) as Record<string, unknown>;
  const { ts, type } = value;
  if (typeof ts !== "string" || typeof type !== "string") {
    throw new SyntaxError(`stored line ${item.seq} has no string ts and type`);
  }
  return {
    unit,
    stream: item.stream,
    run_id: item.runId,
    seq: item.seq,
    ts,
    type: type.replaceAll("\u0000", "\ufffd"),
    data: pgSafe(JSON.stringify(value.data ?? {})),
    meta: pgSafe(JSON.stringify(value.meta ?? {})),
  };
}
