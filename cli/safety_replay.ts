/**
 * `obs-utils telemetry safety replay`: the safety verdict judged again over the stored site
 * stream with a types file, by the service's own judge (`core/safety_replay.ts`), to try a rule
 * change on the nights already recorded (docs/safety.md#replay). Prints every change of the
 * verdict, a summary, and the changes that differ from the `telemetry.safety` events recorded.
 * Reads the files only, as `read` does (`store/history.ts`): no service, no lock, no write.
 *
 * @example Usage
 * ```ts ignore
 * import { safetyReplayCommand } from "./safety_replay.ts";
 * Deno.exit(await safetyReplayCommand(["--site-dir", "/srv/telemetry", "--since", "2026-11-26"]));
 * ```
 *
 * @module
 */

// deno-lint-ignore-file no-console
import { readEnv } from "../wire/address.ts";
import { printable } from "../wire/terminal_text.ts";
import { readHistoryBatches } from "../store/history.ts";
import {
  loadTypes,
  safetyProfiles,
  SITE_PROFILE,
  TypesFileError,
  type TypesRegistry,
} from "../core/types_registry.ts";
import { type ReplayReport, SafetyReplay } from "../core/safety_replay.ts";
import { DEFAULT_SITE_DIR } from "./flags.ts";
import {
  counted,
  Failure,
  HELP_OPTION,
  parse,
  printHelp,
  printJson,
  UsageError,
} from "./common.ts";
import { chosenTimeZone, recordedTimeZone, timeBounds } from "./read.ts";

const COMMAND = "safety replay";

/** The `--help` text of `safety replay`. */
export const SAFETY_REPLAY_HELP: string =
  `Usage: obs-utils telemetry safety replay --since T [options]

Judge the stored site stream again with a types file, as the service judges it
live, and print every change of the verdict, a summary (hours safe and unsafe,
changes, the longest safe stretch) and the changes that differ from the
telemetry.safety events recorded then. Reads the files only: no service needed.

Options:
  --site-dir DIR   Telemetry directory [env OBS_TELEMETRY_SITE_DIR, default telemetry]
  --since T        From T (required)
  --until T        Up to T [default: the last stored line]
  --types FILE     Types registry to judge with [env OBS_TELEMETRY_TYPES]
  --profile P      Safety profile to follow [default site]
  --json           Print one JSON document: changes, summary, differences
  -h, --help       Show this help

T is ISO 8601 with a zone (2026-05-10T03:00:00Z), a night's date (2026-05-10: from
that date's local noon in the site's zone) or a duration back from now (90m, 12h, 7d).
Exit 0 when replayed, 1 when the files cannot be read, 2 for a usage error.
`;

/**
 * Runs `obs-utils telemetry safety replay`.
 *
 * @param args The arguments after `telemetry safety replay`.
 * @returns 0 once the range is replayed, whatever the verdicts.
 * @throws {UsageError} For a bad flag or time, a missing `--since`, a missing or invalid types
 *   file, an unknown profile, or a site directory that does not exist.
 * @throws {Failure} When the site directory cannot be read.
 *
 * @example Usage
 * ```ts ignore
 * import { safetyReplayCommand } from "./safety_replay.ts";
 * Deno.exit(await safetyReplayCommand(["--since", "7d", "--types", "types-1800.json"]));
 * ```
 */
export async function safetyReplayCommand(args: string[]): Promise<number> {
  const { values, positionals } = parse(COMMAND, args, {
    ...HELP_OPTION,
    "site-dir": { type: "string" },
    since: { type: "string" },
    until: { type: "string" },
    types: { type: "string" },
    profile: { type: "string" },
    json: { type: "boolean" },
  }, true);
  if (values.help) return printHelp(SAFETY_REPLAY_HELP);
  if (positionals.length > 0) {
    throw new UsageError(`unexpected argument "${positionals[0]}"; replay takes none`, COMMAND);
  }
  if (values.since === undefined) {
    throw new UsageError("--since is required: the start of the range to replay", COMMAND);
  }
  const registry = await registryOf(values.types ?? readEnv("OBS_TELEMETRY_TYPES"));
  const profile = values.profile ?? SITE_PROFILE;
  const profiles = safetyProfiles(registry);
  if (!profiles.includes(profile)) {
    throw new UsageError(
      `--profile ${JSON.stringify(profile)} is not a profile of the types file; its profiles are ${
        profiles.join(", ")
      } (critical_for)`,
      COMMAND,
    );
  }
  const siteDir = values["site-dir"] ?? readEnv("OBS_TELEMETRY_SITE_DIR") ?? DEFAULT_SITE_DIR;
  const zone = chosenTimeZone(undefined, COMMAND);
  await checkSiteDir(siteDir);
  const timeZone = zone ?? await recordedTimeZone(siteDir);
  const { since, until } = timeBounds(values.since, values.until, timeZone, COMMAND);
  const replay = new SafetyReplay(registry, { profile, sinceMs: since!, untilMs: until });
  try {
    const batches = readHistoryBatches(siteDir, {
      types: replay.types,
      since: replay.readFromMs,
      until,
      timeZone,
      onDamage: (damage) =>
        console.error(printable(`warning: ${damage.message}; what can be read of it is replayed.`)),
    });
    for await (const lines of batches) for (const line of lines) replay.line(line);
  } catch (err) {
    if (err instanceof Deno.errors.PermissionDenied || err instanceof Deno.errors.NotFound) {
      throw new Failure(`Cannot read the site directory ${siteDir}: ${err.message}`);
    }
    throw err;
  }
  const report = replay.finish();
  if (values.json) printJson(JSON.stringify(report));
  else printReport(report, siteDir, values.types ?? readEnv("OBS_TELEMETRY_TYPES")!);
  return 0;
}

/** The registry to judge with; a missing or invalid file is a usage error naming it. */
async function registryOf(file: string | undefined): Promise<TypesRegistry> {
  if (file === undefined) {
    throw new UsageError(
      "no types file to judge with: pass --types FILE or set OBS_TELEMETRY_TYPES",
      COMMAND,
    );
  }
  try {
    return await loadTypes(file);
  } catch (err) {
    if (err instanceof TypesFileError) throw new UsageError(err.message, COMMAND);
    throw err;
  }
}

/** A site directory that does not exist is a usage error; one that cannot be read, a failure. */
async function checkSiteDir(siteDir: string): Promise<void> {
  let info: Deno.FileInfo;
  try {
    info = await Deno.stat(siteDir);
  } catch (err) {
    if (err instanceof Deno.errors.NotFound) {
      throw new UsageError(
        `the site directory ${siteDir} does not exist; pass it with --site-dir or OBS_TELEMETRY_SITE_DIR`,
        COMMAND,
      );
    }
    throw new Failure(
      `Cannot read the site directory ${siteDir}: ${err instanceof Error ? err.message : err}`,
    );
  }
  if (!info.isDirectory) {
    throw new UsageError(
      `${siteDir} is not a directory; pass the site directory with --site-dir`,
      COMMAND,
    );
  }
}

/** The verdict as one line: time, SAFE or UNSAFE, reasons. */
function verdictLine(ts: string, safe: boolean, reasons: readonly string[], note = ""): string {
  const text = [ts, safe ? "SAFE  " : "UNSAFE", note, reasons.join("; ")].filter((x) => x !== "");
  return printable(text.join("  ").trimEnd());
}

function printReport(report: ReplayReport, siteDir: string, typesFile: string): void {
  const { changes, summary, differences } = report;
  console.log(printable(
    `Replay of ${siteDir} with ${typesFile}, profile ${summary.profile}: ${summary.since} to ${summary.until}`,
  ));
  console.log(verdictLine(summary.since, summary.start.safe, summary.start.reasons, "(start)"));
  for (const c of changes) console.log(verdictLine(c.ts, c.safe, c.reasons));
  const longest = summary.longest_safe;
  console.log(
    `Safe ${summary.safe_hours.toFixed(2)} h, unsafe ${summary.unsafe_hours.toFixed(2)} h, ${
      counted(summary.changes, "change")
    }; longest safe stretch ${
      longest ? `${longest.start} to ${longest.end} (${longest.hours.toFixed(2)} h)` : "none"
    }`,
  );
  const against = `Against the ${
    counted(summary.recorded_changes, "telemetry.safety change")
  } recorded (within ${summary.tolerance_s} s)`;
  if (differences.length === 0) {
    console.log(`${against}: no differences`);
    return;
  }
  console.log(`${against}: ${counted(differences.length, "difference")}`);
  for (const d of differences) {
    const side = d.kind === "recorded_only" ? "recorded only:" : "replayed only:";
    console.log(`  ${side.padEnd(15)}${verdictLine(d.ts, d.safe, d.reasons)}`);
  }
}
