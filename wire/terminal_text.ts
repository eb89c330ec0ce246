/**
 * Text from data, types, `meta` or an answer, made safe for an operator's terminal
 * (docs/cli.md, "Human output and terminals"). Web APIs only.
 *
 * A stored string may hold any character. Printed raw, `ESC ] 0 ; … BEL` retitles the window,
 * `ESC [ 2 J` clears it, OSC 52 writes the clipboard, the C1 byte U+009B is a one-character CSI
 * on some terminals, a lone CR or a backspace overwrites what was printed before, and the bidi
 * overrides reorder it. Every human-readable line goes through {@linkcode printable}; JSON
 * printed on a terminal goes through {@linkcode terminalJson}, which keeps the same JSON value.
 *
 * @example Usage
 * ```ts
 * import { printable, terminalJson } from "./terminal_text.ts";
 * import assert from "node:assert/strict";
 *
 * assert.equal(printable("M31\x1b]0;pwned\x07"), "M31\\u001b]0;pwned\\u0007");
 * assert.equal(JSON.parse(terminalJson('{"a":"\u009b2J"}')).a, "\u009b2J");
 * ```
 *
 * @module
 */

/**
 * What a terminal may act on: C0 (TAB, LF and CR included: a table cell or a log line stays one
 * line), DEL, C1, the line and paragraph separators, and the bidi embeddings, overrides and
 * isolates (U+202A-U+202E, U+2066-U+2069).
 */
// deno-lint-ignore no-control-regex -- the point is to find them
const CONTROL = /[\u0000-\u001f\u007f-\u009f\u2028\u2029\u202a-\u202e\u2066-\u2069]/g;

/**
 * The characters {@linkcode CONTROL} finds that JSON leaves raw in its strings: JSON escapes C0
 * itself, but not DEL, C1, the separators or the bidi controls.
 */
const JSON_RAW = /[\u007f-\u009f\u2028\u2029\u202a-\u202e\u2066-\u2069]/g;

function escapeChar(c: string): string {
  return `\\u${c.charCodeAt(0).toString(16).padStart(4, "0")}`;
}

/**
 * A text as one printable line: every control character is shown as its `\uXXXX` escape, never
 * sent raw.
 *
 * @param text Any text, for example a data value, a type, a run's `meta.target` or an error.
 * @returns The text with each control character replaced by six visible characters.
 *
 * @example Usage
 * ```ts
 * import { printable } from "./terminal_text.ts";
 * import assert from "node:assert/strict";
 *
 * assert.equal(printable("ok"), "ok");
 * assert.equal(printable("a\r\u009b2J"), "a\\u000d\\u009b2J");
 * ```
 */
export function printable(text: string): string {
  return text.replace(CONTROL, escapeChar);
}

/**
 * JSON text for a terminal: the same JSON value, with the characters JSON leaves raw (DEL, C1,
 * U+2028, U+2029, bidi controls) written as `\uXXXX` escapes. JSON already escapes C0, so the
 * result holds no control character at all. Valid JSON has these characters only inside
 * strings, where the escape means the same character.
 *
 * @param json Valid JSON text, for example a stored line.
 * @returns JSON text that parses to the same value.
 *
 * @example Usage
 * ```ts
 * import { terminalJson } from "./terminal_text.ts";
 * import assert from "node:assert/strict";
 *
 * assert.equal(terminalJson('{"t":"\u009b"}'), '{"t":"\\u009b"}');
 * assert.equal(terminalJson('{"n":-3.5}'), '{"n":-3.5}');
 * ```
 */
export function terminalJson(json: string): string {
  return json.replace(JSON_RAW, escapeChar);
}
