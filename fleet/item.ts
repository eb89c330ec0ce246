/**
 * One stored event on its way to the fleet (docs/fleet.md): its identity
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

/** Headers every published line carries (docs/fleet.md). */
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

/** A row of `telemetry_events` (docs/fleet.md), with `data` and `meta` as JSON text. */
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
 * PostgreSQL cannot store U+0000 in `text` or `jsonb`, nor a lone UTF-16 surrogate (`"\ud800"`,
 * which JSON allows and the service stores as sent); either becomes U+FFFD in the row, so one
 * such event does not fail its batch forever. Everything else is stored as written.
 */
function pgSafe(json: string): string {
  if (!json.includes("\\u")) return json;
  // Escapes can only come from JSON.stringify here: re-read and write strings and keys well-formed.
  const clean = (v: unknown): unknown => {
    if (typeof v === "string") return v.toWellFormed().replaceAll("\u0000", "\ufffd");
    if (Array.isArray(v)) return v.map(clean);
    if (typeof v === "object" && v !== null) {
      return Object.fromEntries(Object.entries(v).map(([k, x]) => [clean(k) as string, clean(x)]));
    }
    return v;
  };
  return JSON.stringify(clean(JSON.parse(json)));
}

const ISO_TS =
  /^(\d{4})-(\d{2})-(\d{2})T(\d{2}):(\d{2}):(\d{2})(?:\.\d{1,9})?(?:Z|[+-]\d{2}:\d{2})$/;

/**
 * Whether `ts` is an ISO 8601 time with a zone that PostgreSQL's `timestamptz` accepts: a line
 * whose `ts` was damaged by hand must be skipped, not fail its whole batch again and again.
 */
export function isTimestamp(ts: string): boolean {
  const m = ISO_TS.exec(ts);
  if (m === null) return false;
  const [y, mo, d, h, mi, s] = m.slice(1, 7).map(Number) as [
    number,
    number,
    number,
    number,
    number,
    number,
  ];
  if (y < 1 || mo < 1 || mo > 12 || d < 1 || h > 23 || mi > 59 || s > 59) return false;
  return d <= new Date(Date.UTC(y, mo, 0)).getUTCDate();
}

/**
 * The seq of a stored line, or why it is no stored event (not JSON, no safe-integer `seq`, no
 * valid `ts`, no string `type`). The forwarder skips such a line with a warning: sent on, it
 * would fail its batch at the destination forever and stop the stream behind it.
 */
export function storedSeq(line: string): number | string {
  let value: unknown;
  try {
    value = JSON.parse(line);
  } catch {
    return "not JSON";
  }
  if (typeof value !== "object" || value === null || Array.isArray(value)) {
    return "not a JSON object";
  }
  const { seq, ts, type } = value as Record<string, unknown>;
  if (!Number.isSafeInteger(seq) || (seq as number) < 0) return "no integer seq";
  if (typeof ts !== "string" || !isTimestamp(ts)) return "no valid ts";
  if (typeof type !== "string") return "no string type";
  return seq as number;
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
  if (!isTimestamp(ts)) throw new SyntaxError(`stored line ${item.seq} has no valid ts`);
  return {
    unit,
    stream: item.stream,
    run_id: item.runId,
    seq: item.seq,
    ts,
    type: type.toWellFormed().replaceAll("\u0000", "\ufffd"),
    data: pgSafe(JSON.stringify(value.data ?? {})),
    meta: pgSafe(JSON.stringify(value.meta ?? {})),
  };
}
