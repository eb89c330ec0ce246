/**
 * The InfluxDB write API (docs/http-api.md): `POST /write` (1.x) and `POST /api/v2/write`
 * (2.x) take line protocol, plain or gzip, and store each valid line as an event in one commit
 * group, the same path as `POST /events`; `GET /ping` answers as InfluxDB's. The answers are
 * InfluxDB's: 204 when every line is stored, else 400 `{"error": "partial write: ..."}` naming
 * the refused lines, every one of which is also a line of the service log. The guards
 * (`guards.ts`) take the token in the forms InfluxDB clients send it.
 *
 * @example Usage
 * ```ts
 * import { influxPrecision } from "./influx_routes.ts";
 * import assert from "node:assert/strict";
 *
 * assert.equal(influxPrecision(new URL("http://localhost/write?db=x&precision=u"), "v1"), "us");
 * assert.equal(influxPrecision(new URL("http://localhost/api/v2/write?bucket=b"), "v2"), "ns");
 * ```
 *
 * @module
 */

import type { TelemetryService } from "../core/service.ts";
import type { EventCommand } from "../core/commands.ts";
import { formatTimestamp } from "../wire/event.ts";
import { BoundExceededError, gunzipAtMost } from "../wire/bounded_read.ts";
import { type LinePoint, type LinePrecision, parseLineProtocol } from "../wire/line_protocol.ts";
import { type BodyDeadlines, readBodyBytes } from "./body.ts";
import { HttpError, problemDetail, withDetail } from "./problems.ts";
import { type Route, route } from "./router.ts";
import { VERSION } from "./version.ts";
import { idempotencyKeyOf, IDEMPOTENT_REPLAYED_HEADER, requestHash } from "./idempotent.ts";
import { closeAfterAnswer, closesAfterAnswer } from "./conn_guard.ts";
import type { ServiceMetrics } from "./metrics.ts";

/** What the InfluxDB routes need besides the service. */
export interface InfluxRouteDeps {
  /** The largest body accepted, in bytes, before and after gzip (`--max-body`). */
  maxBody: number;
  /** The deadline of every body read (`--body-timeout`). */
  bodies: BodyDeadlines;
  /** Counts the lines stored and refused (`telemetry_line_protocol_lines_total`). */
  metrics: ServiceMetrics;
}

/**
 * The `X-Influxdb-Version` header of every answer of these routes: the InfluxDB API they follow
 * (1.8), then this service and its version, as a semver pre-release.
 *
 * @example Usage
 * ```ts
 * import { INFLUXDB_VERSION } from "./influx_routes.ts";
 * import assert from "node:assert/strict";
 *
 * assert.match(INFLUXDB_VERSION, /^1\.8\.0-obs-telemetry\.\d+\.\d+\.\d+/);
 * ```
 */
export const INFLUXDB_VERSION: string = `1.8.0-obs-telemetry.${VERSION}`;

/**
 * The most lines (points and refused lines together) one write may hold: line protocol packs about
 * five times as many events into `--max-body` as JSON does, and each costs about a kilobyte and a
 * half of memory until its group is written; more is refused whole, 413, before anything is
 * stored. InfluxDB's clients send far fewer (Telegraf 1,000, the `influx` shell's `-import` 5,000).
 *
 * @example Usage
 * ```ts
 * import { MAX_WRITE_LINES } from "./influx_routes.ts";
 * import assert from "node:assert/strict";
 *
 * assert.equal(MAX_WRITE_LINES, 50_000);
 * ```
 */
export const MAX_WRITE_LINES = 50_000;

/** The refused lines an answer names; the rest are counted. */
const NAMED_REFUSALS = 20;
/** The refused lines logged one by one; the rest are one log line with their count. */
const LOGGED_REFUSALS = 1000;

const VERSION_HEADER = "x-influxdb-version";
const JSON_TYPE = "application/json; charset=utf-8";

/**
 * The routes: `POST /write`, `POST /api/v2/write`, `GET /ping` (HEAD too).
 *
 * @param service The service the lines are stored by.
 * @param deps The body limits.
 * @returns The rows of the route table.
 *
 * @example Usage
 * ```ts ignore
 * const routes = [...influxRoutes(service, { maxBody, bodies, metrics })];
 * ```
 */
export function influxRoutes(service: TelemetryService, deps: InfluxRouteDeps): Route[] {
  return [
    route("/write", { POST: ({ req, url }) => write(service, req, url, "v1", deps) }, influxError),
    route(
      "/api/v2/write",
      { POST: ({ req, url }) => write(service, req, url, "v2", deps) },
      influxError,
    ),
    route("/ping", { GET: ({ url }) => ping(url) }, influxError),
  ];
}

/**
 * The `precision` query parameter of a write: 1.x takes `n`/`ns`, `u`, `ms`, `s`, `m`, `h`; 2.x
 * takes `ns`, `us`, `ms`, `s`. Nanoseconds when absent.
 *
 * @param url The request URL.
 * @param api Which API the route is.
 * @returns The precision.
 * @throws {HttpError} 400 naming the precisions the route takes.
 *
 * @example Usage
 * ```ts
 * import { influxPrecision } from "./influx_routes.ts";
 * import assert from "node:assert/strict";
 *
 * assert.equal(influxPrecision(new URL("http://localhost/write?precision=s"), "v1"), "s");
 * assert.throws(() => influxPrecision(new URL("http://localhost/api/v2/write?precision=h"), "v2"), /ns, us, ms or s/);
 * ```
 */
export function influxPrecision(url: URL, api: "v1" | "v2"): LinePrecision {
  const given = url.searchParams.get("precision");
  if (given === null || given === "") return "ns";
  if (api === "v1") {
    switch (given) {
      case "n":
      case "ns":
        return "ns";
      case "u":
        return "us";
      case "ms":
      case "s":
      case "m":
      case "h":
        return given;
    }
  } else if (given === "ns" || given === "us" || given === "ms" || given === "s") return given;
  const allowed = api === "v1" ? "ns (or n), u, ms, s, m or h" : "ns, us, ms or s";
  throw new HttpError(
    400,
    `invalid precision ${
      JSON.stringify(given.slice(0, 40))
    }: ${url.pathname} takes precision=${allowed}, the unit of the timestamps (nanoseconds when absent).`,
  );
}

/** `POST /write`, `POST /api/v2/write`: the lines stored, the refused ones answered. */
async function write(
  service: TelemetryService,
  req: Request,
  url: URL,
  api: "v1" | "v2",
  deps: InfluxRouteDeps,
): Promise<Response> {
  const precision = influxPrecision(url, api);
  const key = idempotencyKeyOf(req);
  const body = await readLineProtocol(req, deps);
  const batch = new LineBatch();
  parseLineProtocol(body, batch, { precision });
  let replayed = false;
  try {
    if (batch.commands.length > 0) {
      if (key === undefined) await commitLines(service, batch.commands);
      else {
        // The answer of a retry is the first one's: the same body refuses the same lines.
        const hash = requestHash(`${url.pathname} precision=${precision}`, false, body);
        ({ replayed } = await service.submitOnce({ key, hash }, () => batch.commands));
      }
    }
  } catch (err) {
    deps.metrics.countLines(0, batch.refused);
    throw err;
  }
  // A replay stored nothing: its lines were counted the first time.
  if (!replayed) deps.metrics.countLines(batch.commands.length, batch.refused);
  return batch.answer(replayed);
}

/**
 * Hands the events of a write to the service, as `POST /events` does: one commit group, one
 * write per file, one fsync (docs/storage.md). The one place a write meets the commit path.
 */
async function commitLines(service: TelemetryService, commands: EventCommand[]): Promise<void> {
  await service.submit(commands);
}

/** The body, inflated when it is gzip, within `--max-body` both before and after. */
async function readLineProtocol(req: Request, deps: InfluxRouteDeps): Promise<Uint8Array> {
  const encoding = (req.headers.get("content-encoding") ?? "").trim().toLowerCase();
  if (encoding !== "" && encoding !== "identity" && encoding !== "gzip") {
    throw new HttpError(
      415,
      `Content-Encoding ${
        JSON.stringify(encoding.slice(0, 40))
      } is not accepted; send line protocol as it is, or compressed with Content-Encoding: gzip.`,
    );
  }
  const bytes = await readBodyBytes(req, deps.maxBody, deps.bodies);
  if (encoding !== "gzip" || bytes.length === 0) return bytes;
  try {
    return await gunzipAtMost(bytes, deps.maxBody);
  } catch (err) {
    if (err instanceof BoundExceededError) {
      throw new HttpError(
        413,
        `The request body inflates to more than ${deps.maxBody} bytes; split it into smaller batches (or have the operator raise --max-body).`,
      );
    }
    throw new HttpError(
      400,
      `The body is sent with Content-Encoding: gzip but is not valid gzip (${
        err instanceof Error ? err.message : String(err)
      }); send it compressed whole as one gzip member, or without Content-Encoding.`,
    );
  }
}

/** The events of a write and the lines refused, as the parser hands them over. */
class LineBatch {
  commands: EventCommand[] = [];
  refused = 0;
  /** The refusals as the log and the answer say them, the first {@linkcode LOGGED_REFUSALS}. */
  #said: string[] = [];

  point(point: LinePoint): void {
    this.#count();
    this.commands.push(this.#command(point));
  }

  /** The tags and the second of the line before, and what they were written as. */
  #tags: LinePoint["tags"];
  #metaJson = "{}";
  #second = NaN;
  #secondText = "";

  /**
   * The event of a line: `type` = measurement, `data` = fields, `meta.tags` = tags. The lines of a
   * body mostly share their tags (one object, `LinePoint.tags`) and their second: each is written
   * once while they do.
   */
  #command(point: LinePoint): EventCommand {
    if (point.tags !== this.#tags) {
      this.#tags = point.tags;
      this.#metaJson = point.tags === undefined ? "{}" : `{"tags":${JSON.stringify(point.tags)}}`;
    }
    return {
      type: point.measurement,
      data: point.fields,
      dataJson: JSON.stringify(point.fields),
      metaJson: this.#metaJson,
      callerRunId: undefined,
      ts: point.timeMs === undefined ? undefined : this.#timestamp(point.timeMs),
      storePermanently: true,
      makeCurrent: true,
      item: undefined,
    };
  }

  /** `formatTimestamp(ms)`, its second's text kept for the next line in the same second. */
  #timestamp(ms: number): string {
    const second = Math.floor(ms / 1000);
    if (second !== this.#second) {
      const text = formatTimestamp(second * 1000); // 2026-12-07T08:00:00.000Z
      if (!text.endsWith(".000Z") || text.length !== 24) return formatTimestamp(ms);
      this.#second = second;
      this.#secondText = text.slice(0, 20);
    }
    const below = ms - second * 1000;
    return `${this.#secondText}${below < 10 ? "00" : below < 100 ? "0" : ""}${below}Z`;
  }

  refuse(refusal: { line: number; text: string; reason: string }): void {
    this.#count();
    this.refused++;
    if (this.#said.length < LOGGED_REFUSALS) {
      this.#said.push(`line ${refusal.line}: unable to parse '${refusal.text}': ${refusal.reason}`);
    }
  }

  /** Refuses the whole write once it holds more than {@linkcode MAX_WRITE_LINES} lines. */
  #count(): void {
    if (this.commands.length + this.refused < MAX_WRITE_LINES) return;
    throw new HttpError(
      413,
      `The write holds more than ${MAX_WRITE_LINES} lines; nothing of it was stored. Send at most ${MAX_WRITE_LINES} lines a request (Telegraf's metric_batch_size, the batch_size of Python's write_points).`,
    );
  }

  /** 204, or InfluxDB's 400 partial write naming the refused lines. */
  answer(replayed: boolean): Response {
    const headers: Record<string, string> = { [VERSION_HEADER]: INFLUXDB_VERSION };
    if (replayed) headers[IDEMPOTENT_REPLAYED_HEADER.toLowerCase()] = "true";
    if (this.refused === 0) return new Response(null, { status: 204, headers });
    const named = this.#said.slice(0, NAMED_REFUSALS);
    const more = this.refused - named.length;
    const stored = this.commands.length;
    const message = `partial write: ${named.join("; ")}${
      more > 0 ? `; and ${more} more ${more === 1 ? "line" : "lines"} refused` : ""
    } (${stored} ${
      stored === 1 ? "line" : "lines"
    } stored; fix the refused lines and send only them again) dropped=${this.refused}`;
    const log = this.#said;
    if (this.refused > log.length) {
      log.push(`and ${this.refused - log.length} more lines refused, not logged one by one`);
    }
    const res = new Response(JSON.stringify({ error: message }), {
      status: 400,
      headers: { ...headers, "content-type": JSON_TYPE },
    });
    return withDetail(res, message, log);
  }
}

/** `GET /ping`: 204 with the version; `?verbose=true` 200 with it in JSON, as InfluxDB 1.x. */
function ping(url: URL): Response {
  const headers = { [VERSION_HEADER]: INFLUXDB_VERSION, "x-influxdb-build": "OSS" };
  if (url.searchParams.get("verbose") === "true") {
    return new Response(JSON.stringify({ version: INFLUXDB_VERSION }), {
      status: 200,
      headers: { ...headers, "content-type": JSON_TYPE },
    });
  }
  return new Response(null, { status: 204, headers });
}

/**
 * An error of these routes as InfluxDB answers it, `{"error": "<detail>"}`, keeping the status
 * and the headers (`WWW-Authenticate`, `Allow`) of the problem+json answer it replaces.
 */
function influxError(res: Response): Response {
  const detail = problemDetail(res);
  const type = res.headers.get("content-type") ?? "";
  if (detail === undefined || !type.startsWith("application/problem+json")) return res;
  void res.body?.cancel().catch(() => {});
  const headers = new Headers(res.headers);
  headers.set("content-type", JSON_TYPE);
  headers.set(VERSION_HEADER, INFLUXDB_VERSION);
  const out = withDetail(
    new Response(JSON.stringify({ error: detail }), { status: res.status, headers }),
    detail,
  );
  return closesAfterAnswer(res) ? closeAfterAnswer(out) : out;
}
