/**
 * A server program a test runs as a child (nats-server, mosquitto, indiserver): on a free loopback
 * port, in a temp directory of its own that is also its HOME, restartable on the same port, killed
 * and deleted on dispose. Other copies of the suite may run beside this one on the same machine:
 * it is up once the child itself listens on its port (another program answering there is not it),
 * and a first start whose port another program took is tried again on another port.
 * @module
 */

import { join } from "node:path";
import { freePort, listensOn } from "./util.ts";

/** How many ports a first start tries before it gives up. */
const START_ATTEMPTS = 3;

/** The child exited before it listened: its port was taken, or its arguments are wrong. */
class ExitedEarly extends Error {}

/** A server process on a free loopback port in a temp dir, restartable, stopped on dispose. */
export class ServerProcess implements AsyncDisposable {
  /** Its temp directory: its files, its HOME and `stderr.log`, what it printed. */
  readonly dir: string;
  #port: number;
  #child: Deno.ChildProcess | undefined;
  readonly #name: string;
  readonly #command: (port: number, dir: string) => [string, string[]];

  /**
   * @param name What it is, for errors.
   * @param dir Its own temp directory (deleted on dispose).
   * @param command The program and arguments that listen on 127.0.0.1:`port`.
   */
  protected constructor(
    name: string,
    dir: string,
    command: (port: number, dir: string) => [string, string[]],
  ) {
    this.#name = name;
    this.dir = dir;
    this.#port = freePort();
    this.#command = command;
  }

  /** The port it listens on. */
  get port(): number {
    return this.#port;
  }

  /** Its HOME, inside its temp dir: what it saves there (INDI drivers' config) is its own. */
  get home(): string {
    return join(this.dir, "home");
  }

  /**
   * The first start: on a free port, and when the child exits before it listens (another program
   * took the port first), on another one.
   */
  protected async firstStart(): Promise<void> {
    await Deno.mkdir(this.home, { recursive: true });
    for (let attempt = 1;; attempt++) {
      try {
        return await this.restart();
      } catch (err) {
        if (!(err instanceof ExitedEarly) || attempt >= START_ATTEMPTS) throw err;
        this.#port = freePort();
      }
    }
  }

  /**
   * Starts (again) on the same port; waits until the child itself listens there.
   *
   * @throws {Error} If the child exits first (the error has what it printed) or does not listen
   * within 15 s.
   */
  async restart(): Promise<void> {
    const [cmd, args] = this.#command(this.#port, this.dir);
    const log = join(this.dir, "stderr.log");
    // The shell replaces itself with the program (same pid), its stderr appended to the log.
    const child = new Deno.Command("sh", {
      args: ["-c", 'exec "$@" 2>>"$LOG"', "sh", cmd, ...args],
      env: { HOME: this.home, LOG: log },
      stdin: "null",
      stdout: "null",
      stderr: "null",
    }).spawn();
    this.#child = child;
    let exited: Deno.CommandStatus | undefined;
    void child.status.then((status) => (exited = status));
    const deadline = Date.now() + 15_000;
    while (!(await listensOn(child.pid, this.#port))) {
      if (exited) {
        this.#child = undefined;
        const printed = await Deno.readTextFile(log).catch(() => "");
        throw new ExitedEarly(
          `${this.#name} exited with code ${exited.code} before listening on 127.0.0.1:${this.#port}` +
            `: ${printed.trim().split("\n").slice(-5).join(" | ")}`,
        );
      }
      if (Date.now() > deadline) {
        await this.kill();
        throw new Error(`${this.#name} did not listen on 127.0.0.1:${this.#port} within 15 s`);
      }
      await new Promise((r) => setTimeout(r, 25));
    }
  }

  /** Kills the process (SIGKILL by default) and waits for it to exit. */
  async kill(signal: Deno.Signal = "SIGKILL"): Promise<void> {
    const child = this.#child;
    if (!child) return;
    this.#child = undefined;
    try {
      child.kill(signal);
    } catch { /* already gone */ }
    await child.status;
  }

  async [Symbol.asyncDispose](): Promise<void> {
    await this.kill();
    await Deno.remove(this.dir, { recursive: true }).catch(() => {});
  }
}
