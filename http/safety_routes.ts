/**
 * The safety routes (docs/safety.md, docs/http-api.md): the verdict of a profile (`GET /safety`,
 * `GET /safety/indi`, `?profile=P`), and the safety hub's write routes: external events
 * (`PUT /safety/events`, `DELETE /safety/events/{id}`, docs/safety.md#safety-events) and waivers
 * (`PUT /safety/waivers`, `DELETE /safety/waivers/{type}`, docs/safety.md#waivers). Transport only:
 * the checks, the saving and the audit events are the service's (`core/safety_hub.ts`); this
 * module reads the request, names who made the change, and maps refusals onto statuses.
 *
 * The write routes are `PUT` and `DELETE`, so the token rules of every write apply to them
 * (`--public-read` opens only `GET` and `HEAD`, docs/operations.md).
 *
 * @example Usage
 * ```ts
 * import { viaOf } from "./safety_routes.ts";
 * import assert from "node:assert/strict";
 *
 * assert.equal(viaOf(new Request("http://localhost/safety/events")), "http");
 * assert.equal(viaOf(new Request("http://localhost/", { headers: { "telemetry-via": "cli" } })), "cli");
 * ```
 *
 * @module
 */

import type { TelemetryService } from "../core/service.ts";
import type { SafetyVerdict } from "../core/safety.ts";
import { SITE_PROFILE } from "../core/types_registry.ts";
import {
  checkSafetyEvents,
  type HubActor,
  type HubVia,
  INTERNAL_ID_PREFIX,
  SafetyHubInputError,
} from "../core/safety_events.ts";
import { HttpError } from "./problems.ts";
import { peerHost } from "./guards.ts";
import { type BodyDeadlines, readRequiredJson } from "./body.ts";
import { decodedParam, type Route, route, type RouteContext } from "./router.ts";
import { json, noStore } from "./answers.ts";

/** What the safety routes need besides the service. */
export interface SafetyRouteDeps {
  /** Largest accepted request body in bytes (`--max-body`). */
  maxBody: number;
  /** The deadline of every body read (`--body-timeout`). */
  bodies: BodyDeadlines;
}

/**
 * The header by which a program says how the change was made, for the audit event's `via`
 * (docs/safety.md#audit): `cli` from `obs-utils telemetry safety hold|release|waive|unwaive`;
 * without it `http`. Read on the safety hub's write routes only.
 *
 * @example Usage
 * ```ts
 * import { VIA_HEADER } from "./safety_routes.ts";
 * import assert from "node:assert/strict";
 *
 * assert.equal(VIA_HEADER, "telemetry-via");
 * ```
 */
export const VIA_HEADER = "telemetry-via";

/** The example body of the 400s of `PUT /safety/events`. */
const EXAMPLE_EVENTS =
  '[{"Source": "UPS", "Name": "mains", "Id": "ups-mains", "Type": "Power", "Trigger": "Offline", "Description": "on battery"}]';

/** The example body of the 400s of `PUT /safety/waivers`. */
const EXAMPLE_WAIVER = '{"type": "weather", "for_s": 7200, "reason": "anemometer iced"}';

/** The keys of a `PUT /safety/waivers` body. */
const WAIVER_KEYS = ["type", "for_s", "reason"];

/**
 * `/safety`, `/safety/indi`, `/safety/events`, `/safety/waivers` (docs/safety.md).
 *
 * @param service The service whose verdicts and hub are served.
 * @param deps The body limits.
 * @returns The routes, to be served behind the guards of `handler.ts`.
 *
 * @example Usage
 * ```ts ignore
 * import { safetyRoutes } from "./safety_routes.ts";
 * const routes = safetyRoutes(service, { maxBody: 1 << 20, bodies });
 * ```
 */
export function safetyRoutes(service: TelemetryService, deps: SafetyRouteDeps): Route[] {
  return [
    route("/safety", {
      GET: ({ url }) => noStore(json(200, JSON.stringify(service.safety(profileOf(url, service))))),
    }),
    route("/safety/indi", {
      GET: ({ url }) => noStore(json(200, indiBody(service.safety(profileOf(url, service))))),
    }),
    route("/safety/events", { PUT: (ctx) => putEvents(service, ctx, deps) }),
    route("/safety/events/:id(.*)", { DELETE: (ctx) => deleteEvent(service, ctx) }),
    route("/safety/waivers", { PUT: (ctx) => putWaiver(service, ctx, deps) }),
    route("/safety/waivers/:type(.*)", { DELETE: (ctx) => deleteWaiver(service, ctx) }),
  ];
}

/**
 * The lines `GET /check` adds for the external events that hold the site (docs/safety.md): the
 * reason `external: <Source>: <Description>` of each.
 *
 * @param verdict The site's verdict.
 * @returns One line per external event, in the order they were set.
 *
 * @example Usage
 * ```ts
 * import { externalReasons } from "./safety_routes.ts";
 * import type { SafetyVerdict } from "../core/safety.ts";
 * import assert from "node:assert/strict";
 *
 * const verdict = {
 *   events: [{ Source: "UPS", Name: "mains", Id: "ups", Type: "Power", Trigger: "Offline", Description: "on battery", EventTimeUtc: "" }],
 * } as unknown as SafetyVerdict;
 * assert.deepEqual(externalReasons(verdict), ["external: UPS: on battery"]);
 * ```
 */
export function externalReasons(verdict: SafetyVerdict): string[] {
  return verdict.events.filter((e) => !e.Id.startsWith(INTERNAL_ID_PREFIX)).map((e) =>
    `external: ${e.Source}: ${e.Description}`
  );
}

/**
 * The `via` of a change (docs/safety.md#audit): the request's `Telemetry-Via` header, `cli` or
 * `http`, else `http`.
 *
 * @param req The request.
 * @returns The path the change came by.
 * @throws {HttpError} 400 for any other value of the header.
 *
 * @example Usage
 * ```ts
 * import { viaOf } from "./safety_routes.ts";
 * import assert from "node:assert/strict";
 *
 * const req = new Request("http://localhost/", { headers: { "telemetry-via": "alpaca" } });
 * assert.throws(() => viaOf(req), /Telemetry-Via must be cli or http/);
 * ```
 */
export function viaOf(req: Request): HubVia {
  const header = req.headers.get(VIA_HEADER);
  if (header === null) return "http";
  const via = header.trim().toLowerCase();
  if (via === "cli" || via === "http") return via;
  throw new HttpError(
    400,
    `The header Telemetry-Via must be cli or http, not ${
      JSON.stringify(header.slice(0, 40))
    }; leave it out unless the change comes from obs-utils telemetry safety (docs/safety.md#audit).`,
  );
}

/** Who makes a change: the path it came by and the peer's address. */
function actorOf({ req, info }: RouteContext): HubActor {
  return { via: viaOf(req), peer: peerHost(info) ?? "unknown" };
}

/**
 * The profile of `?profile=P`, `site` without it (docs/safety.md#profiles).
 *
 * @throws {HttpError} 400 for a repeated or empty parameter, 404 for a profile the types file
 *   does not name; both list the profiles.
 */
function profileOf(url: URL, service: TelemetryService): string {
  const values = url.searchParams.getAll("profile");
  if (values.length === 0) return SITE_PROFILE;
  const profiles = service.safetyProfiles;
  const [only] = values;
  if (values.length > 1 || only === "") {
    throw new HttpError(
      400,
      `The query parameter profile must be given once with a profile's name, not ${
        JSON.stringify(values.join(",").slice(0, 100))
      }; the profiles are ${profiles.join(", ")} (docs/safety.md#profiles).`,
    );
  }
  if (!profiles.includes(only!)) {
    throw new HttpError(
      404,
      `There is no safety profile ${JSON.stringify(only!.slice(0, 80))}; the profiles are ${
        profiles.join(", ")
      } (site, and each name of a critical_for in the types file, docs/safety.md#profiles).`,
    );
  }
  return only!;
}

/** `PUT /safety/events[?profile=P]`: sets external events, answers the profile's verdict. */
async function putEvents(
  service: TelemetryService,
  ctx: RouteContext,
  { maxBody, bodies }: SafetyRouteDeps,
): Promise<Response> {
  const profile = profileOf(ctx.url, service);
  const actor = actorOf(ctx);
  const { value } = await readRequiredJson(
    ctx.req,
    maxBody,
    bodies,
    `a JSON array of SafetyEvent objects such as ${EXAMPLE_EVENTS}`,
  );
  try {
    const events = checkSafetyEvents(value, new Date().toISOString());
    await service.safetyHub.setExternal(events, profile, actor);
  } catch (err) {
    throw refused(err, "The events were not set", 400);
  }
  return noStore(json(200, JSON.stringify(service.safety(profile))));
}

/** `DELETE /safety/events/{id}[?profile=P]`: 204 once cleared, 404 for no such external event. */
async function deleteEvent(service: TelemetryService, ctx: RouteContext): Promise<Response> {
  const profile = profileOf(ctx.url, service);
  const actor = actorOf(ctx);
  const id = decodedParam(ctx.params.id, "event Id");
  try {
    await service.safetyHub.clearExternal([id], profile, actor);
  } catch (err) {
    // Its one refusal, the profile being known: the Id is not an external event it sees.
    throw refused(err, "Nothing was cleared", 404);
  }
  return new Response(null, { status: 204 });
}

/** `PUT /safety/waivers`: `{"type", "for_s", "reason"}`, answered with the waiver. */
async function putWaiver(
  service: TelemetryService,
  ctx: RouteContext,
  { maxBody, bodies }: SafetyRouteDeps,
): Promise<Response> {
  const actor = actorOf(ctx);
  const send = `{"type", "for_s", "reason"} such as ${EXAMPLE_WAIVER}`;
  const { value } = await readRequiredJson(ctx.req, maxBody, bodies, send);
  if (typeof value !== "object" || value === null || Array.isArray(value)) {
    throw new HttpError(400, `The body is not a JSON object; send ${send}.`);
  }
  const body = value as Record<string, unknown>;
  const extra = Object.keys(body).find((key) => !WAIVER_KEYS.includes(key));
  if (extra !== undefined) {
    throw new HttpError(
      400,
      `A waiver has no field ${
        JSON.stringify(extra.slice(0, 80))
      }; send only "type", "for_s" and "reason", such as ${EXAMPLE_WAIVER}.`,
    );
  }
  if (typeof body.type !== "string" || body.type === "") {
    throw new HttpError(
      400,
      `"type" must name a critical type of the types file, such as ${EXAMPLE_WAIVER}.`,
    );
  }
  let waiver;
  try {
    waiver = await service.safetyHub.waive(
      body.type,
      body.for_s as number,
      body.reason as string,
      actor,
    );
  } catch (err) {
    throw refused(err, "No waiver was set", 400);
  }
  return noStore(json(200, JSON.stringify(waiver)));
}

/** `DELETE /safety/waivers/{type}`: 204 once ended, 404 when the type has no waiver in force. */
async function deleteWaiver(service: TelemetryService, ctx: RouteContext): Promise<Response> {
  const actor = actorOf(ctx);
  const type = decodedParam(ctx.params.type, "type");
  try {
    await service.safetyHub.unwaive(type, actor);
  } catch (err) {
    throw refused(err, "No waiver was ended", 404);
  }
  return new Response(null, { status: 204 });
}

/** The hub's refusal of an input as the route's status, saying that nothing changed. */
function refused(err: unknown, what: string, status: number): unknown {
  if (!(err instanceof SafetyHubInputError)) return err;
  return new HttpError(status, `${what}: ${err.message}.`);
}

/** `GET /safety/indi` (docs/safety.md): what INDI's `indi_weather_safety_proxy` reads. */
function indiBody(verdict: SafetyVerdict): string {
  return JSON.stringify({
    timestamp_utc: new Date().toISOString().replace(/\.\d{3}Z$/, "Z"),
    roof_status: { open_ok: verdict.safe ? 1 : 0, reasons: verdict.reasons.join("; ") },
  });
}
