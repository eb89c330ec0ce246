/**
 * How INDI writes values (docs/collect.md, "INDI"): numbers, which may be sexagesimal
 * (`12:30:00`, `-5 30`), and timestamps, which are UTC without a zone suffix.
 *
 * @module
 */

const PLAIN = /^[-+]?(\d+\.?\d*|\.\d+)([eE][-+]?\d+)?$/;
const SEXAGESIMAL = /^([-+]?)(\d+(?:\.\d*)?)[:; ](\d+(?:\.\d*)?)(?:[:; ](\d+(?:\.\d*)?))?$/;

/**
 * An INDI number: decimal, or sexagesimal `D:M[:S]` (separators `:`, `;` or space; the sign
 * applies to the whole), or `undefined` when it is neither.
 *
 * @example
 * ```ts
 * import { indiNumber } from "./indi_values.ts";
 * import assert from "node:assert/strict";
 * assert.equal(indiNumber("12:30:00"), 12.5);
 * assert.equal(indiNumber("-0:30"), -0.5);
 * assert.equal(indiNumber("1.5e2"), 150);
 * assert.equal(indiNumber("n/a"), undefined);
 * ```
 */
export function indiNumber(text: string): number | undefined {
  if (PLAIN.test(text)) {
    const n = Number(text);
    return Number.isFinite(n) ? n : undefined;
  }
  const m = SEXAGESIMAL.exec(text);
  if (!m) return undefined;
  const value = Number(m[2]) + Number(m[3]) / 60 + Number(m[4] ?? 0) / 3600;
  if (!Number.isFinite(value)) return undefined;
  return m[1] === "-" ? -value : value;
}

/**
 * An INDI `timestamp` (`YYYY-MM-DDTHH:MM:SS[.s]`, UTC) in epoch milliseconds, or `undefined`.
 *
 * @example
 * ```ts
 * import { indiTime } from "./indi_values.ts";
 * import assert from "node:assert/strict";
 * assert.equal(indiTime("2026-11-27T03:12:40"), Date.UTC(2026, 10, 27, 3, 12, 40));
 * assert.equal(indiTime(undefined), undefined);
 * ```
 */
export function indiTime(text: string | undefined): number | undefined {
  if (!text || !/^\d{4}-\d\d-\d\dT\d\d:\d\d(:\d\d(\.\d+)?)?(Z|[+-]\d\d:\d\d)?$/.test(text)) {
    return undefined;
  }
  const ms = Date.parse(/(Z|[+-]\d\d:\d\d)$/.test(text) ? text : `${text}Z`);
  return Number.isFinite(ms) ? ms : undefined;
}

/**
 * Text made safe inside an XML attribute value.
 *
 * @example
 * ```ts
 * import { escapeXml } from "./indi_values.ts";
 * import assert from "node:assert/strict";
 * assert.equal(escapeXml('A "B" & <C>'), "A &quot;B&quot; &amp; &lt;C&gt;");
 * ```
 */
export function escapeXml(text: string): string {
  return text.replace(/[<>&"']/g, (c) => XML_ESCAPES[c] ?? c);
}

const XML_ESCAPES: Record<string, string> = {
  "<": "&lt;",
  ">": "&gt;",
  "&": "&amp;",
  '"': "&quot;",
  "'": "&apos;",
};
