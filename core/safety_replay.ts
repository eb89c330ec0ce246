/**
 * The safety verdict judged again over stored lines (docs/safety.md#replay): a rule change tried
 * on the nights already recorded. The service's own judge, {@linkcode SafetyJudge}, is fed each
 * stored event of a critical type in stream order, as the live service fed it when the event
 * arrived; between two lines it is stepped to each moment its verdict can change by time alone
 * (`nextChangeIn`, 1 ms after, as the live watch's timer wakes), so a latch ending or a type
 * going stale is found at its moment; and the safety hub's audit events
 * (`telemetry.safety.external`, `telemetry.safety.waiver`) are applied where they were recorded,
 * so external events and waivers replay too. It gives every change of one profile's verdict over
 * a range, a summary, and the changes that differ from the `telemetry.safety` events the service
 * recorded in the same range.
 *
 * Which clock: the live service judged each event at the moment it received it, but a stored
 * line carries no receive time (docs/storage.md), only its `ts`. The service stamps its own lines
 * (`telemetry.safety`, the audit events) and every event sent without a `ts` with the receive
 * time, and the stream is in the order of receipt, so the replay's clock at a line is the line's
 * `ts`, never earlier than the clock at the line before: exact for the lines the service stamped,
 * and a sender's latency late for the others. A batch a collector sends late, with old `ts`, is
 * judged at the time of the line before it (a `telemetry.safety` line the service wrote while it
 * waited, often), as old as it was when it arrived.
 *
 * Pure: no clock, no I/O. The caller reads the lines (`cli/safety_replay.ts`).
 *
 * @example Usage
 * ```ts
 * import { SafetyReplay } from "./safety_replay.ts";
 * import assert from "node:assert/strict";
 *
 * const registry = new Map([
 *   ["weather", { critical: true, stale_after_s: 120, fields: { wind_mps: { alarm_above: 15 } } }],
 * ]);
 * const since = Date.parse("2026-11-27T03:00:00Z");
 * const replay = new SafetyReplay(registry, { sinceMs: since, untilMs: since + 600_000 });
 * const line = (seq: number, ts: string, wind: number) =>
 *   `{"seq":${seq},"ts":"${ts}","type":"weather","data":{"wind_mps":${wind}},"meta":{}}`;
 * replay.line(line(1, "2026-11-27T02:59:00.000Z", 3));
 * replay.line(line(2, "2026-11-27T03:01:00.000Z", 16));
 * replay.line(line(3, "2026-11-27T03:02:00.000Z", 4));
 * const { changes, summary } = replay.finish();
 * assert.equal(summary.start.safe, true);
 * assert.deepEqual(changes.map((c) => [c.ts, c.safe]), [
 *   ["2026-11-27T03:01:00.000Z", false],
 *   ["2026-11-27T03:02:00.000Z", true],
 *   // 120 s after the last event, and 1 ms, as the live timer wakes
 *   ["2026-11-27T03:04:00.002Z", false],
 * ]);
 * ```
 *
 * @module
 */

import { canonicalTypeAt } from "../wire/ndjson.ts";
import { FUTURE_TOLERANCE_MS, type LatestEvent } from "./freshness.ts";
import { type ActiveWaiver, SafetyJudge, type SafetyVerdict } from "./safety.ts";
import { SAFETY_EVENT_TYPE } from "./safety_watch.ts";
import { EXTERNAL_EVENT_TYPE, WAIVER_EVENT_TYPE, withExternal } from "./safety_hub.ts";
import {
  checkSafetyEvents,
  type ExternalEvent,
  type HubVia,
  MAX_WAIVER_S,
} from "./safety_events.ts";
import {
  isCriticalFor,
  safetyProfiles,
  SITE_PROFILE,
  type TypesRegistry,
} from "./types_registry.ts";

/**
 * How far apart a recorded change and a replayed one may be and still be the same change: the
 * live service judged an event once it was written (a fdatasync of the latch before a group
 * that turns a type unsafe), its timer woke a few milliseconds late under load, and an event
 * sent with its own `ts` arrived a sender's latency after it; 2 s covers these, and is shorter
 * than any `stale_after_s` or `clear_after_s` worth setting (docs/safety.md#replay).
 *
 * @example Usage
 * ```ts
 * import { REPLAY_TOLERANCE_MS } from "./safety_replay.ts";
 * import assert from "node:assert/strict";
 *
 * assert.equal(REPLAY_TOLERANCE_MS, 2000);
 * ```
 */
export const REPLAY_TOLERANCE_MS = 2_000;

/** One change of the replayed verdict. */
export interface ReplayChange {
  /** The moment of the change (ISO 8601 UTC). */
  ts: string;
  /** The verdict after it. */
  safe: boolean;
  /** Its reasons, as `GET /safety` words them. */
  reasons: string[];
  /** When the latest latch ends if nothing else changes, or null. */
  clear_at: string | null;
}

/** A change recorded live: a `telemetry.safety` event of the profile. */
export interface RecordedChange {
  /** Its `ts`: the moment of the change. */
  ts: string;
  /** The verdict after it. */
  safe: boolean;
  /** Its reasons. */
  reasons: string[];
}

/** A change found on one side only (within {@linkcode REPLAY_TOLERANCE_MS}). */
export interface ReplayDifference {
  /** `recorded_only`: recorded live, not replayed; `replayed_only`: the reverse. */
  kind: "recorded_only" | "replayed_only";
  /** The moment of the change. */
  ts: string;
  /** The verdict after it. */
  safe: boolean;
  /** Its reasons. */
  reasons: string[];
}

/** A safe stretch: from a change to safe until the next change or the end of the range. */
export interface SafeStretch {
  /** Its start (ISO 8601 UTC). */
  start: string;
  /** Its end (ISO 8601 UTC). */
  end: string;
  /** Its length in hours. */
  hours: number;
}

/** What a replay found over its range. */
export interface ReplaySummary {
  /** The profile replayed. */
  profile: string;
  /** The range's start (ISO 8601 UTC). */
  since: string;
  /** The range's end: `until`, or the last line read (ISO 8601 UTC). */
  until: string;
  /** The verdict at `since`. */
  start: { safe: boolean; reasons: string[] };
  /** Hours judged safe in the range. */
  safe_hours: number;
  /** Hours judged unsafe in the range. */
  unsafe_hours: number;
  /** Changes of the verdict in the range. */
  changes: number;
  /** The longest safe stretch in the range, or null when it was never safe. */
  longest_safe: SafeStretch | null;
  /** `telemetry.safety` changes of the profile recorded in the range. */
  recorded_changes: number;
  /** The tolerance of the comparison, in seconds ({@linkcode REPLAY_TOLERANCE_MS}). */
  tolerance_s: number;
}

/** A replay's answer: `safety replay --json` prints it. */
export interface ReplayReport {
  /** Every change of the replayed verdict in the range, in time order. */
  changes: ReplayChange[];
  /** The summary. */
  summary: ReplaySummary;
  /** The changes that differ from those recorded, in time order. */
  differences: ReplayDifference[];
}

/** What a replay judges. */
export interface ReplayOptions {
  /** The profile whose verdict is followed (default `site`, docs/safety.md#profiles). */
  profile?: string | undefined;
  /** The range's start, epoch ms. */
  sinceMs: number;
  /** The range's end (exclusive), epoch ms; undefined: the last line handed over. */
  untilMs?: number | undefined;
}

/**
 * How far before the range the lines are judged, so that the verdict at its start is the one the
 * service had: the longest waiver (12 hours), the longest `stale_after_s` plus `clear_after_s` of
 * the critical types (a type gone stale and latched since), and the tolerance of a `ts` ahead.
 *
 * @param registry The critical types judged.
 * @returns Milliseconds.
 *
 * @example Usage
 * ```ts
 * import { replayWarmUpMs } from "./safety_replay.ts";
 * import assert from "node:assert/strict";
 *
 * const registry = new Map([["weather", { critical: true, stale_after_s: 180, clear_after_s: 900, fields: {} }]]);
 * assert.equal(replayWarmUpMs(registry), (43_200 + 1080 + 60) * 1000);
 * ```
 */
export function replayWarmUpMs(registry: TypesRegistry): number {
  let longest = 0;
  for (const spec of registry.values()) {
    longest = Math.max(longest, (spec.stale_after_s ?? 0) + (spec.clear_after_s ?? 0));
  }
  return (MAX_WAIVER_S + longest) * 1000 + FUTURE_TOLERANCE_MS;
}

/**
 * One profile's verdict judged again over stored lines handed over in stream order.
 *
 * @example Usage
 * ```ts
 * import { SafetyReplay } from "./safety_replay.ts";
 * import assert from "node:assert/strict";
 *
 * const registry = new Map([["weather", { critical: true, stale_after_s: 60, fields: {} }]]);
 * const replay = new SafetyReplay(registry, { sinceMs: 0, untilMs: 3_600_000 });
 * assert.deepEqual(replay.types, ["weather", "telemetry.safety", "telemetry.safety.external", "telemetry.safety.waiver"]);
 * assert.equal(replay.finish().summary.unsafe_hours, 1);
 * ```
 */
export class SafetyReplay {
  #judge: SafetyJudge;
  #profile: string;
  #critical: ReadonlySet<string>;
  #sinceMs: number;
  #untilMs: number | undefined;
  #readFromMs: number;
  /** The replay's clock: wall and monotonic at once (epoch ms). */
  #clock: number;
  /**
   * The earliest moment the verdict can change by time alone, as last asked (`nextChangeIn`),
   * or -Infinity to ask again. A judgement can move it either way; a new event of a type that is
   * no older than the one before only moves it later, so until the clock passes it no moment is
   * missed, and the judge is asked once in a while instead of at every line.
   */
  #due = -Infinity;
  #latestEvents = new Map<string, LatestEvent>();
  /** The `ts` of each type's latest event, epoch ms. */
  #latestMs = new Map<string, number>();
  /** Each type read, as JSON (`"weather"`), for lines read without parsing them whole. */
  #typeJsons: [string, string][];
  /** The minute of the latest `ts` read whole (`2026-11-27T03:12:`), and its epoch ms. */
  #minute = "\uffff";
  #minuteMs = NaN;
  #latest = (type: string): LatestEvent | undefined => this.#latestEvents.get(type);
  #external: ExternalEvent[] = [];
  #waivers = new Map<string, ActiveWaiver>();
  #verdict!: SafetyVerdict;
  #start: { safe: boolean; reasons: string[] } | undefined;
  #changes: ReplayChange[] = [];
  #recorded: RecordedChange[] = [];

  /**
   * Starts a replay; its judge starts {@linkcode replayWarmUpMs} before `sinceMs` with no latch
   * saved (every critical type unsafe until seen, as a new site directory starts).
   *
   * @param registry The types registry to judge with.
   * @param options The profile and the range.
   * @throws {RangeError} When the registry has no such profile.
   */
  constructor(registry: TypesRegistry, options: ReplayOptions) {
    const profile = options.profile ?? SITE_PROFILE;
    const profiles = safetyProfiles(registry);
    if (!profiles.includes(profile)) {
      throw new RangeError(
        `there is no safety profile ${JSON.stringify(profile)}; the profiles are ${
          profiles.join(", ")
        } (critical_for in the types file)`,
      );
    }
    // Only the profile's critical types: its verdict depends on no other.
    const judged = new Map([...registry].filter(([, spec]) => isCriticalFor(spec, profile)));
    this.#profile = profile;
    this.#critical = new Set(judged.keys());
    this.#typeJsons = this.types.map((type) => [JSON.stringify(type), type]);
    this.#sinceMs = options.sinceMs;
    this.#untilMs = options.untilMs;
    this.#readFromMs = options.sinceMs - replayWarmUpMs(judged);
    this.#clock = this.#readFromMs;
    this.#judge = new SafetyJudge(judged, {
      wallMs: this.#clock,
      monoMs: this.#clock,
      restored: null,
    });
    this.#judgeAt(this.#clock);
  }

  /** The types whose lines to hand over: the profile's critical types and the service's own. */
  get types(): string[] {
    return [...this.#critical, SAFETY_EVENT_TYPE, EXTERNAL_EVENT_TYPE, WAIVER_EVENT_TYPE];
  }

  /** The earliest `ts` of the lines to hand over, epoch ms: the warm-up before the range. */
  get readFromMs(): number {
    return this.#readFromMs;
  }

  /**
   * Judges one stored line, in stream order; lines of other types, and lines that are not
   * envelopes, are passed over.
   *
   * @param text The line as stored.
   */
  line(text: string): void {
    const event = this.#read(text);
    if (event === undefined) return;
    const { ts, tsMs, type, data } = event;
    // Received at its ts, never before the line before it (the stream is in order of receipt).
    const at = Math.max(this.#clock, tsMs);
    this.#passTo(at);
    if (this.#critical.has(type)) {
      // As the ingest path: observed before it is current, judged whole when something changed.
      const observed = this.#judge.observe(type, tsMs, data, at, at);
      // An older event than the one before goes stale sooner: ask again when it can change.
      if (!(tsMs >= (this.#latestMs.get(type) ?? -Infinity))) this.#due = -Infinity;
      this.#latestMs.set(type, tsMs);
      this.#latestEvents.set(type, { ts, data });
      if (observed !== "same") {
        this.#judge.release();
        this.#judgeAt(at);
      }
    } else if (type === SAFETY_EVENT_TYPE) {
      this.#record(ts, tsMs, data);
    } else if (type === EXTERNAL_EVENT_TYPE || type === WAIVER_EVENT_TYPE) {
      if (this.#applyAudit(type, data, ts)) this.#judgeAt(at);
    }
  }

  /**
   * A line's `ts` (and as epoch ms), type and `data`; undefined for a line that is not an
   * envelope. A line as the service writes it (wire/ndjson.ts) is read without parsing more
   * than its `data`: the replay reads every line of the critical types of a month.
   */
  #read(
    text: string,
  ): { ts: string; tsMs: number; type: string; data: Record<string, unknown> } | undefined {
    const typeAt = canonicalTypeAt(text);
    if (typeAt > 0) {
      for (const [json, type] of this.#typeJsons) {
        const dataAt = typeAt + json.length + DATA_KEY.length;
        if (
          !text.startsWith(json, typeAt) || !text.startsWith(DATA_KEY, dataAt - DATA_KEY.length)
        ) {
          continue;
        }
        // `meta` is last: a `,"meta":` inside a string has its quote escaped, and one in `meta`
        // leaves a slice that does not parse (then the whole line is parsed below).
        let data: unknown;
        try {
          data = JSON.parse(text.slice(dataAt, text.lastIndexOf(META_KEY)));
        } catch {
          break;
        }
        if (!isObject(data)) return undefined;
        const ts = text.slice(typeAt - 33, typeAt - 9);
        const tsMs = this.#msOf(ts);
        return Number.isNaN(tsMs) ? undefined : { ts, tsMs, type, data };
      }
    }
    let event: { ts?: unknown; type?: unknown; data?: unknown };
    try {
      event = JSON.parse(text);
    } catch {
      return undefined; // a hand-damaged line: not an event
    }
    const { ts, type, data } = event;
    if (typeof ts !== "string" || typeof type !== "string" || !isObject(data)) return undefined;
    const tsMs = Date.parse(ts);
    return Number.isNaN(tsMs) ? undefined : { ts, tsMs, type, data };
  }

  /**
   * Epoch ms of a `ts` as the service writes it (`2026-11-27T03:12:40.123Z`), its minute kept
   * from the line before: lines come a second apart, and `Date.parse` is most of a line's cost.
   */
  #msOf(ts: string): number {
    if (ts.startsWith(this.#minute) && ts.charCodeAt(19) === 0x2e && ts.charCodeAt(23) === 0x5a) {
      const s1 = ts.charCodeAt(17) - 48, s2 = ts.charCodeAt(18) - 48;
      const m1 = ts.charCodeAt(20) - 48, m2 = ts.charCodeAt(21) - 48, m3 = ts.charCodeAt(22) - 48;
      if (
        s1 >= 0 && s1 <= 5 && s2 >= 0 && s2 <= 9 && m1 >= 0 && m1 <= 9 && m2 >= 0 && m2 <= 9 &&
        m3 >= 0 && m3 <= 9
      ) return this.#minuteMs + (s1 * 10 + s2) * 1000 + m1 * 100 + m2 * 10 + m3;
    }
    const ms = Date.parse(ts);
    const minute = ts.slice(0, 17);
    const minuteMs = Date.parse(`${minute}00.000Z`);
    if (ts.length === 24 && !Number.isNaN(minuteMs)) {
      this.#minute = minute;
      this.#minuteMs = minuteMs;
    }
    return ms;
  }

  /**
   * Ends the range (at `untilMs`, or at the last line handed over) and sums it up.
   *
   * @returns The changes, the summary and the differences from the recorded changes.
   */
  finish(): ReplayReport {
    const end = this.#untilMs ?? Math.max(this.#clock, this.#sinceMs);
    this.#passTo(end);
    const changes = this.#changes.filter((c) => Date.parse(c.ts) < end);
    const recorded = this.#recorded.filter((r) => Date.parse(r.ts) < end)
      .sort((a, b) => Date.parse(a.ts) - Date.parse(b.ts));
    const start = this.#start!;
    let safe = start.safe, from = this.#sinceMs, safeMs = 0, unsafeMs = 0;
    let longest: { from: number; to: number } | undefined;
    const close = (to: number) => {
      if (safe) {
        safeMs += to - from;
        if (!longest || to - from > longest.to - longest.from) longest = { from, to };
      } else unsafeMs += to - from;
    };
    for (const change of changes) {
      const at = Date.parse(change.ts);
      close(at);
      safe = change.safe;
      from = at;
    }
    close(Math.max(end, from));
    const hours = (ms: number) => Math.round(ms / 36_000) / 100;
    return {
      changes,
      summary: {
        profile: this.#profile,
        since: iso(this.#sinceMs),
        until: iso(end),
        start,
        safe_hours: hours(safeMs),
        unsafe_hours: hours(unsafeMs),
        changes: changes.length,
        longest_safe: longest
          ? {
            start: iso(longest.from),
            end: iso(longest.to),
            hours: hours(longest.to - longest.from),
          }
          : null,
        recorded_changes: recorded.length,
        tolerance_s: REPLAY_TOLERANCE_MS / 1000,
      },
      differences: compareChanges(recorded, changes, REPLAY_TOLERANCE_MS),
    };
  }

  /** Moves the clock to `t`, judging at each moment on the way the verdict can change. */
  #passTo(t: number): void {
    if (this.#start === undefined && t >= this.#sinceMs) {
      this.#step(this.#sinceMs);
      this.#judgeAt(this.#sinceMs);
      this.#start = { safe: this.#verdict.safe, reasons: this.#verdict.reasons };
    }
    this.#step(t);
  }

  #step(t: number): void {
    while (this.#due <= t) {
      const next = this.#judge.nextChangeIn(this.#latest, this.#clock, this.#clock);
      this.#due = next === undefined ? Infinity : this.#clock + next;
      if (this.#due > t) break;
      // 1 ms after the moment, as the live timer sleeps (core/safety_watch.ts); at `t` when that
      // is later: the moment is passed either way, and only a judgement finds a latch ended.
      this.#judgeAt(Math.min(this.#due + 1, t));
    }
    this.#clock = t;
  }

  #judgeAt(t: number): void {
    this.#clock = t;
    this.#due = -Infinity;
    const judged = this.#judge.judge(this.#latest, t, t);
    const verdict = judged.verdicts.get(this.#profile)!;
    this.#verdict = verdict;
    if (this.#start === undefined) return;
    for (const change of judged.changes) {
      if (change.kind !== "safety" || (change.profile ?? SITE_PROFILE) !== this.#profile) continue;
      this.#changes.push({
        ts: change.ts,
        safe: verdict.safe,
        reasons: verdict.reasons,
        clear_at: verdict.clear_at,
      });
    }
  }

  /** Keeps a `telemetry.safety` event of the profile in the range (`profile` absent: `site`). */
  #record(ts: string, tsMs: number, data: Record<string, unknown>): void {
    const profile = typeof data.profile === "string" ? data.profile : SITE_PROFILE;
    if (profile !== this.#profile || typeof data.safe !== "boolean" || tsMs < this.#sinceMs) return;
    const reasons = Array.isArray(data.reasons)
      ? data.reasons.filter((r): r is string => typeof r === "string")
      : [];
    this.#recorded.push({ ts, safe: data.safe, reasons });
  }

  /**
   * Applies an audit event of the hub as the hub changed (core/safety_hub.ts): an external event
   * set (replacing the one with its `Id`) or cleared, a waiver set (until its recorded end) or
   * ended. Returns false for data it cannot read, which changes nothing.
   */
  #applyAudit(type: string, data: Record<string, unknown>, ts: string): boolean {
    if (type === EXTERNAL_EVENT_TYPE) {
      let event;
      try {
        [event] = checkSafetyEvents([data.event], ts);
      } catch {
        return false;
      }
      if (data.action === "set") {
        const profile = typeof data.profile === "string" ? data.profile : null;
        const via = typeof data.via === "string" ? data.via as HubVia : "http";
        this.#external = withExternal(this.#external, [event!], profile, via);
      } else if (data.action === "clear") {
        this.#external = this.#external.filter((x) => x.event.Id !== event!.Id);
      } else return false;
    } else {
      const { action, type: waived, until, reason, peer } = data;
      if (typeof waived !== "string") return false;
      if (action === "end") this.#waivers.delete(waived);
      else if (action === "set" && typeof until === "string" && !Number.isNaN(Date.parse(until))) {
        const untilMs = Date.parse(until);
        this.#waivers.set(waived, {
          type: waived,
          until,
          reason: typeof reason === "string" ? reason : "",
          peer: typeof peer === "string" ? peer : "",
          untilMs,
          // One clock here: the waiver's end is its recorded wall end.
          endMono: untilMs,
        });
      } else return false;
    }
    this.#judge.setHub({ external: this.#external, waivers: new Map(this.#waivers) });
    return true;
  }
}

/**
 * The changes found on one side only: a recorded change with no replayed change to the same
 * verdict within `toleranceMs`, and the reverse; each change matches at most one.
 *
 * @param recorded The recorded changes, in time order.
 * @param replayed The replayed changes, in time order.
 * @param toleranceMs How far apart two changes may be and still match.
 * @returns The differences, in time order.
 *
 * @example Usage
 * ```ts
 * import { compareChanges } from "./safety_replay.ts";
 * import assert from "node:assert/strict";
 *
 * const recorded = [{ ts: "2026-11-27T03:00:00.000Z", safe: false, reasons: [] }];
 * const replayed = [
 *   { ts: "2026-11-27T03:00:01.500Z", safe: false, reasons: [], clear_at: null },
 *   { ts: "2026-11-27T03:10:00.000Z", safe: true, reasons: [], clear_at: null },
 * ];
 * assert.deepEqual(compareChanges(recorded, replayed, 2000).map((d) => d.kind), ["replayed_only"]);
 * ```
 */
export function compareChanges(
  recorded: readonly RecordedChange[],
  replayed: readonly ReplayChange[],
  toleranceMs: number,
): ReplayDifference[] {
  const times = replayed.map((c) => Date.parse(c.ts));
  const used = new Array<boolean>(replayed.length).fill(false);
  const out: { at: number; difference: ReplayDifference }[] = [];
  let low = 0;
  for (const r of recorded) {
    const at = Date.parse(r.ts);
    while (low < replayed.length && times[low]! < at - toleranceMs) low++;
    let match = -1;
    for (let i = low; i < replayed.length && times[i]! <= at + toleranceMs; i++) {
      if (!used[i] && replayed[i]!.safe === r.safe) {
        match = i;
        break;
      }
    }
    if (match >= 0) used[match] = true;
    else out.push({ at, difference: { kind: "recorded_only", ...r } });
  }
  replayed.forEach((c, i) => {
    if (used[i]) return;
    out.push({
      at: times[i]!,
      difference: { kind: "replayed_only", ts: c.ts, safe: c.safe, reasons: c.reasons },
    });
  });
  return out.sort((a, b) => a.at - b.at).map((x) => x.difference);
}

const DATA_KEY = ',"data":';
const META_KEY = ',"meta":';

function isObject(value: unknown): value is Record<string, unknown> {
  return typeof value === "object" && value !== null && !Array.isArray(value);
}

function iso(ms: number): string {
  return new Date(ms).toISOString();
}
