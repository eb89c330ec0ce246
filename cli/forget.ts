/**
 * `obs-utils telemetry forget TYPE`: removes a type from the running service's current snapshot
 * (docs/http-api.md, `DELETE /current/{type}`). The stored files keep every event.
 *
 * @example Usage
 * ```ts ignore
 * import { forgetCommand } from "./forget.ts";
 * Deno.exit(await forgetCommand(["old-sensor"]));
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
  Failure,
  parse,
  printHelp,
  UsageError,
} from "./common.ts";

/** The `--help` text of `forget`. */
export const FORGET_HELP: string = `Usage: obs-utils telemetry forget TYPE [options]

Remove TYPE from the current snapshot: it leaves 'current', the metrics and the dashboard, across
restarts too, until a new event of TYPE arrives. The stored files keep every event.

Options:
${CONNECTION_HELP}
`;

/**
 * Runs `obs-utils telemetry forget`.
 *
 * @param args The arguments after `telemetry forget`.
 * @returns The exit code, 0 once the type is forgotten.
 * @throws {UsageError} For a bad flag or a missing TYPE.
 * @throws {Failure} If no service answers, or the snapshot has no such type.
 *
 * @example Usage
 * ```ts ignore
 * import { forgetCommand } from "./forget.ts";
 * Deno.exit(await forgetCommand(["weather", "--port", "7000"]));
 * ```
 */
export async function forgetCommand(args: string[]): Promise<number> {
  const { values, positionals } = parse("forget", args, CONNECTION_OPTIONS, true);
  if (values.help) return printHelp(FORGET_HELP);
  if (positionals.length !== 1) {
    throw new UsageError(
      positionals.length === 0 ? "missing TYPE, e.g. 'forget weather'" : "expected one TYPE",
      "forget",
    );
  }
  const type = positionals[0]!;
  const conn = connection(values, "forget");
  let removed: boolean;
  try {
    removed = await client(conn).forget(type);
  } catch (err) {
    if (err instanceof TypeError) throw new UsageError(err.message, "forget");
    throw clientFailure(err, conn);
  }
  if (!removed) {
    throw new Failure(
      `the current snapshot has no type ${
        JSON.stringify(type)
      }; 'obs-utils telemetry current' lists the types it has`,
    );
  }
  console.log(`forgot ${JSON.stringify(type)}; it returns with its next event`);
  return 0;
}
