/**
 * `obs-utils telemetry forward --status` (docs/fleet.md): each cursor's lag, read from the files
 * and the cursors alone, without sending anything or needing the destination.
 *
 * @module
 */
import {
  type DamagedFile,
  type ForwardCursor,
  listCursors,
  type StreamPosition,
} from "../store/forward_cursor.ts";
import { holdsMore, siteKeys } from "./site_progress.ts";
import { listRunDirs } from "./sources.ts";
import { storedSeq } from "./item.ts";
import {
  DamagedFileError,
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
  /**
   * Files of this stream passed over as damaged (docs/fleet.md#damaged-files): each file's name,
   * how far it was sent, and why it could not be read further.
   */
  damaged: DamagedFile[];
}

/** Lines and the first `ts` counted so far. */
interface Tally {
  count: number;
  firstTs: string | null;
}

/**
 * Counts the stored events of one file from `offset` (a damaged `.gz` to where it breaks), and
 * finds the oldest `ts` among them.
 */
async function tallyFile(file: StoredFile, offset: number, tally: Tally): Promise<void> {
  try {
    for await (const lines of readLines(file, { offset })) {
      for (const line of lines) {
        if (typeof storedSeq(line.text) !== "number") continue; // skipped by the forwarder too
        tally.count++;
        // The oldest by time: after a clock step an earlier file may hold later events.
        try {
          const ts = JSON.parse(line.text).ts;
          if (
            typeof ts === "string" &&
            (tally.firstTs === null || Date.parse(ts) < Date.parse(tally.firstTs))
          ) tally.firstTs = ts;
        } catch { /* counted, without a time */ }
      }
    }
  } catch (err) {
    if (
      !(err instanceof OffsetMismatchError) && !(err instanceof Deno.errors.NotFound) &&
      !(err instanceof DamagedFileError)
    ) throw err;
  }
}

/**
 * Counts the site stream's unsent lines in every file, whatever night the cursor reads now: a
 * clock stepped back writes into earlier nights (docs/fleet.md#a-clock-stepped-back). A file is
 * read only from its entry in `site_files`, and only when it holds more than that.
 */
async function siteLag(files: StoredFile[], cursor: ForwardCursor): Promise<Tally> {
  const tally: Tally = { count: 0, firstTs: null };
  const keys = siteKeys(files);
  const at = cursor.site;
  for (let i = 0; i < files.length; i++) {
    const file = files[i]!;
    const key = keys[i]!;
    let from = 0;
    if (cursor.site_files !== undefined && Object.hasOwn(cursor.site_files, key)) {
      from = cursor.site_files[key]!;
    } else if (cursor.site_files === undefined && at !== null && plainName(key) <= at.file) {
      // A cursor written before site_files: nights before its file count as passed.
      if (plainName(key) < at.file) continue;
      from = at.offset;
    }
    if (cursor.damaged?.some((d) => d.stream === "site" && d.file === file.name)) continue;
    if (from > 0 && !await holdsMore(file, from)) continue;
    await tallyFile(file, from, tally);
  }
  return tally;
}

/** Counts the lines after a position, and finds the first one's `ts`. */
async function lagAfter(files: StoredFile[], at: StreamPosition | null): Promise<Tally> {
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
  const tally: Tally = { count: 0, firstTs: null };
  for (let f = start; f < files.length; f++) {
    await tallyFile(files[f]!, f === start ? offset : 0, tally);
  }
  return tally;
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
      const { count, firstTs } = stream === "site"
        ? await siteLag(files, cursor)
        : await lagAfter(files, at);
      const age = firstTs === null ? null : Math.max(0, (now - Date.parse(firstTs)) / 1000);
      out.push({
        name: entry.name,
        stream,
        run_id: runId,
        sent_seq: at?.seq ?? 0,
        lag_events: count,
        oldest_unsent_ts: firstTs,
        oldest_unsent_age_s: age === null ? null : Math.round(age),
        damaged: (cursor.damaged ?? []).filter((d) => d.stream === stream && d.run_id === runId),
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
