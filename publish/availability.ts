/**
 * A type's availability on MQTT (docs/publish.md, "Availability"): `online` while its latest
 * event is fresh, `offline` once it is stale or was never seen, by the service's own freshness
 * rule (`judgeType()`, docs/types.md): older than `stale_after_s`, or a `ts` more than a minute
 * ahead for a type whose freshness is judged. Time alone changes it, so the answer says when it
 * next can change, for the publisher's timer.
 *
 * @module
 */

import { FUTURE_TOLERANCE_MS, judgeType } from "../core/freshness.ts";

/** What freshness needs of a type's `GET /types` entry. */
export interface FreshnessRule {
  /** Whether the type is critical (its freshness is judged even without `stale_after_s`). */
  readonly critical: boolean;
  /** Seconds after its `ts` the type goes stale, or `null` (never). */
  readonly stale_after_s: number | null;
}

/** A type's availability now, and the next moment time alone can change it. */
export interface Availability {
  /** `true`: `online`; `false`: `offline`. */
  readonly online: boolean;
  /** When (ms since the epoch) it can next change with no new event; `undefined`: never. */
  readonly changesAt: number | undefined;
}

/**
 * A type's availability at `nowMs`.
 *
 * @param rule The type's `critical` and `stale_after_s` (`undefined`: a type the registry does
 *   not describe, which is never stale).
 * @param ts The `ts` of its latest event, or `undefined` when none was seen.
 * @param nowMs The time to judge at.
 * @returns Whether it is online, and when that can change by time alone.
 *
 * @example Usage
 * ```ts
 * import { availability } from "./availability.ts";
 * import assert from "node:assert/strict";
 *
 * const rule = { critical: false, stale_after_s: 60 };
 * const now = Date.parse("2026-11-27T10:00:00.000Z");
 * const fresh = availability(rule, "2026-11-27T09:59:30.000Z", now);
 * assert.deepEqual(fresh, { online: true, changesAt: Date.parse("2026-11-27T10:00:30.001Z") });
 * assert.equal(availability(rule, "2026-11-27T09:58:00.000Z", now).online, false);
 * assert.equal(availability(rule, undefined, now).online, false);
 * ```
 */
export function availability(
  rule: FreshnessRule | undefined,
  ts: string | undefined,
  nowMs: number,
): Availability {
  if (ts === undefined) return { online: false, changesAt: undefined };
  const spec = rule === undefined || (rule.stale_after_s === null && !rule.critical) ? undefined : {
    critical: rule.critical,
    fields: {},
    ...(rule.stale_after_s === null ? {} : { stale_after_s: rule.stale_after_s }),
  };
  const online = judgeType(spec, { ts, data: {} }, nowMs).state !== "stale";
  const tsMs = Date.parse(ts);
  if (spec === undefined || Number.isNaN(tsMs)) return { online, changesAt: undefined };
  // The moments the judgement turns by time alone: a ts too far ahead coming within the
  // tolerance, and the age passing stale_after_s (stale once strictly older).
  const moments = [tsMs - FUTURE_TOLERANCE_MS];
  if (spec.stale_after_s !== undefined) {
    moments.push(Math.floor(tsMs + spec.stale_after_s * 1000) + 1);
  }
  const changesAt = moments.filter((at) => at > nowMs).sort((a, b) => a - b)[0];
  return { online, changesAt };
}
