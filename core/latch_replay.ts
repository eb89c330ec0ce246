/**
 * What the start-up replay of the safety latch reads (docs/safety.md#across-restarts): every
 * stored line of the critical types written after the streams' ends the latch file names (its
 * `covers`), in the site stream, the run active when it was saved, and every run started since
 * (found in the run log after the offset it names). `safety_watch.ts` judges the lines.
 *
 * @example Usage
 * ```ts ignore
 * import { readLinesAfter } from "./latch_replay.ts";
 * const failed = await readLinesAfter(store, { siteFiles, activeRunDir }, cover, types, (line) => {
 *   console.log(line);
 * });
 * if (failed !== undefined) console.log("cannot tell:", failed);
 * ```
 *
 * @module
 */

import type { LatchCover } from "./safety.ts";
import type { SiteStore } from "../store/site_store.ts";
import type { SiteFileTail } from "../store/site_resume.ts";
import { readRunLog } from "../store/run_log.ts";
import { RUN_LOG_FILE } from "../store/layout.ts";
import { errorText } from "./errors.ts";

/** Where the streams stand at start-up, as the resume found them. */
export interface StreamsNow {
  /** Every site file, by ascending last seq. */
  siteFiles: readonly SiteFileTail[];
  /** The run active now (resumed), if any. */
  activeRunDir: string | undefined;
}

/**
 * Hands each stored line of the given types written after a cover to `each`: the site stream
 * after the cover's site seq, the cover's run after its seq, and whole every run the run log
 * names after the cover's offset (and the active run, if neither names it).
 *
 * @param store The site directory.
 * @param now Where the streams stand.
 * @param cover How far the latch file says the streams had been judged.
 * @param types The types to hand over.
 * @param each Called with each line, in stream order.
 * @returns Undefined when every line after the cover was handed over, else why it cannot be
 *   told which lines came after it (the caller then fails closed).
 *
 * @example Usage
 * ```ts ignore
 * const failed = await readLinesAfter(store, now, cover, new Set(["weather"]), console.log);
 * ```
 */
export async function readLinesAfter(
  store: SiteStore,
  now: StreamsNow,
  cover: LatchCover,
  types: ReadonlySet<string>,
  each: (line: string) => void,
): Promise<string | undefined> {
  const pick = (type: string, line: string) => {
    if (types.has(type)) each(line);
  };
  try {
    for (const file of now.siteFiles) {
      if (file.lastSeq <= cover.site_seq) continue;
      await store.readSiteAfter(file.name, { afterSeq: cover.site_seq }, pick);
    }
    // Each run directory with the seq after which its lines are new.
    const runs = new Map<string, number>();
    if (cover.run) runs.set(cover.run.dir, cover.run.seq);
    if (cover.runs_log) {
      const log = await readRunLog(store.siteDir, { after: cover.runs_log });
      if (!log.continued && cover.runs_log.offset > 0) {
        return `${RUN_LOG_FILE} was replaced or cut short since the latch was saved`;
      }
      for (const line of log.lines) if (!runs.has(line.runDir)) runs.set(line.runDir, 0);
    }
    if (now.activeRunDir !== undefined && !runs.has(now.activeRunDir)) {
      runs.set(now.activeRunDir, 0);
    }
    for (const [dir, afterSeq] of runs) await store.readRunAfter(dir, { afterSeq }, pick);
  } catch (err) {
    return `the stored lines cannot be read: ${errorText(err)}`;
  }
  return undefined;
}
