/**
 * The streams a forwarder reads, kept between its passes (docs/fleet.md#idle-cost): a caught-up
 * forwarder polls every 100 ms, and re-reading the whole run log and listing the site directory
 * on every poll made its idle cost grow with the number of runs and nights. This cache tails the
 * run log from the offset it reached and lists the site directory again only when the
 * directory's modification time changed or is less than two seconds old (a change within the
 * millisecond of a listing leaves it as it was), or on a full check (every
 * {@linkcode FULL_CHECK_MS}).
 *
 * @module
 */
import { isAbsolute, join, resolve } from "node:path";
import { ACTIVE_RUN_FILE, RUN_LOG_FILE } from "../store/layout.ts";
import { parseRunRecord } from "../store/run_log.ts";
import type { RunRecord } from "../wire/event.ts";
import { listRunFiles, listSiteFiles, type StoredFile } from "../store/site_files.ts";
import { type ForwardSource, type RunDir, runSources } from "./sources.ts";

/**
 * How often a forwarder lists everything again even if nothing seems changed (a run directory
 * found by its file rather than by the run log), and checks every site file for growth.
 */
export const FULL_CHECK_MS = 60_000;

/**
 * A directory modified this recently is listed again on every poll: a change within the same
 * millisecond as the last listing leaves its modification time as it was.
 */
const SETTLE_MS = 2000;

/** A file's identity and size, to tell whether it changed since it was last read. */
export function signature(info: Deno.FileInfo): string {
  return `${info.ino ?? ""}/${info.size}/${info.mtime?.getTime() ?? ""}`;
}

/** The run log, read from where the previous read ended. */
class RunLogTail {
  readonly #path: string;
  #ino: number | null = null;
  #offset = 0;
  readonly runs = new Map<string, RunRecord>();

  constructor(siteDir: string) {
    this.#path = join(siteDir, RUN_LOG_FILE);
  }

  /**
   * Reads what was appended since the last call into {@linkcode runs} (the latest record of each
   * run, as `store/run_log.ts` reads the whole log).
   *
   * @returns Whether anything changed.
   */
  async update(): Promise<boolean> {
    let info: Deno.FileInfo;
    try {
      info = await Deno.stat(this.#path);
    } catch (err) {
      if (!(err instanceof Deno.errors.NotFound)) throw err;
      return this.#reset(null);
    }
    // Replaced, or shortened (a torn last line moved aside): read it again from its start.
    let changed = false;
    if (info.ino !== this.#ino || info.size < this.#offset) changed = this.#reset(info.ino);
    if (info.size > this.#offset) changed = await this.#readFrom(info.size) || changed;
    return changed;
  }

  #reset(ino: number | null): boolean {
    const changed = this.#offset > 0 || this.runs.size > 0 || ino !== this.#ino;
    this.#ino = ino;
    this.#offset = 0;
    this.runs.clear();
    return changed;
  }

  async #readFrom(size: number): Promise<boolean> {
    using file = await Deno.open(this.#path, { read: true });
    await file.seek(this.#offset, Deno.SeekMode.Start);
    const bytes = new Uint8Array(size - this.#offset);
    let got = 0;
    while (got < bytes.length) {
      const n = await file.read(bytes.subarray(got));
      if (n === null) break;
      got += n;
    }
    // Only whole lines: a line being appended is read whole by a later poll.
    const end = bytes.subarray(0, got).lastIndexOf(0x0a) + 1;
    if (end === 0) return false;
    for (const line of new TextDecoder().decode(bytes.subarray(0, end)).split("\n")) {
      const record = line.trim() === "" ? undefined : parseRunRecord(line);
      if (record === undefined) continue;
      this.runs.delete(record.run_id);
      this.runs.set(record.run_id, record);
    }
    this.#offset += end;
    return true;
  }
}

/**
 * The forwarder's sources between passes: the same objects while nothing changed, so a pass of a
 * caught-up forwarder costs a few `stat`s and reads whatever the site directory holds.
 *
 * @example
 * ```ts ignore
 * const cache = new SourceCache("./telemetry");
 * for (const source of await cache.sources(false)) console.log(source.stream, source.runId);
 * ```
 */
export class SourceCache {
  readonly #siteDir: string;
  readonly #log: RunLogTail;
  #dirKey = "";
  #active = "";
  #siteFiles: StoredFile[] = [];
  /** The names the site directory held at its last listing, and which held a run. */
  #names = "";
  /** Directories of the site directory, by name: whether each holds a run stream file. */
  readonly #dirs = new Map<string, boolean>();
  #sources: ForwardSource[] = [];

  constructor(siteDir: string) {
    this.#siteDir = siteDir;
    this.#log = new RunLogTail(siteDir);
  }

  /**
   * The site stream, then every run by id, as `listSources()` (`sources.ts`) gives them.
   *
   * @param full List the site directory again even if its modification time did not change.
   */
  async sources(full: boolean): Promise<ForwardSource[]> {
    const dir = await Deno.stat(this.#siteDir);
    const dirKey = signature(dir);
    const recent = Date.now() - (dir.mtime?.getTime() ?? 0) < SETTLE_MS;
    let listed = false;
    if (full || recent || dirKey !== this.#dirKey) {
      // A full check costs one listing; the rest only when the listing changed.
      const names = await this.#listDirs(full);
      if (names !== this.#names || this.#siteFiles.length === 0) {
        this.#siteFiles = await listSiteFiles(this.#siteDir);
        this.#names = names;
        listed = true;
      }
    }
    this.#dirKey = dirKey;
    const logChanged = await this.#log.update();
    const active = await this.#readActive();
    if (listed || logChanged || active !== this.#active || this.#sources.length === 0) {
      this.#active = active;
      this.#sources = this.#build();
    }
    return this.#sources;
  }

  /** The site stream's files as last listed. */
  get siteFiles(): StoredFile[] {
    return this.#siteFiles;
  }

  async #readActive(): Promise<string> {
    try {
      return await Deno.readTextFile(join(this.#siteDir, ACTIVE_RUN_FILE));
    } catch (err) {
      if (err instanceof Deno.errors.NotFound) return "";
      throw err;
    }
  }

  /**
   * Finds the directories holding a run stream file: new ones, and on a full check also those
   * that held none (a run's first line may come after its directory).
   *
   * @returns What the listing found, to compare with the previous one.
   */
  async #listDirs(full: boolean): Promise<string> {
    const seen = new Set<string>();
    const names: string[] = [];
    for await (const entry of Deno.readDir(this.#siteDir)) {
      names.push(entry.name);
      // Links are not followed out of the site directory; dot-directories are the service's own.
      if (!entry.isDirectory || entry.name.startsWith(".")) continue;
      seen.add(entry.name);
      if (this.#dirs.get(entry.name) === true || (this.#dirs.has(entry.name) && !full)) continue;
      this.#dirs.set(
        entry.name,
        (await listRunFiles(join(this.#siteDir, entry.name))).length > 0,
      );
    }
    for (const name of this.#dirs.keys()) if (!seen.has(name)) this.#dirs.delete(name);
    const runs = [...this.#dirs].filter(([, holds]) => holds).map(([name]) => name);
    return `${names.sort().join("/")}\n${runs.sort().join("/")}`;
  }

  /** The runs as `listRunDirs()` (`sources.ts`) finds them, from the cached pieces. */
  #runDirs(): Map<string, RunDir> {
    const runs = new Map<string, RunDir>();
    const absolute = (dir: string) => isAbsolute(dir) ? dir : resolve(this.#siteDir, dir);
    for (const record of this.#log.runs.values()) {
      runs.set(record.run_id, {
        dir: absolute(record.run_dir),
        stopped: record.stopped_at !== null,
        startedAt: record.started_at,
      });
    }
    try {
      const active = JSON.parse(this.#active);
      if (typeof active?.run_id === "string" && typeof active.run_dir === "string") {
        runs.set(active.run_id, {
          dir: absolute(active.run_dir),
          stopped: false,
          ...(typeof active.started_at === "string" ? { startedAt: active.started_at } : {}),
        });
      }
    } catch { /* none, or being replaced: the next poll reads it */ }
    const known = new Set([...runs.values()].map((r) => r.dir));
    for (const [name, holdsRun] of this.#dirs) {
      if (!holdsRun || runs.has(name) || known.has(resolve(this.#siteDir, name))) continue;
      runs.set(name, { dir: join(this.#siteDir, name), stopped: false });
    }
    return runs;
  }

  #build(): ForwardSource[] {
    const siteDir = this.#siteDir;
    const out: ForwardSource[] = [{
      stream: "site",
      runId: "",
      runDir: siteDir,
      stopped: false,
      generation: "",
      files: () => Promise.resolve(this.#siteFiles),
    }];
    return [...out, ...runSources(this.#runDirs())];
  }
}
