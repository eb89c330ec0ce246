/**
 * The launcher: the program `deno task start`, `deno task cli` and the installed `obs-utils` run
 * (docs/cli.md#permissions). `obs-utils telemetry run` with any of its flags re-executes
 * `cli.ts telemetry run` with exactly the permissions those flags need (`runPermissionFlags()`,
 * the derivation `spawnServer()` and the systemd unit use), forwards SIGINT, SIGTERM and SIGHUP
 * to it and exits with its exit code. `obs-utils telemetry collect --config FILE` likewise runs
 * the collector under the permissions its config derives (`cli/collect_launch.ts`,
 * docs/collect.md), and `obs-utils telemetry publish --to URL` the publisher under the
 * permissions of its flags (`cli/publish_launch.ts`, docs/publish.md). Every other command runs
 * in this process.
 *
 * The launcher itself needs only `--allow-run=deno` and `--allow-env` for the variables of the
 * `run` flags: it reads the flags and the environment, and starts Deno. Deno refuses to start a
 * program whose environment holds an `LD_*` or `DYLD_*` variable (`LD_PRELOAD`) unless allowed
 * to run every program: then the launcher says in one line how to run the child by hand.
 *
 * Usage: deno run --no-lock --allow-run=deno --allow-env=OBS_TELEMETRY_... cli/launch.ts telemetry run [flags]
 *
 * @example Usage
 * ```ts
 * import { launchArgs } from "./launch.ts";
 * import assert from "node:assert/strict";
 *
 * const args = launchArgs(["telemetry", "run", "--port", "7000"], () => undefined);
 * assert.ok(args?.includes("--allow-net=localhost:7000"));
 * assert.equal(launchArgs(["telemetry", "current"], () => undefined), undefined);
 * ```
 *
 * @module
 */

// deno-lint-ignore-file no-console
import { parseArgs } from "node:util";
import { readEnv } from "../wire/address.ts";
import { printable } from "../wire/terminal_text.ts";
import { resolveRunFlags, type RunFlagInput, runParseOptions } from "./flags.ts";
import { LAUNCHED_ENV, runPermissionFlags } from "./permissions.ts";
import { runCli } from "./main.ts";

/** Runtime flags of the service (bench/RESULTS.md); the same as `SERVICE_V8_FLAGS`. */
const V8_FLAGS = ["--v8-flags=--max-semi-space-size=8"];

/**
 * The `deno` arguments that run `telemetry run` with these arguments under exactly the
 * permissions they need, or `undefined` when the arguments are another command, ask for help or
 * do not parse (the command then runs in this process, which prints its usage error itself).
 *
 * @param args The program's arguments, for example `["telemetry", "run", "--port", "7000"]`.
 * @param env Reads an environment variable (the `OBS_TELEMETRY_*` of the `run` flags).
 * @returns The arguments of `deno`, starting with `run`.
 *
 * @example Usage
 * ```ts
 * import { launchArgs } from "./launch.ts";
 * import assert from "node:assert/strict";
 *
 * const args = launchArgs(["telemetry", "run", "--site-dir", "/srv/t"], () => undefined)!;
 * assert.ok(args.includes("--allow-write=/srv/t"));
 * assert.deepEqual(args.slice(-4), ["telemetry", "run", "--site-dir", "/srv/t"]);
 * ```
 */
export function launchArgs(
  args: readonly string[],
  env: (name: string) => string | undefined = readEnv,
): string[] | undefined {
  if (args[0] !== "telemetry" || args[1] !== "run") return undefined;
  const flags = args.slice(2);
  let given: RunFlagInput;
  try {
    given = parseArgs({
      args: flags,
      options: runParseOptions(),
      strict: true,
      allowPositionals: false,
    }).values as RunFlagInput;
  } catch {
    return undefined;
  }
  let values;
  try {
    values = resolveRunFlags(given, env);
  } catch {
    return undefined;
  }
  return [
    "run",
    "--no-prompt",
    // The service imports no npm package: the lockfile (the tests' packages) is not its business.
    "--no-lock",
    ...V8_FLAGS,
    ...runPermissionFlags(values, [LAUNCHED_ENV]),
    new URL("../cli.ts", import.meta.url).href,
    "telemetry",
    "run",
    ...flags,
  ];
}

/**
 * How long after a signal passed on the same keypress may still arrive, in ms: `deno task`
 * relays it late on a loaded machine (more than a second was seen beside a full test suite).
 */
const REPEAT_MS = 3000;

/** The Deno to start: this one when allowed, else `deno` on the PATH (`--allow-run=deno`). */
function denoCommand(): string {
  const self = Deno.execPath();
  return Deno.permissions.querySync({ name: "run", command: self }).state === "granted"
    ? self
    : "deno";
}

/**
 * The `deno` arguments of the scoped collector for `telemetry collect` with a config
 * (`collectLaunchArgs()` of `cli/collect_launch.ts`), or `undefined` for any other command, or
 * when the command itself should answer (help, a bad flag or config, the collector's modules not
 * in the cache: `deno task cache`).
 */
async function collectArgs(args: readonly string[]): Promise<string[] | undefined> {
  if (args[0] !== "telemetry" || args[1] !== "collect") return undefined;
  // Computed: the collector's modules and its npm packages stay out of the launcher's graph, so
  // `telemetry run` never installs them (tests/collect/graph_test.ts).
  const specifier = ["./collect_launch", "ts"].join(".");
  try {
    const { collectLaunchArgs } = await import(specifier);
    return collectLaunchArgs(args.slice(2));
  } catch {
    return undefined;
  }
}

/**
 * The `deno` arguments and environment of the scoped publisher for `telemetry publish`
 * (`publishLaunchArgs()` of `cli/publish_launch.ts`), or `undefined` for any other command, or
 * when the command itself should answer (help, a bad flag).
 */
async function publishArgs(
  args: readonly string[],
): Promise<{ args: string[]; env: Record<string, string> } | undefined> {
  if (args[0] !== "telemetry" || args[1] !== "publish") return undefined;
  // Computed, as for the collector: the publisher and MQTT.js stay out of the launcher's graph.
  const specifier = ["./publish_launch", "ts"].join(".");
  try {
    const { publishLaunchArgs } = await import(specifier);
    return publishLaunchArgs(args.slice(2));
  } catch {
    return undefined;
  }
}

/** A child's argument as a command typed by hand has it: without the launcher's mark. */
function byHand(arg: string): string {
  return arg.startsWith("--allow-env=") ? arg.replace(`,${LAUNCHED_ENV}`, "") : arg;
}

/** `text` as one shell word. */
function shellWord(text: string): string {
  return /^[\w@%+=:,./-]+$/.test(text) ? text : `'${text.replaceAll("'", `'\\''`)}'`;
}

/**
 * Why the child could not be started, as one line with what to do (docs/cli.md#permissions).
 * Deno starts a program whose environment holds a (non-empty) variable named `LD_*` or `DYLD_*`
 * only under `--allow-run` for every program, whatever the program: the launcher may run `deno`
 * alone, so the line gives the child's own command, to run with that variable by hand.
 *
 * @param err What `spawn()` threw.
 * @param args The child's `deno` arguments.
 * @param what What the child is, for example `"the service"`.
 * @returns The line, without the `error: ` prefix.
 *
 * @example Usage
 * ```ts
 * import { spawnFailure } from "./launch.ts";
 * import assert from "node:assert/strict";
 *
 * const err = new Deno.errors.NotCapable(
 *   "Requires --allow-run permissions to spawn subprocess with LD_PRELOAD environment variable. Alternatively, spawn with the environment variable unset.",
 * );
 * assert.equal(
 *   spawnFailure(err, ["run", "cli.ts", "telemetry", "run"], "the service"),
 *   "cannot start the service with LD_PRELOAD set: Deno lets a program start another with an LD_* or DYLD_* variable only if it may run every program, and this launcher may run deno alone; run the service itself with that variable: deno run cli.ts telemetry run (or unset LD_PRELOAD)",
 * );
 * ```
 */
export function spawnFailure(err: unknown, args: readonly string[], what: string): string {
  const message = (err instanceof Error ? err.message : String(err)).split("\n")[0]!;
  const linker = /spawn subprocess with (.+?) environment variables?\./.exec(message)?.[1];
  if (err instanceof Deno.errors.NotCapable && linker !== undefined) {
    return `cannot start ${what} with ${linker} set: Deno lets a program start another with an LD_* or DYLD_* variable only if it may run every program, and this launcher may run deno alone; run ${what} itself with ${
      linker.includes(",") ? "those variables" : "that variable"
    }: deno ${args.map(byHand).map(shellWord).join(" ")} (or unset ${linker})`;
  }
  if (err instanceof Deno.errors.NotFound) {
    return `cannot start ${what}: deno is not on the PATH (${message}); install Deno or add its directory to PATH`;
  }
  return `cannot start ${what}: ${message}`;
}

/**
 * Runs the service (or the collector) as a child with its scoped permissions, until it exits.
 * The child has a process group of its own, so a Ctrl-C reaches it once, through this process:
 * the service takes a second signal as "exit now" (docs/operations.md). A signal within three
 * seconds of the one passed on is the same Ctrl-C and is not passed on again. A child that cannot be
 * started is one line on stderr ({@linkcode spawnFailure}) and exit code 1, never a stack trace.
 *
 * @param args The `deno` arguments from {@linkcode launchArgs}.
 * @param what What the child is, for the line of a failed start.
 * @param env Variables set in the child besides the launcher's mark (the publisher's broker URL,
 *   kept off its command line).
 * @returns The child's exit code.
 */
export async function launch(
  args: readonly string[],
  what = "the service",
  env: Readonly<Record<string, string>> = {},
): Promise<number> {
  let child: Deno.ChildProcess;
  try {
    child = new Deno.Command(denoCommand(), {
      args: [...args],
      env: { ...env, [LAUNCHED_ENV]: "1" },
      stdin: "inherit",
      stdout: "inherit",
      stderr: "inherit",
      detached: true,
    }).spawn();
  } catch (err) {
    console.error(printable(`error: ${spawnFailure(err, args, what)}`));
    return 1;
  }
  const forward: [Deno.Signal, Deno.Signal][] = [
    ["SIGINT", "SIGINT"],
    ["SIGTERM", "SIGTERM"],
    // A closed terminal ends the service as a SIGTERM would.
    ["SIGHUP", "SIGTERM"],
  ];
  // One Ctrl-C reaches this process twice, from the terminal and relayed by `deno task`; under
  // load the two are not merged. The service takes a second signal as "exit now", so only a
  // signal that comes a while after the last one passed on is a second one.
  let lastSent = -Infinity;
  for (const [heard, sent] of forward) {
    Deno.addSignalListener(heard, () => {
      const now = performance.now();
      if (now - lastSent < REPEAT_MS) return;
      lastSent = now;
      try {
        child.kill(sent);
      } catch {
        // already gone
      }
    });
  }
  // The listeners stay until this process exits with the child's code: a signal relayed late
  // after the child ended must not end it by Deno's default (exit 130) first.
  return (await child.status).code;
}

/**
 * The arguments without the `--` that `deno task start -- --port 7000` passes on as it is: the
 * first `--` only, so a later one keeps its meaning.
 *
 * @param args The program's arguments.
 * @returns The arguments without their first `--`.
 *
 * @example Usage
 * ```ts
 * import { withoutTaskSeparator } from "./launch.ts";
 * import assert from "node:assert/strict";
 *
 * assert.deepEqual(
 *   withoutTaskSeparator(["telemetry", "run", "--", "--port", "7000"]),
 *   ["telemetry", "run", "--port", "7000"],
 * );
 * ```
 */
export function withoutTaskSeparator(args: readonly string[]): string[] {
  const at = args.indexOf("--");
  return at < 0 ? [...args] : [...args.slice(0, at), ...args.slice(at + 1)];
}

/**
 * The launcher's program: `run`, `collect` or `publish` as a scoped child, any other command
 * here.
 */
async function main(args: readonly string[]): Promise<number> {
  const given = withoutTaskSeparator(args);
  const run = launchArgs(given);
  if (run !== undefined) return await launch(run);
  const collect = await collectArgs(given);
  if (collect !== undefined) return await launch(collect, "the collector");
  const publish = await publishArgs(given);
  if (publish !== undefined) return await launch(publish.args, "the publisher", publish.env);
  return await runCli(given);
}

if (import.meta.main) {
  // Not a top-level await: `cli/collect_launch.ts` imports this module, and importing it while
  // this one still awaited at its top level would wait for itself forever.
  main(Deno.args).then(Deno.exit);
}
