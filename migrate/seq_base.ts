/**
 * Where a migration's seqs come from (docs/migration.md): the site stream's seq is one increasing
 * sequence whatever wrote its files, so migrated lines are numbered in night order after the
 * highest seq the destination already holds (the last line of every site file, compressed ones
 * too, and the seq mark), and the seq mark is raised over them, so a service started on the
 * destination never hands their seqs out again (docs/storage.md).
 *
 * A forced rerun over a previous migration keeps the seqs of each night that comes out the same
 * as the night stored, up to the first night that does not: the same input gives the same lines
 * under the same keys, so a forwarded archive receives nothing twice (docs/fleet.md). From the
 * first night that differs on, lines are numbered after every seq the destination holds, the
 * replaced lines' included: a seq that named one record is never given to another, which a
 * fleet store keyed by seq would drop.
 *
 * @module
 */

import {
  DamagedFileError,
  listSiteFiles,
  readLines,
  type StoredFile,
} from "../store/site_files.ts";
import { readTail } from "../store/stored_read.ts";
import { readSeqMark, writeSeqMark } from "../store/seq_marks.ts";
import { readSeqAndType } from "../wire/ndjson.ts";
import { withPermissionHint } from "./errors.ts";

/** The site stream a destination already holds. */
export interface SeqBase {
  /** The highest seq handed out in the destination (0: none); fresh seqs count on from it. */
  readonly seq: number;
  /** The destination's seq mark (0: none). */
  readonly mark: number;
  /**
   * The site files of each night the destination holds, by night key `YYYYMMDD`: the forms a
   * reader reads (docs/storage.md), usually one.
   */
  readonly nights: ReadonlyMap<string, readonly StoredFile[]>;
}

/**
 * Reads the highest seq of a destination's site stream: the last line of each site file (read
 * from its end; a compressed night is read whole) and its seq mark. A missing destination holds
 * none.
 *
 * @param dst The absolute destination directory.
 * @returns Where fresh seqs start, and the nights stored.
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
        if (err instanceof Deno.errors.NotFound) return { seq: 0, mark: 0, nights: new Map() };
        throw err;
      }
      let seq = 0;
      const nights = new Map<string, StoredFile[]>();
      for (const file of files) {
        seq = Math.max(seq, (await readTail(file.path)).lastSeq);
        const night = file.night as string;
        nights.set(night, [...nights.get(night) ?? [], file]);
      }
      const mark = await readSeqMark(dst);
      return { seq: Math.max(seq, mark), mark, nights };
    },
    `read "${dst}"`,
    `--allow-read=${dst}`,
  );
}

/**
 * Whether the destination holds a site stream besides the nights a migration writes: a site
 * file of another night, or a seq mark. Only then is the seq mark raised over the migrated lines;
 * a directory holding nothing but a migration's output needs none, so a rerun into it writes none
 * either.
 *
 * @param base What the destination held before.
 * @param written The night keys (`YYYYMMDD`) the migration writes.
 * @returns Whether a site stream is there besides them.
 *
 * @example Usage
 * ```ts
 * import { holdsStream } from "./seq_base.ts";
 * import assert from "node:assert/strict";
 *
 * const base = { seq: 4, mark: 0, nights: new Map([["20240301", []]]) };
 * assert.equal(holdsStream(base, new Set(["20240301"])), false);
 * assert.equal(holdsStream(base, new Set(["20240302"])), true);
 * ```
 */
export function holdsStream(base: SeqBase, written: ReadonlySet<string>): boolean {
  return base.mark > 0 || [...base.nights.keys()].some((night) => !written.has(night));
}

/**
 * Raises the destination's seq mark over the seqs a migration handed out afresh, when it holds a
 * site stream besides them: a service resuming there reads compressed older nights as seq 0
 * (docs/storage.md), so after the migrated nights are compressed only the mark would still say
 * that their seqs are taken. Seqs a rerun kept were the destination's already and change
 * nothing. Written before the site files are renamed into place.
 *
 * @param dst The absolute destination directory.
 * @param base What the destination held before.
 * @param fresh The highest seq handed out afresh (0: none).
 * @param live Whether the destination holds a site stream besides the migrated nights
 *   (see {@linkcode holdsStream}).
 *
 * @example Usage
 * ```ts ignore
 * import { raiseSeqMark, readSeqBase } from "./seq_base.ts";
 * const base = await readSeqBase("/srv/telemetry");
 * await raiseSeqMark("/srv/telemetry", base, base.seq + 1200, true);
 * ```
 */
export async function raiseSeqMark(
  dst: string,
  base: SeqBase,
  fresh: number,
  live: boolean,
): Promise<void> {
  if (!live || fresh <= base.mark) return;
  await withPermissionHint(
    () => writeSeqMark(dst, fresh),
    `write "${dst}"`,
    `--allow-write=${dst}`,
  );
}

/** Numbers a night's lines from the seq after `start` and returns them as the file's bytes. */
export type Layout = (start: number) => Uint8Array;

const decoder = new TextDecoder();

/**
 * The seq counter of one migration (docs/migration.md): every night it writes continues one
 * sequence, in night order. Fresh seqs start after the highest seq of the destination; with
 * `keep` (a forced run), a night whose stored lines come out byte for byte the same with their
 * own seqs keeps them and is left as stored, up to the first night that does not.
 *
 * @example Numbering two nights into an empty destination
 * ```ts
 * import { NightSeqs } from "./seq_base.ts";
 * import assert from "node:assert/strict";
 *
 * const seqs = new NightSeqs({ seq: 0, mark: 0, nights: new Map() }, false);
 * const layout = (start: number) => new TextEncoder().encode(`${start + 1}\n`);
 * await seqs.number("2024-03-01", 3, layout);
 * assert.equal(new TextDecoder().decode(await seqs.number("2024-03-02", 2, layout)), "4\n");
 * assert.equal(seqs.last, 5);
 * assert.equal(seqs.fresh, 5);
 * ```
 */
export class NightSeqs {
  /** The seq of the last line numbered so far. */
  last: number;
  /** The highest seq handed out afresh, above the destination's (0: none). */
  fresh = 0;
  /** The night keys (`YYYYMMDD`) that came out as stored: left as they are. */
  readonly kept: Set<string> = new Set();
  #base: SeqBase;
  #keep: boolean;

  /**
   * Creates the counter of one migration (of one attempt: a run that starts over on the spill
   * path takes a new one).
   *
   * @param base What the destination held before.
   * @param keep Keep the seqs of nights that come out as stored (a forced run).
   */
  constructor(base: SeqBase, keep: boolean) {
    this.#base = base;
    this.#keep = keep;
    this.last = keep ? 0 : base.seq;
  }

  /**
   * Numbers one night's lines, in night order after the nights numbered before.
   *
   * @param date The night, `YYYY-MM-DD`.
   * @param lines How many lines it has.
   * @param layout Lays its lines out from a given seq.
   * @returns The night's bytes to write, or `undefined` when it came out as stored (see
   *   {@linkcode NightSeqs.kept}) and needs no writing.
   * @throws {Deno.errors.PermissionDenied} If a stored night may not be read.
   */
  async number(date: string, lines: number, layout: Layout): Promise<Uint8Array | undefined> {
    if (this.#keep) {
      const night = date.replaceAll("-", "");
      const stored = this.#base.nights.get(night);
      const first = stored?.length === 1 ? await firstSeq(stored[0]!) : undefined;
      // Seqs only go up from night to night.
      if (first !== undefined && first > this.last) {
        if (await sameBytes(stored![0]!, layout(first - 1))) {
          this.last = first - 1 + lines;
          this.kept.add(night);
          return undefined;
        }
      }
      // From here on fresh seqs: the stored ones of later nights are all below them.
      this.#keep = false;
    }
    const start = Math.max(this.last, this.#base.seq);
    this.last = this.fresh = start + lines;
    return layout(start);
  }
}

/** The seq of a stored file's first line, or `undefined` (empty, damaged, not a line). */
async function firstSeq(file: StoredFile): Promise<number | undefined> {
  try {
    for await (const batch of readLines(file, { chunkSize: 16 * 1024 })) {
      if (batch.length > 0) return readSeqAndType(batch[0]!.text)?.seq;
    }
  } catch (err) {
    if (!(err instanceof DamagedFileError)) throw err;
  }
  return undefined;
}

/** Whether a stored file's lines are exactly `bytes` (compared as text: both are UTF-8). */
async function sameBytes(file: StoredFile, bytes: Uint8Array): Promise<boolean> {
  const text = decoder.decode(bytes);
  let pos = 0;
  try {
    for await (const batch of readLines(file)) {
      for (const { text: line } of batch) {
        if (!text.startsWith(line, pos) || text.charCodeAt(pos + line.length) !== 10) return false;
        pos += line.length + 1;
      }
    }
  } catch (err) {
    if (!(err instanceof DamagedFileError)) throw err;
    return false;
  }
  return pos === text.length;
}
