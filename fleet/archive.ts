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
import { fleetBackoff, type FleetLog, isPermissionFault, PeerState } from "./retry.ts";
import type { FleetSink, FleetSinkConnector } from "./sinks/sink.ts";
import { type ArchiveMessage, NatsArchiveSource } from "./sinks/nats.ts";
import { postgresRowConnector } from "./sinks/postgres.ts";

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
  return await new Archiver(options).run();
}

/** The messages of a batch that are telemetry lines, and their rows, index for index. */
interface Accepted {
  readonly rows: EventRow[];
  readonly good: ArchiveMessage[];
}

/**
 * One running archiver: the JetStream consumer and the PostgreSQL sink, each connected again
 * after its failure, and the batch in hand acknowledged only after its commit.
 */
class Archiver {
  readonly #options: ArchiveOptions;
  readonly #log: FleetLog;
  readonly #batch: number;
  readonly #stats: ArchiveStats = { messages: 0, inserted: 0, rejected: 0 };
  readonly #natsState: PeerState;
  readonly #pgState: PeerState;
  readonly #backoff = fleetBackoff();
  readonly #postgres: FleetSinkConnector<EventRow>;
  #source: NatsArchiveSource | undefined;
  #sink: FleetSink<EventRow> | undefined;

  constructor(options: ArchiveOptions) {
    this.#options = options;
    this.#log = options.log ?? (() => {});
    this.#batch = options.batch ?? 2000;
    this.#natsState = new PeerState(`JetStream at ${redact(options.from)}`, this.#log);
    this.#pgState = new PeerState(`PostgreSQL at ${redact(options.to)}`, this.#log);
    this.#postgres = postgresRowConnector(options.to);
  }

  /** Takes, stores and acknowledges batches until stopped; closes both sides at the end. */
  async run(): Promise<ArchiveStats> {
    try {
      while (!this.#options.signal?.aborted) {
        const source = await this.#connectSource();
        if (source === undefined) continue;
        const sink = await this.#connectSink();
        if (sink === undefined) continue;
        const messages = await this.#take(source);
        if (messages === undefined || messages.length === 0) continue;
        const stored = await this.#store(source, sink, this.#accept(messages));
        if (stored === undefined) continue;
        await this.#ack(source, stored);
      }
    } finally {
      await this.#source?.close().catch(() => {});
      await this.#sink?.close().catch(() => {});
    }
    return this.#stats;
  }

  /** A fault of PostgreSQL that retrying cannot mend: a missing permission, a table's shape. */
  #pgFatal(err: unknown): boolean {
    return isPermissionFault(err) || this.#postgres.isPermanent(err);
  }

  /** The consumer, connected if need be; `undefined` after a failure, once it is waited out. */
  async #connectSource(): Promise<NatsArchiveSource | undefined> {
    try {
      this.#source ??= await NatsArchiveSource.open({
        url: new URL(this.#options.from),
        stream: this.#options.natsStream ?? DEFAULT_NATS_STREAM,
        subjectPrefix: this.#options.subjectPrefix ?? DEFAULT_SUBJECT_PREFIX,
        name: "obs-telemetry-archive",
      }, this.#options.durable ?? DEFAULT_DURABLE);
      this.#natsState.ok();
      return this.#source;
    } catch (err) {
      if (isPermissionFault(err)) throw err;
      this.#natsState.failed(err, "retrying");
      this.#source = undefined;
      await this.#backoff.wait(this.#options.signal);
      return undefined;
    }
  }

  /** The sink, connected if need be; `undefined` after a failure, once it is waited out. */
  async #connectSink(): Promise<FleetSink<EventRow> | undefined> {
    try {
      this.#sink ??= await this.#postgres.connect();
      this.#pgState.ok();
      return this.#sink;
    } catch (err) {
      if (this.#pgFatal(err)) throw err;
      this.#pgState.failed(err, "retrying; messages stay in JetStream");
      this.#sink = undefined;
      await this.#backoff.wait(this.#options.signal);
      return undefined;
    }
  }

  /** A batch from the consumer; `undefined` after a failure, once it is waited out. */
  async #take(source: NatsArchiveSource): Promise<ArchiveMessage[] | undefined> {
    try {
      return await source.take(this.#batch, 1000);
    } catch (err) {
      if (isPermissionFault(err)) throw err;
      this.#natsState.failed(err, "retrying");
      await source.close().catch(() => {});
      this.#source = undefined;
      await this.#backoff.wait(this.#options.signal);
      return undefined;
    }
  }

  /** Terminates a message that can never be stored, with a warning. */
  #drop(m: ArchiveMessage, reason: string): void {
    this.#stats.rejected++;
    this.#log("warn", `dropping message ${m.msg.seq} on ${m.msg.subject}: ${reason}`);
    m.msg.term();
  }

  /** The telemetry lines of a batch as rows; every other message is dropped. */
  #accept(messages: readonly ArchiveMessage[]): Accepted {
    const rows: EventRow[] = [];
    const good: ArchiveMessage[] = [];
    for (const m of messages) {
      const row = rowOf(m);
      if (typeof row === "string") {
        this.#drop(m, row);
      } else {
        rows.push(row);
        good.push(m);
      }
    }
    return { rows, good };
  }

  /**
   * Inserts the rows in one transaction. A row PostgreSQL refuses for its value is dropped; a
   * failure asks JetStream to deliver the batch again and connects again later.
   *
   * @returns The messages stored, or `undefined` after a failure, once it is waited out.
   */
  async #store(
    source: NatsArchiveSource,
    sink: FleetSink<EventRow>,
    { rows, good }: Accepted,
  ): Promise<ArchiveMessage[] | undefined> {
    try {
      const refused = new Set<number>();
      this.#stats.inserted += await sink.send(rows, {
        onRejected: (i, reason) => {
          refused.add(i);
          this.#drop(good[i]!, reason);
        },
      });
      this.#pgState.ok();
      return refused.size > 0 ? good.filter((_, i) => !refused.has(i)) : good;
    } catch (err) {
      if (this.#pgFatal(err)) throw err;
      this.#pgState.failed(err, "retrying; messages stay in JetStream");
      source.nak(good, 1000);
      await sink.close(1).catch(() => {});
      this.#sink = undefined;
      await this.#backoff.wait(this.#options.signal);
      return undefined;
    }
  }

  /** Acknowledges stored messages; one not acknowledged is delivered again and met by the key. */
  async #ack(source: NatsArchiveSource, stored: ArchiveMessage[]): Promise<void> {
    try {
      await source.ack(stored);
      this.#stats.messages += stored.length;
      this.#backoff.reset();
    } catch (err) {
      this.#natsState.failed(err, "retrying");
    }
  }
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
