/**
 * Free space on the file system that holds a directory (docs/types.md `/check`, docs/history.md
 * `telemetry_disk_free_bytes` and `--min-free`). One owner for the question "how much room is
 * left", so the health check, the metric and the low-space warning agree.
 *
 * @module
 */
import { statfs } from "node:fs/promises";

/** The default `--min-free`: 1 GiB (docs/history.md). */
export const DEFAULT_MIN_FREE_BYTES = 1024 ** 3;

/**
 * Bytes available to an unprivileged writer on the file system holding `dir`
 * (`f_bavail * f_frsize`, what `df` calls "Avail"), or `null` when the runtime cannot tell
 * (for example without read permission on `dir`).
 *
 * @example
 * ```ts ignore
 * const free = await diskFreeBytes("./telemetry");
 * if (free !== null && free < DEFAULT_MIN_FREE_BYTES) console.warn("low on disk");
 * ```
 */
export async function diskFreeBytes(dir: string): Promise<number | null> {
  try {
    const s = await statfs(dir);
    return Number(s.bavail) * Number(s.bsize);
  } catch {
    return null;
  }
}

/**
 * Bytes for people, in binary units: `1.0 GiB`, `512 MiB`, `300 B`.
 *
 * @param bytes A count of bytes.
 * @returns The text.
 *
 * @example Usage
 * ```ts
 * import { formatBytes } from "./disk.ts";
 * import assert from "node:assert/strict";
 *
 * assert.equal(formatBytes(1024 ** 3), "1.0 GiB");
 * ```
 */
export function formatBytes(bytes: number): string {
  const units = ["B", "KiB", "MiB", "GiB", "TiB", "PiB"];
  let v = bytes;
  let i = 0;
  while (Math.abs(v) >= 1024 && i < units.length - 1) {
    v /= 1024;
    i++;
  }
  return i === 0 ? `${v} B` : `${v < 10 ? v.toFixed(1) : Math.round(v)} ${units[i]}`;
}
