/**
 * `obs-utils telemetry post`: records one event from the shell and prints its envelope.
 *
 * @example Usage
 * ```ts ignore
 * import { postCommand } from "./_cli_post.ts";
 * Deno.exit(await postCommand(["weather", "--data", '{"wind_mps": 2.1}']));
 * ```
 *
 * @module
 */

// deno-lint-ignore-file no-console
import {
  client,
  clientFailure,
  connection,
  CONNECTION_OPTIONS,
  parse,
  printHelp,
  UsageError,
} from "./_cli_common.ts";

/** The `--help` text of `post`. */
export const POST_HELP: string = `Usage: obs-utils telemetry post TYPE [options]

Record one event and print its envelope.

Options:
  --data JSON     The payload, a JSON object ('-' reads it from stdin)  [default {}]
  --meta JSON     Caller metadata, a JSON object
  --ts TIME       The event's own time, ISO 8601 with Z or an offset [default now]
  --ephemeral     Update the current snapshot only; do not write to disk
  --host HOST     [env OBS_TELEMETRY_HOST, default localhost]
  --port PORT     [env OBS_TELEMETRY_PORT, default 6562]
  --token TOKEN   [env OBS_TELEMETRY_TOKEN]
  --tls           Use HTTPS (a server run with --tls-cert; trust its CA with DENO_CERT=FILE)
  -h, --help      Show this help
`;

function parseJsonObject(text: string, flag: string, command: string): Record<string, unknown> {
  let value: unknown;
  try {
    value = JSON.parse(text);
  } catch (err) {
    throw new UsageError(
      `${flag} is not valid JSON (${
        (err as Error).message
      }); quote it, e.g. ${flag} '{"wind_mps": 2.1}'`,
      command,
    );
  }
  if (typeof value !== "object" || value === null || Array.isArray(value)) {
    throw new UsageError(`${flag} must be a JSON object such as '{"wind_mps": 2.1}'`, command);
  }
  return value as Record<string, unknown>;
}

/**
 * Runs `obs-utils telemetry post`.
 *
 * @param args The arguments after `telemetry post`.
 * @returns The exit code, 0 once the service has recorded the event.
 * @throws {UsageError} For a bad flag, a missing TYPE or a payload that is not a JSON object.
 * @throws {Failure} If no service answers or it refuses the event.
 *
 * @example Usage
 * ```ts ignore
 * import { postCommand } from "./_cli_post.ts";
 * Deno.exit(await postCommand(["status", "--ephemeral"]));
 * ```
 */
export async function postCommand(args: string[]): Promise<number> {
  const { values, positionals } = parse("post", args, {
    ...CONNECTION_OPTIONS,
    data: { type: "string" },
    meta: { type: "string" },
    ts: { type: "string" },
    ephemeral: { type: "boolean" },
  }, true);
  if (values.help) return printHelp(POST_HELP);
  if (positionals.length !== 1) {
    throw new UsageError(
      positionals.length === 0 ? "missing TYPE, e.g. 'post weather'" : "expected one TYPE",
      "post",
    );
  }
  const type = positionals[0]!;
  let dataText = values.data ?? "{}";
  if (dataText === "-") dataText = await new Response(Deno.stdin.readable).text();
  const data = parseJsonObject(dataText, "--data", "post");
  const meta = values.meta === undefined
    ? undefined
    : parseJsonObject(values.meta, "--meta", "post");
  const conn = connection(values, "post");
  try {
    const event = await client(conn).postEvent(type, data, {
      ...(meta ? { meta } : {}),
      ...(values.ts !== undefined ? { ts: values.ts } : {}),
      ...(values.ephemeral ? { storePermanently: false } : {}),
    });
    console.log(JSON.stringify(event));
  } catch (err) {
    if (err instanceof TypeError) throw new UsageError(err.message, "post");
    throw clientFailure(err, conn);
  }
  return 0;
}
