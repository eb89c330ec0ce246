/**
 * Names on MQTT (docs/publish.md, "Names"): a type as one topic level, a name as part of a Home
 * Assistant id, a name inside a Jinja template.
 *
 * @module
 */

import assert from "node:assert/strict";
import { idPart, jinjaString, topicLevel } from "../../publish.ts";

/** Names with every character a topic level or an id cannot hold as it is. */
const HOSTILE = [
  "weather",
  "roof/north",
  "roof%2Fnorth",
  "#",
  "+",
  "a+b#c",
  "sky quality",
  "température ☁",
  "100%",
  "$SYS",
  "tab\there",
  "x\u0000y",
  "lone\ud800surrogate",
  "😀",
  ".",
];

Deno.test("topicLevel() gives each hostile name a level with no separator, wildcard or control character", () => {
  for (const name of HOSTILE) {
    const level = topicLevel(name);
    // deno-lint-ignore no-control-regex
    assert.doesNotMatch(level, /[/+#\u0000-\u001f]/, name);
    assert.ok(level.length > 0 && level.isWellFormed(), name);
  }
});

Deno.test("topicLevel() keeps two different names apart, the escape character included", () => {
  const levels = HOSTILE.map(topicLevel);
  assert.equal(new Set(levels).size, HOSTILE.length);
  assert.notEqual(topicLevel("roof/north"), topicLevel("roof%2Fnorth"));
});

Deno.test("topicLevel() leaves spaces and any script as they are", () => {
  assert.equal(topicLevel("sky quality"), "sky quality");
  assert.equal(topicLevel("température ☁"), "température ☁");
});

Deno.test("idPart() keeps a name of letters, digits, _ and - as it is", () => {
  assert.equal(idPart("wind_mps"), "wind_mps");
  assert.equal(idPart("north-roof"), "north-roof");
});

Deno.test("idPart() gives each hostile name an id part Home Assistant accepts, and keeps them apart", () => {
  const parts = HOSTILE.map(idPart);
  for (const part of parts) assert.match(part, /^[A-Za-z0-9_-]+$/);
  assert.equal(new Set(parts).size, HOSTILE.length);
});

Deno.test("idPart() folds accents to ASCII so the id still reads like the name", () => {
  assert.match(idPart("température ☁"), /^temperature-[0-9a-f]{8}$/);
});

Deno.test("jinjaString() writes any text as a literal no quote, backslash or brace can end", () => {
  for (const text of ["it's", 'a"b', "a\\b", "{{ x }}", "{% if %}", "é😀", "new\nline"]) {
    assert.match(jinjaString(text), /^'[A-Za-z0-9 _.\\-]*'$/, text);
  }
});
