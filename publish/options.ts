/**
 * The publisher's settings from its flags (docs/publish.md, "Flags"), checked before anything
 * starts: the broker URL of `--to`, the topic prefixes, `--ca`. Each bad value is one error that
 * names the flag and what to write instead.
 *
 * @module
 */

/** The environment variable that may hold `--to` (and so keep a password off the command line). */
export const PUBLISH_TO_ENV = "OBS_TELEMETRY_PUBLISH";

/** The default of `--prefix`. */
export const DEFAULT_PREFIX = "obs";

/** The default of `--discovery-prefix`: Home Assistant's. */
export const DEFAULT_DISCOVERY_PREFIX = "homeassistant";

/**
 * A flag of `publish` with a value it cannot use; `flag` names it.
 *
 * @example Usage
 * ```ts
 * import { PublishOptionsError } from "./options.ts";
 * import assert from "node:assert/strict";
 *
 * assert.equal(new PublishOptionsError("--to", "is missing").message, "--to is missing");
 * ```
 */
export class PublishOptionsError extends Error {
  /** The flag, such as `--to`. */
  readonly flag: string;

  /**
   * Creates the error; its message is the flag and the problem.
   *
   * @param flag The flag.
   * @param problem What is wrong and what to write instead, after the flag's name.
   */
  constructor(flag: string, problem: string) {
    super(`${flag} ${problem}`);
    this.name = "PublishOptionsError";
    this.flag = flag;
  }
}

/** Where the broker is and who the publisher is to it: `--to` taken apart. */
export interface BrokerAddress {
  /** `mqtt://host:port` or `mqtts://host:port`, without credentials: for logs and errors. */
  readonly url: string;
  /** The host, as a URL writes it (an IPv6 address in brackets). */
  readonly host: string;
  /** The port (1883 for `mqtt://`, 8883 for `mqtts://` unless given). */
  readonly port: number;
  /** Whether the connection is TLS (`mqtts://`). */
  readonly tls: boolean;
  /** The user name, from the URL (percent-decoded). */
  readonly username?: string | undefined;
  /** The password, from the URL (percent-decoded). */
  readonly password?: string | undefined;
}

const TO_EXAMPLE = "mqtt://127.0.0.1:1883 (or mqtts://user:password@broker.lan:8883)";

/**
 * Takes `--to` apart: `mqtt://[user[:password]@]host[:port]` or `mqtts://...`, nothing after the
 * port.
 *
 * @param text The URL.
 * @returns The broker's address and the credentials.
 * @throws {PublishOptionsError} Naming `--to`, for anything else.
 *
 * @example Usage
 * ```ts
 * import { parseBrokerUrl } from "./options.ts";
 * import assert from "node:assert/strict";
 *
 * const broker = parseBrokerUrl("mqtts://ha:s%40cret@broker.lan");
 * assert.equal(broker.url, "mqtts://broker.lan:8883");
 * assert.equal(broker.password, "s@cret");
 * assert.throws(() => parseBrokerUrl("http://broker.lan"), /--to must start with mqtt:\/\//);
 * ```
 */
export function parseBrokerUrl(text: string): BrokerAddress {
  let url: URL;
  try {
    url = new URL(text);
  } catch {
    throw new PublishOptionsError("--to", `is not a URL; write it as ${TO_EXAMPLE}`);
  }
  if (url.protocol !== "mqtt:" && url.protocol !== "mqtts:") {
    throw new PublishOptionsError(
      "--to",
      `must start with mqtt:// or mqtts://, not ${url.protocol}//; write it as ${TO_EXAMPLE}`,
    );
  }
  if (url.hostname === "") {
    throw new PublishOptionsError("--to", `names no host; write it as ${TO_EXAMPLE}`);
  }
  if ((url.pathname !== "" && url.pathname !== "/") || url.search || url.hash) {
    throw new PublishOptionsError(
      "--to",
      `must name only the broker (no path, query or fragment); write it as ${TO_EXAMPLE}`,
    );
  }
  const tls = url.protocol === "mqtts:";
  const port = Number(url.port || (tls ? 8883 : 1883));
  if (port === 0) {
    throw new PublishOptionsError("--to", `names port 0; give the broker's port (1883, 8883)`);
  }
  return {
    url: `${url.protocol}//${url.hostname}:${port}`,
    host: url.hostname,
    port,
    tls,
    username: url.username === "" ? undefined : decodeURIComponent(url.username),
    password: url.password === "" ? undefined : decodeURIComponent(url.password),
  };
}

/**
 * Checks a topic prefix (`--prefix`, `--discovery-prefix`): levels joined by `/`, none empty,
 * no wildcard (`+`, `#`), no control character, and not starting with `$` (the broker's own
 * topics).
 *
 * @param text The prefix.
 * @param flag The flag it came from, for the error.
 * @returns The prefix.
 * @throws {PublishOptionsError} Naming the flag.
 *
 * @example Usage
 * ```ts
 * import { checkTopicPrefix } from "./options.ts";
 * import assert from "node:assert/strict";
 *
 * assert.equal(checkTopicPrefix("site/obs", "--prefix"), "site/obs");
 * assert.throws(() => checkTopicPrefix("obs/#", "--prefix"), /--prefix must not hold/);
 * ```
 */
export function checkTopicPrefix(text: string, flag: string): string {
  const example = flag === "--prefix" ? "obs" : "homeassistant";
  if (text === "" || text.split("/").some((level) => level === "")) {
    throw new PublishOptionsError(
      flag,
      `must be topic levels joined by single slashes, with no empty level (no leading, trailing or double /), such as ${example}; not ${
        JSON.stringify(text)
      }`,
    );
  }
  // deno-lint-ignore no-control-regex
  if (/[+#\u0000-\u001f\u007f-\u009f]/.test(text) || !text.isWellFormed()) {
    throw new PublishOptionsError(
      flag,
      `must not hold the wildcards + or # or control characters, such as ${example}; not ${
        JSON.stringify(text)
      }`,
    );
  }
  if (text.startsWith("$")) {
    throw new PublishOptionsError(
      flag,
      `must not start with $ (the broker's own topics), such as ${example}`,
    );
  }
  return text;
}

/** The flags of `publish` that say what is published where, as given. */
export interface PublishFlags {
  /** `--to` (else {@linkcode PUBLISH_TO_ENV} is read). */
  readonly to?: string | undefined;
  /** `--prefix`. */
  readonly prefix?: string | undefined;
  /** `--discovery-prefix`. */
  readonly discoveryPrefix?: string | undefined;
  /** `--no-discovery`. */
  readonly noDiscovery?: boolean | undefined;
  /** `--ca`. */
  readonly ca?: string | undefined;
}

/** {@linkcode PublishFlags} checked, with their defaults. */
export interface PublishSettings {
  /** `--to` as given. */
  readonly to: string;
  /** `--to` taken apart. */
  readonly broker: BrokerAddress;
  /** The topic prefix. */
  readonly prefix: string;
  /** The discovery prefix, or `undefined` with `--no-discovery`. */
  readonly discoveryPrefix: string | undefined;
  /** The `--ca` file, as given. */
  readonly ca: string | undefined;
}

/**
 * Checks the flags of `publish` together (`--to` from {@linkcode PUBLISH_TO_ENV} when not given)
 * and fills in the defaults.
 *
 * @param flags The flags as given.
 * @param env Reads an environment variable.
 * @returns The settings.
 * @throws {PublishOptionsError} For the first flag it cannot use, naming it.
 *
 * @example Usage
 * ```ts
 * import { publishSettings } from "./options.ts";
 * import assert from "node:assert/strict";
 *
 * const settings = publishSettings({ to: "mqtt://127.0.0.1:1883" }, () => undefined);
 * assert.equal(settings.prefix, "obs");
 * assert.equal(settings.discoveryPrefix, "homeassistant");
 * assert.throws(() => publishSettings({}, () => undefined), /--to is required/);
 * ```
 */
export function publishSettings(
  flags: PublishFlags,
  env: (name: string) => string | undefined,
): PublishSettings {
  const to = flags.to ?? env(PUBLISH_TO_ENV);
  if (to === undefined) {
    throw new PublishOptionsError(
      "--to",
      `is required (or set ${PUBLISH_TO_ENV}): the broker, such as mqtt://127.0.0.1:1883`,
    );
  }
  const broker = parseBrokerUrl(to);
  if (flags.ca !== undefined && !broker.tls) {
    throw new PublishOptionsError(
      "--ca",
      `is for an mqtts:// broker, and --to is ${broker.url}; remove --ca or write --to mqtts://...`,
    );
  }
  if (flags.noDiscovery && flags.discoveryPrefix !== undefined) {
    throw new PublishOptionsError(
      "--discovery-prefix",
      "and --no-discovery contradict each other; give one of them",
    );
  }
  return {
    to,
    broker,
    prefix: checkTopicPrefix(flags.prefix ?? DEFAULT_PREFIX, "--prefix"),
    discoveryPrefix: flags.noDiscovery ? undefined : checkTopicPrefix(
      flags.discoveryPrefix ?? DEFAULT_DISCOVERY_PREFIX,
      "--discovery-prefix",
    ),
    ca: flags.ca,
  };
}
