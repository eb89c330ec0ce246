/**
 * The launcher behind `deno task publish`: checks the flags, then runs the publisher again under
 * exactly the permissions they need (`publisherArgs()`, docs/publish.md, "Permissions"), with
 * the broker URL and the token in its environment, never on its command line. Help or a bad flag
 * are answered here, by the command itself.
 *
 * Usage: deno task publish --to mqtt://host:port [--prefix P] [--discovery-prefix P | --no-discovery]
 *   [--ca FILE] [--host H] [--port P] [--token T] [--tls]
 *
 * @module
 */

import { parseArgs } from "node:util";
import { readEnv } from "../wire/address.ts";
import { PUBLISH_OPTIONS } from "./publish_help.ts";
import { parsePort } from "./flags.ts";
import { launch, withoutTaskSeparator } from "./launch.ts";
import { runCli } from "./main.ts";
import { publisherArgs, publisherEnv } from "../publish/publish.ts";
import { PUBLISH_TO_ENV } from "../publish/options.ts";

/**
 * The `deno` arguments and environment of the scoped publisher for `args` (the flags after
 * `publish`), or `undefined` when the command itself should answer (help, a bad flag).
 *
 * @param args The flags.
 * @returns The arguments after `deno` and the variables to set, or `undefined`.
 *
 * @example Usage
 * ```ts
 * import { publishLaunchArgs } from "./publish_launch.ts";
 * import assert from "node:assert/strict";
 *
 * assert.equal(publishLaunchArgs(["--help"]), undefined);
 * const launched = publishLaunchArgs(["--to", "mqtt://u:p@127.0.0.1:1883", "--port", "7000"])!;
 * assert.ok(launched.args.includes("--allow-net=127.0.0.1:1883,localhost:7000"));
 * assert.ok(!launched.args.some((arg) => arg.includes("u:p@")));
 * assert.equal(launched.env.OBS_TELEMETRY_PUBLISH, "mqtt://u:p@127.0.0.1:1883");
 * ```
 */
export function publishLaunchArgs(
  args: readonly string[],
): { args: string[]; env: Record<string, string> } | undefined {
  let values;
  try {
    values = parseArgs({
      args: [...args],
      options: { ...PUBLISH_OPTIONS, help: { type: "boolean", short: "h" } },
      strict: true,
      allowPositionals: false,
    }).values;
  } catch {
    return undefined;
  }
  const to = values.to ?? readEnv(PUBLISH_TO_ENV);
  if (values.help || to === undefined) return undefined;
  try {
    const port = values.port ?? readEnv("OBS_TELEMETRY_PORT");
    const token = values.token ?? readEnv("OBS_TELEMETRY_TOKEN");
    const options = {
      to,
      ...(values.ca !== undefined ? { ca: values.ca } : {}),
      ...(values.host !== undefined ? { host: values.host } : {}),
      ...(port !== undefined ? { port: parsePort(port) } : {}),
      ...(values.prefix !== undefined ? { prefix: values.prefix } : {}),
      ...(values["discovery-prefix"] !== undefined
        ? { discoveryPrefix: values["discovery-prefix"] }
        : {}),
      ...(values["no-discovery"] ? { discovery: false } : {}),
      ...(values.tls ? { tls: true } : {}),
      ...(token !== undefined ? { token } : {}),
    };
    return { args: publisherArgs(options), env: publisherEnv(options) };
  } catch {
    return undefined;
  }
}

if (import.meta.main) {
  const given = withoutTaskSeparator(Deno.args);
  const launched = publishLaunchArgs(given);
  Deno.exit(
    launched === undefined
      ? await runCli(["telemetry", "publish", ...given])
      : await launch(launched.args, "the publisher", launched.env),
  );
}
