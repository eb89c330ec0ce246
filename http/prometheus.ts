/**
 * The Prometheus text exposition format 0.0.4 (docs/http-api.md): its content type, label
 * escaping, number text, the `# HELP`/`# TYPE` head of a family, one sample line, and a
 * histogram with fixed bounds.
 *
 * @example Usage
 * ```ts
 * import { family, sample } from "./prometheus.ts";
 * import assert from "node:assert/strict";
 *
 * assert.equal(
 *   family("up", "gauge", "1 while up.") + sample("up", 1, { unit: "a" }),
 *   '# HELP up 1 while up.\n# TYPE up gauge\nup{unit="a"} 1\n',
 * );
 * ```
 *
 * @module
 */

/**
 * The `Content-Type` of the Prometheus text format 0.0.4.
 *
 * @example Usage
 * ```ts
 * import { METRICS_CONTENT_TYPE } from "./prometheus.ts";
 * import assert from "node:assert/strict";
 *
 * assert.match(METRICS_CONTENT_TYPE, /version=0\.0\.4/);
 * ```
 */
export const METRICS_CONTENT_TYPE: string = "text/plain; version=0.0.4; charset=utf-8";

/**
 * Escapes a label value for the Prometheus text format: backslash, double quote and newline.
 *
 * @param value The raw label value.
 * @returns The text to put between the quotes.
 *
 * @example Usage
 * ```ts
 * import { escapeLabelValue } from "./prometheus.ts";
 * import assert from "node:assert/strict";
 *
 * assert.equal(escapeLabelValue("a\\b"), "a\\\\b");
 * ```
 */
export function escapeLabelValue(value: string): string {
  return value.replace(/[\\"\n]/g, (c) => c === "\n" ? "\\n" : "\\" + c);
}

/**
 * A sample's value as the format writes it: `NaN`, `+Inf`, `-Inf`, else JavaScript's number text,
 * which parses as a Go float.
 *
 * @param value The value.
 * @returns Its text.
 *
 * @example Usage
 * ```ts
 * import { formatValue } from "./prometheus.ts";
 * import assert from "node:assert/strict";
 *
 * assert.equal(formatValue(-Infinity), "-Inf");
 * assert.equal(formatValue(2.5), "2.5");
 * ```
 */
export function formatValue(value: number): string {
  if (Number.isNaN(value)) return "NaN";
  if (value === Infinity) return "+Inf";
  if (value === -Infinity) return "-Inf";
  return String(value); // JS number text ("1e+21", "2.1") parses as a Go float
}

/**
 * A label set, `{k="v",...}`, or nothing for no labels.
 *
 * @param pairs The labels, in order.
 * @returns Their text, values escaped.
 *
 * @example Usage
 * ```ts
 * import { labels } from "./prometheus.ts";
 * import assert from "node:assert/strict";
 *
 * assert.equal(labels({ type: "weather", field: "wind" }), '{type="weather",field="wind"}');
 * assert.equal(labels({}), "");
 * ```
 */
export function labels(pairs: Record<string, string>): string {
  const parts = Object.entries(pairs).map(([k, v]) => `${k}="${escapeLabelValue(v)}"`);
  return parts.length === 0 ? "" : `{${parts.join(",")}}`;
}

/**
 * The `# HELP` and `# TYPE` lines that open a metric family.
 *
 * @param name The family's name.
 * @param type Its type.
 * @param help What it measures.
 * @returns The two lines.
 *
 * @example Usage
 * ```ts
 * import { family } from "./prometheus.ts";
 * import assert from "node:assert/strict";
 *
 * assert.equal(family("up", "gauge", "1 while up."), "# HELP up 1 while up.\n# TYPE up gauge\n");
 * ```
 */
export function family(
  name: string,
  type: "counter" | "gauge" | "histogram",
  help: string,
): string {
  return `# HELP ${name} ${help}\n# TYPE ${name} ${type}\n`;
}

/**
 * One sample line.
 *
 * @param name The series name.
 * @param value Its value.
 * @param pairs Its labels.
 * @returns The line, ending in a newline.
 *
 * @example Usage
 * ```ts
 * import { sample } from "./prometheus.ts";
 * import assert from "node:assert/strict";
 *
 * assert.equal(sample("up", 1), "up 1\n");
 * ```
 */
export function sample(name: string, value: number, pairs: Record<string, string> = {}): string {
  return `${name}${labels(pairs)} ${formatValue(value)}\n`;
}

/**
 * A cumulative histogram with fixed upper bounds.
 *
 * @example Usage
 * ```ts
 * import { Histogram } from "./prometheus.ts";
 * import assert from "node:assert/strict";
 *
 * const h = new Histogram([0.001, 0.01, 0.1]);
 * h.observe(0.004);
 * assert.deepEqual(h.counts, [0, 1, 0]);
 * ```
 */
export class Histogram {
  /** Upper bounds in seconds, ascending. */
  readonly bounds: readonly number[];
  /** Count of observations at or below each bound (non-cumulative per bucket). */
  readonly counts: number[];
  /** Sum of all observations. */
  sum = 0;
  /** Number of observations. */
  count = 0;
  /**
   * Creates an empty histogram.
   *
   * @param bounds Upper bounds, ascending.
   */
  constructor(bounds: readonly number[]) {
    this.bounds = bounds;
    this.counts = bounds.map(() => 0);
  }
  /**
   * Counts one observation.
   *
   * @param value One observation.
   */
  observe(value: number): void {
    this.sum += value;
    this.count++;
    const i = this.bounds.findIndex((b) => value <= b);
    if (i >= 0) this.counts[i]!++;
  }
}
