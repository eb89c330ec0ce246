/**
 * The launcher: the program `deno task start`, `deno task cli` and the installed `obs-utils` run
 * (docs/cli.md#permissions). `obs-utils telemetry run` with any of its flags re-executes
 * `cli.ts telemetry run` with exactly the permissions those flags need (`runPermissionFlags()`,
 * the derivation `spawnServer()` and the systemd unit use), forwards SIGINT, SIGTERM and SIGHUP
 * to it and exits with its exit code. Every other command runs in this process.
 *
 * The launcher itself needs only `--allow-run=deno` and `--allow-env` for the variables of the
 * `run` flags: it reads the flags and the environment, and starts Deno.
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

import { parseArgs } from "node:util";
import { readEnv } from "../wire/address.ts";
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

/** How long after a signal passed on the same keypress may still arrive, in ms. */
const REPEAT_MS = 1000;

/** The Deno to start: this one when allowed, else `deno` on the PATH (`--allow-run=deno`). */
function denoCommand(): string {
  const self = Deno.execPath();
  return Deno.permissions.querySync({ name: "run", command: self }).state === "granted"
    ? self
    : "deno";
}

/**
 * Runs the service as a child with its scoped permissions, until it exits. The child has a
 * process group of its own, so a Ctrl-C reaches it once, through this process: the service
 * takes a second signal as "exit now" (docs/operations.md). A signal within a second of the one
 * passed on is the same Ctrl-C and is not passed on again.
 *
 * @param args The `deno` arguments from {@linkcode launchArgs}.
 * @returns The child's exit code.
 */
export async function launch(args: readonly string[]): Promise<number> {
  const child = new Deno.Command(denoCommand(), {
    args: [...args],
    env: { [LAUNCHED_ENV]: "1" },
    stdin: "inherit",
    stdout: "inherit",
    stderr: "inherit",
    detached: true,
  }).spawn();
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
  const listeners = forward.map(([heard, sent]) => {
    const listener = () => {
      const now = performance.now();
      if (now - lastSent < REPEAT_MS) return;
      lastSent = now;
      try {
        child.kill(sent);
      } catch {
        // already gone
      }
    };
    Deno.addSignalListener(heard, listener);
    return [heard, listener] as const;
  });
  try {
    return (await child.status).code;
  } finally {
    for (const [signal, listener] of listeners) Deno.removeSignalListener(signal, listener);
  }
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

if (import.meta.main) {
  const given = withoutTaskSeparator(Deno.args);
  const args = launchArgs(given);
  Deno.exit(args === undefined ? await runCli(given) : await launch(args));
}
