/**
 * The program of the fleet processes (`obs-utils telemetry forward` and `archive`) as
 * `spawnForwarder()`, `deno task forward` and `deno task compile:forward` run it: the command line
 * of `cli.ts` with the fleet commands in its module graph from the start, so the forwarder needs
 * read permission for the site directory only (the CLI loads them on demand, which under scoped
 * permissions would need read access to this checkout).
 *
 * Usage: deno run <permissions> cli/forward_main.ts forward|archive [options]
 *
 * @module
 */
import "./forward.ts";
import { runCli } from "./main.ts";

if (import.meta.main) Deno.exit(await runCli(["telemetry", ...Deno.args]));
