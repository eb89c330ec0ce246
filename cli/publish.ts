/**
 * `obs-utils telemetry publish` (docs/publish.md): the publisher, beside the service with its
 * own scoped permissions. Loaded by `cli.ts` only when this command runs, so the other commands
 * never load the publisher and its npm package.
 *
 * @module
 */

import { readEnv } from "../wire/address.ts";
import { Publisher } from "../publish/publisher.ts";
import { PublishOptionsError, type PublishSettings, publishSettings } from "../publish/options.ts";
import { connection, Failure, HELP_OPTION, parse, printHelp, UsageError } from "./common.ts";
import { printLog, stopOnSignals } from "./beside.ts";
import { PUBLISH_HELP, PUBLISH_OPTIONS } from "./publish_help.ts";

/** The flag values of `publish` as `parseArgs` gives them. */
type PublishValues = {
  [K in keyof typeof PUBLISH_OPTIONS]?: (typeof PUBLISH_OPTIONS)[K]["type"] extends "boolean"
    ? boolean
    : string;
};

/** The checked settings of the flags; a bad one is a usage error naming it. */
function settings(values: PublishValues): PublishSettings {
  try {
    return publishSettings({
      to: values.to,
      prefix: values.prefix,
      discoveryPrefix: values["discovery-prefix"],
      noDiscovery: values["no-discovery"],
      ca: values.ca,
    }, readEnv);
  } catch (err) {
    if (err instanceof PublishOptionsError) throw new UsageError(err.message, "publish");
    throw err;
  }
}

/** The PEM text of `--ca`, or a one-line failure naming the file. */
async function readCa(file: string | undefined): Promise<string[] | undefined> {
  if (file === undefined) return undefined;
  try {
    return [await Deno.readTextFile(file)];
  } catch (err) {
    if (err instanceof Deno.errors.NotCapable) throw err;
    throw new Failure(
      `Cannot read --ca ${file}: ${
        (err as Error).message.split("\n")[0]
      }; give the PEM file of the CA that signed the broker's certificate`,
    );
  }
}

/**
 * Runs `obs-utils telemetry publish`.
 *
 * @param args The arguments after `publish`.
 * @returns The exit code: 0 stopped by a signal, 2 a bad flag, 1 the `--ca` file unreadable.
 */
export async function publishCommand(args: string[]): Promise<number> {
  const { values } = parse("publish", args, { ...PUBLISH_OPTIONS, ...HELP_OPTION }, false);
  if (values.help) return printHelp(PUBLISH_HELP);
  const { broker, prefix, discoveryPrefix } = settings(values);
  const conn = connection(values, "publish");
  const caCerts = await readCa(values.ca);
  const log = printLog(false);
  using stop = stopOnSignals();
  log(
    "info",
    `publishing ${conn.baseUrl} to ${broker.url} under ${prefix}/<site_id> (${
      discoveryPrefix === undefined ? "no discovery" : `discovery under ${discoveryPrefix}`
    })`,
  );
  await new Publisher({ service: conn, broker, caCerts, prefix, discoveryPrefix, log })
    .run(stop.signal);
  log("info", "stopped");
  return 0;
}
