/**
 * The publisher's connection to the MQTT broker (docs/publish.md, "Faults"): MQTT.js over the
 * socket the collector uses too (`collect/inputs/mqtt_socket.ts`), MQTT 3.1.1, a clean session,
 * the last will `offline` retained on the status topic. Messages come from a
 * {@linkcode LatestOutbox}, QoS 1 and retained, at most {@linkcode IN_FLIGHT} unacknowledged at a
 * time: a broker that is slow or stops answering holds up nothing but the outbox, which keeps one
 * payload per topic. A lost connection is logged once and connected again with the capped
 * back-off of `wire/backoff.ts`, and everything is sent again once it is back.
 *
 * @module
 */

import type { Duplex } from "node:stream";
import { clearImmediate, setImmediate } from "node:timers";
import type { IClientOptions, MqttClient } from "npm:mqtt@^5.14.1";
import { Backoff } from "../wire/backoff.ts";
import { UpDown } from "../wire/up_down.ts";
import { GuardedSocket, loadMqtt, openBroker } from "../collect/inputs/mqtt_socket.ts";
import type { BrokerAddress } from "./options.ts";
import type { LatestOutbox, OutboxMessage } from "./outbox.ts";

/** The publisher's log: one line per call, at a level (docs/operations.md's shape). */
export type PublishLog = (level: "info" | "warn" | "error", message: string) => void;

/** Messages sent and not yet acknowledged, at most. */
export const IN_FLIGHT = 32;

/** The first wait before connecting again, and the longest. */
const FIRST_BACKOFF_MS = 500;
const MAX_BACKOFF_MS = 30_000;

/** How long a broker may take to answer CONNECT. */
const CONNECT_TIMEOUT_MS = 10_000;

/** Seconds between keepalive pings; no answer within 1.5 times this drops the connection. */
const KEEPALIVE_S = 30;

/** The largest packet taken from the broker (it sends acknowledgements and pings only). */
const MAX_PACKET_BYTES = 64 * 1024;

/** How the publisher is meant to run, for the error when MQTT.js cannot load. */
const RUN_AS =
  "the publisher as obs-utils telemetry publish, deno task publish, spawnPublisher() or the systemd unit do";

/** Options of a {@linkcode BrokerLink}. */
export interface BrokerLinkOptions {
  /** The broker (`--to`). */
  readonly broker: BrokerAddress;
  /** PEM certificates to trust for `mqtts://` (`--ca`). */
  readonly caCerts?: readonly string[] | undefined;
  /** The last will: the status topic, `offline`, retained. */
  readonly will: OutboxMessage;
  /** Where the messages come from. */
  readonly outbox: LatestOutbox;
  /** The log. */
  readonly log: PublishLog;
  /** Called after each (re)connection, before anything is sent: the outbox is due again. */
  readonly onConnect?: () => void;
}

/** One connection and the messages it has in flight. */
interface Session {
  readonly client: MqttClient;
  inFlight: number;
  open: boolean;
}

/**
 * Why a connection failed, as one line that says what to change where the operator can: the
 * credentials of `--to`, the CA of `--ca`.
 */
function explain(broker: BrokerAddress, err: Error | undefined, connected: boolean): string {
  const code = (err as { code?: unknown } | undefined)?.code;
  const message = err?.message ?? "";
  if (code === 4 || code === 5) {
    return `the broker ${broker.url} refused the user name or password (${message}); give the right ones in --to (or OBS_TELEMETRY_PUBLISH) as ${
      broker.tls ? "mqtts" : "mqtt"
    }://USER:PASSWORD@host:port`;
  }
  if (/certificate|UnknownIssuer|CertNotValid|tls|handshake/i.test(message)) {
    return `the TLS connection to ${broker.url} failed (${message}); give the CA that signed the broker's certificate with --ca FILE, and connect by a name the certificate holds`;
  }
  if (message === "Keepalive timeout") {
    return `the broker ${broker.url} stopped answering (no PINGRESP within ${KEEPALIVE_S * 1.5} s)`;
  }
  if (err === undefined) {
    return connected
      ? `the broker ${broker.url} closed the connection`
      : `the broker ${broker.url} accepted the connection but did not answer CONNECT within ${
        CONNECT_TIMEOUT_MS / 1000
      } s`;
  }
  return `MQTT ${broker.url}: ${message}`;
}

/**
 * The connection to the broker, kept up until {@linkcode BrokerLink.close}.
 *
 * @example Run until the signal aborts
 * ```ts ignore
 * import { BrokerLink } from "./broker.ts";
 * import { LatestOutbox } from "./outbox.ts";
 * import { parseBrokerUrl } from "./options.ts";
 *
 * let link: BrokerLink;
 * const outbox = new LatestOutbox(() => link.due());
 * link = new BrokerLink({
 *   broker: parseBrokerUrl("mqtt://127.0.0.1:1883"),
 *   will: { topic: "obs/site/status", payload: "offline" },
 *   outbox,
 *   log: (level, message) => console.log(level, message),
 * });
 * outbox.set("obs/site/status", "online");
 * await link.run(AbortSignal.timeout(10_000));
 * ```
 */
export class BrokerLink {
  readonly #options: BrokerLinkOptions;
  readonly #state = new UpDown();
  #reason: string | undefined;
  #session: Session | undefined;
  #stopped = false;
  #dueTimer: ReturnType<typeof setImmediate> | undefined;
  /** Wakes the loop when the connection closes or the link stops. */
  #wake: (() => void) | undefined;

  /**
   * Creates the link; nothing connects until {@linkcode BrokerLink.run}.
   *
   * @param options The broker, the will, the outbox and the log.
   */
  constructor(options: BrokerLinkOptions) {
    this.#options = options;
  }

  /** Whether a connection is up (CONNACK received and not closed since). */
  get connected(): boolean {
    return this.#session?.open === true;
  }

  /**
   * Connects, sends, and connects again after every loss, until `signal` aborts; then leaves
   * (see {@linkcode BrokerLink.close} for the last words).
   *
   * @param signal Stops the loop.
   * @returns When stopped.
   */
  async run(signal: AbortSignal): Promise<void> {
    const { MqttClient } = await loadMqtt(RUN_AS);
    const backoff = new Backoff({ firstMs: FIRST_BACKOFF_MS, maxMs: MAX_BACKOFF_MS, jitter: 0.2 });
    const onAbort = () => this.#wake?.();
    signal.addEventListener("abort", onAbort);
    try {
      while (!signal.aborted && !this.#stopped) {
        const { connected, error } = await this.#connectOnce(MqttClient, signal);
        if (signal.aborted || this.#stopped) break;
        if (connected) backoff.reset();
        this.#down(explain(this.#options.broker, error, connected));
        await backoff.wait(signal);
      }
    } finally {
      signal.removeEventListener("abort", onAbort);
    }
  }

  /**
   * A topic became due: sends what is due once the events that arrived together are taken in
   * (`setImmediate`, after the stream's whole delivery and before any timer), so a topic set
   * several times by one delivery is sent once, with its latest payload.
   */
  due(): void {
    if (this.#dueTimer !== undefined || this.#stopped) return;
    this.#dueTimer = setImmediate(() => {
      this.#dueTimer = undefined;
      this.pump();
    });
  }

  /**
   * Sends what the outbox has due, up to {@linkcode IN_FLIGHT} messages unacknowledged: after
   * {@linkcode BrokerLink.due}, after a (re)connection, and when an acknowledgement frees a
   * place.
   */
  pump(): void {
    const session = this.#session;
    if (session === undefined || !session.open) return;
    while (session.inFlight < IN_FLIGHT) {
      const message = this.#options.outbox.take();
      if (message === undefined) return;
      session.inFlight++;
      session.client.publish(message.topic, message.payload, { qos: 1, retain: true }, (err) => {
        // An answer for a connection that is gone is no answer for this one.
        if (this.#session !== session) return;
        session.inFlight--;
        this.#options.outbox.settled(message.topic, !err);
        this.pump();
      });
    }
  }

  /**
   * Ends the connection: sends `lastWords` first (the status `offline`, retained) and waits for
   * them to be acknowledged, at most `timeoutMs`, then disconnects cleanly (so the broker does
   * not send the will too).
   *
   * @param lastWords Messages to send before leaving.
   * @param timeoutMs The longest wait for them.
   * @returns When the connection is closed.
   */
  async close(lastWords: readonly OutboxMessage[], timeoutMs: number): Promise<void> {
    this.#stopped = true;
    if (this.#dueTimer !== undefined) clearImmediate(this.#dueTimer);
    const session = this.#session;
    this.#session = undefined;
    if (session !== undefined) {
      const client = session.client;
      let acked = false;
      if (session.open && lastWords.length > 0) {
        const sent = Promise.all(
          lastWords.map((m) => client.publishAsync(m.topic, m.payload, { qos: 1, retain: true })),
        ).then(() => (acked = true), () => {});
        let timer: ReturnType<typeof setTimeout> | undefined;
        await Promise.race([sent, new Promise((r) => (timer = setTimeout(r, timeoutMs)))]);
        clearTimeout(timer);
      }
      // A clean DISCONNECT once the last words are in; a broker that does not take even that
      // (it stopped reading) loses the socket a second later.
      await new Promise<void>((resolve) => {
        const timer = setTimeout(() => client.stream?.destroy(), 1000);
        client.end(!acked, () => {
          clearTimeout(timer);
          resolve();
        });
      });
    }
    this.#wake?.();
  }

  /**
   * One connection, from CONNECT to its close: resolves whether it was up and the error that
   * ended it.
   */
  #connectOnce(
    Client: typeof MqttClient,
    signal: AbortSignal,
  ): Promise<{ connected: boolean; error: Error | undefined }> {
    const { broker, caCerts, will } = this.#options;
    const open = openBroker(new URL(broker.url), caCerts);
    let stream: GuardedSocket | undefined;
    const socket = (): Duplex => stream = new GuardedSocket(open, MAX_PACKET_BYTES);
    const options: IClientOptions = {
      protocolVersion: 4,
      clean: true,
      reconnectPeriod: 0,
      connectTimeout: CONNECT_TIMEOUT_MS,
      keepalive: KEEPALIVE_S,
      // A ping every keepalive whatever is sent: not a timer set again for every message.
      reschedulePings: false,
      clientId: `obs-telemetry-publish-${crypto.randomUUID().slice(0, 8)}`,
      will: { topic: will.topic, payload: will.payload, qos: 1, retain: true },
      ...(broker.username === undefined ? {} : { username: broker.username }),
      ...(broker.password === undefined ? {} : { password: broker.password }),
    };
    return new Promise((resolve) => {
      const client = new Client(socket, options);
      const session: Session = { client, inFlight: 0, open: false };
      this.#session = session;
      let connected = false;
      let error: Error | undefined;
      let done = false;
      const finish = () => {
        if (done) return;
        done = true;
        // MQTT.js passes on only the socket errors that carry a code: the socket kept its own.
        error ??= stream?.failure;
        session.open = false;
        if (this.#session === session) this.#session = undefined;
        this.#wake = undefined;
        if (this.#stopped) return resolve({ connected, error });
        client.end(true, () => resolve({ connected, error }));
      };
      this.#wake = () => {
        if (signal.aborted || this.#stopped) finish();
      };
      client.on("connect", () => {
        connected = true;
        session.open = true;
        error = undefined;
        this.#up();
        this.#options.onConnect?.();
        this.#options.outbox.resendAll();
        this.pump();
      });
      client.on("error", (err) => (error ??= err));
      client.on("close", finish);
    });
  }

  #up(): void {
    const changed = this.#state.up();
    this.#reason = undefined;
    if (changed) this.#options.log("info", `connected to the broker ${this.#options.broker.url}`);
  }

  /** Logs a loss once: when the link goes down, or the reason it stays down changes. */
  #down(reason: string): void {
    const changed = this.#state.down();
    if (!changed && reason === this.#reason) return;
    this.#reason = reason;
    const refused = reason.includes("refused the user name or password") ||
      reason.includes("TLS connection");
    this.#options.log(
      refused ? "error" : "warn",
      `${changed ? "cannot publish" : "still cannot publish"}: ${reason}; retrying with back-off`,
    );
  }
}
