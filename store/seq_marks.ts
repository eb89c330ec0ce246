/**
 * Seq marks (docs/storage.md): the `.seq-mark.json` beside a stream's NDJSON files records the
 * highest seq the stream has handed out or reserved, for seqs that never reached a file (events
 * posted with `store_permanently: false`), so a restart never hands one out again.
 *
 * @example Usage
 * ```ts ignore
 * import { readSeqMark, writeSeqMark } from "./seq_marks.ts";
 * await writeSeqMark("./telemetry", 1041);
 * console.log(await readSeqMark("./telemetry")); // 1041
 * ```
 *
 * @module
 */

import { join } from "node:path";
import { readJsonFile, writeJsonAtomic } from "./fs.ts";
import { SEQ_MARK_FILE } from "./layout.ts";

/**
 * Reads a stream's seq high-water mark.
 *
 * @param dir The site directory or a run directory.
 * @returns The mark, or 0 when there is none (or it is unreadable).
 *
 * @example Usage
 * ```ts ignore
 * import { readSeqMark } from "./seq_marks.ts";
 * const mark = await readSeqMark("./telemetry/night-1");
 * ```
 */
export async function readSeqMark(dir: string): Promise<number> {
  try {
    const value = await readJsonFile(join(dir, SEQ_MARK_FILE));
    const seq = (value as { seq?: unknown } | undefined)?.seq;
    return typeof seq === "number" && Number.isSafeInteger(seq) && seq > 0 ? seq : 0;
  } catch (err) {
    if (err instanceof SyntaxError) return 0;
    throw err;
  }
}

/**
 * Records a stream's seq high-water mark atomically.
 *
 * @param dir The site directory or a run directory.
 * @param seq No seq at or below it may be handed out again.
 *
 * @example Usage
 * ```ts ignore
 * import { writeSeqMark } from "./seq_marks.ts";
 * await writeSeqMark("./telemetry", 2048);
 * ```
 */
export async function writeSeqMark(dir: string, seq: number): Promise<void> {
  await writeJsonAtomic(join(dir, SEQ_MARK_FILE), { seq });
}
