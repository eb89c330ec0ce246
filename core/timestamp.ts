/**
 * Receive times as envelope `ts` strings, fast: under load every event needs one, and
 * `Date.prototype.toISOString` costs about a microsecond. The text up to the minute is kept and
 * only the seconds and milliseconds are written anew.
 *
 * @example Usage
 * ```ts
 * import assert from "node:assert/strict";
 * import { TimestampCache } from "./timestamp.ts";
 *
 * const stamps = new TimestampCache();
 * assert.equal(stamps.format(Date.UTC(2026, 10, 25, 19, 0, 5, 42)), "2026-11-25T19:00:05.042Z");
 * ```
 *
 * @module
 */

import { formatTimestamp } from "../wire/event.ts";

/** Formats epoch milliseconds like {@linkcode formatTimestamp}, reusing the text of the minute. */
export class TimestampCache {
  #lastMs = NaN;
  #lastText = "";
  /** Epoch ms of the start of the minute `#prefix` names, and that text ("2026-11-25T19:00:"). */
  #minuteMs = NaN;
  #prefix = "";

  /**
   * @param epochMs Milliseconds since the Unix epoch.
   * @returns For example `"2026-11-25T19:00:05.042Z"`.
   * @throws {RangeError} If `epochMs` is outside the years 0001 to 9999.
   */
  format(epochMs: number): string {
    if (epochMs === this.#lastMs) return this.#lastText;
    const offset = epochMs - this.#minuteMs;
    let text: string;
    if (offset >= 0 && offset < 60_000 && Number.isInteger(epochMs)) {
      const seconds = (offset / 1000) | 0;
      const ms = offset - seconds * 1000;
      text = this.#prefix + (seconds < 10 ? "0" : "") + seconds +
        (ms < 10 ? ".00" : ms < 100 ? ".0" : ".") + ms + "Z";
    } else {
      text = formatTimestamp(epochMs);
      if (Number.isInteger(epochMs)) {
        this.#minuteMs = Math.floor(epochMs / 60_000) * 60_000;
        this.#prefix = text.slice(0, 17);
      }
    }
    this.#lastMs = epochMs;
    this.#lastText = text;
    return text;
  }
}
