/**
 * {@linkcode createHandler}: the service's request handler as `startServer()` serves it on its
 * port, the API (docs/http-api.md) with the dashboard at `/` (docs/dashboard.md).
 *
 * @module
 */

import type { TelemetryService } from "../core/service.ts";
import { createRouteHandler, type HandlerOptions } from "../http/handler.ts";
import type { TelemetryHandler } from "../http/types.ts";
import { dashboardRoutes } from "../dashboard/page.ts";

/**
 * Builds the request handler for a service (docs/http-api.md). It checks, in this order: shutdown
 * (503), Host and Origin (403), the bearer token (401), the route (404, 405), then the body
 * (413, 415, 400).
 *
 * @param service The service to serve.
 * @param options Security and limits.
 * @returns A handler for `Deno.serve`, also callable with a plain `Request` in tests.
 *
 * @example Usage
 * ```ts ignore
 * import { createHandler, TelemetryService } from "@obs-utils/telemetry/server";
 *
 * await using service = await TelemetryService.open({ siteDir: "./telemetry" });
 * const handler = createHandler(service);
 * const res = await handler(new Request("http://localhost/health"));
 * console.log(res.status); // 200
 * ```
 */
export function createHandler(
  service: TelemetryService,
  options: HandlerOptions = {},
): TelemetryHandler {
  return createRouteHandler(service, options, dashboardRoutes());
}
