/**
 * A child `deno` of this package (the service of `spawnServer()`, a forwarder, a collector): this
 * Deno started with the arguments a caller derived (its scoped permission flags, the program,
 * the program's flags), no stdin, the output where the caller says, and one way to stop it:
 * SIGTERM once, then SIGKILL if it is still running after a grace period. Deno only.
 *
 * @module
 */

/** Options of {@linkcode spawnDeno}. */
export interface DenoChildOptions {
  /** The arguments of `deno`: `run`, the runtime and permission flags, the module, its flags. */
  args: readonly string[];
  /** Variables set in the child's environment on top of this process's. */
  env?: Readonly<Record<string, string>>;
  /**
   * Where the child's stdout and stderr go.
   * @default {"inherit"}
   */
  output?: "inherit" | "null" | "piped";
  /**
   * A command that runs Deno in its own place (it execs it), with its arguments, for example
   * `["nice", "-n", "10"]`: the pid is still Deno's.
   */
  via?: readonly string[];
  /**
   * Gives the child a process group of its own, so a Ctrl-C at the terminal does not reach it.
   * @default {false}
   */
  detached?: boolean;
  /**
   * How long `stop()` waits after its SIGTERM before a child still running is killed (SIGKILL),
   * in ms; absent: it waits as long as the child takes.
   */
  killAfterMs?: number;
}

/** A child `deno` started by {@linkcode spawnDeno}. */
export interface DenoChild extends AsyncDisposable {
  /** The child process. */
  readonly process: Deno.ChildProcess;
  /** Its process id. */
  readonly pid: number;
  /**
   * Asks the child to end (SIGTERM, sent once however often this is called, and not at all
   * once it has exited) and waits for it; past `killAfterMs` it is killed.
   *
   * @returns The child's exit status.
   */
  stop(): Promise<Deno.CommandStatus>;
}

/**
 * Starts this Deno (`Deno.execPath()`) as a child with `args`, without stdin, its output where
 * `output` says. Needs `--allow-run` for the Deno executable (and for the `via` command).
 *
 * @param options The arguments, the environment, the output and how the child is stopped.
 * @returns The running child, which `stop()` or `await using` ends.
 *
 * @example Usage
 * ```ts
 * import { spawnDeno } from "./spawn.ts";
 * import assert from "node:assert/strict";
 *
 * const child = spawnDeno({ args: ["eval", "Deno.exit(3)"], output: "null" });
 * assert.equal((await child.process.status).code, 3);
 * assert.equal((await child.stop()).code, 3);
 * ```
 */
export function spawnDeno(options: DenoChildOptions): DenoChild {
  const output = options.output ?? "inherit";
  const deno = Deno.execPath();
  const [command, args] = options.via === undefined || options.via.length === 0
    ? [deno, [...options.args]]
    : [options.via[0]!, [...options.via.slice(1), deno, ...options.args]];
  const child = new Deno.Command(command, {
    args,
    stdin: "null",
    stdout: output,
    stderr: output,
    ...(options.env !== undefined ? { env: { ...options.env } } : {}),
    ...(options.detached ? { detached: true } : {}),
  }).spawn();
  let exited = false;
  const status = child.status.then((s) => {
    exited = true;
    return s;
  });
  const signal = (name: Deno.Signal): void => {
    if (exited) return;
    try {
      child.kill(name);
    } catch {
      // already gone
    }
  };
  const kill = async (): Promise<Deno.CommandStatus> => {
    if (exited) return await status;
    signal("SIGTERM");
    if (options.killAfterMs === undefined) return await status;
    const timer = setTimeout(() => signal("SIGKILL"), options.killAfterMs);
    try {
      return await status;
    } finally {
      clearTimeout(timer);
    }
  };
  let stopping: Promise<Deno.CommandStatus> | undefined;
  const stop = (): Promise<Deno.CommandStatus> => (stopping ??= kill());
  return {
    process: child,
    pid: child.pid,
    stop,
    async [Symbol.asyncDispose]() {
      await stop();
    },
  };
}
