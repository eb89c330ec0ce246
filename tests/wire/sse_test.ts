import assert from "node:assert/strict";
import {
  type ParsedServerSentEvent,
  type ServerSentEventMessage,
  ServerSentEventParserStream,
  ServerSentEventStream,
} from "../../wire/sse.ts";

/** What `GET /stream` sends, with the awkward cases the round trip must survive. */
const MESSAGES: ServerSentEventMessage[] = [
  { event: "snapshot", data: '{"weather":{"seq":1}}' },
  { comment: "keepalive" },
  { event: "telemetry", id: "site:2", data: '{"type":"weather","data":{"t":"12 °C"}}' },
  { event: "run", data: "first line\nsecond line\n\nafter a blank line" },
  { data: "no event name, the id persists" },
  { event: "telemetry", id: "run:m31-1:1", data: "", comment: "a comment inside a message" },
  { event: "telemetry", id: 3, data: "  leading spaces and a colon: kept 🔭" },
];

/** What the parser must yield for {@linkcode MESSAGES}. */
const EXPECTED: ParsedServerSentEvent[] = [
  { event: "snapshot", data: '{"weather":{"seq":1}}', id: "" },
  { event: "telemetry", data: '{"type":"weather","data":{"t":"12 °C"}}', id: "site:2" },
  { event: "run", data: "first line\nsecond line\n\nafter a blank line", id: "site:2" },
  { event: "message", data: "no event name, the id persists", id: "site:2" },
  { event: "telemetry", data: "", id: "run:m31-1:1" },
  { event: "telemetry", data: "  leading spaces and a colon: kept 🔭", id: "3" },
];

async function encode(messages: ServerSentEventMessage[]): Promise<Uint8Array> {
  const chunks = await Array.fromAsync(
    ReadableStream.from(messages).pipeThrough(new ServerSentEventStream()),
  );
  const out = new Uint8Array(chunks.reduce((n, c) => n + c.length, 0));
  let at = 0;
  for (const chunk of chunks) {
    out.set(chunk, at);
    at += chunk.length;
  }
  return out;
}

async function parse(
  chunks: Uint8Array[],
): Promise<{ events: ParsedServerSentEvent[]; retry: number | undefined }> {
  const parser = new ServerSentEventParserStream();
  const events = await Array.fromAsync(
    ReadableStream.from(chunks).pipeThrough(new TextDecoderStream()).pipeThrough(parser),
  );
  return { events, retry: parser.retry };
}

/** The bytes with every "\n" line end written as `ending` instead (all three are valid SSE). */
async function withLineEnds(ending: "\n" | "\r\n" | "\r"): Promise<Uint8Array> {
  const text = new TextDecoder().decode(await encode(MESSAGES));
  return new TextEncoder().encode(text.replaceAll("\n", ending));
}

Deno.test("ServerSentEventParserStream yields what ServerSentEventStream encoded", async () => {
  assert.deepEqual((await parse([await encode(MESSAGES)])).events, EXPECTED);
});

Deno.test("ServerSentEventParserStream reads ServerSentEventStream output one byte per chunk", async () => {
  const bytes = await encode(MESSAGES);
  const chunks = Array.from(bytes, (_, i) => bytes.subarray(i, i + 1));
  assert.deepEqual((await parse(chunks)).events, EXPECTED);
});

for (const [name, ending] of [["\\n", "\n"], ["\\r\\n", "\r\n"], ["\\r", "\r"]] as const) {
  Deno.test(`ServerSentEventParserStream reads frames with ${name} line ends split at every byte`, async () => {
    const bytes = await withLineEnds(ending);
    for (let cut = 0; cut <= bytes.length; cut++) {
      const { events } = await parse([bytes.subarray(0, cut), bytes.subarray(cut)]);
      assert.deepEqual(events, EXPECTED, `split at byte ${cut}`);
    }
  });
}

Deno.test("ServerSentEventParserStream reads the retry that ServerSentEventStream wrote", async () => {
  const bytes = await encode([{ retry: 1500 }, { data: "x", retry: 250 }]);
  assert.deepEqual(await parse([bytes]), {
    events: [{ event: "message", data: "x", id: "" }],
    retry: 250,
  });
});

Deno.test("ServerSentEventStream output of \\r\\n and \\r in data parses back as \\n", async () => {
  const bytes = await encode([{ data: "a\r\nb\rc\nd" }]);
  assert.deepEqual((await parse([bytes])).events, [
    { event: "message", data: "a\nb\nc\nd", id: "" },
  ]);
});

Deno.test("ServerSentEventParserStream ignores a comment-only frame of ServerSentEventStream", async () => {
  const bytes = await encode([{ comment: "keepalive" }, { comment: "" }]);
  assert.equal(new TextDecoder().decode(bytes), ": keepalive\n\n: \n\n");
  assert.deepEqual((await parse([bytes])).events, []);
});

// ---------------------------------------------------------------------------------------------
// ServerSentEventParserStream

function parseChunks(chunks: string[]): Promise<ParsedServerSentEvent[]> {
  return Array.fromAsync(
    ReadableStream.from(chunks).pipeThrough(new ServerSentEventParserStream()),
  );
}

Deno.test("ServerSentEventParserStream joins a line split across chunks", async () => {
  assert.deepEqual(await parseChunks(["da", "ta: a\nb", "c\n\n"]), [
    { event: "message", data: "a", id: "" },
  ]);
});

Deno.test("ServerSentEventParserStream treats \\r\\n split across chunks as one line break", async () => {
  // Read as two breaks, the "\n" would end message "a" before "b" joins it.
  assert.deepEqual(await parseChunks(["data: a\r", "\ndata: b\r", "\n\r", "\n"]), [
    { event: "message", data: "a\nb", id: "" },
  ]);
});

Deno.test("ServerSentEventParserStream accepts lone \\r line endings", async () => {
  assert.deepEqual(await parseChunks(["event: run\rdata: x\r\r"]), [
    { event: "run", data: "x", id: "" },
  ]);
});

Deno.test("ServerSentEventParserStream joins multi-line data with \\n", async () => {
  assert.deepEqual(await parseChunks(["data: one\ndata:two\ndata\ndata:  three\n\n"]), [
    { event: "message", data: "one\ntwo\n\n three", id: "" },
  ]);
});

Deno.test("ServerSentEventParserStream ignores comments and unknown fields", async () => {
  assert.deepEqual(await parseChunks([": keepalive\n\n:x\nfoo: bar\ndata: d\n\n"]), [
    { event: "message", data: "d", id: "" },
  ]);
});

Deno.test("ServerSentEventParserStream keeps the last event id across messages", async () => {
  assert.deepEqual(await parseChunks(["id: site:1\ndata: a\n\ndata: b\n\nid\ndata: c\n\n"]), [
    { event: "message", data: "a", id: "site:1" },
    { event: "message", data: "b", id: "site:1" },
    { event: "message", data: "c", id: "" },
  ]);
});

Deno.test("ServerSentEventParserStream reads retry only when it is all digits", async () => {
  const parser = new ServerSentEventParserStream();
  await Array.fromAsync(ReadableStream.from(["retry: 1500\n\nretry: 2x\n\n"]).pipeThrough(parser));
  assert.equal(parser.retry, 1500);
});

Deno.test("ServerSentEventParserStream discards a message the stream ends before completing", async () => {
  assert.deepEqual(await parseChunks(["data: done\n\ndata: partial\n"]), [
    { event: "message", data: "done", id: "" },
  ]);
});

Deno.test("ServerSentEventParserStream resets the event name after each message", async () => {
  assert.deepEqual(await parseChunks(["event: run\ndata: a\n\ndata: b\n\nevent: x\n\n"]), [
    { event: "run", data: "a", id: "" },
    { event: "message", data: "b", id: "" },
  ]);
});
