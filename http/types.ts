/**
 * The types the handler, the listener and `startServer` share: what a handler is, and what a
 * refused request reports.
 *
 * @module
 */

/**
 * A request answered with 4xx or 5xx, as the handler's `onRejected` receives it.
 *
 * @example Usage
 * ```ts
 * import type { Rejection } from "./types.ts";
 *
 * const log = (r: Rejection) => `${r.method} ${r.route} ${r.status} from ${r.peer}: ${r.detail}`;
 * ```
 */
export interface Rejection {
  /** The request method. */
  method: string;
  /** The route pattern, such as `/current/{type}`; `other` for an unknown path. */
  route: string;
  /** The status answered. */
  status: number;
  /** The peer's address (`127.0.0.1`, `::1`), or `unknown` outside `Deno.serve`. */
  peer: string;
  /** The answer's `detail`. */
  detail: string;
}

/**
 * A request handler for `Deno.serve`, or for calling directly with a `Request`.
 *
 * @example Usage
 * ```ts
 * import type { TelemetryHandler } from "./types.ts";
 *
 * const health: TelemetryHandler = () => Promise.resolve(Response.json({ ok: true }));
 * ```
 */
export type TelemetryHandler = (req: Request, info?: Deno.ServeHandlerInfo) => Promise<Response>;
