/**
 * The API routes (docs/http-api.md, docs/operations.md, docs/types.md) as data: one row per path, one handler per method, and
 * the small handlers they call. `handler.ts` owns the guards and the dispatch, `shutdown.ts`
 * the shutdown state, `listener.ts` the listener; this module owns what each route answers.
 *
 * @module
 */

import { summaryOf, type TelemetryService } from "../core/service.ts";
import { HttpError } from "./problems.ts";
import { isLoopback } from "./guards.ts";
import { type BodyDeadlines, parseNdjsonLines, readJsonBody, readRequiredJson } from "./body.ts";
import { parseEvent, parseEvents, parseRunStart } from "../core/commands.ts";
import { decodedParam, type Route, route, type RouteContext } from "./router.ts";
import type { ServiceMetrics } from "./metrics.ts";
import type { StreamHub } from "./stream_hub.ts";
import type { TypesRegistry } from "../core/types_registry.ts";
import { checkReport, type LatestEvent, typesReport } from "../core/freshness.ts";
import type { DiskWatch } from "../store/disk_watch.ts";
import { readTs } from "../wire/ndjson.ts";
import type { BatchSummary } from "../wire/event.ts";
import type { ShutdownLifecycle } from "./shutdown.ts";
import { VERSION } from "./version.ts";
import { historyRoute } from "./history.ts";
import {
  idempotencyKeyOf,
  IDEMPOTENT_REPLAYED_HEADER,
  keyedAnswer,
  requestHash,
} from "./idempotent.ts";
import { externalReasons, safetyRoutes } from "./safety_routes.ts";
import { json, noStore } from "./answers.ts";
import { influxRoutes } from "./influx_routes.ts";

/** What the API routes need besides the service. */
export interface RouteDeps {
  maxBody: number;
  /** `GET /history` requests served at once (`--max-history`). */
  maxHistory: number;
  /** Whether requests other than `GET /history` are being answered (they go first). */
  othersBusy: () => boolean;
  /** The deadline of every body read (`--body-timeout`). */
  bodies: BodyDeadlines;
  shutdown: ShutdownLifecycle;
  streams: StreamHub;
  metrics: ServiceMetrics;
  types: TypesRegistry;
  disk: DiskWatch;
  wrapCurrent: boolean;
  /** The routes of the features served on the API port besides the API, such as the dashboard's `/`. */
  pages: readonly Route[];
}

/** The API (docs/http-api.md) as data: one row per path, one handler per method. */
export function apiRoutes(service: TelemetryService, deps: RouteDeps): Route[] {
  return [
    ...deps.pages,
    route("/health", { GET: () => json(200, '{"ok":true}') }),
    route("/ready", { GET: () => json(200, readyBody(service)) }),
    ...runRoutes(service, deps),
    ...eventRoutes(service, deps),
    ...readRoutes(service, deps),
    ...statusRoutes(service, deps),
    route("/shutdown", { POST: (ctx) => shutdownRequest(ctx, deps) }),
  ];
}

/** `/run`, `/run/start`, `/run/stop` (docs/http-api.md). */
function runRoutes(service: TelemetryService, { maxBody, bodies }: RouteDeps): Route[] {
  return [
    route("/run", {
      GET: () => {
        const run = service.run;
        if (!run) throw new HttpError(404, "No run is active; start one with POST /run/start.");
        return json(200, JSON.stringify(run));
      },
    }),
    route("/run/start", {
      POST: async ({ req }) => {
        const { value } = await readJsonBody(req, maxBody, false, bodies);
        const { run, created } = await service.startRun(parseRunStart(value));
        return json(created ? 201 : 200, JSON.stringify(run));
      },
    }),
    route("/run/stop", {
      POST: async ({ req }) => {
        await readJsonBody(req, maxBody, false, bodies);
        return json(200, JSON.stringify(await service.stopRun()));
      },
    }),
  ];
}

/**
 * What is written and what is read of it live: `/event`, `/events`, the InfluxDB write API
 * (`/write`, `/api/v2/write`, `/ping`), `/current`, `/stream`.
 */
function eventRoutes(service: TelemetryService, deps: RouteDeps): Route[] {
  const { streams, wrapCurrent } = deps;
  return [
    route("/event", { POST: ({ req }) => postEvent(service, req, deps) }),
    route("/events", { POST: ({ req }) => postEvents(service, req, deps) }),
    // Line protocol, into the same commit path (docs/http-api.md).
    ...influxRoutes(service, deps),
    // Streamed in chunks: a snapshot of any size is answered, and no answer holds the loop long.
    route("/current", {
      GET: ({ url }) => {
        const body = service.currentBody();
        return jsonStream(wantsWrap(url, wrapCurrent) ? wrapped("current", body) : body);
      },
    }),
    route("/current/:type(.*)", {
      GET: ({ params }) => currentOfType(service, params.type ?? ""),
      DELETE: ({ params }) => forgetType(service, params.type ?? ""),
    }),
    route("/stream", {
      GET: ({ req, url }) => streams.response(url, req.headers.get("accept-encoding")),
    }),
  ];
}

/** The stored files and the service's own figures: `/history`, `/metrics`. */
function readRoutes(service: TelemetryService, deps: RouteDeps): Route[] {
  const { streams, metrics, types, disk } = deps;
  // The stored files, streamed in slices that give the loop back, so many at once
  // (docs/history.md).
  const history = historyRoute({
    siteDir: service.siteDir,
    timeZone: service.timeZone,
    types,
    maxHistory: deps.maxHistory,
    signal: deps.shutdown.signal,
    othersBusy: deps.othersBusy,
  });
  return [
    route("/history", { GET: ({ url }) => history(url) }),
    route("/metrics", {
      GET: async () => metrics.response({ streams, diskFreeBytes: await disk.sample() }),
    }),
  ];
}

/**
 * The judgements of the types and the site: `/types`, `/check`, and the safety routes
 * (`safety_routes.ts`: `/safety`, `/safety/indi`, `/safety/events`, `/safety/waivers`).
 */
function statusRoutes(service: TelemetryService, deps: RouteDeps): Route[] {
  const { types, disk } = deps;
  const latest = latestOf(service, types);
  return [
    route("/types", {
      GET: () => {
        const snapshotTypes = [...service.currentData()].map(([type]) => type);
        const report = typesReport(types, latest, snapshotTypes, Date.now());
        // A latched type keeps its state; `latched_until` says the rest (docs/safety.md).
        // `critical_for` names the profiles it decides besides the site (docs/safety.md#profiles).
        const verdicts = service.safety().types;
        const withLatch = Object.fromEntries(
          Object.entries(report).map(([type, status]) => [type, {
            ...status,
            latched_until: verdicts[type]?.latched_until ?? null,
            critical_for: types.get(type)?.critical_for ?? [],
          }]),
        );
        return json(200, JSON.stringify(withLatch));
      },
    }),
    route("/check", {
      GET: async () => {
        const freeBytes = await disk.sample();
        const result = checkReport(types, latest, Date.now(), {
          freeBytes,
          minFreeBytes: disk.minFreeBytes,
        });
        // A latched critical type fails the check too, saying when it clears, and so does an
        // external event that holds the site (docs/safety.md, docs/safety.md#safety-events).
        const verdict = service.safety();
        const clearing = Object.entries(verdict.types).filter(([, t]) => t.latched_until !== null)
          .flatMap(([type]) => verdict.reasons.filter((r) => r.startsWith(`${type}: clearing, `)));
        const failing = [...clearing, ...externalReasons(verdict)];
        if (failing.length > 0) {
          result.failing.push(...failing);
          result.ok = false;
        }
        // A health verdict of this instant: no proxy or browser may answer it from a cache.
        return noStore(json(result.ok ? 200 : 503, JSON.stringify(result)));
      },
    }),
    ...safetyRoutes(service, deps),
  ];
}

/** `POST /shutdown`, accepted from the machine the server runs on only. */
async function shutdownRequest(
  { req, info }: RouteContext,
  { maxBody, bodies, shutdown }: RouteDeps,
): Promise<Response> {
  const peer = info?.remoteAddr;
  if (peer && "hostname" in peer && !isLoopback(peer.hostname)) {
    throw new HttpError(403, "Shutdown is only accepted from the machine the server runs on.");
  }
  await readJsonBody(req, maxBody, false, bodies);
  shutdown.request();
  return json(202, '{"shutting_down":true}');
}

function jsonStream(body: ReadableStream<Uint8Array>): Response {
  return new Response(body, {
    status: 200,
    headers: { "content-type": "application/json; charset=utf-8" },
  });
}

/** `?wrap=true|false` of `GET /current`, else the server's `--wrap-current` (docs/operations.md). */
function wantsWrap(url: URL, byDefault: boolean): boolean {
  const values = url.searchParams.getAll("wrap");
  if (values.length === 0) return byDefault;
  const [only] = values;
  if (values.length > 1 || (only !== "true" && only !== "false")) {
    throw new HttpError(
      400,
      `The query parameter wrap must be given once as true or false, not ${
        JSON.stringify(values.join(",")).slice(0, 100)
      }; use ?wrap=false for the plain map of types or ?wrap=true for {"current": {...}}.`,
    );
  }
  return only === "true";
}

/** A JSON body streamed inside `{"<key>": ...}`, without holding it whole. */
function wrapped(key: string, body: ReadableStream<Uint8Array>): ReadableStream<Uint8Array> {
  const encoder = new TextEncoder();
  const head = encoder.encode(`{${JSON.stringify(key)}:`), tail = encoder.encode("}");
  let first = true;
  return body.pipeThrough(
    new TransformStream<Uint8Array, Uint8Array>({
      transform(chunk, controller) {
        if (first) controller.enqueue(head);
        first = false;
        controller.enqueue(chunk);
      },
      flush(controller) {
        if (first) controller.enqueue(head);
        controller.enqueue(tail);
      },
    }),
  );
}

function readyBody(service: TelemetryService): string {
  const run = service.run;
  return JSON.stringify({
    ready: true,
    run_active: run !== undefined,
    run_id: run?.run_id ?? null,
    version: VERSION,
    zone: service.timeZone,
    site_id: service.siteId,
  });
}

/**
 * The latest `ts` and `data` of a type, read from its snapshot line; for a type the registry
 * does not describe only `ts` matters, read without parsing the line.
 */
function latestOf(
  service: TelemetryService,
  types: TypesRegistry,
): (type: string) => LatestEvent | undefined {
  return (type) => {
    const line = service.currentLine(type);
    if (line === undefined) return undefined;
    if (!types.has(type)) {
      const ts = readTs(line);
      return ts === undefined ? undefined : { ts, data: {} };
    }
    const { ts, data } = JSON.parse(line) as LatestEvent;
    return { ts, data };
  };
}

/** `POST /event` (docs/http-api.md), once per `Idempotency-Key` when it has one. */
async function postEvent(
  service: TelemetryService,
  req: Request,
  { maxBody, bodies }: RouteDeps,
): Promise<Response> {
  const key = idempotencyKeyOf(req);
  const { value, bytes } = await readRequiredJson(
    req,
    maxBody,
    bodies,
    'a JSON object such as {"type": "weather", "data": {"wind_mps": 2.1}}',
  );
  if (key === undefined) {
    const events = await service.submit([parseEvent(value)]);
    return json(200, events[0]!.line);
  }
  const hash = requestHash("/event", false, bytes);
  const answer = await service.submitOnce({ key, hash }, () => [parseEvent(value)]);
  // The hash holds the route: a key first answered by `POST /events` is a conflict here, so its
  // answer always has its line.
  return keyedAnswer(answer.lines![0]!, answer.replayed);
}

/**
 * `POST /events` (docs/http-api.md), once per `Idempotency-Key` when it has one; with
 * `Prefer: return=minimal`, answered `{"accepted", "first_seq", "last_seq"}` instead of every
 * envelope.
 */
async function postEvents(
  service: TelemetryService,
  req: Request,
  { maxBody, bodies }: RouteDeps,
): Promise<Response> {
  const key = idempotencyKeyOf(req);
  const minimal = prefersMinimal(req);
  const { value, ndjson, bytes } = await readJsonBody(req, maxBody, true, bodies);
  let items: unknown[];
  let lines: number[] | undefined;
  if (ndjson !== undefined) ({ items, lines } = parseNdjsonLines(ndjson));
  else if (value === undefined) items = [];
  else if (Array.isArray(value)) items = value;
  else {
    throw new HttpError(
      400,
      "A batch must be a JSON array of events, or NDJSON (one event per line) sent as application/x-ndjson.",
    );
  }
  if (key === undefined) {
    const events = await service.submit(parseEvents(items, true, lines));
    if (!minimal) return json(200, batchBody(events.map((e) => e.line)));
    return minimalAnswer(summaryOf(events), false);
  }
  // The hash is the body's, not the Prefer header's: a retry asking for the other answer is the
  // same request (docs/http-api.md, "Prefer: return=minimal").
  const hash = requestHash("/events", ndjson !== undefined, bytes);
  const answer = await service.submitOnce(
    { key, hash, minimal },
    () => parseEvents(items, true, lines),
  );
  // A key first answered minimally kept no lines: its retries get the minimal answer, whatever
  // they ask for, with the same seqs.
  if (minimal || answer.lines === undefined) return minimalAnswer(answer.summary, answer.replayed);
  return keyedAnswer(batchBody(answer.lines), answer.replayed);
}

/** The answer of `POST /events`: the envelope lines as they were stored. */
function batchBody(lines: readonly string[]): string {
  return `{"accepted":${lines.length},"events":[${lines.join(",")}]}`;
}

const MINIMAL_HEADERS = {
  "content-type": "application/json; charset=utf-8",
  "preference-applied": "return=minimal",
};
const MINIMAL_REPLAY_HEADERS = {
  ...MINIMAL_HEADERS,
  [IDEMPOTENT_REPLAYED_HEADER.toLowerCase()]: "true",
};

/** The minimal answer of `POST /events`, saying so in `Preference-Applied` (RFC 7240). */
function minimalAnswer(summary: BatchSummary, replayed: boolean): Response {
  return new Response(
    `{"accepted":${summary.accepted},"first_seq":${summary.first_seq},"last_seq":${summary.last_seq}}`,
    { status: 200, headers: replayed ? MINIMAL_REPLAY_HEADERS : MINIMAL_HEADERS },
  );
}

/**
 * Whether the request's `Prefer` header (RFC 7240) asks for `return=minimal`: its preferences
 * are separated by commas, parameters after `;`, names and the value matched without regard to
 * case, the value quoted or not; the first `return` preference counts.
 */
function prefersMinimal(req: Request): boolean {
  const prefer = req.headers.get("prefer");
  if (prefer === null) return false;
  for (const preference of prefer.split(",")) {
    const token = preference.split(";", 1)[0]!;
    const eq = token.indexOf("=");
    if (eq < 0 || token.slice(0, eq).trim().toLowerCase() !== "return") continue;
    let value = token.slice(eq + 1).trim();
    if (value.length >= 2 && value.startsWith('"') && value.endsWith('"')) {
      value = value.slice(1, -1);
    }
    return value.toLowerCase() === "minimal";
  }
  return false;
}

/** `DELETE /current/{type}` (docs/http-api.md): 204 once the forget is durable, 404 when absent. */
async function forgetType(service: TelemetryService, rawType: string): Promise<Response> {
  const type = decodedParam(rawType, "event type", true);
  if (!await service.forget(type)) {
    throw new HttpError(
      404,
      `The current snapshot has no event of type ${
        JSON.stringify(type)
      }, so there is nothing to forget; GET /current lists the types it has.`,
    );
  }
  return new Response(null, { status: 204 });
}

function currentOfType(service: TelemetryService, rawType: string): Response {
  const type = decodedParam(rawType, "event type", true);
  const line = service.currentLine(type);
  if (line === undefined) {
    throw new HttpError(
      404,
      `No event of type ${
        JSON.stringify(type)
      } has been recorded yet; GET /current lists the types that have.`,
    );
  }
  return json(200, line);
}
