/**
 * The NATS JetStream side of the fleet (CONTRACT 13): the stream created if missing, stored lines
 * published with their idempotency key as `Nats-Msg-Id` (JetStream drops a repeat within its
 * duplicate window), and the durable pull consumer the archivers share.
 *
 * Clients: the npm packages `@nats-io/transport-node`, `@nats-io/jetstream` and
 * `@nats-io/nats-core` (the official NATS client, version 3); loaded only through `./forward`.
 *
 * @module
 */
import { connect } from "npm:@nats-io/transport-node@^3.4.0";
import {
  AckPolicy,
  DeliverPolicy,
  jetstream,
  type JetStreamClient,
  type JetStreamManager,
  jetstreamManager,
  type JsMsg,
  StorageType,
} from "npm:@nats-io/jetstream@^3.4.0";
import { headers, nanos, type NatsConnection } from "npm:@nats-io/nats-core@^3.4.0";
import {
  DEFAULT_NATS_STREAM,
  DEFAULT_SUBJECT_PREFIX,
  type ForwardItem,
  HEADER_RUN_ID,
  HEADER_STREAM,
  HEADER_UNIT,
  idempotencyKey,
} from "./_fleet_item.ts";

export {
  DEFAULT_DURABLE,
  DEFAULT_NATS_STREAM,
  DEFAULT_SUBJECT_PREFIX,
  HEADER_RUN_ID,
  HEADER_STREAM,
  HEADER_UNIT,
} from "./_fleet_item.ts";

const TOKEN = /^[A-Za-z0-9_-]+$/;

/**
 * Why `prefix` cannot start every subject, or `undefined` when it can: dot-separated tokens of
 * letters, digits, `_` and `-` (no wildcards, no spaces).
 */
export function checkSubjectPrefix(prefix: string): string | undefined {
  if (prefix.split(".").every((t) => TOKEN.test(t))) return undefined;
  return `subject prefix ${JSON.stringify(prefix)} must be dot-separated words of letters, ` +
    `digits, '_' or '-' (no '*', '>' or spaces), for example "telemetry" or "obs.telemetry".`;
}

/** Why `name` cannot name a JetStream stream or durable, or `undefined` when it can. */
export function checkNatsName(name: string, what: string): string | undefined {
  if (TOKEN.test(name)) return undefined;
  return `${what} ${JSON.stringify(name)} must be letters, digits, '_' or '-', for example ` +
    `"TELEMETRY".`;
}

/** `nats://host:port` as the client library's server string. */
function serverOf(url: URL): string {
  return `${url.hostname}:${url.port || "4222"}`;
}

/** Options of a connection to JetStream. */
export interface NatsTarget {
  /** `nats://host:port`. */
  readonly url: URL;
  /** JetStream stream name; default `TELEMETRY`. */
  readonly stream?: string;
  /** Subject prefix; default `telemetry`. */
  readonly subjectPrefix?: string;
  /** Connection name shown by the server (monitoring). */
  readonly name?: string;
}

/** A connection to JetStream with the telemetry stream ensured. */
class NatsBase {
  protected readonly nc: NatsConnection;
  protected readonly js: JetStreamClient;
  protected readonly jsm: JetStreamManager;
  readonly stream: string;
  readonly subjectPrefix: string;

  protected constructor(
    nc: NatsConnection,
    jsm: JetStreamManager,
    stream: string,
    prefix: string,
  ) {
    this.nc = nc;
    this.jsm = jsm;
    this.js = jetstream(nc);
    this.stream = stream;
    this.subjectPrefix = prefix;
  }

  protected static async connectTo(
    target: NatsTarget,
  ): Promise<[NatsConnection, JetStreamManager]> {
    const nc = await connect({
      servers: serverOf(target.url),
      name: target.name ?? "obs-telemetry",
      maxReconnectAttempts: -1,
      reconnectTimeWait: 500,
      timeout: 5000,
    });
    try {
      return [nc, await jetstreamManager(nc, { timeout: 5000 })];
    } catch (err) {
      await nc.close().catch(() => {});
      throw err;
    }
  }

  /** Creates the stream (`<prefix>.>`, file storage) unless it exists. */
  protected async ensureStream(): Promise<void> {
    try {
      await this.jsm.streams.info(this.stream);
    } catch {
      try {
        await this.jsm.streams.add({
          name: this.stream,
          subjects: [`${this.subjectPrefix}.>`],
          storage: StorageType.File,
        });
      } catch (err) {
        // Another forwarder may have created it meanwhile.
        await this.jsm.streams.info(this.stream).catch(() => {
          throw err;
        });
      }
    }
  }

  /** Closes the connection after flushing what is pending. */
  async close(): Promise<void> {
    await this.nc.drain().catch(() => this.nc.close());
  }
}

/** Publishes stored lines to JetStream; `send` resolves when every PubAck has arrived. */
export class NatsSink extends NatsBase {
  readonly unit: string;

  private constructor(
    nc: NatsConnection,
    jsm: JetStreamManager,
    stream: string,
    prefix: string,
    unit: string,
  ) {
    super(nc, jsm, stream, prefix);
    this.unit = unit;
  }

  /** Connects and ensures the stream. */
  static async open(target: NatsTarget, unit: string): Promise<NatsSink> {
    const [nc, jsm] = await NatsBase.connectTo(target);
    const sink = new NatsSink(
      nc,
      jsm,
      target.stream ?? DEFAULT_NATS_STREAM,
      target.subjectPrefix ?? DEFAULT_SUBJECT_PREFIX,
      unit,
    );
    try {
      await sink.ensureStream();
    } catch (err) {
      await sink.close();
      throw err;
    }
    return sink;
  }

  /** The subject of a stream's lines. */
  subjectOf(item: ForwardItem): string {
    return `${this.subjectPrefix}.${this.unit}.${item.stream}`;
  }

  /**
   * Publishes every item (pipelined) and waits for all their PubAcks.
   *
   * @throws the first failure; the caller resends the whole batch (duplicates are dropped by
   * the `Nats-Msg-Id` window and by the archive's primary key).
   */
  async send(items: readonly ForwardItem[]): Promise<void> {
    const acks = items.map((item) => {
      const h = headers();
      h.set(HEADER_UNIT, this.unit);
      h.set(HEADER_STREAM, item.stream);
      h.set(HEADER_RUN_ID, item.runId);
      return this.js.publish(this.subjectOf(item), item.line, {
        msgID: idempotencyKey(this.unit, item),
        headers: h,
        timeout: 10_000,
      });
    });
    const settled = await Promise.allSettled(acks);
    const failed = settled.find((s) => s.status === "rejected");
    if (failed) throw (failed as PromiseRejectedResult).reason;
  }
}

/** A message taken from the archive consumer. */
export interface ArchiveMessage {
  readonly unit: string;
  readonly stream: string;
  readonly runId: string;
  readonly line: string;
  readonly msg: JsMsg;
}

/** The archivers' durable pull consumer on the telemetry stream. */
export class NatsArchiveSource extends NatsBase {
  readonly durable: string;

  private constructor(
    nc: NatsConnection,
    jsm: JetStreamManager,
    stream: string,
    prefix: string,
    durable: string,
  ) {
    super(nc, jsm, stream, prefix);
    this.durable = durable;
  }

  /** Connects, ensures the stream and the durable consumer (explicit acks, 30 s ack wait). */
  static async open(target: NatsTarget, durable: string): Promise<NatsArchiveSource> {
    const [nc, jsm] = await NatsBase.connectTo(target);
    const source = new NatsArchiveSource(
      nc,
      jsm,
      target.stream ?? DEFAULT_NATS_STREAM,
      target.subjectPrefix ?? DEFAULT_SUBJECT_PREFIX,
      durable,
    );
    try {
      await source.ensureStream();
      await source.#ensureConsumer();
    } catch (err) {
      await source.close();
      throw err;
    }
    return source;
  }

  async #ensureConsumer(): Promise<void> {
    try {
      await this.jsm.consumers.info(this.stream, this.durable);
    } catch {
      try {
        await this.jsm.consumers.add(this.stream, {
          durable_name: this.durable,
          ack_policy: AckPolicy.Explicit,
          deliver_policy: DeliverPolicy.All,
          ack_wait: nanos(30_000),
          max_ack_pending: 50_000,
        });
      } catch (err) {
        await this.jsm.consumers.info(this.stream, this.durable).catch(() => {
          throw err;
        });
      }
    }
  }

  /**
   * Takes up to `max` messages, waiting at most `expiresMs` for the first. Messages whose
   * headers are missing are returned with `unit` `""` so the caller can reject them.
   */
  async take(max: number, expiresMs: number): Promise<ArchiveMessage[]> {
    const consumer = await this.js.consumers.get(this.stream, this.durable);
    // The client refuses to wait less than a second for a pull.
    const batch = await consumer.fetch({ max_messages: max, expires: Math.max(1000, expiresMs) });
    const out: ArchiveMessage[] = [];
    for await (const msg of batch) {
      out.push({
        unit: msg.headers?.get(HEADER_UNIT) ?? "",
        stream: msg.headers?.get(HEADER_STREAM) ?? "",
        runId: msg.headers?.get(HEADER_RUN_ID) ?? "",
        line: msg.string(),
        msg,
      });
    }
    return out;
  }

  /** Acknowledges messages (after their rows are committed) and waits for the server. */
  async ack(messages: readonly ArchiveMessage[]): Promise<void> {
    for (const m of messages) m.msg.ack();
    await this.nc.flush();
  }

  /** Asks for a redelivery after `delayMs` (the rows could not be stored). */
  nak(messages: readonly ArchiveMessage[], delayMs: number): void {
    for (const m of messages) m.msg.nak(delayMs);
  }
}
