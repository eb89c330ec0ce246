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
import { join, resolve } from "node:path";
import { readRunLog, type RunLogEnd } from "../store/run_log.ts";
import { type ActiveRunRead, readActiveRun } from "../store/run_records.ts";
import type { RunRecord } from "../wire/event.ts";
import { listRunFiles, listSiteFiles, type StoredFile } from "../store/site_files.ts";
import { type ForwardSource, recordedRuns, type RunDir, runSources } from "./sources.ts";

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

/** The run log's runs, kept up to date by reading only what was appended since the last poll. */
class RunLogTail {
  readonly #siteDir: string;
  #end: RunLogEnd | undefined;
  readonly runs = new Map<string, RunRecord>();

  constructor(siteDir: string) {
    this.#siteDir = siteDir;
  }

  /**
   * Reads what was appended since the last call into {@linkcode runs} (the latest record of each
   * run); a log replaced or shortened (a torn last line moved aside) is read again from its start.
   *
   * @returns Whether anything changed.
   */
  async update(): Promise<boolean> {
    const before = this.#end;
    const log = await readRunLog(this.#siteDir, { after: before });
    this.#end = log.end;
    let changed = before === undefined || log.end.ino !== before.ino ||
      log.end.offset !== before.offset;
    if (!log.continued && this.runs.size > 0) {
      this.runs.clear();
      changed = true;
    }
    for (const record of log.runs) this.runs.set(record.run_id, record);
    return changed || log.runs.length > 0;
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
  #active: ActiveRunRead = { state: "none" };
  /** {@linkcode #active} as text, to tell whether it changed. */
  #activeKey = "";
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
    const active = await readActiveRun(this.#siteDir);
    const activeKey = JSON.stringify(active);
    if (listed || logChanged || activeKey !== this.#activeKey || this.#sources.length === 0) {
      this.#active = active;
      this.#activeKey = activeKey;
      this.#sources = this.#build();
    }
    return this.#sources;
  }

  /** The site stream's files as last listed. */
  get siteFiles(): StoredFile[] {
    return this.#siteFiles;
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
    const runs = recordedRuns(this.#siteDir, this.#log.runs.values(), this.#active);
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
