/**
 * The program of the collector (`obs-utils telemetry collect`) as `spawnCollector()`,
 * `deno task collect` and the systemd unit run it: the command line of `cli.ts` with the
 * collector in its module graph from the start, so it needs read permission for its config and
 * file inputs only (the CLI loads it on demand, which under scoped permissions would need read
 * access to this checkout).
 *
 * Usage: deno run <permissions> collect/main.ts --config FILE [options]
 *
 * @module
 */
import "../cli/collect.ts";
import { runCli } from "../cli/main.ts";

if (import.meta.main) Deno.exit(await runCli(["telemetry", "collect", ...Deno.args]));
