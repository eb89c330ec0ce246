/**
 * `obs-utils telemetry safety`: asks the service for its latched safety verdict (`GET /safety`,
 * docs/safety.md), of the site or of one profile (`--profile`, docs/safety.md#profiles), and
 * exits 0 when safe, 1 when unsafe or no service answers, for roof scripts and cron. Reasons are
 * printed one a line, made safe for a terminal. Its subcommands (`hold`, `release`, `waive`,
 * `unwaive`: `safety_hub.ts`) change the safety hub; they are the rows of one table here.
 *
 * @example Usage
 * ```ts ignore
 * import { safetyCommand } from "./safety.ts";
 * Deno.exit(await safetyCommand(["--quiet"]));
 * ```
 *
 * @module
 */

// deno-lint-ignore-file no-console
import {
  client,
  clientFailure,
  closest,
  connection,
  CONNECTION_HELP,
  CONNECTION_OPTIONS,
  counted,
  parse,
  printHelp,
  printJson,
  UsageError,
} from "./common.ts";
import type { SafetyInfo } from "../client/types.ts";
import { printable } from "../wire/terminal_text.ts";
import { INTERNAL_ID_PREFIX } from "../core/safety_events.ts";
import { holdCommand, releaseCommand, unwaiveCommand, waiveCommand } from "./safety_hub.ts";
import { safetyReplayCommand } from "./safety_replay.ts";

/** One subcommand of `safety` (docs/cli.md#safety). */
interface SafetySubcommand {
  /** Its name and arguments as the help of `safety` lists them. */
  usage: string;
  /** What it does, on one line. */
  summary: string;
  /** Runs it with the arguments after its name (its own `--help` included): its exit code. */
  run: (args: string[]) => Promise<number>;
}

/**
 * The subcommands of `safety`, in the order its help lists them: a new one is one more row.
 * `safety NAME ...` runs the row's `run` with the arguments after NAME.
 */
const SUBCOMMANDS: Readonly<Record<string, SafetySubcommand>> = {
  hold: {
    usage: "hold ID --reason TEXT",
    summary: "Hold the site unsafe with an external event until released",
    run: holdCommand,
  },
  release: {
    usage: "release ID",
    summary: "Clear an external event (held by 'hold' or any program)",
    run: releaseCommand,
  },
  waive: {
    usage: "waive TYPE --for 2h --reason TEXT",
    summary: "Stop judging a critical type for 60s to 12h",
    run: waiveCommand,
  },
  unwaive: { usage: "unwaive TYPE", summary: "End a waiver early", run: unwaiveCommand },
  replay: {
    usage: "replay --since T",
    summary: "Judge the stored nights again with a types file",
    run: safetyReplayCommand,
  },
};

/** The help lines of {@linkcode SUBCOMMANDS}, aligned. */
function subcommandLines(): string {
  const rows = Object.values(SUBCOMMANDS);
  const width = Math.max(...rows.map((row) => row.usage.length)) + 2;
  return rows.map((row) => `  ${row.usage.padEnd(width)}${row.summary}`).join("\n");
}

/** The `--help` text of `safety`. */
export const SAFETY_HELP: string = `Usage: obs-utils telemetry safety [options]
       obs-utils telemetry safety SUBCOMMAND ... (see 'safety SUBCOMMAND --help')

Ask the service whether the site is safe: every critical type (see 'run --types')
fresh, out of alarm and past its clear_after_s, and no external event holding it.
Exit 0 when safe, 1 when unsafe or no service answers, 2 for a usage error; one
line per reason, and one per waiver.

Subcommands:
${subcommandLines()}

Options:
  --profile P     The verdict of profile P (a critical_for name of the types file)
                  [default site]
  --quiet         Print nothing when the site is safe (for cron)
  --json          Print the GET /safety answer as JSON
${CONNECTION_HELP}
`;

/**
 * The reason lines as printed: an external event's line ends with its `Id`, the one
 * `safety release` takes (docs/safety.md#safety-events).
 */
function reasonLines(verdict: SafetyInfo): string[] {
  const external = verdict.events.filter((e) => !e.Id.startsWith(INTERNAL_ID_PREFIX));
  return verdict.reasons.map((reason) => {
    const at = external.findIndex((e) => reason === `external: ${e.Source}: ${e.Description}`);
    if (at < 0) return `  ${reason}`;
    const [event] = external.splice(at, 1);
    return `  ${reason} (Id ${event!.Id})`;
  });
}

/**
 * Runs `obs-utils telemetry safety`, or one of its subcommands.
 *
 * @param args The arguments after `telemetry safety`.
 * @returns 0 when the site (or profile) is safe, 1 when it is not; a subcommand's code.
 * @throws {UsageError} For a bad flag, an unknown subcommand or an argument.
 * @throws {Failure} If no service answers or it answers an error.
 *
 * @example Usage
 * ```ts ignore
 * import { safetyCommand } from "./safety.ts";
 * Deno.exit(await safetyCommand([]));
 * ```
 */
export async function safetyCommand(args: string[]): Promise<number> {
  const name = args[0];
  if (name !== undefined && !name.startsWith("-")) {
    const subcommand = Object.hasOwn(SUBCOMMANDS, name) ? SUBCOMMANDS[name] : undefined;
    if (subcommand) return await subcommand.run(args.slice(1));
    const names = Object.keys(SUBCOMMANDS);
    const guess = closest(name, names);
    throw new UsageError(
      `unknown subcommand "${name}"; ${
        guess ? `did you mean ${guess}?` : `use ${names.join(", ")}, or none for the verdict`
      }`,
      "safety",
    );
  }
  const { values, positionals } = parse("safety", args, {
    ...CONNECTION_OPTIONS,
    profile: { type: "string" },
    quiet: { type: "boolean", short: "q" },
    json: { type: "boolean" },
  }, true);
  if (values.help) return printHelp(SAFETY_HELP);
  if (positionals.length > 0) {
    throw new UsageError(
      `unexpected argument "${positionals[0]}"; a subcommand (${
        Object.keys(SUBCOMMANDS).join(", ")
      }) comes right after safety`,
      "safety",
    );
  }
  const conn = connection(values, "safety");
  let verdict: SafetyInfo;
  try {
    verdict = await client(conn).safety(
      values.profile === undefined ? {} : { profile: values.profile },
    );
  } catch (err) {
    throw clientFailure(err, conn);
  }
  if (values.json) {
    printJson(JSON.stringify(verdict));
    return verdict.safe ? 0 : 1;
  }
  const of = values.profile === undefined ? "" : ` (profile ${values.profile})`;
  if (verdict.safe) {
    if (!values.quiet) {
      const waived = verdict.waivers.length;
      const fine = Object.keys(verdict.types).length - waived;
      console.log(
        printable(
          `SAFE since ${verdict.since}${of}: ${counted(fine, "critical type")} fine${
            waived > 0 ? `, ${waived} waived` : ""
          }`,
        ),
      );
      // Safe with a waiver: its line says which type is not judged, and until when.
      for (const line of reasonLines(verdict)) console.log(printable(line));
    }
    return 0;
  }
  console.log(printable(`UNSAFE since ${verdict.since}${of}`));
  for (const line of reasonLines(verdict)) console.log(printable(line));
  return 1;
}
