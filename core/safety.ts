/**
 * The safety verdict (docs/safety.md): one latched answer to "may the roof open?", judged from
 * the critical types of the registry. A critical type that is stale, never seen or in alarm
 * makes the site unsafe, and keeps it unsafe until it has been continuously fine for its
 * `clear_after_s`, counted from the last moment it was judged unsafe. Each profile named by a
 * `critical_for` gets a verdict of its own over its types, sharing their latches
 * (docs/safety.md#profiles); external events hold profiles shut and waivers take a type out of
 * the judgement for a bounded time (docs/safety.md#safety-events, #waivers).
 *
 * Pure: no clock, no timer, no I/O. The caller gives two clocks at each judgement: the wall
 * clock (freshness is judged on events' own `ts`, and answers carry wall times) and a monotonic
 * clock (latches are counted on it, so a wall clock stepping forward never ends one early).
 * `core/safety_watch.ts` drives it: when to judge, persisting the latch, events and listeners.
 *
 * @example Usage
 * ```ts
 * import { SafetyJudge } from "./safety.ts";
 * import assert from "node:assert/strict";
 *
 * const registry = new Map([["weather", { critical: true, clear_after_s: 900, fields: {} }]]);
 * const wall = Date.parse("2026-11-27T03:00:00Z");
 * const judge = new SafetyJudge(registry, { wallMs: wall, monoMs: 0, restored: null });
 * const seen = { ts: "2026-11-27T03:00:00.000Z", data: {} };
 * const { verdict } = judge.judge((type) => type === "weather" ? seen : undefined, wall, 0);
 * assert.equal(verdict.safe, false);
 * assert.deepEqual(verdict.reasons, [
 *   "weather: clearing, safe at 2026-11-27T03:15:00Z (clear_after_s 900)",
 * ]);
 * ```
 *
 * @module
 */

import {
  fieldLevel,
  FUTURE_TOLERANCE_MS,
  judgeType,
  type LatestEvent,
  numericValue,
  type TypeState,
  valueAt,
} from "./freshness.ts";
import {
  isCriticalAnywhere,
  isCriticalFor,
  safetyProfiles,
  SITE_PROFILE,
  type TypeSpec,
  type TypesRegistry,
} from "./types_registry.ts";
import {
  eventTypeOf,
  type ExternalEvent,
  INTERNAL_ID_PREFIX,
  INTERNAL_SOURCE,
  type SafetyEvent,
  type Waiver,
} from "./safety_events.ts";

/** The verdict of one critical type, as `GET /safety` lists it. */
export interface SafetyTypeVerdict {
  /** The type's usual state (`GET /types`); a latched type keeps `ok` or `warn`. */
  state: "ok" | "warn" | "alarm" | "stale";
  /** False while the type is stale, never seen, in alarm or latched; true while waived. */
  safe: boolean;
  /** While latched: when the latch ends if nothing changes (ISO 8601 UTC); else null. */
  latched_until: string | null;
  /** While waived: when the waiver ends (ISO 8601 UTC); else null (docs/safety.md#waivers). */
  waived_until: string | null;
}

/** A waiver as the verdict lists it (docs/safety.md#waivers). */
export interface WaiverView {
  /** The waived critical type. */
  type: string;
  /** When the waiver ends (ISO 8601 UTC, whole seconds). */
  until: string;
  /** Why it was set. */
  reason: string;
  /** Who set it (the peer's address). */
  peer: string;
}

/** The `GET /safety` document of one profile (docs/safety.md). */
export interface SafetyVerdict {
  /** The profile judged: `site` for the types with `critical: true` (docs/safety.md#profiles). */
  profile: string;
  /** True when at least one critical type is registered, every one of them is safe, and no external event holds the profile shut. */
  safe: boolean;
  /** When `safe` last changed (ISO 8601 UTC). */
  since: string;
  /** When the latest latch ends if nothing else changes; null when safe or no latch decides. */
  clear_at: string | null;
  /**
   * Why the profile is unsafe, one line each, such as `weather: stale for 412 s (limit 180 s)`,
   * and each waiver (`weather: WAIVED until ...`), which leaves it safe.
   */
  reasons: string[];
  /** Each critical type's verdict. */
  types: Record<string, SafetyTypeVerdict>;
  /**
   * The draft ISafetyMonitorV4 `SafetyEvents`: one internal event per reason it is unsafe, then
   * every external event that applies; empty when safe.
   */
  events: SafetyEvent[];
  /** The waivers in force over its types. */
  waivers: WaiverView[];
}

/**
 * A change the safety watch tells: of a profile's verdict (`kind: "safety"`), of a critical
 * type's state (`kind: "type"`), of the external events (`kind: "external"`) or of the waivers
 * (`kind: "waiver"`, docs/safety.md#notifications).
 */
export interface SafetyChange {
  /** What changed. */
  kind: "safety" | "type" | "external" | "waiver";
  /** The profile whose verdict changed (`kind: "safety"`), absent for `site`. */
  profile?: string;
  /** The new verdict (`kind: "safety"`). */
  safe?: boolean;
  /** The critical type (`kind: "type"` and `"waiver"`). */
  type?: string;
  /** Its new state (`kind: "type"`). */
  state?: string;
  /** Its state before (`kind: "type"`). */
  previous?: string;
  /** `set` or `clear` (`kind: "external"`), `set` or `end` (`kind: "waiver"`). */
  action?: string;
  /** The external event (`kind: "external"`). */
  event?: SafetyEvent;
  /** The waiver's end (`kind: "waiver"`, `action: "set"`). */
  until?: string;
  /** The verdict's reasons (`kind: "safety"`), the type's (`kind: "type"`), or what was done. */
  reasons: string[];
  /** The moment of the change (ISO 8601 UTC). */
  ts: string;
}

/** The latch of one critical type as saved for the next start (docs/safety.md). */
export interface SavedTypeLatch {
  /** Judged unsafe when saved: the next start latches it for its whole `clear_after_s`. */
  unsafe: boolean;
  /** Wall time (epoch ms) its latch ended as seen when saved, or null when not latched. */
  latched_until_ms: number | null;
}

/**
 * How far the stored streams had been judged when a latch was saved (docs/safety.md): the lines
 * after it are judged again at the next start, so a latch file older than the streams (a crash
 * before it was saved again, a save that failed, an older copy put back) never makes a site safe
 * early.
 */
export interface LatchCover {
  /** The site stream's last seq on disk. */
  site_seq: number;
  /** The active run's directory and its last seq on disk, or null without an active run. */
  run: { dir: string; seq: number } | null;
  /**
   * Where the run log `runs.ndjson` ended (its inode, or null, and its size): a run it names
   * after this started after the save; null when unknown (every run started since is read).
   */
  runs_log: { ino: number | null; offset: number } | null;
}

/** The latch of every critical type, saved in the site directory (docs/safety.md). */
export interface SavedLatch {
  /** Format version. */
  version: 1;
  /** Wall time (epoch ms) when saved. */
  saved_at_ms: number;
  /**
   * How far the streams had been judged when saved; null in a file written before 0.7, which did
   * not say (the next start then takes the checkpoint's cursors, docs/safety.md).
   */
  covers: LatchCover | null;
  /** The site's verdict when saved. */
  safe: boolean;
  /** When the site's verdict last changed (ISO 8601 UTC). */
  since: string;
  /** Every other profile's verdict and its `since` (absent in a file written before 0.7). */
  profiles?: Record<string, { safe: boolean; since: string }>;
  /** Per critical type. */
  types: Record<string, SavedTypeLatch>;
}

/** Where a judge starts. */
export interface JudgeStart {
  /** Wall time at start, epoch ms. */
  wallMs: number;
  /** Monotonic time at start, ms. */
  monoMs: number;
  /**
   * The latch saved by the previous run, or null when there is none or it is damaged: then
   * every critical type counts as judged unsafe at start (docs/safety.md).
   */
  restored: SavedLatch | null;
}

/** One judgement: every profile's verdict, and what changed since the judgement before. */
export interface Judgement {
  /** The site's verdict now. */
  verdict: SafetyVerdict;
  /** Every profile's verdict now, `site` first. */
  verdicts: ReadonlyMap<string, SafetyVerdict>;
  /** Changes since the previous judgement, verdicts first; empty for the first one. */
  changes: SafetyChange[];
  /** True when the saved latch must be rewritten (a verdict, state or latch changed). */
  dirty: boolean;
}

/**
 * What one event of a critical type did to its judgement ({@linkcode SafetyJudge.observe}):
 * `same`, nothing that needs the whole verdict judged; `changed`, its state changed; `unsafe`, it
 * turned the type unsafe, so the latch must be saved before the event is written.
 */
export type Observed = "same" | "changed" | "unsafe";

/** The reason given when no critical type is registered. */
export const NO_CRITICAL_REASON = "no critical types registered (--types)";

/** A waiver in force, as the judge holds it: its wall end and its monotonic bound. */
export interface ActiveWaiver extends Waiver {
  /** Its wall end, epoch ms. */
  readonly untilMs: number;
  /**
   * Its end on the monotonic clock: a wall clock set back never stretches a waiver past the
   * length it was given (docs/safety.md#waivers).
   */
  readonly endMono: number;
}

/** What the hub adds to the judgement: external events and waivers (docs/safety.md). */
export interface HubInput {
  /** External events, in the order they were first set. */
  readonly external: readonly ExternalEvent[];
  /** Waivers by type. */
  readonly waivers: ReadonlyMap<string, ActiveWaiver>;
}

/**
 * Whether a waiver is in force at these times.
 *
 * @param waiver The waiver.
 * @param wallMs Wall time, epoch ms.
 * @param monoMs Monotonic time, ms.
 * @returns True until its wall end or its monotonic bound, whichever comes first.
 *
 * @example Usage
 * ```ts
 * import { waiverActive } from "./safety.ts";
 * import assert from "node:assert/strict";
 *
 * const waiver = { type: "weather", until: "", reason: "", peer: "", untilMs: 1000, endMono: 500 };
 * assert.equal(waiverActive(waiver, 900, 400), true);
 * assert.equal(waiverActive(waiver, 900, 600), false);
 * ```
 */
export function waiverActive(waiver: ActiveWaiver, wallMs: number, monoMs: number): boolean {
  return wallMs < waiver.untilMs && monoMs < waiver.endMono;
}

/** Per critical type: what the judge remembers between judgements. */
interface TypeLatch {
  /** Monotonic ms of the last moment judged unsafe, or undefined when never. */
  lastUnsafeMono: number | undefined;
  /** Whether the previous judgement found it unsafe (stale, never seen, alarm). */
  wasUnsafe: boolean;
  /**
   * Judged unsafe by an event of a group not committed yet: until {@linkcode SafetyJudge.release}
   * every judgement counts it as judged unsafe, so a question asked while the group is written
   * neither ends nor starts its latch early.
   */
  held: boolean;
  /** Its state at the previous judgement. */
  state: TypeState | undefined;
  /** Wall ms its latch ends, fixed when the latch began; moved only by a clock step. */
  untilWall: number | undefined;
  /** Wall minus monotonic when `untilWall` was fixed: a wall clock step shows as a change. */
  offset: number;
  /**
   * Wall ms at which the latest event judged goes stale (none: never). Past it at the next
   * judgement, the type was stale in between even if no judgement saw it (a late timer).
   */
  staleAtWall: number | undefined;
}

/** One reason a critical type is unsafe, with what its SafetyEvent says. */
interface Condition {
  /** The internal event's `Id`. */
  id: string;
  /** The reason line. */
  reason: string;
  /** `SafetyEventType`. */
  type: string;
  /** `SafetyEventTrigger`. */
  trigger: string;
}

/** One critical type judged once, for every profile it counts in. */
interface TypeResult {
  verdict: SafetyTypeVerdict;
  /** Unsafe now (stale, never seen, alarm); a latch alone is `latchedUntil`. */
  unsafe: boolean;
  /** Its latch's wall end while latched. */
  latchedUntil: number | undefined;
  conditions: Condition[];
  waiver: ActiveWaiver | undefined;
}

/** One profile's memory between judgements. */
interface ProfileMemory {
  readonly name: string;
  /** Its critical types, in the order of the types file. */
  readonly types: readonly string[];
  verdict: SafetyVerdict | undefined;
  restoredSafe: boolean | undefined;
  since: string;
}

/** A wall clock that moved more than this against the monotonic one has stepped. */
const STEP_MS = 1000;

/** ISO 8601 UTC with milliseconds. */
function iso(ms: number): string {
  return new Date(ms).toISOString();
}

/** ISO 8601 UTC in whole seconds, rounded up: a latch is never said to end before it does. */
function isoSeconds(ms: number): string {
  return new Date(Math.ceil(ms / 1000) * 1000).toISOString().replace(".000Z", "Z");
}

const NO_HUB: HubInput = { external: [], waivers: new Map() };
const NO_CRITICAL_ID = `${INTERNAL_ID_PREFIX}no-critical-types`;

/**
 * The latched verdicts over the critical types of a registry (docs/safety.md): the site's, and
 * one per profile named by a `critical_for` (docs/safety.md#profiles). Each type is judged once
 * and its latch is shared by every profile it counts in.
 *
 * @example Usage
 * ```ts
 * import { SafetyJudge } from "./safety.ts";
 * import assert from "node:assert/strict";
 *
 * const judge = new SafetyJudge(new Map(), { wallMs: 0, monoMs: 0, restored: null });
 * assert.deepEqual(judge.judge(() => undefined, 0, 0).verdict.reasons, [
 *   "no critical types registered (--types)",
 * ]);
 * ```
 */
export class SafetyJudge {
  #critical: [string, TypeSpec][];
  #specs: Map<string, TypeSpec>;
  #latches = new Map<string, TypeLatch>();
  #profiles: ProfileMemory[];
  #hub: HubInput = NO_HUB;
  /** When each internal event's condition began (wall, ISO): kept while it lasts. */
  #eventSince = new Map<string, string>();
  #judged = false;

  /**
   * Starts judging; the first {@linkcode SafetyJudge.judge} sets the baseline.
   *
   * @param registry The types registry; its critical types (for any profile) count.
   * @param start The clocks at start and the latch saved by the previous run.
   */
  constructor(registry: TypesRegistry, start: JudgeStart) {
    this.#critical = [...registry].filter(([, spec]) => isCriticalAnywhere(spec));
    this.#specs = new Map(this.#critical);
    const { wallMs, monoMs, restored } = start;
    this.#profiles = safetyProfiles(registry).map((name) => {
      const saved = name === SITE_PROFILE
        ? (restored ? { safe: restored.safe, since: restored.since } : undefined)
        : restored?.profiles?.[name];
      return {
        name,
        types: this.#critical.filter(([, spec]) => isCriticalFor(spec, name)).map(([t]) => t),
        verdict: undefined,
        restoredSafe: saved?.safe,
        since: saved?.since ?? iso(wallMs),
      };
    });
    for (const [type, spec] of this.#critical) {
      const clearMs = (spec.clear_after_s ?? 0) * 1000;
      const saved = restored?.types[type];
      // Unknown (no file, a damaged one, a type it does not name) or unsafe when saved: unsafe
      // at start, so the type is latched for its whole clear_after_s once it is fine.
      let lastUnsafeMono: number | undefined = monoMs;
      if (saved && !saved.unsafe) {
        // Never longer than clear_after_s: a wall clock set back while stopped cannot stretch it.
        const left = saved.latched_until_ms === null
          ? 0
          : Math.min(clearMs, saved.latched_until_ms - wallMs);
        lastUnsafeMono = left > 0 ? monoMs + left - clearMs : undefined;
      }
      this.#latches.set(type, {
        lastUnsafeMono,
        wasUnsafe: false,
        held: false,
        state: undefined,
        untilWall: undefined,
        offset: wallMs - monoMs,
        staleAtWall: undefined,
      });
    }
  }

  /** The profiles judged, `site` first, then by name (the Alpaca device number is the index). */
  get profiles(): readonly string[] {
    return this.#profiles.map((p) => p.name);
  }

  /** The site's latest verdict, or undefined before the first judgement. */
  get verdict(): SafetyVerdict | undefined {
    return this.#profiles[0]!.verdict;
  }

  /**
   * Sets the external events and waivers the next judgements count (docs/safety.md).
   *
   * @param hub The external events and the waivers by type.
   */
  setHub(hub: HubInput): void {
    this.#hub = hub;
  }

  /**
   * Judges now, moving each latch.
   *
   * @param latest The latest event of a type, or undefined when never seen.
   * @param wallMs Wall time, epoch ms.
   * @param monoMs Monotonic time, ms.
   * @returns Every profile's verdict and the changes since the judgement before.
   */
  judge(
    latest: (type: string) => LatestEvent | undefined,
    wallMs: number,
    monoMs: number,
  ): Judgement {
    const first = !this.#judged;
    this.#judged = true;
    const results = new Map<string, TypeResult>();
    const typeChanges: SafetyChange[] = [];
    let dirty = first;
    for (const [type, spec] of this.#critical) {
      const judged = this.#judgeType(type, spec, latest(type), wallMs, monoMs);
      if (judged.dirty) dirty = true;
      if (judged.change) typeChanges.push(judged.change);
      results.set(type, judged.result);
    }
    this.#keepEventTimes(results, wallMs);
    const verdicts = new Map<string, SafetyVerdict>();
    const changes: SafetyChange[] = [];
    for (const profile of this.#profiles) {
      const verdict = this.#profileVerdict(profile, results, wallMs);
      // The first verdict of a site directory is where it starts, not a change; after a restart
      // the saved verdict is the one before.
      const previous = profile.verdict?.safe ?? profile.restoredSafe;
      if (previous !== undefined && previous !== verdict.safe) {
        profile.since = iso(wallMs);
        verdict.since = profile.since;
        changes.push({
          kind: "safety",
          ...(profile.name === SITE_PROFILE ? {} : { profile: profile.name }),
          safe: verdict.safe,
          reasons: verdict.reasons,
          ts: profile.since,
        });
        dirty = true;
      }
      profile.restoredSafe = undefined;
      profile.verdict = verdict;
      verdicts.set(profile.name, verdict);
    }
    return {
      verdict: verdicts.get(SITE_PROFILE)!,
      verdicts,
      changes: first ? changes : [...changes, ...typeChanges],
      dirty,
    };
  }

  /** One critical type's judgement, its latch moved; shared by every profile it counts in. */
  #judgeType(
    type: string,
    spec: TypeSpec,
    seen: LatestEvent | undefined,
    wallMs: number,
    monoMs: number,
  ): { result: TypeResult; change: SafetyChange | undefined; dirty: boolean } {
    const latch = this.#latches.get(type)!;
    const waiver = this.#waiverOf(type, wallMs, monoMs);
    const status = judgeType(spec, seen, wallMs);
    let dirty = false;
    let change: SafetyChange | undefined;
    if (latch.state !== undefined && latch.state !== status.state) {
      change = {
        kind: "type",
        type,
        state: status.state,
        previous: latch.state,
        reasons: status.reasons,
        ts: iso(wallMs),
      };
      dirty = true;
    }
    latch.state = status.state;
    if (waiver) {
      // Not judged at all while waived: the latch stands as it was when the waiver began, and
      // counts again from the waiver's end (docs/safety.md#waivers).
      latch.staleAtWall = staleAt(spec, seen ? Date.parse(seen.ts) : NaN);
      return {
        result: {
          verdict: {
            state: status.state,
            safe: true,
            latched_until: null,
            waived_until: isoSeconds(waiver.untilMs),
          },
          unsafe: false,
          latchedUntil: undefined,
          conditions: [],
          waiver,
        },
        change,
        dirty,
      };
    }
    if (wentStale(latch, wallMs)) latch.wasUnsafe = true;
    latch.staleAtWall = staleAt(spec, seen ? Date.parse(seen.ts) : NaN);
    const conditions = typeConditions(type, spec, seen, status.state, status.reasons);
    const unsafe = conditions.length > 0;
    // The moment it turns fine counts as unsafe too: the count starts at the change.
    if (unsafe !== latch.wasUnsafe) dirty = true;
    if (unsafe || latch.wasUnsafe) {
      latch.lastUnsafeMono = monoMs;
      latch.untilWall = undefined;
    }
    const clearMs = (spec.clear_after_s ?? 0) * 1000;
    const endMono = latch.lastUnsafeMono === undefined ? undefined : latch.lastUnsafeMono + clearMs;
    const latched = !unsafe && endMono !== undefined && monoMs < endMono;
    let until: number | undefined;
    if (latched) {
      const offset = wallMs - monoMs;
      if (latch.untilWall === undefined || Math.abs(offset - latch.offset) > STEP_MS) {
        latch.untilWall = Math.ceil(endMono! + offset);
        latch.offset = offset;
        dirty = true;
      }
      until = latch.untilWall;
      conditions.push({
        id: `${INTERNAL_ID_PREFIX}${type}:clearing`,
        reason: `${type}: clearing, safe at ${
          isoSeconds(until)
        } (clear_after_s ${spec.clear_after_s})`,
        type: typeEventType(spec),
        trigger: "Unsafe",
      });
    } else if (latch.untilWall !== undefined) {
      latch.untilWall = undefined;
      dirty = true;
    }
    latch.wasUnsafe = unsafe || latch.held;
    return {
      result: {
        verdict: {
          state: status.state,
          safe: !unsafe && !latched,
          latched_until: until === undefined ? null : iso(until),
          waived_until: null,
        },
        unsafe,
        latchedUntil: until,
        conditions,
        waiver: undefined,
      },
      change,
      dirty,
    };
  }

  /** Keeps each internal event's start while its condition lasts (its `EventTimeUtc`). */
  #keepEventTimes(results: ReadonlyMap<string, TypeResult>, wallMs: number): void {
    const now = new Map<string, string>();
    const keep = (id: string) => now.set(id, this.#eventSince.get(id) ?? iso(wallMs));
    for (const result of results.values()) for (const c of result.conditions) keep(c.id);
    if (this.#profiles.some((p) => p.types.length === 0)) keep(NO_CRITICAL_ID);
    this.#eventSince = now;
  }

  /** One profile's verdict over the types judged. */
  #profileVerdict(
    profile: ProfileMemory,
    results: ReadonlyMap<string, TypeResult>,
    wallMs: number,
  ): SafetyVerdict {
    const reasons: string[] = [];
    const types: Record<string, SafetyTypeVerdict> = {};
    const events: SafetyEvent[] = [];
    const waivers: WaiverView[] = [];
    let unsafe = false, onlyLatches = true;
    let clearAt: number | undefined;
    const internal = (c: Condition, name: string): SafetyEvent => ({
      Source: INTERNAL_SOURCE,
      Name: name,
      Id: c.id,
      Type: c.type,
      Trigger: c.trigger,
      Description: c.reason,
      EventTimeUtc: this.#eventSince.get(c.id) ?? iso(wallMs),
    });
    for (const type of profile.types) {
      const result = results.get(type)!;
      types[type] = result.verdict;
      if (result.waiver) {
        const { until, reason, peer, untilMs } = result.waiver;
        reasons.push(`${type}: WAIVED until ${isoSeconds(untilMs)} (${reason})`);
        waivers.push({ type, until: until, reason, peer });
        continue;
      }
      if (result.conditions.length === 0) continue;
      unsafe = true;
      if (result.unsafe) onlyLatches = false;
      if (result.latchedUntil !== undefined) {
        clearAt = Math.max(clearAt ?? result.latchedUntil, result.latchedUntil);
      }
      for (const c of result.conditions) {
        reasons.push(c.reason);
        events.push(internal(c, type));
      }
    }
    if (profile.types.length === 0) {
      unsafe = true;
      onlyLatches = false;
      reasons.push(NO_CRITICAL_REASON);
      events.push(
        internal({
          id: NO_CRITICAL_ID,
          reason: NO_CRITICAL_REASON,
          type: "Safety",
          trigger: "ErrorCondition",
        }, profile.name === SITE_PROFILE ? "critical types" : `critical types of ${profile.name}`),
      );
    }
    for (const external of this.#hub.external) {
      if (external.profile !== null && external.profile !== profile.name) continue;
      unsafe = true;
      onlyLatches = false;
      reasons.push(`external: ${external.event.Source}: ${external.event.Description}`);
      events.push(external.event);
    }
    return {
      profile: profile.name,
      safe: !unsafe,
      since: profile.since,
      clear_at: unsafe && onlyLatches && clearAt !== undefined ? iso(clearAt) : null,
      reasons,
      types,
      events,
      waivers,
    };
  }

  #waiverOf(type: string, wallMs: number, monoMs: number): ActiveWaiver | undefined {
    const waiver = this.#hub.waivers.get(type);
    return waiver && waiverActive(waiver, wallMs, monoMs) ? waiver : undefined;
  }

  /**
   * Judges one critical type after a new event of it, cheaply: moves its latch while nothing
   * changes, and says when something did, so the caller judges everything
   * ({@linkcode SafetyJudge.judge}) only then. Called for each event of a commit group before
   * the group is written: an event that turns the type unsafe holds it judged unsafe until
   * {@linkcode SafetyJudge.release}, and the caller saves the latch before writing the group.
   * A waived type is not judged (docs/safety.md#waivers).
   *
   * @param type The type.
   * @param tsMs Its new latest event's `ts`, epoch ms (NaN when it cannot be read).
   * @param data That event's `data`.
   * @param wallMs Wall time, epoch ms.
   * @param monoMs Monotonic time, ms.
   * @returns `unsafe` when it turned the type unsafe, `changed` when its state changed (or it is
   *   not judged yet), else `same`.
   */
  observe(
    type: string,
    tsMs: number,
    data: Readonly<Record<string, unknown>>,
    wallMs: number,
    monoMs: number,
  ): Observed {
    const latch = this.#latches.get(type);
    const spec = this.#specs.get(type);
    if (!latch || !spec) return "same";
    if (latch.state === undefined) return "changed";
    const state = quickState(spec, tsMs, data, wallMs);
    if (this.#waiverOf(type, wallMs, monoMs)) {
      // Not judged while waived; at the waiver's end its staleness counts from its latest event,
      // as a judgement of the waived type keeps it, however seldom it was judged (#replay).
      latch.staleAtWall = staleAt(spec, tsMs);
      return state === latch.state ? "same" : "changed";
    }
    // Stale since the event before, unseen by any judgement: that counts as judged unsafe too.
    const unsafe = wentStale(latch, wallMs) || state === "stale" || state === "alarm";
    if (unsafe && !latch.wasUnsafe) {
      // Kept even when a later event of the same group is fine: the judgement after the group
      // sees only the last one, and must still latch the type.
      latch.wasUnsafe = true;
      latch.held = true;
      latch.lastUnsafeMono = monoMs;
      latch.untilWall = undefined;
      return "unsafe";
    }
    if (state !== latch.state) return "changed";
    if (unsafe) latch.lastUnsafeMono = monoMs;
    latch.staleAtWall = staleAt(spec, tsMs);
    return "same";
  }

  /**
   * Ends the hold of {@linkcode SafetyJudge.observe} once the group is committed (or refused):
   * the next judgement counts the types it held as judged unsafe one last time, which starts
   * their latch at that moment.
   */
  release(): void {
    for (const latch of this.#latches.values()) latch.held = false;
  }

  /**
   * How long until a verdict can next change by the passing of time alone: a latch ending,
   * a type going stale, a `ts` from the future coming within the tolerance, or a waiver ending.
   *
   * @param latest The latest event of a type.
   * @param wallMs Wall time, epoch ms.
   * @param monoMs Monotonic time, ms.
   * @returns Milliseconds (at least 0), or undefined when nothing changes by itself.
   */
  nextChangeIn(
    latest: (type: string) => LatestEvent | undefined,
    wallMs: number,
    monoMs: number,
  ): number | undefined {
    let next: number | undefined;
    const at = (ms: number) => void (next = Math.min(next ?? ms, Math.max(0, ms)));
    for (const waiver of this.#hub.waivers.values()) {
      if (waiverActive(waiver, wallMs, monoMs)) {
        at(Math.min(waiver.untilMs - wallMs, waiver.endMono - monoMs));
      }
    }
    for (const [type, spec] of this.#critical) {
      if (this.#waiverOf(type, wallMs, monoMs)) continue;
      const latch = this.#latches.get(type)!;
      if (latch.lastUnsafeMono !== undefined && !latch.wasUnsafe) {
        const end = latch.lastUnsafeMono + (spec.clear_after_s ?? 0) * 1000 - monoMs;
        if (end > 0) at(end);
      }
      const seen = latest(type);
      const ts = seen ? Date.parse(seen.ts) : NaN;
      if (Number.isNaN(ts)) continue;
      if (spec.stale_after_s !== undefined) {
        const stale = ts + spec.stale_after_s * 1000 - wallMs + 1;
        if (stale > 0) at(stale);
      }
      // A ts too far ahead is stale until the present comes within the tolerance.
      const ahead = ts - 60_000 - wallMs;
      if (ahead > 0) at(ahead);
    }
    return next;
  }

  /**
   * The latch to save for the next start.
   *
   * @param wallMs Wall time, epoch ms.
   * @param covers How far the stored streams have been judged.
   * @returns The record (`store/safety_latch.ts` writes it).
   */
  saved(wallMs: number, covers: LatchCover): SavedLatch {
    const types: Record<string, SavedTypeLatch> = {};
    for (const [type] of this.#critical) {
      const latch = this.#latches.get(type)!;
      types[type] = { unsafe: latch.wasUnsafe, latched_until_ms: latch.untilWall ?? null };
    }
    const [site, ...others] = this.#profiles;
    const profiles: Record<string, { safe: boolean; since: string }> = {};
    for (const p of others) profiles[p.name] = { safe: p.verdict?.safe ?? false, since: p.since };
    return {
      version: 1,
      saved_at_ms: wallMs,
      covers,
      safe: site!.verdict?.safe ?? false,
      since: site!.since,
      ...(others.length > 0 ? { profiles } : {}),
      types,
    };
  }
}

/** The `SafetyEventType` of a type as a whole: its first field with an Alpaca property's. */
function typeEventType(spec: TypeSpec): string {
  for (const field of Object.values(spec.fields)) {
    if (field.alpaca !== undefined) return eventTypeOf(field.alpaca);
  }
  return "Safety";
}

/**
 * Why one critical type is unsafe, in `GET /check`'s words, each with its SafetyEvent's `Id`,
 * `Type` and `Trigger`; empty when it is fine.
 */
function typeConditions(
  type: string,
  spec: TypeSpec,
  seen: LatestEvent | undefined,
  state: TypeState,
  reasons: readonly string[],
): Condition[] {
  const offline = (id: string, reason: string): Condition => ({
    id: `${INTERNAL_ID_PREFIX}${type}:${id}`,
    reason,
    type: typeEventType(spec),
    trigger: "Offline",
  });
  if (!seen) return [offline("never-seen", `${type}: stale, never seen`)];
  const out: Condition[] = [];
  if (state === "stale") out.push(offline("stale", `${type}: ${reasons[0]}`));
  if (state === "stale" || state === "alarm") {
    for (const [path, field] of Object.entries(spec.fields)) {
      const raw = valueAt(seen.data, path);
      const past = fieldLevel(path, field, raw);
      if (past?.level !== "alarm") continue;
      const n = numericValue(raw, field.unit);
      const trigger = n !== undefined && field.alarm_above !== undefined && n > field.alarm_above
        ? "AboveThreshold"
        : n !== undefined && field.alarm_below !== undefined && n < field.alarm_below
        ? "BelowThreshold"
        : "Active";
      out.push({
        id: `${INTERNAL_ID_PREFIX}${type}:${path}`,
        reason: `${type}: ${past.reason}`,
        type: eventTypeOf(field.alpaca),
        trigger,
      });
    }
  }
  return out;
}

/** When an event of `ts` `tsMs` goes stale, by the wall clock; undefined when never. */
function staleAt(spec: TypeSpec, tsMs: number): number | undefined {
  if (spec.stale_after_s === undefined || Number.isNaN(tsMs)) return undefined;
  return tsMs + spec.stale_after_s * 1000;
}

/** Whether the latest event judged before went stale without a judgement seeing the type unsafe. */
function wentStale(latch: TypeLatch, wallMs: number): boolean {
  return !latch.wasUnsafe && latch.staleAtWall !== undefined && wallMs > latch.staleAtWall;
}

/**
 * The state `judgeType()` gives a critical type, without its reasons: the ingest path's judge
 * (docs/safety.md). `tests/core/safety_test.ts` checks that both agree.
 *
 * @param spec The critical type's registry entry.
 * @param tsMs The latest event's `ts`, epoch ms (NaN: unreadable, counted as fresh as judgeType does).
 * @param data Its `data`.
 * @param nowMs The time to judge at.
 * @returns Its state.
 *
 * @example Usage
 * ```ts
 * import { quickState } from "./safety.ts";
 * import assert from "node:assert/strict";
 *
 * const spec = { critical: true, fields: { wind_mps: { alarm_above: 15 } } };
 * assert.equal(quickState(spec, 0, { wind_mps: 16 }, 0), "alarm");
 * ```
 */
export function quickState(
  spec: TypeSpec,
  tsMs: number,
  data: Readonly<Record<string, unknown>>,
  nowMs: number,
): TypeState {
  const ageMs = Number.isNaN(tsMs) ? 0 : nowMs - tsMs;
  if (spec.stale_after_s !== undefined && ageMs > spec.stale_after_s * 1000) return "stale";
  if (ageMs < -FUTURE_TOLERANCE_MS) return "stale";
  let state: TypeState = "ok";
  for (const path in spec.fields) {
    const field = spec.fields[path]!;
    const raw = valueAt(data, path);
    if (raw === undefined) continue;
    if (field.warn_if !== undefined || field.alarm_if !== undefined) {
      const level = fieldLevel(path, field, raw)?.level;
      if (level === "alarm") return "alarm";
      if (level === "warn") state = "warn";
      continue;
    }
    const n = numericValue(raw, field.unit);
    if (n === undefined) continue;
    if (
      (field.alarm_above !== undefined && n > field.alarm_above) ||
      (field.alarm_below !== undefined && n < field.alarm_below)
    ) return "alarm";
    if (
      (field.warn_above !== undefined && n > field.warn_above) ||
      (field.warn_below !== undefined && n < field.warn_below)
    ) state = "warn";
  }
  return state;
}

/**
 * Whether a stored line of a critical type, written after the latch file was saved, was judged
 * unsafe when it was committed: the start-up replay (docs/safety.md#across-restarts). Its values
 * in alarm, or its `ts` already older than `stale_after_s` at the earliest moment it can have
 * arrived (the latch's `saved_at_ms`: it was written after). A `ts` ahead of that moment says
 * nothing (the line may have arrived later), so it is judged by its values alone.
 *
 * @param spec The critical type's registry entry.
 * @param tsMs The line's `ts`, epoch ms (NaN: unreadable, judged by its values).
 * @param data The line's `data`.
 * @param earliestMs The earliest wall time the line can have arrived, epoch ms.
 * @returns True when it made the type unsafe.
 *
 * @example Usage
 * ```ts
 * import { unsafeWhenStored } from "./safety.ts";
 * import assert from "node:assert/strict";
 *
 * const spec = { critical: true, stale_after_s: 60, fields: { rain: { alarm_if: true } } };
 * assert.equal(unsafeWhenStored(spec, 0, { rain: true }, 0), true);
 * assert.equal(unsafeWhenStored(spec, 0, { rain: false }, 30_000), false);
 * // A collector catching up: ten minutes old when it could first have arrived.
 * assert.equal(unsafeWhenStored(spec, 0, { rain: false }, 600_000), true);
 * ```
 */
export function unsafeWhenStored(
  spec: TypeSpec,
  tsMs: number,
  data: Readonly<Record<string, unknown>>,
  earliestMs: number,
): boolean {
  const at = Number.isNaN(tsMs) ? earliestMs : Math.max(earliestMs, tsMs);
  const state = quickState(spec, tsMs, data, at);
  return state === "alarm" || state === "stale";
}

/**
 * Reads a saved latch back, or null when it is not one this version wrote (then the judge
 * treats every latch as unknown: unsafe, docs/safety.md).
 *
 * @param value The parsed file, or undefined when there is none.
 * @returns The record, or null.
 *
 * @example Usage
 * ```ts
 * import { parseSavedLatch } from "./safety.ts";
 * import assert from "node:assert/strict";
 *
 * assert.equal(parseSavedLatch({ version: 2 }), null);
 * ```
 */
export function parseSavedLatch(value: unknown): SavedLatch | null {
  if (typeof value !== "object" || value === null) return null;
  const v = value as Record<string, unknown>;
  if (
    v.version !== 1 || typeof v.saved_at_ms !== "number" || typeof v.safe !== "boolean" ||
    typeof v.since !== "string" || Number.isNaN(Date.parse(v.since)) ||
    typeof v.types !== "object" || v.types === null || Array.isArray(v.types)
  ) return null;
  const covers = v.covers === undefined ? null : parseCover(v.covers);
  if (covers === undefined) return null;
  const profiles = v.profiles === undefined ? undefined : parseProfiles(v.profiles);
  if (profiles === null) return null;
  const types: Record<string, SavedTypeLatch> = {};
  for (const [type, raw] of Object.entries(v.types as Record<string, unknown>)) {
    const t = raw as Record<string, unknown> | null;
    if (typeof t !== "object" || t === null || typeof t.unsafe !== "boolean") return null;
    const until = t.latched_until_ms;
    if (until !== null && (typeof until !== "number" || !Number.isFinite(until))) return null;
    types[type] = { unsafe: t.unsafe, latched_until_ms: until as number | null };
  }
  return {
    version: 1,
    saved_at_ms: v.saved_at_ms,
    covers,
    safe: v.safe,
    since: v.since,
    ...(profiles ? { profiles } : {}),
    types,
  };
}

/** The `profiles` of a saved latch, or null when it is not one this version wrote. */
function parseProfiles(value: unknown): Record<string, { safe: boolean; since: string }> | null {
  if (typeof value !== "object" || value === null || Array.isArray(value)) return null;
  const out: Record<string, { safe: boolean; since: string }> = {};
  for (const [name, raw] of Object.entries(value as Record<string, unknown>)) {
    const p = raw as Record<string, unknown> | null;
    if (
      typeof p !== "object" || p === null || typeof p.safe !== "boolean" ||
      typeof p.since !== "string" || Number.isNaN(Date.parse(p.since))
    ) return null;
    out[name] = { safe: p.safe, since: p.since };
  }
  return out;
}

/** A seq or a byte offset: a whole number, 0 or more. */
function isCount(value: unknown): value is number {
  return typeof value === "number" && Number.isSafeInteger(value) && value >= 0;
}

/** The `covers` of a saved latch, or undefined when it is not one this version wrote. */
function parseCover(value: unknown): LatchCover | undefined {
  if (typeof value !== "object" || value === null) return undefined;
  const c = value as Record<string, unknown>;
  if (!isCount(c.site_seq)) return undefined;
  let run: LatchCover["run"] = null;
  if (c.run !== null) {
    const r = c.run as Record<string, unknown> | undefined;
    if (typeof r !== "object" || typeof r.dir !== "string" || !isCount(r.seq)) return undefined;
    run = { dir: r.dir, seq: r.seq };
  }
  let log: LatchCover["runs_log"] = null;
  if (c.runs_log !== null) {
    const l = c.runs_log as Record<string, unknown> | undefined;
    if (typeof l !== "object" || !(l.ino === null || isCount(l.ino)) || !isCount(l.offset)) {
      return undefined;
    }
    log = { ino: l.ino, offset: l.offset };
  }
  return { site_seq: c.site_seq, run, runs_log: log };
}
