/**
 * `GET /metrics` (docs/http-api.md): the service's counters and the latest numeric snapshot values
 * in the Prometheus text exposition format 0.0.4 (written by `prometheus.ts`).
 *
 * @example Usage
 * ```ts ignore
 * import { ServiceMetrics } from "./metrics.ts";
 * import { TelemetryService } from "../core/service.ts";
 *
 * await using service = await TelemetryService.open({ siteDir: "./telemetry" });
 * const metrics = new ServiceMetrics(service);
 * console.log(metrics.render());
 * ```
 *
 * @module
 */

import type { JsonObject } from "../wire/event.ts";
import type { TelemetryService, WriteReport } from "../core/service.ts";
import { NO_TYPES, type TypesRegistry } from "../core/types_registry.ts";
import { judgeType, numericValue, TYPE_STATES, valueAt } from "../core/freshness.ts";
import { readTs } from "../wire/ndjson.ts";
import {
  escapeLabelValue,
  family,
  formatValue,
  Histogram,
  labels,
  METRICS_CONTENT_TYPE,
  sample,
} from "./prometheus.ts";

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
  /**
   * Free bytes on the site directory's file system: `telemetry_disk_free_bytes` (left out when
   * absent or null).
   */
  diskFreeBytes?: number | null;
}

/** Most `telemetry_value` series of one type: its first 100 numeric or boolean fields. */
export const DEFAULT_MAX_VALUE_FIELDS = 100;
/** Most `telemetry_value` series in one scrape. */
export const DEFAULT_MAX_VALUE_SERIES = 50_000;
/**
 * Most `telemetry_events_total` series of types that were not in the snapshot when their first
 * event was counted; later such types are counted under {@linkcode OTHER_TYPE}.
 */
export const DEFAULT_MAX_OTHER_EVENT_SERIES = 1_000;
/** The `type` label that counts the events of types beyond the series caps. */
export const OTHER_TYPE = "_other";

/** Options of {@linkcode ServiceMetrics}: the caps that keep a scrape bounded (docs/http-api.md). */
export interface ServiceMetricsOptions {
  /**
   * Most `telemetry_value` series per type (its first numeric or boolean fields, in order).
   * @default {100}
   */
  maxValueFields?: number;
  /**
   * Most `telemetry_value` series per scrape; the types that do not fit are left out whole.
   * @default {50000}
   */
  maxValueSeries?: number;
  /**
   * Most `telemetry_events_total` series for types not in the snapshot.
   * @default {1000}
   */
  maxOtherEventSeries?: number;
  /**
   * The types registry: its dotted and unit-string fields join `telemetry_value`, and its types
   * get `telemetry_type_state`.
   * @default {an empty registry}
   */
  types?: TypesRegistry;
  /**
   * The clock the type states are judged at, ms since the epoch.
   * @default {Date.now}
   */
  now?: () => number;
  /** Counters of `telemetry_notifications_total` (docs/safety.md#notifications); none: no family. */
  notifications?: () => NotificationCounts;
}

const encoder = new TextEncoder();

/** One `telemetry_events_total` series: its text up to the value, and its count. */
interface EventSeries {
  head: string;
  count: number;
  /** Its place in the order first seen, which puts it in run `index / SEGMENT_TYPES`. */
  index: number;
}

/** One type's `telemetry_value` lines. */
interface ValueBlock {
  text: string;
  /** The type's `telemetry_last_event_timestamp_seconds` line. */
  stamp: string;
  series: number;
  /** Numeric or boolean fields past the per-type cap. */
  omitted: number;
}

/** Types per run of `telemetry_value` lines kept between scrapes. */
const SEGMENT_TYPES = 256;

/** The `telemetry_value` lines of a run of consecutive types of the snapshot. */
interface Segment {
  types: string[];
  /** Each type's `data` when rendered: a new event of the type brings a new object. */
  data: JsonObject[];
  bytes: Uint8Array;
  /** The `telemetry_last_event_timestamp_seconds` lines of the same types. */
  stamps: Uint8Array;
  series: number;
  omitted: number;
}

function sameRun(segment: Segment, run: [string, JsonObject][]): boolean {
  if (segment.types.length !== run.length) return false;
  for (let i = 0; i < run.length; i++) {
    const [type, data] = run[i]!;
    if (segment.types[i] !== type || segment.data[i] !== data) return false;
  }
  return true;
}

/**
 * The service's counters, kept by listening to its group commits from the moment it is created
 * (`createHandler` creates one per service), and rendered for `GET /metrics`.
 *
 * Every part of a scrape is bounded (docs/http-api.md): `telemetry_events_total` has a series per
 * stream and type for types in the snapshot and for up to 1,000 other types, the rest being
 * counted under `type="_other"`; `telemetry_value` takes at most the first 100 numeric or boolean
 * fields of a type and 50,000 series in all, and `telemetry_value_omitted` counts what it left
 * out. Each type's `telemetry_value` lines are rendered once per new event of it, and the body
 * is sent in chunks, so a scrape of 10,000 types costs the loop little.
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
  /** Failed group writes. */
  writeErrors = 0;
  /** Bytes appended to NDJSON files. */
  bytesWritten = 0;
  /** Line-protocol lines stored (`POST /write`, `POST /api/v2/write`). */
  linesStored = 0;
  /** Line-protocol lines refused. */
  linesRefused = 0;
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
  #maxValueFields: number;
  #maxValueSeries: number;
  #maxOtherEventSeries: number;
  #types: TypesRegistry;
  #now: () => number;
  #notifications: (() => NotificationCounts) | undefined;
  /** Events per `"<stream>\u0000<type>"`, in the order first seen. */
  #events = new Map<string, EventSeries>();
  /** The same series by stream, then type, for the per-event count (no key string built). */
  #byStream = new Map<string, Map<string, EventSeries>>();
  /** The series in the order first seen. */
  #eventList: EventSeries[] = [];
  /** Each run's `telemetry_events_total` lines as last rendered; `undefined` once a count moved. */
  #eventRuns: (Uint8Array | undefined)[] = [];
  /** How many of those are for types that were not in the snapshot. */
  #otherSeries = 0;
  /** The `telemetry_value` lines of the snapshot's types, in runs of consecutive types. */
  #segments: Segment[] = [];
  /** Answers per route and code: `telemetry_http_responses_total` (docs/http-api.md). */
  #responses = new Map<string, Map<number, number>>();

  /**
   * Starts counting the service's commits.
   *
   * @param service The service to count.
   * @param options The caps on series.
   */
  constructor(service: TelemetryService, options: ServiceMetricsOptions = {}) {
    this.#service = service;
    this.#maxValueFields = options.maxValueFields ?? DEFAULT_MAX_VALUE_FIELDS;
    this.#maxValueSeries = options.maxValueSeries ?? DEFAULT_MAX_VALUE_SERIES;
    this.#maxOtherEventSeries = options.maxOtherEventSeries ?? DEFAULT_MAX_OTHER_EVENT_SERIES;
    this.#types = options.types ?? NO_TYPES;
    this.#now = options.now ?? Date.now;
    this.#notifications = options.notifications;
    service.watchWrites((report) => this.#count(report));
  }

  /**
   * Events accepted per `stream` and `type`, keyed `"<stream>\u0000<type>"`, as
   * `telemetry_events_total` reports them (types beyond the caps under `"_other"`).
   */
  get eventsTotal(): ReadonlyMap<string, number> {
    return new Map([...this.#events].map(([key, series]) => [key, series.count]));
  }

  /**
   * Counts one HTTP answer for `telemetry_http_responses_total{route,code}` (docs/http-api.md).
   *
   * @param route The route pattern, such as `/current/{type}`, or `other` for an unknown path:
   *   never the raw path, so the label set stays bounded.
   * @param code The status code answered.
   */
  countResponse(route: string, code: number): void {
    let codes = this.#responses.get(route);
    if (codes === undefined) this.#responses.set(route, codes = new Map());
    codes.set(code, (codes.get(code) ?? 0) + 1);
  }

  /**
   * Counts the lines of one line-protocol write for `telemetry_line_protocol_lines_total`
   * (docs/http-api.md#line-protocol).
   *
   * @param stored The lines stored.
   * @param refused The lines refused.
   */
  countLines(stored: number, refused: number): void {
    this.linesStored += stored;
    this.linesRefused += refused;
  }

  /** Answers counted so far per `"<route>\u0000<code>"`, as `telemetry_http_responses_total` reports them. */
  get responsesTotal(): ReadonlyMap<string, number> {
    const out = new Map<string, number>();
    for (const [route, codes] of this.#responses) {
      for (const [code, n] of codes) out.set(`${route}\u0000${code}`, n);
    }
    return out;
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
      let types = this.#byStream.get(stream);
      if (types === undefined) this.#byStream.set(stream, types = new Map());
      const series = types.get(type) ?? this.#newSeries(stream, type, types);
      series.count++;
      this.#eventRuns[(series.index / SEGMENT_TYPES) | 0] = undefined;
    }
  }

  /**
   * A series for a type seen for the first time, or the `_other` one past the cap. A type of its
   * own is remembered in `types`; one counted under `_other` is looked up again next time, as it
   * may become current.
   */
  #newSeries(stream: string, type: string, types: Map<string, EventSeries>): EventSeries {
    const current = this.#service.currentLine(type) !== undefined;
    if (!current && this.#otherSeries >= this.#maxOtherEventSeries) {
      return this.#seriesOf(stream, OTHER_TYPE, current);
    }
    const series = this.#seriesOf(stream, type, current);
    types.set(type, series);
    return series;
  }

  /** The series of `stream` and `type`, made on first use. */
  #seriesOf(stream: string, type: string, current: boolean): EventSeries {
    const key = `${stream}\u0000${type}`;
    let series = this.#events.get(key);
    if (!series) {
      series = {
        head: `telemetry_events_total${labels({ stream, type })} `,
        count: 0,
        index: this.#eventList.length,
      };
      this.#events.set(key, series);
      this.#eventList.push(series);
      if (!current && type !== OTHER_TYPE) this.#otherSeries++;
    }
    return series;
  }

  /**
   * Renders the metrics as Prometheus text format 0.0.4: events per stream and type, write
   * errors, bytes written, the write-duration histogram, whether a run is active, and
   * `telemetry_value{type,field}` for the top-level finite numbers and booleans (as 1/0) in the
   * latest `data` of each type, within the caps.
   *
   * @param options Optionally the stream hub, for client gauges.
   * @returns The exposition text, ending in a newline; serve it as
   *   {@linkcode METRICS_CONTENT_TYPE}.
   */
  render(options: RenderMetricsOptions = {}): string {
    const decoder = new TextDecoder();
    let text = "";
    for (const chunk of this.#chunks(options)) text += decoder.decode(chunk, { stream: true });
    return text + decoder.decode();
  }

  /**
   * The `GET /metrics` response, its body produced in chunks as it is read.
   *
   * @param options Optionally the stream hub, for client gauges.
   * @returns A `200` response in the Prometheus text format 0.0.4, `cache-control: no-store`.
   */
  response(options: RenderMetricsOptions = {}): Response {
    const chunks = this.#chunks(options);
    const body = new ReadableStream<Uint8Array>({
      pull(controller) {
        const next = chunks.next();
        if (next.done) controller.close();
        else controller.enqueue(next.value);
      },
      cancel() {
        chunks.return(undefined);
      },
    }, { highWaterMark: 0 });
    return new Response(body, {
      headers: {
        "content-type": METRICS_CONTENT_TYPE,
        "cache-control": "no-store",
        "x-content-type-options": "nosniff",
      },
    });
  }

  /** The exposition in chunks of about 64 KiB, each made when asked for. */
  *#chunks(options: RenderMetricsOptions): Generator<Uint8Array> {
    const head = family(
      "telemetry_events_total",
      "counter",
      'Events accepted, per stream copy and type (types beyond the caps as type="_other").',
    );
    yield encoder.encode(head);
    // In runs kept while none of their counts moved, as the values below.
    const list = this.#eventList;
    for (let run = 0; run * SEGMENT_TYPES < list.length; run++) {
      let bytes = this.#eventRuns[run];
      if (!bytes) {
        let text = "";
        const end = Math.min(list.length, (run + 1) * SEGMENT_TYPES);
        for (let i = run * SEGMENT_TYPES; i < end; i++) {
          text += list[i]!.head + list[i]!.count + "\n";
        }
        bytes = this.#eventRuns[run] = encoder.encode(text);
      }
      yield bytes;
    }
    yield encoder.encode(this.#counters(options));
    // telemetry_value, in runs of SEGMENT_TYPES types whose bytes are kept while none of their
    // types changed: a scrape re-renders only what changed since the last one.
    const cap = { series: 0, omitted: 0, stamps: [] as Uint8Array[] };
    let index = 0;
    let run: [string, JsonObject][] = [];
    for (const entry of this.#service.currentData()) {
      run.push(entry);
      if (run.length === SEGMENT_TYPES) {
        const bytes = this.#segment(index++, run, cap);
        if (bytes.byteLength > 0) yield bytes;
        run = [];
      }
    }
    if (run.length > 0) {
      const bytes = this.#segment(index++, run, cap);
      if (bytes.byteLength > 0) yield bytes;
    }
    this.#segments.length = Math.min(this.#segments.length, index);
    const omitted = cap.omitted;
    yield encoder.encode(
      family(
        "telemetry_value_omitted",
        "gauge",
        `Numeric or boolean fields left out of telemetry_value by its caps (${this.#maxValueFields} per type, ${this.#maxValueSeries} in all).`,
      ) + sample("telemetry_value_omitted", omitted),
    );
    yield encoder.encode(family(
      "telemetry_last_event_timestamp_seconds",
      "gauge",
      "The ts (measurement time) of the latest event of each type, in seconds since the epoch.",
    ));
    for (const stamps of cap.stamps) if (stamps.byteLength > 0) yield stamps;
    yield encoder.encode(this.#freshness(options));
  }

  /**
   * `telemetry_type_state` for every registered type (docs/types.md) and
   * `telemetry_disk_free_bytes` (docs/history.md).
   */
  #freshness(options: RenderMetricsOptions): string {
    let out = "";
    if (this.#types.size > 0) {
      out += family(
        "telemetry_type_state",
        "gauge",
        "1 for the current state (ok, warn, alarm, stale) of each registered type, 0 for the others.",
      );
      const now = this.#now();
      for (const [type, spec] of this.#types) {
        const line = this.#service.currentLine(type);
        const latest = line === undefined
          ? undefined
          : JSON.parse(line) as { ts: string; data: JsonObject };
        const { state } = judgeType(spec, latest, now);
        for (const s of TYPE_STATES) {
          out += sample("telemetry_type_state", s === state ? 1 : 0, { type, state: s });
        }
      }
    }
    // The safety verdict of each profile (docs/safety.md#profiles), judged at the scrape like
    // /safety: the site's is profile="site", so one selector takes every profile.
    out += family(
      "telemetry_safe",
      "gauge",
      "1 when the profile is safe (GET /safety?profile=P; site: the site's verdict), else 0.",
    );
    for (const profile of this.#service.safetyProfiles) {
      out += sample("telemetry_safe", this.#service.safety(profile).safe ? 1 : 0, { profile });
    }
    out += family(
      "telemetry_safety_waivers",
      "gauge",
      "Waivers in force: critical types not judged until their waiver ends (GET /safety).",
    ) + sample("telemetry_safety_waivers", this.#service.safetyWaivers) +
      family(
        "telemetry_safety_changes_total",
        "counter",
        "Changes of the safety verdict since the service started.",
      ) + sample("telemetry_safety_changes_total", this.#service.safetyChanges);
    if (typeof options.diskFreeBytes === "number") {
      out += family(
        "telemetry_disk_free_bytes",
        "gauge",
        "Bytes available on the file system of the site directory.",
      ) + sample("telemetry_disk_free_bytes", options.diskFreeBytes);
    }
    return out;
  }

  /** The small families between the event counts and the values. */
  #counters(options: RenderMetricsOptions): string {
    let out = family("telemetry_write_errors_total", "counter", "Batch writes that failed.") +
      sample("telemetry_write_errors_total", this.writeErrors) +
      family("telemetry_bytes_written_total", "counter", "Bytes appended to NDJSON files.") +
      sample("telemetry_bytes_written_total", this.bytesWritten);

    const hist = this.writeSeconds;
    out += family(
      "telemetry_write_seconds",
      "histogram",
      "Duration of one batch write in seconds.",
    );
    let cumulative = 0;
    for (let i = 0; i < hist.bounds.length; i++) {
      cumulative += hist.counts[i] ?? 0;
      out += sample("telemetry_write_seconds_bucket", cumulative, {
        le: formatValue(hist.bounds[i]!),
      });
    }
    out += sample("telemetry_write_seconds_bucket", hist.count, { le: "+Inf" }) +
      sample("telemetry_write_seconds_sum", hist.sum) +
      sample("telemetry_write_seconds_count", hist.count);

    out += family("telemetry_run_active", "gauge", "1 while a run is active, else 0.") +
      sample("telemetry_run_active", this.#service.run ? 1 : 0);

    out += family(
      "telemetry_http_responses_total",
      "counter",
      'HTTP answers per route pattern and status code (unknown paths as route="other").',
    );
    for (const [route, codes] of this.#responses) {
      for (const [code, count] of codes) {
        out += sample("telemetry_http_responses_total", count, { route, code: String(code) });
      }
    }

    out += family(
      "telemetry_line_protocol_lines_total",
      "counter",
      "Line-protocol lines received on POST /write and /api/v2/write, stored or refused.",
    ) + sample("telemetry_line_protocol_lines_total", this.linesStored, { result: "stored" }) +
      sample("telemetry_line_protocol_lines_total", this.linesRefused, { result: "refused" });

    if (options.streams) {
      out += family("telemetry_stream_clients", "gauge", "Open GET /stream connections.") +
        sample("telemetry_stream_clients", options.streams.clients) +
        family(
          "telemetry_stream_dropped_total",
          "counter",
          "GET /stream clients dropped for falling too far behind.",
        ) +
        sample("telemetry_stream_dropped_total", options.streams.dropped);
    }
    if (this.#notifications) out += notificationLines(this.#notifications());
    return out + family(
      "telemetry_value",
      "gauge",
      "Latest top-level numeric or boolean (1/0) data field of each event type.",
    );
  }

  /**
   * The `telemetry_value` bytes of one run of types: kept from the last scrape when the run holds
   * the same types with the same data, rendered again otherwise. Past the series cap, whole types
   * are left out and counted in `cap.omitted`.
   */
  #segment(
    index: number,
    run: [string, JsonObject][],
    cap: { series: number; omitted: number; stamps: Uint8Array[] },
  ): Uint8Array {
    let segment = this.#segments[index];
    if (!segment || !sameRun(segment, run)) {
      let text = "";
      let stamps = "";
      let series = 0;
      let omitted = 0;
      for (const [type, data] of run) {
        const block = this.#block(type, data);
        text += block.text;
        stamps += block.stamp;
        series += block.series;
        omitted += block.omitted;
      }
      segment = {
        types: run.map(([type]) => type),
        data: run.map(([, data]) => data),
        bytes: encoder.encode(text),
        stamps: encoder.encode(stamps),
        series,
        omitted,
      };
      this.#segments[index] = segment;
    }
    cap.omitted += segment.omitted;
    cap.stamps.push(segment.stamps);
    if (cap.series + segment.series <= this.#maxValueSeries) {
      cap.series += segment.series;
      return segment.bytes;
    }
    // The cap falls inside this run: its types one by one, as many whole ones as fit.
    let text = "";
    for (const [type, data] of run) {
      const block = this.#block(type, data);
      if (cap.series + block.series > this.#maxValueSeries) cap.omitted += block.series;
      else {
        cap.series += block.series;
        text += block.text;
      }
    }
    return encoder.encode(text);
  }

  /** One type's `telemetry_value` lines: its first numeric or boolean fields, up to the cap. */
  #block(type: string, data: JsonObject): ValueBlock {
    const head = `telemetry_value{type="${escapeLabelValue(type)}",field="`;
    let text = "";
    let series = 0;
    let omitted = 0;
    for (const field in data) {
      const value = data[field];
      let number: number;
      if (typeof value === "boolean") number = value ? 1 : 0;
      else if (typeof value === "number" && Number.isFinite(value)) number = value;
      else continue;
      if (series >= this.#maxValueFields) {
        omitted++;
        continue;
      }
      text += `${head}${escapeLabelValue(field)}"} ${formatValue(number)}\n`;
      series++;
    }
    // Registered fields the loop above cannot see: dotted paths and "<number> <unit>" strings.
    const fields = this.#types.get(type)?.fields;
    for (const path in fields) {
      if (typeof data[path] === "number" || typeof data[path] === "boolean") continue;
      const value = valueAt(data, path);
      const number = typeof value === "boolean"
        ? (value ? 1 : 0)
        : numericValue(value, fields[path]!.unit);
      if (number === undefined) continue;
      if (series >= this.#maxValueFields) {
        omitted++;
        continue;
      }
      text += `${head}${escapeLabelValue(path)}"} ${formatValue(number)}\n`;
      series++;
    }
    const line = this.#service.currentLine(type);
    const ms = Date.parse((line === undefined ? undefined : readTs(line)) ?? "");
    const stamp = Number.isNaN(ms)
      ? ""
      : sample("telemetry_last_event_timestamp_seconds", ms / 1000, { type });
    return { text, stamp, series, omitted };
  }
}

/** How many notifications were sent, how many tries failed, how many were given up. */
export interface NotificationCounts {
  /** Messages a receiver accepted (2xx). */
  readonly sent: number;
  /** Tries that failed (no answer in time, a refused connection, a non-2xx answer). */
  readonly failed: number;
  /** Messages given up: an hour without success, a full queue, or a shutdown. */
  readonly dropped: number;
}

/**
 * The `telemetry_notifications_total{result}` family of `/metrics` (docs/safety.md#notifications).
 *
 * @param counts The notifier's counters.
 * @returns The family's lines in the Prometheus text format.
 *
 * @example Usage
 * ```ts
 * import { notificationLines } from "./metrics.ts";
 * import assert from "node:assert/strict";
 *
 * assert.match(notificationLines({ sent: 2, failed: 0, dropped: 0 }), /result="sent"} 2/);
 * ```
 */
export function notificationLines(counts: NotificationCounts): string {
  let out = family(
    "telemetry_notifications_total",
    "counter",
    "Safety notifications sent, tries that failed, and messages dropped.",
  );
  for (const result of ["sent", "failed", "dropped"] as const) {
    out += sample("telemetry_notifications_total", counts[result], { result });
  }
  return out;
}
