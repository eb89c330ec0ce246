/**
 * An incremental parser for the INDI protocol's stream (docs/collect.md, "INDI"): a sequence of
 * top-level XML elements, not one document, read as it arrives. Memory is bounded: one element
 * (everything from its `<` to its end) may hold at most `maxElementChars` characters and nest
 * at most `maxDepth` deep; past either bound the parser throws {@linkcode IndiStreamError} and
 * the caller drops the connection. Text between top-level elements, comments, processing
 * instructions and DOCTYPEs are skipped; the five XML entities and character references are
 * decoded.
 *
 * @module
 */

/** One parsed element: its name, attributes, children and its own text. */
export interface XmlElement {
  /** The element's name, e.g. `setNumberVector`. */
  readonly name: string;
  /** Its attributes, entities decoded. */
  readonly attrs: Readonly<Record<string, string>>;
  /** Its child elements in order. */
  readonly children: XmlElement[];
  /** Its text (the text of children not included), entities decoded. */
  text: string;
}

/** Why the stream was refused: an element too large, nested too deep, or not XML. */
export class IndiStreamError extends Error {
  /** `size`, `depth` or `malformed`. */
  readonly kind: "size" | "depth" | "malformed";

  /**
   * @param kind What bound or rule was broken.
   * @param message What happened, for the log.
   */
  constructor(kind: "size" | "depth" | "malformed", message: string) {
    super(message);
    this.name = "IndiStreamError";
    this.kind = kind;
  }
}

const ENTITIES: Record<string, string> = { lt: "<", gt: ">", amp: "&", quot: '"', apos: "'" };

/**
 * Decodes XML entities (`&lt;` `&gt;` `&amp;` `&quot;` `&apos;`, `&#NN;`, `&#xHH;`); an
 * unknown one stays as written.
 *
 * @example
 * ```ts
 * import { decodeEntities } from "./indi_xml.ts";
 * import assert from "node:assert/strict";
 * assert.equal(decodeEntities("a &lt;b&gt; &amp; &#65;&#x42;"), "a <b> & AB");
 * ```
 */
export function decodeEntities(text: string): string {
  if (!text.includes("&")) return text;
  return text.replace(/&(#x[0-9a-fA-F]{1,6}|#[0-9]{1,7}|[a-z]{2,4});/g, (all, ref: string) => {
    if (ref[0] !== "#") return ENTITIES[ref] ?? all;
    const code = ref[1] === "x" ? parseInt(ref.slice(2), 16) : parseInt(ref.slice(1), 10);
    return code <= 0x10ffff ? String.fromCodePoint(code) : all;
  });
}

const NAME = /[A-Za-z_:][-\w.:]*/y;
const ATTR = /\s+([A-Za-z_:][-\w.:]*)\s*=\s*(?:"([^"]*)"|'([^']*)')/y;

/** The index after the `>` that ends the tag starting at `from` (quotes respected), or -1. */
function tagEnd(buf: string, from: number): number {
  let quote = "";
  for (let i = from + 1; i < buf.length; i++) {
    const c = buf[i];
    if (quote) {
      if (c === quote) quote = "";
    } else if (c === '"' || c === "'") quote = c;
    else if (c === ">") return i + 1;
  }
  return -1;
}

/** Reads an opening tag `<name a="v" ...>` or `<name .../>`. */
function openTag(tag: string): { element: XmlElement; closed: boolean } {
  NAME.lastIndex = 1;
  const name = NAME.exec(tag)?.[0];
  if (!name) throw new IndiStreamError("malformed", `not an XML tag: ${tag.slice(0, 80)}`);
  const attrs: Record<string, string> = {};
  let at = 1 + name.length;
  for (;;) {
    ATTR.lastIndex = at;
    const m = ATTR.exec(tag);
    if (!m) break;
    attrs[m[1]!] = decodeEntities(m[2] ?? m[3] ?? "");
    at = ATTR.lastIndex;
  }
  const rest = tag.slice(at, -1).trim();
  if (rest !== "" && rest !== "/") {
    throw new IndiStreamError("malformed", `a malformed tag: ${tag.slice(0, 80)}`);
  }
  return { element: { name, attrs, children: [], text: "" }, closed: rest === "/" };
}

/** How a skipped construct starts and ends. */
const SKIPPED: [string, string][] = [["<!--", "-->"], ["<?", "?>"], ["<!", ">"]];

/**
 * Parses an INDI stream incrementally; see the module documentation.
 *
 * @example
 * ```ts
 * import { IndiXmlParser } from "./indi_xml.ts";
 * import assert from "node:assert/strict";
 * const parser = new IndiXmlParser();
 * assert.deepEqual(parser.push('<setNumberVector device="W" name="P"><oneNumber name="T">1'), []);
 * const [vector] = parser.push("2</oneNumber></setNumberVector>");
 * assert.equal(vector!.children[0]!.text, "12");
 * ```
 */
export class IndiXmlParser {
  #maxChars: number;
  #maxDepth: number;
  #buf = "";
  #consumed = 0;
  #elementStart = 0;
  #stack: XmlElement[] = [];

  /**
   * @param options `maxElementChars` (default 1 MiB of characters) and `maxDepth` (default 8;
   *   INDI nests 2 deep).
   */
  constructor(options: { maxElementChars?: number; maxDepth?: number } = {}) {
    this.#maxChars = options.maxElementChars ?? 1024 * 1024;
    this.#maxDepth = options.maxDepth ?? 8;
  }

  /** Takes the next text of the stream; returns the top-level elements it completed. */
  push(text: string): XmlElement[] {
    this.#buf += text;
    const out: XmlElement[] = [];
    let pos = 0;
    while (pos < this.#buf.length) {
      const next = this.#step(pos, out);
      if (next < 0) break;
      pos = next;
    }
    this.#buf = this.#buf.slice(pos);
    this.#consumed += pos;
    const held = this.#stack.length > 0
      ? this.#consumed + this.#buf.length - this.#elementStart
      : this.#buf.length;
    if (held > this.#maxChars) {
      throw new IndiStreamError(
        "size",
        `an INDI element of more than ${this.#maxChars} characters (${
          this.#stack[0]?.name ?? "unfinished tag"
        })`,
      );
    }
    return out;
  }

  /** Reads one construct at `pos`; returns where the next starts, or -1 to wait for more. */
  #step(pos: number, out: XmlElement[]): number {
    const buf = this.#buf;
    const top = this.#stack.at(-1);
    if (buf[pos] !== "<") {
      const lt = buf.indexOf("<", pos);
      const end = lt < 0 ? buf.length : lt;
      // Decoded when the element closes: an entity may be split between two chunks.
      if (top) top.text += buf.slice(pos, end);
      return end;
    }
    if (buf.startsWith("<![CDATA[", pos)) {
      const end = buf.indexOf("]]>", pos);
      if (end < 0) return -1;
      if (top) top.text += buf.slice(pos + 9, end).replaceAll("&", "&amp;");
      return end + 3;
    }
    for (const [open, close] of SKIPPED) {
      if (!buf.startsWith(open, pos)) continue;
      const end = buf.indexOf(close, pos + open.length);
      return end < 0 ? -1 : end + close.length;
    }
    if (buf.length - pos < 2) return -1;
    const end = tagEnd(buf, pos);
    if (end < 0) return -1;
    const tag = buf.slice(pos, end);
    if (tag[1] === "/") this.#close(tag, out);
    else this.#open(tag, pos, out);
    return end;
  }

  #open(tag: string, pos: number, out: XmlElement[]): void {
    const { element, closed } = openTag(tag);
    const parent = this.#stack.at(-1);
    if (!parent) this.#elementStart = this.#consumed + pos;
    if (closed) {
      if (parent) parent.children.push(element);
      else out.push(element);
      return;
    }
    if (this.#stack.length >= this.#maxDepth) {
      throw new IndiStreamError(
        "depth",
        `INDI elements nested more than ${this.#maxDepth} deep (in ${this.#stack[0]!.name})`,
      );
    }
    parent?.children.push(element);
    this.#stack.push(element);
  }

  #close(tag: string, out: XmlElement[]): void {
    const name = tag.slice(2, -1).trim();
    const element = this.#stack.pop();
    if (!element || element.name !== name) {
      throw new IndiStreamError(
        "malformed",
        `</${name}> closes ${element ? `<${element.name}>` : "nothing"}`,
      );
    }
    element.text = decodeEntities(element.text);
    if (this.#stack.length === 0) out.push(element);
  }
}
