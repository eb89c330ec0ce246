/**
 * The safety notifications of a running server (docs/safety.md#notifications): every change the
 * service's safety watch reports (each profile's verdict, a critical type's state, an external
 * event set or cleared, a waiver set or ended) is queued, with the site's `site_id`, for each
 * `--notify` receiver, and POSTed in the `--notify-format` by `notify/post.ts`; the queue, the
 * retries and the log lines are `notify/queue.ts`'s. Nothing here runs on the ingest path.
 *
 * @example Usage
 * ```ts ignore
 * import { startNotifications } from "./notifications.ts";
 * const notifier = await startNotifications(service, { notify: ["https://ntfy.sh/obs"], notifyFormat: "ntfy" });
 * await notifier.close(2000);
 * ```
 *
 * @module
 */

import type { TelemetryService } from "../core/service.ts";
import { Notifier, type NotifyLog } from "./queue.ts";
import { readSiteIdentity } from "../store/site_identity.ts";
import { type NotifyFormat, parseNotifyUrl, postNotification } from "./post.ts";
import { ConfigError } from "../core/errors.ts";

/** Longest wait, at shutdown, for receivers that are up to take what is queued. */
export const NOTIFY_DRAIN_MS = 2000;

/** What {@linkcode startNotifications} is told. */
export interface NotificationsOptions {
  /** The receivers (`--notify`). */
  notify?: readonly string[];
  /**
   * How each message is written (`--notify-format`).
   * @default {"json"}
   */
  notifyFormat?: NotifyFormat;
  /** Where the notifier's lines go: the service log. */
  log?: NotifyLog;
}

/**
 * Checks the receivers before anything is opened: each URL as `--notify` takes it, and the
 * permission to connect to its host and port, so that a receiver the service may not reach is one
 * line at start-up (docs/cli.md#permissions), not a receiver that is down all night.
 *
 * @param urls The receivers.
 * @throws {ConfigError} For a URL that is not http(s) or holds credentials.
 * @throws {Deno.errors.NotCapable} For a host and port the service may not connect to.
 *
 * @example Usage
 * ```ts
 * import { checkReceivers } from "./notifications.ts";
 * import assert from "node:assert/strict";
 *
 * assert.throws(() => checkReceivers(["ftp://example.org/x"]), /--notify must be an http/);
 * ```
 */
export function checkReceivers(urls: readonly string[]): void {
  for (const text of urls) {
    try {
      parseNotifyUrl(text);
    } catch (err) {
      throw new ConfigError((err as Error).message);
    }
    const url = new URL(text);
    const host = `${url.hostname}:${url.port || (url.protocol === "https:" ? "443" : "80")}`;
    if (Deno.permissions.querySync({ name: "net", host }).state !== "granted") {
      // The wording Deno uses, which the permission advice of `run` reads (cli/permissions.ts).
      throw new Deno.errors.NotCapable(`Requires net access to "${host}", a --notify receiver`);
    }
  }
}

/**
 * Starts sending the service's safety changes to the receivers: a notifier with none only
 * counts zeros.
 *
 * @param service The running service.
 * @param options The receivers, the format and the log.
 * @returns The notifier; close it after the service, with a bounded drain.
 */
export async function startNotifications(
  service: TelemetryService,
  options: NotificationsOptions,
): Promise<Notifier> {
  const format = options.notifyFormat ?? "json";
  const notifier = new Notifier({
    receivers: options.notify ?? [],
    send: (url, message, signal) => postNotification(url, message, format, signal),
    ...(options.log ? { log: options.log } : {}),
  });
  if ((options.notify ?? []).length === 0) return notifier;
  // The service has made `.site.json` by now (docs/storage.md).
  const site = (await readSiteIdentity(service.siteDir))?.site_id ?? "";
  // The verdict the service found at start (a night's stale data) is a change too (docs/safety.md).
  service.onSafetyChange((change) => notifier.notify({ ...change, site }), {
    replayOpening: true,
  });
  return notifier;
}
