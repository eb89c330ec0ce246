/**
 * Where the site stream resumes at start-up (docs/storage.md): the last seq of every site file,
 * read from its end, after moving a torn tail aside, and the site directory's seq mark.
 *
 * @example Usage
 * ```ts ignore
 * import { resumeSite } from "./site_resume.ts";
 * const { lastSeq, mark, files } = await resumeSite("/srv/telemetry", console.warn);
 * console.log(Math.max(lastSeq, mark), files.at(-1)?.name);
 * ```
 *
 * @module
 */

import { join } from "node:path";
import { SITE_FILE, STORED_SITE_FILE } from "./layout.ts";
import { readSeqMark } from "./seq_marks.ts";
import { chooseForms, plainName, storedFile } from "./site_files.ts";
import { readTail } from "./stored_read.ts";
import { recoverTornTail, tornMessage } from "./writer.ts";

/** One site file as {@linkcode resumeSite} found it, from its end. */
export interface SiteFileTail {
  /** The file name, for example `site_20260510.ndjson`. */
  name: string;
  /** Its size in bytes (after any torn tail was moved aside). */
  size: number;
  /** The seq of its last complete line that parses, or 0. */
  lastSeq: number;
}

/** What the site stream resumes from, found by {@linkcode resumeSite}. */
export interface SiteResume {
  /** The highest last seq of any site file (seq order, never modification times). */
  lastSeq: number;
  /** The site directory's seq mark (0: none). */
  mark: number;
  /** Every site file, by ascending last seq (then name). */
  files: SiteFileTail[];
}

/**
 * Recovers torn tails and finds where the site stream stands: the last seq of EVERY site file,
 * read from its end (cheap whatever its size), and the seq mark. Modification times are never
 * trusted: a clock stepped back across local noon writes newer lines into an older night's file
 * with an older mtime.
 *
 * @param siteDir The site directory, held by the caller.
 * @param warn Told about torn tails moved aside.
 * @param damage Told about damaged files (docs/storage.md), which are read up to the damage and
 *   otherwise passed over (default: `warn`).
 * @returns The resume point.
 *
 * @example Usage
 * ```ts ignore
 * import { resumeSite } from "./site_resume.ts";
 * const site = await resumeSite("/srv/telemetry", console.warn);
 * ```
 */
export async function resumeSite(
  siteDir: string,
  warn: (message: string) => void,
  damage: (message: string) => void = warn,
): Promise<SiteResume> {
  const files: SiteFileTail[] = [];
  const compressed: string[] = [];
  for await (const entry of Deno.readDir(siteDir)) {
    if (entry.isFile && STORED_SITE_FILE.exec(entry.name)?.[2]) compressed.push(entry.name);
    if (!entry.isFile || !SITE_FILE.test(entry.name)) continue;
    const path = join(siteDir, entry.name);
    let tail = await readTail(path, undefined, damage);
    if (tail.torn) {
      const moved = await recoverTornTail(path);
      if (moved > 0) warn(tornMessage(path, moved));
      tail = await readTail(path, undefined, damage);
    }
    files.push({ name: entry.name, size: tail.size, lastSeq: tail.lastSeq });
  }
  files.push(...await compressedTails(siteDir, compressed, files, damage));
  files.sort((a, b) => a.lastSeq - b.lastSeq || (a.name < b.name ? -1 : 1));
  return {
    lastSeq: files.at(-1)?.lastSeq ?? 0,
    mark: await readSeqMark(siteDir),
    files,
  };
}

/**
 * The site files compressed after their night (docs/history.md), for the resume. A gzip file
 * cannot be read from its end, so only the nights that can hold the newest lines are read whole:
 * those at or after the newest plain file's night (all of them when every file is compressed).
 * Older compressed nights count with seq 0: their lines came before, and a seq that a stepped
 * clock wrote into one is still covered by the checkpoint's counter and the seq mark. A night
 * found in both forms is read from the form readers choose (`site_files.ts`).
 */
async function compressedTails(
  siteDir: string,
  names: string[],
  plain: SiteFileTail[],
  damage: (message: string) => void,
): Promise<SiteFileTail[]> {
  const plainNames = new Set(plain.map((f) => f.name));
  const newestPlain = plain.map((f) => f.name).sort().at(-1) ?? "";
  const out: SiteFileTail[] = [];
  for (const name of names) {
    const base = plainName(name);
    if (plainNames.has(base)) {
      const forms = await chooseForms(
        storedFile(join(siteDir, base)),
        storedFile(join(siteDir, name)),
      );
      if (forms.length === 1) continue; // the same lines: the plain file stands for both
    }
    if (base < newestPlain && !plainNames.has(base)) {
      out.push({ name, size: 0, lastSeq: 0 });
      continue;
    }
    const tail = await readTail(join(siteDir, name), undefined, damage);
    out.push({ name, size: tail.size, lastSeq: tail.lastSeq });
  }
  return out;
}
