/**
 * The `mqtt` input (docs/collect.md, "MQTT"): subscribes to topic filters on a broker with QoS 1
 * and hands each message's values to the collector, which merges them per type.
 *
 * The client is MQTT.js (`npm:mqtt`, docs/collect.md says why), speaking MQTT 3.1.1 over the
 * socket of `mqtt_socket.ts`, filtered by its size guard so that no payload over the bound is held
 * in memory. MQTT.js's own reconnect is off: a lost connection rejects `listen`, and the
 * collector's capped back-off decides when to connect again (one back-off, not two).
 *
 * Only `./collect` loads this file, and MQTT.js itself is loaded when an `mqtt` input first
 * listens: the launcher and a collector without MQTT inputs never load it (the publisher loads it
 * through `mqtt_socket.ts` too, docs/publish.md).
 *
 * @module
 */

import type { IClientOptions, MqttClient } from "npm:mqtt@^5.14.1";
import type { Duplex } from "node:stream";
import type { ConfigAt, Input, InputCommon, InputKind, InputSink } from "./input.ts";
import { oversizedPayload } from "./mqtt_guard.ts";
import { GuardedSocket, loadMqtt, MQTT_IGNORED_ENV, openBroker } from "./mqtt_socket.ts";
import { readPayload } from "./payload.ts";
import { isJsonPointer, resolvePointer } from "../json_pointer.ts";
import { readSourceTime } from "../source_time.ts";

/** The largest MQTT packet the input takes whole (1 MiB, the service's request bound). */
export const MQTT_MAX_PACKET_BYTES = 1024 * 1024;

/** What one topic filter delivers. */
export interface MqttTopic {
  /** The event type of its values. */
  readonly type: string;
  /** The field a scalar payload becomes; by default the topic's last segment. */
  readonly field?: string | undefined;
}

/** The `mqtt` input's own config keys. */
export interface MqttConfig {
  /** `mqtt://host:port` or `mqtts://host:port` (credentials taken out into `username`, `password`). */
  readonly url: string;
  /** The user name, from `username` or the URL. */
  readonly username?: string | undefined;
  /** The password, from `password` or the URL. */
  readonly password?: string | undefined;
  /** Topic filter (`+` and `#` allowed) -> what it delivers, in config order. */
  readonly topics: ReadonlyArray<readonly [string, MqttTopic]>;
  /** The largest packet taken whole (bytes). */
  readonly maxPacketBytes: number;
}

function isRecord(v: unknown): v is Record<string, unknown> {
  return v !== null && typeof v === "object" && !Array.isArray(v);
}

/** Whether an MQTT topic filter is well formed (`#` last and alone, `+` a whole level). */
function validFilter(filter: string): boolean {
  if (filter === "" || filter.includes("\u0000")) return false;
  const levels = filter.split("/");
  return levels.every((level, i) =>
    (level === "#" ? i === levels.length - 1 : !level.includes("#")) &&
    (level === "+" || !level.includes("+"))
  );
}

/**
 * Whether `topic` matches the MQTT topic `filter` (`+` one level, `#` the rest).
 *
 * @example
 * ```ts
 * import { topicMatches } from "./mqtt.ts";
 * import assert from "node:assert/strict";
 * assert.equal(topicMatches("weather/+/temp", "weather/roof/temp"), true);
 * assert.equal(topicMatches("weather/#", "weather"), true);
 * assert.equal(topicMatches("weather/+", "weather/a/b"), false);
 * ```
 */
export function topicMatches(filter: string, topic: string): boolean {
  const f = filter.split("/");
  const t = topic.split("/");
  if (t[0]?.startsWith("$") && (f[0] === "#" || f[0] === "+")) return false;
  for (let i = 0; i < f.length; i++) {
    if (f[i] === "#") return true;
    if (i >= t.length || (f[i] !== "+" && f[i] !== t[i])) return false;
  }
  return f.length === t.length;
}

function optionalString(raw: Readonly<Record<string, unknown>>, key: string, at: ConfigAt) {
  const v = raw[key];
  if (v === undefined) return undefined;
  if (typeof v !== "string" || v === "") {
    at.fail(key, "must be a non-empty string", `remove "${key}" or set it to text`);
  }
  return v;
}

function parseUrl(raw: Readonly<Record<string, unknown>>, at: ConfigAt): URL {
  const text = raw.url;
  const fix = 'set "url": "mqtt://127.0.0.1:1883" (or mqtts:// for TLS)';
  if (typeof text !== "string") at.fail("url", "is missing or not a string", fix);
  let url: URL;
  try {
    url = new URL(text);
  } catch {
    at.fail("url", `${JSON.stringify(text)} is not a URL`, fix);
  }
  if (url.protocol !== "mqtt:" && url.protocol !== "mqtts:") {
    at.fail("url", `must start with mqtt:// or mqtts://, not ${url.protocol}//`, fix);
  }
  if (url.hostname === "") at.fail("url", "names no host", fix);
  if ((url.pathname !== "" && url.pathname !== "/") || url.search || url.hash) {
    at.fail("url", "must name only the broker (no path, query or fragment)", fix);
  }
  return url;
}

function parseTopics(raw: Readonly<Record<string, unknown>>, at: ConfigAt): [string, MqttTopic][] {
  const fix = 'set "topics": {"weather/#": {"type": "weather"}}';
  if (!isRecord(raw.topics) || Object.keys(raw.topics).length === 0) {
    at.fail("topics", "must be an object of at least one topic filter", fix);
  }
  const inputType = typeof raw.type === "string" && raw.type !== "" ? raw.type : undefined;
  const topicsAt: ConfigAt = at.child("topics");
  return Object.entries(raw.topics).map(([filter, spec]) => {
    if (!validFilter(filter)) {
      topicsAt.fail(
        filter,
        "is not an MQTT topic filter",
        "use levels separated by /, with + for one level and # last",
      );
    }
    if (!isRecord(spec)) {
      topicsAt.fail(filter, "must be an object", `set it to {"type": "weather"}`);
    }
    const specAt: ConfigAt = topicsAt.child(filter);
    const type = spec.type ?? inputType;
    if (typeof type !== "string" || type === "") {
      specAt.fail("type", 'is missing (and the input has no "type")', 'set "type": "weather"');
    }
    const field = optionalString(spec, "field", specAt);
    for (const key of Object.keys(spec)) {
      if (key !== "type" && key !== "field") {
        specAt.fail(key, "is not a key of a topic", 'use only "type" and "field"');
      }
    }
    return [filter, { type, field }];
  });
}

/** `fields` and `ts` point into a JSON object payload: JSON Pointers, as the `http` input's. */
function pointersOnly(raw: Readonly<Record<string, unknown>>, at: ConfigAt): void {
  if (typeof raw.ts === "string" && !isJsonPointer(raw.ts)) {
    at.fail("ts", `is ${JSON.stringify(raw.ts)}, not a JSON Pointer`, `write it as "/${raw.ts}"`);
  }
  if (isRecord(raw.fields)) {
    const fieldsAt: ConfigAt = at.child("fields");
    for (const [name, where] of Object.entries(raw.fields)) {
      if (typeof where === "string" && !isJsonPointer(where)) {
        fieldsAt.fail(
          name,
          `is ${JSON.stringify(where)}, not a JSON Pointer`,
          `write it as "/${where}"`,
        );
      }
    }
  }
}

function parse(raw: Readonly<Record<string, unknown>>, at: ConfigAt): MqttConfig {
  const url = parseUrl(raw, at);
  const username = optionalString(raw, "username", at) ??
    (url.username ? decodeURIComponent(url.username) : undefined);
  const password = optionalString(raw, "password", at) ??
    (url.password ? decodeURIComponent(url.password) : undefined);
  const topics = parseTopics(raw, at);
  pointersOnly(raw, at);
  const max = raw.max_payload_bytes ?? MQTT_MAX_PACKET_BYTES;
  if (
    typeof max !== "number" || !Number.isSafeInteger(max) || max < 1024 || max > 256 * 1024 * 1024
  ) {
    at.fail(
      "max_payload_bytes",
      "must be a whole number of bytes from 1024 to 268435456",
      'remove it (1 MiB) or set "max_payload_bytes": 1048576',
    );
  }
  const port = url.port || (url.protocol === "mqtts:" ? "8883" : "1883");
  return {
    url: `${url.protocol}//${url.hostname}:${port}`,
    username,
    password,
    topics,
    maxPacketBytes: max,
  };
}

/** The `mqtt` input of one config. */
class MqttInput implements Input {
  #config: MqttConfig;
  #common: InputCommon;
  #decoder = new TextDecoder();
  #matches = new Map<string, readonly [string, MqttTopic] | null>();

  constructor(config: MqttConfig, common: InputCommon) {
    this.#config = config;
    this.#common = common;
  }

  async listen(sink: InputSink, signal: AbortSignal, up: () => void): Promise<void> {
    if (signal.aborted) return;
    const { MqttClient } = await loadMqtt(
      "the collector as obs-utils telemetry collect, deno task collect, spawnCollector() or the systemd unit do",
    );
    const open = openBroker(new URL(this.#config.url));
    const limit = this.#config.maxPacketBytes;
    let stream: GuardedSocket | undefined;
    const socket = (): Duplex => stream = new GuardedSocket(open, limit);
    const options: IClientOptions = {
      protocolVersion: 4,
      clean: true,
      reconnectPeriod: 0,
      connectTimeout: 10_000,
      keepalive: 30,
      resubscribe: false,
      clientId: `obs-telemetry-${crypto.randomUUID().slice(0, 8)}`,
      ...(this.#config.username === undefined ? {} : { username: this.#config.username }),
      ...(this.#config.password === undefined ? {} : { password: this.#config.password }),
    };
    return await new Promise((resolve, reject) => {
      const client: MqttClient = new MqttClient(socket, options);
      let done = false;
      const finish = (err?: Error): void => {
        if (done) return;
        done = true;
        signal.removeEventListener("abort", onAbort);
        client.end(true, () => (err ? reject(err) : resolve()));
      };
      const onAbort = (): void => finish();
      signal.addEventListener("abort", onAbort);
      client.on("connect", () => {
        this.#subscribe(client).then(up, (err: Error) => finish(err));
      });
      client.on("message", (topic, payload) => this.#deliver(sink, topic, payload));
      client.on("error", (err) => finish(new Error(`MQTT ${this.#config.url}: ${err.message}`)));
      client.on("close", () => {
        const why = stream?.failure?.message ?? "the connection closed";
        finish(new Error(`MQTT ${this.#config.url}: ${why}`));
      });
    });
  }

  async #subscribe(client: MqttClient): Promise<void> {
    const filters = Object.fromEntries(this.#config.topics.map(([f]) => [f, { qos: 1 as const }]));
    const granted = await client.subscribeAsync(filters);
    const refused = granted.filter((g) => g.qos === 128).map((g) => g.topic);
    if (refused.length > 0) {
      throw new Error(
        `MQTT ${this.#config.url}: the broker refused the subscription to ${refused.join(", ")}`,
      );
    }
  }

  /** The first filter that matches `topic`; remembered, as a station repeats its topics. */
  #match(topic: string): readonly [string, MqttTopic] | undefined {
    let match = this.#matches.get(topic);
    if (match === undefined) {
      match = this.#config.topics.find(([filter]) => topicMatches(filter, topic)) ?? null;
      if (this.#matches.size >= 10_000) this.#matches.clear();
      this.#matches.set(topic, match);
    }
    return match ?? undefined;
  }

  #deliver(sink: InputSink, topic: string, payload: Uint8Array): void {
    const match = this.#match(topic);
    if (!match) return;
    const [filter, spec] = match;
    const size = oversizedPayload(payload);
    if (size !== undefined) {
      sink.warn(
        `oversized ${filter}`,
        `MQTT ${topic}: a payload of ${size} bytes is over ${this.#config.maxPacketBytes} (max_payload_bytes); dropped`,
      );
      return;
    }
    const read = readPayload(this.#decoder.decode(payload));
    if (read.kind === "bad") {
      sink.warn(`unreadable ${filter}`, `MQTT ${topic}: ${read.reason}; dropped`);
      return;
    }
    if (read.kind === "scalar") {
      const field = spec.field ?? topic.split("/").at(-1) ?? topic;
      sink.field({ type: spec.type, field, value: read.value });
      return;
    }
    this.#deliverObject(sink, spec.type, topic, read.value);
  }

  #deliverObject(sink: InputSink, type: string, topic: string, doc: Record<string, unknown>): void {
    const { fields, ts, tsFormat } = this.#common;
    let sourceTs: { sourceTs?: number } = {};
    if (ts !== undefined) {
      try {
        sourceTs = { sourceTs: readSourceTime(resolvePointer(doc, ts), tsFormat ?? "iso") };
      } catch (err) {
        sink.warn(`ts ${type}`, `MQTT ${topic}: "ts" ${ts}: ${(err as Error).message}`);
      }
    }
    const entries = fields
      ? Object.entries(fields).map(([name, ptr]) => [name, resolvePointer(doc, ptr)] as const)
      : Object.entries(doc);
    for (const [field, value] of entries) {
      if (value === undefined || value === null) continue;
      sink.field({ type, field, value, ...sourceTs });
    }
  }
}

/**
 * The `mqtt` input kind (docs/collect.md, "MQTT").
 *
 * @example A config's topics, checked
 * ```ts
 * import { mqttInput } from "./mqtt.ts";
 * import assert from "node:assert/strict";
 * const at = {
 *   path: "inputs[0]",
 *   fail(key: string, problem: string): never {
 *     throw new Error(`${key} ${problem}`);
 *   },
 *   child() {
 *     return at;
 *   },
 * };
 * const config = mqttInput.parse(
 *   { url: "mqtt://u:p@127.0.0.1", topics: { "weather/#": { type: "weather" } } },
 *   at,
 * );
 * assert.equal(config.url, "mqtt://127.0.0.1:1883");
 * assert.equal(config.username, "u");
 * assert.deepEqual(mqttInput.needs!(config), {
 *   net: ["127.0.0.1:1883"],
 *   ignoreEnv: ["DEBUG", "READABLE_STREAM"],
 * });
 * ```
 */
export const mqttInput: InputKind<MqttConfig> = {
  kind: "mqtt",
  polled: false,
  keys: ["url", "username", "password", "topics", "max_payload_bytes"],
  parse,
  create: (config, common) => new MqttInput(config, common),
  needs: (config) => ({ net: [new URL(config.url).host], ignoreEnv: [...MQTT_IGNORED_ENV] }),
};
