/**
 * The `--help` text and the flags of `publish`, apart from the command itself so that
 * `obs-utils telemetry --help`, `publish --help` and the launcher never load the publisher and
 * its npm package.
 *
 * @module
 */

import type { ParseArgsConfig } from "node:util";

/** The flags of `publish` but `--help`: the command and its launcher parse the same ones. */
export const PUBLISH_OPTIONS = {
  to: { type: "string" },
  prefix: { type: "string" },
  "discovery-prefix": { type: "string" },
  "no-discovery": { type: "boolean" },
  ca: { type: "string" },
  host: { type: "string" },
  port: { type: "string" },
  token: { type: "string" },
  tls: { type: "boolean" },
} as const satisfies NonNullable<ParseArgsConfig["options"]>;

/** The `--help` text of `publish`. */
export const PUBLISH_HELP: string =
  `Usage: obs-utils telemetry publish --to mqtt://[user:pass@]host:port [options]

Publish the service's state to an MQTT broker, retained, QoS 1: each type's
latest event and whether it is fresh, the safety verdict of each profile, the
publisher's status (last will "offline"), and Home Assistant discovery configs.
Runs beside the service, follows its /stream, and publishes everything again on
every reconnection to the broker or the service. SIGINT or SIGTERM stops it
after it published every verdict unsafe and the status offline (at most 2 s).

Options:
  --to URL                The broker: mqtt://host:1883 or mqtts://host:8883,
                          with user:pass@ if it asks [env OBS_TELEMETRY_PUBLISH]
  --ca FILE               PEM CA of an mqtts:// broker's certificate
  --prefix P              Topic prefix [default obs]
  --discovery-prefix P    Home Assistant's discovery prefix [default homeassistant]
  --no-discovery          Publish no discovery configs
  --host HOST             [env OBS_TELEMETRY_HOST, default localhost]
  --port PORT             [env OBS_TELEMETRY_PORT, default 6562]
  --token TOKEN           [env OBS_TELEMETRY_TOKEN]
  --tls                   Use HTTPS (a server run with --tls-cert)
  -h, --help              Show this help

See docs/publish.md for the topics, Home Assistant and the faults.
`;
