/**
 * The program of the collector (`obs-utils telemetry collect`) as `spawnCollector()`,
 * `deno task collect` and the systemd unit run it: the command line of `cli.ts` with the
 * collector in its module graph from the start, so it needs read permission for its config and
 * file inputs only (the CLI loads it on demand, which under scoped permissions would need read
 * access to this checkout).
 *
 * Usage: deno run <permissions> cli/collect_main.ts --config FILE [options]
 *
 * @module
 */
import "./collect.ts";
import { runCli } from "./main.ts";

if (import.meta.main) Deno.exit(await runCli(["telemetry", "collect", ...Deno.args]));
