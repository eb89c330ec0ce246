/**
 * Where the Alpaca devices read the service (docs/safety.md, "ASCOM Alpaca (N.I.N.A.)"): the
 * safety profiles (one safety monitor each) and each profile's verdict for `issafe`, the safety
 * hub's actions, and the latest event of each type for ObservingConditions, parsed once per new
 * line so that a client polling every second costs no more than a lookup.
 *
 * @module
 */

import type { TelemetryService } from "../core/service.ts";
import type { TypesRegistry } from "../core/types_registry.ts";
import type { LatestEvent } from "../core/freshness.ts";
import type { AlpacaSource } from "./devices.ts";
import { safetyActions } from "./safety_actions.ts";

/**
 * The Alpaca source of a running service.
 *
 * @param service The service.
 * @param types The types registry.
 * @returns The source: a safety monitor per profile of `service.safetyProfiles`, whose `issafe`
 *   is the latched verdict of `service.safety(profile)` and whose actions are the safety hub's.
 *
 * @example Usage
 * ```ts ignore
 * const source = serviceSource(service, types);
 * console.log(source.isSafe("site"));
 * ```
 */
export function serviceSource(service: TelemetryService, types: TypesRegistry): AlpacaSource {
  const parsed = new Map<string, { line: string; latest: LatestEvent }>();
  const latest = (type: string): LatestEvent | undefined => {
    const line = service.currentLine(type);
    if (line === undefined) return undefined;
    const cached = parsed.get(type);
    if (cached?.line === line) return cached.latest;
    const { ts, data } = JSON.parse(line) as LatestEvent;
    const event = { ts, data };
    // One entry per registered type at most: only they are asked for.
    if (types.has(type)) parsed.set(type, { line, latest: event });
    return event;
  };
  return {
    profiles: service.safetyProfiles,
    isSafe: (profile) => service.safety(profile).safe,
    actions: safetyActions(service),
    latest,
    now: Date.now,
  };
}
