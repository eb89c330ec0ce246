/**
 * How far the site stream is sent, file by file (docs/fleet.md#a-clock-stepped-back): the
 * service writes each event into the file of the night its clock says, so after the clock steps
 * back across local noon new lines land in an earlier night's file than the one the forwarder
 * reads. The cursor therefore keeps the offset sent through in every site file
 * (`site_files`), and a pass reads every file that holds more than its entry: new files at once,
 * the three newest on every poll, and every other file in turn, a few per poll (all of them after
 * a failed pass). A check compares the file's size (for a `.gz`, the size its trailer records)
 * with the entry, and reads only a file that grew.
 *
 * @module
 */
import { gzSize } from "../store/compress.ts";
import type { ForwardCursor, StreamPosition } from "../store/forward_cursor.ts";
import { stillDamaged } from "./damaged.ts";
import { plainName, type StoredFile } from "../store/site_files.ts";
import { signature } from "./source_cache.ts";

/**
 * The newest nights checked on every poll besides the newest (a clock stepped back across noon
 * writes into the night before): one stat each.
 */
const RECENT = 2;

/** Older nights checked per poll, in turn (one stat each): a sweep of 400 nights takes 10 s. */
const SWEEP_PER_POLL = 4;

/** One site file a pass reads, from where, under which cursor key. */
export interface DueFile {
  readonly file: StoredFile;
  /** The cursor's key of the file: its plain name, or its own name for an older `.gz` part. */
  readonly key: string;
  /** The offset to read from. */
  readonly from: number;
  /** The seq before `from`, when known (0 otherwise): a lower seq after it is a repeat. */
  readonly seqBefore: number;
  /** The file holds no entry yet: record where it ends even if it holds no line. */
  readonly fresh: boolean;
}

/**
 * The gzip trailer's size field (ISIZE: the uncompressed size modulo 2^32), read from the last
 * four bytes without decompressing; `undefined` for a file shorter than a gzip header.
 */
async function trailerSize(file: StoredFile): Promise<number | undefined> {
  using handle = await Deno.open(file.path, { read: true });
  const end = await handle.seek(0, Deno.SeekMode.End);
  if (end < 18) return undefined;
  await handle.seek(end - 4, Deno.SeekMode.Start);
  const bytes = new Uint8Array(4);
  let got = 0;
  while (got < 4) {
    const n = await handle.read(bytes.subarray(got));
    if (n === null) return undefined;
    got += n;
  }
  return new DataView(bytes.buffer).getUint32(0, true);
}

/**
 * Whether a stored file holds more than `sent` bytes, judged without reading it: a plain file by
 * its size, a `.gz` by its trailer (a damaged `.gz` whose trailer says otherwise is read, and its
 * damage reported).
 *
 * @example
 * ```ts ignore
 * if (await holdsMore(file, cursor.site_files![plainName(file.name)]!)) console.log("unsent");
 * ```
 */
export async function holdsMore(
  file: StoredFile,
  sent: number,
  info?: Deno.FileInfo,
): Promise<boolean> {
  // Shorter than sent: truncated or replaced, which reading from `sent` reports.
  if (!file.compressed) return (info ?? await Deno.lstat(file.path)).size !== sent;
  return (await trailerSize(file)) !== sent % 2 ** 32;
}

/**
 * The cursor key of each file: its plain name, except the older `.gz` part of a night written
 * again after it was compressed (both forms listed), which keeps its own name.
 *
 * @example
 * ```ts ignore
 * const keys = siteKeys(await listSiteFiles("./telemetry"));
 * ```
 */
export function siteKeys(files: readonly StoredFile[]): string[] {
  return files.map((f, i) =>
    f.compressed && plainName(files[i + 1]?.name ?? "") === plainName(f.name)
      ? f.name
      : plainName(f.name)
  );
}

/** The site stream's progress, kept in the cursor's `site_files` (and `site` for its seq). */
export class SiteProgress {
  readonly #cursor: ForwardCursor;
  /** The files before it count as passed (a cursor written before `site_files` existed). */
  readonly #legacyBefore: string | undefined;
  /** The signature of each file when it was last read to its end, by key. */
  readonly #checked = new Map<string, string>();
  #listed: readonly StoredFile[] = [];
  #keys: string[] = [];
  /** Indexes of listed files without an entry yet. */
  #unread: number[] = [];
  #sweepAt = 0;

  constructor(cursor: ForwardCursor) {
    this.#cursor = cursor;
    if (cursor.site !== null && cursor.site_files === undefined) {
      this.#legacyBefore = cursor.site.file;
      cursor.site_files = { [cursor.site.file]: cursor.site.offset };
    }
    cursor.site_files ??= {};
  }

  get #files(): Record<string, number> {
    return this.#cursor.site_files!;
  }

  /**
   * The files a pass reads, oldest first.
   *
   * @param files The site files as listed.
   * @param full Check every file for growth, not only the newest and the new ones.
   */
  async due(files: readonly StoredFile[], full: boolean): Promise<DueFile[]> {
    if (files !== this.#listed) {
      this.#listed = files;
      this.#keys = siteKeys(files);
      this.#unread = files.map((_, i) => i);
    }
    const keys = this.#keys;
    const last = files.length - 1;
    // The files without an entry (found once per listing), the newest ones, and a few others
    // per poll in turn: a cost per poll that does not grow with the nights stored
    // (docs/fleet.md#idle-cost).
    this.#unread = this.#unread.filter((i) => !Object.hasOwn(this.#files, keys[i]!));
    const visit = new Set<number>(this.#unread);
    for (let i = Math.max(0, last - RECENT); i <= last; i++) visit.add(i);
    for (let n = 0; n < SWEEP_PER_POLL && last - RECENT > 0; n++) {
      visit.add(this.#sweepAt++ % (last - RECENT));
    }
    const out: DueFile[] = [];
    for (const i of full ? files.keys() : [...visit].sort((a, b) => a - b)) {
      const file = files[i]!;
      const key = keys[i]!;
      const fresh = !Object.hasOwn(this.#files, key);
      const due = fresh ? await this.#fresh(file, key) : await this.#grown(file, key);
      if (due) out.push(due);
    }
    return out;
  }

  /** A file without an entry: read from its start, unless an older cursor passed it. */
  async #fresh(file: StoredFile, key: string): Promise<DueFile | undefined> {
    if (this.#legacyBefore !== undefined && plainName(key) < this.#legacyBefore) {
      // Passed by the cursor's old rule: its end is recorded as sent.
      const size = file.compressed ? await gzSize(file.path) : (await Deno.lstat(file.path)).size;
      if (size !== undefined) {
        this.#files[key] = size;
        return undefined;
      }
    }
    // A new night after the cursor's continues its seq: a lower one there is a stream that
    // started over (reported as the lines are read); a new earlier night is a clock stepped back.
    const site = this.#cursor.site;
    const after = site !== null && plainName(key) > site.file;
    return { file, key, from: 0, seqBefore: after ? site.seq : 0, fresh: true };
  }

  /** A file with an entry, when it holds more than the entry (and is not passed over). */
  async #grown(file: StoredFile, key: string): Promise<DueFile | undefined> {
    const from = this.#files[key]!;
    const info = await Deno.lstat(file.path);
    const bytes = signature(info);
    if (this.#checked.get(key) === bytes) return undefined;
    if (stillDamaged(this.#cursor.damaged, "site", "", file.name, info.size)) return undefined;
    if (!await holdsMore(file, from, info)) {
      this.#checked.set(key, bytes);
      return undefined;
    }
    const site = this.#cursor.site;
    const seqBefore = site !== null && site.file === key && site.offset === from ? site.seq : 0;
    return { file, key, from, seqBefore, fresh: false };
  }

  /**
   * The file of a cursor written before `site_files` when it is gone and every stored file sorts
   * before it (a cursor copied from elsewhere, a clock once years ahead): nothing is sent until a
   * later file appears, which the forwarder says once.
   */
  legacyGone(files: readonly StoredFile[]): string | undefined {
    const before = this.#legacyBefore;
    if (before === undefined || files.length === 0) return undefined;
    return files.every((f) => plainName(f.name) < before) ? before : undefined;
  }

  /** Records a batch sent from the file `key`, up to `at.offset`. */
  sent(key: string, at: StreamPosition): void {
    this.#files[key] = at.offset;
    const site = this.#cursor.site;
    const seq = Math.max(site?.seq ?? 0, at.seq);
    // `site` names the newest file sent from, as cursors always did (and `seq` the highest).
    if (site === null || plainName(key) >= plainName(site.file)) {
      this.#cursor.site = { file: plainName(key), offset: at.offset, seq };
    } else site.seq = seq;
  }

  /** Drops the entries of files no longer stored (deleted by retention), so the cursor stays small. */
  prune(files: readonly StoredFile[]): void {
    const keys = new Set(siteKeys(files));
    // Only when the listing holds files: an empty listing is no proof that they are gone.
    if (keys.size === 0) return;
    for (const key of Object.keys(this.#files)) {
      if (!keys.has(key)) delete this.#files[key];
    }
    const names = new Set(files.map((f) => f.name));
    const damaged = this.#cursor.damaged?.filter((d) => d.stream !== "site" || names.has(d.file));
    if (damaged !== undefined) this.#cursor.damaged = damaged;
  }
}
