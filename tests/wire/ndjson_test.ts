/**
 * Tests of wire/ndjson.ts: building a line, stamping run_id, peeking seq and type, and splitting text
 * and bytes into lines at awkward chunk boundaries.
 * @module
 */

import assert from "node:assert/strict";
import {
  buildLine,
  buildTail,
  LINE_HEAD,
  LineSplitStream,
  LineSplitter,
  peekSeqAndType,
  readSeqAndType,
  TAIL_TS_OFFSET,
  withRunId,
} from "../../wire/ndjson.ts";

const TS = "2026-11-22T03:00:00.000Z";
const LINE = `{"seq":7,"ts":"${TS}","type":"weather","data":{"wind_mps":2.1},"meta":{}}`;

/** Feeds `chunks` to a splitter, calls end() unless told not to, and returns [line, no] pairs. */
function split(
  chunks: readonly (string | Uint8Array)[],
  { crlf = true, end = true } = {},
): [string, number][] {
  const out: [string, number][] = [];
  const splitter = new LineSplitter({ crlf });
  const onLine = (line: string, lineNo: number) => out.push([line, lineNo]);
  for (const chunk of chunks) splitter.push(chunk, onLine);
  if (end) splitter.end(onLine);
  return out;
}

function lines(chunks: readonly (string | Uint8Array)[], options = {}): string[] {
  return split(chunks, options).map(([line]) => line);
}

// --- building ------------------------------------------------------------------------------------

Deno.test("buildLine() and buildTail() build the line the service writes", () => {
  const tail = buildTail(TS, JSON.stringify("weather"), '{"wind_mps":2.1}', "{}");
  assert.equal(buildLine(7, tail), LINE);
});

Deno.test("buildLine() puts LINE_HEAD and the seq's digits before the tail", () => {
  assert.equal(buildLine(12345, ',"x"}'), `${LINE_HEAD}12345,"x"}`);
});

Deno.test("buildTail() puts the timestamp at TAIL_TS_OFFSET", () => {
  const tail = buildTail(TS, '"a"', "{}", "{}");
  assert.equal(tail.slice(TAIL_TS_OFFSET, TAIL_TS_OFFSET + TS.length), TS);
});

Deno.test("buildLine() builds lines that JSON.parse() reads back field by field", () => {
  const tail = buildTail(
    TS,
    JSON.stringify('we"ird\\type'),
    JSON.stringify({ a: [1, "ü"] }),
    JSON.stringify({ run_id: "001" }),
  );
  assert.deepEqual(JSON.parse(buildLine(3, tail)), {
    seq: 3,
    ts: TS,
    type: 'we"ird\\type',
    data: { a: [1, "ü"] },
    meta: { run_id: "001" },
  });
});

// --- run_id --------------------------------------------------------------------------------------

Deno.test("withRunId() turns empty meta into an object holding only run_id", () => {
  assert.equal(withRunId("{}", "night-1"), '{"run_id":"night-1"}');
});

Deno.test("withRunId() appends run_id after the fields of non-empty meta", () => {
  assert.equal(withRunId('{"a":1,"b":{}}', "night-1"), '{"a":1,"b":{},"run_id":"night-1"}');
});

Deno.test("withRunId() escapes the run id as a JSON string", () => {
  assert.deepEqual(JSON.parse(withRunId("{}", 'a"b')), { run_id: 'a"b' });
});

// --- peeking -------------------------------------------------------------------------------------

Deno.test("peekSeqAndType() reads seq and type from a canonical line", () => {
  assert.deepEqual(peekSeqAndType(LINE), { seq: 7, type: "weather" });
});

Deno.test("peekSeqAndType() unescapes a type with quotes and backslashes", () => {
  const type = 'a"b\\c\u00e9';
  const line = buildLine(
    1,
    buildTail(TS, JSON.stringify(type), "{}", "{}"),
  );
  assert.deepEqual(peekSeqAndType(line), { seq: 1, type });
});

Deno.test("peekSeqAndType() returns undefined for fields in another order", () => {
  assert.equal(
    peekSeqAndType(`{"ts":"${TS}","seq":7,"type":"weather","data":{},"meta":{}}`),
    undefined,
  );
});

Deno.test("peekSeqAndType() returns undefined for a line with spaces after the colons", () => {
  assert.equal(peekSeqAndType(`{"seq": 7, "ts": "${TS}", "type": "weather"}`), undefined);
});

Deno.test("peekSeqAndType() returns undefined for a line that does not end in a brace", () => {
  assert.equal(peekSeqAndType(`${LINE}\r`), undefined);
});

Deno.test("peekSeqAndType() returns undefined for an empty line", () => {
  assert.equal(peekSeqAndType(""), undefined);
});

Deno.test("peekSeqAndType() returns undefined for a line that is not JSON", () => {
  assert.equal(peekSeqAndType("not json"), undefined);
});

Deno.test("peekSeqAndType() returns undefined for a canonical head with a broken type", () => {
  assert.equal(
    peekSeqAndType(`{"seq":1,"ts":"${TS}","type":"a\\x","data":{},"meta":{}}`),
    undefined,
  );
});

Deno.test("readSeqAndType() reads a canonical line through the peek", () => {
  assert.deepEqual(readSeqAndType(LINE), { seq: 7, type: "weather" });
});

Deno.test("readSeqAndType() reads a non-canonical line by parsing it", () => {
  assert.deepEqual(readSeqAndType(`{"type":"dome","data":{},"seq":9}`), { seq: 9, type: "dome" });
});

Deno.test("readSeqAndType() returns undefined without a safe-integer seq or a string type", () => {
  assert.equal(readSeqAndType(`{"seq":1.5,"type":"dome"}`), undefined);
  assert.equal(readSeqAndType(`{"seq":1,"type":3}`), undefined);
  assert.equal(readSeqAndType(`[1,2]`), undefined);
  assert.equal(readSeqAndType(`{"seq":1,`), undefined);
});

// --- splitting -----------------------------------------------------------------------------------

Deno.test("LineSplitter joins a line that spans chunks", () => {
  assert.deepEqual(lines(["a\nb", "c\r\n"]), ["a", "bc"]);
});

Deno.test("LineSplitter yields a final line that has no newline on end()", () => {
  assert.deepEqual(lines(["a\nlast"]), ["a", "last"]);
});

Deno.test("LineSplitter holds back a final line without newline until end()", () => {
  assert.deepEqual(lines(["a\ntorn"], { end: false }), ["a"]);
});

Deno.test("LineSplitter yields nothing more on end() after a final newline", () => {
  assert.deepEqual(lines(["a\n"]), ["a"]);
});

Deno.test("LineSplitter yields empty lines as empty strings", () => {
  assert.deepEqual(lines(["\n\na\n", "\n"]), ["", "", "a", ""]);
});

Deno.test("LineSplitter numbers lines from 1, empty ones included", () => {
  assert.deepEqual(split(["x\n\ny", "\nz"]), [["x", 1], ["", 2], ["y", 3], ["z", 4]]);
});

Deno.test("LineSplitter.lines counts the lines handed out", () => {
  const splitter = new LineSplitter();
  splitter.push("a\nb\nc", () => {});
  assert.equal(splitter.lines, 2);
});

Deno.test("LineSplitter drops the \\r of a \\r\\n split between two chunks", () => {
  assert.deepEqual(lines(["a\r", "\nb\r", "\n"]), ["a", "b"]);
});

Deno.test("LineSplitter drops the \\r of a final line that ends in \\r", () => {
  assert.deepEqual(lines(["a\nb\r"]), ["a", "b"]);
});

Deno.test("LineSplitter keeps a \\r that is not before a newline", () => {
  assert.deepEqual(lines(["a\rb\n"]), ["a\rb"]);
});

Deno.test("LineSplitter with crlf false keeps the \\r of \\r\\n in the line", () => {
  assert.deepEqual(lines(["a\r", "\n"], { crlf: false }), ["a\r"]);
});

Deno.test("LineSplitter decodes a multi-byte character split between byte chunks", () => {
  const bytes = new TextEncoder().encode("é€😀\nx\n");
  for (let cut = 1; cut < 9; cut++) {
    assert.deepEqual(
      lines([bytes.subarray(0, cut), bytes.subarray(cut)]),
      ["é€😀", "x"],
      `cut ${cut}`,
    );
  }
});

Deno.test("LineSplitter decodes bytes fed one at a time", () => {
  const bytes = new TextEncoder().encode("ä\r\nb😀\n");
  assert.deepEqual(lines([...bytes].map((b) => Uint8Array.of(b))), ["ä", "b😀"]);
});

Deno.test("LineSplitter drops a leading byte order mark in bytes", () => {
  assert.deepEqual(lines([Uint8Array.of(0xef, 0xbb, 0xbf, 0x61, 0x0a)]), ["a"]);
});

Deno.test("LineSplitter turns an invalid byte into U+FFFD", () => {
  assert.deepEqual(lines([Uint8Array.of(0x61, 0xff, 0x0a)]), ["a\ufffd"]);
});

Deno.test("LineSplitter turns a character cut off at the end of the input into U+FFFD", () => {
  assert.deepEqual(lines([Uint8Array.of(0x61, 0x0a, 0xe2, 0x82)]), ["a", "\ufffd"]);
});

Deno.test("LineSplitter joins a long line from many chunks", () => {
  const chunks = Array.from({ length: 1000 }, () => "x".repeat(100));
  assert.deepEqual(lines([...chunks, "\n"]), ["x".repeat(100_000)]);
});

Deno.test("LineSplitStream yields the lines of text chunks, the last one without newline", async () => {
  const stream = ReadableStream.from(["a\nb", "c\r\n", "\nd"]).pipeThrough(new LineSplitStream());
  assert.deepEqual(await Array.fromAsync(stream), ["a", "bc", "", "d"]);
});

Deno.test("LineSplitStream decodes bytes split inside a character", async () => {
  const bytes = new TextEncoder().encode("ü\n");
  const stream = ReadableStream.from([bytes.subarray(0, 1), bytes.subarray(1)])
    .pipeThrough(new LineSplitStream());
  assert.deepEqual(await Array.fromAsync(stream), ["ü"]);
});

Deno.test("LineSplitStream with crlf false keeps the \\r in lines", async () => {
  const stream = ReadableStream.from(["a\r\n"]).pipeThrough(new LineSplitStream({ crlf: false }));
  assert.deepEqual(await Array.fromAsync(stream), ["a\r"]);
});

Deno.test("LineSplitter with maxLine skips an over-long line without gathering it, and counts it", () => {
  for (const step of [1, 3, 7, 1000]) {
    const text = `a\n${"x".repeat(50)}\nb\n${"y".repeat(10)}\n${"z".repeat(40)}`;
    const lines: [string, number][] = [];
    const overlong: number[] = [];
    const splitter = new LineSplitter({ maxLine: 20, onOverlong: (n) => overlong.push(n) });
    for (let at = 0; at < text.length; at += step) {
      splitter.push(text.slice(at, at + step), (line, n) => lines.push([line, n]));
    }
    splitter.end((line, n) => lines.push([line, n]));
    assert.deepEqual(lines, [["a", 1], ["b", 3], ["y".repeat(10), 4]], `step ${step}`);
    assert.deepEqual(overlong, [2, 5], `step ${step}`);
  }
});
