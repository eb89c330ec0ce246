/**
 * The publisher (docs/publish.md): follows the service's `/stream` and keeps the broker's retained
 * topics equal to the service's state: each type's latest envelope, its availability judged as
 * time passes (a timer at the moment it goes stale), the verdict of each safety profile, the
 * status, and the Home Assistant discovery configs. Every (re)connection to the service or the
 * broker sends all of it again; only the latest payload per topic waits for a slow broker.
 *
 * While the service does not answer, the status is `offline` and every verdict is published
 * unsafe ("the verdict is unknown"): a subscriber that reads only a safety topic never keeps a
 * `safe` the service can no longer vouch for. The same holds after a clean stop; after a crash
 * the broker sends the status's last will, `offline`.
 *
 * @module
 */

import { TelemetryClient } from "../client/client.ts";
import { Transport } from "../client/transport.ts";
import { safetyOf } from "../client/answers.ts";
import { TelemetryHttpError } from "../client/errors.ts";
import type { TypeInfo } from "../client/types.ts";
import type { TelemetryEvent } from "../wire/event.ts";
import { Backoff } from "../wire/backoff.ts";
import { UpDown } from "../wire/up_down.ts";
import { valueAt } from "../core/freshness.ts";
import { availability } from "./availability.ts";
import { BrokerLink, type PublishLog } from "./broker.ts";
import { discoveryConfigs } from "./discovery.ts";
import type { BrokerAddress } from "./options.ts";
import { LatestOutbox, type OutboxMessage } from "./outbox.ts";
import { SITE_PROFILE, SiteTopics } from "./topics.ts";

/** The types of the service's own events (docs/safety.md): never state, some a cue to ask. */
const SERVICE_TYPE_PREFIX = "telemetry.";
const SAFETY_TYPE_PREFIX = "telemetry.safety";

/** A profile name as the types file allows it (docs/safety.md#profiles). */
const PROFILE_NAME = /^[A-Za-z0-9_-]{1,64}$/;

/** How often the verdicts are asked for with no cue: the service judges at least this often. */
const SAFETY_POLL_MS = 5_000;
/** The least time between two questions cued by events of critical types. */
const SAFETY_GAP_MS = 1_000;
/** How long one request to the service may take. */
const REQUEST_TIMEOUT_MS = 10_000;
/** How long a stopping publisher waits for the broker to take its last words. */
const LAST_WORDS_MS = 2_000;
/** The longest a timer can wait (setTimeout's limit); a later moment is judged again then. */
const MAX_TIMER_MS = 2 ** 31 - 1;

/** Options of a {@linkcode Publisher}. */
export interface PublisherOptions {
  /** The service (`--host`, `--port`, `--tls`, `--token`). */
  readonly service: { readonly baseUrl: string; readonly token?: string | undefined };
  /** The broker (`--to`). */
  readonly broker: BrokerAddress;
  /** PEM certificates to trust for `mqtts://` (`--ca`). */
  readonly caCerts?: readonly string[] | undefined;
  /** The topic prefix (`--prefix`), checked. */
  readonly prefix: string;
  /** The discovery prefix (`--discovery-prefix`), or `undefined` for `--no-discovery`. */
  readonly discoveryPrefix: string | undefined;
  /** The log. */
  readonly log: PublishLog;
}

/** The `GET /safety` document as published: `{"safe", "since", "reasons"}`. */
interface Verdict {
  safe: boolean;
  since: string;
  reasons: string[];
}

/** The site being published, known from `GET /ready`. */
interface Site {
  readonly topics: SiteTopics;
  readonly outbox: LatestOutbox;
  readonly link: BrokerLink;
  readonly stop: AbortController;
  readonly running: Promise<void>;
  version: string;
}

/**
 * The profiles to publish: `site`, then every profile a type is critical for (its
 * `critical_for` in `GET /types`, docs/safety.md#profiles), by name.
 *
 * @param types The `GET /types` answer.
 * @returns The profiles, `site` first.
 *
 * @example Usage
 * ```ts
 * import { profilesOf } from "./publisher.ts";
 * import assert from "node:assert/strict";
 *
 * const types = { weather: { critical_for: ["north", "south"] }, power: {} };
 * assert.deepEqual(profilesOf(types), ["site", "north", "south"]);
 * ```
 */
export function profilesOf(types: Readonly<Record<string, unknown>>): string[] {
  const names = new Set<string>();
  for (const info of Object.values(types)) {
    const list = (info as { critical_for?: unknown } | null)?.critical_for;
    if (!Array.isArray(list)) continue;
    for (const name of list) {
      if (typeof name === "string" && PROFILE_NAME.test(name) && name !== SITE_PROFILE) {
        names.add(name);
      }
    }
  }
  return [SITE_PROFILE, ...[...names].sort()];
}

/** One line for an error, without a stack. */
function describe(err: unknown): string {
  return (err instanceof Error ? err.message : String(err)).split("\n")[0]!;
}

/**
 * Publishes one service's state to one broker until stopped.
 *
 * @example Run until SIGTERM
 * ```ts ignore
 * import { Publisher } from "./publisher.ts";
 * import { parseBrokerUrl } from "./options.ts";
 *
 * const stop = new AbortController();
 * Deno.addSignalListener("SIGTERM", () => stop.abort());
 * await new Publisher({
 *   service: { baseUrl: "http://localhost:6562" },
 *   broker: parseBrokerUrl("mqtt://127.0.0.1:1883"),
 *   prefix: "obs",
 *   discoveryPrefix: "homeassistant",
 *   log: (level, message) => console.log(level, message),
 * }).run(stop.signal);
 * ```
 */
export class Publisher {
  readonly #options: PublisherOptions;
  readonly #client: TelemetryClient;
  readonly #transport: Transport;
  readonly #service = new UpDown();
  #serviceReason: string | undefined;
  /** Counts the service's ups and downs: an answer asked before one is out of date. */
  #generation = 0;
  #site: Site | undefined;
  #types: Record<string, TypeInfo> = {};
  #profiles: string[] = [SITE_PROFILE];
  #latest = new Map<string, TelemetryEvent>();
  /** Per type, the timer of the next moment its availability can change, and that moment. */
  #timers = new Map<string, { timer: ReturnType<typeof setTimeout>; at: number }>();
  /** The last verdict published per profile. */
  #verdicts = new Map<string, Verdict>();
  #discoveryTopics = new Set<string>();
  /** Per registered type, {@linkcode Publisher.#kindKey} when its configs were made. */
  #kinds = new Map<string, string>();
  /** The types critical for a profile: their events may change a verdict's reasons. */
  #critical = new Set<string>();
  /** Profiles whose verdict the service would not give, warned about once each. */
  #noProfile = new Set<string>();
  #safetyTimer: ReturnType<typeof setTimeout> | undefined;
  #safetyPoll: ReturnType<typeof setInterval> | undefined;
  #safetyBusy = false;
  #safetyAgain = false;
  #safetyAsked = -Infinity;
  /** Stops {@linkcode Publisher.run}: its caller's signal, or a failure of the broker's loop. */
  #stop: AbortController | undefined;
  #fatal: Error | undefined;

  /**
   * Creates the publisher; nothing connects until {@linkcode Publisher.run}.
   *
   * @param options The service, the broker, the prefixes and the log.
   */
  constructor(options: PublisherOptions) {
    this.#options = options;
    const { baseUrl, token } = options.service;
    this.#client = new TelemetryClient({
      baseUrl,
      timeoutMs: REQUEST_TIMEOUT_MS,
      ...(token === undefined ? {} : { token }),
    });
    this.#transport = new Transport({
      baseUrl: this.#client.baseUrl,
      token,
      timeoutMs: REQUEST_TIMEOUT_MS,
      fetch: undefined,
    });
  }

  /**
   * Publishes until `signal` aborts; then publishes every verdict unsafe and the status
   * `offline`, and leaves the broker.
   *
   * @param signal Stops the publisher.
   * @returns When stopped.
   * @throws {Error} When the MQTT client cannot be loaded (the permissions of
   *   `publishPermissionFlags()` are missing), after the same clean stop.
   */
  async run(signal: AbortSignal): Promise<void> {
    const stop = new AbortController();
    const onAbort = () => stop.abort();
    signal.addEventListener("abort", onAbort);
    if (signal.aborted) stop.abort();
    this.#stop = stop;
    try {
      await this.#follow(stop.signal);
      if (this.#fatal !== undefined) throw this.#fatal;
    } finally {
      signal.removeEventListener("abort", onAbort);
      for (const { timer } of this.#timers.values()) clearTimeout(timer);
      this.#timers.clear();
      clearTimeout(this.#safetyTimer);
      clearInterval(this.#safetyPoll);
      const site = this.#site;
      if (site !== undefined) {
        const lastWords = this.#unknownVerdicts(site, "the publisher stopped");
        lastWords.push({ topic: site.topics.status, payload: "offline" });
        await this.#leave(site, lastWords);
      }
    }
  }

  /** Follows `/stream` for ever, with the client's capped back-off between connections. */
  async #follow(signal: AbortSignal): Promise<void> {
    // For what the client's loop does not retry (a 401, a service too old, a refused request).
    const backoff = new Backoff({ firstMs: 500, maxMs: 30_000, jitter: 0.2 });
    while (!signal.aborted) {
      try {
        for await (const message of this.#client.follow({ signal, maxRetryMs: 30_000 })) {
          if (message.kind === "snapshot") {
            await this.#serviceUp(message.current, signal);
            backoff.reset();
          } else if (message.kind === "telemetry") this.#event(message.event);
          else if (message.kind === "forget") this.#drop(message.type);
          else if (message.kind === "disconnected") this.#serviceDown(message.error.message);
        }
      } catch (err) {
        if (signal.aborted) return;
        this.#serviceDown(describe(err));
        await backoff.wait(signal);
      }
    }
  }

  /** After every (re)connection to the service: everything is read and published again. */
  async #serviceUp(current: Record<string, TelemetryEvent>, signal: AbortSignal): Promise<void> {
    const ready = await this.#client.ready({ signal });
    if (ready.site_id === undefined) {
      throw new Error(
        `the service at ${this.#client.baseUrl} answers no site_id in GET /ready (version ${ready.version}, older than 0.7), and the topics are named by it; upgrade the service`,
      );
    }
    const types = await this.#client.types({ signal });
    const site = await this.#siteFor(ready.site_id);
    site.version = ready.version;
    this.#types = types;
    this.#profiles = profilesOf(types);
    this.#critical = new Set(
      Object.entries(types).filter(([type, info]) =>
        info.critical || profilesOf({ [type]: info }).length > 1
      ).map(([type]) => type),
    );
    const cameUp = this.#service.up();
    this.#serviceReason = undefined;
    this.#generation++;
    for (const type of [...this.#latest.keys()]) {
      if (!Object.hasOwn(current, type)) this.#drop(type);
    }
    for (const [type, event] of Object.entries(current)) {
      if (type.startsWith(SERVICE_TYPE_PREFIX)) continue;
      this.#latest.set(type, event);
      site.outbox.set(site.topics.state(type), event.toJSONString());
    }
    for (const type of new Set([...Object.keys(types), ...this.#latest.keys()])) {
      if (!type.startsWith(SERVICE_TYPE_PREFIX)) this.#judge(type);
    }
    this.#discover();
    await this.#askSafetyNow();
    site.outbox.set(site.topics.status, "online");
    // The service may have restarted with another types file, or the broker lost what it had:
    // every topic is sent again on every connection to the service (docs/publish.md).
    site.outbox.resendAll();
    if (cameUp) {
      this.#options.log(
        "info",
        `following the service at ${this.#client.baseUrl}; publishing site ${ready.site_id} to ${this.#options.broker.url} under ${site.topics.root}`,
      );
    }
    this.#safetyPoll ??= setInterval(() => this.#askSafety(0), SAFETY_POLL_MS);
  }

  /** The service stopped answering: logged once per change, status offline, verdicts unknown. */
  #serviceDown(reason: string): void {
    const changed = this.#service.down();
    if (changed) this.#generation++;
    if (!changed && reason === this.#serviceReason) return;
    this.#serviceReason = reason;
    this.#options.log(
      "warn",
      changed
        ? `the service does not answer (${reason}); retrying with back-off, the status offline and every verdict unsafe until it does`
        : `the service still does not answer (${reason})`,
    );
    const site = this.#site;
    if (site === undefined || !changed) return;
    site.outbox.set(site.topics.status, "offline");
    for (const m of this.#unknownVerdicts(site, "the telemetry service does not answer")) {
      site.outbox.set(m.topic, m.payload);
    }
  }

  /**
   * Every profile's verdict as unsafe because the publisher cannot vouch for it: `since` stays
   * the moment the verdict turned unsafe if it already was.
   */
  #unknownVerdicts(site: Site, why: string): OutboxMessage[] {
    const now = new Date().toISOString();
    return this.#profiles.map((profile) => {
      const last = this.#verdicts.get(profile);
      const verdict: Verdict = {
        safe: false,
        since: last !== undefined && !last.safe ? last.since : now,
        reasons: [`${why}: the verdict is unknown`],
      };
      this.#verdicts.set(profile, verdict);
      return { topic: site.topics.safety(profile), payload: JSON.stringify(verdict) };
    });
  }

  /** The site of `siteId`, started on its first sight: its outbox and broker connection. */
  async #siteFor(siteId: string): Promise<Site> {
    const current = this.#site;
    if (current?.topics.siteId === siteId) return current;
    if (current !== undefined) {
      // The service now serves another site directory: the old site's topics say offline.
      this.#options.log(
        "warn",
        `the service now serves site ${siteId}, no longer ${current.topics.siteId}`,
      );
      await this.#leave(current, [{ topic: current.topics.status, payload: "offline" }]);
      this.#latest.clear();
      this.#verdicts.clear();
      this.#discoveryTopics.clear();
    }
    const topics = new SiteTopics(this.#options.prefix, siteId);
    // The outbox wakes the link only once the site is in use, after both are made.
    const outbox = new LatestOutbox(() => link.due());
    const link = new BrokerLink({
      broker: this.#options.broker,
      caCerts: this.#options.caCerts,
      will: { topic: topics.status, payload: "offline" },
      outbox,
      log: this.#options.log,
    });
    const stop = new AbortController();
    const running = link.run(stop.signal).catch((err) => {
      // Only loading MQTT.js throws (a permission missing): nothing would ever be published.
      this.#fatal = err instanceof Error ? err : new Error(String(err));
      this.#stop?.abort();
    });
    const site: Site = { topics, outbox, link, stop, running, version: "" };
    this.#site = site;
    return site;
  }

  /** Leaves a site's broker connection with its last words. */
  async #leave(site: Site, lastWords: OutboxMessage[]): Promise<void> {
    await site.link.close(lastWords, LAST_WORDS_MS);
    site.stop.abort();
    await site.running;
  }

  /** One event from the stream. */
  #event(event: TelemetryEvent): void {
    const type = event.type;
    if (type.startsWith(SERVICE_TYPE_PREFIX)) {
      if (!type.startsWith(SAFETY_TYPE_PREFIX)) return;
      // A verdict changed, or an external event or a waiver did: ask at once.
      const profile = (event.data as { profile?: unknown }).profile;
      if (
        typeof profile === "string" && PROFILE_NAME.test(profile) &&
        !this.#profiles.includes(profile)
      ) {
        this.#profiles = [SITE_PROFILE, ...[...this.#profiles.slice(1), profile].sort()];
        this.#discover();
      }
      this.#askSafety(0);
      return;
    }
    const site = this.#site;
    if (site === undefined) return;
    this.#latest.set(type, event);
    site.outbox.set(site.topics.state(type), event.toJSONString());
    this.#judge(type);
    if (this.#kindsChanged(type)) this.#discover();
    // A critical type's event may change the verdict's reasons without changing the verdict.
    if (this.#critical.has(type)) this.#askSafety(SAFETY_GAP_MS);
  }

  /** A type left the snapshot (forgotten, or gone while the service was away). */
  #drop(type: string): void {
    const site = this.#site;
    if (!this.#latest.delete(type) || site === undefined) return;
    site.outbox.remove(site.topics.state(type));
    if (Object.hasOwn(this.#types, type)) this.#judge(type);
    else {
      clearTimeout(this.#timers.get(type)?.timer);
      this.#timers.delete(type);
      site.outbox.remove(site.topics.availability(type));
    }
  }

  /**
   * Publishes a type's availability now and makes sure a timer wakes at the next moment it can
   * change. A timer already set for an earlier moment is kept: it judges again when it fires and
   * sets the next one then, so a type's steady stream of events costs no timer each.
   */
  #judge(type: string): void {
    const site = this.#site;
    if (site === undefined) return;
    const now = Date.now();
    const { online, changesAt } = availability(this.#types[type], this.#latest.get(type)?.ts, now);
    site.outbox.set(site.topics.availability(type), online ? "online" : "offline");
    const armed = this.#timers.get(type);
    if (armed !== undefined && changesAt !== undefined && armed.at <= changesAt) return;
    clearTimeout(armed?.timer);
    this.#timers.delete(type);
    if (changesAt === undefined) return;
    const timer = setTimeout(() => {
      this.#timers.delete(type);
      const before = site.outbox.get(site.topics.availability(type));
      this.#judge(type);
      // Going stale changes a critical type's verdict, or at least its reasons.
      const changed = site.outbox.get(site.topics.availability(type)) !== before;
      if (changed && this.#critical.has(type)) this.#askSafety(0);
    }, Math.min(MAX_TIMER_MS, Math.max(0, changesAt - now)));
    this.#timers.set(type, { timer, at: changesAt });
  }

  /**
   * Which of a type's fields without a unit, a limit or an `_if` hold a boolean in its latest
   * event: what decides their entities' kind (`sensor` or `binary_sensor`, docs/publish.md).
   */
  #kindKey(type: string): string {
    const data = this.#latest.get(type)?.data ?? {};
    let key = "";
    for (const [path, spec] of Object.entries(this.#types[type]?.fields ?? {})) {
      const hinted = spec.unit !== undefined || spec.alarm_if !== undefined ||
        spec.warn_if !== undefined || spec.warn_above !== undefined ||
        spec.warn_below !== undefined || spec.alarm_above !== undefined ||
        spec.alarm_below !== undefined;
      if (!hinted) key += typeof valueAt(data, path) === "boolean" ? "1" : "0";
    }
    return key;
  }

  /** Whether a type's latest event changed the kind of one of its entities. */
  #kindsChanged(type: string): boolean {
    if (this.#options.discoveryPrefix === undefined || !Object.hasOwn(this.#types, type)) {
      return false;
    }
    return this.#kindKey(type) !== this.#kinds.get(type);
  }

  /** Publishes the discovery configs, and removes those no longer made. */
  #discover(): void {
    const site = this.#site;
    const discoveryPrefix = this.#options.discoveryPrefix;
    if (site === undefined || discoveryPrefix === undefined) return;
    const configs = discoveryConfigs({
      discoveryPrefix,
      topics: site.topics,
      version: site.version,
      types: this.#types,
      data: (type) => this.#latest.get(type)?.data,
      profiles: this.#profiles,
    });
    for (const topic of this.#discoveryTopics) {
      if (!configs.has(topic)) site.outbox.remove(topic);
    }
    for (const [topic, payload] of configs) site.outbox.set(topic, payload);
    this.#discoveryTopics = new Set(configs.keys());
    this.#kinds = new Map(Object.keys(this.#types).map((type) => [type, this.#kindKey(type)]));
  }

  /** Asks for the verdicts at most every `gapMs` (0: now), one question at a time. */
  #askSafety(gapMs: number): void {
    if (this.#safetyTimer !== undefined && gapMs > 0) return;
    clearTimeout(this.#safetyTimer);
    const wait = Math.max(0, this.#safetyAsked + gapMs - performance.now());
    this.#safetyTimer = setTimeout(() => {
      this.#safetyTimer = undefined;
      this.#askSafetyNow().catch(() => {
        // The service went away: the stream's loss says so, and publishes the verdict unknown.
      });
    }, wait);
  }

  /** Asks the service for every profile's verdict and publishes them. */
  async #askSafetyNow(): Promise<void> {
    if (this.#safetyBusy) {
      this.#safetyAgain = true;
      return;
    }
    this.#safetyBusy = true;
    try {
      do {
        this.#safetyAgain = false;
        this.#safetyAsked = performance.now();
        await this.#readVerdicts();
      } while (this.#safetyAgain);
    } finally {
      this.#safetyBusy = false;
    }
  }

  async #readVerdicts(): Promise<void> {
    const generation = this.#generation;
    const signal = this.#stop?.signal;
    const read = new Map<string, Verdict>();
    for (const profile of this.#profiles) {
      const path = profile === SITE_PROFILE
        ? "/safety"
        : `/safety?profile=${encodeURIComponent(profile)}`;
      let answer;
      try {
        answer = safetyOf(
          this.#transport,
          await this.#transport.call("GET", path, signal ? { signal } : {}),
        );
      } catch (err) {
        if (!(err instanceof TelemetryHttpError) || err.status >= 500) throw err;
        this.#noVerdict(profile, `GET ${path} answered ${err.status}: ${err.detail}`);
        continue;
      }
      const served = (answer as { profile?: unknown }).profile ?? SITE_PROFILE;
      if (served !== profile) {
        this.#noVerdict(profile, `GET ${path} answered the verdict of ${JSON.stringify(served)}`);
        continue;
      }
      read.set(profile, { safe: answer.safe, since: answer.since, reasons: answer.reasons });
    }
    // An answer that crossed a loss or a return of the service is out of date.
    const site = this.#site;
    if (generation !== this.#generation || this.#service.state === "down" || site === undefined) {
      return;
    }
    for (const [profile, verdict] of read) {
      this.#verdicts.set(profile, verdict);
      site.outbox.set(site.topics.safety(profile), JSON.stringify(verdict));
    }
  }

  /** A profile the service gives no verdict for: said once, and its topic left unpublished. */
  #noVerdict(profile: string, why: string): void {
    if (this.#noProfile.has(profile)) return;
    this.#noProfile.add(profile);
    this.#options.log(
      "warn",
      `no verdict of the safety profile ${profile} to publish (${why}); the service does not serve it yet, so ${
        this.#site?.topics.safety(profile) ?? "its topic"
      } is left unpublished`,
    );
  }
}
