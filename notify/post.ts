/**
 * One notification as an HTTP POST (docs/safety.md#notifications): `json` sends the change as
 * `application/json`; `ntfy` sends the reasons as `text/plain` with the `Title`, `Priority` and
 * `Tags` headers an ntfy server reads. The queue and the retries are `notify/queue.ts`'s.
 *
 * @example Usage
 * ```ts
 * import { notificationRequest } from "./post.ts";
 * import assert from "node:assert/strict";
 *
 * const { headers, body } = notificationRequest(
 *   { kind: "safety", safe: false, reasons: ["weather: stale"], ts: "2026-11-27T03:00:00.000Z", site: "0b6f9c1e-7a54-4d0e-9a51-3f1c8f1b2d3a" },
 *   "ntfy",
 * );
 * assert.equal(headers["priority"], "high");
 * assert.equal(body, "weather: stale");
 * ```
 *
 * @module
 */

import type { Notification } from "./queue.ts";

/** How a notification is written: the change as JSON, or text with ntfy's headers. */
export type NotifyFormat = "json" | "ntfy";

/** The formats of `--notify-format`, the default first. */
export const NOTIFY_FORMATS: readonly NotifyFormat[] = ["json", "ntfy"];

/**
 * Reads a `--notify-format` value, in any letter case.
 *
 * @param text The flag's text.
 * @returns The format.
 * @throws {RangeError} If it is neither `json` nor `ntfy`.
 *
 * @example Usage
 * ```ts
 * import { parseNotifyFormat } from "./post.ts";
 * import assert from "node:assert/strict";
 *
 * assert.equal(parseNotifyFormat("NTFY"), "ntfy");
 * assert.throws(() => parseNotifyFormat("xml"), RangeError);
 * ```
 */
export function parseNotifyFormat(text: string): NotifyFormat {
  const value = text.trim().toLowerCase();
  if (!(NOTIFY_FORMATS as readonly string[]).includes(value)) {
    throw new RangeError(`--notify-format must be json or ntfy, not "${text}"`);
  }
  return value as NotifyFormat;
}

/**
 * Checks a `--notify` URL: absolute, `http:` or `https:`, without a user name or password (a
 * `Request` refuses those; a receiver that wants a secret takes it in the path or the query).
 *
 * @param text The flag's text.
 * @returns The text, unchanged.
 * @throws {RangeError} Naming the flag and what to change.
 *
 * @example Usage
 * ```ts
 * import { parseNotifyUrl } from "./post.ts";
 * import assert from "node:assert/strict";
 *
 * assert.equal(parseNotifyUrl("https://ntfy.sh/obs-site-7"), "https://ntfy.sh/obs-site-7");
 * assert.throws(() => parseNotifyUrl("ntfy.sh/obs"), /--notify must be an http:\/\/ or https:\/\/ URL/);
 * ```
 */
export function parseNotifyUrl(text: string): string {
  let url: URL | undefined;
  try {
    url = new URL(text);
  } catch {
    url = undefined;
  }
  if (url === undefined || (url.protocol !== "http:" && url.protocol !== "https:")) {
    throw new RangeError(
      `--notify must be an http:// or https:// URL such as https://ntfy.sh/my-topic, not "${text}"`,
    );
  }
  if (url.username !== "" || url.password !== "") {
    throw new RangeError(
      `--notify must not hold a user name or password (${url.protocol}//USER:PASSWORD@...); give the receiver's secret in the URL's path or query instead`,
    );
  }
  return text;
}

/** The `Title` of an ntfy notification (docs/safety.md#notifications). */
function ntfyTitle(message: Notification): string {
  switch (message.kind) {
    case "safety": {
      const who = message.profile ?? "Site";
      return message.safe ? `${who} safe` : `${who} UNSAFE`;
    }
    case "external": {
      const done = message.action === "set" ? "set" : "cleared";
      const scope = message.profile === undefined ? "" : ` (${message.profile})`;
      return `External event ${done}: ${message.event?.Source ?? "unknown source"}${scope}`;
    }
    case "waiver":
      return message.action === "set"
        ? `Waiver: ${message.type ?? "type"} until ${clockOf(message.until)}`
        : `Waiver ended: ${message.type ?? "type"}`;
    default: {
      const was = message.previous === undefined ? "" : ` (was ${message.previous})`;
      return `${message.type ?? "type"}: ${message.state ?? "changed"}${was}`;
    }
  }
}

/** The UTC time of day of an ISO timestamp (`04:00:00Z`), or the text as it is. */
function clockOf(iso: string | undefined): string {
  const ms = iso === undefined ? NaN : Date.parse(iso);
  return Number.isNaN(ms) ? String(iso) : `${new Date(ms).toISOString().slice(11, 19)}Z`;
}

/**
 * Whether an ntfy notification should ring louder: the site, a profile or a type turned unsafe,
 * an external event was set (it holds the site shut), or a waiver was set (an override of a
 * sensor is never quiet, docs/safety.md#waivers).
 */
function loud(message: Notification): boolean {
  if (message.kind === "external" || message.kind === "waiver") return message.action === "set";
  if (message.safe !== undefined) return !message.safe;
  return message.state === "alarm" || message.state === "stale";
}

/** The body of an ntfy notification without reasons: what is fine now. */
function fineText(message: Notification): string {
  if (message.kind !== "safety") return `${message.type ?? "type"} is ${message.state ?? "fine"}`;
  return message.profile === undefined
    ? "every critical type is fine"
    : `every critical type of ${message.profile} is fine`;
}

/**
 * A header value as ntfy reads it: plain when it is printable ASCII, else an RFC 2047
 * encoded word (`=?UTF-8?B?...?=`), which ntfy decodes; a `Headers` value must be Latin-1.
 */
function headerText(text: string): string {
  if (/^[\x20-\x7e]*$/.test(text)) return text;
  const bytes = new TextEncoder().encode(text);
  return `=?UTF-8?B?${btoa(String.fromCharCode(...bytes))}?=`;
}

/**
 * The headers and body of one notification.
 *
 * `json`: `{"kind", "safe"?, "type"?, "state"?, "previous"?, "profile"?, "action"?, "event"?,
 * "until"?, "reasons", "ts", "site"}`, only the keys that apply to the kind.
 * `ntfy`: the reasons one per line as `text/plain` (or what became safe), `Title` (`Site UNSAFE`,
 * `north safe`, `weather: alarm (was ok)`, `External event set: UPS`,
 * `Waiver: weather until 04:00:00Z`, `Waiver ended: weather`), `Priority` `high` when the site, a
 * profile or a type turned unsafe, an external event was set or a waiver was set, else `default`,
 * and `Tags`: `warning` or `white_check_mark` (shown as emoji), then `telemetry` and the kind.
 *
 * @param message The notification.
 * @param format The format.
 * @returns Lower-case header names and the body text.
 *
 * @example Usage
 * ```ts
 * import { notificationRequest } from "./post.ts";
 * import assert from "node:assert/strict";
 *
 * const message = { kind: "type" as const, type: "weather", state: "alarm", previous: "ok", reasons: ["weather: alarm"], ts: "2026-11-27T03:00:00.000Z", site: "s" };
 * assert.equal(
 *   notificationRequest(message, "json").body,
 *   '{"kind":"type","type":"weather","state":"alarm","previous":"ok","reasons":["weather: alarm"],"ts":"2026-11-27T03:00:00.000Z","site":"s"}',
 * );
 * assert.equal(notificationRequest(message, "ntfy").headers["title"], "weather: alarm (was ok)");
 *
 * const waiver = { kind: "waiver" as const, action: "set", type: "weather", until: "2026-11-27T04:00:00Z", reasons: ["weather: WAIVED until 2026-11-27T04:00:00Z (anemometer iced) by 192.0.2.7"], ts: "2026-11-27T03:00:00.000Z", site: "s" };
 * const { headers } = notificationRequest(waiver, "ntfy");
 * assert.deepEqual(
 *   [headers["title"], headers["priority"], headers["tags"]],
 *   ["Waiver: weather until 04:00:00Z", "high", "warning,telemetry,waiver"],
 * );
 * ```
 */
export function notificationRequest(
  message: Notification,
  format: NotifyFormat,
): { headers: Record<string, string>; body: string } {
  if (format === "json") {
    // The keys in the documented order, absent ones left out (docs/safety.md#notifications).
    const body = {
      kind: message.kind,
      ...(message.safe !== undefined ? { safe: message.safe } : {}),
      ...(message.type !== undefined ? { type: message.type } : {}),
      ...(message.state !== undefined ? { state: message.state } : {}),
      ...(message.previous !== undefined ? { previous: message.previous } : {}),
      ...(message.profile !== undefined ? { profile: message.profile } : {}),
      ...(message.action !== undefined ? { action: message.action } : {}),
      ...(message.event !== undefined ? { event: message.event } : {}),
      ...(message.until !== undefined ? { until: message.until } : {}),
      reasons: message.reasons,
      ts: message.ts,
      site: message.site,
    };
    return { headers: { "content-type": "application/json" }, body: JSON.stringify(body) };
  }
  const high = loud(message);
  return {
    headers: {
      "content-type": "text/plain; charset=utf-8",
      "title": headerText(ntfyTitle(message)),
      "priority": high ? "high" : "default",
      "tags": `${high ? "warning" : "white_check_mark"},telemetry,${message.kind}`,
    },
    body: message.reasons.length > 0 ? message.reasons.join("\n") : fineText(message),
  };
}

/**
 * What failed, for the log line of a receiver that is down: the innermost part of the error
 * ("Connection refused (os error 111)"), without the URL, whose query may hold a token.
 */
function connectFailure(err: unknown): string {
  const outer = err instanceof Error ? err : new Error(String(err));
  const text = outer.cause instanceof Error ? outer.cause.message : outer.message;
  return text.split(": ").at(-1) || outer.message;
}

/**
 * POSTs one notification; resolves when the receiver answered 2xx.
 *
 * Needs `--allow-net` for the receiver's host and port (docs/cli.md#permissions).
 *
 * @param url The receiver.
 * @param message The notification.
 * @param format How to write it.
 * @param signal Aborts the request (the per-try timeout, a shutdown).
 * @throws {Error} For a failed connection or a non-2xx answer, saying which.
 *
 * @example Usage
 * ```ts ignore
 * import { postNotification } from "./post.ts";
 * await postNotification("https://ntfy.sh/obs", message, "ntfy", AbortSignal.timeout(10_000));
 * ```
 */
export async function postNotification(
  url: string,
  message: Notification,
  format: NotifyFormat,
  signal: AbortSignal,
): Promise<void> {
  const { headers, body } = notificationRequest(message, format);
  let res: Response;
  try {
    res = await fetch(url, { method: "POST", headers, body, signal, redirect: "manual" });
  } catch (err) {
    if (signal.aborted) throw err;
    throw new Error(connectFailure(err));
  }
  // The answer's body is not needed; reading it frees the connection for the next message.
  await res.body?.cancel().catch(() => {});
  if (!res.ok) throw new Error(`answered HTTP ${res.status}`);
}
