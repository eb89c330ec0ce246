/**
 * Seq assignment of a commit group (docs/storage.md): each accepted event gets the next seq of
 * its stream and its envelope line, a site-wide event during a run a copy in the site stream,
 * and each stored line is queued for its file. Nothing is written here: the service writes the
 * group afterwards, and a failed write discards it without consuming a seq.
 *
 * @example Usage
 * ```ts ignore
 * import { assignGroup } from "./assign.ts";
 * const group = assignGroup(ops, run, { seq: 41, written: 41, unwritten: 0 }, {
 *   siteTypes: new Set(["weather"]),
 *   nightOf: (ms) => store.nightOf(ms),
 *   receivedTs: (ms) => new Date(ms).toISOString(),
 * });
 * await store.append(group.pending);
 * ```
 *
 * @module
 */

import type { EventCommand } from "./commands.ts";
import type { ActiveRun } from "./runs.ts";
import type { CommittedEvent, StreamName } from "./service_types.ts";
import type { NdjsonWriter } from "../store/writer.ts";
import { buildLine, buildTail, withRunId } from "../wire/ndjson.ts";

/** One request's events waiting in the service's queue. */
export interface EventOp {
  /** The validated events, in order. */
  items: EventCommand[];
  /** When the request arrived, epoch milliseconds (the `ts` of events without one). */
  receivedAt: number;
  /** Answers the request. */
  resolve: (events: CommittedEvent[]) => void;
  /** Refuses the request. */
  reject: (err: unknown) => void;
  /**
   * The request's `Idempotency-Key` and the hash of its body, when it was sent with one, and
   * whether it asked for the minimal answer (kept instead of its lines).
   */
  key?: { key: string; hash: string; minimal?: boolean | undefined } | undefined;
}

/** Seq accounting of one stream while a group is being assigned. */
export interface Counter {
  /** The last seq handed out. */
  seq: number;
  /** Highest seq that reaches a file. */
  written: number;
  /** Highest seq handed out but not stored (0: none). */
  unwritten: number;
}

/** A group of events with seqs assigned, waiting to be written. */
export interface Assigned {
  /** The events of each request, in order. */
  results: CommittedEvent[][];
  /** Every stream copy of every event: its stream and type (for metrics). */
  copies: [StreamName, string][];
  /** Lines per writer, or per night whose site file is not open yet. */
  pending: Map<NdjsonWriter | string, string[]>;
  /** The site stream's counter after the group. */
  site: Counter;
  /** The run stream's counter after the group, while a run is active. */
  run: Counter | undefined;
  /** The night whose site file got the group's last stored site line. */
  siteNight?: string;
}

/** What assigning needs from the service. */
export interface AssignContext {
  /** Site-wide types, copied to the site stream during a run too. */
  siteTypes: ReadonlySet<string>;
  /** The night (site file key) of a receive time. */
  nightOf(epochMs: number): string;
  /** The `ts` of a receive time. */
  receivedTs(epochMs: number): string;
}

/**
 * Assigns seqs and builds every line of a group; nothing is written yet.
 *
 * @param accepted The requests that passed admission, in order.
 * @param run The active run, if any (its counters are read, not changed).
 * @param site The site stream's counter before the group; changed in place.
 * @param context The site types, the night and the `ts` of a receive time.
 * @returns The group.
 *
 * @example Usage
 * ```ts ignore
 * import { assignGroup } from "./assign.ts";
 * const group = assignGroup(ops, undefined, { seq: 0, written: 0, unwritten: 0 }, context);
 * ```
 */
export function assignGroup(
  accepted: EventOp[],
  run: ActiveRun | undefined,
  site: Counter,
  context: AssignContext,
): Assigned {
  const runCounter: Counter | undefined = run
    ? { seq: run.lastSeq, written: run.lastWritten, unwritten: 0 }
    : undefined;
  // Arrays of known length are made at that length: most groups hold one event, and a
  // pushed-to empty array would reserve room for 16.
  const group: Assigned = {
    results: new Array(accepted.length),
    copies: [],
    pending: new Map(),
    site,
    run: runCounter,
  };
  const runId = run?.record.run_id;
  // A batch is mostly one type: its JSON and its copies' [stream, type] records are made once
  // for a run of events of the same type (the records are read-only).
  let type: string | undefined;
  let typeJson = "";
  let runCopy: [StreamName, string] = ["run", ""];
  let siteCopy: [StreamName, string] = ["site", ""];
  for (let i = 0; i < accepted.length; i++) {
    const op = accepted[i]!;
    const out: CommittedEvent[] = new Array(op.items.length);
    for (let j = 0; j < op.items.length; j++) {
      const item = op.items[j]!;
      const ts = item.ts ?? context.receivedTs(op.receivedAt);
      const meta = runId === undefined || item.callerRunId !== undefined
        ? item.metaJson
        : withRunId(item.metaJson, runId);
      if (item.type !== type) {
        type = item.type;
        typeJson = JSON.stringify(type);
        runCopy = ["run", type];
        siteCopy = ["site", type];
      }
      const tail = buildTail(ts, typeJson, item.dataJson, meta);
      const stored = item.storePermanently;
      if (run && runCounter) {
        const line = stamp(group, runCounter, tail, stored ? run.writer : undefined);
        out[j] = {
          line,
          stream: "run",
          seq: runCounter.seq,
          type: item.type,
          data: item.data,
          runId,
        };
        group.copies.push(runCopy);
        if (context.siteTypes.has(item.type)) {
          stamp(group, site, tail, stored ? context.nightOf(op.receivedAt) : undefined);
          group.copies.push(siteCopy);
        }
      } else {
        const line = stamp(group, site, tail, stored ? context.nightOf(op.receivedAt) : undefined);
        out[j] = {
          line,
          stream: "site",
          seq: site.seq,
          type: item.type,
          data: item.data,
          runId,
        };
        group.copies.push(siteCopy);
      }
    }
    group.results[i] = out;
  }
  return group;
}

/**
 * Hands out the next seq of a stream and builds the event's line; a stored event's line is queued
 * for its target (a writer, or the night of a site file not open yet), an unstored one's seq is
 * noted as handed out without reaching a file.
 */
function stamp(
  group: Assigned,
  counter: Counter,
  tail: string,
  target: NdjsonWriter | string | undefined,
): string {
  const line = buildLine(++counter.seq, tail);
  if (target === undefined) {
    counter.unwritten = counter.seq;
    return line;
  }
  const list = group.pending.get(target);
  if (list) list.push(line);
  else group.pending.set(target, [line]);
  if (typeof target === "string") group.siteNight = target;
  counter.written = counter.seq;
  return line;
}
