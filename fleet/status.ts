/**
 * `obs-utils telemetry forward --status` (docs/fleet.md): each cursor's lag, read from the files
 * and the cursors alone, without sending anything or needing the destination.
 *
 * @module
 */
import { type ForwardCursor, listCursors, type StreamPosition } from "../store/forward_cursor.ts";
import { listRunDirs } from "./sources.ts";
import { storedSeq } from "./item.ts";
import {
  listRunFiles,
  listSiteFiles,
  OffsetMismatchError,
  plainName,
  readLines,
  type StoredFile,
} from "../store/site_files.ts";

/** The lag of one stream behind one forwarder's cursor. */
export interface StreamLag {
  /** The forwarder (cursor) name. */
  name: string;
  /** `site` or `run`. */
  stream: "site" | "run";
  /** The run's id, `""` for the site stream. */
  run_id: string;
  /** The last seq acknowledged by the destination (0 when nothing was sent). */
  sent_seq: number;
  /** Stored events not yet acknowledged. */
  lag_events: number;
  /** `ts` of the oldest unsent event, or `null` when nothing is waiting. */
  oldest_unsent_ts: string | null;
  /** Seconds since that `ts` (by this machine's clock), or `null`. */
  oldest_unsent_age_s: number | null;
}

/** Counts the lines after a position, and finds the first one's `ts`. */
async function lagAfter(
  files: StoredFile[],
  at: StreamPosition | null,
): Promise<{ count: number; firstTs: string | null }> {
  let start = 0;
  let offset = 0;
  if (at !== null) {
    const i = files.findIndex((f) => plainName(f.name) === at.file);
    if (i >= 0) {
      start = i;
      offset = at.offset;
    } else {
      start = files.findIndex((f) => plainName(f.name) > at.file);
      if (start < 0) return { count: 0, firstTs: null };
    }
  }
  let count = 0;
  let firstTs: string | null = null;
  for (let f = start; f < files.length; f++) {
    try {
      for await (const lines of readLines(files[f]!, { offset: f === start ? offset : 0 })) {
        for (const line of lines) {
          if (typeof storedSeq(line.text) !== "number") continue; // skipped by the forwarder too
          count++;
          if (firstTs === null) {
            try {
              const ts = JSON.parse(line.text).ts;
              if (typeof ts === "string") firstTs = ts;
            } catch { /* counted, without a time */ }
          }
        }
      }
    } catch (err) {
      if (!(err instanceof OffsetMismatchError) && !(err instanceof Deno.errors.NotFound)) {
        throw err;
      }
    }
  }
  return { count, firstTs };
}

/**
 * The lag of every stream behind every cursor of a site directory (or the one named).
 *
 * @example
 * ```ts ignore
 * for (const lag of await forwardStatus("./telemetry")) console.log(lag.name, lag.lag_events);
 * ```
 */
export async function forwardStatus(
  siteDir: string,
  options: { name?: string; now?: number } = {},
): Promise<StreamLag[]> {
  const now = options.now ?? Date.now();
  const cursors = (await listCursors(siteDir)).filter((c) =>
    options.name === undefined || c.name === options.name
  );
  const siteFiles = await listSiteFiles(siteDir);
  const runs = [...(await listRunDirs(siteDir)).entries()].sort(([a], [b]) => a.localeCompare(b));
  const runFiles = new Map<string, StoredFile[]>();
  for (const [runId, { dir }] of runs) runFiles.set(runId, await listRunFiles(dir));
  const out: StreamLag[] = [];
  for (const entry of cursors) {
    if (entry.cursor === undefined) {
      throw new Error(`Cannot read the cursor "${entry.name}": ${entry.problem}`);
    }
    const cursor: ForwardCursor = entry.cursor;
    const row = async (
      stream: "site" | "run",
      runId: string,
      files: StoredFile[],
      at: StreamPosition | null,
    ) => {
      const { count, firstTs } = await lagAfter(files, at);
      const age = firstTs === null ? null : Math.max(0, (now - Date.parse(firstTs)) / 1000);
      out.push({
        name: entry.name,
        stream,
        run_id: runId,
        sent_seq: at?.seq ?? 0,
        lag_events: count,
        oldest_unsent_ts: firstTs,
        oldest_unsent_age_s: age === null ? null : Math.round(age),
      });
    };
    await row("site", "", siteFiles, cursor.site);
    for (const [runId] of runs) {
      await row(
        "run",
        runId,
        runFiles.get(runId) ?? [],
        Object.hasOwn(cursor.runs, runId) ? cursor.runs[runId]! : null,
      );
    }
  }
  return out;
}
