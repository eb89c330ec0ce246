/**
 * The `--help` text and the flags of `collect`, apart from the command itself so that
 * `obs-utils telemetry --help`, `collect --help` and the launcher never load the collector's
 * inputs and their npm packages.
 *
 * @module
 */

import type { ParseArgsConfig } from "node:util";

/** The flags of `collect` but `--help`: the command and its launcher parse the same ones. */
export const COLLECT_OPTIONS = {
  config: { type: "string" },
  once: { type: "boolean" },
  host: { type: "string" },
  port: { type: "string" },
  token: { type: "string" },
  tls: { type: "boolean" },
} as const satisfies NonNullable<ParseArgsConfig["options"]>;

/** The `--help` text of `collect`. */
export const COLLECT_HELP: string = `Usage: obs-utils telemetry collect --config FILE [options]

Read the inputs of a config (HTTP JSON pages, MQTT topics, an INDI server, ASCOM
Alpaca devices, weather-station files) and post their events to the service in
POST /events batches. Runs beside the service; while the service is down, events
wait in a queue of 10,000 (the oldest dropped) and are posted in order when it
returns. SIGINT or SIGTERM stops it after posting what it holds (at most 5 s).

Options:
  --config FILE   The inputs, JSON: {"inputs": [...]} [env OBS_TELEMETRY_COLLECT]
  --once          Read every polled input once, listen 5 s to push inputs, print
                  the events as NDJSON and post nothing (to try a config); exit 1
                  when an input never came up
  --host HOST     [env OBS_TELEMETRY_HOST, default localhost]
  --port PORT     [env OBS_TELEMETRY_PORT, default 6562]
  --token TOKEN   [env OBS_TELEMETRY_TOKEN]
  --tls           Use HTTPS (a server run with --tls-cert)
  -h, --help      Show this help

See docs/collect.md for the inputs and their keys.
`;
