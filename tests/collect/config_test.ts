/**
 * The collector's config (docs/collect.md, "Config"): every refusal is one line naming the file,
 * the JSON path and the fix; the defaults of the common keys.
 *
 * @module
 */

import assert from "node:assert/strict";
import { CollectConfigError, parseCollectConfig } from "../../collect/config.ts";
import { INPUT_KINDS } from "../../collect/inputs/mod.ts";

const HTTP = { name: "wx", kind: "http", type: "weather", url: "http://127.0.0.1:8080/now" };

/** Bad configs, the JSON path each error must name, and a word of its fix. */
const CASES: [string, unknown, string, RegExp][] = [
  ["not JSON", "{inputs: []}", "the top level", /fix the JSON syntax/],
  ["not an object", [], "the top level", /write \{"inputs": \[\.\.\.\]\}/],
  ["an unknown top-level key", { inputs: [HTTP], input: [] }, "input", /holds only "inputs"/],
  ["no inputs", { inputs: [] }, "inputs", /"inputs": \[\{"name"/],
  ["an input that is not an object", { inputs: [HTTP, 3] }, "inputs[1]", /"kind"/],
  [
    "an unknown kind",
    { inputs: [{ ...HTTP, kind: "telnet" }] },
    "inputs[0].kind",
    /"http", "mqtt", "indi", "alpaca", "file"/,
  ],
  [
    "an unknown key",
    { inputs: [HTTP, { ...HTTP, name: "b", evry_s: 3 }] },
    "inputs[1].evry_s",
    /remove it; it takes name, kind/,
  ],
  [
    "every_s as text",
    { inputs: [HTTP, { ...HTTP, name: "b" }, { ...HTTP, name: "c", every_s: "30" }] },
    "inputs[2].every_s",
    /set "every_s": 30/,
  ],
  ["every_s of 0", { inputs: [{ ...HTTP, every_s: 0 }] }, "inputs[0].every_s", /set "every_s": 30/],
  ["a repeated name", { inputs: [HTTP, HTTP] }, "inputs[1].name", /a name of its own/],
  [
    "a name with a space",
    { inputs: [{ ...HTTP, name: "my station" }] },
    "inputs[0].name",
    /"weather-station"/,
  ],
  [
    "ts_format without ts",
    { inputs: [{ ...HTTP, ts_format: "unix" }] },
    "inputs[0].ts_format",
    /add "ts"/,
  ],
  [
    "a bad ts_format",
    { inputs: [{ ...HTTP, ts: "/t", ts_format: "epoch" }] },
    "inputs[0].ts_format",
    /iso, unix, unix_ms/,
  ],
  [
    "meta not an object",
    { inputs: [{ ...HTTP, meta: "north" }] },
    "inputs[0].meta",
    /"meta": \{"site"/,
  ],
  [
    "store_permanently as text",
    { inputs: [{ ...HTTP, store_permanently: "yes" }] },
    "inputs[0].store_permanently",
    /true or false/,
  ],
  [
    "merge_ms negative",
    { inputs: [{ ...HTTP, merge_ms: -1 }] },
    "inputs[0].merge_ms",
    /"merge_ms": 500/,
  ],
  [
    "http without a type",
    { inputs: [{ ...HTTP, type: undefined }] },
    "inputs[0].type",
    /"type": "weather"/,
  ],
  [
    "http with an ftp url",
    { inputs: [{ ...HTTP, url: "ftp://x/" }] },
    "inputs[0].url",
    /"url": "http/,
  ],
  [
    "a field that is not a JSON Pointer",
    { inputs: [{ ...HTTP, fields: { t: "obs.t" } }] },
    "inputs[0].fields.t",
    /"\/obs\/t"/,
  ],
  [
    "a field name that is odd",
    { inputs: [{ ...HTTP, fields: { "a b": 3 } }] },
    'inputs[0].fields["a b"]',
    /"a b": "\/path/,
  ],
  [
    "a bad header",
    { inputs: [{ ...HTTP, headers: { Accept: 1 } }] },
    "inputs[0].headers.Accept",
    /"Accept": "\.\.\."/,
  ],
  [
    "a file with no format",
    { inputs: [{ name: "f", kind: "file", type: "a", path: "/x" }] },
    "inputs[0].format",
    /boltwood, keyvalue, json/,
  ],
  [
    "a file with a bad zone",
    {
      inputs: [{
        name: "f",
        kind: "file",
        type: "a",
        path: "/x",
        format: "boltwood",
        tz: "Mars/Olympus",
      }],
    },
    "inputs[0].tz",
    /"Europe\/Madrid"/,
  ],
  [
    "a separator on a json file",
    {
      inputs: [{ name: "f", kind: "file", type: "a", path: "/x", format: "json", separator: ":" }],
    },
    "inputs[0].separator",
    /remove it/,
  ],
];

for (const [what, config, path, fix] of CASES) {
  Deno.test(`a config with ${what} is refused in one line naming the file, ${path} and the fix`, () => {
    const text = typeof config === "string" ? config : JSON.stringify(config);
    let error: unknown;
    try {
      parseCollectConfig(text, "/etc/collect.json", INPUT_KINDS);
    } catch (err) {
      error = err;
    }
    assert.ok(error instanceof CollectConfigError, `${what}: ${error}`);
    const message = error.message;
    assert.ok(!message.includes("\n"), message);
    assert.ok(
      message.startsWith(`Cannot use collect config /etc/collect.json: at ${path} `),
      message,
    );
    assert.match(message, fix);
  });
}

Deno.test("the common keys take their defaults: every_s 30, merge_ms 500, ts_format iso", () => {
  const config = parseCollectConfig(
    JSON.stringify({ inputs: [{ ...HTTP, ts: "/at" }] }),
    "c.json",
    INPUT_KINDS,
  );
  const settings = config.inputs[0]!.settings;
  assert.equal(settings.everyMs, 30_000);
  assert.equal(settings.mergeMs, 500);
  assert.equal(settings.tsFormat, "iso");
  assert.equal(settings.kind, "http");
});
