/**
 * The one table of `obs-utils telemetry run` flags. Each row names the flag, its environment
 * variable, how its text becomes a value, its help line and the option it sets; the `run` help,
 * the `parseArgs` options, {@linkcode SERVER_ENV_VARS} (the `--allow-env` list) and the arguments
 * `spawnServer()` passes to its child are all derived from it, so a new flag is one new row.
 *
 * @example Usage
 * ```ts
 * import { RUN_FLAGS, runFlagArgs } from "./flags.ts";
 * import assert from "node:assert/strict";
 *
 * assert.ok(RUN_FLAGS.some((flag) => flag.name === "max-types"));
 * assert.deepEqual(runFlagArgs({ maxTypes: 50 }), ["--max-types", "50"]);
 * ```
 *
 * @module
 */

import type { ParseArgsConfig } from "node:util";
import { DEFAULT_HOST, DEFAULT_PORT, readEnv } from "../wire/address.ts";
import { checkTimeZone } from "../store/day_key.ts";
import { DEFAULT_FSYNC, FSYNC_MODES, type FsyncMode } from "../store/writer.ts";
import { DEFAULT_MIN_FREE_BYTES } from "../store/disk.ts";
import { DEFAULT_BODY_TIMEOUT_MS, DEFAULT_MAX_BODY } from "../http/body.ts";
import { DEFAULT_MAX_HISTORY } from "../http/history.ts";
import {
  DEFAULT_HEAD_TIMEOUT_MS,
  DEFAULT_IDLE_TIMEOUT_MS,
  DEFAULT_MAX_CONNS_PER_PEER,
  MIN_DEFAULT_MAX_CONNS,
  SERVICE_DESCRIPTORS,
} from "../http/conn_guard.ts";
import { type LogFormat, parseLogFormat } from "../core/log.ts";
import { type NotifyFormat, parseNotifyFormat, parseNotifyUrl } from "../notify/post.ts";
import {
  DEFAULT_COMPRESS_AFTER,
  DEFAULT_MAX_SNAPSHOT_BYTES,
  DEFAULT_MAX_TYPES,
  DEFAULT_SITE_TYPES,
} from "../core/service.ts";

/** Default site directory (docs/operations.md). */
export const DEFAULT_SITE_DIR = "telemetry";

/**
 * The values of the `run` flags, keyed by the option each sets: what `run` hands the server and
 * what `spawnServer()` takes. An optional value left out means "the server's own default".
 */
export interface RunFlagValues {
  /** The site telemetry directory (`--site-dir`). */
  siteDir: string;
  /** Address to bind (`--host`); `startServer()` calls it `hostname`. */
  host: string;
  /** Port to bind (`--port`). */
  port: number;
  /** IANA zone of the noon rotation (`--tz`). */
  timeZone: string;
  /** Types also written to the site file during a run (`--site-types`). */
  siteTypes?: readonly string[];
  /** `--fsync` mode. */
  fsync: FsyncMode;
  /** Bearer token the server requires (`--token`). */
  token?: string;
  /** Extra run roots (`--allow-run-root`, repeatable). */
  allowRunRoots: readonly string[];
  /** Largest request body in bytes (`--max-body`). */
  maxBody?: number;
  /** `GET /history` requests served at once (`--max-history`). */
  maxHistory?: number;
  /** Most event types the snapshot holds (`--max-types`). */
  maxTypes?: number;
  /** Budget of the snapshot in bytes (`--max-snapshot`). */
  maxSnapshotBytes?: number;
  /** Allow a non-loopback host without a token (`--insecure`). */
  insecure: boolean;
  /** Log one line per event (`--verbose`). */
  verbose: boolean;
  /** The types registry file (`--types`). */
  typesFile?: string;
  /** Free bytes below which `/check` fails and a warning is logged (`--min-free`). */
  minFreeBytes?: number;
  /** With a token, reads need none (`--public-read`). */
  publicRead: boolean;
  /** With a token, loopback peers need none (`--trust-loopback`). */
  trustLoopback: boolean;
  /** `GET /current` answers `{"current": {...}}` (`--wrap-current`). */
  wrapCurrent: boolean;
  /** PEM certificate file: serve HTTPS (`--tls-cert`). */
  tlsCert?: string;
  /** PEM private key file of the certificate (`--tls-key`). */
  tlsKey?: string;
  /** How the service log prints its lines (`--log-format`). */
  logFormat?: LogFormat;
  /** Nights after which files are compressed, 0 off (`--compress-after`). */
  compressAfter?: number;
  /** Nights after which site files are deleted, 0 never (`--retain`). */
  retain?: number;
  /** Seconds a connection may take to send a whole request head (`--head-timeout`). */
  headTimeout?: number;
  /** Seconds a kept-alive connection may stay idle between requests (`--idle-timeout`). */
  idleTimeout?: number;
  /** Most connections one peer address may hold (`--max-conns-per-peer`). */
  maxConnsPerPeer?: number;
  /** Most connections all peers together may hold, both ports together (`--max-conns`). */
  maxConns?: number;
  /** Seconds a request body may take to arrive in full after its head (`--body-timeout`). */
  bodyTimeout?: number;
  /** Receivers of the safety notifications (`--notify`, repeatable). */
  notify: readonly string[];
  /** How the notifications are written (`--notify-format`). */
  notifyFormat?: NotifyFormat;
  /** Port of the ASCOM Alpaca listener on `--host`; absent: none (`--alpaca-port`). */
  alpacaPort?: number;
  /** UDP port of Alpaca discovery, 0 off (`--alpaca-discovery-port`). */
  alpacaDiscoveryPort?: number;
}

/** One row of {@linkcode RUN_FLAGS}. */
export interface RunFlag {
  /** The flag without its dashes, for example `"site-dir"`. */
  readonly name: string;
  /** The option the flag sets. */
  readonly key: keyof RunFlagValues;
  /** Placeholder of the value in the help, for example `"DIR"`; absent for a switch. */
  readonly arg?: string;
  /** The environment variable read when the flag is absent. */
  readonly env?: string;
  /** What the flag does, as the help says it. */
  readonly help: string;
  /** The flag may be given several times; each value is kept as it is. */
  readonly multiple?: boolean;
  /** Text used (and checked by {@linkcode RunFlag.parse}) when neither flag nor variable is set. */
  readonly default?: string | (() => string);
  /** The default as the help shows it, when it is not the text of {@linkcode RunFlag.default}. */
  readonly shownDefault?: string;
  /**
   * Column, within the help text, of the bracketed env and default note. The help was aligned
   * by hand; this keeps it as it was.
   * @default {30}
   */
  readonly noteColumn?: number;
  /**
   * Turns the flag's text into its value; without it the text is the value.
   * @throws {RangeError} If the text is not a valid value; the message names the flag.
   */
  readonly parse?: (text: string) => unknown;
  /**
   * What the flag's value needs the service to be allowed (docs/cli.md#permissions): the host
   * or port it listens on, the URLs it sends to (`net-connect`), or a path it reads (`read`) or
   * reads and writes (`read-write`). `runPermissionFlags()` (`cli/permissions.ts`) derives the
   * `--allow-*` flags from these alone.
   */
  readonly grants?:
    | "net-host"
    | "net-port"
    | "net-connect"
    | "net-alpaca"
    | "net-discovery"
    | "read"
    | "read-write";
}

/**
 * Reads a port number.
 *
 * @param value The text of `--port` or `OBS_TELEMETRY_PORT`.
 * @param name What the operator set, named in the error.
 * @returns The port, 0 to 65535.
 * @throws {RangeError} If it is not a whole number in that range.
 *
 * @example Usage
 * ```ts
 * import { parsePort } from "./flags.ts";
 * import assert from "node:assert/strict";
 *
 * assert.equal(parsePort("6562"), 6562);
 * assert.throws(() => parsePort("70000"), RangeError);
 * ```
 */
export function parsePort(value: string, name = "--port"): number {
  if (!/^\d{1,5}$/.test(value) || Number(value) > 65535) {
    throw new RangeError(`${name} must be a number from 0 to 65535, not "${value}"`);
  }
  return Number(value);
}

function positiveInt(flag: string): (value: string) => number {
  return (value) => {
    if (!/^\d+$/.test(value) || Number(value) < 1 || !Number.isSafeInteger(Number(value))) {
      throw new RangeError(`${flag} must be a positive whole number, not "${value}"`);
    }
    return Number(value);
  };
}

function seconds(flag: string): (value: string) => number {
  return (value) => {
    const n = Number(value);
    if (!/^\d+(\.\d+)?$/.test(value) || !(n > 0) || n > 86_400) {
      throw new RangeError(
        `${flag} must be a number of seconds above 0 and at most 86400 (such as 10 or 0.5), not "${value}"`,
      );
    }
    return n;
  };
}

function nights(flag: string): (value: string) => number {
  return (value) => {
    if (!/^\d{1,5}$/.test(value)) {
      throw new RangeError(
        `${flag} must be a whole number of nights (0 turns it off), not "${value}"`,
      );
    }
    return Number(value);
  };
}

/** Reads an `--fsync` mode in any letter case (`ALWAYS` is `always`). */
function parseFsync(value: string): FsyncMode {
  const mode = value.trim().toLowerCase();
  if (!(FSYNC_MODES as readonly string[]).includes(mode)) {
    const modes = `${FSYNC_MODES.slice(0, -1).join(", ")} or ${FSYNC_MODES.at(-1)}`;
    throw new RangeError(`--fsync must be ${modes}, not "${value}"`);
  }
  return mode as FsyncMode;
}

const BYTE_UNITS: Record<string, number> = {
  "": 1,
  b: 1,
  k: 1024,
  kib: 1024,
  m: 1024 ** 2,
  mib: 1024 ** 2,
  g: 1024 ** 3,
  gib: 1024 ** 3,
  t: 1024 ** 4,
  tib: 1024 ** 4,
};

/**
 * Reads a size in bytes: a whole number, or a number with a binary unit (`512M`, `1GiB`, `2.5G`).
 *
 * @param value The text of `--min-free` or `OBS_TELEMETRY_MIN_FREE`.
 * @returns The bytes, rounded down.
 * @throws {RangeError} If it is not such a size.
 *
 * @example Usage
 * ```ts
 * import { parseBytes } from "./flags.ts";
 * import assert from "node:assert/strict";
 *
 * assert.equal(parseBytes("1GiB"), 1024 ** 3);
 * assert.equal(parseBytes("500M"), 500 * 1024 ** 2);
 * ```
 */
export function parseBytes(value: string): number {
  const m = /^(\d+(?:\.\d+)?)\s*([A-Za-z]*)$/.exec(value.trim());
  const unit = m ? BYTE_UNITS[m[2]!.toLowerCase()] : undefined;
  const bytes = m && unit !== undefined ? Math.floor(Number(m[1]) * unit) : NaN;
  if (!Number.isSafeInteger(bytes)) {
    throw new RangeError(
      `--min-free must be a size in bytes such as 1073741824, 500M or 1GiB (units K, M, G, T, binary), not "${value}"`,
    );
  }
  return bytes;
}

/**
 * The kernel's file systems: Deno opens a path below them only under `--allow-all`, which the
 * service never holds, and nothing stored there would be kept (docs/cli.md#permissions).
 */
const KERNEL_DIRS = ["/dev", "/proc", "/sys"];

/**
 * The parser of a flag naming a directory the service stores in: any directory but one of the
 * kernel's file systems, refused with the flag and an example of a writable directory.
 */
function storeDir(flag: string, example: string): (text: string) => string {
  return (text) => {
    const kernel = KERNEL_DIRS.find((dir) => text === dir || text.startsWith(`${dir}/`));
    if (kernel !== undefined) {
      throw new RangeError(
        `--${flag} must be a directory the service can store in, not "${text}": ${kernel} holds the kernel's files, not storage; choose a writable directory, such as --${flag} ${example}`,
      );
    }
    return text;
  };
}

function parseList(value: string): string[] {
  return value.split(",").map((t) => t.trim()).filter((t) => t !== "");
}

/** The `run` flags in the order of the help; validation and child arguments follow it too. */
export const RUN_FLAGS: readonly RunFlag[] = [
  {
    name: "site-dir",
    arg: "DIR",
    env: "OBS_TELEMETRY_SITE_DIR",
    help: "Telemetry directory",
    default: DEFAULT_SITE_DIR,
    parse: storeDir("site-dir", "/var/lib/obs-telemetry"),
    grants: "read-write",
    key: "siteDir",
  },
  {
    name: "host",
    arg: "HOST",
    env: "OBS_TELEMETRY_HOST",
    help: "Address to bind",
    default: DEFAULT_HOST,
    grants: "net-host",
    key: "host",
  },
  {
    name: "port",
    arg: "PORT",
    env: "OBS_TELEMETRY_PORT",
    help: "Port to bind",
    default: String(DEFAULT_PORT),
    parse: parsePort,
    grants: "net-port",
    key: "port",
  },
  {
    name: "tz",
    arg: "ZONE",
    env: "OBS_TELEMETRY_TZ",
    help: "IANA zone of the noon file rotation",
    default: () => Temporal.Now.timeZoneId(),
    shownDefault: "system zone",
    parse: checkTimeZone,
    key: "timeZone",
  },
  {
    name: "site-types",
    arg: "A,B",
    env: "OBS_TELEMETRY_SITE_TYPES",
    help: "Types also written to the site file during a run (critical types are too)",
    shownDefault: DEFAULT_SITE_TYPES.join(","),
    parse: parseList,
    key: "siteTypes",
  },
  {
    name: "fsync",
    arg: "MODE",
    env: "OBS_TELEMETRY_FSYNC",
    help: FSYNC_MODES.join(" | "),
    default: DEFAULT_FSYNC,
    parse: parseFsync,
    key: "fsync",
  },
  {
    name: "token",
    arg: "TOKEN",
    env: "OBS_TELEMETRY_TOKEN",
    help: "Require 'Authorization: Bearer TOKEN'",
    key: "token",
  },
  {
    name: "allow-run-root",
    arg: "DIR",
    help: "Also allow run directories below DIR (repeatable)",
    multiple: true,
    parse: storeDir("allow-run-root", "/srv/runs"),
    grants: "read-write",
    key: "allowRunRoots",
  },
  {
    name: "max-body",
    arg: "BYTES",
    help: "Largest request body",
    shownDefault: String(DEFAULT_MAX_BODY),
    noteColumn: 34,
    parse: positiveInt("--max-body"),
    key: "maxBody",
  },
  {
    name: "max-history",
    arg: "N",
    help: "Most /history requests at once",
    shownDefault: String(DEFAULT_MAX_HISTORY),
    noteColumn: 34,
    parse: positiveInt("--max-history"),
    key: "maxHistory",
  },
  {
    name: "max-types",
    arg: "N",
    help: "Most event types the snapshot holds",
    shownDefault: String(DEFAULT_MAX_TYPES),
    parse: positiveInt("--max-types"),
    key: "maxTypes",
  },
  {
    name: "max-snapshot",
    arg: "BYTES",
    help: "Largest snapshot (GET /current body)",
    shownDefault: String(DEFAULT_MAX_SNAPSHOT_BYTES),
    parse: positiveInt("--max-snapshot"),
    key: "maxSnapshotBytes",
  },
  {
    name: "types",
    arg: "FILE",
    env: "OBS_TELEMETRY_TYPES",
    help: "Types registry (JSON): limits, staleness",
    grants: "read",
    key: "typesFile",
  },
  {
    name: "min-free",
    arg: "BYTES",
    env: "OBS_TELEMETRY_MIN_FREE",
    help: "Free disk below which /check fails",
    shownDefault: `${DEFAULT_MIN_FREE_BYTES / 1024 ** 3}GiB`,
    parse: parseBytes,
    key: "minFreeBytes",
  },
  {
    name: "compress-after",
    arg: "N",
    help: "Gzip files over N nights old",
    shownDefault: `${DEFAULT_COMPRESS_AFTER}, 0 off`,
    parse: nights("--compress-after"),
    key: "compressAfter",
  },
  {
    name: "retain",
    arg: "N",
    help: "Delete site files over N nights old",
    shownDefault: "0, forever",
    parse: nights("--retain"),
    key: "retain",
  },
  {
    name: "head-timeout",
    arg: "SECS",
    help: "Close a connection whose request head takes longer",
    shownDefault: String(DEFAULT_HEAD_TIMEOUT_MS / 1000),
    parse: seconds("--head-timeout"),
    key: "headTimeout",
  },
  {
    name: "idle-timeout",
    arg: "SECS",
    help: "Close a kept-alive connection idle for longer",
    shownDefault: String(DEFAULT_IDLE_TIMEOUT_MS / 1000),
    parse: seconds("--idle-timeout"),
    key: "idleTimeout",
  },
  {
    name: "max-conns-per-peer",
    arg: "N",
    help: "Most connections one address may hold open",
    shownDefault: String(DEFAULT_MAX_CONNS_PER_PEER),
    parse: positiveInt("--max-conns-per-peer"),
    key: "maxConnsPerPeer",
  },
  {
    name: "max-conns",
    arg: "N",
    help: "Most connections all addresses may hold open together",
    shownDefault: `(ulimit -n - ${SERVICE_DESCRIPTORS})/4, at least ${MIN_DEFAULT_MAX_CONNS}`,
    parse: positiveInt("--max-conns"),
    key: "maxConns",
  },
  {
    name: "body-timeout",
    arg: "SECS",
    help: "Answer 408 to a request body slower than this",
    shownDefault: String(DEFAULT_BODY_TIMEOUT_MS / 1000),
    parse: seconds("--body-timeout"),
    key: "bodyTimeout",
  },
  { name: "insecure", help: "Allow a non-loopback --host without a token", key: "insecure" },
  { name: "verbose", help: "Log one line per incoming event", key: "verbose" },
  {
    name: "public-read",
    env: "OBS_TELEMETRY_PUBLIC_READ",
    help: "With --token, GET/HEAD of the read routes need none",
    key: "publicRead",
  },
  {
    name: "trust-loopback",
    env: "OBS_TELEMETRY_TRUST_LOOPBACK",
    help: "With --token, requests from this machine need none",
    key: "trustLoopback",
  },
  {
    name: "wrap-current",
    env: "OBS_TELEMETRY_WRAP_CURRENT",
    help: 'GET /current answers {"current": {...}} (older clients)',
    key: "wrapCurrent",
  },
  {
    name: "tls-cert",
    arg: "FILE",
    help: "PEM certificate: serve HTTPS",
    grants: "read",
    key: "tlsCert",
  },
  {
    name: "tls-key",
    arg: "FILE",
    help: "PEM private key of --tls-cert",
    grants: "read",
    key: "tlsKey",
  },
  {
    name: "alpaca-port",
    arg: "PORT",
    env: "OBS_TELEMETRY_ALPACA_PORT",
    help: "Also serve ASCOM Alpaca devices",
    shownDefault: "off",
    parse: (text) => parsePort(text, "--alpaca-port"),
    grants: "net-alpaca",
    key: "alpacaPort",
  },
  {
    name: "alpaca-discovery-port",
    arg: "PORT",
    help: "UDP port answering Alpaca discovery",
    shownDefault: "32227, 0 off",
    noteColumn: 16,
    parse: (text) => parsePort(text, "--alpaca-discovery-port"),
    grants: "net-discovery",
    key: "alpacaDiscoveryPort",
  },
  {
    name: "log-format",
    arg: "FORMAT",
    help: "text | json (one JSON object per line)",
    shownDefault: "text",
    parse: parseLogFormat,
    key: "logFormat",
  },
  {
    name: "notify",
    arg: "URL",
    env: "OBS_TELEMETRY_NOTIFY",
    help: "POST each safety change to URL (repeatable; the variable takes A,B)",
    multiple: true,
    parse: parseNotifyUrl,
    grants: "net-connect",
    key: "notify",
  },
  {
    name: "notify-format",
    arg: "FORMAT",
    env: "OBS_TELEMETRY_NOTIFY_FORMAT",
    help: "json | ntfy (text with the headers an ntfy server reads)",
    shownDefault: "json",
    parse: parseNotifyFormat,
    key: "notifyFormat",
  },
];

/**
 * Reads the environment variable of a switch: `1`/`true`/`yes`/`on` set it, `0`/`false`/`no`/
 * `off` leave it off (any case).
 *
 * @throws {RangeError} Naming the variable, for any other value.
 */
function parseSwitchEnv(name: string, text: string | undefined): boolean {
  if (text === undefined) return false;
  const value = text.trim().toLowerCase();
  if (["1", "true", "yes", "on"].includes(value)) return true;
  if (["0", "false", "no", "off", ""].includes(value)) return false;
  throw new RangeError(`${name} must be 1 or 0 (true or false), not "${text}"`);
}

/** The `--allow-env` order docs/cli.md prints; every variable of {@linkcode RUN_FLAGS} has a place. */
const ENV_ORDER = ["HOST", "PORT", "SITE_DIR", "TZ", "SITE_TYPES", "TOKEN", "FSYNC"];

/**
 * The environment variables the server may read: the only `--allow-env` it gets (docs/cli.md).
 * They are the variables of {@linkcode RUN_FLAGS}, in the order docs/cli.md lists them (a new
 * variable goes last).
 */
export const SERVER_ENV_VARS: readonly string[] = RUN_FLAGS.flatMap((flag) =>
  flag.env === undefined ? [] : [flag.env]
).toSorted((a, b) => envRank(a) - envRank(b));

function envRank(name: string): number {
  const rank = ENV_ORDER.indexOf(name.replace(/^OBS_TELEMETRY_/, ""));
  return rank < 0 ? ENV_ORDER.length : rank;
}

/**
 * The `parseArgs` options of the `run` flags (without `--help`).
 *
 * @returns One option per row of {@linkcode RUN_FLAGS}: a string, repeatable string or boolean.
 *
 * @example Usage
 * ```ts
 * import { runParseOptions } from "./flags.ts";
 * import assert from "node:assert/strict";
 *
 * assert.deepEqual(runParseOptions()["verbose"], { type: "boolean" });
 * ```
 */
export function runParseOptions(): NonNullable<ParseArgsConfig["options"]> {
  return Object.fromEntries(RUN_FLAGS.map((flag) => [
    flag.name,
    flag.arg === undefined
      ? { type: "boolean" as const }
      : flag.multiple
      ? { type: "string" as const, multiple: true }
      : { type: "string" as const },
  ]));
}

/** Help text in which a longer summary moves the note to a line of its own. */
const WRAP_AFTER = 40;
/** Where the help text starts: two spaces, the flag column and two more spaces. */
const TEXT_COLUMN = 24;

function helpNote(flag: RunFlag): string | undefined {
  const shown = flag.shownDefault ?? (typeof flag.default === "string" ? flag.default : undefined);
  const parts = [
    ...(flag.env === undefined ? [] : [`env ${flag.env}`]),
    ...(shown === undefined ? [] : [`default ${shown}`]),
  ];
  return parts.length === 0 ? undefined : `[${parts.join(", ")}]`;
}

function helpText(flag: RunFlag): string {
  const note = helpNote(flag);
  if (note === undefined) return flag.help;
  const column = flag.noteColumn ?? 30;
  if (flag.help.length > WRAP_AFTER) {
    return `${flag.help}\n${" ".repeat(TEXT_COLUMN + column)}${note}`;
  }
  return `${flag.help.padEnd(column - 1)} ${note}`;
}

/**
 * The help lines of the `run` flags, one per row of {@linkcode RUN_FLAGS} (without `--help`).
 *
 * @returns The lines, each ending with a newline.
 *
 * @example Usage
 * ```ts
 * import { runFlagHelp } from "./flags.ts";
 * import assert from "node:assert/strict";
 *
 * assert.match(runFlagHelp(), /^ {2}--max-types N {9}Most event types/m);
 * ```
 */
export function runFlagHelp(): string {
  return RUN_FLAGS.map((flag) => {
    const left = flag.arg === undefined ? `--${flag.name}` : `--${flag.name} ${flag.arg}`;
    return `  ${left.padEnd(TEXT_COLUMN - 4)}  ${helpText(flag)}\n`;
  }).join("");
}

/** The flags as `parseArgs` returns them, keyed by flag name. */
export type RunFlagInput = Readonly<
  Record<string, string | boolean | (string | boolean)[] | undefined>
>;

function resolveFlag(
  flag: RunFlag,
  given: string | boolean | (string | boolean)[] | undefined,
  env: (name: string) => string | undefined,
): unknown {
  if (flag.arg === undefined) {
    return given === true || (flag.env !== undefined && parseSwitchEnv(flag.env, env(flag.env)));
  }
  const fromEnv = given === undefined && flag.env !== undefined ? env(flag.env) : undefined;
  if (flag.multiple) {
    // A repeatable flag's variable holds its values separated by commas (docs/cli.md).
    const texts = (given as string[] | undefined) ??
      (fromEnv === undefined ? [] : parseList(fromEnv));
    return texts.map((text) => parseValue(flag, text, fromEnv !== undefined));
  }
  const text = (given as string | undefined) ?? fromEnv ??
    (typeof flag.default === "function" ? flag.default() : flag.default);
  if (text === undefined) return undefined;
  return parseValue(flag, text, fromEnv !== undefined);
}

/** Parses one text of a flag; a bad one from the variable is named as the variable. */
function parseValue(flag: RunFlag, text: string, fromEnv: boolean): unknown {
  if (!flag.parse) return text;
  try {
    return flag.parse(text);
  } catch (err) {
    // Name what the operator set: the variable, not a flag they never typed (docs/cli.md).
    if (!fromEnv || !(err instanceof RangeError)) throw err;
    const named = err.message.includes(`--${flag.name}`)
      ? err.message.replace(`--${flag.name}`, `${flag.env}`)
      : `${flag.env}: ${err.message}`;
    throw new RangeError(`${named}; fix or unset the variable`);
  }
}

/**
 * Resolves the `run` flags: each from its flag, else its environment variable, else its default,
 * checked in the order of {@linkcode RUN_FLAGS}.
 *
 * @param given The flags as `parseArgs` returns them.
 * @param env Reads an environment variable.
 * @returns The values; an optional one without flag, variable or default is left out.
 * @throws {RangeError} For the first flag (or variable) whose text is not a valid value.
 *
 * @example Usage
 * ```ts
 * import { resolveRunFlags } from "./flags.ts";
 * import assert from "node:assert/strict";
 *
 * const values = resolveRunFlags({ port: "7000", tz: "UTC" }, () => undefined);
 * assert.equal(values.port, 7000);
 * assert.equal(values.siteDir, "telemetry");
 * assert.equal(values.maxTypes, undefined);
 * ```
 */
export function resolveRunFlags(
  given: RunFlagInput,
  env: (name: string) => string | undefined = readEnv,
): RunFlagValues {
  const values: Record<string, unknown> = {};
  for (const flag of RUN_FLAGS) {
    const value = resolveFlag(flag, given[flag.name], env);
    if (value !== undefined) values[flag.key] = value;
  }
  return values as unknown as RunFlagValues;
}

/**
 * The command-line arguments that give `telemetry run` these values: a switch when true, a
 * repeatable flag once per value, a list joined by commas; a value left out gives no argument.
 *
 * @param values Some or all of the values, as {@linkcode resolveRunFlags} returns them.
 * @returns The arguments, in the order of {@linkcode RUN_FLAGS}.
 *
 * @example Usage
 * ```ts
 * import { runFlagArgs } from "./flags.ts";
 * import assert from "node:assert/strict";
 *
 * assert.deepEqual(
 *   runFlagArgs({ siteTypes: ["weather", "dome"], allowRunRoots: ["/a", "/b"], verbose: true }),
 *   ["--site-types", "weather,dome", "--allow-run-root", "/a", "--allow-run-root", "/b", "--verbose"],
 * );
 * ```
 */
export function runFlagArgs(values: Partial<RunFlagValues>): string[] {
  const args: string[] = [];
  for (const flag of RUN_FLAGS) {
    const value: unknown = values[flag.key];
    if (value === undefined || value === false) continue;
    if (value === true) args.push(`--${flag.name}`);
    else if (flag.multiple) {
      for (const item of value as readonly string[]) args.push(`--${flag.name}`, item);
    } else {
      args.push(`--${flag.name}`, Array.isArray(value) ? value.join(",") : String(value));
    }
  }
  return args;
}
