/**
 * The safety hub from the shell (docs/safety.md#safety-events, docs/safety.md#waivers):
 * `obs-utils telemetry safety hold ID --reason TEXT`, `safety release ID`,
 * `safety waive TYPE --for 2h --reason TEXT` and `safety unwaive TYPE`, through the service's
 * write routes (`PUT /safety/events`, `DELETE /safety/events/{id}`, `PUT /safety/waivers`,
 * `DELETE /safety/waivers/{type}`) with the token of every write command. Each request carries
 * `Telemetry-Via: cli`, so the audit event says the change came from the command line
 * (docs/safety.md#audit). Exit 0 once done, 1 when the service refuses it or cannot be reached,
 * 2 for a usage error.
 *
 * @example Usage
 * ```ts
 * import { parseWaiverFor } from "./safety_hub.ts";
 * import assert from "node:assert/strict";
 *
 * assert.equal(parseWaiverFor("1h30m"), 5400);
 * ```
 *
 * @module
 */

// deno-lint-ignore-file no-console
import {
  clientFailure,
  type Connection,
  connection,
  CONNECTION_HELP,
  CONNECTION_OPTIONS,
  parse,
  printHelp,
  transport,
  UsageError,
} from "./common.ts";
import type { CallOptions } from "../client/transport.ts";
import {
  checkSafetyEvents,
  checkWaiver,
  MAX_WAIVER_S,
  MIN_WAIVER_S,
  type SafetyEvent,
  SafetyHubInputError,
  type Waiver,
} from "../core/safety_events.ts";
import { printable } from "../wire/terminal_text.ts";

/**
 * The `Source` of an event held by `safety hold` without `--source`: the same on every machine,
 * it says how the hold was made; the audit event names the peer (docs/cli.md#safety).
 *
 * @example Usage
 * ```ts
 * import { HOLD_SOURCE } from "./safety_hub.ts";
 * import assert from "node:assert/strict";
 *
 * assert.equal(HOLD_SOURCE, "obs-utils telemetry safety hold");
 * ```
 */
export const HOLD_SOURCE = "obs-utils telemetry safety hold";

/** Sent with every change, so its audit event says `"via": "cli"` (docs/safety.md#audit). */
const VIA_CLI = { "telemetry-via": "cli" };

/** The `--help` text of `safety hold`. */
export const HOLD_HELP: string = `Usage: obs-utils telemetry safety hold ID --reason TEXT [options]

Hold the site unsafe with the external event ID until 'safety release ID': a jammed
roof, work in the dome, a UPS on battery. The service saves it before it answers, so
it survives a restart. Setting an ID again replaces it. Exit 0 once held, 1 if the
service refuses it or cannot be reached, 2 for a usage error.

Options:
  --reason TEXT   Why, shown as 'external: SOURCE: TEXT' in every list of reasons
                  (at most 1000 characters)  [required]
  --source NAME   Who holds it  [default "${HOLD_SOURCE}"]
  --profile P     Hold only profile P (a critical_for name of the types file)
                  [default every profile]
${CONNECTION_HELP}
`;

/** The `--help` text of `safety release`. */
export const RELEASE_HELP: string = `Usage: obs-utils telemetry safety release ID [options]

Clear the external event ID, held by 'safety hold' or by any other program (GET /safety
lists them under "events"); the service's own events clear only when their condition
does. Exit 0 once cleared, 1 if there is no such external event or the service cannot
be reached, 2 for a usage error.

Options:
  --profile P     Release through profile P: only its own events and those of every
                  profile  [default any event]
${CONNECTION_HELP}
`;

/** The `--help` text of `safety waive`. */
export const WAIVE_HELP: string =
  `Usage: obs-utils telemetry safety waive TYPE --for DURATION --reason TEXT [options]

Stop judging the critical type TYPE for a while, for a dead sensor: the waiver shows in
every list of reasons, and when it ends the type is judged again (and latches as usual
if it is unsafe then). Setting it again replaces it. Exit 0 once set, 1 if the service
refuses it or cannot be reached, 2 for a usage error.

Options:
  --for DURATION  How long, from 60s to 12h: 90s, 30m, 2h, 1h30m  [required]
  --reason TEXT   Why, shown with the waiver (at most 200 characters)  [required]
${CONNECTION_HELP}
`;

/** The `--help` text of `safety unwaive`. */
export const UNWAIVE_HELP: string = `Usage: obs-utils telemetry safety unwaive TYPE [options]

End the waiver of TYPE early: it is judged again at once. Exit 0 once ended, 1 if TYPE
has no waiver in force or the service cannot be reached, 2 for a usage error.

Options:
${CONNECTION_HELP}
`;

const PROFILE_OPTION = { profile: { type: "string" } } as const;
const REASON_OPTION = { reason: { type: "string" } } as const;

/**
 * Parses the `--for` of `safety waive`: hours, minutes and seconds in that order, each a whole
 * number with its unit (`90s`, `30m`, `2h`, `1h30m`), from 60 s to 12 h (docs/safety.md#waivers).
 *
 * @param text The flag's text.
 * @returns Seconds.
 * @throws {UsageError} If it is not such a duration or is out of bounds; the message says what to
 *   write.
 *
 * @example Usage
 * ```ts
 * import { parseWaiverFor } from "./safety_hub.ts";
 * import assert from "node:assert/strict";
 *
 * assert.equal(parseWaiverFor("2h"), 7200);
 * assert.equal(parseWaiverFor("90s"), 90);
 * assert.throws(() => parseWaiverFor("13h"), /from 60s to 12h/);
 * assert.throws(() => parseWaiverFor("120"), /a duration such as/);
 * ```
 */
export function parseWaiverFor(text: string): number {
  const m = /^(?:(\d{1,5})h)?(?:(\d{1,7})m)?(?:(\d{1,9})s)?$/.exec(text.trim());
  if (!m || text.trim() === "") {
    throw new UsageError(
      `--for must be a duration such as 90s, 30m, 2h or 1h30m, not ${JSON.stringify(text)}`,
      "safety waive",
    );
  }
  const seconds = Number(m[1] ?? 0) * 3600 + Number(m[2] ?? 0) * 60 + Number(m[3] ?? 0);
  if (seconds < MIN_WAIVER_S || seconds > MAX_WAIVER_S) {
    throw new UsageError(
      `--for must be from 60s to 12h (a waiver is bounded, docs/safety.md#waivers), not ${
        JSON.stringify(text)
      }; set it again before it ends to keep it longer`,
      "safety waive",
    );
  }
  return seconds;
}

/**
 * Runs `obs-utils telemetry safety hold ID --reason TEXT`.
 *
 * @param args The arguments after `safety hold`.
 * @returns 0 once the service holds the event.
 * @throws {UsageError} For a bad flag, a missing ID or `--reason`, or an event the service would
 *   refuse.
 * @throws {Failure} If no service answers or it refuses the event.
 *
 * @example Usage
 * ```ts ignore
 * import { holdCommand } from "./safety_hub.ts";
 * Deno.exit(await holdCommand(["roof-jammed", "--reason", "roof motor stalled"]));
 * ```
 */
export async function holdCommand(args: string[]): Promise<number> {
  const command = "safety hold";
  const { values, positionals } = parse(command, args, {
    ...CONNECTION_OPTIONS,
    ...PROFILE_OPTION,
    ...REASON_OPTION,
    source: { type: "string" },
  }, true);
  if (values.help) return printHelp(HOLD_HELP);
  const id = onlyPositional(
    positionals,
    "ID",
    "safety hold roof-jammed --reason 'roof motor stalled'",
    command,
  );
  const reason = required(values.reason, "--reason", command);
  let event: SafetyEvent;
  try {
    [event] = checkSafetyEvents([{
      Source: values.source ?? HOLD_SOURCE,
      Name: "hold",
      Id: id,
      Type: "Safety",
      Trigger: "Active",
      Description: reason,
    }], new Date().toISOString()) as [SafetyEvent];
  } catch (err) {
    throw inputError(err, command);
  }
  const conn = connection(values, command);
  // Checked here with the core's own rules (a usage error before anything is sent); its time is
  // left to the service's clock.
  const { EventTimeUtc: _, ...wire } = event;
  await change(conn, "PUT", `/safety/events${profileQuery(values.profile)}`, {
    body: JSON.stringify([wire]),
  });
  const scope = values.profile === undefined ? "every profile" : `profile ${values.profile}`;
  console.log(printable(`held ${id} (${scope}): external: ${event.Source}: ${event.Description}`));
  console.log(printable(`release it with: obs-utils telemetry safety release ${id}`));
  return 0;
}

/**
 * Runs `obs-utils telemetry safety release ID`.
 *
 * @param args The arguments after `safety release`.
 * @returns 0 once the service cleared the event.
 * @throws {UsageError} For a bad flag or a missing ID.
 * @throws {Failure} If no service answers, or it has no such external event (404).
 *
 * @example Usage
 * ```ts ignore
 * import { releaseCommand } from "./safety_hub.ts";
 * Deno.exit(await releaseCommand(["roof-jammed"]));
 * ```
 */
export async function releaseCommand(args: string[]): Promise<number> {
  const command = "safety release";
  const { values, positionals } = parse(command, args, {
    ...CONNECTION_OPTIONS,
    ...PROFILE_OPTION,
  }, true);
  if (values.help) return printHelp(RELEASE_HELP);
  const id = onlyPositional(positionals, "ID", "safety release roof-jammed", command);
  const conn = connection(values, command);
  const path = `/safety/events/${encodeURIComponent(id)}${profileQuery(values.profile)}`;
  await change(conn, "DELETE", path, {});
  console.log(printable(`released ${id}`));
  return 0;
}

/**
 * Runs `obs-utils telemetry safety waive TYPE --for 2h --reason TEXT`.
 *
 * @param args The arguments after `safety waive`.
 * @returns 0 once the service holds the waiver.
 * @throws {UsageError} For a bad flag, a missing TYPE, `--for` or `--reason`, or one out of
 *   bounds.
 * @throws {Failure} If no service answers or it refuses the waiver (a type that is not critical).
 *
 * @example Usage
 * ```ts ignore
 * import { waiveCommand } from "./safety_hub.ts";
 * Deno.exit(await waiveCommand(["weather", "--for", "2h", "--reason", "anemometer iced"]));
 * ```
 */
export async function waiveCommand(args: string[]): Promise<number> {
  const command = "safety waive";
  const { values, positionals } = parse(command, args, {
    ...CONNECTION_OPTIONS,
    ...REASON_OPTION,
    for: { type: "string" },
  }, true);
  if (values.help) return printHelp(WAIVE_HELP);
  const type = onlyPositional(
    positionals,
    "TYPE",
    "safety waive weather --for 2h --reason 'anemometer iced'",
    command,
  );
  const forS = parseWaiverFor(required(values.for, "--for", command));
  const reason = required(values.reason, "--reason", command);
  try {
    checkWaiver(forS, reason);
  } catch (err) {
    throw inputError(err, command);
  }
  const conn = connection(values, command);
  const { value } = await change(conn, "PUT", "/safety/waivers", {
    body: JSON.stringify({ type, for_s: forS, reason }),
  });
  const waiver = value as Waiver;
  console.log(printable(`waived ${waiver.type} until ${waiver.until} (${waiver.reason})`));
  console.log(printable(`end it early with: obs-utils telemetry safety unwaive ${type}`));
  return 0;
}

/**
 * Runs `obs-utils telemetry safety unwaive TYPE`.
 *
 * @param args The arguments after `safety unwaive`.
 * @returns 0 once the waiver ended.
 * @throws {UsageError} For a bad flag or a missing TYPE.
 * @throws {Failure} If no service answers, or the type has no waiver in force (404).
 *
 * @example Usage
 * ```ts ignore
 * import { unwaiveCommand } from "./safety_hub.ts";
 * Deno.exit(await unwaiveCommand(["weather"]));
 * ```
 */
export async function unwaiveCommand(args: string[]): Promise<number> {
  const command = "safety unwaive";
  const { values, positionals } = parse(command, args, CONNECTION_OPTIONS, true);
  if (values.help) return printHelp(UNWAIVE_HELP);
  const type = onlyPositional(positionals, "TYPE", "safety unwaive weather", command);
  const conn = connection(values, command);
  await change(conn, "DELETE", `/safety/waivers/${encodeURIComponent(type)}`, {});
  console.log(printable(`ended the waiver of ${type}; it is judged again`));
  return 0;
}

/** One change through the hub's write routes, marked as the command line's. */
async function change(
  conn: Connection,
  method: "PUT" | "DELETE",
  path: string,
  options: CallOptions,
): Promise<{ value: unknown }> {
  try {
    return await transport(conn).call(method, path, { ...options, headers: VIA_CLI });
  } catch (err) {
    throw clientFailure(err, conn);
  }
}

/**
 * `?profile=P` for a `--profile`, nothing without one.
 *
 * @param profile The flag's value.
 * @returns The query, percent-encoded.
 *
 * @example Usage
 * ```ts
 * import { profileQuery } from "./safety_hub.ts";
 * import assert from "node:assert/strict";
 *
 * assert.equal(profileQuery("north dome"), "?profile=north%20dome");
 * assert.equal(profileQuery(undefined), "");
 * ```
 */
export function profileQuery(profile: string | undefined): string {
  return profile === undefined ? "" : `?profile=${encodeURIComponent(profile)}`;
}

/** The one positional argument of a subcommand. */
function onlyPositional(
  positionals: readonly string[],
  name: string,
  example: string,
  command: string,
): string {
  if (positionals.length === 1 && positionals[0] !== "") return positionals[0]!;
  throw new UsageError(
    positionals.length === 0 || positionals[0] === ""
      ? `missing ${name}, e.g. 'obs-utils telemetry ${example}'`
      : `expected one ${name}, got ${positionals.length} arguments; quote an argument that holds spaces`,
    command,
  );
}

/** A flag the subcommand cannot do without. */
function required(value: string | undefined, flag: string, command: string): string {
  if (value !== undefined && value.trim() !== "") return value;
  throw new UsageError(
    `${flag} is required${value === undefined ? "" : " and may not be empty"}`,
    command,
  );
}

/** The core's refusal of an input, in the words of the command's flags. */
function inputError(err: unknown, command: string): unknown {
  if (!(err instanceof SafetyHubInputError)) return err;
  const message = err.message.replace(/^event 0: /, "")
    .replace(/^(the )?Id /, "$1ID ").replace(/^Source /, "--source ").replace(
      /^Description /,
      "--reason ",
    )
    .replace(/^a waiver needs a reason of/, "--reason must be");
  return new UsageError(message, command);
}
