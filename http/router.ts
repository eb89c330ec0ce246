/**
 * Routes as data: a table of `URLPattern`s with one handler per method, and the lookup that
 * serves static paths from a map and the rest by pattern.
 *
 * @module
 */

import { HttpError } from "./problems.ts";

/** What a route handler gets. */
export interface RouteContext {
  /** The request. */
  req: Request;
  /** The peer, when served by `Deno.serve`. */
  info: Deno.ServeHandlerInfo | undefined;
  /** The parsed request URL. */
  url: URL;
  /** The pattern's named groups (still percent-encoded). */
  params: Record<string, string | undefined>;
}

/** Answers one method of one route. */
export type RouteHandler = (ctx: RouteContext) => Promise<Response> | Response;

/** One row of the route table. */
export interface Route {
  /** The path it serves. */
  pattern: URLPattern;
  /** Its handler per method; HEAD is served by GET. */
  methods: Partial<Record<"GET" | "POST" | "PUT" | "DELETE", RouteHandler>>;
  /**
   * Reshapes its error answers (problem+json by default), the guards' refusals included: the
   * InfluxDB routes answer `{"error": ...}` as InfluxDB does (docs/http-api.md).
   */
  errorAnswer?: (res: Response) => Response;
}

const EMPTY_PARAMS: Record<string, string | undefined> = {};

/** Finds a request's route: static paths by a map lookup, the rest by their pattern. */
export class Router {
  #static = new Map<string, Route>();
  #dynamic: Route[] = [];

  /**
   * Indexes a route table.
   *
   * @param routes The rows; a static path wins over every pattern, and among patterns the first
   *   match wins.
   */
  constructor(routes: readonly Route[]) {
    for (const route of routes) {
      const path = route.pattern.pathname;
      // A pathname with no pattern syntax matches only itself; a map lookup is much cheaper
      // than URLPattern.exec on the ingestion path.
      if (/^[\w/.-]*$/.test(path)) this.#static.set(path, route);
      else this.#dynamic.push(route);
    }
  }

  /**
   * Finds the route of a URL.
   *
   * @param url The request URL.
   * @returns The route and its path parameters, or `undefined` (404).
   */
  match(url: URL): { route: Route; params: Record<string, string | undefined> } | undefined {
    const route = this.#static.get(url.pathname);
    if (route) return { route, params: EMPTY_PARAMS };
    for (const candidate of this.#dynamic) {
      const m = candidate.pattern.exec({ pathname: url.pathname });
      if (m) return { route: candidate, params: m.pathname.groups };
    }
    return undefined;
  }
}

/**
 * One row of a route table.
 *
 * @param pathname A `URLPattern` pathname such as `"/current/:type(.*)"`.
 * @param methods A handler per method.
 * @param errorAnswer Reshapes the route's error answers (see {@linkcode Route.errorAnswer}).
 * @returns The row.
 */
export function route(
  pathname: string,
  methods: Route["methods"],
  errorAnswer?: (res: Response) => Response,
): Route {
  const pattern = new URLPattern({ pathname });
  return errorAnswer ? { pattern, methods, errorAnswer } : { pattern, methods };
}

/**
 * Finds the error shape of each route label that has its own (see {@linkcode Route.errorAnswer}).
 *
 * @param routes The route table.
 * @returns The reshapers by route label.
 */
export function errorAnswers(routes: readonly Route[]): Map<string, (res: Response) => Response> {
  const map = new Map<string, (res: Response) => Response>();
  for (const row of routes) if (row.errorAnswer) map.set(routeLabel(row), row.errorAnswer);
  return map;
}

const labels = new WeakMap<Route, string>();

/**
 * A route's pattern as people write it, for metrics and logs (docs/http-api.md):
 * `/current/:type(.*)` is `/current/{type}`.
 *
 * @param route A row of the route table.
 * @returns Its label, computed once per route.
 *
 * @example Usage
 * ```ts
 * import { route, routeLabel } from "./router.ts";
 * import assert from "node:assert/strict";
 *
 * assert.equal(routeLabel(route("/current/:type(.*)", {})), "/current/{type}");
 * ```
 */
export function routeLabel(route: Route): string {
  let label = labels.get(route);
  if (label === undefined) {
    label = route.pattern.pathname.replace(/:(\w+)(\([^)]*\))?/g, "{$1}");
    labels.set(route, label);
  }
  return label;
}

/**
 * A path parameter, percent-decoded (`/current/{type}`, `/safety/events/{id}`).
 *
 * @param raw The parameter as matched.
 * @param what What it names, for the error (`event type`, `event Id`).
 * @param allowEmpty Whether an empty one is passed on (the route answers it) or refused.
 * @returns The decoded text.
 * @throws {HttpError} 400 when it is not valid percent-encoding, or empty and not allowed.
 *
 * @example Usage
 * ```ts
 * import { decodedParam } from "./router.ts";
 * import assert from "node:assert/strict";
 *
 * assert.equal(decodedParam("roof%2Fnorth", "event type"), "roof/north");
 * ```
 */
export function decodedParam(raw: string | undefined, what: string, allowEmpty = false): string {
  let value: string;
  try {
    value = decodeURIComponent(raw ?? "");
  } catch {
    throw new HttpError(400, `The ${what} in the path is not valid percent-encoding.`);
  }
  if (value === "" && !allowEmpty) {
    throw new HttpError(400, `The path names no ${what}; add it after the /.`);
  }
  return value;
}
