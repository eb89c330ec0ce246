/**
 * CSV cells and rows as every CSV output of the package writes them (docs/history.md, "CSV"):
 * RFC 4180 quoting, and text that a spreadsheet would run as a formula neutralised. Web APIs
 * only, so the command line (`read --format csv`) and the service can share it.
 *
 * @example Usage
 * ```ts
 * import { csvRow } from "./csv.ts";
 * import assert from "node:assert/strict";
 *
 * assert.equal(csvRow([7, "=HYPERLINK(\"x\")", -3.5, "a,b"]), `7,"'=HYPERLINK(""x"")",-3.5,"a,b"\r\n`);
 * ```
 *
 * @module
 */

/** What one cell may hold: text, or a JSON number, boolean or null as it was stored. */
export type CsvValue = string | number | boolean | null;

/**
 * The first characters with which a spreadsheet starts a formula (or, for TAB and CR, hides one
 * behind blank space), after OWASP's "CSV Injection" advice.
 */
const FORMULA_START = /^[=+\-@\t\r]/;

/** A text a spreadsheet reads as a plain number: it computes nothing, so it is left alone. */
const PLAIN_NUMBER = /^[+-]?(?:\d+\.?\d*|\.\d+)(?:[eE][+-]?\d+)?$/;

/**
 * One CSV cell. A number, boolean or null is written as JSON writes it, never changed. A text
 * that starts with `=`, `+`, `-`, `@`, TAB or CR gets a `'` in front, which spreadsheets show as
 * text instead of running it, unless the whole text is a plain number (`-3.5`). Then the cell is
 * quoted as RFC 4180 asks when it holds a comma, a quote, CR or LF, or starts or ends with a
 * space (which some readers trim).
 *
 * @param value The cell's value.
 * @returns The cell as written in the file.
 *
 * @example Usage
 * ```ts
 * import { csvCell } from "./csv.ts";
 * import assert from "node:assert/strict";
 *
 * assert.equal(csvCell("plain"), "plain");
 * assert.equal(csvCell('say "hi", then go'), '"say ""hi"", then go"');
 * assert.equal(csvCell("=1+2"), "'=1+2");
 * assert.equal(csvCell("-3.5"), "-3.5");
 * assert.equal(csvCell(-3.5), "-3.5");
 * ```
 */
export function csvCell(value: CsvValue): string {
  if (typeof value !== "string") return JSON.stringify(value);
  const text = FORMULA_START.test(value) && !PLAIN_NUMBER.test(value) ? `'${value}` : value;
  return /[",\r\n]|^ | $/.test(text) ? `"${text.replaceAll('"', '""')}"` : text;
}

/**
 * One CSV record: the cells joined by commas, ended by CRLF (RFC 4180).
 *
 * @param values The cells' values.
 * @returns The record, with its line end.
 *
 * @example Usage
 * ```ts
 * import { csvRow } from "./csv.ts";
 * import assert from "node:assert/strict";
 *
 * assert.equal(csvRow(["seq", "ts"]), "seq,ts\r\n");
 * ```
 */
export function csvRow(values: readonly CsvValue[]): string {
  return values.map(csvCell).join(",") + "\r\n";
}

/**
 * One field of `data`: a dotted path walks into nested objects; a string, number, boolean or
 * null as it is, an object or array as JSON text, a missing one as the empty text. CSV writes a
 * number as the number it is, never as text (docs/history.md, "CSV").
 *
 * @param data The event's `data`.
 * @param path For example `"wind.mps"`.
 * @returns The field's value.
 *
 * @example Usage
 * ```ts
 * import { dataValue } from "./csv.ts";
 * import assert from "node:assert/strict";
 *
 * assert.equal(dataValue({ a: { b: [1, 2] } }, "a.b"), "[1,2]");
 * assert.equal(dataValue({ a: -3.5 }, "a"), -3.5);
 * assert.equal(dataValue({ a: 1 }, "a.b"), "");
 * ```
 */
export function dataValue(data: unknown, path: string): CsvValue {
  let value: unknown = data;
  for (const key of path.split(".")) {
    if (typeof value !== "object" || value === null || Array.isArray(value)) return "";
    if (!Object.hasOwn(value, key)) return "";
    value = (value as Record<string, unknown>)[key];
  }
  if (value === undefined || value === null) return "";
  if (typeof value === "string" || typeof value === "number" || typeof value === "boolean") {
    return value;
  }
  return JSON.stringify(value);
}

/**
 * A stored line as the cells of a CSV or table row: seq, ts, type, then the data fields (all of
 * `data` as JSON text in one cell when `fields` is absent); `undefined` for a line that is not
 * JSON. `read --format csv` and `GET /history?format=csv` write the same rows (docs/history.md).
 *
 * @param line The stored line.
 * @param fields The data fields (dotted for nested ones), or `undefined` for all of `data`.
 * @returns The cells.
 *
 * @example Usage
 * ```ts
 * import { eventCells } from "./csv.ts";
 * import assert from "node:assert/strict";
 *
 * const line = '{"seq":7,"ts":"2026-05-10T03:00:00.000Z","type":"weather","data":{"wind":{"mps":2}},"meta":{}}';
 * assert.deepEqual(eventCells(line, ["wind.mps"]), [7, "2026-05-10T03:00:00.000Z", "weather", 2]);
 * ```
 */
export function eventCells(
  line: string,
  fields: readonly string[] | undefined,
): CsvValue[] | undefined {
  let value: { seq?: unknown; ts?: unknown; type?: unknown; data?: unknown };
  try {
    value = JSON.parse(line);
  } catch {
    return undefined;
  }
  return [
    typeof value.seq === "number" ? value.seq : String(value.seq ?? ""),
    String(value.ts ?? ""),
    String(value.type ?? ""),
    ...(fields ? fields.map((f) => dataValue(value.data, f)) : [JSON.stringify(value.data)]),
  ];
}
