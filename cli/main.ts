/**
 * The implementation behind the `cli.ts` entry point; its module documentation is there.
 *
 * @module
 */

// deno-lint-ignore-file no-console
import { VERSION } from "../http/version.ts";
import { printable } from "../wire/terminal_text.ts";
import { SERVER_ENV_VARS } from "./flags.ts";
import { clientFailure, closest, Failure, printHelp, UsageError } from "./common.ts";
import { RUN_HELP, runCommand } from "./serve.ts";
import { permissionAdvice } from "./permissions.ts";
import { STOP_HELP, stopCommand } from "./stop.ts";
import { CURRENT_HELP, currentCommand } from "./current.ts";
import { POST_HELP, postCommand } from "./post.ts";
import { MIGRATE_HELP, migrateCommand } from "./migrate.ts";
import { READ_HELP, readCommand } from "./read.ts";
import { ARCHIVE_HELP, FORWARD_HELP } from "./forward_help.ts";
import { COLLECT_HELP } from "./collect_help.ts";
import { PUBLISH_HELP } from "./publish_help.ts";
import {
  RUNS_HELP,
  runsCommand,
  START_RUN_HELP,
  startRunCommand,
  STOP_RUN_HELP,
  stopRunCommand,
} from "./runs.ts";
import { FORGET_HELP, forgetCommand } from "./forget.ts";
import { CHECK_HELP, checkCommand } from "./check.ts";
import { SAFETY_HELP, safetyCommand } from "./safety.ts";

export { UsageError } from "./common.ts";
export { formatAge, renderTable, type TableOptions, type TableTypeInfo } from "./current.ts";
export type { FieldInfo } from "../client/client.ts";
export type { Envelope, JsonObject } from "../wire/event.ts";
export { DEFAULT_SITE_DIR } from "./flags.ts";

/** Environment variables the program reads (docs/cli.md: the only ones it may). */
export const ENV_VARS: readonly string[] = SERVER_ENV_VARS;

/** The `--help` texts, keyed by command (`""` for the program, `"telemetry"` for the group). */
export const HELP_TEXT: Readonly<Record<string, string>> = {
  "": `obs-utils ${VERSION}: observatory utilities

Usage: obs-utils telemetry <command> [options]

Commands:
  telemetry run       Start the telemetry service in the foreground
  telemetry stop      Stop a running service
  telemetry current   Show the latest event of each type
  telemetry post      Record one event
  telemetry forget    Remove a type from the current snapshot
  telemetry start-run Start a run
  telemetry stop-run  Stop the active run
  telemetry runs      List the runs of a site directory
  telemetry migrate   Convert a legacy file database to NDJSON
  telemetry read      Print stored events from the files
  telemetry forward   Send stored events to a fleet store (NATS, PostgreSQL)
  telemetry archive   Move events from NATS JetStream into PostgreSQL
  telemetry collect   Read devices (HTTP, MQTT, INDI, Alpaca, files) into the service
  telemetry publish   Publish the state and the verdict to MQTT (Home Assistant)
  telemetry check     Exit 0 when critical types are fresh and the disk has room
  telemetry safety    Exit 0 when the site is safe (the latched verdict), else 1
  telemetry help      Show the commands, or one command's options

Options:
  -h, --help     Show this help
  -V, --version  Print the version
`,
  telemetry: `Usage: obs-utils telemetry <command> [options]

Commands:
  run       Start the telemetry service in the foreground
  stop      Stop a running service
  current   Show the latest event of each type (--follow to watch)
  post      Record one event from the shell (--file for a batch)
  forget    Remove a type from the current snapshot until its next event
  start-run Start a run and print its record
  stop-run  Stop the active run and print its record
  runs      List every run of a site directory, newest first (no service needed)
  migrate   Convert a legacy file database to NDJSON
  read      Print stored events from the files (time range, types, runs)
  forward   Send stored events to NATS JetStream or PostgreSQL, and follow
  archive   Move events from NATS JetStream into PostgreSQL
  collect   Read devices (HTTP, MQTT, INDI, Alpaca, files) and post their events
  publish   Publish the state, freshness and verdict to MQTT, with HA discovery
  check     Exit 0 when critical types are fresh and the disk has room, else 1
  safety    Exit 0 when the site is safe (latched verdict of the critical types), else 1
  help      Show this help, or 'help <command>' for a command's options

Run 'obs-utils telemetry <command> --help' for a command's options.
`,
  run: RUN_HELP,
  stop: STOP_HELP,
  current: CURRENT_HELP,
  post: POST_HELP,
  migrate: MIGRATE_HELP,
  forget: FORGET_HELP,
  "start-run": START_RUN_HELP,
  "stop-run": STOP_RUN_HELP,
  runs: RUNS_HELP,
  read: READ_HELP,
  forward: FORWARD_HELP,
  archive: ARCHIVE_HELP,
  collect: COLLECT_HELP,
  publish: PUBLISH_HELP,
  check: CHECK_HELP,
  safety: SAFETY_HELP,
};

const COMMANDS: Record<string, (args: string[]) => Promise<number>> = {
  run: runCommand,
  stop: stopCommand,
  current: currentCommand,
  post: postCommand,
  migrate: migrateCommand,
  forget: forgetCommand,
  "start-run": startRunCommand,
  "stop-run": stopRunCommand,
  runs: runsCommand,
  read: readCommand,
  forward: async (args) =>
    asksHelp(args) ? printHelp(FORWARD_HELP) : (await fleetCommands()).forwardCommand(args),
  archive: async (args) =>
    asksHelp(args) ? printHelp(ARCHIVE_HELP) : (await fleetCommands()).archiveCommand(args),
  collect: async (args) =>
    asksHelp(args)
      ? printHelp(COLLECT_HELP)
      : (await onDemand<CollectCommands>("collect", "the collector")).collectCommand(args),
  publish: async (args) =>
    asksHelp(args)
      ? printHelp(PUBLISH_HELP)
      : (await onDemand<PublishCommands>("publish", "the publisher")).publishCommand(args),
  check: checkCommand,
  safety: safetyCommand,
};

/**
 * The commands `obs-utils telemetry` knows, in the order its unknown-command error lists them
 * (`help` aside). The usage texts and docs/cli.md must list each one: tests/cli/usage_docs_test.ts.
 *
 * @example Usage
 * ```ts
 * import { COMMAND_NAMES } from "./main.ts";
 * import assert from "node:assert/strict";
 *
 * assert.ok(COMMAND_NAMES.includes("safety"));
 * ```
 */
export const COMMAND_NAMES: readonly string[] = Object.keys(COMMANDS);

/**
 * Whether a fleet command was asked for its help: printed without loading the fleet's npm
 * packages, so `forward --help` works on a machine that never cached them (docs/cli.md).
 */
function asksHelp(args: readonly string[]): boolean {
  return args.some((arg) => arg === "--help" || arg === "-h");
}

/** The fleet commands' module (`cli/forward.ts`: `forward`, `archive`). */
interface FleetCommands {
  forwardCommand(args: string[]): Promise<number>;
  archiveCommand(args: string[]): Promise<number>;
}

/**
 * Loads the fleet commands only when one runs. The specifier is computed so that Deno leaves the
 * module out of the program's graph: a literal dynamic import is resolved ahead of time, and the
 * service (or `current`, `post`...) would then install the NATS and PostgreSQL npm packages at
 * its first start on a machine with an empty cache.
 */
async function fleetCommands(): Promise<FleetCommands> {
  const specifier = ["./forward", "ts"].join(".");
  try {
    return await import(specifier);
  } catch (err) {
    // An offline machine that never cached the packages (docs/operations.md#offline).
    const reason = (err instanceof Error ? err.message : String(err)).split("\n")[0]!;
    if (!/npm|package|registry/i.test(reason)) throw err;
    throw new Failure(
      `the fleet commands need their npm packages (the NATS and PostgreSQL clients), which are not in Deno's cache (${reason}); run 'deno task cache' once on a machine with network access, with the same DENO_DIR`,
    );
  }
}

/** The collector's module (`cli/collect.ts`). */
interface CollectCommands {
  collectCommand(args: string[]): Promise<number>;
}

/** The publisher's module (`cli/publish.ts`). */
interface PublishCommands {
  publishCommand(args: string[]): Promise<number>;
}

/**
 * Loads a command's module (`cli/<file>.ts`) only when it runs, with a computed specifier for the
 * reason {@linkcode fleetCommands} gives: the MQTT client of the collector (docs/collect.md) and
 * of the publisher (docs/publish.md) stays out of every other command's graph.
 *
 * @param file `collect` or `publish`.
 * @param what What it is, for the line when its npm packages are not in the cache.
 */
async function onDemand<T>(file: string, what: string): Promise<T> {
  const specifier = [`./${file}`, "ts"].join(".");
  try {
    return await import(specifier);
  } catch (err) {
    const reason = (err instanceof Error ? err.message : String(err)).split("\n")[0]!;
    if (!/npm|package|registry/i.test(reason)) throw err;
    throw new Failure(
      `${what} needs its npm packages (the MQTT client), which are not in Deno's cache (${reason}); run 'deno task cache' once on a machine with network access, with the same DENO_DIR`,
    );
  }
}

/**
 * Runs the program with the given arguments and returns its exit code: 0 ok, 1 failure,
 * 2 usage error. Errors are printed as one line on stderr, never as a stack trace.
 *
 * @param args The arguments after the program name, for example `["telemetry", "current"]`.
 * @returns The exit code.
 *
 * @example Usage
 * ```ts ignore
 * import { runCli } from "@obs-utils/telemetry/cli";
 * Deno.exit(await runCli(["telemetry", "current", "--json"]));
 * ```
 */
export async function runCli(args: string[]): Promise<number> {
  try {
    return await dispatch(args);
  } catch (err) {
    return report(err);
  }
}

async function dispatch(args: string[]): Promise<number> {
  if (args.length === 0) {
    // No command at all: the usage, on stderr, as a usage error.
    console.error(HELP_TEXT[""]!.trimEnd());
    return 2;
  }
  if (args[0] === "--help" || args[0] === "-h" || args[0] === "help") {
    return args[0] === "help" && args[1] !== undefined
      ? helpFor(args.slice(1))
      : printHelp(HELP_TEXT[""]!);
  }
  if (args[0] === "--version" || args[0] === "-V") return printVersion();
  if (args[0] !== "telemetry") {
    const guess = closest(args[0]!, ["telemetry"]);
    throw new UsageError(
      `unknown command "${args[0]}"; ${
        guess ? `did you mean ${guess}?` : "the command group is 'telemetry'"
      }`,
      "",
    );
  }
  const command = args[1];
  if (command === undefined) {
    console.error(HELP_TEXT.telemetry!.trimEnd());
    return 2;
  }
  if (command === "--help" || command === "-h") return printHelp(HELP_TEXT.telemetry!);
  if (command === "--version" || command === "-V") return printVersion();
  if (command === "help") return helpFor(args.slice(2));
  const run = COMMANDS[command];
  if (!run) {
    const guess = closest(command, Object.keys(COMMANDS));
    throw new UsageError(
      `unknown command "${command}"; ${
        guess ? `did you mean ${guess}?` : `use ${Object.keys(COMMANDS).join(", ")}`
      }`,
      "telemetry",
    );
  }
  return await run(args.slice(2));
}

function printVersion(): number {
  console.log(`obs-utils ${VERSION}`);
  return 0;
}

/** `help [COMMAND]`: the group's help, or one command's; `telemetry` may come first. */
function helpFor(rest: string[]): number {
  const names = rest[0] === "telemetry" ? rest.slice(1) : rest;
  const name = names[0];
  // `help --help` and `help help` ask how help works: its answer is the command list.
  if (name === undefined || name === "--help" || name === "-h" || name === "help") {
    return printHelp(HELP_TEXT.telemetry!);
  }
  const text = COMMANDS[name] ? HELP_TEXT[name] : undefined;
  if (text === undefined) {
    const guess = closest(name, name.startsWith("-") ? ["--help"] : Object.keys(COMMANDS));
    throw new UsageError(
      `no command "${name}"${guess ? `; did you mean ${guess}?` : ""}`,
      "telemetry",
    );
  }
  return printHelp(text);
}

/** Prints what went wrong as one line on stderr and returns the exit code. */
function report(err: unknown): number {
  if (err instanceof UsageError) {
    const where = err.command === ""
      ? "obs-utils"
      : err.command === "telemetry"
      ? "obs-utils telemetry"
      : `obs-utils telemetry ${err.command}`;
    const stop = /[.?!]$/.test(err.message) ? "" : ".";
    console.error(printable(`${where}: ${err.message}${stop} Run '${where} --help' for usage.`));
    return 2;
  }
  if (err instanceof Failure) {
    // A message may quote an answer, a file or an argument: printable only (docs/cli.md).
    console.error(printable(`error: ${err.message}`));
    return 1;
  }
  if (err instanceof Deno.errors.NotCapable) {
    console.error(printable(`error: ${permissionAdvice(err)}`));
    return 1;
  }
  const failure = clientFailure(err, { baseUrl: "the service", token: undefined });
  console.error(
    printable(`error: ${failure instanceof Error ? failure.message : String(failure)}`),
  );
  return 1;
}
