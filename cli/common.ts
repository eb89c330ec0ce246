/**
 * What the `obs-utils` commands share: the two error kinds and their exit codes, strict flag
 * parsing, the connection flags of the commands that talk to a running service, and the one-line
 * messages for connection, HTTP and permission failures.
 *
 * @example Usage
 * ```ts
 * import { parse, UsageError } from "./common.ts";
 * import assert from "node:assert/strict";
 *
 * assert.throws(() => parse("stop", ["--colour"], {}, false), UsageError);
 * ```
 *
 * @module
 */

// deno-lint-ignore-file no-console
import { parseArgs, type ParseArgsConfig } from "node:util";
import { TelemetryClient, TelemetryConnectionError, TelemetryHttpError } from "../client/client.ts";
import { Transport } from "../client/transport.ts";
import { checkToken } from "../client/args.ts";
import { DEFAULT_HOST, DEFAULT_PORT, hostForUrl, readEnv } from "../wire/address.ts";
import { terminalJson } from "../wire/terminal_text.ts";
import { parsePort } from "./flags.ts";

/**
 * A mistake in the command line: exit code 2.
 *
 * @example Usage
 * ```ts
 * import { runCli } from "@obs-utils/telemetry/cli";
 * import assert from "node:assert/strict";
 *
 * // An unknown command is a UsageError: one line on stderr, exit code 2.
 * assert.equal(await runCli(["telemetry", "frobnicate"]), 2);
 * ```
 */
export class UsageError extends Error {
  /** The command whose `--help` explains the fix. */
  readonly command: string;
  /**
   * Creates the error.
   *
   * @param message What is wrong.
   * @param command The command, for the `--help` hint.
   */
  constructor(message: string, command: string) {
    super(message);
    this.name = "UsageError";
    this.command = command;
  }
}

/** A failure to report as one line: exit code 1. */
export class Failure extends Error {
  /**
   * Creates the error.
   *
   * @param message The line to print after `error: `.
   */
  constructor(message: string) {
    super(message);
    this.name = "Failure";
  }
}

/** The `-h, --help` option every command takes. */
export const HELP_OPTION = { help: { type: "boolean", short: "h" } } as const satisfies NonNullable<
  ParseArgsConfig["options"]
>;

/** The help lines of {@linkcode CONNECTION_OPTIONS}, the same in every command's `--help`. */
export const CONNECTION_HELP = `  --host HOST     [env OBS_TELEMETRY_HOST, default localhost]
  --port PORT     [env OBS_TELEMETRY_PORT, default 6562]
  --token TOKEN   [env OBS_TELEMETRY_TOKEN]
  --tls           Use HTTPS (a server run with --tls-cert; trust its CA with DENO_CERT=FILE)
  -h, --help      Show this help`;

/** The options of the commands that talk to a running service. */
export const CONNECTION_OPTIONS = {
  host: { type: "string" },
  port: { type: "string" },
  token: { type: "string" },
  tls: { type: "boolean" },
  ...HELP_OPTION,
} as const satisfies NonNullable<ParseArgsConfig["options"]>;

/**
 * Parses a command's arguments strictly.
 *
 * @param command The command, for the `--help` hint of an error.
 * @param args The arguments after the command name.
 * @param options The `parseArgs` options.
 * @param allowPositionals Whether the command takes positional arguments.
 * @returns What `parseArgs` returns.
 * @throws {UsageError} For an unknown option, a missing value or an unexpected argument.
 *
 * @example Usage
 * ```ts
 * import { CONNECTION_OPTIONS, parse } from "./common.ts";
 * import assert from "node:assert/strict";
 *
 * const { values } = parse("stop", ["--port", "7000"], CONNECTION_OPTIONS, false);
 * assert.equal(values.port, "7000");
 * ```
 */
// The result type is parseArgs' own, inferred from `options`; spelling it out would copy node:util.
// deno-lint-ignore explicit-module-boundary-types
export function parse<T extends NonNullable<ParseArgsConfig["options"]>>(
  command: string,
  args: string[],
  options: T,
  allowPositionals: boolean,
) {
  try {
    return parseArgs({ args, options, allowPositionals, strict: true });
  } catch (err) {
    const message = err instanceof Error ? err.message.split("\n")[0]! : String(err);
    let line = message.replace(/\. To specify a positional.*$/, "");
    const unknown = /^Unknown option '(--?[^']*)'/.exec(line)?.[1];
    if (unknown !== undefined) {
      const known = Object.keys(options).map((name) => `--${name}`);
      const guess = /^-[^-]$/.test(unknown)
        ? shortGuess(unknown, known)
        : closest(unknown.replace(/=.*$/, ""), known);
      if (guess) line += `; did you mean ${guess}?`;
    }
    throw new UsageError(line, command);
  }
}

/**
 * The long options a one-letter flag may have meant (`-p` for `--port`): the commands take no
 * short options but `-h` (and `-V` for the program), so the letter is the start of the word.
 */
function shortGuess(flag: string, known: readonly string[]): string | undefined {
  const letter = flag[1]!.toLowerCase();
  const starts = known.filter((k) => k.slice(2, 3).toLowerCase() === letter);
  if (starts.length === 0 || starts.length > 3) return undefined;
  return starts.join(" or ");
}

/**
 * The candidate closest to a mistyped word, when it is close enough to be what was meant: at most
 * a third of its length in edits (one or two for short words), or the word is a prefix of it.
 *
 * @param word What was typed.
 * @param candidates What it could have been.
 * @returns The suggestion, or `undefined`.
 *
 * @example Usage
 * ```ts
 * import { closest } from "./common.ts";
 * import assert from "node:assert/strict";
 *
 * assert.equal(closest("--sorce", ["--source", "--dest"]), "--source");
 * assert.equal(closest("strat-run", ["start-run", "stop-run", "runs"]), "start-run");
 * assert.equal(closest("--xyz", ["--source"]), undefined);
 * ```
 */
export function closest(word: string, candidates: readonly string[]): string | undefined {
  let best: string | undefined;
  let bestDistance = Infinity;
  for (const candidate of candidates) {
    const d = editDistance(word.toLowerCase(), candidate.toLowerCase());
    if (d < bestDistance) {
      best = candidate;
      bestDistance = d;
    }
  }
  const bare = word.replace(/^-+/, "");
  const limit = Math.max(1, Math.min(3, Math.floor(bare.length / 3)));
  if (best !== undefined && bestDistance <= limit) return best;
  if (bare.length >= 3) {
    const prefixed = candidates.filter((c) => c.replace(/^-+/, "").startsWith(bare.toLowerCase()));
    if (prefixed.length === 1) return prefixed[0];
  }
  return undefined;
}

/** Levenshtein distance, with a transposition of neighbours counting as one edit. */
function editDistance(a: string, b: string): number {
  const d: number[][] = Array.from({ length: a.length + 1 }, (_, i) => [i]);
  for (let j = 1; j <= b.length; j++) d[0]![j] = j;
  for (let i = 1; i <= a.length; i++) {
    for (let j = 1; j <= b.length; j++) {
      const cost = a[i - 1] === b[j - 1] ? 0 : 1;
      let v = Math.min(d[i - 1]![j]! + 1, d[i]![j - 1]! + 1, d[i - 1]![j - 1]! + cost);
      if (i > 1 && j > 1 && a[i - 1] === b[j - 2] && a[i - 2] === b[j - 1]) {
        v = Math.min(v, d[i - 2]![j - 2]! + 1);
      }
      d[i]![j] = v;
    }
  }
  return d[a.length]![b.length]!;
}

/**
 * Parses a flag's value as a JSON object.
 *
 * @param text The flag's text.
 * @param flag The flag, for the message.
 * @param command The command, for the `--help` hint.
 * @param example An example value for the message.
 * @returns The object.
 * @throws {UsageError} If it is not JSON, or not an object.
 *
 * @example Usage
 * ```ts
 * import { parseJsonObject } from "./common.ts";
 * import assert from "node:assert/strict";
 *
 * assert.deepEqual(parseJsonObject('{"a": 1}', "--data", "post"), { a: 1 });
 * ```
 */
export function parseJsonObject(
  text: string,
  flag: string,
  command: string,
  example = `'{"wind_mps": 2.1}'`,
): Record<string, unknown> {
  let value: unknown;
  try {
    value = JSON.parse(text);
  } catch (err) {
    // V8 quotes the text, newlines included: escape them so the message stays one line.
    const reason = (err instanceof Error ? err.message : String(err)).replace(/\r?\n/g, "\\n");
    const advice = flag.includes("(stdin)")
      ? `send a JSON object such as ${example.slice(1, -1)}`
      : `quote it, e.g. ${flag} ${example}`;
    throw new UsageError(`${flag} is not valid JSON (${reason}); ${advice}`, command);
  }
  if (typeof value !== "object" || value === null || Array.isArray(value)) {
    throw new UsageError(`${flag} must be a JSON object such as ${example}`, command);
  }
  return value as Record<string, unknown>;
}

/**
 * The advice for a 401: the service wants a token (or another one), and where to give it.
 *
 * @param conn Where the service is and the token that was sent.
 * @returns The message, without the `error: ` prefix.
 *
 * @example Usage
 * ```ts
 * import { tokenAdvice } from "./common.ts";
 * import assert from "node:assert/strict";
 *
 * assert.equal(
 *   tokenAdvice({ baseUrl: "http://localhost:6562", token: undefined }),
 *   "The service at http://localhost:6562 requires a token; pass --token or set OBS_TELEMETRY_TOKEN",
 * );
 * ```
 */
export function tokenAdvice(conn: Connection): string {
  return conn.token === undefined
    ? `The service at ${conn.baseUrl} requires a token; pass --token or set OBS_TELEMETRY_TOKEN`
    : `The service at ${conn.baseUrl} refused the token given; pass its token with --token or OBS_TELEMETRY_TOKEN`;
}

/**
 * Reads a number of seconds above 0.
 *
 * @param value The flag's text.
 * @param flag The flag, for the message.
 * @param command The command, for the `--help` hint.
 * @returns The number.
 * @throws {UsageError} If it is not a finite number above 0.
 *
 * @example Usage
 * ```ts
 * import { parseSeconds } from "./common.ts";
 * import assert from "node:assert/strict";
 *
 * assert.equal(parseSeconds("0.5", "--interval", "current"), 0.5);
 * ```
 */
export function parseSeconds(value: string, flag: string, command: string): number {
  const n = Number(value);
  if (value.trim() === "" || !Number.isFinite(n) || n <= 0) {
    throw new UsageError(`${flag} must be a number of seconds above 0, not "${value}"`, command);
  }
  return n;
}

/** Where a running service is and the token it may want. */
export interface Connection {
  /** Base URL, for example `http://localhost:6562`. */
  baseUrl: string;
  /** Bearer token, if any. */
  token: string | undefined;
}

/**
 * Resolves the connection flags: each from its flag, else its `OBS_TELEMETRY_*` variable, else
 * the default address.
 *
 * @param values The parsed `--host`, `--port` and `--token`.
 * @param command The command, for the `--help` hint.
 * @returns The connection.
 * @throws {UsageError} If the port is not a number from 0 to 65535.
 *
 * @example Usage
 * ```ts
 * import { connection } from "./common.ts";
 * import assert from "node:assert/strict";
 *
 * assert.equal(connection({ host: "::1", port: "7000" }, "stop").baseUrl, "http://[::1]:7000");
 * ```
 */
export function connection(
  values: {
    host?: string | undefined;
    port?: string | undefined;
    token?: string | undefined;
    tls?: boolean | undefined;
  },
  command: string,
): Connection {
  const host = values.host ?? readEnv("OBS_TELEMETRY_HOST") ?? DEFAULT_HOST;
  const portText = values.port ?? readEnv("OBS_TELEMETRY_PORT");
  let port = DEFAULT_PORT;
  try {
    if (portText !== undefined) {
      port = parsePort(portText, values.port === undefined ? "OBS_TELEMETRY_PORT" : "--port");
    }
  } catch (err) {
    throw new UsageError((err as RangeError).message, command);
  }
  return {
    // --tls: a server started with --tls-cert; Deno trusts its CA through DENO_CERT or --cert.
    baseUrl: `${values.tls ? "https" : "http"}://${hostForUrl(host)}:${port}`,
    token: values.token ?? readEnv("OBS_TELEMETRY_TOKEN"),
  };
}

/**
 * A client for the connection.
 *
 * @param conn Where the service is.
 * @param timeoutMs How long one request may take.
 * @returns The client.
 *
 * @example Usage
 * ```ts
 * import { client } from "./common.ts";
 * import assert from "node:assert/strict";
 *
 * assert.ok(client({ baseUrl: "http://localhost:6562", token: undefined }));
 * ```
 */
export function client(conn: Connection, timeoutMs = 5000): TelemetryClient {
  return new TelemetryClient({
    baseUrl: conn.baseUrl,
    timeoutMs,
    ...(conn.token !== undefined ? { token: conn.token } : {}),
  });
}

/**
 * The client's transport for the connection: for the requests `TelemetryClient` has no method for
 * (the safety hub's write routes, `GET /safety?profile=P`, docs/safety.md), with the same token,
 * timeout and errors.
 *
 * @param conn Where the service is.
 * @param timeoutMs How long one request may take.
 * @returns The transport.
 * @throws {TypeError} If the token is not printable ASCII without spaces.
 *
 * @example Usage
 * ```ts
 * import { transport } from "./common.ts";
 * import assert from "node:assert/strict";
 *
 * assert.equal(transport({ baseUrl: "http://localhost:6562", token: undefined }).baseUrl, "http://localhost:6562");
 * ```
 */
export function transport(conn: Connection, timeoutMs = 5000): Transport {
  return new Transport({
    baseUrl: conn.baseUrl,
    token: checkToken(conn.token),
    timeoutMs,
    fetch: undefined,
  });
}

/**
 * Turns a client error into a one-line {@linkcode Failure}; anything else is returned as it is.
 *
 * @param err What the client threw.
 * @param conn Where the service was expected.
 * @returns The error to throw.
 *
 * @example Usage
 * ```ts
 * import { clientFailure, Failure } from "./common.ts";
 * import assert from "node:assert/strict";
 *
 * const err = new Error("boom");
 * assert.equal(clientFailure(err, { baseUrl: "http://localhost:6562", token: undefined }), err);
 * ```
 */
export function clientFailure(err: unknown, conn: Connection): unknown {
  if (err instanceof TelemetryConnectionError) {
    return new Failure(
      `No telemetry service answers at ${conn.baseUrl}; start it with 'obs-utils telemetry run' or check --host/--port`,
    );
  }
  if (err instanceof TelemetryHttpError && err.status === 401) {
    return new Failure(tokenAdvice(conn));
  }
  if (err instanceof TelemetryHttpError) {
    return new Failure(`The service answered ${err.status}: ${err.detail}`);
  }
  return err;
}

/**
 * Prints a help text on stdout.
 *
 * @param text The help text.
 * @returns The exit code, 0.
 *
 * @example Usage
 * ```ts ignore
 * import { printHelp } from "./common.ts";
 * Deno.exit(printHelp("Usage: obs-utils telemetry stop [options]\n"));
 * ```
 */
export function printHelp(text: string): number {
  console.log(text.trimEnd());
  return 0;
}

/**
 * Prints JSON text on stdout: exactly as given to a pipe or a file; on a terminal with the
 * characters JSON leaves raw (C1, DEL, bidi controls) escaped, the same JSON value (docs/cli.md).
 *
 * @param text Valid JSON text.
 *
 * @example Usage
 * ```ts ignore
 * import { printJson } from "./common.ts";
 * printJson(JSON.stringify({ target: "M31" }));
 * ```
 */
export function printJson(text: string): void {
  console.log(Deno.stdout.isTerminal() ? terminalJson(text) : text);
}

/**
 * A count with its noun in the right number: `1 site file`, `2 site files`, `1,204 records`.
 * Every count the commands print goes through it (docs/cli.md).
 *
 * @param n The count.
 * @param singular The noun for one, for example `"site file"`.
 * @param plural The noun for any other count [default `singular` + "s"].
 * @returns The count, grouped by thousands, and the noun.
 *
 * @example Usage
 * ```ts
 * import { counted } from "./common.ts";
 * import assert from "node:assert/strict";
 *
 * assert.equal(counted(1, "site file"), "1 site file");
 * assert.equal(counted(1204, "record"), "1,204 records");
 * assert.equal(counted(2, "file already exists", "files already exist"), "2 files already exist");
 * ```
 */
export function counted(n: number, singular: string, plural: string = `${singular}s`): string {
  return `${n.toLocaleString("en-US")} ${n === 1 ? singular : plural}`;
}
