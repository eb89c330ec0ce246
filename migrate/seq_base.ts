/**
 * Where a migration's seq starts (docs/migration.md): the site stream's seq is one increasing
 * sequence whatever wrote its files, so migrated lines are numbered after the highest seq the
 * destination already holds (the last line of every site file, compressed ones too, and the seq
 * mark), and the seq mark is raised over them, so a service started on the destination never
 * hands their seqs out again (docs/storage.md).
 *
 * @module
 */

import { listSiteFiles } from "../store/site_files.ts";
import { readTail } from "../store/stored_read.ts";
import { readSeqMark, writeSeqMark } from "../store/seq_marks.ts";
import { withPermissionHint } from "./errors.ts";

/** The site stream a destination already holds. */
export interface SeqBase {
  /** The highest seq handed out in the destination (0: none), the migration counts on from. */
  readonly seq: number;
  /** The destination's seq mark (0: none). */
  readonly mark: number;
  /** Whether the destination holds a site stream already (a site file or a seq mark). */
  readonly live: boolean;
}

/**
 * Reads the highest seq of a destination's site stream: the last line of each site file (read
 * from its end; a compressed night is read whole) and its seq mark. A missing destination holds
 * none.
 *
 * @param dst The absolute destination directory.
 * @returns Where the migration's seq starts.
 * @throws {MigrateError} If the destination may not be read.
 *
 * @example Usage
 * ```ts ignore
 * import { readSeqBase } from "./seq_base.ts";
 * const base = await readSeqBase("/srv/telemetry");
 * console.log(`migrated lines start at seq ${base.seq + 1}`);
 * ```
 */
export function readSeqBase(dst: string): Promise<SeqBase> {
  return withPermissionHint(
    async () => {
      let files;
      try {
        files = await listSiteFiles(dst);
      } catch (err) {
        if (err instanceof Deno.errors.NotFound) return { seq: 0, mark: 0, live: false };
        throw err;
      }
      let seq = 0;
      for (const file of files) seq = Math.max(seq, (await readTail(file.path)).lastSeq);
      const mark = await readSeqMark(dst);
      return { seq: Math.max(seq, mark), mark, live: files.length > 0 || mark > 0 };
    },
    `read "${dst}"`,
    `--allow-read=${dst}`,
  );
}

/**
 * Raises the destination's seq mark over the migrated lines, when it holds a site stream
 * already: a service resuming there reads compressed older nights as seq 0
 * (docs/storage.md), so after the migrated nights are compressed only the mark would still
 * say that their seqs are taken. Written before the site files are renamed into place.
 *
 * @param dst The absolute destination directory.
 * @param base What the destination held before.
 * @param lastSeq The seq of the last migrated line.
 *
 * @example Usage
 * ```ts ignore
 * import { raiseSeqMark, readSeqBase } from "./seq_base.ts";
 * const base = await readSeqBase("/srv/telemetry");
 * await raiseSeqMark("/srv/telemetry", base, base.seq + 1200);
 * ```
 */
export async function raiseSeqMark(dst: string, base: SeqBase, lastSeq: number): Promise<void> {
  if (!base.live || lastSeq <= base.mark) return;
  await withPermissionHint(
    () => writeSeqMark(dst, lastSeq),
    `write "${dst}"`,
    `--allow-write=${dst}`,
  );
}
