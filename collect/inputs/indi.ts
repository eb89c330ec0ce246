/**
 * The `indi` input (docs/collect.md, "INDI"): a client of an INDI server over TCP. It asks for
 * every property (`<getProperties version="1.7"/>`), connects the devices that say `connect`,
 * and hands each element of the number, switch, light and text vectors of its devices to the
 * collector, named `PROPERTY.ELEMENT`, with the vector's `timestamp` as the measurement time.
 *
 * The stream is read by {@linkcode IndiXmlParser}, whose bounds keep memory flat against a
 * broken or hostile server: past them the input warns once and drops the connection, and the
 * collector's capped back-off connects again.
 *
 * @module
 */

import type { ConfigAt, Input, InputCommon, InputKind, InputSink } from "./input.ts";
import { escapeXml, indiNumber, indiTime } from "./indi_values.ts";
import { IndiStreamError, IndiXmlParser, type XmlElement } from "./indi_xml.ts";

/** One device the input reads. */
export interface IndiDevice {
  /** The event type of its values. */
  readonly type: string;
  /** Whether to set its `CONNECTION` switch to `CONNECT`. */
  readonly connect: boolean;
  /** The properties to read; all when absent. */
  readonly properties?: readonly string[] | undefined;
}

/** The `indi` input's own config keys. */
export interface IndiConfig {
  /** The INDI server's host. */
  readonly host: string;
  /** Its port (7624 by default). */
  readonly port: number;
  /** Device name -> what to read of it. */
  readonly devices: Readonly<Record<string, IndiDevice>>;
}

/** The largest element of the stream (characters) and its deepest nesting. */
export const INDI_BOUNDS = { maxElementChars: 1024 * 1024, maxDepth: 8 } as const;

function isRecord(v: unknown): v is Record<string, unknown> {
  return v !== null && typeof v === "object" && !Array.isArray(v);
}

function parseDevice(
  name: string,
  spec: unknown,
  raw: Readonly<Record<string, unknown>>,
  at: ConfigAt,
): IndiDevice {
  if (!isRecord(spec)) at.fail(name, "must be an object", 'set it to {"type": "weather"}');
  const devAt: ConfigAt = at.child(name);
  const type = spec.type ?? raw.type;
  if (typeof type !== "string" || type === "") {
    devAt.fail("type", 'is missing (and the input has no "type")', 'set "type": "weather"');
  }
  const connect = spec.connect ?? false;
  if (typeof connect !== "boolean") {
    devAt.fail("connect", "must be true or false", 'set "connect": true');
  }
  const properties = spec.properties;
  if (
    properties !== undefined &&
    (!Array.isArray(properties) || properties.length === 0 ||
      !properties.every((p) => typeof p === "string" && p !== ""))
  ) {
    devAt.fail(
      "properties",
      "must be a list of property names",
      'set "properties": ["WEATHER_PARAMETERS"]',
    );
  }
  for (const key of Object.keys(spec)) {
    if (!["type", "connect", "properties"].includes(key)) {
      devAt.fail(key, "is not a key of a device", 'use only "type", "connect" and "properties"');
    }
  }
  return { type, connect, properties: properties as string[] | undefined };
}

function parse(raw: Readonly<Record<string, unknown>>, at: ConfigAt): IndiConfig {
  const host = raw.host ?? "127.0.0.1";
  if (typeof host !== "string" || host === "" || /[\s/]/.test(host)) {
    at.fail("host", "must be a host name or address", 'set "host": "127.0.0.1"');
  }
  const port = raw.port ?? 7624;
  if (typeof port !== "number" || !Number.isInteger(port) || port < 1 || port > 65535) {
    at.fail(
      "port",
      "must be a port number from 1 to 65535",
      'remove it (7624) or set "port": 7624',
    );
  }
  const fix = 'set "devices": {"Weather Simulator": {"type": "weather", "connect": true}}';
  if (!isRecord(raw.devices) || Object.keys(raw.devices).length === 0) {
    at.fail("devices", "must be an object of at least one device", fix);
  }
  const devAt: ConfigAt = at.child("devices");
  const devices = Object.fromEntries(
    Object.entries(raw.devices).map(([name, spec]) => [name, parseDevice(name, spec, raw, devAt)]),
  );
  return { host, port, devices };
}

const VECTOR = /^(?:def|set)(Number|Switch|Light|Text)Vector$/;
const LIGHTS = new Set(["Idle", "Ok", "Busy", "Alert"]);

/** The `indi` input of one config. */
class IndiInput implements Input {
  #config: IndiConfig;
  #names: Map<string, string>;
  #conn: Deno.TcpConn | undefined;

  constructor(config: IndiConfig, common: InputCommon) {
    this.#config = config;
    // docs/collect.md: `fields` renames PROPERTY.ELEMENT; the others keep that name.
    this.#names = new Map(Object.entries(common.fields ?? {}).map(([name, at]) => [at, name]));
  }

  async listen(sink: InputSink, signal: AbortSignal, up: () => void): Promise<void> {
    if (signal.aborted) return;
    const { host, port } = this.#config;
    const conn = await Deno.connect({ hostname: host, port });
    this.#conn = conn;
    const onAbort = (): void => conn.close();
    signal.addEventListener("abort", onAbort);
    try {
      await this.#send(conn, '<getProperties version="1.7"/>\n');
      // Up only once the server said something whole: one that accepts and closes must not
      // reset the back-off (docs/collect.md, "Faults").
      await this.#read(conn, sink, up);
      if (!signal.aborted) {
        throw new Error(`INDI ${host}:${port}: the server closed the connection`);
      }
    } catch (err) {
      if (signal.aborted) return;
      if (err instanceof IndiStreamError) {
        sink.warn(`stream ${err.kind}`, `INDI ${host}:${port}: ${err.message}; reconnecting`);
      }
      throw err instanceof IndiStreamError || (err as Error).message.startsWith("INDI ")
        ? err
        : new Error(`INDI ${host}:${port}: ${(err as Error).message}`);
    } finally {
      signal.removeEventListener("abort", onAbort);
      this.#conn = undefined;
      try {
        conn.close();
      } catch { /* closed by the abort or the peer */ }
    }
  }

  close(): Promise<void> {
    try {
      this.#conn?.close();
    } catch { /* already closed */ }
    return Promise.resolve();
  }

  async #send(conn: Deno.TcpConn, text: string): Promise<void> {
    const bytes = new TextEncoder().encode(text);
    for (let at = 0; at < bytes.length;) at += await conn.write(bytes.subarray(at));
  }

  /** Reads until the server closes; `up` is called on the first complete element. */
  async #read(conn: Deno.TcpConn, sink: InputSink, up: () => void): Promise<void> {
    const parser = new IndiXmlParser(INDI_BOUNDS);
    const decoder = new TextDecoder();
    const buf = new Uint8Array(64 * 1024);
    let heard = false;
    for (;;) {
      const n = await conn.read(buf);
      if (n === null) return;
      for (const element of parser.push(decoder.decode(buf.subarray(0, n), { stream: true }))) {
        if (!heard) {
          heard = true;
          up();
        }
        const reply = this.#vector(element, sink);
        if (reply) await this.#send(conn, reply);
      }
    }
  }

  /** Delivers one vector's elements; returns what to send back (the CONNECT switch), if any. */
  #vector(element: XmlElement, sink: InputSink): string | undefined {
    const kind = VECTOR.exec(element.name)?.[1];
    const deviceName = element.attrs.device ?? "";
    const device = this.#config.devices[deviceName];
    const property = element.attrs.name;
    if (!kind || !device || !property) return undefined;
    if (device.connect && property === "CONNECTION" && element.name.startsWith("def")) {
      const on = element.children.find((c) => c.attrs.name === "CONNECT")?.text.trim() === "On";
      if (!on) return connectSwitch(deviceName);
    }
    if (device.properties && !device.properties.includes(property)) return undefined;
    const sourceTs = indiTime(element.attrs.timestamp);
    for (const child of element.children) {
      const name = child.attrs.name;
      if (!name) continue;
      const path = `${property}.${name}`;
      const value = this.#value(kind, child.text.trim());
      if (value === undefined) {
        sink.warn(
          `value ${deviceName} ${path}`,
          `INDI ${deviceName} ${path}: ${
            JSON.stringify(child.text.trim().slice(0, 80))
          } is not a ${kind.toLowerCase()} value; left out`,
        );
        continue;
      }
      const field = this.#names.get(path) ?? path;
      sink.field({
        type: device.type,
        field,
        value,
        ...(sourceTs === undefined ? {} : { sourceTs }),
      });
    }
    return undefined;
  }

  #value(kind: string, text: string): number | boolean | string | undefined {
    switch (kind) {
      case "Number":
        return indiNumber(text);
      case "Switch":
        return text === "On" ? true : text === "Off" ? false : undefined;
      case "Light":
        return LIGHTS.has(text) ? text : undefined;
      default:
        return text;
    }
  }
}

/** The message that sets `device`'s CONNECTION switch to CONNECT. */
function connectSwitch(device: string): string {
  return `<newSwitchVector device="${escapeXml(device)}" name="CONNECTION">` +
    `<oneSwitch name="CONNECT">On</oneSwitch></newSwitchVector>\n`;
}

/**
 * The `indi` input kind (docs/collect.md, "INDI").
 *
 * @example A config, checked
 * ```ts
 * import { indiInput } from "./indi.ts";
 * import assert from "node:assert/strict";
 * const at = {
 *   path: "inputs[0]",
 *   fail(key: string, problem: string): never {
 *     throw new Error(`${key} ${problem}`);
 *   },
 *   child() {
 *     return at;
 *   },
 * };
 * const config = indiInput.parse(
 *   { host: "10.0.0.5", devices: { "Weather Simulator": { type: "weather", connect: true } } },
 *   at,
 * );
 * assert.deepEqual(indiInput.needs!(config), { net: ["10.0.0.5:7624"] });
 * ```
 */
export const indiInput: InputKind<IndiConfig> = {
  kind: "indi",
  polled: false,
  keys: ["host", "port", "devices"],
  parse,
  create: (config, common) => new IndiInput(config, common),
  needs: (config) => ({
    net: [`${config.host.includes(":") ? `[${config.host}]` : config.host}:${config.port}`],
  }),
};
