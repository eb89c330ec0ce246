/**
 * When the snapshot checkpoint is taken: at most {@linkcode CHECKPOINT_DELAY_MS} after a change,
 * at once after a rotation or {@linkcode CHECKPOINT_BYTES} written, and whenever the service asks
 * (run start and stop, shutdown). Taking one is a control step of the service's queue, so the
 * snapshot and the file offsets agree; writing it happens afterwards, off the queue, one after
 * the other. What a checkpoint holds is the service's business (its `take` hook).
 *
 * @module
 */

import { errorText } from "./errors.ts";

/** How long a changed snapshot may wait for its periodic checkpoint (see `snapshot.ts`). */
export const CHECKPOINT_DELAY_MS = 5_000;
/** Bytes written after which a checkpoint is taken without waiting, bounding a kill -9 restart. */
export const CHECKPOINT_BYTES = 32 * 1024 * 1024;

/** What the {@linkcode Checkpointer} needs from the service. */
export interface CheckpointHooks {
  /**
   * Reads what a checkpoint holds now; call only between commits.
   *
   * @returns The record to write, made lazily off the queue.
   */
  take(): Promise<() => unknown>;
  /** Writes a record atomically. */
  write(record: unknown): Promise<void>;
  /** Runs a function as a control step of the service's queue. */
  control(fn: () => Promise<void>): Promise<void>;
  /** The night whose site file holds the site stream's last line (a change is a rotation). */
  night(): string | undefined;
  /** Whether the service is closing (no more checkpoints are scheduled). */
  closing(): boolean;
  /** Receives a failure to take or write one. */
  warn(message: string): void;
}

/**
 * The checkpoint schedule of one service.
 *
 * @example Usage
 * ```ts ignore
 * const checkpoints = new Checkpointer(hooks);
 * checkpoints.committed(bytes); // after every commit
 * await checkpoints.now(); // at run start, run stop and shutdown
 * ```
 */
export class Checkpointer {
  /** Something changed since the last checkpoint was taken (or writing it failed). */
  dirty = false;
  #hooks: CheckpointHooks;
  /** The site stream's night as the last checkpoint saw it: a change is a rotation. */
  #night: string | undefined;
  #bytes = 0;
  #timer: ReturnType<typeof setTimeout> | undefined;
  #queued = false;
  #writes: Promise<void> = Promise.resolve();

  /**
   * Creates the schedule.
   *
   * @param hooks What it takes, writes and runs through the service.
   */
  constructor(hooks: CheckpointHooks) {
    this.#hooks = hooks;
  }

  /** Notes that the checkpoint on disk reflects the site stream's night now (at start-up). */
  synced(): void {
    this.#night = this.#hooks.night();
  }

  /**
   * After a commit: schedules a checkpoint, at once after a rotation or many bytes.
   *
   * @param bytes Bytes the commit appended.
   */
  committed(bytes: number): void {
    this.dirty = true;
    this.#bytes += bytes;
    // A rotation, or a kill -9 restart would read too much.
    if (this.#hooks.night() !== this.#night || this.#bytes >= CHECKPOINT_BYTES) this.schedule();
    else this.arm();
  }

  /** Makes sure a checkpoint follows within {@linkcode CHECKPOINT_DELAY_MS}. */
  arm(): void {
    this.#timer ??= setTimeout(() => {
      this.#timer = undefined;
      if (this.dirty && !this.#hooks.closing()) this.schedule();
    }, CHECKPOINT_DELAY_MS);
  }

  /** Takes a checkpoint as the next control step of the queue and writes it afterwards. */
  schedule(): void {
    if (this.#queued || this.#hooks.closing()) return;
    this.#queued = true;
    this.stop();
    this.#hooks.control(async () => {
      this.#queued = false;
      if (!this.#hooks.closing()) this.#write(await this.#take());
    }).catch((err) => this.#hooks.warn(`Cannot take a snapshot checkpoint: ${errorText(err)}`));
  }

  /**
   * Takes a checkpoint and waits until it is written; call only where no commit runs. A failure
   * is warned, not thrown.
   */
  async now(): Promise<void> {
    try {
      await this.#write(await this.#take());
    } catch (err) {
      this.#hooks.warn(`Cannot take a snapshot checkpoint: ${errorText(err)}`);
    }
  }

  /**
   * Takes a checkpoint and waits until it is written, after any checkpoint taken before it (so
   * an older one can never land on top of it); call only where no commit runs. Unlike
   * {@linkcode Checkpointer.now}, a failure is thrown: a change that must survive a crash
   * (forgetting a type) is not acknowledged without it.
   *
   * @throws What writing the checkpoint threw.
   */
  async durable(): Promise<void> {
    await this.#enqueue(await this.#take());
  }

  /** Cancels a pending periodic checkpoint. */
  stop(): void {
    clearTimeout(this.#timer);
    this.#timer = undefined;
  }

  async #take(): Promise<() => unknown> {
    const night = this.#hooks.night();
    const record = await this.#hooks.take();
    this.dirty = false;
    this.#bytes = 0;
    this.#night = night;
    return record;
  }

  /** Writes a record after every one before it; a failure is warned, and the result rejects. */
  #enqueue(record: () => unknown): Promise<void> {
    const write = this.#writes.then(() => this.#hooks.write(record()));
    this.#writes = write.catch((err) => {
      this.dirty = true;
      this.#hooks.warn(`Cannot save the snapshot checkpoint: ${errorText(err)}`);
    });
    return write;
  }

  /** Writes a record after every one before it; resolves when done, whether or not it failed. */
  #write(record: () => unknown): Promise<void> {
    this.#enqueue(record);
    return this.#writes;
  }
}
