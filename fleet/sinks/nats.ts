/**
 * The NATS JetStream side of the fleet (docs/fleet.md): the stream created if missing, stored lines
 * published with their idempotency key as `Nats-Msg-Id` (JetStream drops a repeat within its
 * duplicate window), and the durable pull consumer the archivers share.
 *
 * Also the claims of units (docs/fleet.md, "Units"), in the key-value bucket `TELEMETRY_UNITS`.
 *
 * Clients: the npm packages `@nats-io/transport-node`, `@nats-io/jetstream`, `@nats-io/kv` and
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
import {
  createInbox,
  headers,
  type Msg,
  nanos,
  type NatsConnection,
  type Subscription,
} from "npm:@nats-io/nats-core@^3.4.0";
import { type KV, Kvm } from "npm:@nats-io/kv@^3.4.0";
import {
  DEFAULT_NATS_STREAM,
  DEFAULT_SUBJECT_PREFIX,
  type ForwardItem,
  HEADER_RUN_ID,
  HEADER_STREAM,
  HEADER_UNIT,
  idempotencyKey,
} from "../item.ts";
import {
  type FleetSendOptions,
  type FleetSink,
  type FleetSinkConnector,
  type UnitClaim,
  type UnitClaimOptions,
  UnitHeldError,
} from "./sink.ts";

/** The JetStream key-value bucket of the units' claims: key = unit, value = site_id. */
export const UNITS_BUCKET = "TELEMETRY_UNITS";

const TOKEN = /^[A-Za-z0-9_-]+$/;
const encoder = new TextEncoder();

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
    // nats://user:pass@host or nats://token@host: the credentials go to the client, never to
    // a log line (see redact()).
    const user = decodeURIComponent(target.url.username);
    const pass = decodeURIComponent(target.url.password);
    const auth = user === "" ? {} : pass === "" ? { token: user } : { user, pass };
    const nc = await connect({
      ...auth,
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

  /**
   * Claims `unit` for `siteId` in the bucket {@linkcode UNITS_BUCKET} (created if missing):
   * creating the key claims it; a key naming another site is that site's unless `reclaim`,
   * which overwrites it (only if it still names that site).
   */
  static async claimUnit(
    target: NatsTarget,
    unit: string,
    siteId: string,
    options: UnitClaimOptions = {},
  ): Promise<UnitClaim> {
    const [nc, jsm] = await NatsBase.connectTo(target);
    try {
      const kv = await unitsBucket(nc, jsm);
      try {
        await kv.create(unit, siteId);
        return { unit, siteId, outcome: "claimed" };
      } catch (err) {
        // Held already (the create's "wrong last sequence"): read whose it is below; any other
        // failure, with the key still free, is the server's.
        const entry = await kv.get(unit);
        if (entry === null || entry.operation !== "PUT") throw err;
        const holder = entry.string();
        if (holder === siteId) return { unit, siteId, outcome: "kept" };
        if (!options.reclaim) throw new UnitHeldError(unit, holder, siteId);
        await kv.update(unit, siteId, entry.revision);
        return { unit, siteId, outcome: "reclaimed", previousSiteId: holder };
      }
    } finally {
      await nc.drain().catch(() => nc.close());
    }
  }
}

/**
 * The units' bucket: opened when its stream exists (whatever its settings: a cluster may have made
 * it with replicas), created with file storage and one value per key when not.
 */
async function unitsBucket(nc: NatsConnection, jsm: JetStreamManager): Promise<KV> {
  const kvm = new Kvm(nc);
  // `Kvm.open` checks nothing until the first read, so the stream is looked up first.
  const exists = () => jsm.streams.info(`KV_${UNITS_BUCKET}`).then(() => true, () => false);
  if (await exists()) return await kvm.open(UNITS_BUCKET);
  try {
    return await kvm.create(UNITS_BUCKET, { storage: StorageType.File, history: 1 });
  } catch (err) {
    // Another forwarder may have created it meanwhile.
    if (await exists()) return await kvm.open(UNITS_BUCKET);
    throw err;
  }
}

/** How long a batch may wait for its PubAcks before it is sent again. */
const PUBACK_TIMEOUT_MS = 10_000;

/** The PubAcks of one batch, collected by the sink's single inbox subscription. */
/**
 * JetStream's error codes for a message no retry can store (docs/fleet.md): larger than the
 * stream's `max_msg_size` (10054, "message size exceeds maximum allowed").
 */
const REFUSED_FOR_GOOD = new Set([10054]);

/** Whether a PubAck's error refuses this one message for good (its size), not the batch. */
function isRefusedForGood(error: { err_code?: unknown; description?: unknown }): boolean {
  return REFUSED_FOR_GOOD.has(error.err_code as number) ||
    /message size exceeds maximum/i.test(String(error.description ?? ""));
}

class AckBatch {
  readonly id: number;
  readonly #expected: number;
  #received = 0;
  #duplicates = 0;
  #failure: Error | undefined;
  /** Messages the stream refused for good, by index in the batch, with JetStream's words. */
  readonly refused = new Map<number, string>();
  readonly done: Promise<void>;
  #resolve: () => void = () => {};

  constructor(id: number, expected: number) {
    this.id = id;
    this.#expected = expected;
    this.done = new Promise((resolve) => (this.#resolve = resolve));
  }

  /** One reply: a PubAck (`{"stream","seq"}`), a JetStream error, or a "no responders" status. */
  receive(msg: Msg, index: number): void {
    if (msg.headers?.hasError) {
      this.#failure ??= new Error(
        msg.headers.code === 503
          ? "no JetStream stream stores these subjects (503 no responders)"
          : `JetStream answered ${msg.headers.code} ${msg.headers.description}`,
      );
    } else {
      try {
        const ack = JSON.parse(msg.string());
        if (ack.error && isRefusedForGood(ack.error)) {
          this.refused.set(index, `JetStream refused it: ${ack.error.description}`);
        } else if (ack.error) {
          this.#failure ??= new Error(`JetStream refused a message: ${ack.error.description}`);
        } else if (ack.duplicate === true) {
          this.#duplicates++;
        }
      } catch {
        this.#failure ??= new Error("JetStream answered something that is not a PubAck");
      }
    }
    if (++this.#received === this.#expected) this.#resolve();
  }

  /** PubAcks saying the stream held the message already (its `Nats-Msg-Id` within the window). */
  get duplicates(): number {
    return this.#duplicates;
  }

  /** The first failure, or how many acks are missing. */
  outcome(): Error | undefined {
    if (this.#failure) return this.#failure;
    if (this.#received < this.#expected) {
      return new Error(
        `${
          this.#expected - this.#received
        } of ${this.#expected} PubAcks missing after ${PUBACK_TIMEOUT_MS} ms`,
      );
    }
    return undefined;
  }
}

/**
 * Publishes stored lines to JetStream; `send` resolves when every PubAck has arrived.
 *
 * A JetStream publish is a core publish with a reply subject, to which the server sends the
 * PubAck. The client library's `js.publish()` makes a promise and a timer per message; here a
 * batch is published in one go with replies to one wildcard inbox and awaited once, which is
 * three times faster (bench/forward.ts) and acknowledges exactly the same.
 */
export class NatsSink extends NatsBase implements FleetSink<ForwardItem> {
  readonly unit: string;
  readonly #inbox: string;
  readonly #replies: Subscription;
  #batch: AckBatch | undefined;
  #nextBatch = 0;

  private constructor(
    nc: NatsConnection,
    jsm: JetStreamManager,
    stream: string,
    prefix: string,
    unit: string,
  ) {
    super(nc, jsm, stream, prefix);
    this.unit = unit;
    this.#inbox = createInbox();
    this.#replies = nc.subscribe(`${this.#inbox}.>`, {
      callback: (err, msg) => {
        if (err) return;
        // Reply subjects are <inbox>.<batch>.<index>: a late ack of an abandoned batch is ignored.
        const batch = this.#batch;
        const [id, index] = msg.subject.slice(this.#inbox.length + 1).split(".").map(Number);
        if (batch && batch.id === id) batch.receive(msg, index!);
      },
    });
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

  /**
   * Whether an item is larger than the server accepts (its `max_payload`, headers included):
   * such a message could never be sent, and retrying it would stop the stream behind it.
   *
   * @returns The message's size in bytes when it is too large, else `undefined`.
   */
  oversize(item: ForwardItem): number | undefined {
    const max = this.nc.info?.max_payload;
    if (max === undefined) return undefined;
    // The header block as the protocol writes it: "NATS/1.0\r\n", "Name: value\r\n"..., "\r\n".
    const head = 12 + [
      ["Nats-Msg-Id", idempotencyKey(this.unit, item)],
      [HEADER_UNIT, this.unit],
      [HEADER_STREAM, item.stream],
      [HEADER_RUN_ID, item.runId],
    ].reduce((n, [k, v]) => n + k!.length + v!.length + 4, 0);
    if (head + item.line.length * 3 <= max) return undefined; // surely fits: no encoding
    const size = head + encoder.encode(item.line).length;
    return size > max ? size : undefined;
  }

  /**
   * Why JetStream can never take `item`: its message is larger than the server's `max_payload`.
   */
  refuses(item: ForwardItem): string | undefined {
    const size = this.oversize(item);
    return size === undefined ? undefined : `its message of ${size} bytes is larger than ` +
      `the NATS server's max_payload (${this.maxPayload} bytes); raise max_payload to send such lines`;
  }

  /** The server's largest message, in bytes, once connected. */
  get maxPayload(): number | undefined {
    return this.nc.info?.max_payload;
  }

  /** The subject of a stream's lines. */
  subjectOf(item: ForwardItem): string {
    return `${this.subjectPrefix}.${this.unit}.${item.stream}`;
  }

  /**
   * Publishes every item and waits for all their PubAcks; `options.signal` stops the wait.
   *
   * @returns How many items the stream did not hold already.
   * @throws the first failure, or a timeout; the caller resends the whole batch (duplicates are
   * dropped by the `Nats-Msg-Id` window and by the archive's primary key).
   */
  async send(items: readonly ForwardItem[], options?: FleetSendOptions): Promise<number> {
    if (items.length === 0) return 0;
    const signal = options?.signal;
    const batch = new AckBatch(this.#nextBatch++, items.length);
    this.#batch = batch;
    items.forEach((item, i) => {
      const h = headers();
      h.set("Nats-Msg-Id", idempotencyKey(this.unit, item));
      h.set(HEADER_UNIT, this.unit);
      h.set(HEADER_STREAM, item.stream);
      h.set(HEADER_RUN_ID, item.runId);
      this.nc.publish(this.subjectOf(item), item.line, {
        headers: h,
        reply: `${this.#inbox}.${batch.id}.${i}`,
      });
    });
    let timer: ReturnType<typeof setTimeout> | undefined;
    let stop: (() => void) | undefined;
    try {
      // A stop (SIGTERM) does not wait out the PubAck timeout of a destination that is down:
      // the batch is not acknowledged, the cursor stays before it, and it is sent again later.
      await Promise.race([
        batch.done,
        new Promise<void>((resolve) => {
          timer = setTimeout(resolve, PUBACK_TIMEOUT_MS);
          stop = () => resolve();
          if (signal?.aborted) resolve();
          else signal?.addEventListener("abort", stop, { once: true });
        }),
      ]);
    } finally {
      clearTimeout(timer);
      if (stop) signal?.removeEventListener("abort", stop);
      this.#batch = undefined;
    }
    if (signal?.aborted && batch.outcome() !== undefined) {
      throw new Error("stopped before JetStream acknowledged the batch");
    }
    const failure = batch.outcome();
    if (failure) throw failure;
    if (batch.refused.size > 0) {
      // Stored are all the others: resending the batch would meet the same refusal forever.
      if (options?.onRejected === undefined) {
        throw new Error([...batch.refused.values()][0]!);
      }
      for (const [index, why] of batch.refused) options.onRejected(index, why);
    }
    return items.length - batch.duplicates - batch.refused.size;
  }

  /** Closes the connection after flushing what is pending. */
  override async close(): Promise<void> {
    this.#replies.unsubscribe();
    await super.close();
  }
}

/**
 * The forwarder's JetStream sink for one unit: connects with {@linkcode NatsSink.open}; no fault
 * of JetStream is permanent (a missing stream is created, a server down comes back) but a unit
 * another site holds.
 *
 * @example
 * ```ts ignore
 * const sink = await natsConnector({ url: new URL("nats://hub:4222") }, "pan012").connect();
 * await sink.send([{ stream: "site", runId: "", seq: 1, line: '{"seq":1}' }]);
 * await sink.close();
 * ```
 */
export function natsConnector(target: NatsTarget, unit: string): FleetSinkConnector<ForwardItem> {
  return {
    connect: () => NatsSink.open(target, unit),
    claimUnit: (unit, siteId, options) => NatsBase.claimUnit(target, unit, siteId, options),
    isPermanent: (err) => err instanceof UnitHeldError,
  };
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
