/**
 * The program of the publisher (`obs-utils telemetry publish`) as `spawnPublisher()`,
 * `deno task publish` and the systemd unit run it: the command line of `cli.ts` with the
 * publisher in its module graph from the start, so it needs no read permission (the CLI loads it
 * on demand, which under scoped permissions would need read access to this checkout).
 *
 * Usage: deno run <permissions> cli/publish_main.ts [options]   (the broker in OBS_TELEMETRY_PUBLISH or --to)
 *
 * @module
 */
import "./publish.ts";
import { runCli } from "./main.ts";

if (import.meta.main) Deno.exit(await runCli(["telemetry", "publish", ...Deno.args]));
