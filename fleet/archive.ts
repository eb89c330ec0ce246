/**
 * `obs-utils telemetry archive` (docs/fleet.md): a JetStream durable pull consumer that inserts the
 * forwarded lines into PostgreSQL's `telemetry_events` and acknowledges them after the commit.
 * Several archivers with one durable name share the work; a message delivered twice (an ack lost
 * in a crash) meets the primary key and is stored once.
 *
 * @module
 */
import { readSeqAndType } from "../wire/ndjson.ts";
import {
  DEFAULT_DURABLE,
  DEFAULT_NATS_STREAM,
  DEFAULT_SUBJECT_PREFIX,
  type EventRow,
  type StreamKind,
  toRow,
} from "./item.ts";
import { Backoff, type FleetLog, PeerState } from "./retry.ts";
import { type ArchiveMessage, NatsArchiveSource } from "./sinks/nats.ts";
import { PostgresSink, TableShapeError } from "./sinks/postgres.ts";

/** Options of {@linkcode archive}. */
export interface ArchiveOptions {
  /** `nats://host:port` of JetStream. */
  readonly from: string;
  /** `postgres://user@host:port/db`. */
  readonly to: string;
  /** JetStream stream; default `TELEMETRY`. */
  readonly natsStream?: string;
  /** Subject prefix used when the stream must be created; default `telemetry`. */
  readonly subjectPrefix?: string;
  /** Durable consumer name shared by cooperating archivers; default `telemetry-archive`. */
  readonly durable?: string;
  /** Messages per transaction; default 2000. */
  readonly batch?: number;
  /** Ends the archiver after the batch in hand is stored and acknowledged. */
  readonly signal?: AbortSignal;
  /** Where state changes and rejected messages are reported. */
  readonly log?: FleetLog;
}

/** What an archiver did, returned when it stops. */
export interface ArchiveStats {
  /** Messages stored and acknowledged. */
  messages: number;
  /** Of those, rows that were new in PostgreSQL (the rest were already there). */
  inserted: number;
  /** Messages that were not telemetry lines, terminated without being stored. */
  rejected: number;
}

const STREAMS: ReadonlySet<string> = new Set(["site", "run"]);

/** The row of a message, or why it cannot be stored. */
function rowOf(m: ArchiveMessage): EventRow | string {
  if (m.unit === "" || !STREAMS.has(m.stream)) {
    return "missing Telemetry-Unit or Telemetry-Stream header";
  }
  const head = readSeqAndType(m.line);
  if (head === undefined) return "payload is not a stored telemetry line";
  try {
    return toRow(m.unit, {
      stream: m.stream as StreamKind,
      runId: m.runId,
      seq: head.seq,
      line: m.line,
    });
  } catch (err) {
    return (err as Error).message;
  }
}

/**
 * Runs an archiver until `signal` aborts: takes batches from the durable consumer, inserts them
 * in one transaction, acknowledges after the commit. Either side being down is retried with
 * capped back-off; nothing is acknowledged that is not committed.
 *
 * @example
 * ```ts ignore
 * const stop = new AbortController();
 * Deno.addSignalListener("SIGTERM", () => stop.abort());
 * await archive({ from: "nats://127.0.0.1:4222", to: "postgres://fleet@db/telemetry", signal: stop.signal });
 * ```
 */
export async function archive(options: ArchiveOptions): Promise<ArchiveStats> {
  const log: FleetLog = options.log ?? (() => {});
  const batch = options.batch ?? 2000;
  const stats: ArchiveStats = { messages: 0, inserted: 0, rejected: 0 };
  const natsState = new PeerState(`JetStream at ${redact(options.from)}`, log);
  const pgState = new PeerState(`PostgreSQL at ${redact(options.to)}`, log);
  const backoff = new Backoff();
  let source: NatsArchiveSource | undefined;
  let sink: PostgresSink | undefined;
  try {
    while (!options.signal?.aborted) {
      try {
        source ??= await NatsArchiveSource.open({
          url: new URL(options.from),
          stream: options.natsStream ?? DEFAULT_NATS_STREAM,
          subjectPrefix: options.subjectPrefix ?? DEFAULT_SUBJECT_PREFIX,
          name: "obs-telemetry-archive",
        }, options.durable ?? DEFAULT_DURABLE);
        natsState.ok();
      } catch (err) {
        if (isPermissionFault(err)) throw err;
        natsState.failed(err, "retrying");
        source = undefined;
        await backoff.wait(options.signal);
        continue;
      }
      try {
        sink ??= await PostgresSink.open(options.to);
        pgState.ok();
      } catch (err) {
        if (isPermissionFault(err)) throw err;
        if (err instanceof TableShapeError) throw err; // retrying cannot mend it
        pgState.failed(err, "retrying; messages stay in JetStream");
        sink = undefined;
        await backoff.wait(options.signal);
        continue;
      }
      let messages: ArchiveMessage[];
      try {
        messages = await source.take(batch, 1000);
      } catch (err) {
        if (isPermissionFault(err)) throw err;
        natsState.failed(err, "retrying");
        await source.close().catch(() => {});
        source = undefined;
        await backoff.wait(options.signal);
        continue;
      }
      if (messages.length === 0) continue;
      const rows: EventRow[] = [];
      let good: ArchiveMessage[] = [];
      for (const m of messages) {
        const row = rowOf(m);
        if (typeof row === "string") {
          stats.rejected++;
          log("warn", `dropping message ${m.msg.seq} on ${m.msg.subject}: ${row}`);
          m.msg.term();
        } else {
          rows.push(row);
          good.push(m);
        }
      }
      try {
        const refused = new Set<number>();
        stats.inserted += await sink.insert(rows, (_row, i, reason) => {
          refused.add(i);
          stats.rejected++;
          const m = good[i]!;
          log("warn", `dropping message ${m.msg.seq} on ${m.msg.subject}: ${reason}`);
          m.msg.term();
        });
        if (refused.size > 0) good = good.filter((_, i) => !refused.has(i));
        pgState.ok();
      } catch (err) {
        if (isPermissionFault(err)) throw err;
        pgState.failed(err, "retrying; messages stay in JetStream");
        source.nak(good, 1000);
        await sink.close(1).catch(() => {});
        sink = undefined;
        await backoff.wait(options.signal);
        continue;
      }
      try {
        await source.ack(good);
        stats.messages += good.length;
        backoff.reset();
      } catch (err) {
        // Not acknowledged: redelivered after the ack wait, and met by the primary key.
        natsState.failed(err, "retrying");
      }
    }
  } finally {
    await source?.close().catch(() => {});
    await sink?.close().catch(() => {});
  }
  return stats;
}

/**
 * A connection URL without its password (or a NATS token, `nats://token@host`), for log lines
 * and error messages; a string that is not a URL loses whatever stands between `//` and `@`.
 */
export function redact(url: string): string {
  try {
    const u = new URL(url);
    if (u.password) u.password = "***";
    else if (u.username && u.protocol === "nats:") u.username = "***";
    for (const key of [...u.searchParams.keys()]) {
      if (/pass|token|secret/i.test(key)) u.searchParams.set(key, "***");
    }
    return u.toString();
  } catch {
    return url.replace(/\/\/[^/@]*@/, "//***@");
  }
}

/** A missing Deno permission is not an outage: retrying cannot fix it. */
function isPermissionFault(err: unknown): boolean {
  return err instanceof Deno.errors.NotCapable || err instanceof Deno.errors.PermissionDenied;
}
