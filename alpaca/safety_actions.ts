/**
 * The safety hub's actions on every Alpaca safety monitor (docs/safety.md, "Actions: the safety
 * hub over Alpaca"), the `SafetyEvents`, `SetExternalEvents` and `ClearExternalEvents` of ASCOM's
 * draft ISafetyMonitorV4, trialled through `Action`. `safetymonitor/0` is the profile `site`: an
 * event set through it holds every profile; an event set through another safety monitor holds
 * only that monitor's profile. A change is answered once the service has saved it (fdatasynced)
 * and recorded its audit event, with `via: "alpaca"`, the client's `ClientID` and the peer.
 *
 * @module
 */

import {
  type HubActor,
  parseEventIds,
  parseSafetyEvents,
  type SafetyEvent,
  SafetyHubInputError,
} from "../core/safety_events.ts";
import { SITE_PROFILE } from "../core/types_registry.ts";
import {
  type ActionCall,
  type AlpacaActions,
  INVALID_VALUE,
  type MemberResult,
} from "./devices.ts";

/**
 * The action names, in the order `supportedactions` lists them.
 *
 * @example Usage
 * ```ts
 * import { SAFETY_ACTIONS } from "./safety_actions.ts";
 * import assert from "node:assert/strict";
 *
 * assert.deepEqual(SAFETY_ACTIONS, ["SafetyEvents", "SetExternalEvents", "ClearExternalEvents"]);
 * ```
 */
export const SAFETY_ACTIONS: readonly string[] = [
  "SafetyEvents",
  "SetExternalEvents",
  "ClearExternalEvents",
];

/** What the actions need of the service (`TelemetryService` has it). */
export interface SafetyHubService {
  /** A profile's verdict; its `events` are the `SafetyEvents` answer. */
  safety(profile: string): { readonly events: readonly SafetyEvent[] };
  /** The hub: each change resolves once saved and audited. */
  readonly safetyHub: {
    setExternal(events: readonly SafetyEvent[], profile: string, actor: HubActor): Promise<void>;
    clearExternal(ids: readonly string[], profile: string, actor: HubActor): Promise<void>;
  };
}

/**
 * The safety monitors' actions over a service.
 *
 * @param service The service (its verdicts and its safety hub).
 * @param now The service clock, epoch ms: the `EventTimeUtc` of an event sent without one.
 * @returns The actions, for `AlpacaSource.actions`. A parameter the hub refuses (null, empty or
 *   malformed, an event without `Id`, more than 256 events, an `Id` that is not an external
 *   event the monitor sees) answers InvalidValue (0x401) with the hub's message, and nothing is
 *   changed; a failure to save rejects (the listener answers HTTP 500 and logs it).
 *
 * @example Usage
 * ```ts
 * import { safetyActions } from "./safety_actions.ts";
 * import assert from "node:assert/strict";
 *
 * const held: string[] = [];
 * const actions = safetyActions({
 *   safety: () => ({ events: [] }),
 *   safetyHub: {
 *     setExternal: (events) => Promise.resolve(void held.push(...events.map((e) => e.Id))),
 *     clearExternal: () => Promise.resolve(),
 *   },
 * });
 * const device = { type: "safetymonitor" as const, number: 0, profile: "site" };
 * const call = { device, clientId: 7, peer: "192.0.2.7" };
 * assert.deepEqual(await actions.run({ ...call, name: "SafetyEvents", parameters: "" }), { value: "[]" });
 * const refused = await actions.run({ ...call, name: "SetExternalEvents", parameters: "" });
 * assert.equal("error" in refused && refused.error, 0x401);
 * assert.deepEqual(held, []);
 * ```
 */
export function safetyActions(
  service: SafetyHubService,
  now: () => number = Date.now,
): AlpacaActions {
  return {
    names: SAFETY_ACTIONS,
    async run(call: ActionCall): Promise<MemberResult> {
      const profile = call.device.profile ?? SITE_PROFILE;
      const actor: HubActor = {
        via: "alpaca",
        peer: call.peer,
        ...(call.clientId === undefined ? {} : { client_id: call.clientId }),
      };
      try {
        switch (call.name) {
          case "SafetyEvents":
            return { value: JSON.stringify(service.safety(profile).events) };
          case "SetExternalEvents": {
            const events = parseSafetyEvents(call.parameters, new Date(now()).toISOString());
            await service.safetyHub.setExternal(events, profile, actor);
            return { value: "" };
          }
          case "ClearExternalEvents":
            await service.safetyHub.clearExternal(parseEventIds(call.parameters), profile, actor);
            return { value: "" };
        }
      } catch (err) {
        if (err instanceof SafetyHubInputError) {
          return { error: INVALID_VALUE, message: err.message };
        }
        throw err;
      }
      // The device hands only the names above.
      throw new Error(`no safety action ${call.name}`);
    },
  };
}
