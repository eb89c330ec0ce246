/**
 * The `obs-utils` command line: `obs-utils telemetry run | stop | current | post | forget |
 * start-run | stop-run | runs | migrate | read | forward | archive | collect | publish | check |
 * safety`.
 *
 * Run it with scoped permissions (docs/cli.md); a missing permission is reported as one line
 * naming the flag to add.
 *
 * @example Usage
 * ```sh
 * deno run --allow-net=localhost:6562 --allow-read=./telemetry --allow-write=./telemetry \
 *   --allow-env=OBS_TELEMETRY_HOST,OBS_TELEMETRY_PORT,OBS_TELEMETRY_SITE_DIR,OBS_TELEMETRY_TZ,OBS_TELEMETRY_SITE_TYPES,OBS_TELEMETRY_TOKEN,OBS_TELEMETRY_FSYNC \
 *   jsr:@obs-utils/telemetry/cli telemetry run --site-dir ./telemetry
 * ```
 *
 * @module
 */

import { runCli } from "./cli/main.ts";
export {
  DEFAULT_SITE_DIR,
  ENV_VARS,
  type Envelope,
  type FieldInfo,
  formatAge,
  HELP_TEXT,
  type JsonObject,
  renderTable,
  runCli,
  type TableOptions,
  type TableTypeInfo,
  UsageError,
} from "./cli/main.ts";

if (import.meta.main) Deno.exit(await runCli(Deno.args));
