/**
 * Whether the events of a commit group may be accepted, checked when the group is committed
 * (so concurrent requests see each other): a caller's `meta.run_id` must name the active run
 * (docs/http-api.md), and what `make_current` adds must fit the snapshot's type cap (`--max-types`,
 * docs/storage.md) and byte budget (`--max-snapshot`). Refusals are domain errors; nothing is
 * written for a refused request.
 *
 * @module
 */

import { InvalidRequestError, itemPrefix, SnapshotLimitError, TypeLimitError } from "./errors.ts";
import type { EventCommand } from "./commands.ts";
import { type Snapshot, utf8Length } from "./snapshot.ts";

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
 * The checks of commit groups, one group at a time: requests accepted earlier in a group count
 * against the limits of those after them. One instance serves every group, and a group's
 * tables are made only once a request needs them: most commits hold a single event.
 *
 * @example Usage
 * ```ts ignore
 * const admission = new Admission(snapshot, { maxTypes: 10_000, maxSnapshotBytes: 64 << 20 });
 * admission.begin(runId);
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
  /** Types not in the snapshot yet that the group's accepted requests add (made when needed). */
  #types: Set<string> | undefined;
  /** The most each type's part of the snapshot body will be after the group, in bytes. */
  #bytes: Map<string, number> | undefined;
  /** The most the snapshot body will have grown, in bytes. */
  #delta = 0;

  /**
   * @param snapshot The snapshot the groups are committed to.
   * @param limits Its limits.
   */
  constructor(snapshot: Snapshot, limits: SnapshotLimits) {
    this.#snapshot = snapshot;
    this.#limits = limits;
  }

  /**
   * Starts the checks of a group, against the snapshot as it is now.
   *
   * @param runId The active run's id, if a run is active.
   */
  begin(runId: string | undefined): void {
    this.#runId = runId;
    this.#types = undefined;
    this.#bytes = undefined;
    this.#delta = 0;
  }

  /**
   * Checks the requests of a commit group in order, after {@linkcode Admission.begin}: a request
   * that does not pass is refused at once, the others go on as one group.
   *
   * @param ops The group's requests, in arrival order.
   * @returns The requests that passed; usually all did, and then it is `ops` itself, not a copy.
   */
  admit<T extends { items: readonly EventCommand[]; reject(err: unknown): void }>(ops: T[]): T[] {
    let accepted = ops;
    const withinBound = this.#fitsBound(ops);
    for (let i = 0; i < ops.length; i++) {
      const op = ops[i]!;
      const problem = this.check(op.items, withinBound);
      if (problem) {
        if (accepted === ops) accepted = ops.slice(0, i);
        op.reject(problem);
      } else if (accepted !== ops) accepted.push(op);
    }
    return accepted;
  }

  /**
   * Checks one request's events, all or nothing; an accepted request counts from then on.
   *
   * @param items The request's events.
   * @param withinBound The whole group fits the byte budget on a bound (see
   *   {@linkcode Admission.admit}): then so does every request of it by the exact sizes, and
   *   neither its events nor the entries they replace need measuring. The answer is the one the
   *   exact sizes give.
   * @returns Why it is refused, or `undefined` when it is accepted.
   */
  check(items: readonly EventCommand[], withinBound = false): Error | undefined {
    /** The types this request added to `#types`, taken back if it is refused. */
    let added: string[] | undefined;
    for (const item of items) {
      if (item.callerRunId !== undefined && item.callerRunId !== this.#runId) {
        return this.#refuse(added, runIdMismatch(item, this.#runId));
      }
      if (!item.makeCurrent || this.#snapshot.has(item.type) || this.#types?.has(item.type)) {
        continue;
      }
      if (this.#snapshot.size + (this.#types?.size ?? 0) >= this.#limits.maxTypes) {
        return this.#refuse(added, new TypeLimitError(this.#limits.maxTypes, item.item));
      }
      (this.#types ??= new Set()).add(item.type);
      (added ??= []).push(item.type);
    }
    if (withinBound) return undefined;
    const current = lastOfEachType(items);
    if (current.length === 0) return undefined;
    // What the request would make the snapshot's size, at most (docs/storage.md).
    const sizes = current.map(snapshotSize);
    let delta = 0;
    for (let i = 0; i < current.length; i++) {
      const type = current[i]!.type;
      delta += sizes[i]! - (this.#bytes?.get(type) ?? this.#snapshot.bytesOf(type));
    }
    const projected = this.#snapshot.bytes + this.#delta + delta;
    // Growth past the budget is refused; an update that shrinks the snapshot always passes.
    if (delta > 0 && projected > this.#limits.maxSnapshotBytes) {
      const largest = largestEvent(items);
      return this.#refuse(
        added,
        new SnapshotLimitError(this.#limits.maxSnapshotBytes, projected, {
          type: largest.type,
          item: largest.item,
        }),
      );
    }
    const bytes = this.#bytes ??= new Map();
    for (let i = 0; i < current.length; i++) bytes.set(current[i]!.type, sizes[i]!);
    this.#delta += delta;
    return undefined;
  }

  /**
   * Whether the snapshot stays within its byte budget even if every entry not measured yet and
   * every event of the group that becomes current took 3 bytes per UTF-16 code unit, and no
   * entry they replace were taken off. Then each request's exact projection, which counts at most
   * the events of the requests up to it, fits too: the group is admitted (budget-wise) without
   * measuring anything (see {@linkcode Admission.check}).
   */
  #fitsBound(ops: readonly { items: readonly EventCommand[] }[]): boolean {
    let most = this.#snapshot.bytesAtMost + this.#delta;
    for (let i = 0; i < ops.length; i++) {
      const items = ops[i]!.items;
      for (let j = 0; j < items.length; j++) {
        const item = items[j]!;
        if (item.makeCurrent) most += snapshotSizeAtMost(item);
      }
    }
    return most <= this.#limits.maxSnapshotBytes;
  }

  /** Refuses the request being checked: the types it added no longer count. */
  #refuse(added: string[] | undefined, err: Error): Error {
    for (const type of added ?? []) this.#types!.delete(type);
    return err;
  }
}

const NONE: readonly EventCommand[] = [];

/**
 * Each type's last event that becomes current, in a request: the one whose size counts. A
 * request of one event (most of them) needs no table.
 */
function lastOfEachType(items: readonly EventCommand[]): readonly EventCommand[] {
  if (items.length === 1) return items[0]!.makeCurrent ? items : NONE;
  const last = new Map<string, EventCommand>();
  for (const item of items) if (item.makeCurrent) last.set(item.type, item);
  return [...last.values()];
}

/** At most what an event adds to the snapshot's body (its envelope, a key and a comma). */
function snapshotSize(item: EventCommand): number {
  return 2 * utf8Length(item.type) + utf8Length(item.dataJson) + utf8Length(item.metaJson) +
    ENVELOPE_BYTES;
}

/** At least {@linkcode snapshotSize}, without scanning: 3 bytes per UTF-16 code unit. */
function snapshotSizeAtMost(item: EventCommand): number {
  return 3 * (2 * item.type.length + item.dataJson.length + item.metaJson.length) +
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

/** A caller's `meta.run_id` that is not the active run's (docs/http-api.md). */
function runIdMismatch(item: EventCommand, active: string | undefined): InvalidRequestError {
  const where = itemPrefix(item.item);
  return new InvalidRequestError(
    active !== undefined
      ? `${where}meta.run_id "${item.callerRunId}" differs from the active run "${active}"; omit meta.run_id and the server stamps it.`
      : `${where}meta.run_id "${item.callerRunId}" was sent but no run is active; omit meta.run_id, the server stamps it during a run.`,
  );
}
