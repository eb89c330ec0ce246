/**
 * `GET /metrics` (CONTRACT 2.7): the service's counters and the latest numeric snapshot values
 * in the Prometheus text exposition format 0.0.4.
 *
 * @example Usage
 * ```ts
 * import { escapeLabelValue } from "./metrics.ts";
 * import assert from "node:assert/strict";
 *
 * assert.equal(escapeLabelValue('say "hi"\n'), 'say \\"hi\\"\\n');
 * ```
 *
 * @module
 */

import type { TelemetryService, WriteReport } from "./service.ts";

/** The `Content-Type` of the Prometheus text format 0.0.4. */
export const METRICS_CONTENT_TYPE = "text/plain; version=0.0.4; charset=utf-8";

/**
 * Escapes a label value for the Prometheus text format: backslash, double quote and newline.
 *
 * @param value The raw label value.
 * @returns The text to put between the quotes.
 *
 * @example Usage
 * ```ts
 * import { escapeLabelValue } from "./metrics.ts";
 * import assert from "node:assert/strict";
 *
 * assert.equal(escapeLabelValue("a\\b"), "a\\\\b");
 * ```
 */
export function escapeLabelValue(value: string): string {
  return value.replace(/[\\"\n]/g, (c) => c === "\n" ? "\\n" : "\\" + c);
}

/** The live-stream counters `/metrics` reports. */
export interface StreamCounts {
  /** Connected `GET /stream` clients. */
  readonly clients: number;
  /** Clients dropped because they fell behind. */
  readonly dropped: number;
}

/** Options of {@linkcode ServiceMetrics.render}. */
export interface RenderMetricsOptions {
  /**
   * When given (the server passes its stream hub), adds `telemetry_stream_clients` and
   * `telemetry_stream_dropped_total`.
   */
  streams?: StreamCounts;
}

function formatValue(value: number): string {
  if (Number.isNaN(value)) return "NaN";
  if (value === Infinity) return "+Inf";
  if (value === -Infinity) return "-Inf";
  return String(value); // JS number text ("1e+21", "2.1") parses as a Go float
}

function labels(pairs: Record<string, string>): string {
  const parts = Object.entries(pairs).map(([k, v]) => `${k}="${escapeLabelValue(v)}"`);
  return parts.length === 0 ? "" : `{${parts.join(",")}}`;
}

class Exposition {
  text = "";
  family(name: string, type: "counter" | "gauge" | "histogram", help: string): void {
    this.text += `# HELP ${name} ${help}\n# TYPE ${name} ${type}\n`;
  }
  sample(name: string, value: number, pairs: Record<string, string> = {}): void {
    this.text += `${name}${labels(pairs)} ${formatValue(value)}\n`;
  }
}

/** A cumulative histogram with fixed upper bounds. */
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

/**
 * The service's counters, kept by listening to its group commits from the moment it is created
 * (`createHandler` creates one per service), and rendered for `GET /metrics`.
 *
 * @example Usage
 * ```ts ignore
 * import { ServiceMetrics, TelemetryService } from "@obs-utils/telemetry/server";
 *
 * await using service = await TelemetryService.open({ siteDir: "./telemetry" });
 * const metrics = new ServiceMetrics(service);
 * await service.record([{ type: "weather", data: { wind_mps: 2.1 } }]);
 * console.log(metrics.render());
 * ```
 */
export class ServiceMetrics {
  /** Events accepted per `stream` and `type` (key `"<stream>\u0000<type>"`). */
  readonly eventsTotal: Map<string, number> = new Map();
  /** Failed group writes. */
  writeErrors = 0;
  /** Bytes appended to NDJSON files. */
  bytesWritten = 0;
  /** Group write durations in seconds. */
  readonly writeSeconds: Histogram = new Histogram([
    0.0005,
    0.001,
    0.0025,
    0.005,
    0.01,
    0.025,
    0.05,
    0.1,
    0.25,
    1,
  ]);
  #service: TelemetryService;

  /**
   * Starts counting the service's commits.
   *
   * @param service The service to count.
   */
  constructor(service: TelemetryService) {
    this.#service = service;
    service.watchWrites((report) => this.#count(report));
  }

  #count(report: WriteReport): void {
    if (!report.ok) {
      this.writeErrors++;
      return;
    }
    if (report.bytes > 0) {
      this.writeSeconds.observe(report.seconds);
      this.bytesWritten += report.bytes;
    }
    for (const [stream, type] of report.copies) {
      const key = `${stream}\u0000${type}`;
      this.eventsTotal.set(key, (this.eventsTotal.get(key) ?? 0) + 1);
    }
  }

  /**
   * Renders the metrics as Prometheus text format 0.0.4: events per stream and type, write
   * errors, bytes written, the write-duration histogram, whether a run is active, and
   * `telemetry_value{type,field}` for every top-level finite number or boolean (as 1/0) in the
   * latest `data` of each type.
   *
   * @param options Optionally the stream hub, for client gauges.
   * @returns The exposition text, ending in a newline; serve it as
   *   {@linkcode METRICS_CONTENT_TYPE}.
   */
  render(options: RenderMetricsOptions = {}): string {
    return renderMetrics(this, this.#service, options);
  }

  /**
   * The `GET /metrics` response.
   *
   * @param options Optionally the stream hub, for client gauges.
   * @returns A `200` response in the Prometheus text format 0.0.4, `cache-control: no-store`.
   */
  response(options: RenderMetricsOptions = {}): Response {
    return new Response(this.render(options), {
      headers: {
        "content-type": METRICS_CONTENT_TYPE,
        "cache-control": "no-store",
        "x-content-type-options": "nosniff",
      },
    });
  }
}

function renderMetrics(
  stats: ServiceMetrics,
  service: TelemetryService,
  options: RenderMetricsOptions,
): string {
  const out = new Exposition();

  out.family("telemetry_events_total", "counter", "Events accepted, per stream copy and type.");
  const keys = [...stats.eventsTotal.keys()].sort();
  for (const key of keys) {
    const cut = key.indexOf("\u0000");
    out.sample("telemetry_events_total", stats.eventsTotal.get(key)!, {
      stream: key.slice(0, cut),
      type: key.slice(cut + 1),
    });
  }

  out.family("telemetry_write_errors_total", "counter", "Batch writes that failed.");
  out.sample("telemetry_write_errors_total", stats.writeErrors);

  out.family("telemetry_bytes_written_total", "counter", "Bytes appended to NDJSON files.");
  out.sample("telemetry_bytes_written_total", stats.bytesWritten);

  const hist = stats.writeSeconds;
  out.family("telemetry_write_seconds", "histogram", "Duration of one batch write in seconds.");
  let cumulative = 0;
  for (let i = 0; i < hist.bounds.length; i++) {
    cumulative += hist.counts[i] ?? 0;
    out.sample("telemetry_write_seconds_bucket", cumulative, { le: formatValue(hist.bounds[i]!) });
  }
  out.sample("telemetry_write_seconds_bucket", hist.count, { le: "+Inf" });
  out.sample("telemetry_write_seconds_sum", hist.sum);
  out.sample("telemetry_write_seconds_count", hist.count);

  out.family("telemetry_run_active", "gauge", "1 while a run is active, else 0.");
  out.sample("telemetry_run_active", service.run ? 1 : 0);

  if (options.streams) {
    out.family("telemetry_stream_clients", "gauge", "Open GET /stream connections.");
    out.sample("telemetry_stream_clients", options.streams.clients);
    out.family(
      "telemetry_stream_dropped_total",
      "counter",
      "GET /stream clients dropped for falling too far behind.",
    );
    out.sample("telemetry_stream_dropped_total", options.streams.dropped);
  }

  out.family(
    "telemetry_value",
    "gauge",
    "Latest top-level numeric or boolean (1/0) data field of each event type.",
  );
  for (const [type, data] of service.currentData()) {
    for (const [field, value] of Object.entries(data)) {
      if (typeof value === "boolean") {
        out.sample("telemetry_value", value ? 1 : 0, { type, field });
      } else if (typeof value === "number" && Number.isFinite(value)) {
        out.sample("telemetry_value", value, { type, field });
      }
    }
  }
  return out.text;
}
