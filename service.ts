/**
 * The telemetry service without HTTP: run state, seq counters, the snapshot, and the commit
 * loop that turns accepted events into NDJSON lines. `server.ts` maps requests onto it; embedders
 * and tests can drive it directly.
 *
 * Needs `--allow-read` and `--allow-write` for the site directory.
 *
 * @example Usage
 * ```ts ignore
 * import { TelemetryService } from "@obs-utils/telemetry/server";
 * await using service = await TelemetryService.open({ siteDir: "./telemetry" });
 * const [event] = await service.record([{ type: "weather", data: { wind_mps: 2.1 } }]);
 * console.log(event.line);
 * ```
 *
 * @module
 */

import { basename, isAbsolute, join, resolve } from "node:path";
import { formatTimestamp, isJsonObject, type JsonObject, type RunRecord } from "./event.ts";
import {
  parseRunStart,
  type PreparedEvent,
  prepareEvent,
  RUN_ID_PATTERN,
  ServiceError,
} from "./_request.ts";
import {
  checkTimeZone,
  DayKeyer,
  errorText,
  type FsyncMode,
  isDiskFull,
  isStrictlyInside,
  latestSiteFiles,
  NdjsonWriter,
  nextNumericRun,
  readJsonFile,
  readSeqMark,
  realPathOfNearest,
  recoverTornTail,
  removeIfExists,
  scanStream,
  SITE_FILE,
  siteFileName,
  SiteLock,
  type StreamScan,
  writeJsonAtomic,
  writeSeqMark,
} from "./storage.ts";

export { RUN_ID_PATTERN, ServiceError } from "./_request.ts";

/** Site-wide event types written to the site stream during a run too (CONTRACT 3). */
export const DEFAULT_SITE_TYPES: readonly string[] = ["weather", "environment"];
/** How many distinct event types the snapshot may hold (CONTRACT 4.8). */
export const DEFAULT_MAX_TYPES = 10_000;

const ACTIVE_RUN_FILE = ".active-run.json";
/** The snapshot as it was at the last clean shutdown, with the seqs it reflects. */
const SNAPSHOT_FILE = ".snapshot.json";
/**
 * How far past an unwritten (ephemeral) seq the persisted high-water mark reserves, so that not
 * every ephemeral event costs a file write. After a crash, seq continues above the reservation.
 */
const SEQ_RESERVE = 1024;
const RUN_FILE = "telemetry.ndjson";
const encoder = new TextEncoder();

/** Options of {@linkcode TelemetryService.open}. */
export interface ServiceOptions {
  /** The site telemetry directory; created if missing. */
  siteDir: string;
  /**
   * IANA time zone whose local noon rotates the site file.
   * @default {the system zone}
   */
  timeZone?: string;
  /**
   * Event types written to both streams while a run is active.
   * @default {["weather", "environment"]}
   */
  siteTypes?: Iterable<string>;
  /**
   * When to fdatasync.
   * @default {"interval"}
   */
  fsync?: FsyncMode;
  /** Directories outside the site directory where runs may be placed (`--allow-run-root`). */
  allowRunRoots?: readonly string[];
  /**
   * Cap on distinct event types in the snapshot.
   * @default {10000}
   */
  maxTypes?: number;
  /**
   * The clock, in epoch milliseconds; tests inject one to cross noon or a DST change.
   * @default {Date.now}
   */
  clock?: () => number;
  /** Receives warnings about recovered state (torn tails, a corrupt active-run file). */
  onWarning?: (message: string) => void;
}

/** Which stream a copy of an event went to. */
export type StreamName = "site" | "run";

/** One accepted event, as answered to the caller. */
export interface CommittedEvent {
  /** The envelope line without `\n`; exactly the bytes on disk when it was stored. */
  line: string;
  /** The stream of this copy: `run` while a run is active, else `site`. */
  stream: StreamName;
  /** The seq in that stream. */
  seq: number;
  /** The event type. */
  type: string;
  /** The parsed `data` (not copied: treat as read-only). */
  data: JsonObject;
  /** The run id stamped into `meta`, if any. */
  runId: string | undefined;
}

/** What {@linkcode TelemetryService.subscribe} listeners receive. */
export type ServiceMessage =
  | { kind: "telemetry"; event: CommittedEvent }
  | { kind: "run"; run: RunRecord; active: boolean };

interface EventOp {
  kind: "events";
  items: PreparedEvent[];
  /** Name the item index in errors (a batch request). */
  batch: boolean;
  resolve: (events: CommittedEvent[]) => void;
  reject: (err: unknown) => void;
}

interface ControlOp {
  kind: "control";
  run: () => Promise<unknown>;
  resolve: (value: unknown) => void;
  reject: (err: unknown) => void;
}

interface ActiveRun {
  record: RunRecord;
  writer: NdjsonWriter;
  lastSeq: number;
  /** The persisted high-water mark of the run stream (0: none). */
  mark: number;
  /** The highest seq of the run stream that is on disk. */
  lastWritten: number;
  /** Seq of the run stream when this start happened; persisted to count `events` on resume. */
  seqAtStart: number;
}

interface SnapshotEntry {
  line: string;
  ts: string;
  data: JsonObject;
}

/** Counters the metrics endpoint exposes. */
export interface ServiceStats {
  /** Events accepted per `stream` and `type` (key `"<stream>\u0000<type>"`). */
  eventsTotal: Map<string, number>;
  /** Failed batch writes. */
  writeErrors: number;
  /** Bytes appended to NDJSON files. */
  bytesWritten: number;
  /** Batch write durations in seconds, as histogram bucket counts. */
  writeSeconds: Histogram;
}

/** A cumulative histogram with fixed upper bounds. */
export class Histogram {
  /** Upper bounds in seconds, ascending. */
  readonly bounds: readonly number[];
  /** Count of observations at or below each bound (non-cumulative per bucket). */
  readonly counts: number[];
  /** Sum of all observations. */
  sum = 0;
  /** Number of observations. */
  count = 0;
  /**
   * Creates an empty histogram.
   *
   * @param bounds Upper bounds, ascending.
   */
  constructor(bounds: readonly number[]) {
    this.bounds = bounds;
    this.counts = bounds.map(() => 0);
  }
  /**
   * Counts one observation.
   *
   * @param value One observation.
   */
  observe(value: number): void {
    this.sum += value;
    this.count++;
    const i = this.bounds.findIndex((b) => value <= b);
    if (i >= 0) this.counts[i]!++;
  }
}

/**
 * The service core: one instance owns one site directory (it holds the directory's lock).
 *
 * Every event and every run change goes through one queue, in arrival order. Consecutive events
 * are committed together: their seqs are assigned when the batch is written, each file gets one
 * write, and a failed write truncates every file of the batch back, consumes no seq and leaves
 * the snapshot untouched (CONTRACT 4.1).
 *
 * @example Usage
 * ```ts ignore
 * import { TelemetryService } from "@obs-utils/telemetry/server";
 * await using service = await TelemetryService.open({ siteDir: "./telemetry", timeZone: "UTC" });
 * await service.startRun({ run_id: "night-1" });
 * await service.record([{ type: "status", data: { dome: "open" } }]);
 * await service.stopRun();
 * ```
 */
export class TelemetryService implements AsyncDisposable {
  /** Absolute real path of the site directory. */
  readonly siteDir: string;
  /** IANA zone of the local-noon rotation. */
  readonly timeZone: string;
  /** The fsync mode. */
  readonly fsync: FsyncMode;
  /** Counters for `/metrics`. */
  readonly stats: ServiceStats = {
    eventsTotal: new Map(),
    writeErrors: 0,
    bytesWritten: 0,
    writeSeconds: new Histogram([0.0005, 0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 1]),
  };

  #lock: SiteLock;
  #clock: () => number;
  #siteTypes: Set<string>;
  #maxTypes: number;
  #runRoots: string[];
  #warn: (message: string) => void;
  #keyer: DayKeyer;
  #siteSeq: number;
  /** The persisted high-water mark of the site stream (0: none). */
  #siteMark: number;
  /** The highest site seq that is on disk. */
  #siteLastWritten: number;
  #syncingAll: Promise<void> | undefined;
  /** Types whose snapshot entry came from the saved snapshot, while restoring. */
  #savedTypes = new Set<string>();
  #siteWriters = new Map<string, NdjsonWriter>();
  #run: ActiveRun | undefined;
  #snapshot = new Map<string, SnapshotEntry>();
  #listeners = new Set<(message: ServiceMessage) => void>();
  #queue: (EventOp | ControlOp)[] = [];
  #draining: Promise<void> | undefined;
  #closing = false;
  #closed: Promise<void> | undefined;
  #syncTimer: ReturnType<typeof setInterval> | undefined;

  private constructor(init: {
    siteDir: string;
    timeZone: string;
    fsync: FsyncMode;
    lock: SiteLock;
    clock: () => number;
    siteTypes: Set<string>;
    maxTypes: number;
    runRoots: string[];
    warn: (message: string) => void;
    siteSeq: number;
    siteMark: number;
    siteLastWritten: number;
  }) {
    this.siteDir = init.siteDir;
    this.timeZone = init.timeZone;
    this.fsync = init.fsync;
    this.#lock = init.lock;
    this.#clock = init.clock;
    this.#siteTypes = init.siteTypes;
    this.#maxTypes = init.maxTypes;
    this.#runRoots = init.runRoots;
    this.#warn = init.warn;
    this.#keyer = new DayKeyer(init.timeZone);
    this.#siteSeq = init.siteSeq;
    this.#siteMark = init.siteMark;
    this.#siteLastWritten = init.siteLastWritten;
  }

  /**
   * Opens a site directory: creates it if needed, takes its lock, recovers torn tails, resumes
   * the site seq, the snapshot and an active run from disk.
   *
   * @param options Where and how to store.
   * @returns The running service; close it with {@linkcode TelemetryService.close}.
   * @throws {SiteInUseError} If another server holds the directory.
   * @throws {RangeError} If `timeZone` is not an IANA zone.
   * @throws {Deno.errors.NotCapable} If read or write permission for the directory is missing.
   *
   * @example Usage
   * ```ts ignore
   * import { TelemetryService } from "@obs-utils/telemetry/server";
   * const service = await TelemetryService.open({ siteDir: "/srv/telemetry", fsync: "always" });
   * await service.close();
   * ```
   */
  static async open(options: ServiceOptions): Promise<TelemetryService> {
    const timeZone = checkTimeZone(options.timeZone ?? Temporal.Now.timeZoneId());
    const fsync = options.fsync ?? "interval";
    await Deno.mkdir(options.siteDir, { recursive: true });
    const siteDir = await Deno.realPath(options.siteDir);
    const runRoots: string[] = [];
    for (const root of options.allowRunRoots ?? []) {
      await Deno.mkdir(root, { recursive: true });
      runRoots.push(await Deno.realPath(root));
    }
    const lock = await SiteLock.acquire(siteDir);
    try {
      const warn = options.onWarning ?? (() => {});
      const site = await resumeSiteStream(siteDir, warn);
      const siteMark = await readSeqMark(siteDir);
      const service = new TelemetryService({
        siteDir,
        timeZone,
        fsync,
        lock,
        clock: options.clock ?? Date.now,
        siteTypes: new Set(options.siteTypes ?? DEFAULT_SITE_TYPES),
        maxTypes: options.maxTypes ?? DEFAULT_MAX_TYPES,
        runRoots,
        warn,
        siteSeq: Math.max(site.lastSeq, siteMark),
        siteMark,
        siteLastWritten: site.lastSeq,
      });
      // The snapshot saved at the last clean shutdown holds what files cannot tell (events
      // posted with store_permanently or make_current false); lines written after it win.
      const saved = await readSavedSnapshot(siteDir, warn);
      for (const line of saved?.current ?? []) service.#restoreSnapshot(line, { saved: true });
      for (const line of site.latest.values()) {
        service.#restoreSnapshot(line, {
          after: saved?.siteSeq ?? 0,
          covered: saved !== undefined,
        });
      }
      await service.#resumeRun(saved);
      service.#savedTypes.clear();
      if (fsync === "interval") {
        const timer = setInterval(() => {
          // A slow disk must not pile syncs up behind each other.
          service.#syncingAll ??= service.#syncAll().finally(() => service.#syncingAll = undefined);
        }, 1000);
        Deno.unrefTimer(timer);
        service.#syncTimer = timer;
      }
      return service;
    } catch (err) {
      await lock.release();
      throw err;
    }
  }

  /** The active run's record (with a live `events` count), or `undefined`. */
  get run(): RunRecord | undefined {
    return this.#run ? { ...this.#run.record } : undefined;
  }

  /** `true` once {@linkcode TelemetryService.close} was called. */
  get closing(): boolean {
    return this.#closing;
  }

  /** Number of event types in the snapshot. */
  get snapshotSize(): number {
    return this.#snapshot.size;
  }

  /**
   * Validates event requests (CONTRACT 2.4) and records them in order, all or nothing.
   *
   * @param items Parsed request bodies: `{type, data, meta?, ts?, store_permanently?, make_current?}`.
   * @param options `batch: true` names the 0-based index of a bad item in the error even when
   *   there is only one item (`POST /events`); by default only lists of two or more do.
   * @returns One {@linkcode CommittedEvent} per item, in order.
   * @throws {ServiceError} 400 naming the first bad item (nothing is recorded), 503 when closing,
   *   507 when the disk is full, 500 when another write error happened.
   *
   * @example Usage
   * ```ts ignore
   * const [event] = await service.record([{ type: "weather", data: { wind_mps: 2.1 } }]);
   * ```
   */
  record(
    items: readonly unknown[],
    options: { batch?: boolean } = {},
  ): Promise<CommittedEvent[]> {
    if (this.#closing) return Promise.reject(shuttingDown());
    const receivedAt = this.#clock();
    const prepared: PreparedEvent[] = [];
    const batch = options.batch ?? items.length > 1;
    try {
      for (let i = 0; i < items.length; i++) {
        prepared.push(prepareEvent(items[i], receivedAt, batch ? i : undefined));
      }
    } catch (err) {
      // A Promise-returning method reports validation errors as a rejection, never a throw.
      return Promise.reject(err);
    }
    if (prepared.length === 0) return Promise.resolve([]);
    return new Promise((resolve, reject) => {
      this.#enqueue({ kind: "events", items: prepared, batch, resolve, reject });
    });
  }

  /**
   * Starts a run (CONTRACT 2.3). Starting the run that is already active is an idempotent retry.
   *
   * @param body The parsed `POST /run/start` body: `{run_id?, run_dir?, meta?}`, or `undefined`.
   * @returns The run record, and `created: false` when the same run was already active.
   * @throws {ServiceError} 400 for a bad id or directory, 409 when another run is active.
   *
   * @example Usage
   * ```ts ignore
   * const { run } = await service.startRun({ run_id: "m31-1", meta: { target: "M31" } });
   * ```
   */
  startRun(body: unknown): Promise<{ run: RunRecord; created: boolean }> {
    return this.#control(() => this.#startRun(body));
  }

  /**
   * Stops the active run, after every event received before this call has been written.
   *
   * @returns The final run record, with `stopped_at` and `events`.
   * @throws {ServiceError} 409 when no run is active.
   *
   * @example Usage
   * ```ts ignore
   * const run = await service.stopRun();
   * console.log(run.events);
   * ```
   */
  stopRun(): Promise<RunRecord> {
    return this.#control(() => this.#stopRun());
  }

  /**
   * The snapshot as the `GET /current` body: an object keyed by type, built from the stored
   * lines without re-serialising them.
   *
   * @returns A JSON object text.
   */
  currentJson(): string {
    let out = "{";
    for (const [type, entry] of this.#snapshot) {
      if (out.length > 1) out += ",";
      out += JSON.stringify(type) + ":" + entry.line;
    }
    return out + "}";
  }

  /**
   * The latest envelope line of one type.
   *
   * @param type The event type.
   * @returns The line, or `undefined` when no event of that type was recorded.
   */
  currentLine(type: string): string | undefined {
    return this.#snapshot.get(type)?.line;
  }

  /**
   * The latest `data` of each type, for gauges. Read-only view.
   *
   * @returns Pairs of type and data.
   */
  *currentData(): Iterable<[string, JsonObject]> {
    for (const [type, entry] of this.#snapshot) yield [type, entry.data];
  }

  /**
   * Registers a listener for accepted events and run changes. Listeners run synchronously
   * after each commit and must not block; an exception in one is ignored.
   *
   * @param listener Called with each message.
   * @returns A function that unsubscribes.
   */
  subscribe(listener: (message: ServiceMessage) => void): () => void {
    this.#listeners.add(listener);
    return () => this.#listeners.delete(listener);
  }

  /**
   * Stops accepting work, writes everything queued, fdatasyncs and closes every file and
   * releases the lock. An active run stays active on disk and resumes on the next open.
   *
   * @returns When everything is closed. Calling it again returns the same promise.
   */
  close(): Promise<void> {
    this.#closed ??= this.#close();
    return this.#closed;
  }

  /** Same as {@linkcode TelemetryService.close}. */
  [Symbol.asyncDispose](): Promise<void> {
    return this.close();
  }

  async #close(): Promise<void> {
    this.#closing = true;
    while (this.#draining) await this.#draining;
    clearInterval(this.#syncTimer);
    await this.#syncingAll;
    const errors: unknown[] = [];
    try {
      await this.#settleSiteMark();
      if (this.#run) await this.#settleRunMark(this.#run);
    } catch (err) {
      errors.push(err);
    }
    try {
      await writeJsonAtomic(join(this.siteDir, SNAPSHOT_FILE), {
        site_seq: this.#siteSeq,
        run_dir: this.#run?.record.run_dir ?? null,
        run_seq: this.#run?.lastSeq ?? 0,
        current: JSON.parse(this.currentJson()),
      });
    } catch (err) {
      // Losing it only loses what the files cannot tell; the close itself must go on.
      this.#warn(`Cannot save the snapshot for the next start: ${errorText(err)}`);
    }
    for (const writer of [...this.#siteWriters.values(), this.#run?.writer]) {
      try {
        await writer?.close();
      } catch (err) {
        errors.push(err);
      }
    }
    this.#siteWriters.clear();
    this.#listeners.clear();
    await this.#lock.release();
    if (errors.length > 0) throw errors[0];
  }

  /**
   * On close, records the exact site counter when seqs above the last line were handed out (or
   * a reservation exists), so a restart neither reuses them nor skips a reservation's worth.
   */
  async #settleSiteMark(): Promise<void> {
    if (this.#siteSeq > this.#siteLastWritten || this.#siteMark > this.#siteSeq) {
      await writeSeqMark(this.siteDir, this.#siteSeq);
      this.#siteMark = this.#siteSeq;
    }
  }

  async #settleRunMark(run: ActiveRun): Promise<void> {
    if (run.lastSeq > run.lastWritten || run.mark > run.lastSeq) {
      await writeSeqMark(run.record.run_dir, run.lastSeq);
      run.mark = run.lastSeq;
    }
  }

  #control<T>(fn: () => Promise<T>): Promise<T> {
    if (this.#closing) return Promise.reject(shuttingDown());
    return new Promise((resolve, reject) => {
      this.#enqueue({
        kind: "control",
        run: fn,
        resolve: resolve as (value: unknown) => void,
        reject,
      });
    });
  }

  #enqueue(op: EventOp | ControlOp): void {
    this.#queue.push(op);
    this.#draining ??= this.#drain();
  }

  async #drain(): Promise<void> {
    // Let requests that arrive in the same tick join the first batch.
    await Promise.resolve();
    try {
      while (this.#queue.length > 0) {
        const head = this.#queue[0]!;
        if (head.kind === "control") {
          this.#queue.shift();
          try {
            head.resolve(await head.run());
          } catch (err) {
            head.reject(err);
          }
          continue;
        }
        let n = 1;
        while (n < this.#queue.length && this.#queue[n]!.kind === "events") n++;
        await this.#commit(this.#queue.splice(0, n) as EventOp[]);
      }
    } finally {
      this.#draining = undefined;
    }
  }

  /** Writes a group of event requests; see the class doc for the guarantees. */
  async #commit(ops: EventOp[]): Promise<void> {
    const run = this.#run;
    const accepted: EventOp[] = [];
    const newTypes = new Set<string>();
    for (const op of ops) {
      const problem = this.#checkAtCommit(op, run, newTypes);
      if (problem) op.reject(problem);
      else accepted.push(op);
    }
    if (accepted.length === 0) return;

    let siteSeq = this.#siteSeq;
    let runSeq = run?.lastSeq ?? 0;
    let siteWritten = this.#siteLastWritten, runWritten = run?.lastWritten ?? 0;
    let siteUnwritten = 0, runUnwritten = 0; // highest seq handed out but not stored
    const runId = run?.record.run_id;
    const pending = new Map<NdjsonWriter | string, string[]>(); // writer, or day key to open
    const push = (target: NdjsonWriter | string, line: string) => {
      const list = pending.get(target);
      if (list) list.push(line);
      else pending.set(target, [line]);
    };
    const results: CommittedEvent[][] = [];
    const copies: [StreamName, string][] = []; // for stats
    for (const op of accepted) {
      const out: CommittedEvent[] = [];
      for (const item of op.items) {
        const meta = runId === undefined || item.callerRunId !== undefined
          ? item.metaJson
          : withRunId(item.metaJson, runId);
        const tail = `${item.middle},"meta":${meta}}`;
        let answer: CommittedEvent;
        if (run) {
          const line = `{"seq":${++runSeq}${tail}`;
          if (item.storePermanently) {
            push(run.writer, line);
            runWritten = runSeq;
          } else runUnwritten = runSeq;
          answer = { line, stream: "run", seq: runSeq, type: item.type, data: item.data, runId };
          copies.push(["run", item.type]);
          if (this.#siteTypes.has(item.type)) {
            const siteLine = `{"seq":${++siteSeq}${tail}`;
            if (item.storePermanently) {
              push(this.#keyer.keyFor(item.receivedAt), siteLine);
              siteWritten = siteSeq;
            } else siteUnwritten = siteSeq;
            copies.push(["site", item.type]);
          }
        } else {
          const line = `{"seq":${++siteSeq}${tail}`;
          if (item.storePermanently) {
            push(this.#keyer.keyFor(item.receivedAt), line);
            siteWritten = siteSeq;
          } else siteUnwritten = siteSeq;
          answer = { line, stream: "site", seq: siteSeq, type: item.type, data: item.data, runId };
          copies.push(["site", item.type]);
        }
        out.push(answer);
      }
      results.push(out);
    }

    const started = performance.now();
    let bytes = 0;
    const written: [NdjsonWriter, number][] = [];
    try {
      // Seqs that reach no file must still never be handed out again (CONTRACT 3): reserve a
      // block above them on disk before anyone is told about them.
      if (siteUnwritten > this.#siteMark) {
        await writeSeqMark(this.siteDir, siteUnwritten + SEQ_RESERVE);
        this.#siteMark = siteUnwritten + SEQ_RESERVE;
      }
      if (run && runUnwritten > run.mark) {
        await writeSeqMark(run.record.run_dir, runUnwritten + SEQ_RESERVE);
        run.mark = runUnwritten + SEQ_RESERVE;
      }
      for (const [target, lines] of pending) {
        const writer = typeof target !== "string"
          ? target
          : this.#siteWriters.get(target) ?? await this.#openSiteWriter(target);
        const chunk = encoder.encode(lines.join("\n") + "\n");
        const before = writer.size;
        await writer.append(chunk); // truncates itself back on failure
        written.push([writer, before]);
        bytes += chunk.length;
      }
    } catch (err) {
      for (const [writer, before] of written.reverse()) {
        await writer.truncate(before).catch((e) =>
          this.#warn(`Cannot roll back ${writer.path} to ${before} bytes: ${errorText(e)}`)
        );
      }
      this.stats.writeErrors++;
      const failure = writeFailure(err);
      for (const op of accepted) op.reject(failure);
      return;
    }
    if (bytes > 0) {
      this.stats.writeSeconds.observe((performance.now() - started) / 1000);
      this.stats.bytesWritten += bytes;
    }
    if (this.#siteWriters.size > 1) await this.#retireOldSiteWriters();

    this.#siteSeq = siteSeq;
    this.#siteLastWritten = siteWritten;
    if (run) {
      run.lastSeq = runSeq;
      run.lastWritten = runWritten;
      run.record.events += pending.get(run.writer)?.length ?? 0;
    }
    for (const [stream, type] of copies) {
      const key = `${stream}\u0000${type}`;
      this.stats.eventsTotal.set(key, (this.stats.eventsTotal.get(key) ?? 0) + 1);
    }
    for (let i = 0; i < accepted.length; i++) {
      const op = accepted[i]!;
      const out = results[i]!;
      for (let j = 0; j < out.length; j++) {
        const event = out[j]!;
        if (op.items[j]!.makeCurrent) {
          this.#setSnapshot(event.type, {
            line: event.line,
            ts: op.items[j]!.ts,
            data: event.data,
          });
        }
        this.#publish({ kind: "telemetry", event });
      }
      op.resolve(out);
    }
  }

  /** Checks that can only be made against the state at commit time; `undefined` if fine. */
  #checkAtCommit(
    op: EventOp,
    run: ActiveRun | undefined,
    newTypes: Set<string>,
  ): ServiceError | undefined {
    const added: string[] = [];
    for (let i = 0; i < op.items.length; i++) {
      const item = op.items[i]!;
      const where = op.batch ? `Item ${i}: ` : "";
      if (item.callerRunId !== undefined && item.callerRunId !== run?.record.run_id) {
        return new ServiceError(
          400,
          run
            ? `${where}meta.run_id "${item.callerRunId}" differs from the active run "${run.record.run_id}"; omit meta.run_id and the server stamps it.`
            : `${where}meta.run_id "${item.callerRunId}" was sent but no run is active; omit meta.run_id, the server stamps it during a run.`,
        );
      }
      if (item.makeCurrent && !this.#snapshot.has(item.type) && !newTypes.has(item.type)) {
        if (this.#snapshot.size + newTypes.size >= this.#maxTypes) {
          for (const t of added) newTypes.delete(t);
          return new ServiceError(
            400,
            `${where}the snapshot already holds ${this.#maxTypes} event types, the limit; reuse an existing type or raise --max-types.`,
          );
        }
        newTypes.add(item.type);
        added.push(item.type);
      }
    }
    return undefined;
  }

  async #openSiteWriter(key: string): Promise<NdjsonWriter> {
    let writer = this.#siteWriters.get(key);
    if (!writer) {
      const path = join(this.siteDir, siteFileName(key));
      writer = await NdjsonWriter.open(path, this.fsync, (n) => this.#tornWarning(path, n));
      this.#siteWriters.set(key, writer);
    }
    return writer;
  }

  /** Keeps only the newest day's site file open; closing the others fdatasyncs them. */
  async #retireOldSiteWriters(): Promise<void> {
    if (this.#siteWriters.size < 2) return;
    const newest = [...this.#siteWriters.keys()].sort().at(-1);
    for (const [key, writer] of this.#siteWriters) {
      if (key === newest) continue;
      this.#siteWriters.delete(key);
      await writer.close().catch((e) =>
        this.#warn(`Cannot close ${writer.path} after rotation: ${errorText(e)}`)
      );
    }
  }

  #tornWarning(path: string, bytes: number): void {
    this.#warn(tornMessage(path, bytes));
  }

  #setSnapshot(type: string, entry: SnapshotEntry): void {
    this.#snapshot.set(type, entry);
  }

  /**
   * Puts one stored line into the snapshot on start-up. For a stream the saved snapshot covers
   * (`covered`), only lines with a seq above what it reflects (`after`) count, and they replace
   * the saved entry; otherwise, and between the site and the run file, the later `ts` wins.
   */
  #restoreSnapshot(
    line: string,
    options: { saved?: boolean; after?: number; covered?: boolean } = {},
  ): void {
    try {
      const env = JSON.parse(line);
      if (!isJsonObject(env) || typeof env.type !== "string" || !isJsonObject(env.data)) return;
      if (options.covered && !(Number(env.seq) > (options.after ?? 0))) return;
      const existing = this.#snapshot.get(env.type);
      const ts = String(env.ts);
      if (options.saved) this.#savedTypes.add(env.type);
      else if (options.covered && this.#savedTypes.delete(env.type)) {
        // written after the saved snapshot: newer whatever its ts
      } else if (existing && existing.ts > ts) return;
      this.#snapshot.set(env.type, { line, ts, data: env.data });
    } catch {
      // A line that does not parse was never acknowledged in this form; it is skipped.
    }
  }

  #publish(message: ServiceMessage): void {
    for (const listener of this.#listeners) {
      try {
        listener(message);
      } catch {
        // A listener's failure must never affect ingestion.
      }
    }
  }

  async #syncAll(): Promise<void> {
    for (const writer of [...this.#siteWriters.values(), this.#run?.writer]) {
      await writer?.sync().catch((e) =>
        this.#warn(`Cannot fdatasync ${writer.path}: ${errorText(e)}`)
      );
    }
  }

  async #startRun(body: unknown): Promise<{ run: RunRecord; created: boolean }> {
    const req = parseRunStart(body);
    let runDir: string;
    let runId: string;
    if (req.runDir !== undefined) {
      runDir = await this.#resolveRunDir(req.runDir);
      runId = req.runId ?? basename(runDir);
      if (req.runId === undefined && !RUN_ID_PATTERN.test(runId)) {
        throw new ServiceError(
          400,
          `The last segment of run_dir, "${runId}", is not a usable run id; send run_id too, matching ${RUN_ID_PATTERN.source}.`,
        );
      }
    } else if (req.runId !== undefined) {
      runId = req.runId;
      runDir = join(this.siteDir, runId);
    } else {
      if (this.#run) {
        throw new ServiceError(
          409,
          `Run "${this.#run.record.run_id}" is active; stop it with POST /run/stop before starting a new one.`,
        );
      }
      runId = await nextNumericRun(this.siteDir);
      runDir = join(this.siteDir, runId);
    }

    const active = this.#run;
    if (active) {
      // A retry that names the same run is idempotent; naming another directory is not.
      if (
        active.record.run_id === runId &&
        (req.runDir === undefined || active.record.run_dir === runDir)
      ) {
        return { run: { ...active.record }, created: false };
      }
      throw new ServiceError(
        409,
        `Run "${active.record.run_id}" is active; stop it with POST /run/stop before starting "${runId}".`,
      );
    }

    try {
      await Deno.mkdir(runDir, { recursive: true });
    } catch (err) {
      if (err instanceof Deno.errors.AlreadyExists || err instanceof Deno.errors.NotADirectory) {
        throw new ServiceError(
          400,
          `Cannot use run_dir ${runDir}: a file is in the way; choose another run_id or run_dir.`,
        );
      }
      throw new ServiceError(500, `Cannot create run directory ${runDir}: ${errorText(err)}.`, {
        cause: err,
      });
    }
    const path = join(runDir, RUN_FILE);
    // A directory that held a run before continues its seq, past any unwritten seqs too.
    const scan = await scanStream(path);
    const mark = await readSeqMark(runDir);
    const lastSeq = Math.max(scan.lastSeq, mark);
    const writer = await NdjsonWriter.open(path, this.fsync, (n) => this.#tornWarning(path, n));
    const record: RunRecord = {
      run_id: runId,
      run_dir: runDir,
      started_at: formatTimestamp(this.#clock()),
      stopped_at: null,
      events: 0,
      meta: req.meta,
    };
    try {
      await writeJsonAtomic(join(this.siteDir, ACTIVE_RUN_FILE), {
        ...record,
        seq_at_start: lastSeq,
      });
    } catch (err) {
      await writer.close();
      throw writeFailure(err);
    }
    this.#run = {
      record,
      writer,
      lastSeq,
      mark,
      lastWritten: scan.lastSeq,
      seqAtStart: lastSeq,
    };
    this.#publish({ kind: "run", run: { ...record }, active: true });
    return { run: { ...record }, created: true };
  }

  async #stopRun(): Promise<RunRecord> {
    const active = this.#run;
    if (!active) {
      throw new ServiceError(409, "No run is active; start one with POST /run/start.");
    }
    try {
      await removeIfExists(join(this.siteDir, ACTIVE_RUN_FILE));
    } catch (err) {
      throw new ServiceError(500, `Cannot clear the active run: ${errorText(err)}.`, {
        cause: err,
      });
    }
    this.#run = undefined;
    active.record.stopped_at = formatTimestamp(this.#clock());
    await this.#settleRunMark(active).catch((e) =>
      this.#warn(`Cannot record the last seq of run ${active.record.run_id}: ${errorText(e)}`)
    );
    await active.writer.close().catch((e) =>
      this.#warn(`Cannot close ${active.writer.path}: ${errorText(e)}`)
    );
    const record = { ...active.record };
    this.#publish({ kind: "run", run: record, active: false });
    return record;
  }

  async #resumeRun(snapshot: SavedSnapshot | undefined): Promise<void> {
    const path = join(this.siteDir, ACTIVE_RUN_FILE);
    let saved: unknown;
    try {
      saved = await readJsonFile(path);
    } catch (err) {
      if (!(err instanceof SyntaxError)) throw err;
      saved = null;
    }
    if (saved === undefined) return;
    if (
      !isJsonObject(saved) || typeof saved.run_id !== "string" ||
      typeof saved.run_dir !== "string" || typeof saved.started_at !== "string"
    ) {
      const aside = `${path}.corrupt-${Date.now()}`;
      await Deno.rename(path, aside);
      this.#warn(`The active-run record was unreadable and was moved to ${aside}; no run resumed.`);
      return;
    }
    const runDir = saved.run_dir;
    await Deno.mkdir(runDir, { recursive: true });
    const file = join(runDir, RUN_FILE);
    const writer = await NdjsonWriter.open(file, this.fsync, (n) => this.#tornWarning(file, n));
    const seqAtStart = typeof saved.seq_at_start === "number" ? saved.seq_at_start : 0;
    let scan: Awaited<ReturnType<typeof scanStream>>;
    let mark: number;
    try {
      scan = await scanStream(file, seqAtStart);
      mark = await readSeqMark(runDir);
    } catch (err) {
      await writer.close();
      throw err;
    }
    // Seq counts per run directory, so the saved snapshot covers this run file only if it was
    // saved while this same directory was the active run.
    const covered = snapshot !== undefined && snapshot.runDir === runDir;
    for (const line of scan.latest.values()) {
      this.#restoreSnapshot(line, { after: covered ? snapshot.runSeq : 0, covered });
    }
    this.#run = {
      record: {
        run_id: saved.run_id,
        run_dir: runDir,
        started_at: saved.started_at,
        stopped_at: null,
        events: scan.countedAfter,
        meta: isJsonObject(saved.meta) ? saved.meta : {},
      },
      writer,
      lastSeq: Math.max(scan.lastSeq, mark),
      mark,
      lastWritten: scan.lastSeq,
      seqAtStart,
    };
  }

  /** Resolves and confines a requested run directory (CONTRACT 2.3). */
  async #resolveRunDir(requested: string): Promise<string> {
    const target = isAbsolute(requested) ? resolve(requested) : resolve(this.siteDir, requested);
    const real = await realPathOfNearest(target);
    for (const root of [this.siteDir, ...this.#runRoots]) {
      if (isStrictlyInside(real, root) && isStrictlyInside(target, root)) return target;
    }
    const roots = this.#runRoots.length > 0
      ? `the site directory ${this.siteDir} or an --allow-run-root (${this.#runRoots.join(", ")})`
      : `the site directory ${this.siteDir}`;
    throw new ServiceError(
      400,
      `run_dir "${requested}" resolves to ${target}, which is not inside ${roots}; use a path below it, or have the operator add --allow-run-root.`,
    );
  }
}

/**
 * The 503 answer while the service shuts down.
 *
 * @returns A fresh error to throw or reject with.
 */
export function shuttingDown(): ServiceError {
  return new ServiceError(503, "The server is shutting down; retry once it is back.");
}

function writeFailure(err: unknown): ServiceError {
  if (isDiskFull(err)) {
    return new ServiceError(
      507,
      `The disk is full; nothing was written. Free space on the disk holding the site directory and retry.`,
      { cause: err },
    );
  }
  return new ServiceError(
    500,
    `The event could not be written (${
      errorText(err)
    }); nothing was stored. Check the site directory and retry.`,
    { cause: err },
  );
}

function withRunId(metaJson: string, runId: string): string {
  const field = `"run_id":${JSON.stringify(runId)}`;
  return metaJson === "{}" ? `{${field}}` : `${metaJson.slice(0, -1)},${field}}`;
}

function tornMessage(path: string, bytes: number): string {
  return `Moved a torn last line (${bytes} bytes) of ${path} to ${path}.torn.`;
}

interface SavedSnapshot {
  siteSeq: number;
  /** The run directory that was active when it was saved. */
  runDir: string | null;
  runSeq: number;
  /** The saved envelopes as lines. */
  current: string[];
}

async function readSavedSnapshot(
  siteDir: string,
  warn: (message: string) => void,
): Promise<SavedSnapshot | undefined> {
  let value: unknown;
  try {
    value = await readJsonFile(join(siteDir, SNAPSHOT_FILE));
  } catch (err) {
    if (!(err instanceof SyntaxError)) throw err;
    warn(`The saved snapshot ${SNAPSHOT_FILE} is unreadable; rebuilding from the files alone.`);
    return undefined;
  }
  if (
    !isJsonObject(value) || typeof value.site_seq !== "number" || !isJsonObject(value.current) ||
    typeof value.run_seq !== "number" ||
    !(value.run_dir === null || typeof value.run_dir === "string")
  ) return undefined;
  return {
    siteSeq: value.site_seq,
    runDir: value.run_dir,
    runSeq: value.run_seq,
    // JSON.parse keeps key order, so re-serialising gives back the canonical line.
    current: Object.values(value.current).map((envelope) => JSON.stringify(envelope)),
  };
}

async function resumeSiteStream(
  siteDir: string,
  warn: (message: string) => void,
): Promise<{ lastSeq: number; latest: Map<string, string> }> {
  const candidates = await latestSiteFiles(siteDir);
  let best: StreamScan = { lastSeq: 0, latest: new Map(), countedAfter: 0 };
  for (const path of candidates) {
    const moved = await recoverTornTail(path);
    if (moved > 0) warn(tornMessage(path, moved));
    const scan = await scanStream(path);
    if (scan.lastSeq > best.lastSeq) best = scan;
  }
  if (candidates.length === 0 || best.lastSeq > 0) return best;
  // The newest files are empty (a rolled-back first write): seq must still continue, and the
  // snapshot comes from the file that holds the last seq.
  for await (const entry of Deno.readDir(siteDir)) {
    if (SITE_FILE.test(entry.name)) {
      const other = await scanStream(join(siteDir, entry.name));
      if (other.lastSeq > best.lastSeq) best = other;
    }
  }
  return best;
}
