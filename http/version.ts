/**
 * The package version, read once from `deno.json`: `GET /ready` reports it, `obs-utils --version`
 * prints it.
 *
 * @module
 */

import denoJson from "../deno.json" with { type: "json" };

/**
 * The package version, from `deno.json`.
 *
 * @example Usage
 * ```ts
 * import { VERSION } from "./version.ts";
 * import assert from "node:assert/strict";
 *
 * assert.match(VERSION, /^\d+\.\d+\.\d+/);
 * ```
 */
export const VERSION: string = denoJson.version;
