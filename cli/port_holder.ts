/**
 * What holds a port the command line wanted or addressed: a telemetry service, another program
 * that answers HTTP, or one that does not (docs/cli.md, "A port held by another program"). `run`
 * and `stop` say which in one line instead of advising a command that cannot work.
 *
 * @example Usage
 * ```ts ignore
 * import { portHolder } from "./port_holder.ts";
 * const holder = await portHolder("http://127.0.0.1:7000");
 * console.log(holder.kind); // "telemetry", "other" or "silent"
 * ```
 *
 * @module
 */

import { isJsonObject } from "../wire/event.ts";
import { TelemetryHttpError } from "../client/client.ts";

/** What answers at an address. */
export type PortHolder =
  | { kind: "telemetry"; version: string }
  | { kind: "other"; status: number }
  | { kind: "silent" };

/**
 * Asks `GET /ready` at `baseUrl`, within `timeoutMs`. A telemetry service answers with its
 * readiness object, or with problem+json (401 when it wants a token, 503 while it stops).
 *
 * @param baseUrl For example `http://127.0.0.1:7000`.
 * @param timeoutMs How long the question may take.
 * @returns What answered.
 *
 * @example Usage
 * ```ts ignore
 * import { portHolder } from "./port_holder.ts";
 * console.log(await portHolder("http://127.0.0.1:7000"));
 * ```
 */
export async function portHolder(baseUrl: string, timeoutMs = 1500): Promise<PortHolder> {
  let res: Response;
  try {
    res = await fetch(`${baseUrl}/ready`, {
      headers: { accept: "application/json" },
      signal: AbortSignal.timeout(timeoutMs),
    });
  } catch {
    // No HTTP answer: not listening any more, TLS, another protocol, silence, or no permission.
    return { kind: "silent" };
  }
  const text = await res.text().catch(() => "");
  let value: unknown;
  try {
    value = JSON.parse(text);
  } catch {
    return { kind: "other", status: res.status };
  }
  if (res.ok && isJsonObject(value) && typeof value.version === "string") {
    return { kind: "telemetry", version: value.version };
  }
  if (isProblem(value)) return { kind: "telemetry", version: "unknown" };
  return { kind: "other", status: res.status };
}

/**
 * Whether a refusal came from a telemetry service: its error answers are problem+json with a
 * `detail` sentence (docs/http-api.md); another program's 404 or 501 page is not.
 *
 * @param err What the client threw.
 * @returns True for a telemetry service's refusal.
 *
 * @example Usage
 * ```ts
 * import { isTelemetryRefusal } from "./port_holder.ts";
 * import assert from "node:assert/strict";
 *
 * assert.equal(isTelemetryRefusal(new Error("x")), false);
 * ```
 */
export function isTelemetryRefusal(err: unknown): boolean {
  if (!(err instanceof TelemetryHttpError)) return false;
  try {
    return isProblem(JSON.parse(err.body));
  } catch {
    return false;
  }
}

function isProblem(value: unknown): boolean {
  return isJsonObject(value) && typeof value.detail === "string" &&
    typeof value.status === "number" && typeof value.title === "string";
}

/**
 * The one line `stop` prints for a program that is not a telemetry service.
 *
 * @param baseUrl Where it answered.
 * @returns The line, without the `error: ` prefix.
 *
 * @example Usage
 * ```ts
 * import { notTelemetry } from "./port_holder.ts";
 * import assert from "node:assert/strict";
 *
 * assert.equal(
 *   notTelemetry("http://127.0.0.1:7000"),
 *   "the program at http://127.0.0.1:7000 is not a telemetry service; nothing was stopped (check --host and --port)",
 * );
 * ```
 */
export function notTelemetry(baseUrl: string): string {
  return `the program at ${baseUrl} is not a telemetry service; nothing was stopped (check --host and --port)`;
}
