/**
 * Server-Sent Events (`text/event-stream`, WHATWG HTML 9.2) both ways, on web APIs only:
 * {@linkcode ServerSentEventStream} writes messages as the server sends them on `GET /stream`,
 * and {@linkcode ServerSentEventParserStream} reads them back as the client receives them. The
 * two are each other's inverse: what one writes, the other yields unchanged (`data` line breaks
 * become `\n`, comments are dropped, ids persist).
 *
 * @example Usage
 * ```ts
 * import { ServerSentEventStream } from "./sse.ts";
 * import { ServerSentEventParserStream } from "@obs-utils/telemetry/client";
 * import assert from "node:assert/strict";
 *
 * const messages = await Array.fromAsync(
 *   ReadableStream.from([{ event: "run", data: "a\nb", id: "site:1" }, { comment: "keepalive" }])
 *     .pipeThrough(new ServerSentEventStream())
 *     .pipeThrough(new TextDecoderStream())
 *     .pipeThrough(new ServerSentEventParserStream()),
 * );
 * assert.deepEqual(messages, [{ event: "run", data: "a\nb", id: "site:1" }]);
 * ```
 *
 * @module
 */

/** One Server-Sent Event, as {@linkcode ServerSentEventStream} takes it. */
export interface ServerSentEventMessage {
  /** A comment line (`: <comment>`), ignored by clients; must not contain a newline. */
  comment?: string;
  /** The event name; must not contain a newline. */
  event?: string;
  /** The payload; a multi-line string is sent as one `data:` line per line. */
  data?: string;
  /** The event id; must not contain a newline. */
  id?: string | number;
  /** Reconnection delay for the client in milliseconds; a non-negative integer. */
  retry?: number;
}

const NEWLINE = /\r\n|\r|\n/;
const encoder = new TextEncoder();

function checkNoNewline(value: string, field: string): void {
  if (NEWLINE.test(value)) {
    throw new SyntaxError(
      `Cannot encode a server-sent event: ${field} ${
        JSON.stringify(value)
      } contains a line break; remove it (only data may span lines)`,
    );
  }
}

/**
 * Encodes one {@linkcode ServerSentEventMessage} as UTF-8 `text/event-stream` bytes, ending in
 * the blank line that ends a message. The hub of `GET /stream` encodes each message once this way
 * and sends the same bytes to every client.
 *
 * @param message The message.
 * @returns Its bytes.
 * @throws {SyntaxError} If `comment`, `event` or `id` contains a line break.
 * @throws {RangeError} If `retry` is not a non-negative integer.
 *
 * @example Usage
 * ```ts
 * import { encodeServerSentEvent } from "./sse.ts";
 * import assert from "node:assert/strict";
 *
 * const bytes = encodeServerSentEvent({ event: "run", data: "{}" });
 * assert.equal(new TextDecoder().decode(bytes), "event: run\ndata: {}\n\n");
 * ```
 */
export function encodeServerSentEvent(message: ServerSentEventMessage): Uint8Array {
  let out = "";
  if (message.comment !== undefined) {
    checkNoNewline(message.comment, "comment");
    out += `: ${message.comment}\n`;
  }
  if (message.event !== undefined) {
    checkNoNewline(message.event, "event");
    out += `event: ${message.event}\n`;
  }
  if (message.data !== undefined) {
    for (const line of message.data.split(NEWLINE)) out += `data: ${line}\n`;
  }
  if (message.id !== undefined) {
    const id = String(message.id);
    checkNoNewline(id, "id");
    out += `id: ${id}\n`;
  }
  if (message.retry !== undefined) {
    if (!Number.isSafeInteger(message.retry) || message.retry < 0) {
      throw new RangeError(
        `Cannot encode a server-sent event: retry ${message.retry} is not a non-negative integer; give milliseconds`,
      );
    }
    out += `retry: ${message.retry}\n`;
  }
  return encoder.encode(out + "\n");
}

/**
 * Encodes {@linkcode ServerSentEventMessage}s as UTF-8 `text/event-stream` bytes, one message
 * per chunk. Errors the stream with a `SyntaxError` when `comment`, `event` or `id` contains a
 * line break, and a `RangeError` for a bad `retry`.
 *
 * @example Usage
 * ```ts
 * import { ServerSentEventStream } from "./sse.ts";
 * import assert from "node:assert/strict";
 *
 * const body = ReadableStream.from([{ data: "a\nb", id: "site:1" }, { comment: "keepalive" }])
 *   .pipeThrough(new ServerSentEventStream())
 *   .pipeThrough(new TextDecoderStream());
 * assert.equal((await Array.fromAsync(body)).join(""), "data: a\ndata: b\nid: site:1\n\n: keepalive\n\n");
 * ```
 */
export class ServerSentEventStream extends TransformStream<ServerSentEventMessage, Uint8Array> {
  /** Creates the encoder. */
  constructor() {
    super({
      transform(message, controller) {
        controller.enqueue(encodeServerSentEvent(message));
      },
    });
  }
}

/**
 * One message decoded from a Server-Sent Events stream by
 * {@linkcode ServerSentEventParserStream}.
 */
export interface ParsedServerSentEvent {
  /** The `event:` field, `"message"` when absent. */
  event: string;
  /** The `data:` lines joined with `\n`. */
  data: string;
  /** The last event id seen so far (it persists across messages), `""` when none. */
  id: string;
}

/**
 * Decodes a Server-Sent Events text stream into messages, following the WHATWG HTML rules:
 * lines end in `\r\n`, `\n` or `\r` (also across chunk boundaries), `data:` lines accumulate,
 * lines starting with `:` are comments, `retry:` sets {@linkcode ServerSentEventParserStream.retry},
 * and an unterminated last message is discarded. Pipe bytes through `TextDecoderStream` first
 * (it also removes a byte-order mark).
 *
 * @example Usage
 * ```ts
 * import { ServerSentEventParserStream } from "@obs-utils/telemetry/client";
 * import assert from "node:assert/strict";
 *
 * const messages = await Array.fromAsync(
 *   ReadableStream.from(["event: run\r\ndata: {\"a\"", ":1}\r\n\r", "\n: keepalive\n\n"])
 *     .pipeThrough(new ServerSentEventParserStream()),
 * );
 * assert.deepEqual(messages, [{ event: "run", data: '{"a":1}', id: "" }]);
 * ```
 */
export class ServerSentEventParserStream extends TransformStream<string, ParsedServerSentEvent> {
  #parser: SseParser;

  /** Creates a parser with no last event id. */
  constructor() {
    const parser = new SseParser();
    super({
      transform: (chunk, controller) => parser.push(chunk, (m) => controller.enqueue(m)),
      flush: (controller) => parser.end((m) => controller.enqueue(m)),
    });
    this.#parser = parser;
  }

  /** The last event id seen (`id:` field), `""` when none. */
  get lastEventId(): string {
    return this.#parser.lastEventId;
  }

  /** The reconnection time in milliseconds from the last valid `retry:` field, if any. */
  get retry(): number | undefined {
    return this.#parser.retry;
  }
}

/** The WHATWG event-stream interpretation, fed line by line. */
class SseParser {
  lastEventId = "";
  retry: number | undefined;
  #pending = "";
  #skipLf = false;
  #data: string[] = [];
  #event = "";

  push(chunk: string, emit: (m: ParsedServerSentEvent) => void): void {
    if (chunk === "") return;
    let start = 0;
    // A "\r" ended the previous chunk: a "\n" opening this one belongs to the same line break.
    if (this.#skipLf && chunk.charCodeAt(0) === 10) start = 1;
    this.#skipLf = false;
    for (let i = start; i < chunk.length; i++) {
      const c = chunk.charCodeAt(i);
      if (c !== 10 && c !== 13) continue;
      const line = this.#pending + chunk.slice(start, i);
      this.#pending = "";
      if (c === 13) {
        if (i + 1 === chunk.length) this.#skipLf = true;
        else if (chunk.charCodeAt(i + 1) === 10) i++;
      }
      start = i + 1;
      this.#line(line, emit);
    }
    this.#pending += chunk.slice(start);
  }

  end(_emit: (m: ParsedServerSentEvent) => void): void {
    // WHATWG: at end of stream, an incomplete message (no blank line yet) is discarded.
    this.#pending = "";
    this.#data = [];
    this.#event = "";
  }

  #line(line: string, emit: (m: ParsedServerSentEvent) => void): void {
    if (line === "") {
      if (this.#data.length > 0) {
        emit({
          event: this.#event || "message",
          data: this.#data.join("\n"),
          id: this.lastEventId,
        });
      }
      this.#data = [];
      this.#event = "";
      return;
    }
    if (line.charCodeAt(0) === 58) return; // ":" comment, such as the keepalive
    const colon = line.indexOf(":");
    const field = colon === -1 ? line : line.slice(0, colon);
    let value = colon === -1 ? "" : line.slice(colon + 1);
    if (value.charCodeAt(0) === 32) value = value.slice(1);
    switch (field) {
      case "event":
        this.#event = value;
        break;
      case "data":
        this.#data.push(value);
        break;
      case "id":
        if (!value.includes("\0")) this.lastEventId = value;
        break;
      case "retry":
        if (/^\d+$/.test(value)) this.retry = Number(value);
        break;
    }
  }
}
