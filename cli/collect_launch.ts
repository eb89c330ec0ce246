/**
 * The launcher behind `deno task collect`: reads the config, then runs the collector again
 * under exactly the permissions that config needs (`collectorArgs()`, docs/collect.md,
 * "Permissions"). Help, a bad flag or a bad config are answered here, by the command itself.
 *
 * Usage: deno task collect --config FILE [--host H] [--port P] [--token T] [--tls] [--once]
 *
 * @module
 */

import { parseArgs } from "node:util";
import { readEnv } from "../wire/address.ts";
import { COLLECT_OPTIONS } from "./collect_help.ts";
import { parsePort } from "./flags.ts";
import { launch, withoutTaskSeparator } from "./launch.ts";
import { runCli } from "./main.ts";
import { collectorArgs } from "../collect/collect.ts";

/**
 * The `deno` arguments of the scoped collector for `args` (the flags after `collect`), or
 * `undefined` when the command itself should answer (help, a bad flag, a bad config).
 *
 * @param args The flags.
 * @returns The arguments after `deno`, or `undefined`.
 *
 * @example Usage
 * ```ts
 * import { collectLaunchArgs } from "./collect_launch.ts";
 * import assert from "node:assert/strict";
 *
 * assert.equal(collectLaunchArgs(["--help"]), undefined);
 * ```
 */
export function collectLaunchArgs(args: readonly string[]): string[] | undefined {
  let values;
  try {
    values = parseArgs({
      args: [...args],
      options: { ...COLLECT_OPTIONS, help: { type: "boolean", short: "h" } },
      strict: true,
      allowPositionals: false,
    }).values;
  } catch {
    return undefined;
  }
  const config = values.config ?? readEnv("OBS_TELEMETRY_COLLECT");
  if (values.help || config === undefined) return undefined;
  try {
    const port = values.port ?? readEnv("OBS_TELEMETRY_PORT");
    return [
      ...collectorArgs({
        config,
        ...(values.host !== undefined ? { host: values.host } : {}),
        ...(port !== undefined ? { port: parsePort(port) } : {}),
      }),
      ...(values.once ? ["--once"] : []),
      ...(values.tls ? ["--tls"] : []),
      ...(values.token !== undefined ? ["--token", values.token] : []),
    ];
  } catch {
    return undefined;
  }
}

if (import.meta.main) {
  const given = withoutTaskSeparator(Deno.args);
  const args = collectLaunchArgs(given);
  Deno.exit(
    args === undefined
      ? await runCli(["telemetry", "collect", ...given])
      : await launch(args, "the collector"),
  );
}
