/**
 * The safety verdict (docs/safety.md): one latched answer to "may the roof open?", judged from
 * the critical types of the registry. A critical type that is stale, never seen or in alarm
 * makes the site unsafe, and keeps it unsafe until it has been continuously fine for its
 * `clear_after_s`, counted from the last moment it was judged unsafe.
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
import type { TypeSpec, TypesRegistry } from "./types_registry.ts";

/** The verdict of one critical type, as `GET /safety` lists it. */
export interface SafetyTypeVerdict {
  /** The type's usual state (`GET /types`); a latched type keeps `ok` or `warn`. */
  state: "ok" | "warn" | "alarm" | "stale";
  /** False while the type is stale, never seen, in alarm or latched. */
  safe: boolean;
  /** While latched: when the latch ends if nothing changes (ISO 8601 UTC); else null. */
  latched_until: string | null;
}

/** The `GET /safety` document. */
export interface SafetyVerdict {
  /** True when at least one critical type is registered and every one of them is safe. */
  safe: boolean;
  /** When `safe` last changed (ISO 8601 UTC). */
  since: string;
  /** When the latest latch ends if nothing else changes; null when safe or no latch decides. */
  clear_at: string | null;
  /** Why the site is unsafe, one line each, such as `weather: stale for 412 s (limit 180 s)`. */
  reasons: string[];
  /** Each critical type's verdict. */
  types: Record<string, SafetyTypeVerdict>;
}

/** A change of the verdict (`kind: "safety"`) or of a critical type's state (`kind: "type"`). */
export interface SafetyChange {
  /** What changed. */
  kind: "safety" | "type";
  /** The new verdict (`kind: "safety"`). */
  safe?: boolean;
  /** The critical type (`kind: "type"`). */
  type?: string;
  /** Its new state (`kind: "type"`). */
  state?: string;
  /** Its state before (`kind: "type"`). */
  previous?: string;
  /** The verdict's reasons (`kind: "safety"`), or the type's (`kind: "type"`). */
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
  /** The verdict when saved. */
  safe: boolean;
  /** When the verdict last changed (ISO 8601 UTC). */
  since: string;
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

/** One judgement: the verdict, and what changed since the judgement before. */
export interface Judgement {
  /** The verdict now. */
  verdict: SafetyVerdict;
  /** Changes since the previous judgement, verdict first; empty for the first one. */
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

/**
 * The latched verdict over the critical types of a registry (docs/safety.md).
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
  #verdict: SafetyVerdict | undefined;
  #restoredSafe: boolean | undefined;
  #since: string;

  /**
   * Starts judging; the first {@linkcode SafetyJudge.judge} sets the baseline.
   *
   * @param registry The types registry; only its critical types count.
   * @param start The clocks at start and the latch saved by the previous run.
   */
  constructor(registry: TypesRegistry, start: JudgeStart) {
    this.#critical = [...registry].filter(([, spec]) => spec.critical);
    this.#specs = new Map(this.#critical);
    const { wallMs, monoMs, restored } = start;
    this.#since = restored?.since ?? iso(wallMs);
    this.#restoredSafe = restored?.safe;
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

  /** The latest verdict, or undefined before the first judgement. */
  get verdict(): SafetyVerdict | undefined {
    return this.#verdict;
  }

  /**
   * Judges now, moving each latch.
   *
   * @param latest The latest event of a type, or undefined when never seen.
   * @param wallMs Wall time, epoch ms.
   * @param monoMs Monotonic time, ms.
   * @returns The verdict and the changes since the judgement before.
   */
  judge(
    latest: (type: string) => LatestEvent | undefined,
    wallMs: number,
    monoMs: number,
  ): Judgement {
    const types: Record<string, SafetyTypeVerdict> = {};
    const reasons: string[] = [];
    const typeChanges: SafetyChange[] = [];
    let dirty = this.#verdict === undefined;
    let clearAt: number | undefined;
    let onlyLatches = true;
    for (const [type, spec] of this.#critical) {
      const latch = this.#latches.get(type)!;
      const seen = latest(type);
      if (wentStale(latch, wallMs)) latch.wasUnsafe = true;
      latch.staleAtWall = staleAt(spec, seen ? Date.parse(seen.ts) : NaN);
      const status = judgeType(spec, seen, wallMs);
      const own = typeReasons(type, spec, seen, status.state, status.reasons);
      const unsafe = own.length > 0;
      // The moment it turns fine counts as unsafe too: the count starts at the change.
      if (unsafe !== latch.wasUnsafe) dirty = true;
      if (unsafe || latch.wasUnsafe) {
        latch.lastUnsafeMono = monoMs;
        latch.untilWall = undefined;
      }
      const clearMs = (spec.clear_after_s ?? 0) * 1000;
      const endMono = latch.lastUnsafeMono === undefined
        ? undefined
        : latch.lastUnsafeMono + clearMs;
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
        reasons.push(
          `${type}: clearing, safe at ${isoSeconds(until)} (clear_after_s ${spec.clear_after_s})`,
        );
        clearAt = Math.max(clearAt ?? until, until);
      } else if (latch.untilWall !== undefined) {
        latch.untilWall = undefined;
        dirty = true;
      }
      if (unsafe) onlyLatches = false;
      reasons.push(...own);
      if (latch.state !== undefined && latch.state !== status.state) {
        typeChanges.push({
          kind: "type",
          type,
          state: status.state,
          previous: latch.state,
          reasons: status.reasons,
          ts: iso(wallMs),
        });
        dirty = true;
      }
      latch.state = status.state;
      latch.wasUnsafe = unsafe || latch.held;
      types[type] = {
        state: status.state,
        safe: !unsafe && !latched,
        latched_until: until === undefined ? null : iso(until),
      };
    }
    if (this.#critical.length === 0) reasons.push(NO_CRITICAL_REASON);
    const safe = reasons.length === 0;
    // The first verdict of a site directory is where it starts, not a change; after a restart the
    // saved verdict is the one before.
    const previous = this.#verdict?.safe ?? this.#restoredSafe;
    const changes: SafetyChange[] = [];
    if (previous !== undefined && previous !== safe) {
      this.#since = iso(wallMs);
      changes.push({ kind: "safety", safe, reasons, ts: this.#since });
      dirty = true;
    }
    this.#restoredSafe = undefined;
    const first = this.#verdict === undefined;
    this.#verdict = {
      safe,
      since: this.#since,
      clear_at: !safe && onlyLatches && clearAt !== undefined ? iso(clearAt) : null,
      reasons,
      types,
    };
    return {
      verdict: this.#verdict,
      changes: first ? changes : [...changes, ...typeChanges],
      dirty,
    };
  }

  /**
   * Judges one critical type after a new event of it, cheaply: moves its latch while nothing
   * changes, and says when something did, so the caller judges everything
   * ({@linkcode SafetyJudge.judge}) only then. Called for each event of a commit group before
   * the group is written: an event that turns the type unsafe holds it judged unsafe until
   * {@linkcode SafetyJudge.release}, and the caller saves the latch before writing the group.
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
   * How long until the verdict can next change by the passing of time alone: a latch ending,
   * a type going stale, or a `ts` from the future coming within the tolerance.
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
    for (const [type, spec] of this.#critical) {
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
    return {
      version: 1,
      saved_at_ms: wallMs,
      covers,
      safe: this.#verdict?.safe ?? false,
      since: this.#since,
      types,
    };
  }
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
 * Why one critical type is unsafe, in `GET /check`'s words; empty when it is fine.
 */
function typeReasons(
  type: string,
  spec: TypeSpec,
  seen: LatestEvent | undefined,
  state: TypeState,
  reasons: readonly string[],
): string[] {
  if (!seen) return [`${type}: stale, never seen`];
  const out: string[] = [];
  if (state === "stale") out.push(`${type}: ${reasons[0]}`);
  if (state === "stale" || state === "alarm") {
    for (const [path, field] of Object.entries(spec.fields)) {
      const past = fieldLevel(path, field, valueAt(seen.data, path));
      if (past?.level === "alarm") out.push(`${type}: ${past.reason}`);
    }
  }
  return out;
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
  const types: Record<string, SavedTypeLatch> = {};
  for (const [type, raw] of Object.entries(v.types as Record<string, unknown>)) {
    const t = raw as Record<string, unknown> | null;
    if (typeof t !== "object" || t === null || typeof t.unsafe !== "boolean") return null;
    const until = t.latched_until_ms;
    if (until !== null && (typeof until !== "number" || !Number.isFinite(until))) return null;
    types[type] = { unsafe: t.unsafe, latched_until_ms: until as number | null };
  }
  return { version: 1, saved_at_ms: v.saved_at_ms, covers, safe: v.safe, since: v.since, types };
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
