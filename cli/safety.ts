/**
 * `obs-utils telemetry safety`: asks the service for its latched safety verdict (`GET /safety`,
 * docs/safety.md) and exits 0 when safe, 1 when unsafe or no service answers, for roof scripts
 * and cron. Reasons are printed one a line, made safe for a terminal.
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
  connection,
  CONNECTION_HELP,
  CONNECTION_OPTIONS,
  counted,
  parse,
  printHelp,
  printJson,
  UsageError,
} from "./common.ts";
import { printable } from "../wire/terminal_text.ts";
import { safetyReplayCommand } from "./safety_replay.ts";

/** The `--help` text of `safety`. */
export const SAFETY_HELP: string = `Usage: obs-utils telemetry safety [options]
       obs-utils telemetry safety replay --since T [options]

Ask the service whether the site is safe: every critical type (see 'run --types')
fresh, out of alarm and past its clear_after_s. Exit 0 when safe, 1 when unsafe or
no service answers, 2 for a usage error; one line per reason. 'safety replay'
judges the stored nights again with a types file (see 'safety replay --help').

Options:
  --quiet         Print nothing when the site is safe (for cron)
  --json          Print the GET /safety answer as JSON
${CONNECTION_HELP}
`;

/**
 * Runs `obs-utils telemetry safety`.
 *
 * @param args The arguments after `telemetry safety`.
 * @returns 0 when the site is safe, 1 when it is not.
 * @throws {UsageError} For a bad flag or an argument.
 * @throws {Failure} If no service answers or it answers an error.
 *
 * @example Usage
 * ```ts ignore
 * import { safetyCommand } from "./safety.ts";
 * Deno.exit(await safetyCommand([]));
 * ```
 */
export async function safetyCommand(args: string[]): Promise<number> {
  if (args[0] === "replay") return await safetyReplayCommand(args.slice(1));
  const { values, positionals } = parse("safety", args, {
    ...CONNECTION_OPTIONS,
    quiet: { type: "boolean", short: "q" },
    json: { type: "boolean" },
  }, true);
  if (values.help) return printHelp(SAFETY_HELP);
  if (positionals.length > 0) {
    throw new UsageError(`unexpected argument "${positionals[0]}"; safety takes none`, "safety");
  }
  const conn = connection(values, "safety");
  let verdict;
  try {
    verdict = await client(conn).safety();
  } catch (err) {
    throw clientFailure(err, conn);
  }
  if (values.json) {
    printJson(JSON.stringify(verdict));
    return verdict.safe ? 0 : 1;
  }
  if (verdict.safe) {
    if (!values.quiet) {
      const critical = Object.keys(verdict.types).length;
      console.log(
        printable(`SAFE since ${verdict.since}: ${counted(critical, "critical type")} fine`),
      );
    }
    return 0;
  }
  console.log(printable(`UNSAFE since ${verdict.since}`));
  for (const reason of verdict.reasons) console.log(printable(`  ${reason}`));
  return 1;
}
