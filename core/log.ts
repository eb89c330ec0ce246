/**
 * The service log (docs/operations.md): every line the running service prints starts with an ISO 8601
 * UTC timestamp and a level, or is one JSON object (`ts`, `level`, `msg`, fields) with
 * `--log-format json`; and the warn lines of rejected requests are rate-limited.
 *
 * Start-up failures are not logged here: they stay one plain `error: ...` line (docs/storage.md).
 *
 * @example Usage
 * ```ts
 * import { ServiceLog } from "./log.ts";
 * import assert from "node:assert/strict";
 *
 * const lines: string[] = [];
 * const log = new ServiceLog({ now: () => Date.UTC(2026, 10, 23, 7, 43, 20, 123), write: (l) => lines.push(l) });
 * log.info("telemetry service listening on http://localhost:6562");
 * assert.deepEqual(lines, ["2026-11-23T07:43:20.123Z info telemetry service listening on http://localhost:6562"]);
 * ```
 *
 * @module
 */

import { printable } from "../wire/terminal_text.ts";

/** How a log line is written: `text` (timestamp, level, message) or `json` (one object). */
export type LogFormat = "text" | "json";

/** The formats of `--log-format`, the default first. */
export const LOG_FORMATS: readonly LogFormat[] = ["text", "json"];

/** How much a line matters; `warn` and `error` go to stderr, the others to stdout. */
export type LogLevel = "debug" | "info" | "warn" | "error";

/** Extra fields of a line: JSON values, shown as `key=value` in text. */
export type LogFields = Record<string, string | number | boolean | null>;

/** A rejected request, as {@linkcode ServiceLog.rejection} logs it. */
export interface RejectionFields {
  /** The request method. */
  method: string;
  /** The route pattern, or `other`. */
  route: string;
  /** The status answered. */
  status: number;
  /** The peer's address. */
  peer: string;
  /** The answer's `detail`. */
  detail: string;
}

/** Options of {@linkcode ServiceLog}. */
export interface ServiceLogOptions {
  /**
   * The line format.
   * @default {"text"}
   */
  format?: LogFormat;
  /**
   * Writes one finished line (without its newline).
   * @default {`console.log` for debug and info, `console.error` for warn and error}
   */
  write?: (line: string, level: LogLevel) => void;
  /**
   * The clock, in epoch milliseconds (tests inject one).
   * @default {Date.now}
   */
  now?: () => number;
  /**
   * Most rejection lines per second before they are counted instead of printed.
   * @default {10}
   */
  rejectionsPerSecond?: number;
  /**
   * Arranges a call after `ms` milliseconds, to print the `suppressed` line of a burst that
   * ended; `false` leaves that to the next rejection or {@linkcode ServiceLog.flush} (tests).
   * @default {an unref'd setTimeout}
   */
  schedule?: ((fn: () => void, ms: number) => void) | false;
}

/**
 * At most `limit` events per window of `windowMs`, counting the rest. A window begins at the
 * first event after the previous one ended (so a quiet service prints its first rejections at
 * once), and a clock that steps back starts a new window rather than suppressing forever.
 *
 * @example Usage
 * ```ts
 * import { RateLimiter } from "./log.ts";
 * import assert from "node:assert/strict";
 *
 * const limiter = new RateLimiter(2, 1000);
 * assert.deepEqual([0, 1, 2].map((t) => limiter.take(t).allowed), [true, true, false]);
 * assert.deepEqual(limiter.take(1000), { allowed: true, suppressed: 1 });
 * ```
 */
export class RateLimiter {
  #limit: number;
  #windowMs: number;
  #start = Number.NEGATIVE_INFINITY;
  #count = 0;
  #suppressed = 0;

  /**
   * Creates a limiter.
   *
   * @param limit Events allowed per window.
   * @param windowMs The window, in milliseconds.
   */
  constructor(limit: number, windowMs: number) {
    this.#limit = limit;
    this.#windowMs = windowMs;
  }

  /** When the current window ends, in the clock's milliseconds. */
  get windowEnd(): number {
    return this.#start + this.#windowMs;
  }

  /**
   * Takes one event.
   *
   * @param now The clock.
   * @returns Whether to print it, and how many were suppressed in the window that just ended
   *   (print that first).
   */
  take(now: number): { allowed: boolean; suppressed: number } {
    const suppressed = this.#roll(now);
    if (this.#count < this.#limit) {
      this.#count++;
      return { allowed: true, suppressed };
    }
    this.#suppressed++;
    return { allowed: false, suppressed };
  }

  /**
   * Hands out the suppressed count once its window has ended (or at once when `force`).
   *
   * @param now The clock.
   * @param force Hand it out even while the window lasts (shutdown).
   * @returns The count, 0 when there is nothing to report.
   */
  drain(now: number, force = false): number {
    if (force) {
      const n = this.#suppressed;
      this.#suppressed = 0;
      return n;
    }
    return this.#roll(now);
  }

  /** Ends the window when it is over; returns what it suppressed. */
  #roll(now: number): number {
    if (now >= this.#start && now < this.#start + this.#windowMs) return 0;
    const n = this.#suppressed;
    this.#start = now;
    this.#count = 0;
    this.#suppressed = 0;
    return n;
  }
}

/** One text line stays one line: control characters are shown escaped, never printed raw. */
const oneLine = printable;

function fieldText(value: string | number | boolean | null): string {
  if (typeof value !== "string") return String(value);
  return /^[^\s"=\\]+$/.test(value) ? oneLine(value) : oneLine(JSON.stringify(value));
}

function defaultWrite(line: string, level: LogLevel): void {
  // deno-lint-ignore no-console
  if (level === "warn" || level === "error") console.error(line);
  // deno-lint-ignore no-console
  else console.log(line);
}

function defaultSchedule(fn: () => void, ms: number): void {
  const id = setTimeout(fn, ms);
  // A pending suppressed line must not keep a stopping process alive.
  Deno.unrefTimer(id);
}

/**
 * The service log: one owner for the shape of every line the running service prints.
 *
 * @example Usage
 * ```ts
 * import { ServiceLog } from "./log.ts";
 * import assert from "node:assert/strict";
 *
 * const lines: string[] = [];
 * const log = new ServiceLog({ format: "json", now: () => 0, write: (l) => lines.push(l) });
 * log.warn("disk nearly full", { free_bytes: 1024 });
 * assert.deepEqual(JSON.parse(lines[0]!), {
 *   ts: "1970-01-01T00:00:00.000Z",
 *   level: "warn",
 *   msg: "disk nearly full",
 *   free_bytes: 1024,
 * });
 * ```
 */
export class ServiceLog {
  #format: LogFormat;
  #write: (line: string, level: LogLevel) => void;
  #now: () => number;
  #limiter: RateLimiter;
  #schedule: ((fn: () => void, ms: number) => void) | false;
  #scheduled = false;

  /**
   * Creates a log.
   *
   * @param options Format, output, clock and rate limit.
   */
  constructor(options: ServiceLogOptions = {}) {
    this.#format = options.format ?? "text";
    this.#write = options.write ?? defaultWrite;
    this.#now = options.now ?? Date.now;
    this.#limiter = new RateLimiter(options.rejectionsPerSecond ?? 10, 1000);
    this.#schedule = options.schedule ?? defaultSchedule;
  }

  /** The line format. */
  get format(): LogFormat {
    return this.#format;
  }

  /**
   * Prints one line.
   *
   * @param level Its level.
   * @param msg The message.
   * @param fields Extra fields: `key=value` after the message in text, keys of the object in JSON.
   */
  log(level: LogLevel, msg: string, fields: LogFields = {}): void {
    const ts = new Date(this.#now()).toISOString();
    let line: string;
    if (this.#format === "json") {
      // A field named ts, level or msg never overwrites the line's own.
      line = JSON.stringify({ ts, level, msg, ...withoutReserved(fields) });
    } else {
      line = `${ts} ${level} ${oneLine(msg)}`;
      for (const [key, value] of Object.entries(fields)) line += ` ${key}=${fieldText(value)}`;
    }
    this.#write(line, level);
  }

  /**
   * Prints a debug line.
   *
   * @param msg The message.
   * @param fields Extra fields.
   */
  debug(msg: string, fields?: LogFields): void {
    this.log("debug", msg, fields);
  }

  /**
   * Prints an info line.
   *
   * @param msg The message.
   * @param fields Extra fields.
   */
  info(msg: string, fields?: LogFields): void {
    this.log("info", msg, fields);
  }

  /**
   * Prints a warn line.
   *
   * @param msg The message.
   * @param fields Extra fields.
   */
  warn(msg: string, fields?: LogFields): void {
    this.log("warn", msg, fields);
  }

  /**
   * Prints an error line.
   *
   * @param msg The message.
   * @param fields Extra fields.
   */
  error(msg: string, fields?: LogFields): void {
    this.log("error", msg, fields);
  }

  /**
   * Logs a rejected request at warn: at most the rate limit a second, then one
   * `suppressed <n> similar lines` line when the burst's second is over.
   *
   * @param r The request and its answer.
   */
  rejection(r: RejectionFields): void {
    const now = this.#now();
    const { allowed, suppressed } = this.#limiter.take(now);
    if (suppressed > 0) this.#suppressedLine(suppressed);
    if (allowed) {
      const msg = this.#format === "json"
        ? "rejected request"
        : `rejected ${r.method} ${r.route} ${r.status} from ${r.peer}: ${r.detail}`;
      this.warn(
        msg,
        this.#format === "json"
          ? {
            method: r.method,
            route: r.route,
            status: r.status,
            peer: r.peer,
            detail: r.detail,
          }
          : {},
      );
      return;
    }
    if (!this.#scheduled && this.#schedule) {
      this.#scheduled = true;
      this.#schedule(() => {
        this.#scheduled = false;
        this.flush();
      }, Math.max(0, this.#limiter.windowEnd - now));
    }
  }

  /**
   * Prints the `suppressed` line of a burst whose second is over; with `force`, of the current
   * one too (at shutdown, so no count is lost).
   *
   * @param force Print it even while the second lasts.
   */
  flush(force = false): void {
    const n = this.#limiter.drain(this.#now(), force);
    if (n > 0) this.#suppressedLine(n);
  }

  #suppressedLine(n: number): void {
    this.warn(
      `suppressed ${n} similar lines`,
      this.#format === "json" ? { suppressed: n } : {},
    );
  }
}

function withoutReserved(fields: LogFields): LogFields {
  if (!("ts" in fields || "level" in fields || "msg" in fields)) return fields;
  const { ts: _ts, level: _level, msg: _msg, ...rest } = fields;
  return rest;
}

/**
 * Reads a `--log-format` value, in any letter case.
 *
 * @param text The flag's text.
 * @returns The format.
 * @throws {RangeError} If it is neither `text` nor `json`.
 *
 * @example Usage
 * ```ts
 * import { parseLogFormat } from "./log.ts";
 * import assert from "node:assert/strict";
 *
 * assert.equal(parseLogFormat("JSON"), "json");
 * assert.throws(() => parseLogFormat("xml"), RangeError);
 * ```
 */
export function parseLogFormat(text: string): LogFormat {
  const value = text.trim().toLowerCase();
  if (!(LOG_FORMATS as readonly string[]).includes(value)) {
    throw new RangeError(`--log-format must be text or json, not "${text}"`);
  }
  return value as LogFormat;
}
