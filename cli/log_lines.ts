/**
 * The log lines of the programs that run beside the service (the collector, the publisher): UTC
 * time, level, message, in docs/operations.md's shape.
 *
 * @module
 */

// deno-lint-ignore-file no-console
import { printable } from "../wire/terminal_text.ts";

/** A program's log: one line per call, at a level. */
export type LogLine = (level: "info" | "warn" | "error", message: string) => void;

/**
 * A log printing `<UTC time> <level> <message>`: info on stdout (on stderr too when `toStderr`,
 * for a program whose stdout is its output), warnings and errors on stderr.
 *
 * @param toStderr Whether info lines go to stderr.
 * @returns The log.
 *
 * @example Usage
 * ```ts ignore
 * import { printLog } from "./log_lines.ts";
 * printLog(false)("info", "started"); // 2026-11-27T09:24:57.227Z info started
 * ```
 */
export function printLog(toStderr: boolean): LogLine {
  return (level, message) => {
    // A message may quote a source's answer or a file's text: printable only (docs/cli.md).
    const line = `${new Date().toISOString()} ${level} ${printable(message)}`;
    if (level === "info" && !toStderr) console.log(line);
    else console.error(line);
  };
}
