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
 * How far past an unwritten (ephemeral) seq the persisted high-water mark reserves, so that not
 * every ephemeral event costs a file write. After a crash, seq continues above the reservation.
 */
export const SEQ_RESERVE = 1024;

/**
 * The mark a stream must record before its group is written, when seqs that reach no file
 * pass its mark: they must never be handed out again (docs/storage.md), so a block above them
 * is reserved on disk before anyone is told about them.
 *
 * @param unwritten The highest seq of the group that reaches no file (0: none).
 * @param mark The stream's recorded mark.
 * @returns The mark to record, or `undefined` when the recorded one covers the group.
 *
 * @example Usage
 * ```ts
 * import { reservedMark, SEQ_RESERVE } from "./seq_marks.ts";
 * import assert from "node:assert/strict";
 *
 * assert.equal(reservedMark(7, 0), 7 + SEQ_RESERVE);
 * assert.equal(reservedMark(7, 7 + SEQ_RESERVE), undefined);
 * ```
 */
export function reservedMark(unwritten: number, mark: number): number | undefined {
  return unwritten > mark ? unwritten + SEQ_RESERVE : undefined;
}

/**
 * The exact mark a stream records when it stops (run stop, shutdown), when seqs above its last
 * line were handed out or a reservation exists, so a restart neither reuses them nor skips a
 * reservation's worth.
 *
 * @param seq The last seq handed out.
 * @param written The highest seq on disk.
 * @param mark The recorded mark.
 * @returns The mark to record, or `undefined` when the file and the mark already agree.
 *
 * @example Usage
 * ```ts
 * import { settledMark } from "./seq_marks.ts";
 * import assert from "node:assert/strict";
 *
 * assert.equal(settledMark(9, 7, 0), 9);
 * assert.equal(settledMark(9, 9, 0), undefined);
 * ```
 */
export function settledMark(seq: number, written: number, mark: number): number | undefined {
  return seq > written || mark > seq ? seq : undefined;
}

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
