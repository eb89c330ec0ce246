/**
 * The site's identity, `<site_dir>/.site.json` (docs/storage.md): a random `site_id` made at the
 * first start and never changed, the IANA zone the site records its nights in, and when the file
 * was made. The forwarder claims its unit for the `site_id` (docs/fleet.md), and `read`, `runs`
 * and history judge night dates in the site's zone (docs/history.md), so a site keeps one
 * identity however the machine around it is set up.
 *
 * @module
 */

import { join } from "node:path";
import { formatTimestamp, isJsonObject } from "../wire/event.ts";
import { StorageError } from "../core/errors.ts";
import { checkTimeZone } from "./day_key.ts";
import { readJsonFile, writeJsonAtomic } from "./fs.ts";
import { SITE_IDENTITY_FILE } from "./layout.ts";

/** What `.site.json` holds. */
export interface SiteIdentity {
  /** A random UUID, made at the site's first start and never rewritten. */
  site_id: string;
  /** The IANA zone the site records its nights in. */
  zone: string;
  /** When the site was first started, as an envelope `ts`. */
  created_at: string;
}

const UUID = /^[0-9a-f]{8}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{12}$/i;

/**
 * Checks what a `.site.json` file parsed to.
 *
 * @param value The parsed JSON.
 * @param path The file, for the message.
 * @returns The identity.
 * @throws {StorageError} If a field is missing or malformed; the message names the file and the
 * field.
 *
 * @example Usage
 * ```ts
 * import { parseSiteIdentity } from "./site_identity.ts";
 * import assert from "node:assert/strict";
 *
 * const id = { site_id: "0b6f9c1e-7a54-4d0e-9a51-3f1c8f1b2d3a", zone: "UTC", created_at: "2026-11-27T07:00:00.000Z" };
 * assert.deepEqual(parseSiteIdentity(id, "/srv/t/.site.json"), id);
 * assert.throws(() => parseSiteIdentity({ ...id, site_id: "x" }, "/srv/t/.site.json"));
 * ```
 */
export function parseSiteIdentity(value: unknown, path: string): SiteIdentity {
  const broken = (what: string): never => {
    throw new StorageError(
      `Cannot use the site identity "${path}": ${what}; restore the file from a backup, or move it ` +
        `aside to give this site directory a new site id`,
    );
  };
  if (!isJsonObject(value)) return broken("it is not a JSON object");
  const { site_id, zone, created_at } = value;
  if (typeof site_id !== "string" || !UUID.test(site_id)) broken("site_id is not a UUID");
  if (typeof zone !== "string") return broken("zone is not a string");
  try {
    checkTimeZone(zone);
  } catch {
    broken(`zone "${zone}" is not an IANA time zone`);
  }
  if (typeof created_at !== "string" || Number.isNaN(Date.parse(created_at))) {
    broken("created_at is not a timestamp");
  }
  return { site_id: site_id as string, zone, created_at: created_at as string };
}

/**
 * Reads a site directory's identity, for the programs that only read it (`read`, `runs`,
 * `forward`).
 *
 * @param siteDir The site directory.
 * @returns The identity, or `undefined` when the site has none yet (never started by 0.6 or later).
 * @throws {StorageError} If the file exists but is damaged.
 *
 * @example Usage
 * ```ts ignore
 * import { readSiteIdentity } from "./site_identity.ts";
 * const identity = await readSiteIdentity("./telemetry");
 * console.log(identity?.zone ?? "no .site.json yet");
 * ```
 */
export async function readSiteIdentity(siteDir: string): Promise<SiteIdentity | undefined> {
  const path = join(siteDir, SITE_IDENTITY_FILE);
  let value: unknown;
  try {
    value = await readJsonFile(path);
  } catch (err) {
    if (err instanceof SyntaxError) {
      throw new StorageError(
        `Cannot use the site identity "${path}": it is not JSON; restore the file from a backup, ` +
          `or move it aside to give this site directory a new site id`,
        { cause: err },
      );
    }
    throw err;
  }
  return value === undefined ? undefined : parseSiteIdentity(value, path);
}

/** Options of {@linkcode establishSiteIdentity}. */
export interface EstablishOptions {
  /** The zone the service records in now. */
  zone: string;
  /** The clock, for `created_at`. */
  now?: () => number;
  /** Where the warning of a changed zone goes. */
  warn?: (message: string) => void;
}

/**
 * Makes sure the site directory has its identity, at the service's start (the site lock held):
 * writes it atomically at the first start, and afterwards rewrites only its zone, with one
 * warning, when the service now records in another zone.
 *
 * @param siteDir The site directory.
 * @param options The zone in use, the clock and the warning sink.
 * @returns The identity as it now stands.
 * @throws {StorageError} If an existing file is damaged.
 *
 * @example Usage
 * ```ts ignore
 * import { establishSiteIdentity } from "./site_identity.ts";
 * const identity = await establishSiteIdentity("./telemetry", { zone: "America/Santiago" });
 * ```
 */
export async function establishSiteIdentity(
  siteDir: string,
  options: EstablishOptions,
): Promise<SiteIdentity> {
  const path = join(siteDir, SITE_IDENTITY_FILE);
  const found = await readSiteIdentity(siteDir);
  if (found === undefined) {
    const made: SiteIdentity = {
      site_id: crypto.randomUUID(),
      zone: options.zone,
      created_at: formatTimestamp((options.now ?? Date.now)()),
    };
    await writeJsonAtomic(path, made);
    return made;
  }
  if (found.zone === options.zone) return found;
  options.warn?.(
    `The site's zone changes from ${found.zone} to ${options.zone} (--tz or OBS_TELEMETRY_TZ); ` +
      `nights from now on are judged in ${options.zone}, and ${path} says so`,
  );
  const moved = { ...found, zone: options.zone };
  await writeJsonAtomic(path, moved);
  return moved;
}
