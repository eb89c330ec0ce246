/**
 * `obs-utils telemetry check`: asks the service whether the unit is healthy (`GET /check`,
 * docs/types.md) and exits 0 or 1, for cron and uptime scripts. A failing check prints one line
 * per reason; `--quiet` prints nothing while all is well, so cron mails only on trouble.
 *
 * @example Usage
 * ```ts ignore
 * import { checkCommand } from "./check.ts";
 * Deno.exit(await checkCommand(["--quiet"]));
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
import { formatBytes } from "../store/disk.ts";

/** The `--help` text of `check`. */
export const CHECK_HELP: string = `Usage: obs-utils telemetry check [options]

Ask the service whether every critical type (see 'run --types') is fresh and out of
alarm, and the disk has room (--min-free). Exit 0 when it is, 1 when it is not or
no service answers, with one line per failing reason.

Options:
  --quiet         Print nothing when the check passes (for cron)
  --json          Print the GET /check answer as JSON
${CONNECTION_HELP}
`;

/**
 * Runs `obs-utils telemetry check`.
 *
 * @param args The arguments after `telemetry check`.
 * @returns 0 when the check passes, 1 when it fails.
 * @throws {UsageError} For a bad flag or an argument.
 * @throws {Failure} If no service answers or it answers an error.
 *
 * @example Usage
 * ```ts ignore
 * import { checkCommand } from "./check.ts";
 * Deno.exit(await checkCommand([]));
 * ```
 */
export async function checkCommand(args: string[]): Promise<number> {
  const { values, positionals } = parse("check", args, {
    ...CONNECTION_OPTIONS,
    quiet: { type: "boolean", short: "q" },
    json: { type: "boolean" },
  }, true);
  if (values.help) return printHelp(CHECK_HELP);
  if (positionals.length > 0) {
    throw new UsageError(`unexpected argument "${positionals[0]}"; check takes no TYPE`, "check");
  }
  const conn = connection(values, "check");
  let result;
  try {
    result = await client(conn).check();
  } catch (err) {
    throw clientFailure(err, conn);
  }
  if (values.json) {
    printJson(JSON.stringify(result));
    return result.ok ? 0 : 1;
  }
  if (result.ok) {
    if (!values.quiet) {
      const critical = Object.keys(result.critical).length;
      const disk = result.disk_free_bytes === null
        ? "free disk space unknown"
        : `${formatBytes(result.disk_free_bytes)} free`;
      console.log(
        `ok: ${counted(critical, "critical type")} fresh and out of alarm; ${disk}`,
      );
    }
    return 0;
  }
  for (const line of result.failing) console.log(printable(`FAIL ${line}`));
  return 1;
}
