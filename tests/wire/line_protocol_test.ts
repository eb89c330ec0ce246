/**
 * The line-protocol parser (`wire/line_protocol.ts`): the escaping table of InfluxDB's
 * line-protocol reference, every precision, every field type, comments, blank lines and CRLF, and
 * each refusal with its line number and reason. @module
 */

import assert from "node:assert/strict";
import { Rng } from "../_shared/fault_util.ts";
import {
  type LinePoint,
  type LinePrecision,
  type LineRefusal,
  MAX_LINE_FIELDS,
  MAX_LINE_TAGS,
  parseLineProtocol,
  parseLines,
} from "../../wire/line_protocol.ts";

/** The one point of a line that must parse. */
function point(line: string, precision?: LinePrecision): LinePoint {
  const { points, refusals } = parseLines(line, precision ? { precision } : {});
  assert.deepEqual(refusals, [], `expected ${JSON.stringify(line)} to parse`);
  assert.equal(points.length, 1);
  return points[0]!;
}

/** The one refusal of a line that must not parse. */
function refusal(line: string | Uint8Array, precision?: LinePrecision): LineRefusal {
  const { points, refusals } = parseLines(line, precision ? { precision } : {});
  assert.deepEqual(points, [], `expected ${JSON.stringify(line)} to be refused`);
  assert.equal(refusals.length, 1);
  return refusals[0]!;
}

// --- the escaping table of the reference ---------------------------------------------------------

Deno.test("parseLines() reads an escaped space in a measurement", () => {
  assert.equal(point('my\\ Measurement fieldKey="string value"').measurement, "my Measurement");
});

Deno.test("parseLines() reads an escaped comma in a measurement, and keeps = and \\= there as written", () => {
  assert.equal(point("a\\,b f=1").measurement, "a,b");
  assert.equal(point("a=b f=1").measurement, "a=b");
  assert.equal(point("a\\=b f=1").measurement, "a\\=b");
});

Deno.test("parseLines() reads escaped double quotes in a string field value", () => {
  assert.deepEqual(point('myMeasurement fieldKey="\\"string\\" within a string"').fields, {
    fieldKey: '"string" within a string',
  });
});

Deno.test("parseLines() reads escaped spaces in tag keys and tag values", () => {
  assert.deepEqual(
    point("myMeasurement,tag\\ Key1=tag\\ Value1,tag\\ Key2=tag\\ Value2 fieldKey=100").tags,
    { "tag Key1": "tag Value1", "tag Key2": "tag Value2" },
  );
});

Deno.test("parseLines() reads escaped commas and equals signs in tag keys, tag values and field keys", () => {
  const p = point("m,a\\,b\\=c=d\\,e\\=f g\\,h\\=i\\ j=1");
  assert.deepEqual(p.tags, { "a,b=c": "d,e=f" });
  assert.deepEqual(p.fields, { "g,h=i j": 1 });
});

Deno.test("parseLines() reads emoji in tags and string fields", () => {
  const p = point('myMeasurement,tagKey=🍭 fieldKey="Launch 🚀" 1556813561098000000');
  assert.deepEqual(p.tags, { tagKey: "🍭" });
  assert.deepEqual(p.fields, { fieldKey: "Launch 🚀" });
  assert.equal(p.timeMs, 1556813561098);
});

Deno.test("parseLines() reads backslashes as the reference's table says: two are one, one alone is itself", () => {
  // \ -> \, \\ -> \, \\\ -> \\, \\\\ -> \\, \\\\\ -> \\\, \\\\\\ -> \\\
  const table: [number, number][] = [[1, 1], [2, 1], [3, 2], [4, 2], [5, 3], [6, 3]];
  for (const [written, read] of table) {
    const bs = "\\".repeat(written), want = `my${"\\".repeat(read)}Measurement`;
    assert.equal(point(`my${bs}Measurement f=1`).measurement, want, `${written} in a measurement`);
    assert.deepEqual(point(`m,k=my${bs}Measurement f=1`).tags, { k: want }, `${written} in a tag`);
    assert.deepEqual(point(`m my${bs}Measurement=1`).fields, { [want]: 1 }, `${written} in a key`);
    assert.deepEqual(
      point(`m f="my${bs}Measurement"`).fields,
      { f: want },
      `${written} in a string`,
    );
  }
});

Deno.test("parseLines() keeps commas, spaces, equals signs and other backslashes inside a string as written", () => {
  assert.deepEqual(point('m f="a, b=c \\n \\, d",g=1i').fields, { f: "a, b=c \\n \\, d", g: 1 });
});

Deno.test("parseLines() ends a string at a quote after an escaped backslash", () => {
  assert.deepEqual(point('m f="a\\\\",g=t').fields, { f: "a\\", g: true });
});

Deno.test("parseLines() ends a name at a comma after an escaped backslash", () => {
  const p = point("m\\\\,k=v f=1");
  assert.equal(p.measurement, "m\\");
  assert.deepEqual(p.tags, { k: "v" });
});

// --- precisions --------------------------------------------------------------------------------

Deno.test("parseLines() reads the same instant at every precision, truncated to the millisecond", () => {
  const at = Date.parse("2023-11-14T22:13:20.123Z");
  const cases: [LinePrecision, string, number][] = [
    ["ns", "1700000000123456789", at],
    ["us", "1700000000123456", at],
    ["ms", "1700000000123", at],
    ["s", "1700000000", at - 123],
    ["m", "28333333", 28333333 * 60_000],
    ["h", "472222", 472222 * 3_600_000],
  ];
  for (const [precision, ts, ms] of cases) {
    assert.equal(point(`m f=1 ${ts}`, precision).timeMs, ms, precision);
  }
});

Deno.test("parseLines() reads nanoseconds when no precision is given", () => {
  assert.equal(point("m f=1 1000000").timeMs, 1);
  assert.equal(point("m f=1 999999").timeMs, 0);
});

Deno.test("parseLines() truncates a timestamp before the epoch toward the past", () => {
  assert.equal(point("m f=1 -1").timeMs, -1);
  assert.equal(point("m f=1 -1000000").timeMs, -1);
  assert.equal(point("m f=1 -1000001").timeMs, -2);
  assert.ok(Object.is(point("m f=1 -0").timeMs, 0));
});

Deno.test("parseLines() reads leading zeros in a timestamp", () => {
  assert.equal(point("m f=1 0000000000000000000000000001000000").timeMs, 1);
});

Deno.test("parseLines() leaves the time of a line without a timestamp to the receiver", () => {
  assert.equal(point("m f=1").timeMs, undefined);
  assert.equal(point("m f=1   ").timeMs, undefined);
});

Deno.test("parseLines() refuses a timestamp outside InfluxDB's range", () => {
  assert.match(refusal("m f=1 9999999999999", "s").reason, /^timestamp out of range/);
  assert.match(refusal("m f=1 99999999999999999999").reason, /^timestamp out of range/);
  assert.equal(point("m f=1 9223372036854775806").timeMs, 9223372036854);
  assert.equal(point("m f=1 -9223372036854775806").timeMs, -9223372036855);
});

Deno.test("parseLines() refuses a timestamp that is not an integer, and text after it", () => {
  assert.match(refusal("m f=1 12a").reason, /^bad timestamp/);
  assert.match(refusal("m f=1 1.5").reason, /^bad timestamp/);
  assert.match(refusal("m f=1 -").reason, /^bad timestamp/);
  assert.match(refusal("m f=1 1 2").reason, /^invalid point: text after the timestamp/);
});

// --- field types -------------------------------------------------------------------------------

Deno.test("parseLines() reads a line of every field type", () => {
  const p = point('m float=1.5,int=-3i,uint=7u,string="open",bool=true 1');
  assert.deepEqual(p.fields, { float: 1.5, int: -3, uint: 7, string: "open", bool: true });
});

Deno.test("parseLines() reads every way of writing a float", () => {
  const floats: [string, number][] = [
    ["1", 1],
    ["-1", -1],
    ["1.5", 1.5],
    ["-1.5", -1.5],
    [".5", 0.5],
    ["-.5", -0.5],
    ["1.", 1],
    ["1e3", 1000],
    ["1E-3", 0.001],
    ["-1.5e+3", -1500],
    ["007", 7],
  ];
  for (const [text, value] of floats) {
    assert.deepEqual(point(`m f=${text}`).fields, { f: value }, text);
  }
});

Deno.test("parseLines() reads every spelling of true and false", () => {
  for (const t of ["t", "T", "true", "True", "TRUE"]) {
    assert.deepEqual(point(`m b=${t}`).fields, { b: true }, t);
  }
  for (const f of ["f", "F", "false", "False", "FALSE"]) {
    assert.deepEqual(point(`m b=${f}`).fields, { b: false }, f);
  }
});

Deno.test("parseLines() refuses numbers and booleans written otherwise", () => {
  for (const bad of ["1.2.3", "1e", "1e+", "-", ".", "1.5i", "1e3i", "-i", "1x", "0x10", "1_000"]) {
    assert.match(refusal(`m f=${bad}`).reason, /^invalid number/, bad);
  }
  for (const bad of ["tru", "yes", "+1", "NaN", "Inf", "abc", "truE"]) {
    assert.match(
      refusal(`m f=${bad}`).reason,
      /^invalid field value .*a string needs double quotes/,
      bad,
    );
  }
  assert.match(refusal("m f=-1u").reason, /unsigned integer \(u\) cannot be negative/);
  assert.match(
    refusal("m f=1e999").reason,
    /^invalid float for field "f": 1e999 is beyond a 64-bit float/,
  );
});

Deno.test("parseLines() stores integers up to 2^53 - 1 exactly and refuses larger ones, naming why", () => {
  assert.deepEqual(point("m i=9007199254740991i,j=-9007199254740991i,u=9007199254740991u").fields, {
    i: 9007199254740991,
    j: -9007199254740991,
    u: 9007199254740991,
  });
  assert.match(
    refusal("m i=9007199254740992i").reason,
    /^integer field "i" is 9007199254740992i, beyond ±9007199254740991, the largest integer a JSON number holds exactly; send it as a float \(without the i\) or as a string$/,
  );
  assert.match(refusal("m i=-9223372036854775808i").reason, /beyond ±9007199254740991/);
  assert.match(refusal("m u=18446744073709551615u").reason, /beyond ±9007199254740991/);
  assert.match(refusal("m i=9223372036854775808i").reason, /out of the range of a 64-bit integer$/);
  assert.match(
    refusal("m i=-9223372036854775809i").reason,
    /out of the range of a 64-bit integer$/,
  );
  assert.match(
    refusal("m u=18446744073709551616u").reason,
    /out of the range of a 64-bit unsigned integer$/,
  );
});

Deno.test("parseLines() keeps a field named __proto__ as a field", () => {
  const p = point("m,__proto__=x __proto__=1");
  assert.deepEqual(Object.keys(p.fields), ["__proto__"]);
  assert.equal(JSON.stringify(p.fields), '{"__proto__":1}');
  assert.equal(JSON.stringify(p.tags), '{"__proto__":"x"}');
  assert.equal(Object.getPrototypeOf(p.fields), Object.prototype);
});

Deno.test("parseLines() keeps the last value of a field given twice, in its first place", () => {
  assert.equal(JSON.stringify(point("m a=1,b=2,a=3").fields), '{"a":3,"b":2}');
});

Deno.test("parseLines() takes more than one space or a tab between the parts of a line", () => {
  const p = point("  m,k=v   f=1,g=2\t 1000000  ");
  assert.deepEqual(p.fields, { f: 1, g: 2 });
  assert.equal(p.timeMs, 1);
});

// --- lines -------------------------------------------------------------------------------------

Deno.test("parseLines() skips comments and blank lines, takes CRLF, and counts every line", () => {
  const { points, refusals } = parseLines("# a comment\r\n\r\n  \t\n   # indented\nm f=1\r\nm g=2");
  assert.deepEqual(refusals, []);
  assert.deepEqual(points.map((p) => [p.line, p.fields]), [[5, { f: 1 }], [6, { g: 2 }]]);
});

Deno.test("parseLines() does not read a # inside a line as a comment", () => {
  assert.deepEqual(point('m,k=#1 f="# not a comment"').fields, { f: "# not a comment" });
});

Deno.test("parseLines() names the line and the reason of every refusal, and goes on with the next line", () => {
  const body = [
    "ok f=1", // 1
    "cpu", // 2
    ",a=b f=1", // 3
    "m,=b f=1", // 4
    "m,a= f=1", // 5
    "m,a f=1", // 6
    "m,a=b=c f=1", // 7
    "m,a=1,a=2 f=1", // 8
    "m =1", // 9
    "m f=", // 10
    "m f=,g=1", // 11
    'm f="abc', // 12
    "m f", // 13
    "m,a=b", // 14
    'm f="a"x', // 15
    "ok g=2", // 16
  ].join("\n");
  const { points, refusals } = parseLines(body);
  assert.deepEqual(points.map((p) => p.line), [1, 16]);
  assert.deepEqual(refusals.map((r) => [r.line, r.reason]), [
    [2, "missing fields"],
    [3, "missing measurement"],
    [4, "missing tag key"],
    [5, 'missing tag value for tag key "a"'],
    [6, 'missing tag value for tag key "a"'],
    [7, 'invalid tag format: an unescaped "=" in the value of tag "a"'],
    [8, 'duplicate tags: "a" is given twice'],
    [9, "missing field key"],
    [10, 'missing field value for field "f"'],
    [11, 'missing field value for field "f"'],
    [12, 'unbalanced quotes in the value of field "f"'],
    [13, 'invalid field format: field key "f" has no "=" and value'],
    [14, "missing fields"],
    [15, 'invalid field format: text after the closing quote of field "f"'],
  ]);
  assert.equal(refusals[0]!.text, "cpu");
});

Deno.test("parseLines() ends a line at a newline even inside a string", () => {
  const { points, refusals } = parseLines('m f="two\nlines"');
  assert.deepEqual(points, []);
  assert.deepEqual(refusals.map((r) => [r.line, r.reason]), [
    [1, 'unbalanced quotes in the value of field "f"'],
    [2, "missing fields"],
  ]);
});

Deno.test("parseLines() quotes at most 80 characters of a refused line, control characters made visible", () => {
  const long = refusal(`m${"x".repeat(200)}`);
  assert.equal(long.text, `m${"x".repeat(79)}…`);
  assert.equal(refusal("m\u0001 f=").text, "m\\u0001 f=");
  assert.equal(refusal(`${"m".repeat(79)}🚀${"x".repeat(10)}`).text, `${"m".repeat(79)}…`);
});

Deno.test("parseLines() refuses a line with a NUL byte and keeps the others", () => {
  const { points, refusals } = parseLines("a f=1\nb f=\0\n\0c f=1\nd f=2");
  assert.deepEqual(points.map((p) => p.measurement), ["a", "d"]);
  assert.deepEqual(refusals.map((r) => [r.line, r.reason]), [
    [2, "the line has a NUL byte; line protocol is text"],
    [3, "the line has a NUL byte; line protocol is text"],
  ]);
  assert.equal(refusals[0]!.text, "b f=\\u0000");
});

Deno.test("parseLines() refuses a line that is not UTF-8 and reads the others", () => {
  const enc = new TextEncoder();
  const body = new Uint8Array([
    ...enc.encode('a f=1\nb f="'),
    0xff,
    0xfe,
    ...enc.encode('"\nc f=2\n'),
  ]);
  const { points, refusals } = parseLines(body);
  assert.deepEqual(points.map((p) => [p.line, p.measurement]), [[1, "a"], [3, "c"]]);
  assert.deepEqual(refusals.map((r) => [r.line, r.reason]), [
    [2, "the line is not valid UTF-8; send line protocol as UTF-8 text"],
  ]);
});

Deno.test(`parseLines() refuses a line with more than ${MAX_LINE_FIELDS} fields or ${MAX_LINE_TAGS} tags`, () => {
  const fields = (n: number) => Array.from({ length: n }, (_, i) => `f${i}=1`).join(",");
  const tags = (n: number) => Array.from({ length: n }, (_, i) => `,t${i}=v`).join("");
  assert.equal(Object.keys(point(`m ${fields(MAX_LINE_FIELDS)}`).fields).length, MAX_LINE_FIELDS);
  assert.equal(
    refusal(`m ${fields(MAX_LINE_FIELDS + 1)}`).reason,
    `the line has more than ${MAX_LINE_FIELDS} fields`,
  );
  assert.equal(Object.keys(point(`m${tags(MAX_LINE_TAGS)} f=1`).tags!).length, MAX_LINE_TAGS);
  assert.equal(
    refusal(`m${tags(MAX_LINE_TAGS + 1)} f=1`).reason,
    `the line has more than ${MAX_LINE_TAGS} tags`,
  );
});

Deno.test("parseLines() refuses a measurement the service does not take as an event type", () => {
  assert.match(
    refusal(`${"m".repeat(129)} f=1`).reason,
    /^the measurement is not a valid event type: it must be 1 to 128 characters long; it has 129/,
  );
  assert.match(refusal("telemetry.safety f=1").reason, /is reserved/);
  assert.match(refusal(". f=1").reason, /cannot be "\." or "\.\."/);
  assert.match(refusal("a\tb\u0007 f=1").reason, /control character/);
});

Deno.test("parseLineProtocol() hands the lines over in order and counts them", () => {
  const seen: string[] = [];
  const counts = parseLineProtocol(new TextEncoder().encode("a f=1\nbad\nb f=2\n"), {
    point: (p) => seen.push(`point ${p.line}`),
    refuse: (r) => seen.push(`refusal ${r.line}`),
  });
  assert.deepEqual(seen, ["point 1", "refusal 2", "point 3"]);
  assert.deepEqual(counts, { points: 2, refused: 1 });
});

Deno.test("parseLineProtocol() reads an empty body as no lines", () => {
  assert.deepEqual(parseLines(""), { points: [], refusals: [] });
  assert.deepEqual(parseLines("\n\n"), { points: [], refusals: [] });
});

Deno.test("parseLines() reads every decimal float as Number() reads its text, over 200,000 seeded ones", () => {
  const rng = new Rng(37);
  const digit = () => String.fromCharCode(0x30 + Math.floor(rng.next() * 10));
  const texts: string[] = [
    "0",
    "-0",
    "0.0",
    "-0.0",
    ".5",
    "5.",
    "-.5",
    "000123.4500",
    "999999999999999",
    "9999999999999999",
    "0.1",
    "0.3",
    "123456789012345.6",
    "1.000000000000001",
  ];
  for (let n = 0; n < 200_000; n++) {
    const length = 1 + Math.floor(rng.next() * 20); // up to 20 digits: past the fast path's 15 too
    let body = "";
    for (let k = 0; k < length; k++) body += digit();
    const dot = Math.floor(rng.next() * (length + 2)); // past the end: no dot
    const text = dot <= length ? `${body.slice(0, dot)}.${body.slice(dot)}` : body;
    texts.push(rng.next() < 0.3 ? `-${text}` : text);
  }
  const lines = texts.map((t, i) => `m f=${t} ${i}`).join("\n");
  const { points, refusals } = parseLines(lines);
  assert.deepEqual(refusals, []);
  assert.equal(points.length, texts.length);
  for (let i = 0; i < texts.length; i++) {
    const got = points[i]!.fields.f;
    assert.ok(Object.is(got, Number(texts[i])), `${texts[i]}: ${got} is not ${Number(texts[i])}`);
  }
});
