/**
 * One unit, one site (docs/fleet.md, "Units"): before sending anything, the forwarder claims its
 * `--unit` at the destination for the `site_id` of its site directory's `.site.json`. The keys
 * `<unit>/site/<seq>` and `<unit>/run/<run_id>/<seq>` are then one site's, so a second site
 * directory forwarded under the same unit is refused instead of having its events dropped as
 * duplicates of the first's (or mixed with them).
 *
 * @module
 */
import { join } from "node:path";
import { readSiteIdentity } from "../store/site_identity.ts";
import { SITE_IDENTITY_FILE } from "../store/layout.ts";
import { redact } from "./archive.ts";
import { type ForwardOptions, sinkConnector } from "./forward_options.ts";
import { fleetBackoff, type FleetLog, isPermissionFault, PeerState } from "./retry.ts";
import type { UnitClaim } from "./sinks/sink.ts";

/**
 * The site directory has no `.site.json`: it was never started by a service that writes one. The
 * forwarder does not make one itself (it may write `.forward/` only, and the site's identity is
 * the service's to make, docs/storage.md), so it stops with this line.
 */
export class SiteIdentityMissingError extends Error {
  /**
   * Creates the error.
   *
   * @param siteDir The site directory.
   */
  constructor(siteDir: string) {
    super(
      `${join(siteDir, SITE_IDENTITY_FILE)} is missing, so this site directory has no site id to ` +
        `claim its unit with: start the service once on it (obs-utils telemetry run --site-dir ` +
        `${siteDir}), which writes it, then forward again`,
    );
    this.name = "SiteIdentityMissingError";
  }
}

/**
 * Claims `options.unit` for the site directory's `site_id`, retrying a destination that is down
 * with the forwarder's back-off (nothing is sent meanwhile), and logs how the unit is this site's.
 *
 * @returns The claim, or `undefined` when `options.signal` aborted first.
 * @throws {SiteIdentityMissingError} when the site directory has no `.site.json`.
 * @throws {UnitHeldError} when another site holds the unit and `options.reclaimUnit` is not set.
 *
 * @example
 * ```ts ignore
 * const claim = await claimUnitForSite({ siteDir: "./telemetry", to: "nats://hub:4222", unit: "pan012" }, log);
 * ```
 */
export async function claimUnitForSite(
  options: ForwardOptions,
  log: FleetLog,
): Promise<UnitClaim | undefined> {
  const identity = await readSiteIdentity(options.siteDir);
  if (identity === undefined) throw new SiteIdentityMissingError(options.siteDir);
  const connector = sinkConnector(options);
  const peer = new PeerState(`destination ${redact(options.to)}`, log);
  const backoff = fleetBackoff();
  const signal = options.signal;
  while (!signal?.aborted) {
    let claim: UnitClaim;
    try {
      claim = await connector.claimUnit(options.unit, identity.site_id, {
        reclaim: options.reclaimUnit ?? false,
      });
    } catch (err) {
      if (signal?.aborted) break;
      if (isPermissionFault(err) || connector.isPermanent(err)) throw err;
      peer.failed(err, `retrying the claim of unit ${options.unit}; nothing is sent before it`);
      await backoff.wait(signal);
      continue;
    }
    peer.ok();
    logClaim(claim, log);
    return claim;
  }
  return undefined;
}

function logClaim(claim: UnitClaim, log: FleetLog): void {
  if (claim.outcome === "reclaimed") {
    log(
      "warn",
      `unit ${claim.unit} taken over from site ${claim.previousSiteId} by site ${claim.siteId} ` +
        `(--reclaim-unit); its keys go on from site ${claim.previousSiteId}'s, so an event ` +
        `whose seq that site sent already is dropped as a repeat`,
    );
  } else {
    log(
      "info",
      `unit ${claim.unit} ${
        claim.outcome === "claimed" ? "claimed for" : "held by"
      } this site, ${claim.siteId}`,
    );
  }
}
