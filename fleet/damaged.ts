/**
 * Damaged stored files (docs/fleet.md#damaged-files): a `.gz` cut short (a truncated trailer)
 * ends its lines early. The forwarder sends the whole lines it gave, records the file in the
 * cursor's `damaged` list (which `forward --status` shows) and goes on with the files after it,
 * instead of retrying that file forever. A file put in its place (another size on disk) is read
 * again.
 *
 * @module
 */
import type { DamagedFile, ForwardCursor } from "../store/forward_cursor.ts";
import type { StoredFile } from "../store/site_files.ts";
import type { ForwardSource } from "./sources.ts";

/**
 * Whether a file is passed over as damaged and has not changed since: a file replaced by a mended
 * copy (another size on disk) is read again.
 *
 * @example
 * ```ts
 * import { stillDamaged } from "./damaged.ts";
 * import assert from "node:assert/strict";
 *
 * const damaged = [{ stream: "site" as const, run_id: "", file: "site_20261101.ndjson", offset: 90, reason: "unexpected end of file", bytes: 512 }];
 * assert.equal(stillDamaged(damaged, "site", "", "site_20261101.ndjson", 512), true);
 * assert.equal(stillDamaged(damaged, "site", "", "site_20261101.ndjson", 600), false);
 * ```
 */
export function stillDamaged(
  damaged: DamagedFile[] | undefined,
  stream: "site" | "run",
  runId: string,
  file: string,
  bytes: number,
): boolean {
  return damaged?.some((d) =>
    d.stream === stream && d.run_id === runId && d.file === file &&
    (d.bytes === undefined || d.bytes === bytes)
  ) ?? false;
}

/**
 * A run's files less those passed over as damaged and unchanged since.
 *
 * @example
 * ```ts ignore
 * const files = await undamaged(cursor, source, await source.files());
 * ```
 */
export async function undamaged(
  cursor: ForwardCursor,
  source: ForwardSource,
  files: StoredFile[],
): Promise<StoredFile[]> {
  if (!cursor.damaged?.length) return files;
  const out: StoredFile[] = [];
  for (const file of files) {
    const size = (await Deno.lstat(file.path)).size;
    if (!stillDamaged(cursor.damaged, source.stream, source.runId, file.name, size)) {
      out.push(file);
    }
  }
  return out;
}

/**
 * Records a damaged file in the cursor, replacing an older record of it.
 *
 * @param offset How far it was read and sent, in uncompressed bytes.
 * @returns The warning to log, once.
 *
 * @example
 * ```ts ignore
 * log("warn", await recordDamaged(cursor, source, file, batch.end, err));
 * ```
 */
export async function recordDamaged(
  cursor: ForwardCursor,
  source: ForwardSource,
  file: StoredFile,
  offset: number,
  err: Error,
): Promise<string> {
  const bytes = (await Deno.lstat(file.path)).size;
  const name = file.name;
  const damaged = (cursor.damaged ?? []).filter((d) =>
    !(d.stream === source.stream && d.run_id === source.runId && d.file === name)
  );
  damaged.push({
    stream: source.stream,
    run_id: source.runId,
    file: name,
    offset,
    reason: err.message,
    bytes,
  });
  cursor.damaged = damaged;
  const what = source.stream === "site" ? "the site stream" : `run ${source.runId}`;
  return `skipping the damaged file ${file.path} after byte ${offset} of its content ` +
    `(${err.message}): the lines before were sent, the rest of ${what} goes on; ` +
    `forward --status lists it, and a mended copy put in its place is read again`;
}
