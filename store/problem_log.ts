/**
 * Warnings about lasting problems of the site directory's files (a file that cannot be synced,
 * a deleted `.lock`): the background check runs every second, so a problem that lasts is one
 * line, warned again only when its message changes or after it was solved.
 *
 * @example Usage
 * ```ts
 * import { ProblemLog } from "./problem_log.ts";
 * import assert from "node:assert/strict";
 *
 * const lines: string[] = [];
 * const problems = new ProblemLog((line) => lines.push(line));
 * problems.note("/t/.lock", "gone");
 * problems.note("/t/.lock", "gone");
 * problems.clear("/t/.lock");
 * problems.note("/t/.lock", "gone");
 * assert.deepEqual(lines, ["gone", "gone"]);
 * ```
 *
 * @module
 */

/**
 * The problems warned about, by the path they concern.
 *
 * @example Usage
 * ```ts
 * import { ProblemLog } from "./problem_log.ts";
 * const problems = new ProblemLog(console.warn);
 * problems.warn("Recovered a torn tail.");
 * ```
 */
export class ProblemLog {
  #warn: (message: string) => void;
  #open = new Map<string, string>();

  /**
   * Creates the log.
   *
   * @param warn Receives each line.
   */
  constructor(warn: (message: string) => void) {
    this.#warn = warn;
  }

  /**
   * Warns once, whatever the problem.
   *
   * @param message The line.
   */
  warn(message: string): void {
    this.#warn(message);
  }

  /**
   * Warns about a problem with a path, unless the same one was warned and not solved since.
   *
   * @param path What the problem concerns.
   * @param message The line.
   */
  note(path: string, message: string): void {
    if (this.#open.get(path) === message) return;
    this.#open.set(path, message);
    this.#warn(message);
  }

  /**
   * Notes that a path's problem is solved: the next one is warned again.
   *
   * @param path What the problem concerned.
   */
  clear(path: string): void {
    this.#open.delete(path);
  }
}
