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
