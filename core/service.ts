/**
 * The telemetry service without HTTP: one queue for every event and run change, seq assignment,
 * and publishing what was accepted. The site directory is {@linkcode SiteStore}'s, the snapshot
 * `snapshot.ts`'s, runs `runs.ts`'s, seq assignment `assign.ts`'s and the resume at start-up
 * `restore.ts`'s; `http/server.ts` maps requests onto it; embedders and tests can drive it
 * directly.
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

import type { BatchSummary, JsonObject, RunRecord } from "../wire/event.ts";
import { IdempotencyConflictError, ShuttingDownError, StorageError } from "./errors.ts";
import { type EventCommand, parseEvents, parseRunStart, type RunStartCommand } from "./commands.ts";
import { checkTimeZone } from "../store/day_key.ts";
import { DEFAULT_FSYNC, type FsyncMode, type NdjsonWriter } from "../store/writer.ts";
import { type ActiveRun, Runs, type RunStart, toWriteError } from "./runs.ts";
import { checkpointRecord, Snapshot, type SnapshotBodyOptions } from "./snapshot.ts";
import { SiteStore } from "../store/site_store.ts";
import { siteFileName } from "../store/layout.ts";
import { type Resumed, resumeFromDisk, type SiteCounters } from "./restore.ts";
import { RetentionScheduler } from "../store/retention.ts";
import { GroupQueue } from "./queue.ts";
import { TimestampCache } from "./timestamp.ts";
import { Checkpointer } from "./checkpointer.ts";
import { Admission } from "./admission.ts";
import { type AssignContext, type Assigned, assignGroup, type EventOp } from "./assign.ts";
import { Fanout } from "./fanout.ts";
import { reservedMark, settledMark } from "../store/seq_marks.ts";
import {
  isCriticalAnywhere,
  NO_TYPES,
  SITE_PROFILE,
  type TypesRegistry,
} from "./types_registry.ts";
import type { SafetyChange, SafetyVerdict } from "./safety.ts";
import { openSafetyWatch, SAFETY_EVENT_TYPE, type SafetyWatch } from "./safety_watch.ts";
import { EXTERNAL_EVENT_TYPE, WAIVER_EVENT_TYPE } from "./safety_hub.ts";
import {
  type HubActor,
  type SafetyEvent,
  SafetyHubInputError,
  type Waiver,
} from "./safety_events.ts";

/**
 * The safety hub of a service (docs/safety.md#safety-events, #waivers): each method resolves once
 * the change is saved (fdatasynced) and its audit event written, and rejects with
 * {@linkcode SafetyHubInputError} on input it refuses (nothing changed then).
 *
 * @example Usage
 * ```ts ignore
 * await service.safetyHub.waive("weather", 7200, "anemometer dead", { via: "cli", peer: "127.0.0.1" });
 * ```
 */
export interface SafetyHubApi {
  /**
   * Adds external events, or replaces those with the same `Id`.
   *
   * @param events Checked SafetyEvent objects.
   * @param profile `site` holds every profile; another holds only itself.
   * @param actor Who.
   */
  setExternal(events: readonly SafetyEvent[], profile: string, actor: HubActor): Promise<void>;
  /**
   * Removes external events by `Id`.
   *
   * @param ids The `Id`s.
   * @param profile The profile asking.
   * @param actor Who.
   */
  clearExternal(ids: readonly string[], profile: string, actor: HubActor): Promise<void>;
  /**
   * Stops judging a critical type for 60 to 43,200 seconds.
   *
   * @param type The critical type.
   * @param forS Seconds.
   * @param reason Why.
   * @param actor Who.
   * @returns The waiver.
   */
  waive(type: string, forS: number, reason: string, actor: HubActor): Promise<Waiver>;
  /**
   * Ends a waiver early.
   *
   * @param type The type.
   * @param actor Who.
   */
  unwaive(type: string, actor: HubActor): Promise<void>;
}
import { readLinesAfter, type StreamsNow } from "./latch_replay.ts";
import { runLogEnd } from "../store/run_log.ts";
import { IdempotencyKeys } from "./idempotency.ts";
import { encodeKeyRecord, type KeyRef, type KeyStored } from "../store/key_journal.ts";
import { readSeqAndType } from "../wire/ndjson.ts";
import { MAX_LINE_BYTES } from "../store/site_files.ts";
import { utf8Length } from "./snapshot.ts";

export { RUN_ID_PATTERN } from "../store/layout.ts";
export type { EventCommand, RunStartCommand } from "./commands.ts";
export type { RunStart } from "./runs.ts";
export type { SnapshotBodyOptions } from "./snapshot.ts";
import {
  type CommittedEvent,
  DEFAULT_COMPRESS_AFTER,
  DEFAULT_MAX_SNAPSHOT_BYTES,
  DEFAULT_MAX_TYPES,
  DEFAULT_SITE_TYPES,
  type KeyedAnswer,
  type ServiceMessage,
  type ServiceOptions,
  type StreamName,
  type WriteReport,
} from "./service_types.ts";
export type {
  CommittedEvent,
  KeyedAnswer,
  ServiceMessage,
  ServiceOptions,
  StreamName,
  WriteReport,
};
export {
  DEFAULT_COMPRESS_AFTER,
  DEFAULT_MAX_SNAPSHOT_BYTES,
  DEFAULT_MAX_TYPES,
  DEFAULT_SITE_TYPES,
} from "./service_types.ts";

/**
 * The service core: one instance owns one site directory (it holds the directory's lock).
 *
 * Every event and every run change goes through one queue, in arrival order. Consecutive events
 * are committed together: their seqs are assigned when the batch is written, each file gets one
 * write, and a failed write truncates every file of the batch back, consumes no seq and leaves
 * the snapshot untouched (docs/storage.md).
 *
 * @example Usage
 * ```ts ignore
 * import { TelemetryService } from "@obs-utils/telemetry/server";
 * await using service = await TelemetryService.open({ siteDir: "./telemetry", timeZone: "UTC" });
 * await service.startRun({ runId: "night-1" });
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

  #store: SiteStore;
  #runs: Runs;
  #snapshot = new Snapshot();
  #clock: () => number;
  /** Checks each commit group against the run and the snapshot's limits. */
  #admission: Admission;
  #warn: (message: string) => void;
  /** The site stream's seq, mark, last seq on disk and night of its last line. */
  #site: SiteCounters = { seq: 0, mark: 0, lastWritten: 0, night: undefined };
  #listeners = new Fanout<ServiceMessage>();
  #writeListeners = new Fanout<WriteReport>();
  #queue: GroupQueue<EventOp> = new GroupQueue(
    (ops) => this.#commit(ops),
    (ops, err) => ops.forEach((op) => op.reject(err)),
  );
  /** The idempotency keys answered in the last 24 hours and those being answered. */
  #keys: IdempotencyKeys;
  /** Whether a key's answer too large to keep was warned about. */
  #warnedLargeKey = false;
  #closing = false;
  #closed: Promise<void> | undefined;
  #receiveTimes = new TimestampCache();
  #assignContext: AssignContext;
  /** Compression and retention of old files (docs/history.md), in the background. */
  #retention: RetentionScheduler;
  /** The safety verdict's judge, timer and latch file (docs/safety.md); set by `open`. */
  #safety!: SafetyWatch;
  #checkpoints: Checkpointer = new Checkpointer({
    take: () => this.#takeCheckpoint(),
    write: (record) => this.#store.savedSnapshot.write(record),
    control: (fn) => this.#queue.control(fn),
    night: () => this.#site.night,
    closing: () => this.#closing,
    warn: (message) => this.#warn(message),
  });

  private constructor(store: SiteStore, timeZone: string, options: ServiceOptions) {
    this.siteDir = store.siteDir;
    this.timeZone = timeZone;
    this.fsync = store.fsync;
    this.#store = store;
    this.#clock = options.clock ?? Date.now;
    this.#warn = options.onWarning ?? (() => {});
    this.#assignContext = {
      // The verdict is the site's: its events, the hub's audit events and the events of every
      // type it is judged from (critical for any profile) go to the site stream, in a run too,
      // so the site stream alone holds what decided it (docs/safety.md#replay,
      // docs/storage.md).
      siteTypes: new Set([
        ...(options.siteTypes ?? DEFAULT_SITE_TYPES),
        ...[...(options.types ?? NO_TYPES)].filter(([, spec]) => isCriticalAnywhere(spec))
          .map(([type]) => type),
        SAFETY_EVENT_TYPE,
        EXTERNAL_EVENT_TYPE,
        WAIVER_EVENT_TYPE,
      ]),
      nightOf: (epochMs) => store.nightOf(epochMs),
      receivedTs: (epochMs) => this.#receivedTs(epochMs),
    };
    this.#admission = new Admission(this.#snapshot, {
      maxTypes: options.maxTypes ?? DEFAULT_MAX_TYPES,
      maxSnapshotBytes: options.maxSnapshotBytes ?? DEFAULT_MAX_SNAPSHOT_BYTES,
    });
    this.#runs = new Runs(store, this.#clock, this.#warn);
    this.#keys = new IdempotencyKeys({
      clock: this.#clock,
      maxKeys: options.maxIdempotencyKeys,
      warn: this.#warn,
    });
    this.#retention = new RetentionScheduler({
      siteDir: store.siteDir,
      timeZone,
      compressAfter: options.compressAfter ?? DEFAULT_COMPRESS_AFTER,
      retain: options.retain ?? 0,
      now: this.#clock,
      openNights: () => store.openNights(),
      activeRunDir: () => this.#runs.active?.record.run_dir,
      warn: this.#warn,
      info: options.onInfo ?? (() => {}),
    });
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
    const store = await SiteStore.open({
      siteDir: options.siteDir,
      timeZone,
      fsync: options.fsync ?? DEFAULT_FSYNC,
      allowRunRoots: options.allowRunRoots,
      warn: options.onWarning ?? (() => {}),
    });
    const service = new TelemetryService(store, timeZone, options);
    try {
      // Without a checkpoint to stand on, take one before accepting anything: from then on a
      // restart only reads what follows it, even right after a rotation.
      const resumed = await service.#resume();
      if (resumed.readAfterCheckpoint !== undefined) {
        if (service.#checkpoints.dirty) service.#checkpoints.arm();
      } else await service.#checkpoints.now();
      // Before anything is written: the key lines of events that never reached a file go first.
      const keys = await store.openKeyJournal(service.#clock(), service.#keys.maxAgeMs);
      for (const { key, hash, at, ref } of keys) service.#keys.remember(key, { hash, at, ref });
      service.#safety = await openSafetyWatch(service.#safetyHost(options, resumed));
      // After the resume read the newest files: compressing them under it would only cost time.
      service.#retention.schedule();
      return service;
    } catch (err) {
      await store.close().catch(() => {});
      throw err;
    }
  }

  /**
   * Resumes seq counters, the snapshot and the active run from the site directory (see
   * {@linkcode resumeFromDisk}).
   *
   * @returns What the resume found; `readAfterCheckpoint` is set when it came from a checkpoint.
   */
  async #resume(): Promise<Resumed> {
    const resumed = await resumeFromDisk(this.#store, this.#runs, this.#snapshot, this.#warn);
    this.#site = resumed.site;
    this.#checkpoints.synced();
    if (resumed.readAfterCheckpoint !== undefined) {
      this.#checkpoints.dirty = resumed.readAfterCheckpoint > 0;
    }
    return resumed;
  }

  /** What the safety watch needs from the service (docs/safety.md). */
  #safetyHost(options: ServiceOptions, resumed: Resumed): Parameters<typeof openSafetyWatch>[0] {
    const now: StreamsNow = {
      siteFiles: resumed.siteFiles,
      activeRunDir: this.#runs.active?.record.run_dir,
    };
    return {
      cover: async () => {
        const run = this.#runs.active;
        return {
          site_seq: this.#site.lastWritten,
          run: run ? { dir: run.record.run_dir, seq: run.lastWritten } : null,
          runs_log: await runLogEnd(this.siteDir),
        };
      },
      linesAfter: (cover, types, each) => readLinesAfter(this.#store, now, cover, types, each),
      checkpointCover: resumed.checkpointCover,
      registry: options.types ?? NO_TYPES,
      file: this.#store.safetyLatch,
      hubFile: this.#store.safetyHub,
      wall: this.#clock,
      mono: options.monotonicClock ?? (() => performance.now()),
      line: (type) => this.#snapshot.line(type),
      control: (fn) => this.#queue.control(fn),
      push: (op) => this.#queue.push(op),
      warn: this.#warn,
    };
  }

  /** The types registry the service judges safety by (`--types`). */
  get types(): TypesRegistry {
    return this.#safety.registry;
  }

  /**
   * A profile's safety verdict judged now: the `GET /safety` document (docs/safety.md).
   *
   * @param profile The profile (docs/safety.md#profiles); `site` by default.
   * @returns The verdict, its reasons, its SafetyEvents, its waivers and each critical type's
   *   latch.
   * @throws {SafetyHubInputError} For a profile the types file does not name.
   *
   * @example Usage
   * ```ts ignore
   * if (!service.safety().safe) console.log(service.safety().reasons.join("; "));
   * ```
   */
  safety(profile: string = SITE_PROFILE): SafetyVerdict {
    const verdict = this.#safety.verdict(profile);
    if (verdict === undefined) {
      throw new SafetyHubInputError(
        `there is no safety profile ${JSON.stringify(profile.slice(0, 80))}; the profiles are ${
          this.#safety.profiles.join(", ")
        } (critical_for in the types file)`,
      );
    }
    return verdict;
  }

  /** The safety profiles: `site` first, then by name (docs/safety.md#profiles). */
  get safetyProfiles(): readonly string[] {
    return this.#safety.profiles;
  }

  /**
   * The safety hub (docs/safety.md#safety-events): external events other programs set to hold
   * the site (or one profile) shut, and waivers over dead sensors. Each change is saved before
   * the returned promise resolves.
   *
   * @example Usage
   * ```ts ignore
   * await service.safetyHub.setExternal(events, "site", { via: "http", peer: "192.0.2.7" });
   * ```
   */
  get safetyHub(): SafetyHubApi {
    const watch = this.#safety;
    return {
      setExternal: (events, profile, actor) => watch.setExternal(events, profile, actor),
      clearExternal: (ids, profile, actor) => watch.clearExternal(ids, profile, actor),
      waive: (type, forS, reason, actor) => watch.waive(type, forS, reason, actor),
      unwaive: (type, actor) => watch.unwaive(type, actor),
    };
  }

  /** Waivers in force now (`telemetry_safety_waivers`). */
  get safetyWaivers(): number {
    return this.#safety.waiverCount;
  }

  /**
   * Registers a listener for each change of the safety verdict (`kind: "safety"`) and of a
   * critical type's state (`kind: "type"`, with `previous`). It is called off the ingest path;
   * an exception in it is ignored.
   *
   * @param listener Called with each change.
   * @param options `replayOpening`: also hand it the changes the service found when it started
   *   (its verdict then against the one saved at the last stop), unless a later change has
   *   superseded them (docs/safety.md#notifications).
   * @returns A function that unsubscribes.
   *
   * @example Usage
   * ```ts ignore
   * const stop = service.onSafetyChange((change) => console.log(change.kind, change.reasons));
   * stop();
   * ```
   */
  onSafetyChange(
    listener: (change: SafetyChange) => void,
    options: { replayOpening?: boolean } = {},
  ): () => void {
    return this.#safety.onChange(listener, options);
  }

  /** Changes of the safety verdict since start (`telemetry_safety_changes_total`). */
  get safetyChanges(): number {
    return this.#safety.changes;
  }

  /**
   * The site's id, the `site_id` of its `.site.json` (docs/storage.md), kept for the life of the
   * site directory: `GET /ready` answers it, so a program beside the service (the publisher,
   * docs/publish.md) names the site by it.
   */
  get siteId(): string {
    return this.#store.identity.site_id;
  }

  /** The active run's record (with a live `events` count), or `undefined`. */
  get run(): RunRecord | undefined {
    const active = this.#runs.active;
    return active ? { ...active.record } : undefined;
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
   * Validates event requests (docs/http-api.md) and records them in order, all or nothing.
   *
   * @param items Parsed request bodies: `{type, data, meta?, ts?, store_permanently?, make_current?}`.
   * @param options `batch: true` names the 0-based index of a bad item in the error even when
   *   there is only one item (`POST /events`); by default only lists of two or more do.
   * @returns One {@linkcode CommittedEvent} per item, in order.
   * @throws {InvalidRequestError} Naming the first bad item (nothing is recorded).
   * @throws {TypeLimitError} When a new type would pass `maxTypes`.
   * @throws {ShuttingDownError} When closing.
   * @throws {WriteError} When the disk refused the write (nothing was stored).
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
    if (this.#closing) return Promise.reject(new ShuttingDownError());
    let commands: EventCommand[];
    try {
      commands = parseEvents(items, options.batch ?? items.length > 1);
    } catch (err) {
      // A Promise-returning method reports validation errors as a rejection, never a throw.
      return Promise.reject(err);
    }
    return this.submit(commands);
  }

  /**
   * Records validated event commands in order, all or nothing.
   *
   * @param commands Commands from `parseEvents` (the HTTP layer's request parsing).
   * @returns One {@linkcode CommittedEvent} per command, in order.
   * @throws {TypeLimitError} When a new type would pass `maxTypes`.
   * @throws {InvalidRequestError} When `meta.run_id` does not name the active run.
   * @throws {ShuttingDownError} When closing.
   * @throws {WriteError} When the disk refused the write (nothing was stored).
   *
   * @example Usage
   * ```ts ignore
   * const events = await service.submit(commands);
   * ```
   */
  submit(commands: EventCommand[]): Promise<CommittedEvent[]> {
    if (this.#closing) return Promise.reject(new ShuttingDownError());
    if (commands.length === 0) return Promise.resolve([]);
    const receivedAt = this.#clock();
    return new Promise((resolve, reject) => {
      this.#queue.push({ items: commands, receivedAt, resolve, reject });
    });
  }

  /**
   * Records the events of a request sent with an `Idempotency-Key` (docs/http-api.md) once: a
   * key answered in the last 24 hours is answered again with the same lines and nothing is
   * stored; the key with another request is refused; while the key's first request is being
   * answered, this waits for that answer. The key is kept with the events, in the same group write
   * (docs/storage.md, "Idempotency keys"), so it survives every restart its events survive. A
   * request that is refused or fails leaves no key behind.
   *
   * @param idempotency The key, and a hash of the request (its route and body) that tells a
   *   retry from another request; `minimal: true` keeps only the minimal answer of the request
   *   (`Prefer: return=minimal` of `POST /events`, docs/http-api.md), not its lines.
   * @param parse Validates the request into commands; called only when the key is new.
   * @returns The answered lines (unless the first answer was the minimal one), the minimal
   *   answer, and whether they are a replay of the first answer.
   * @throws {IdempotencyConflictError} When the key was answered for another request.
   * @throws {InvalidRequestError} From `parse`, or when `meta.run_id` does not name the active run.
   * @throws {TypeLimitError} When a new type would pass `maxTypes`.
   * @throws {ShuttingDownError} When closing.
   * @throws {WriteError} When the disk refused the write (nothing was stored).
   * @throws {StorageError} When a key's first answer cannot be read back.
   *
   * @example Usage
   * ```ts ignore
   * const { lines, replayed } = await service.submitOnce(
   *   { key: crypto.randomUUID(), hash: "..." },
   *   () => parseEvents(items, true),
   * );
   * ```
   */
  async submitOnce(
    idempotency: { key: string; hash: string; minimal?: boolean | undefined },
    parse: () => EventCommand[],
  ): Promise<KeyedAnswer> {
    const { key, hash } = idempotency;
    while (true) {
      if (this.#closing) throw new ShuttingDownError();
      const claim = this.#keys.claim(key, hash);
      if (claim.kind === "wait") {
        await claim.settled;
        continue;
      }
      if (claim.kind === "conflict") throw new IdempotencyConflictError(key, claim.entry.at);
      if (claim.kind === "replay") {
        // In the queue, so that no new generation of the journal begins under the read.
        const kept = await this.#control(() => this.#store.keys.read(claim.entry.ref, key));
        const summary = kept === undefined
          ? undefined
          : kept.lines === undefined
          ? kept.minimal
          : summaryOfLines(kept.lines);
        if (kept !== undefined && summary !== undefined) {
          return { lines: kept.lines, summary, replayed: true };
        }
        throw new StorageError(
          `The first answer of Idempotency-Key ${
            JSON.stringify(key.slice(0, 60))
          } cannot be read back from the site directory's key journal (deleted or cut since); its events were stored then, so nothing was stored again`,
        );
      }
      try {
        const commands = parse();
        const receivedAt = this.#clock();
        const events = await new Promise<CommittedEvent[]>((resolve, reject) => {
          this.#queue.push({ items: commands, receivedAt, resolve, reject, key: idempotency });
        });
        return {
          lines: idempotency.minimal ? undefined : events.map((event) => event.line),
          summary: summaryOf(events),
          replayed: false,
        };
      } finally {
        this.#keys.release(key);
      }
    }
  }

  /**
   * Starts a run (docs/http-api.md). Starting the run that is already active is an idempotent retry.
   *
   * @param command What to start; every field is optional.
   * @returns The run record, and `created: false` when the same run was already active.
   * @throws {InvalidRequestError} For a bad id or directory.
   * @throws {RunConflictError} When another run is active.
   *
   * @example Usage
   * ```ts ignore
   * const { run } = await service.startRun({ runId: "m31-1", meta: { target: "M31" } });
   * ```
   */
  startRun(command: RunStartCommand = {}): Promise<RunStart> {
    return this.#control(async () => {
      // A typed command can still come from JavaScript: the same rules as a request body.
      const checked = parseRunStart({
        run_id: command.runId,
        run_dir: command.runDir,
        meta: command.meta,
      });
      const started = await this.#runs.start(checked);
      // Restores lay the run file after the site stream: true only from a checkpoint on.
      if (started.created) await this.#checkpoints.now();
      if (started.created) this.#listeners.emit({ kind: "run", run: started.run, active: true });
      return started;
    });
  }

  /**
   * Stops the active run, after every event received before this call has been written.
   *
   * @returns The final run record, with `stopped_at` and `events`.
   * @throws {NoActiveRunError} When no run is active.
   *
   * @example Usage
   * ```ts ignore
   * const run = await service.stopRun();
   * console.log(run.events);
   * ```
   */
  stopRun(): Promise<RunRecord> {
    return this.#control(async () => {
      const record = await this.#runs.stop();
      await this.#checkpoints.now();
      this.#listeners.emit({ kind: "run", run: record, active: false });
      return record;
    });
  }

  /**
   * Forgets a type (docs/http-api.md): removes it from the snapshot, so it leaves `GET /current`,
   * `telemetry_value` and the dashboard, until a new event of it arrives. It is durable before
   * this resolves: a checkpoint without the type is written (after any older one), and a
   * restart, clean or after a crash, restores from it plus only the lines written after it.
   * Nothing is removed from the stream files.
   *
   * @param type The event type.
   * @returns `true` when the type was forgotten, `false` when the snapshot had no such type.
   * @throws {WriteError} When the checkpoint could not be written (the type stays).
   * @throws {ShuttingDownError} When closing.
   *
   * @example Usage
   * ```ts ignore
   * if (!await service.forget("old-sensor")) console.log("no such type");
   * ```
   */
  forget(type: string): Promise<boolean> {
    return this.#control(async () => {
      const putBack = this.#snapshot.forget(type);
      if (!putBack) return false;
      try {
        await this.#checkpoints.durable();
      } catch (err) {
        putBack();
        throw toWriteError(err);
      }
      // Live viewers drop the type too (docs/http-api.md: it leaves the dashboard).
      this.#listeners.emit({ kind: "forget", type });
      if (this.#safety.critical.has(type)) await this.#safety.afterCommit();
      return true;
    });
  }

  /**
   * The snapshot as the `GET /current` body: an object keyed by type, built from the stored
   * lines without re-serialising them.
   *
   * @returns A JSON object text.
   */
  currentJson(): string {
    return this.#snapshot.json();
  }

  /**
   * The snapshot as the `GET /current` body, streamed in chunks as it is at the time of the call,
   * so that a snapshot of any size is answered without being built as one string.
   *
   * @param options Optional type filter, and text around the JSON object.
   * @returns The body.
   */
  currentBody(options: SnapshotBodyOptions = {}): ReadableStream<Uint8Array> {
    return this.#snapshot.body(options);
  }

  /**
   * The latest envelope line of one type.
   *
   * @param type The event type.
   * @returns The line, or `undefined` when no event of that type was recorded.
   */
  currentLine(type: string): string | undefined {
    return this.#snapshot.line(type);
  }

  /**
   * The latest `data` of each type, for gauges. Read-only view.
   *
   * @returns Pairs of type and data.
   */
  currentData(): Iterable<[string, JsonObject]> {
    return this.#snapshot.data();
  }

  /**
   * Registers a listener for accepted events and run changes. Listeners run synchronously
   * after each commit and must not block; an exception in one is ignored.
   *
   * @param listener Called with each message.
   * @returns A function that unsubscribes.
   */
  subscribe(listener: (message: ServiceMessage) => void): () => void {
    return this.#listeners.add(listener);
  }

  /**
   * Registers a listener for the outcome of each group commit (for metrics). It runs
   * synchronously and must not block; an exception in one is ignored.
   *
   * @param listener Called once per group commit.
   * @returns A function that unsubscribes.
   */
  watchWrites(listener: (report: WriteReport) => void): () => void {
    return this.#writeListeners.add(listener);
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
    // A compression stops between two chunks; its temporary file is removed, the original stays.
    await this.#retention.close();
    await this.#queue.idle();
    await this.#safety.close();
    let failure: unknown;
    const run = this.#runs.active;
    try {
      await this.#settleSiteMark();
      if (run) await this.#runs.settleMark(run);
    } catch (err) {
      failure = err;
    }
    this.#checkpoints.stop();
    // The queue is idle: this checkpoint covers everything, so the next start reads nothing.
    // Losing it only costs that start a longer read; the close itself must go on.
    await this.#checkpoints.now();
    this.#listeners.clear();
    this.#writeListeners.clear();
    try {
      await this.#store.close();
    } catch (err) {
      failure ??= err;
    }
    if (failure !== undefined) throw failure;
  }

  /**
   * On close, records the exact site counter when seqs above the last line were handed out (or
   * a reservation exists), so a restart neither reuses them nor skips a reservation's worth.
   */
  async #settleSiteMark(): Promise<void> {
    const mark = settledMark(this.#site.seq, this.#site.lastWritten, this.#site.mark);
    if (mark !== undefined) {
      await this.#store.writeSeqMark(this.siteDir, mark);
      this.#site.mark = mark;
    }
  }

  /** After a commit: notes where the site stream ends and schedules a checkpoint. */
  #committed(group: Assigned, bytes: number): void {
    if (group.siteNight !== undefined) this.#site.night = group.siteNight;
    this.#checkpoints.committed(bytes);
  }

  /**
   * What a checkpoint holds now: the snapshot and where the site stream and the active run end.
   * Only the site cursor's size may need a stat; the rest is in memory.
   */
  async #takeCheckpoint(): Promise<() => unknown> {
    const run = this.#runs.active;
    const night = this.#site.night;
    const site = night !== undefined && this.#site.lastWritten > 0
      ? {
        file: siteFileName(night),
        offset: await this.#store.siteFileEnd(night),
        seq: this.#site.lastWritten,
      }
      : null;
    const taken = {
      siteSeq: this.#site.seq,
      runDir: run?.record.run_dir ?? null,
      runSeq: run?.lastSeq ?? 0,
      site,
      run: run
        ? { offset: run.writer.size, seq: run.lastWritten, events: run.record.events }
        : null,
      currentJson: this.#snapshot.json(),
    };
    return () => checkpointRecord(taken);
  }

  #control<T>(fn: () => Promise<T>): Promise<T> {
    if (this.#closing) return Promise.reject(new ShuttingDownError());
    return this.#queue.control(fn);
  }

  /** Writes a group of event requests; see the class doc for the guarantees. */
  async #commit(ops: EventOp[]): Promise<void> {
    const run = this.#runs.active;
    this.#admission.begin(run?.record.run_id);
    const accepted = this.#admission.admit(ops);
    if (accepted.length === 0) return;

    const group = assignGroup(
      accepted,
      run,
      { seq: this.#site.seq, written: this.#site.lastWritten, unwritten: 0 },
      this.#assignContext,
    );
    // Judged event by event before the group is written; a group that turns a critical type
    // unsafe is written only after the latch says so (docs/safety.md#across-restarts). The
    // watch's own opening group (the `telemetry.safety` event of a change found at start-up) is
    // committed while the watch is still opening: it judges no critical type.
    const watch = this.#safety as SafetyWatch | undefined;
    const safety = watch?.changedBy(accepted, group.results) ?? "same";
    if (safety === "unsafe") await this.#safety.beforeWrite();
    const keyed = this.#keyLines(accepted, group, run);
    const started = performance.now();
    let bytes: number;
    try {
      bytes = await this.#write(group, run, keyed);
    } catch (err) {
      const failure = toWriteError(err);
      this.#writeListeners.emit({ ok: false, error: failure });
      // An alarm the disk refused still latches the site: it was reported all the same.
      if (safety !== "same") await this.#safety.afterCommit();
      for (const op of accepted) op.reject(failure);
      return;
    }
    const seconds = (performance.now() - started) / 1000;
    // A rotation makes the night before the current one older: retention looks again.
    if (this.#store.hasOldNights && await this.#store.retireOldNights()) {
      this.#retention.schedule();
    }

    this.#site.seq = group.site.seq;
    this.#site.lastWritten = group.site.written;
    if (run && group.run) {
      run.lastSeq = group.run.seq;
      run.lastWritten = group.run.written;
      run.record.events += group.pending.get(run.writer)?.length ?? 0;
    }
    this.#committed(group, bytes);
    watch?.written(group.copies.length);
    if (keyed) this.#rememberKeys(keyed);
    // A group that changes the safety verdict is answered once the latch is saved: an answered
    // event is never older than the latch a restart finds (docs/safety.md).
    const safetyChanged = safety !== "same";
    for (let i = 0; i < accepted.length; i++) {
      const op = accepted[i]!;
      const out = group.results[i]!;
      for (let j = 0; j < out.length; j++) {
        const event = out[j]!;
        const item = op.items[j]!;
        if (item.makeCurrent) {
          this.#snapshot.set(
            event.type,
            event.line,
            item.ts ?? this.#receivedTs(op.receivedAt),
            event.data,
          );
        }
        this.#listeners.emit({ kind: "telemetry", event });
      }
      if (!safetyChanged) op.resolve(out);
    }
    // After the snapshot took the group: metrics tell current types from the rest (docs/http-api.md).
    this.#writeListeners.emit({ ok: true, seconds, bytes, copies: group.copies });
    if (!safetyChanged) return;
    // Before the next group is written too, so a crash never finds a latch older than the stream.
    await this.#safety.afterCommit();
    for (let i = 0; i < accepted.length; i++) accepted[i]!.resolve(group.results[i]!);
  }

  /**
   * The key lines of a group's requests sent with an `Idempotency-Key` (docs/storage.md,
   * "Idempotency keys"): each request's answered lines and where its last stored event goes.
   *
   * @returns The lines, or `undefined` when no request of the group has a key.
   */
  #keyLines(
    accepted: EventOp[],
    group: Assigned,
    run: ActiveRun | undefined,
  ): KeyedLines | undefined {
    let keyed: KeyedLines | undefined;
    for (let i = 0; i < accepted.length; i++) {
      const op = accepted[i]!;
      if (op.key === undefined) continue;
      keyed ??= { at: this.#clock(), ops: [], texts: [], sizes: [], bytes: 0, refs: [] };
      const out = group.results[i]!;
      let last = -1;
      for (let j = 0; j < out.length; j++) if (op.items[j]!.storePermanently) last = j;
      let stored: KeyStored | null = null;
      if (last >= 0) {
        const event = out[last]!;
        stored = event.stream === "run"
          ? { run: run!.record.run_dir, seq: event.seq }
          : { night: this.#store.nightOf(op.receivedAt), seq: event.seq };
      }
      // A request that asked for the minimal answer is answered so again: its lines are not kept.
      const text = encodeKeyRecord(
        op.key.minimal
          ? {
            key: op.key.key,
            hash: op.key.hash,
            at: keyed.at,
            stored,
            lines: null,
            minimal: summaryOf(out),
          }
          : {
            key: op.key.key,
            hash: op.key.hash,
            at: keyed.at,
            stored,
            lines: out.map((event) => event.line),
          },
      );
      const size = utf8Length(text);
      if (size > MAX_LINE_BYTES) {
        // A start would take such a line for damage: the request is stored without its key.
        if (!this.#warnedLargeKey) {
          this.#warn(
            `An answer of ${size} bytes is too large to keep for its Idempotency-Key (at most ${MAX_LINE_BYTES}); its retries would be stored again: keep --max-body at 4 MiB or less (docs/storage.md).`,
          );
        }
        this.#warnedLargeKey = true;
        continue;
      }
      keyed.ops.push(op);
      keyed.texts.push(text);
      keyed.sizes.push(size);
      keyed.bytes += size + 1;
    }
    return keyed && keyed.ops.length > 0 ? keyed : undefined;
  }

  /** After the group was written: its keys are answered from their key lines from now on. */
  #rememberKeys(keyed: KeyedLines): void {
    for (let i = 0; i < keyed.ops.length; i++) {
      const { key, hash } = keyed.ops[i]!.key!;
      this.#keys.remember(key, { hash, at: keyed.at, ref: keyed.refs[i]! });
    }
  }

  /**
   * Reserves unwritten seqs on disk, then appends the group (see {@linkcode SiteStore.append}),
   * its key lines first.
   *
   * @returns The bytes appended, without the key lines.
   */
  async #write(
    group: Assigned,
    run: ActiveRun | undefined,
    keyed: KeyedLines | undefined,
  ): Promise<number> {
    // Seqs that reach no file must still never be handed out again (docs/storage.md): reserve a
    // block above them on disk before anyone is told about them.
    const siteMark = reservedMark(group.site.unwritten, this.#site.mark);
    if (siteMark !== undefined) {
      await this.#store.writeSeqMark(this.siteDir, siteMark);
      this.#site.mark = siteMark;
    }
    const runMark = run && group.run ? reservedMark(group.run.unwritten, run.mark) : undefined;
    if (run && runMark !== undefined) {
      await this.#store.writeSeqMark(run.record.run_dir, runMark);
      run.mark = runMark;
    }
    if (keyed === undefined) return await this.#store.append(group.pending);
    const journal = this.#store.keys;
    const dropped = await journal.rotateIfDue(keyed.at, this.#keys.maxAgeMs);
    if (dropped !== undefined) this.#keys.forgetGeneration(dropped);
    // The key lines are written before the events, in the same group: a failure rolls both back,
    // and a crash between the two writes leaves key lines that the next start drops.
    const lines = new Map<NdjsonWriter | string, readonly string[]>([
      [await journal.writer(), keyed.texts],
    ]);
    for (const [target, list] of group.pending) lines.set(target, list);
    const bytes = await this.#store.append(lines);
    keyed.refs = journal.placed(keyed.sizes, keyed.at);
    return bytes - keyed.bytes;
  }

  /** The `ts` of a receive time (`formatTimestamp`, the minute's text reused). */
  #receivedTs(ms: number): string {
    return this.#receiveTimes.format(ms);
  }
}

/** The key lines of a commit group (see `TelemetryService.#keyLines`). */
interface KeyedLines {
  /** When the group was answered. */
  at: number;
  /** The requests with a key, in order. */
  ops: EventOp[];
  /** Their key lines. */
  texts: string[];
  /** The lines' sizes in bytes. */
  sizes: number[];
  /** Bytes of all the lines with their `\n`. */
  bytes: number;
  /** Where they were written, once they were. */
  refs: KeyRef[];
}

/**
 * The minimal answer of a request's events (docs/http-api.md, `Prefer: return=minimal`): their
 * count and the seqs of the first and the last, in the stream they went to (one stream per
 * request, consecutive seqs).
 *
 * @param events The events of one request, as answered.
 * @returns `{accepted, first_seq, last_seq}`; the seqs are `null` when there are no events.
 *
 * @example Usage
 * ```ts ignore
 * const { accepted, first_seq, last_seq } = summaryOf(await service.submit(commands));
 * ```
 */
export function summaryOf(events: readonly CommittedEvent[]): BatchSummary {
  const n = events.length;
  return n === 0
    ? { accepted: 0, first_seq: null, last_seq: null }
    : { accepted: n, first_seq: events[0]!.seq, last_seq: events[n - 1]!.seq };
}

/**
 * The minimal answer of a key's first answer, read from its lines: the same seqs it claimed, or
 * `undefined` when a line has none (the key line is not one the service wrote).
 */
function summaryOfLines(lines: readonly string[]): BatchSummary | undefined {
  const n = lines.length;
  if (n === 0) return { accepted: 0, first_seq: null, last_seq: null };
  const first = readSeqAndType(lines[0]!)?.seq, last = readSeqAndType(lines[n - 1]!)?.seq;
  return first === undefined || last === undefined
    ? undefined
    : { accepted: n, first_seq: first, last_seq: last };
}
