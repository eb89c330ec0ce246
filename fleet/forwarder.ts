/**
 * The forwarder (docs/fleet.md): sends every stored line of the site stream and of every run,
 * oldest first, to a fleet sink (NATS JetStream or PostgreSQL), then follows new lines as the
 * service writes them. The NDJSON files are the write-ahead log; a cursor `(file, byte offset,
 * last seq)` per stream moves only after the destination acknowledged (PubAck, or commit), so a
 * kill at any moment resends at most the batch in flight, which the idempotency key turns into
 * exactly once.
 *
 * Reads through `store/site_files.ts` (plain and `.gz`, offsets in uncompressed bytes), so
 * rotation and compression under a cursor change nothing. Needs read permission on the site
 * directory (and on run directories placed elsewhere), write permission on
 * `<site_dir>/.forward/`, and net access to the destination only.
 *
 * @module
 */
import { join } from "node:path";
import { sleep } from "../wire/async.ts";
import { type ForwardItem, idempotencyKey, storedSeq } from "./item.ts";
import { fleetBackoff, type FleetLog, isPermissionFault, PeerState } from "./retry.ts";
import {
  cursorLockPath,
  cursorPath,
  emptyCursor,
  type ForwardCursor,
  readCursor,
  type StreamPosition,
  writeCursor,
} from "../store/forward_cursor.ts";
import { FORWARD_DIR, RUN_ID_PATTERN } from "../store/layout.ts";
import {
  DamagedFileError,
  OffsetMismatchError,
  plainName,
  readLines,
  type StoredFile,
  type StoredLine,
} from "../store/site_files.ts";
import type { FleetSink, FleetSinkConnector } from "./sinks/sink.ts";
import { redact } from "./archive.ts";
import {
  checkForwardOptions,
  type DestinationKind,
  destinationKind,
  type ForwardOptions,
  type ForwardStats,
  sinkConnector,
} from "./forward_options.ts";
import { claimUnitForSite } from "./unit_claim.ts";
import { type ForwardSource, positionOf, remaining, setPosition } from "./sources.ts";
import { FULL_CHECK_MS, SourceCache } from "./source_cache.ts";
import { SiteProgress } from "./site_progress.ts";
import { recordDamaged, undamaged } from "./damaged.ts";

/**
 * A batch also ends at this many characters of lines: `--batch` lines of a megabyte each would
 * hold a gigabyte in memory (and in one transaction) on a small unit.
 */
const MAX_BATCH_CHARS = 8 * 1024 * 1024;

/** The longest the cursor file lags the acknowledged position while lines keep coming. */
const CURSOR_SAVE_MS = 1000;

/** An item for a log line: `site event 12` or `run event 3 of run night-1`. */
function describe(item: ForwardItem): string {
  return `${item.stream} event ${item.seq}${item.runId ? ` of run ${item.runId}` : ""}`;
}

/** A source for a log line: `the site stream` or `run night-1`. */
function describeSource(source: ForwardSource): string {
  return source.stream === "site" ? "the site stream" : `run ${source.runId}`;
}

/**
 * Runs a forwarder until `signal` aborts: sends what is stored, then follows the files. The
 * destination being down is retried with capped back-off (at most 30 s), one log line per change
 * of state; nothing is lost, and catching up afterwards runs at full speed.
 *
 * @example
 * ```ts ignore
 * const stop = new AbortController();
 * Deno.addSignalListener("SIGTERM", () => stop.abort());
 * await forward({ siteDir: "./telemetry", to: "nats://hub:4222", unit: "pan012", signal: stop.signal });
 * ```
 */
export async function forward(options: ForwardOptions): Promise<ForwardStats> {
  const problem = checkForwardOptions(options);
  if (problem) throw new RangeError(problem);
  const log: FleetLog = options.log ?? (() => {});
  const name = options.name ?? (destinationKind(options.to) as DestinationKind);
  const lock = await lockCursor(options.siteDir, name);
  try {
    const cursor = await readOrSetAside(options.siteDir, name, log);
    // One unit, one site: nothing is sent before the unit is this site's (docs/fleet.md, "Units").
    if (!await claimUnitForSite(options, log)) return { sent: 0, skipped: 0 };
    return await new Forwarder(options, name, cursor, log).run();
  } finally {
    lock.close();
  }
}

/**
 * Takes `<site_dir>/.forward/<name>.lock` (an advisory lock the kernel drops when the process
 * ends, however it ends): two forwarders with one name would race on one cursor.
 */
async function lockCursor(siteDir: string, name: string): Promise<Deno.FsFile> {
  const path = cursorLockPath(siteDir, name);
  // The site directory is the service's to create; only .forward/ is the forwarder's.
  await Deno.stat(siteDir);
  await Deno.mkdir(join(siteDir, FORWARD_DIR), { recursive: true });
  const file = await Deno.open(path, { read: true, write: true, create: true });
  let locked = false;
  try {
    locked = await file.tryLock(true);
  } finally {
    if (!locked) file.close();
  }
  if (!locked) {
    throw new Error(
      `another forwarder named "${name}" is running on this site directory (${path} is locked); ` +
        `stop it first, or give this one another --name`,
    );
  }
  return file;
}

/**
 * The cursor, or a new one when there is none. A cursor that cannot be read (cut short, edited
 * by hand) is renamed aside and forwarding starts again from the start, with a warning: the
 * idempotency keys make the resend harmless, while refusing to start would stop the site's
 * forwarding until someone looked.
 */
async function readOrSetAside(
  siteDir: string,
  name: string,
  log: FleetLog,
): Promise<ForwardCursor> {
  try {
    return (await readCursor(siteDir, name)) ?? emptyCursor();
  } catch (err) {
    if (!(err instanceof SyntaxError)) throw err;
    const path = cursorPath(siteDir, name);
    const aside = `${path}.damaged-${new Date().toISOString().replaceAll(":", "")}`;
    await Deno.rename(path, aside);
    log(
      "warn",
      `${err.message}; kept as ${aside}, forwarding every stream again from the start ` +
        `(the destination drops what it already holds by its key)`,
    );
    return emptyCursor();
  }
}

/** What one pass over a source did: lines read into batches, and whether it read to its end. */
interface Pumped {
  readonly sent: number;
  readonly complete: boolean;
}

/** The reading of one source in one pass, across its files. */
interface SourceRead {
  /** Lines handed to the sink so far. */
  sent: number;
  /** The seq of the last line read: the cursor's seq after the next batch. */
  lastSeq: number;
}

/** The batch being filled from one file. */
class LineBatch {
  /** The file's plain name, as the cursor records it. */
  readonly file: string;
  items: ForwardItem[] = [];
  /** The offset after the last line read: the cursor's offset after this batch. */
  end: number;
  #chars = 0;

  constructor(file: string, from: number) {
    this.file = file;
    this.end = from;
  }

  add(item: ForwardItem): void {
    this.items.push(item);
    this.#chars += item.line.length;
  }

  /** Whether the batch holds `size` lines or {@linkcode MAX_BATCH_CHARS} characters. */
  full(size: number): boolean {
    return this.items.length >= size || this.#chars >= MAX_BATCH_CHARS;
  }

  clear(): void {
    this.items = [];
    this.#chars = 0;
  }
}

/**
 * One running forwarder: passes over every source until stopped, sending what lies after the
 * cursor, and connects its sink again after a failure.
 */
class Forwarder {
  readonly #options: ForwardOptions;
  readonly #name: string;
  readonly #cursor: ForwardCursor;
  readonly #log: FleetLog;
  readonly #batchSize: number;
  readonly #pollMs: number;
  readonly #stats: ForwardStats = { sent: 0, skipped: 0 };
  readonly #connector: FleetSinkConnector<ForwardItem>;
  readonly #peer: PeerState;
  readonly #backoff = fleetBackoff();
  #sink: FleetSink<ForwardItem> | undefined;
  // The cursor on disk may lag the acknowledged position by up to CURSOR_SAVE_MS: after a crash
  // that second is sent again and dropped by the key (JetStream's window is 2 minutes), while a
  // busy forwarder writes (and fsyncs) its cursor once a second instead of once per batch.
  #dirty = false;
  #savedAt = 0;
  /** Warnings given once per stream: the cursor's file gone, the stream's seq starting over. */
  readonly #warned = new Set<string>();
  // Stopped runs read to their end in this process, by id, with the start they belong to: nothing
  // more can appear in them until the run id is started again (between two polls, or while the
  // destination was down), which the run log shows as a new start.
  readonly #finished = new Map<string, string>();
  // Runs passed over (a run id that is none, a directory this process may not read), warned once
  // per run and reason: one bad run must not stop the site stream and every other run.
  readonly #passedOver = new Set<string>();
  readonly #sources: SourceCache;
  readonly #site: SiteProgress;
  // Every FULL_CHECK_MS, and after a pass that failed, a pass lists everything again and checks
  // every site file for growth (docs/fleet.md#idle-cost); the polls between cost a few stats.
  #fullAt = 0;
  #fullNext = true;
  #listed: ForwardSource[] = [];
  #live: ForwardSource[] = [];

  constructor(options: ForwardOptions, name: string, cursor: ForwardCursor, log: FleetLog) {
    this.#options = options;
    this.#sources = new SourceCache(options.siteDir);
    this.#site = new SiteProgress(cursor);
    this.#name = name;
    this.#cursor = cursor;
    this.#log = log;
    this.#batchSize = options.batch ?? 1000;
    this.#pollMs = options.pollMs ?? 100;
    this.#connector = sinkConnector(options);
    this.#peer = new PeerState(`destination ${redact(options.to)}`, log);
  }

  get #aborted(): boolean {
    return this.#options.signal?.aborted ?? false;
  }

  /** Passes over every source until stopped; saves the cursor and closes the sink at the end. */
  async run(): Promise<ForwardStats> {
    try {
      while (!this.#aborted) {
        let sent: number;
        try {
          sent = await this.#pass();
          this.#peer.ok();
          this.#backoff.reset();
        } catch (err) {
          if (this.#aborted) break; // stopping: the batch in flight was not acknowledged
          if (this.#isFatal(err)) throw err;
          this.#fullNext = true;
          this.#peer.failed(err, "retrying; nothing is lost, the files are the buffer");
          await this.#dropSink();
          await this.#backoff.wait(this.#options.signal);
          continue;
        }
        if (sent === 0) {
          if (this.#dirty) await this.#save(); // caught up: the cursor on disk is exact while idle
          await sleep(this.#pollMs, this.#options.signal);
        }
      }
      if (this.#dirty) await this.#save();
    } finally {
      await this.#dropSink();
    }
    return this.#stats;
  }

  /**
   * Errors of this machine (permissions, a missing site directory), and a sink's permanent
   * faults (a destination table of another shape): retrying cannot mend them, so the forwarder
   * stops with the message.
   */
  #isFatal(err: unknown): boolean {
    return isPermissionFault(err) || err instanceof Deno.errors.NotFound ||
      this.#connector.isPermanent(err);
  }

  async #dropSink(): Promise<void> {
    await this.#sink?.close().catch(() => {});
    this.#sink = undefined;
  }

  async #save(): Promise<void> {
    await writeCursor(this.#options.siteDir, this.#name, this.#cursor);
    this.#dirty = false;
    this.#savedAt = Date.now();
  }

  #warnOnce(key: string, message: string): void {
    if (this.#warned.has(key)) return;
    this.#warned.add(key);
    this.#log("warn", message);
  }

  #passOver(source: ForwardSource, why: string): void {
    const key = `${source.runId}\n${why}`;
    if (this.#passedOver.has(key)) return;
    this.#passedOver.add(key);
    this.#log("warn", `not forwarding run ${JSON.stringify(source.runId)}: ${why}`);
  }

  #skip(item: ForwardItem, why: string): void {
    this.#stats.skipped++;
    this.#log(
      "warn",
      `skipping ${describe(item)}: ${why} (key ${idempotencyKey(this.#options.unit, item)})`,
    );
  }

  /** One pass over the site stream and every run: how many lines it sent. */
  async #pass(): Promise<number> {
    const full = this.#fullNext || Date.now() - this.#fullAt >= FULL_CHECK_MS;
    if (full) {
      this.#fullAt = Date.now();
      this.#fullNext = false;
    }
    const sources = await this.#sources.sources(full);
    // The cache hands out the same list while nothing changed: then only the sources not yet
    // finished are visited, so thousands of stopped runs cost nothing per poll.
    if (sources !== this.#listed) {
      this.#listed = sources;
      this.#live = sources;
    }
    const finished = (s: ForwardSource) =>
      s.stopped && this.#finished.get(s.runId) === s.generation;
    this.#live = this.#live.filter((s) => !finished(s));
    let sent = 0;
    for (const source of this.#live) {
      if (this.#aborted) break;
      sent += await this.#forwardSource(source, full);
    }
    return sent;
  }

  /** Forwards one source unless it is finished or passed over: how many lines it sent. */
  async #forwardSource(source: ForwardSource, full: boolean): Promise<number> {
    if (source.stream === "run" && this.#finished.get(source.runId) === source.generation) {
      if (source.stopped) return 0;
      this.#finished.delete(source.runId);
    }
    if (source.stream === "run" && !RUN_ID_PATTERN.test(source.runId)) {
      // Only a hand-edited run log holds one; in a NATS header it could forge others.
      this.#passOver(
        source,
        `the run log names it, but it is no run id (${RUN_ID_PATTERN.source})`,
      );
      return 0;
    }
    let pumped: Pumped;
    try {
      pumped = source.stream === "site"
        ? await this.#pumpSite(source, full)
        : await this.#pump(source);
    } catch (err) {
      if (source.stream !== "run" || !isPermissionFault(err)) throw err;
      this.#passOver(
        source,
        `cannot read its directory ${source.runDir} (${(err as Error).message}); ` +
          `grant read access to it (spawnForwarder()'s runRoots) to forward it`,
      );
      return 0;
    }
    if (source.stopped && pumped.complete) this.#finished.set(source.runId, source.generation);
    return pumped.sent;
  }

  /**
   * Forwards what the site stream holds beyond the cursor, file by file (`site_progress.ts`): a
   * clock stepped back writes into earlier nights (docs/fleet.md#a-clock-stepped-back).
   */
  async #pumpSite(source: ForwardSource, full: boolean): Promise<Pumped> {
    const files = await source.files();
    const gone = this.#site.legacyGone(files);
    if (gone !== undefined) this.#warnGone(source, gone);
    let sent = 0;
    for (const due of await this.#site.due(files, full)) {
      if (this.#aborted) return { sent, complete: false };
      const read: SourceRead = { sent: 0, lastSeq: due.seqBefore };
      const whole = await this.#pumpFile(source, due.file, due.from, due.fresh, read, due.key);
      sent += read.sent;
      if (!whole) {
        this.#fullNext = true;
        return { sent, complete: false };
      }
    }
    if (full) this.#site.prune(files);
    return { sent, complete: !this.#aborted };
  }

  /** Forwards what one run holds after its cursor. */
  async #pump(source: ForwardSource): Promise<Pumped> {
    const start = this.#startOf(source);
    const stored = await undamaged(this.#cursor, source, await source.files());
    const { files, offset } = remaining(stored, start);
    if (
      start !== null && files.length === 0 && stored.length > 0 &&
      !stored.some((f) => plainName(f.name) === start.file)
    ) {
      // Gone (retention deletes a passed file, but always leaves a later one): a cursor copied
      // from elsewhere or a night deleted by hand. Nothing of this stream is sent until a file
      // sorts after it; say so instead of sending nothing in silence.
      this.#warnGone(source, start.file);
    }
    const read: SourceRead = { sent: 0, lastSeq: start?.seq ?? 0 };
    for (let f = 0; f < files.length && !this.#aborted; f++) {
      const file = files[f]!;
      if (
        !await this.#pumpFile(source, file, f === 0 ? offset : 0, f > 0, read, plainName(file.name))
      ) {
        return { sent: read.sent, complete: false };
      }
    }
    return { sent: read.sent, complete: !this.#aborted };
  }

  #warnGone(source: ForwardSource, file: string): void {
    const what = describeSource(source);
    const entry = source.stream === "site" ? "its site" : "this run's";
    this.#warnOnce(
      `${source.stream}\n${source.runId}\ngone\n${file}`,
      `the cursor's file ${file} of ${what} is gone and every stored file sorts before it: ` +
        `nothing of ${what} is sent until a later one appears (remove ${entry} entry from the ` +
        `cursor to send them all again)`,
    );
  }

  /**
   * Where to start reading `source`: its cursor's position, but from the start of the file of a
   * run id started again in another directory (its cursor belongs to the old one; seqs not above
   * the old ones are reported as they are read).
   */
  #startOf(source: ForwardSource): StreamPosition | null {
    const start = positionOf(this.#cursor, source);
    const before = start === null ? undefined : this.#cursor.runs[source.runId]?.run_dir;
    if (start === null || source.stream !== "run" || before === source.runDir) return start;
    this.#warnOnce(
      `${source.runId}\nmoved\n${source.runDir}`,
      `${
        describeSource(source)
      } is now stored in ${source.runDir} (the cursor was in ${before}); ` +
        `forwarding that directory from its start`,
    );
    return { file: start.file, offset: 0, seq: start.seq };
  }

  /**
   * Sends one file from byte `from` in batches, and records the position at its end (`later`: a
   * file after the cursor's, whose position is recorded even when it held nothing).
   *
   * @returns Whether the pass over the source may go on to the next file: not when stopping, nor
   * when the file was renamed or replaced under the cursor.
   */
  async #pumpFile(
    source: ForwardSource,
    file: StoredFile,
    from: number,
    later: boolean,
    read: SourceRead,
    key: string,
  ): Promise<boolean> {
    const batch = new LineBatch(key, from);
    try {
      for await (const lines of readLines(file, { offset: from })) {
        for (const line of lines) {
          if (!this.#take(source, file, line, batch, read)) continue;
          if (batch.full(this.#batchSize)) {
            await this.#flush(source, batch, read);
            // Stopping: the batch in flight was acknowledged and its cursor saved.
            if (this.#aborted) return false;
          }
        }
        if (this.#aborted) return false;
      }
    } catch (err) {
      if (!(err instanceof DamagedFileError)) {
        return await this.#readFailed(err, source, batch.file);
      }
      // A damaged .gz (docs/fleet.md#damaged-files): what it gave is sent, then it is passed over.
      await this.#flush(source, batch, read);
      const message = await recordDamaged(this.#cursor, source, file, batch.end, err);
      await this.#save();
      this.#log("warn", message);
    }
    if (batch.items.length > 0 || batch.end !== from || later) {
      await this.#flush(source, batch, read);
    }
    return true;
  }

  /** Adds a stored line to the batch, or skips a line that is no stored event (then false). */
  #take(
    source: ForwardSource,
    file: StoredFile,
    line: StoredLine,
    batch: LineBatch,
    read: SourceRead,
  ): boolean {
    const seq = storedSeq(line.text);
    batch.end = line.end;
    if (typeof seq === "string") {
      this.#stats.skipped++;
      this.#log(
        "warn",
        `skipping a line of ${file.path} ending at byte ${line.end}: not a stored event (${seq})`,
      );
      return false;
    }
    if (seq <= read.lastSeq) {
      // The stream started over (a site directory replaced, a run directory reused from a
      // backup): these keys were sent before, and the destination drops the events.
      this.#warnOnce(
        `${source.stream}\n${source.runId}\nseq\n${read.lastSeq}`,
        `the seq of ${describeSource(source)} went back from ${read.lastSeq} to ${seq} in ` +
          `${file.path}: the destination already holds these keys and drops these events as ` +
          `repeats; a stream that started over needs another --unit to be kept`,
      );
    }
    read.lastSeq = seq;
    batch.add({ stream: source.stream, runId: source.runId, seq, line: line.text });
    return true;
  }

  /**
   * A file that could not be read to its end: renamed away by a compression between the listing
   * and the open (the next pass finds its other form under the same cursor), or truncated or
   * replaced under the cursor (sent again from its start). Anything else is thrown.
   */
  async #readFailed(err: unknown, source: ForwardSource, file: string): Promise<false> {
    if (err instanceof Deno.errors.NotFound) return false;
    if (!(err instanceof OffsetMismatchError)) throw err;
    this.#log(
      "warn",
      `${err.message}; forwarding it again from its start (duplicates are dropped)`,
    );
    if (source.stream === "site") this.#cursor.site_files![file] = 0;
    else setPosition(this.#cursor, source, { file, offset: 0, seq: 0 });
    await writeCursor(this.#options.siteDir, this.#name, this.#cursor);
    return false;
  }

  async #flush(source: ForwardSource, batch: LineBatch, read: SourceRead): Promise<void> {
    await this.#sendBatch(source, batch.items, {
      file: batch.file,
      offset: batch.end,
      seq: read.lastSeq,
    });
    read.sent += batch.items.length;
    batch.clear();
  }

  /** Sends one batch and records the position after it; throws when the sink failed. */
  async #sendBatch(
    source: ForwardSource,
    items: ForwardItem[],
    at: StreamPosition,
  ): Promise<void> {
    if (items.length > 0) {
      const sink = this.#sink ??= await this.#connector.connect();
      const refused = items.filter((item) => {
        const why = sink.refuses(item);
        if (why === undefined) return false;
        this.#skip(item, why);
        return true;
      });
      if (refused.length > 0) items = items.filter((item) => !refused.includes(item));
    }
    if (items.length > 0) {
      const skippedBefore = this.#stats.skipped;
      const sending = items;
      await this.#sink!.send(sending, {
        signal: this.#options.signal,
        onRejected: (index, why) => this.#skip(sending[index]!, why),
      });
      // Less the lines the sink rejected for their value (rows PostgreSQL refused).
      this.#stats.sent += items.length - (this.#stats.skipped - skippedBefore);
      this.#options.onSent?.({
        stream: source.stream,
        runId: source.runId,
        count: items.length,
        lastSeq: at.seq,
      });
    }
    if (source.stream === "site") this.#site.sent(at.file, at);
    else setPosition(this.#cursor, source, at);
    this.#dirty = true;
    if (Date.now() - this.#savedAt >= CURSOR_SAVE_MS) await this.#save();
  }
}
