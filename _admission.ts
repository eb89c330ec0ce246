/**
 * Whether the events of a commit group may be accepted, checked when the group is committed
 * (so concurrent requests see each other): a caller's `meta.run_id` must name the active run
 * (CONTRACT 2.1), and what `make_current` adds must fit the snapshot's type cap (`--max-types`,
 * CONTRACT 4.8) and byte budget (`--max-snapshot`). Refusals are domain errors; nothing is
 * written for a refused request.
 *
 * @module
 */

import { InvalidRequestError, itemPrefix, SnapshotLimitError, TypeLimitError } from "./_errors.ts";
import type { EventCommand } from "./_request.ts";
import { type Snapshot, utf8Length } from "./_snapshot.ts";

/**
 * An upper bound on what an envelope adds around its type, `data` and `meta` in the snapshot: the
 * key, seq, ts, field names, a stamped `run_id` (at most 128 characters) and the separators.
 */
const ENVELOPE_BYTES = 256;

/** The snapshot's limits. */
export interface SnapshotLimits {
  /** How many types it may hold. */
  maxTypes: number;
  /** How large its `GET /current` body may grow, in bytes. */
  maxSnapshotBytes: number;
}

/**
 * The checks of one commit group: requests accepted earlier in the group count against the
 * limits of those after them.
 *
 * @example Usage
 * ```ts ignore
 * const admission = new Admission(snapshot, { maxTypes: 10_000, maxSnapshotBytes: 64 << 20 }, runId);
 * for (const op of ops) {
 *   const problem = admission.check(op.items);
 *   if (problem) op.reject(problem);
 * }
 * ```
 */
export class Admission {
  #snapshot: Snapshot;
  #limits: SnapshotLimits;
  #runId: string | undefined;
  /** Types not in the snapshot yet that accepted requests add. */
  #types = new Set<string>();
  /** The most each type's part of the snapshot body will be, in bytes. */
  #bytes = new Map<string, number>();
  /** The most the snapshot body will have grown, in bytes. */
  #delta = 0;

  /**
   * Starts the checks of a group.
   *
   * @param snapshot The snapshot as it is before the group.
   * @param limits Its limits.
   * @param runId The active run's id, if a run is active.
   */
  constructor(snapshot: Snapshot, limits: SnapshotLimits, runId: string | undefined) {
    this.#snapshot = snapshot;
    this.#limits = limits;
    this.#runId = runId;
  }

  /**
   * Checks one request's events, all or nothing; an accepted request counts from then on.
   *
   * @param items The request's events.
   * @returns Why it is refused, or `undefined` when it is accepted.
   */
  check(items: readonly EventCommand[]): Error | undefined {
    const added: string[] = [];
    const refuse = (err: Error) => {
      for (const t of added) this.#types.delete(t);
      return err;
    };
    /** Each type's last event in the request: the one that becomes current. */
    const last = new Map<string, EventCommand>();
    for (const item of items) {
      if (item.callerRunId !== undefined && item.callerRunId !== this.#runId) {
        return refuse(runIdMismatch(item, this.#runId));
      }
      if (!item.makeCurrent) continue;
      if (!this.#snapshot.has(item.type) && !this.#types.has(item.type)) {
        if (this.#snapshot.size + this.#types.size >= this.#limits.maxTypes) {
          return refuse(new TypeLimitError(this.#limits.maxTypes, item.item));
        }
        this.#types.add(item.type);
        added.push(item.type);
      }
      last.set(item.type, item);
    }
    if (last.size === 0) return undefined;
    /** What the request would make each type's snapshot size, at most (CONTRACT 4.8). */
    const sizes = new Map<string, number>();
    let delta = 0;
    for (const [type, item] of last) {
      const size = snapshotSize(item);
      sizes.set(type, size);
      delta += size - (this.#bytes.get(type) ?? this.#snapshot.bytesOf(type));
    }
    const projected = this.#snapshot.bytes + this.#delta + delta;
    // Growth past the budget is refused; an update that shrinks the snapshot always passes.
    if (delta > 0 && projected > this.#limits.maxSnapshotBytes) {
      const largest = largestEvent(items);
      return refuse(
        new SnapshotLimitError(this.#limits.maxSnapshotBytes, projected, {
          type: largest.type,
          item: largest.item,
        }),
      );
    }
    for (const [type, size] of sizes) this.#bytes.set(type, size);
    this.#delta += delta;
    return undefined;
  }
}

/** At most what an event adds to the snapshot's body (its envelope, a key and a comma). */
function snapshotSize(item: EventCommand): number {
  return 2 * utf8Length(item.type) + utf8Length(item.dataJson) + utf8Length(item.metaJson) +
    ENVELOPE_BYTES;
}

/** The request's largest event that would become current: the one a refusal names. */
function largestEvent(items: readonly EventCommand[]): EventCommand {
  let largest: EventCommand | undefined;
  let largestSize = 0;
  for (const item of items) {
    if (!item.makeCurrent) continue;
    const size = snapshotSize(item);
    if (size > largestSize) [largest, largestSize] = [item, size];
  }
  return largest!;
}

/** A caller's `meta.run_id` that is not the active run's (CONTRACT 2.1). */
function runIdMismatch(item: EventCommand, active: string | undefined): InvalidRequestError {
  const where = itemPrefix(item.item);
  return new InvalidRequestError(
    active !== undefined
      ? `${where}meta.run_id "${item.callerRunId}" differs from the active run "${active}"; omit meta.run_id and the server stamps it.`
      : `${where}meta.run_id "${item.callerRunId}" was sent but no run is active; omit meta.run_id, the server stamps it during a run.`,
  );
}
