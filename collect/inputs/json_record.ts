/**
 * A JSON document as a record (docs/collect.md, `http` and `file`): an array means its first
 * element, `fields` are JSON Pointers (without them the whole object is the data), `ts` a JSON
 * Pointer to the measurement time.
 *
 * @module
 */

import { resolvePointer } from "../json_pointer.ts";
import { readSourceTime } from "../source_time.ts";
import type { InputCommon, InputSink, RecordReading } from "./input.ts";

/**
 * Turns a parsed JSON document into a record.
 *
 * @param doc The parsed document.
 * @param common The input's common settings (`fields`, `ts`, `ts_format`).
 * @param sink Where a field found missing is warned about.
 * @param what The source, for messages.
 * @returns The record.
 * @throws {Error} When the document is not an object (or an array of one), or has no readable time at `ts`.
 *
 * @example Usage
 * ```ts
 * import { jsonRecord } from "./json_record.ts";
 * import assert from "node:assert/strict";
 *
 * const sink = { record: () => {}, field: () => {}, warn: () => {} };
 * const rec = jsonRecord([{ t: 4, at: 1700000000 }], { name: "a", fields: { temp: "/t" }, ts: "/at", tsFormat: "unix" }, sink, "x");
 * assert.deepEqual(rec, { data: { temp: 4 }, sourceTs: 1_700_000_000_000 });
 * ```
 */
export function jsonRecord(
  doc: unknown,
  common: InputCommon,
  sink: InputSink,
  what: string,
): RecordReading {
  const value = Array.isArray(doc) ? doc[0] : doc;
  if (value === null || typeof value !== "object" || Array.isArray(value)) {
    throw new Error(
      `${what} is not a JSON object or an array starting with one (found ${
        Array.isArray(doc) && doc.length === 0 ? "an empty array" : typeof value
      })`,
    );
  }
  let data: Record<string, unknown>;
  if (common.fields === undefined) {
    data = value as Record<string, unknown>;
  } else {
    data = {};
    for (const [name, pointer] of Object.entries(common.fields)) {
      const found = resolvePointer(value, pointer);
      if (found === undefined) {
        sink.warn(`field:${name}`, `${what} has nothing at ${pointer} (field "${name}"): left out`);
      } else {
        data[name] = found;
      }
    }
  }
  if (common.ts === undefined) return { data };
  const at = resolvePointer(value, common.ts);
  if (at === undefined) throw new Error(`${what} has no time at ${common.ts} (the input's "ts")`);
  try {
    return { data, sourceTs: readSourceTime(at, common.tsFormat ?? "iso") };
  } catch (err) {
    throw new Error(`${what}: the time at ${common.ts} ${(err as Error).message}`);
  }
}
