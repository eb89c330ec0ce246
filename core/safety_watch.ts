/**
 * The service's side of the safety verdicts (docs/safety.md): when {@linkcode SafetyJudge} judges
 * (after each commit that touched a critical type, on every question, and on a timer that wakes
 * when a verdict can next change by time alone), saving the latch in the site directory (before
 * a commit group that turns a critical type unsafe is written, and after every change), judging
 * again at start-up the stored lines written after the saved latch, recording each change of a
 * profile's verdict as a `telemetry.safety` event, keeping the safety hub's external events and
 * waivers (`safety_hub.ts`), and telling listeners.
 *
 * @example Usage
 * ```ts ignore
 * const watch = await SafetyWatch.open(options);
 * console.log(watch.verdict().safe);
 * await watch.close();
 * ```
 *
 * @module
 */

import type { LatestEvent } from "./freshness.ts";
import {
  type Judgement,
  type LatchCover,
  type Observed,
  parseSavedLatch,
  type SafetyChange,
  SafetyJudge,
  type SafetyVerdict,
  type SavedLatch,
  unsafeWhenStored,
  waiverActive,
} from "./safety.ts";
import { isCriticalAnywhere, SITE_PROFILE, type TypesRegistry } from "./types_registry.ts";
import type { SafetyLatchFile } from "../store/safety_latch.ts";
import { SafetyHub } from "./safety_hub.ts";
import {
  checkWaiver,
  type HubActor,
  type SafetyEvent,
  SafetyHubInputError,
  type Waiver,
} from "./safety_events.ts";
import { SAFETY_LATCH_FILE } from "../store/layout.ts";
import type { EventOp } from "./assign.ts";
import type { CommittedEvent } from "./service_types.ts";

/** The type of the events that record each change of the verdict (docs/safety.md). */
export const SAFETY_EVENT_TYPE = "telemetry.safety";

/**
 * The longest the timer sleeps: a wall clock step can make a type stale sooner than the timer
 * planned, and is noticed within this time.
 */
const MAX_SLEEP_MS = 5_000;

/**
 * Events written since the latch was last saved after which it is saved again with the streams'
 * new ends (one small write per this many events): a start after a crash judges again at most
 * about this many lines (docs/safety.md#across-restarts).
 */
export const LATCH_REFRESH_EVENTS = 100_000;

/** What the watch needs from the service. */
export interface SafetyWatchOptions {
  /** The types registry; its critical types decide. */
  registry: TypesRegistry;
  /** The latch file of the site directory. */
  file: SafetyLatchFile;
  /** The safety hub's file: external events and waivers (docs/safety.md#safety-events). */
  hubFile: SafetyLatchFile;
  /** The service clock (wall time, epoch ms). */
  wall: () => number;
  /** A monotonic clock in ms: latches are counted on it. */
  mono: () => number;
  /** The snapshot's line of a type. */
  line: (type: string) => string | undefined;
  /** Runs work in the service's queue, between commit groups. */
  control: (fn: () => Promise<void>) => Promise<void>;
  /** Queues events for the next commit group (the `telemetry.safety` events). */
  push: (op: EventOp) => void;
  /** Told when the latch file cannot be written, and what the start-up replay found. */
  warn: (message: string) => void;
  /** Where the stored streams end now; called in the service's queue, between commit groups. */
  cover: () => Promise<LatchCover>;
  /**
   * Hands each stored line of the given types written after a cover to `each`
   * (`latch_replay.ts`).
   *
   * @returns Undefined when it did, else why it cannot tell which lines came after the cover.
   */
  linesAfter: (
    cover: LatchCover,
    types: ReadonlySet<string>,
    each: (line: string) => void,
  ) => Promise<string | undefined>;
  /**
   * What the checkpoint the snapshot was restored from covers: all a latch file written before
   * 0.7 can be said to cover (it was saved after each group, before the next checkpoint).
   */
  checkpointCover: LatchCover | undefined;
}

/**
 * Judges the safety verdict as time passes and events arrive, and keeps its latch on disk.
 *
 * @example Usage
 * ```ts ignore
 * const watch = await SafetyWatch.open(options);
 * const stop = watch.onChange((change) => console.log(change.kind, change.reasons));
 * stop();
 * ```
 */
export class SafetyWatch {
  #options: SafetyWatchOptions;
  #latest: (type: string) => LatestEvent | undefined;
  #judge: SafetyJudge;
  #hub!: SafetyHub;
  #critical: ReadonlySet<string>;
  #listeners = new Set<(change: SafetyChange) => void>();
  #timer: ReturnType<typeof setTimeout> | undefined;
  #dueMono = Infinity;
  #dirty = false;
  #saving: Promise<void> = Promise.resolve();
  #failing = false;
  #expireFailing = false;
  #closed = false;
  /** Events written since the latch was last saved, and whether a save for them is queued. */
  #uncovered = 0;
  #refreshing = false;
  /**
   * The changes the opening judgement found against the saved latch (a site stopped while safe
   * and started after its critical type went stale is unsafe now): nobody listened yet, so they
   * are kept for listeners that ask for them, until a later judgement changes something.
   */
  #opening: readonly SafetyChange[] = [];
  /** Changes of the verdict since start (`telemetry_safety_changes_total`). */
  changes = 0;

  private constructor(options: SafetyWatchOptions, judge: SafetyJudge) {
    this.#options = options;
    this.#judge = judge;
    this.#latest = (type) => {
      const line = options.line(type);
      if (line === undefined) return undefined;
      const { ts, data } = JSON.parse(line) as LatestEvent;
      return { ts, data };
    };
    this.#critical = new Set(
      [...options.registry].filter(([, spec]) => isCriticalAnywhere(spec)).map(([type]) => type),
    );
  }

  /**
   * Reads the saved latch, judges again the stored lines written after it, judges once and saves
   * the result.
   *
   * @param options What the watch needs.
   * @returns The running watch; {@linkcode SafetyWatch.close} stops its timer.
   */
  static async open(options: SafetyWatchOptions): Promise<SafetyWatch> {
    const saved = parseSavedLatch(await options.file.read());
    const restored = await judgeLinesAfter(saved, options);
    const judge = new SafetyJudge(options.registry, {
      wallMs: options.wall(),
      monoMs: options.mono(),
      restored,
    });
    const { hub, opened } = await SafetyHub.open({
      file: options.hubFile,
      wall: options.wall,
      mono: options.mono,
      push: options.push,
      warn: options.warn,
    });
    judge.setHub(hub.input());
    const watch = new SafetyWatch(options, judge);
    watch.#hub = hub;
    watch.#opening = [...opened, ...watch.#judgeNow().changes];
    await watch.save();
    return watch;
  }

  /** The types registry judged by. */
  get registry(): TypesRegistry {
    return this.#options.registry;
  }

  /** The profiles judged: `site` first, then by name (docs/safety.md#profiles). */
  get profiles(): readonly string[] {
    return this.#judge.profiles;
  }

  /**
   * Judges the critical types a commit group makes current, event by event and cheaply (the
   * ingest path, docs/safety.md), before the group is written: an alarm followed by a clear in
   * the same group still latches.
   *
   * @param ops The accepted requests of the group.
   * @param results Their events with seqs assigned, per request and item.
   * @returns `unsafe` when the group turns a critical type unsafe (save the latch with
   *   {@linkcode SafetyWatch.beforeWrite} before writing it), `changed` when a state changed,
   *   `same` otherwise; unless `same`, {@linkcode SafetyWatch.afterCommit} follows the write.
   */
  changedBy(
    ops: readonly EventOp[],
    results: readonly (readonly CommittedEvent[])[],
  ): Observed {
    if (this.#critical.size === 0) return "same";
    let observed: Observed = "same", wall = 0, mono = 0;
    for (let i = 0; i < ops.length; i++) {
      const op = ops[i]!;
      for (let j = 0; j < op.items.length; j++) {
        const item = op.items[j]!;
        if (!item.makeCurrent || !this.#critical.has(item.type)) continue;
        if (wall === 0) [wall, mono] = [this.#options.wall(), this.#options.mono()];
        // Without a ts the event was stamped with its receive time: no date to parse.
        const tsMs = item.ts === undefined ? op.receivedAt : Date.parse(item.ts);
        const one = this.#judge.observe(item.type, tsMs, results[i]![j]!.data, wall, mono);
        if (one === "unsafe" || (one === "changed" && observed === "same")) observed = one;
      }
    }
    return observed;
  }

  /**
   * Saves the latch before a commit group that turns a critical type unsafe is written
   * (docs/safety.md#across-restarts): no crash can leave such a group on disk with a latch file
   * that does not know it. A save that fails is warned, and the group is written all the same:
   * the next start judges again the lines written after the latch file it finds.
   */
  async beforeWrite(): Promise<void> {
    this.#dirty = true;
    await this.save();
  }

  /**
   * Counts the events a commit group wrote; after {@linkcode LATCH_REFRESH_EVENTS} of them the
   * latch is saved again (in the queue, after this group) with where the streams end now.
   *
   * @param events Events the group wrote.
   */
  written(events: number): void {
    if (this.#critical.size === 0) return;
    this.#uncovered += events;
    if (this.#uncovered < LATCH_REFRESH_EVENTS || this.#refreshing || this.#closed) return;
    this.#refreshing = true;
    this.#options.control(async () => {
      this.#refreshing = false;
      this.#dirty = true;
      await this.save();
    }).catch(() => {
      // closing: close() saves a last time
      this.#refreshing = false;
    });
  }

  /** The critical types of the registry. */
  get critical(): ReadonlySet<string> {
    return this.#critical;
  }

  /**
   * A profile's verdict judged now; a change found is recorded, told and saved (in the queue).
   *
   * @param profile The profile (default `site`).
   * @returns The `GET /safety` document, or undefined for a profile the types file does not name.
   */
  verdict(profile: string = SITE_PROFILE): SafetyVerdict | undefined {
    const judged = this.#judgeNow();
    if (this.#dirty && !this.#closed) {
      this.#options.control(() => this.save()).catch(() => {});
    }
    return judged.verdicts.get(profile);
  }

  /**
   * Adds external events, or replaces those with the same `Id` (docs/safety.md#safety-events):
   * saved and fdatasynced, judged, and answered once the audit events are written.
   *
   * @param events The events, checked (`checkSafetyEvents`).
   * @param profile The profile they hold shut; `site` holds every profile.
   * @param actor Who set them.
   * @throws {SafetyHubInputError} For an unknown profile or more than 256 external events.
   */
  async setExternal(
    events: readonly SafetyEvent[],
    profile: string,
    actor: HubActor,
  ): Promise<void> {
    const scope = this.#scope(profile);
    await this.#change(() => this.#hub.set(events, scope, actor));
  }

  /**
   * Removes external events by `Id`; never an internal one (docs/safety.md#safety-events).
   *
   * @param ids The `Id`s.
   * @param profile The profile asking (its own events and those of every profile).
   * @param actor Who cleared them.
   * @throws {SafetyHubInputError} When an `Id` is not an external event the profile sees.
   */
  async clearExternal(ids: readonly string[], profile: string, actor: HubActor): Promise<void> {
    const scope = this.#scope(profile);
    await this.#change(() => this.#hub.clear(ids, scope, actor));
  }

  /**
   * Stops judging a critical type for `forS` seconds (docs/safety.md#waivers).
   *
   * @param type A type critical for some profile.
   * @param forS 60 to 43,200 seconds.
   * @param reason Why.
   * @param actor Who.
   * @returns The waiver.
   * @throws {SafetyHubInputError} For a type that is not critical, or a length or reason out of
   *   bounds.
   */
  async waive(type: string, forS: number, reason: string, actor: HubActor): Promise<Waiver> {
    checkWaiver(forS, reason);
    if (!this.#critical.has(type)) {
      throw new SafetyHubInputError(
        `${
          JSON.stringify(type.slice(0, 200))
        } is not a critical type, so there is nothing to waive; the critical types are ${
          [...this.#critical].join(", ") || "none (--types)"
        }`,
      );
    }
    let waiver: Waiver | undefined;
    await this.#change(async () => {
      const done = await this.#hub.waive(type, forS, reason, actor);
      waiver = done.waiver;
      return done;
    });
    return waiver!;
  }

  /**
   * Ends a type's waiver early (docs/safety.md#waivers).
   *
   * @param type The type.
   * @param actor Who.
   * @throws {SafetyHubInputError} When it has no waiver in force.
   */
  async unwaive(type: string, actor: HubActor): Promise<void> {
    await this.#change(() => this.#hub.unwaive(type, actor));
  }

  /** Waivers in force now (`telemetry_safety_waivers`). */
  get waiverCount(): number {
    const wall = this.#options.wall(), mono = this.#options.mono();
    let n = 0;
    for (const w of this.#hub.waivers.values()) if (waiverActive(w, wall, mono)) n++;
    return n;
  }

  /** The hub's scope of a profile: null (every profile) for `site`. */
  #scope(profile: string): string | null {
    if (!this.#judge.profiles.includes(profile)) {
      throw new SafetyHubInputError(
        `there is no safety profile ${JSON.stringify(profile.slice(0, 80))}; the profiles are ${
          this.#judge.profiles.join(", ")
        } (critical_for in the types file)`,
      );
    }
    return profile === SITE_PROFILE ? null : profile;
  }

  /**
   * Runs one change of the hub in the queue, between commit groups: saved before anything is
   * judged or told; the caller's answer waits until its audit events are written.
   */
  async #change(
    op: () => Promise<{ changes: readonly SafetyChange[]; recorded: Promise<void> }>,
  ): Promise<void> {
    let recorded: Promise<void> = Promise.resolve();
    await this.#options.control(async () => {
      try {
        const done = await op();
        recorded = done.recorded;
        this.#tellAll(done.changes);
      } finally {
        this.#judge.setHub(this.#hub.input());
      }
      this.#judgeNow();
      await this.save();
    });
    await recorded;
  }

  #tellAll(changes: readonly SafetyChange[]): void {
    if (changes.length > 0) this.#opening = [];
    for (const change of changes) {
      for (const listener of this.#listeners) this.#tell(listener, change);
    }
  }

  /**
   * Judges after a commit (or a forget, or a group the disk refused) and saves the latch when it
   * changed, before the next commit group is written and before the group is answered.
   */
  async afterCommit(): Promise<void> {
    this.#judge.release();
    if (this.#hub.hasExpired() && !this.#closed) {
      // The judge already ignores a waiver that ran out: this records its end.
      try {
        this.#tellAll(await this.#hub.expire());
        this.#expireFailing = false;
      } catch (err) {
        // Tried again after the next commit; the judge ignores the waiver all the same.
        if (!this.#expireFailing) {
          this.#options.warn(
            `Could not save the end of a waiver in the safety hub file: ${
              err instanceof Error ? err.message : String(err)
            }`,
          );
        }
        this.#expireFailing = true;
      } finally {
        this.#judge.setHub(this.#hub.input());
      }
    }
    this.#judgeNow();
    await this.save();
  }

  /**
   * Registers a listener for changes; it is called off the caller's stack and its exceptions
   * are ignored.
   *
   * @param listener Called with each change.
   * @param options `replayOpening`: also hand it the changes found when the watch opened (the
   *   verdict at start against the one saved at the last stop), unless a later change has
   *   superseded them; notifications ask for them (docs/safety.md#notifications).
   * @returns A function that unsubscribes.
   */
  onChange(
    listener: (change: SafetyChange) => void,
    options: { replayOpening?: boolean } = {},
  ): () => void {
    this.#listeners.add(listener);
    if (options.replayOpening) {
      for (const change of this.#opening) this.#tell(listener, change);
    }
    return () => void this.#listeners.delete(listener);
  }

  /**
   * Writes the latch file when something changed since it was last written; after a write in
   * progress, so what it resolves on includes every change made before the call.
   */
  save(): Promise<void> {
    this.#saving = this.#saving.then(() => this.#write());
    return this.#saving;
  }

  async #write(): Promise<void> {
    if (!this.#dirty) return;
    this.#dirty = false;
    try {
      // In the queue: no group is written between reading where the streams end and the write.
      const covers = await this.#options.cover();
      await this.#options.file.write(this.#judge.saved(this.#options.wall(), covers));
      this.#uncovered = 0;
      this.#failing = false;
    } catch (err) {
      this.#dirty = true;
      if (!this.#failing) {
        this.#options.warn(
          `Could not save the safety latch ${SAFETY_LATCH_FILE} (docs/safety.md); until it is saved, a restart judges again every stored line written since: ${
            err instanceof Error ? err.message : String(err)
          }`,
        );
      }
      this.#failing = true;
    }
  }

  /** Stops the timer and saves the latch a last time. */
  async close(): Promise<void> {
    this.#closed = true;
    if (this.#timer !== undefined) clearTimeout(this.#timer);
    this.#timer = undefined;
    this.#listeners.clear();
    this.#judgeNow();
    this.#dirty = true;
    await this.save();
  }

  #judgeNow(): Judgement {
    const { wall, mono } = this.#options;
    const judged = this.#judge.judge(this.#latest, wall(), mono());
    this.#apply(judged);
    return judged;
  }

  #apply(judged: Judgement): void {
    if (judged.dirty) this.#dirty = true;
    if (judged.changes.length > 0) this.#opening = [];
    for (const change of judged.changes) {
      if (change.kind === "safety") {
        this.changes++;
        // On close the change is left to the next start, which finds the saved verdict differs.
        if (!this.#closed) {
          this.#record(change, judged.verdicts.get(change.profile ?? SITE_PROFILE)!);
        }
      }
      for (const listener of this.#listeners) this.#tell(listener, change);
    }
    this.#arm();
  }

  /** Off the judging stack: a listener that throws or takes long never holds up a commit. */
  #tell(listener: (change: SafetyChange) => void, change: SafetyChange): void {
    queueMicrotask(() => {
      try {
        listener(change);
      } catch {
        // a listener's failure is its own (docs/safety.md)
      }
    });
  }

  /**
   * Queues the `telemetry.safety` event of a change of a profile's verdict, stamped with its
   * moment; a profile other than `site` is named in it.
   */
  #record(change: SafetyChange, verdict: SafetyVerdict): void {
    const data = {
      safe: verdict.safe,
      reasons: verdict.reasons,
      clear_at: verdict.clear_at,
      ...(change.profile === undefined ? {} : { profile: change.profile }),
    };
    this.#options.push({
      items: [{
        type: SAFETY_EVENT_TYPE,
        data,
        dataJson: JSON.stringify(data),
        metaJson: "{}",
        callerRunId: undefined,
        ts: change.ts,
        storePermanently: true,
        makeCurrent: false,
        item: undefined,
      }],
      receivedAt: this.#options.wall(),
      resolve: () => {},
      reject: (err) =>
        this.#options.warn(
          `Could not record the change of the safety verdict as ${SAFETY_EVENT_TYPE}: ${
            err instanceof Error ? err.message : String(err)
          }`,
        ),
    });
  }

  /** Sets the timer for the next moment the verdict can change by time alone. */
  #arm(): void {
    if (this.#closed) return;
    const { wall, mono } = this.#options;
    const now = mono();
    const next = this.#judge.nextChangeIn(this.#latest, wall(), now);
    const sleep = Math.min(next === undefined ? MAX_SLEEP_MS : next + 1, MAX_SLEEP_MS);
    const due = now + sleep;
    if (this.#timer !== undefined && this.#dueMono <= due + 1 && this.#dueMono > now) return;
    if (this.#timer !== undefined) clearTimeout(this.#timer);
    this.#dueMono = due;
    this.#timer = setTimeout(() => {
      this.#timer = undefined;
      this.#dueMono = Infinity;
      if (this.#closed) return;
      this.#options.control(() => this.afterCommit()).catch(() => {
        // closing: the queue refuses work; close() judges and saves a last time
      });
    }, Math.max(0, Math.ceil(sleep)));
  }
}

/**
 * The saved latch with every critical type that a stored line written after it judges unsafe
 * counted as judged unsafe when it was saved (docs/safety.md#across-restarts); null (every type
 * unknown, so unsafe) when there is no latch or it cannot be told which lines came after it.
 */
async function judgeLinesAfter(
  saved: SavedLatch | null,
  options: SafetyWatchOptions,
): Promise<SavedLatch | null> {
  const { registry, warn } = options;
  const critical = new Set(
    [...registry].filter(([, spec]) => isCriticalAnywhere(spec)).map(([t]) => t),
  );
  if (saved === null || critical.size === 0) return saved;
  const cover = saved.covers ?? options.checkpointCover;
  if (cover === undefined) {
    warn(
      `The safety latch ${SAFETY_LATCH_FILE} does not say which stored lines it covers and no checkpoint does; every critical type stays unsafe for its clear_after_s from now (docs/safety.md).`,
    );
    return null;
  }
  // Written after the latch was saved, so not before it by the wall clock (unless it stepped back).
  const earliest = Math.min(saved.saved_at_ms, options.wall());
  const found = new Set<string>();
  const failed = await options.linesAfter(cover, critical, (line) => {
    let event: { type?: unknown; ts?: unknown; data?: unknown; meta?: { migrated_from?: unknown } };
    try {
      event = JSON.parse(line);
    } catch {
      return; // never acknowledged as such
    }
    const { type, ts, data } = event;
    if (typeof type !== "string" || found.has(type)) return;
    // A migrated night is history the service never judged live (docs/migration.md).
    if (typeof event.meta?.migrated_from === "string") return;
    const spec = registry.get(type);
    if (!spec || !isCriticalAnywhere(spec) || typeof data !== "object" || data === null) return;
    const tsMs = typeof ts === "string" ? Date.parse(ts) : NaN;
    if (unsafeWhenStored(spec, tsMs, data as Record<string, unknown>, earliest)) found.add(type);
  });
  if (failed !== undefined) {
    warn(
      `The stored lines written after the safety latch ${SAFETY_LATCH_FILE} was saved cannot be judged (${failed}); every critical type stays unsafe for its clear_after_s from now (docs/safety.md).`,
    );
    return null;
  }
  if (found.size === 0) return saved;
  warn(
    `Stored lines written after the safety latch ${SAFETY_LATCH_FILE} was saved judge ${
      [...found].join(", ")
    } unsafe; each stays unsafe for its clear_after_s from now (docs/safety.md#across-restarts).`,
  );
  const types = { ...saved.types };
  for (const type of found) types[type] = { unsafe: true, latched_until_ms: null };
  return { ...saved, types };
}

/**
 * Opens the safety watch of a service (see {@linkcode SafetyWatch.open}).
 *
 * @param options What the watch needs from the service.
 * @returns The running watch.
 *
 * @example Usage
 * ```ts ignore
 * const watch = await openSafetyWatch(options);
 * ```
 */
export function openSafetyWatch(options: SafetyWatchOptions): Promise<SafetyWatch> {
  return SafetyWatch.open(options);
}
