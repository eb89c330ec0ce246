/**
 * Names on MQTT (docs/publish.md, "Names"): an event type becomes one topic level, and a type or
 * field name becomes part of a Home Assistant object id and unique id. Types may hold any
 * printable character (`/`, `#`, `+`, spaces, any script) and registry fields any character, so
 * both mappings are written to stay valid and to keep two names apart.
 *
 * @module
 */

import { createHash } from "node:crypto";

/**
 * The characters a topic level may not hold as they are: `%` (the escape itself), the level
 * separator `/`, the wildcards `+` and `#`, control characters (which MQTT forbids or advises
 * against) and unpaired UTF-16 surrogates (which UTF-8 cannot carry).
 */
// deno-lint-ignore no-control-regex
const TOPIC_UNSAFE = /[%/+#\u0000-\u001f\u007f-\u009f]|[\ud800-\udfff]/gu;

/**
 * One topic level for an event type: `%`, `/`, `+`, `#` and control characters as `%XX` (their
 * code in hexadecimal, as in a URL), an unpaired surrogate as `%uXXXX`; every other character
 * (spaces, any script) kept. Two types never share a level, and the level is never empty.
 *
 * @param name The type.
 * @returns The topic level.
 *
 * @example Usage
 * ```ts
 * import { topicLevel } from "./names.ts";
 * import assert from "node:assert/strict";
 *
 * assert.equal(topicLevel("weather"), "weather");
 * assert.equal(topicLevel("roof/north #2+"), "roof%2Fnorth %232%2B");
 * assert.equal(topicLevel("100%"), "100%25");
 * assert.equal(topicLevel("température"), "température");
 * ```
 */
export function topicLevel(name: string): string {
  return name.replace(TOPIC_UNSAFE, (c) => {
    const code = c.charCodeAt(0);
    return c.length === 1 && code >= 0xd800 && code <= 0xdfff
      ? `%u${hex(code, 4)}`
      : `%${hex(code, 2)}`;
  });
}

function hex(code: number, digits: number): string {
  return code.toString(16).toUpperCase().padStart(digits, "0");
}

/** What Home Assistant accepts in an object id, and a name kept as it is. */
const PLAIN_ID = /^[A-Za-z0-9_-]{1,64}$/;

/**
 * A name as part of a Home Assistant object id or unique id, which may hold only `A-Z a-z 0-9 _
 * -`: the name itself when it is 1 to 64 of those; else its letters and digits folded to ASCII
 * (accents dropped, every other run of characters a `-`, at most 40 characters) and `-` with the
 * first 8 hexadecimal digits of the name's SHA-256, so two names stay apart.
 *
 * @param name A type or a field.
 * @returns The id part.
 *
 * @example Usage
 * ```ts
 * import { idPart } from "./names.ts";
 * import assert from "node:assert/strict";
 *
 * assert.equal(idPart("wind_mps"), "wind_mps");
 * assert.match(idPart("roof/north"), /^roof-north-[0-9a-f]{8}$/);
 * assert.match(idPart("température"), /^temperature-[0-9a-f]{8}$/);
 * assert.notEqual(idPart("a b"), idPart("a/b"));
 * ```
 */
export function idPart(name: string): string {
  if (PLAIN_ID.test(name)) return name;
  const folded = name.normalize("NFKD").replace(/\p{M}/gu, "")
    .replace(/[^A-Za-z0-9_]+/g, "-").replace(/^-+|-+$/g, "").slice(0, 40).replace(/-+$/, "");
  return `${folded === "" ? "x" : folded}-${shortHash(name)}`;
}

/**
 * The first 8 hexadecimal digits of the SHA-256 of `text` (its UTF-8, an unpaired surrogate as
 * U+FFFD).
 *
 * @param text Any text.
 * @returns 8 characters `0-9a-f`.
 *
 * @example Usage
 * ```ts
 * import { shortHash } from "./names.ts";
 * import assert from "node:assert/strict";
 *
 * assert.equal(shortHash("weather"), shortHash("weather"));
 * assert.equal(shortHash("weather").length, 8);
 * ```
 */
export function shortHash(text: string): string {
  return createHash("sha256").update(text.toWellFormed()).digest("hex").slice(0, 8);
}

/**
 * A Jinja string literal (Home Assistant's templates) for any text: single-quoted, with every
 * character but letters, digits, space, `_`, `-` and `.` written as a `\uXXXX` or `\UXXXXXXXX`
 * escape, so no quote, backslash or brace of a field name can end the literal or the template.
 *
 * @param text The text.
 * @returns The literal, quotes included.
 *
 * @example Usage
 * ```ts
 * import { jinjaString } from "./names.ts";
 * import assert from "node:assert/strict";
 *
 * assert.equal(jinjaString("wind_mps"), "'wind_mps'");
 * assert.equal(jinjaString("it's {x}"), "'it\\u0027s \\u007bx\\u007d'");
 * ```
 */
export function jinjaString(text: string): string {
  let out = "";
  for (const c of text.toWellFormed()) {
    if (/^[A-Za-z0-9 _.-]$/.test(c)) {
      out += c;
      continue;
    }
    const code = c.codePointAt(0)!;
    out += code > 0xffff
      ? `\\U${code.toString(16).padStart(8, "0")}`
      : `\\u${code.toString(16).padStart(4, "0")}`;
  }
  return `'${out}'`;
}
