/**
 * The safety hub's state (docs/safety.md#safety-events and #waivers): the external events other
 * programs set to hold the site shut, and the waivers that stop judging a critical type for a
 * bounded time. Every change is saved atomically and fdatasynced before it is answered, recorded
 * as an audit event in the site stream (`telemetry.safety.external`,
 * `telemetry.safety.waiver`), and told to the watch's listeners. `safety_watch.ts` runs each
 * change in the service's queue, between commit groups, and judges again after it.
 *
 * A hub file that cannot be read back fails closed: every profile is held unsafe by an external
 * event `safety-hub-damaged`, released like any other once the operator has looked.
 *
 * @example Usage
 * ```ts ignore
 * const hub = await SafetyHub.open(host);
 * await hub.set(events, null, { via: "http", peer: "192.0.2.7" });
 * ```
 *
 * @module
 */

import {
  type ExternalEvent,
  type HubActor,
  type HubState,
  type HubVia,
  INTERNAL_SOURCE,
  MAX_EXTERNAL_EVENTS,
  MAX_WAIVER_S,
  parseHubState,
  type SafetyEvent,
  SafetyHubInputError,
  type Waiver,
} from "./safety_events.ts";
import { type ActiveWaiver, type HubInput, type SafetyChange, waiverActive } from "./safety.ts";
import type { EventOp } from "./assign.ts";

/** The type of the audit events of the external events (docs/safety.md#audit). */
export const EXTERNAL_EVENT_TYPE = "telemetry.safety.external";
/** The type of the audit events of the waivers (docs/safety.md#audit). */
export const WAIVER_EVENT_TYPE = "telemetry.safety.waiver";
/** The `Id` of the external event that holds every profile shut when the hub file is damaged. */
export const DAMAGED_HUB_ID = "safety-hub-damaged";

/** What the hub needs from the service. */
export interface SafetyHubHost {
  /** The hub file: read once at start, written at each change. */
  file: {
    read(): Promise<unknown>;
    /** True when the last read found a file it could not read or parse. */
    readonly damaged: boolean;
    write(value: unknown): Promise<void>;
  };
  /** The service clock (wall time, epoch ms). */
  wall: () => number;
  /** A monotonic clock in ms: a waiver never lasts longer than it was given on it. */
  mono: () => number;
  /** Queues events for the next commit group (the audit events). */
  push: (op: EventOp) => void;
  /** Told when an audit event cannot be recorded, and what the opening found. */
  warn: (message: string) => void;
}

/** One change made: its audit event's data and what listeners are told. */
interface Made {
  data: Record<string, unknown>;
  type: string;
  change: SafetyChange;
}

/**
 * The external events and waivers of one site directory.
 *
 * @example Usage
 * ```ts ignore
 * const hub = await SafetyHub.open(host);
 * console.log(hub.input().external.length);
 * ```
 */
export class SafetyHub {
  #host: SafetyHubHost;
  #external: ExternalEvent[];
  #waivers: Map<string, ActiveWaiver>;

  private constructor(host: SafetyHubHost, external: ExternalEvent[], waivers: ActiveWaiver[]) {
    this.#host = host;
    this.#external = external;
    this.#waivers = new Map(waivers.map((w) => [w.type, w]));
  }

  /**
   * Reads the hub file; a damaged one is set aside in favour of an external event that holds
   * every profile shut until released.
   *
   * @param host What the hub needs.
   * @returns The hub, and what it found that listeners must be told.
   */
  static async open(host: SafetyHubHost): Promise<{ hub: SafetyHub; opened: SafetyChange[] }> {
    const raw = await host.file.read();
    let state: HubState | null = raw === undefined && !host.file.damaged
      ? { version: 1, external: [], waivers: [] }
      : parseHubState(raw);
    const wall = host.wall(), mono = host.mono();
    const hub = new SafetyHub(host, [], []);
    const made: Made[] = [];
    if (state === null) {
      host.warn(
        `The safety hub file cannot be read back; every profile is held unsafe by the external event "${DAMAGED_HUB_ID}" until it is released with: obs-utils telemetry safety release ${DAMAGED_HUB_ID} (docs/safety.md#safety-events).`,
      );
      state = {
        version: 1,
        external: [{
          event: damagedEvent(new Date(wall).toISOString()),
          profile: null,
          via: "service",
        }],
        waivers: [],
      };
      made.push(
        hub.#externalMade("set", state.external[0]!, { via: "service", peer: "local" }),
      );
    }
    hub.#external = [...state.external];
    for (const waiver of state.waivers) {
      const untilMs = Date.parse(waiver.until);
      // A wall clock set back while stopped never stretches a waiver past the length it was given.
      const left = Math.min(untilMs - wall, (waiver.for_s ?? MAX_WAIVER_S) * 1000);
      const active = { ...waiver, untilMs, endMono: mono + left };
      if (left > 0) hub.#waivers.set(waiver.type, active);
      else made.push(hub.#waiverMade("end", active, undefined));
    }
    if (made.length > 0) await hub.#save(made);
    return { hub, opened: made.map((m) => m.change) };
  }

  /**
   * What the judge counts now.
   *
   * @returns The external events and the waivers by type.
   */
  input(): HubInput {
    return { external: this.#external, waivers: this.#waivers };
  }

  /** The external events, in the order they were first set. */
  get external(): readonly ExternalEvent[] {
    return this.#external;
  }

  /** The waivers by type, ended ones included until {@linkcode SafetyHub.expire} runs. */
  get waivers(): ReadonlyMap<string, ActiveWaiver> {
    return this.#waivers;
  }

  /**
   * Adds external events, or replaces those with the same `Id` (`SetExternalEvents`).
   *
   * @param events The events, checked.
   * @param profile The profile they hold shut, or null for every profile.
   * @param actor Who set them.
   * @returns What listeners are told, once saved.
   * @throws {SafetyHubInputError} When the site would hold more than 256 external events.
   */
  async set(
    events: readonly SafetyEvent[],
    profile: string | null,
    actor: HubActor,
  ): Promise<{ changes: SafetyChange[]; recorded: Promise<void> }> {
    for (const event of events) {
      const found = this.#external.find((x) => x.event.Id === event.Id);
      if (found) refuseUnauthenticated(found, actor, "replaced");
    }
    const next = withExternal(this.#external, events, profile, actor.via);
    if (next.length > MAX_EXTERNAL_EVENTS) {
      throw new SafetyHubInputError(
        `the site would hold ${next.length} external events, more than ${MAX_EXTERNAL_EVENTS}; clear some first (ClearExternalEvents, DELETE /safety/events/{id})`,
      );
    }
    const made = events.map((event) =>
      this.#externalMade("set", { event, profile, via: actor.via }, actor)
    );
    return await this.#commit(made, () => void (this.#external = next));
  }

  /**
   * Removes external events by `Id` (`ClearExternalEvents`); never an internal one.
   *
   * @param ids The `Id`s.
   * @param profile The profile asking: it may clear its own events and those of every profile.
   * @param actor Who cleared them.
   * @returns What listeners are told, once saved.
   * @throws {SafetyHubInputError} When an `Id` is not an external event the profile sees.
   */
  async clear(
    ids: readonly string[],
    profile: string | null,
    actor: HubActor,
  ): Promise<{ changes: SafetyChange[]; recorded: Promise<void> }> {
    const cleared: ExternalEvent[] = [];
    for (const id of ids) {
      const found = this.#external.find((x) =>
        x.event.Id === id && (x.profile === null || profile === null || x.profile === profile)
      );
      if (!found) {
        throw new SafetyHubInputError(
          `${
            JSON.stringify(id.slice(0, 200))
          } is not an external event of this safety monitor; SafetyEvents (GET /safety "events") lists them, and the service's own events (Ids starting "telemetry:") clear only when their condition does`,
        );
      }
      refuseUnauthenticated(found, actor, "cleared");
      cleared.push(found);
    }
    const next = this.#external.filter((x) => !cleared.includes(x));
    const made = cleared.map((x) => this.#externalMade("clear", x, actor));
    return await this.#commit(made, () => void (this.#external = next));
  }

  /**
   * Stops judging a critical type until `forS` seconds from now (docs/safety.md#waivers); a
   * waiver already on the type is replaced.
   *
   * @param type The critical type (checked by the caller).
   * @param forS Seconds, checked by `checkWaiver`.
   * @param reason Why.
   * @param actor Who set it.
   * @returns The waiver, and what listeners are told, once saved.
   */
  async waive(
    type: string,
    forS: number,
    reason: string,
    actor: HubActor,
  ): Promise<{ waiver: Waiver; changes: SafetyChange[]; recorded: Promise<void> }> {
    const wall = this.#host.wall(), mono = this.#host.mono();
    const untilMs = Math.ceil((wall + forS * 1000) / 1000) * 1000;
    const waiver: ActiveWaiver = {
      type,
      until: new Date(untilMs).toISOString().replace(".000Z", "Z"),
      reason,
      peer: actor.peer,
      for_s: forS,
      untilMs,
      endMono: mono + forS * 1000,
    };
    const made = [this.#waiverMade("set", waiver, actor)];
    const done = await this.#commit(made, () => void this.#waivers.set(type, waiver));
    return { waiver: publicWaiver(waiver), ...done };
  }

  /**
   * Ends a type's waiver early.
   *
   * @param type The type.
   * @param actor Who ended it.
   * @returns What listeners are told, once saved.
   * @throws {SafetyHubInputError} When the type has no waiver in force.
   */
  async unwaive(
    type: string,
    actor: HubActor,
  ): Promise<{ changes: SafetyChange[]; recorded: Promise<void> }> {
    const waiver = this.#waivers.get(type);
    if (!waiver || !waiverActive(waiver, this.#host.wall(), this.#host.mono())) {
      throw new SafetyHubInputError(
        `${
          JSON.stringify(type.slice(0, 200))
        } has no waiver in force; GET /safety lists the waivers`,
      );
    }
    const made = [this.#waiverMade("end", waiver, actor)];
    return await this.#commit(made, () => void this.#waivers.delete(type));
  }

  /**
   * Whether a waiver ran out and is still kept (its end not recorded yet).
   *
   * @returns True when {@linkcode SafetyHub.expire} has work.
   */
  hasExpired(): boolean {
    const wall = this.#host.wall(), mono = this.#host.mono();
    for (const waiver of this.#waivers.values()) {
      if (!waiverActive(waiver, wall, mono)) return true;
    }
    return false;
  }

  /**
   * Records the end of every waiver that ran out, and saves. The judge already ignores them.
   *
   * @returns What listeners are told.
   */
  async expire(): Promise<SafetyChange[]> {
    const wall = this.#host.wall(), mono = this.#host.mono();
    const ended = [...this.#waivers.values()].filter((w) => !waiverActive(w, wall, mono));
    if (ended.length === 0) return [];
    const made = ended.map((w) => this.#waiverMade("end", w, undefined));
    const { changes } = await this.#commit(made, () => {
      for (const w of ended) this.#waivers.delete(w.type);
    });
    return changes;
  }

  /** Saves the state `apply` makes; on failure nothing changes. Then queues the audit events. */
  async #commit(
    made: Made[],
    apply: () => void,
  ): Promise<{ changes: SafetyChange[]; recorded: Promise<void> }> {
    const external = this.#external, waivers = new Map(this.#waivers);
    apply();
    try {
      await this.#host.file.write(this.#state());
    } catch (err) {
      this.#external = external;
      this.#waivers = waivers;
      throw err;
    }
    return { changes: made.map((m) => m.change), recorded: this.#record(made) };
  }

  async #save(made: Made[]): Promise<void> {
    try {
      await this.#host.file.write(this.#state());
    } catch (err) {
      this.#host.warn(
        `Could not save the safety hub file: ${err instanceof Error ? err.message : String(err)}`,
      );
    }
    this.#record(made).catch(() => {});
  }

  #state(): HubState {
    return {
      version: 1,
      external: this.#external,
      waivers: [...this.#waivers.values()].map(savedWaiver),
    };
  }

  /** Queues the audit events; resolves once they are written. */
  #record(made: Made[]): Promise<void> {
    if (made.length === 0) return Promise.resolve();
    const { promise, resolve, reject } = Promise.withResolvers<void>();
    const wall = this.#host.wall();
    this.#host.push({
      items: made.map(({ data, type }) => {
        const dataJson = JSON.stringify(data);
        return {
          type,
          data,
          dataJson,
          metaJson: "{}",
          callerRunId: undefined,
          ts: undefined,
          storePermanently: true,
          makeCurrent: false,
          item: undefined,
        };
      }),
      receivedAt: wall,
      resolve: () => resolve(),
      reject: (err) => {
        this.#host.warn(
          `Could not record a change of the safety hub as an audit event: ${
            err instanceof Error ? err.message : String(err)
          }`,
        );
        reject(err);
      },
    });
    return promise;
  }

  #externalMade(action: "set" | "clear", x: ExternalEvent, actor: HubActor): Made {
    const ts = new Date(this.#host.wall()).toISOString();
    const data: Record<string, unknown> = {
      action,
      event: x.event,
      via: actor.via,
      ...(actor.client_id === undefined ? {} : { client_id: actor.client_id }),
      peer: actor.peer,
      ...(x.profile === null ? {} : { profile: x.profile }),
    };
    return {
      type: EXTERNAL_EVENT_TYPE,
      data,
      change: {
        kind: "external",
        action,
        event: x.event,
        ...(x.profile === null ? {} : { profile: x.profile }),
        reasons: [
          `external: ${x.event.Source}: ${x.event.Description} (${
            action === "set" ? "set" : "cleared"
          } by ${actor.peer} via ${actor.via})`,
        ],
        ts,
      },
    };
  }

  #waiverMade(action: "set" | "end", waiver: ActiveWaiver, actor: HubActor | undefined): Made {
    const ts = new Date(this.#host.wall()).toISOString();
    const data: Record<string, unknown> = {
      action,
      type: waiver.type,
      until: waiver.until,
      reason: waiver.reason,
      // An end with no actor is the waiver running out.
      ...(actor
        ? { via: actor.via, peer: actor.peer, ...(action === "end" ? { early: true } : {}) }
        : { early: false }),
    };
    const line = action === "set"
      ? `${waiver.type}: WAIVED until ${waiver.until} (${waiver.reason}) by ${actor?.peer}`
      : `${waiver.type}: waiver ended${actor ? ` early by ${actor.peer}` : ""}; judged again`;
    return {
      type: WAIVER_EVENT_TYPE,
      data,
      change: {
        kind: "waiver",
        action,
        type: waiver.type,
        until: waiver.until,
        reasons: [line],
        ts,
      },
    };
  }
}

/**
 * Refuses a change through the Alpaca port (no authentication) to an event another path set:
 * a LAN peer may lift or rescope only what it (or another Alpaca client) set, never a hold made
 * with the token or by the service (docs/safety.md#safety-events).
 */
function refuseUnauthenticated(x: ExternalEvent, actor: HubActor, what: string): void {
  if (actor.via !== "alpaca" || x.via === "alpaca") return;
  throw new SafetyHubInputError(
    `the external event ${JSON.stringify(x.event.Id.slice(0, 200))} was set through ${
      x.via === "service"
        ? "the service itself"
        : `the ${x.via === "cli" ? "command line" : "HTTP API"}`
    }, so it is ${what} only there (with the token): PUT /safety/events or DELETE /safety/events/{id}, or obs-utils telemetry safety release; the Alpaca port has no authentication`,
  );
}

/**
 * The external events after a `SetExternalEvents` (docs/safety.md#safety-events): each event
 * replaces the one with its `Id` where it stands, or is added at the end. The hub sets them so,
 * and a replay of its audit events does the same (`safety_replay.ts`).
 *
 * @param external The external events now, in the order they were first set.
 * @param events The events set.
 * @param profile The profile they hold shut, or null for every profile.
 * @param via The path they came by.
 * @returns The new list; `external` is left as it is.
 *
 * @example Usage
 * ```ts
 * import { withExternal } from "./safety_hub.ts";
 * import assert from "node:assert/strict";
 *
 * const ups = {
 *   Source: "UPS", Name: "mains", Id: "ups", Type: "Power", Trigger: "Offline",
 *   Description: "on battery", EventTimeUtc: "2026-11-27T03:00:00Z",
 * };
 * const once = withExternal([], [ups], null, "http");
 * const again = withExternal(once, [{ ...ups, Description: "battery low" }], null, "http");
 * assert.equal(again.length, 1);
 * assert.equal(again[0]!.event.Description, "battery low");
 * ```
 */
export function withExternal(
  external: readonly ExternalEvent[],
  events: readonly SafetyEvent[],
  profile: string | null,
  via: HubVia,
): ExternalEvent[] {
  const next = [...external];
  for (const event of events) {
    const at = next.findIndex((x) => x.event.Id === event.Id);
    if (at >= 0) next[at] = { event, profile, via };
    else next.push({ event, profile, via });
  }
  return next;
}

/** A waiver as saved in the hub file: without its clocks. */
function savedWaiver(waiver: ActiveWaiver): Waiver {
  const { type, until, reason, peer, for_s } = waiver;
  return { type, until, reason, peer, ...(for_s === undefined ? {} : { for_s }) };
}

/** A waiver as the routes answer it: `{type, until, reason, peer}`. */
function publicWaiver(waiver: ActiveWaiver): Waiver {
  const { type, until, reason, peer } = waiver;
  return { type, until, reason, peer };
}

function damagedEvent(nowIso: string): SafetyEvent {
  return {
    Source: INTERNAL_SOURCE,
    Name: "safety hub file",
    Id: DAMAGED_HUB_ID,
    Type: "Safety",
    Trigger: "ErrorCondition",
    Description:
      `the saved external events and waivers could not be read back, so the site is held shut; check which programs hold it shut, then release ${DAMAGED_HUB_ID}`,
    EventTimeUtc: nowIso,
  };
}
