/**
 * What the programs that run beside the service share (the collector, the publisher): their log
 * lines (UTC time, level, message, in docs/operations.md's shape), and their stop on SIGINT or
 * SIGTERM.
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
 * import { printLog } from "./beside.ts";
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

/** A signal that aborts on SIGINT or SIGTERM, until disposed. */
export interface StopOnSignals extends Disposable {
  /** Aborts on the first SIGINT or SIGTERM. */
  readonly signal: AbortSignal;
}

/**
 * Listens for SIGINT and SIGTERM until disposed: a program's run ends on the first of them.
 *
 * @returns The signal, and the disposal that removes the listeners.
 *
 * @example Usage
 * ```ts ignore
 * import { stopOnSignals } from "./beside.ts";
 * using stop = stopOnSignals();
 * await collector.run(outbox, stop.signal);
 * ```
 */
export function stopOnSignals(): StopOnSignals {
  const stop = new AbortController();
  const signals: Deno.Signal[] = ["SIGINT", "SIGTERM"];
  const onSignal = () => stop.abort();
  for (const s of signals) Deno.addSignalListener(s, onSignal);
  return {
    signal: stop.signal,
    [Symbol.dispose]() {
      for (const s of signals) Deno.removeSignalListener(s, onSignal);
    },
  };
}
