/**
 * Watches free space on the site directory's file system (docs/history.md): the latest reading for
 * `telemetry_disk_free_bytes` and `GET /check`, and a warning, at most once an hour, while it is
 * below `--min-free`. The clock and the reader are injectable, so the hourly rule is tested
 * without waiting an hour.
 *
 * @example Usage
 * ```ts
 * import { DiskWatch } from "./disk_watch.ts";
 * import assert from "node:assert/strict";
 *
 * const warnings: string[] = [];
 * const watch = new DiskWatch("/srv/telemetry", 1024, {
 *   read: () => Promise.resolve(10),
 *   warn: (m) => warnings.push(m),
 * });
 * assert.equal(await watch.sample(), 10);
 * assert.equal(warnings.length, 1);
 * ```
 *
 * @module
 */

import { DEFAULT_MIN_FREE_BYTES, diskFreeBytes } from "./disk.ts";
import { formatBytes } from "./disk.ts";

/** How often a running server samples free space, in ms. */
export const DISK_SAMPLE_MS = 60_000;
/** Least time between two low-space warnings, in ms. */
export const DISK_WARN_EVERY_MS = 3_600_000;

/** Options of {@linkcode DiskWatch}. */
export interface DiskWatchOptions {
  /** Reads free bytes of a directory's file system; null when unknown. */
  read?: (dir: string) => Promise<number | null>;
  /** The clock, ms since the epoch. */
  now?: () => number;
  /** Receives the low-space warning. */
  warn?: (message: string) => void;
}

/**
 * The latest free-space reading of one directory, and its low-space warning.
 *
 * @example Usage
 * ```ts ignore
 * import { DiskWatch } from "@obs-utils/telemetry/server";
 * const disk = new DiskWatch("./telemetry", { warn: (m) => console.warn(m) });
 * ```
 */
export class DiskWatch {
  /** The directory whose file system is watched. */
  readonly dir: string;
  /** The `--min-free` threshold in bytes. */
  readonly minFreeBytes: number;
  #read: (dir: string) => Promise<number | null>;
  #now: () => number;
  #warn: (message: string) => void;
  #last: number | null = null;
  #warnedAt = -Infinity;
  #timer: ReturnType<typeof setInterval> | undefined;
  #pending: Promise<unknown> = Promise.resolve();

  /**
   * Creates a watch; nothing is read until {@linkcode DiskWatch.sample} or
   * {@linkcode DiskWatch.start}.
   *
   * @param dir The site directory.
   * @param minFreeBytes The `--min-free` threshold.
   * @param options Reader, clock and warning sink.
   */
  constructor(
    dir: string,
    minFreeBytes: number = DEFAULT_MIN_FREE_BYTES,
    options: DiskWatchOptions = {},
  ) {
    this.dir = dir;
    this.minFreeBytes = minFreeBytes;
    this.#read = options.read ?? diskFreeBytes;
    this.#now = options.now ?? Date.now;
    this.#warn = options.warn ?? (() => {});
  }

  /** The latest reading, or null before the first or when it could not be told. */
  get last(): number | null {
    return this.#last;
  }

  /**
   * Reads free space now; below the threshold, warns unless it warned within the hour.
   *
   * @returns Free bytes, or null when unknown.
   */
  async sample(): Promise<number | null> {
    const free = await this.#read(this.dir);
    this.#last = free;
    const now = this.#now();
    if (free !== null && free < this.minFreeBytes && now - this.#warnedAt >= DISK_WARN_EVERY_MS) {
      this.#warnedAt = now;
      this.#warn(
        `disk space low: ${
          formatBytes(free)
        } free on the file system of ${this.dir}, below --min-free ${
          formatBytes(this.minFreeBytes)
        }; free some space or lower --min-free (this warning repeats at most once an hour)`,
      );
    }
    return free;
  }

  /** Samples now and then every {@linkcode DISK_SAMPLE_MS}, until {@linkcode DiskWatch.stop}. */
  start(): void {
    if (this.#timer !== undefined) return;
    const tick = () => void (this.#pending = this.sample().catch(() => {}));
    tick();
    const timer = setInterval(tick, DISK_SAMPLE_MS);
    this.#timer = timer;
    // The watch never keeps a process alive by itself.
    Deno.unrefTimer(timer);
  }

  /** Stops the periodic sampling; resolves once a reading under way has finished. */
  async stop(): Promise<void> {
    if (this.#timer !== undefined) clearInterval(this.#timer);
    this.#timer = undefined;
    await this.#pending;
  }
}
