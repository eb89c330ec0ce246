/**
 * The `http` input (docs/collect.md): GETs `url` every `every_s` (optional `headers`) and reads
 * its JSON body as one record; an array means its first element. The body is read up to
 * `max_bytes` (1 MiB by default) and no longer than `timeout_s`.
 *
 * @module
 */

import { isJsonPointer } from "../json_pointer.ts";
import type { ConfigAt, InputKind } from "./input.ts";
import { jsonRecord } from "./json_record.ts";
import { DEFAULT_MAX_BYTES, readBounded, tooLarge } from "./read_bounded.ts";

/** The parsed keys of an `http` input. */
export interface HttpConfig {
  /** The page. */
  readonly url: URL;
  /** Request headers. */
  readonly headers: Readonly<Record<string, string>>;
  /** Longest time one GET may take, in ms. */
  readonly timeoutMs: number;
  /** Largest body read. */
  readonly maxBytes: number;
}

/** Seconds one GET may take by default. */
const DEFAULT_TIMEOUT_S = 10;

/**
 * The `http` input kind.
 *
 * @example Usage
 * ```ts
 * import { httpInput } from "./http.ts";
 * import assert from "node:assert/strict";
 *
 * const at = { path: "inputs[0]", fail: (k: string, p: string): never => { throw new Error(`${k} ${p}`); }, child: () => at };
 * const config = httpInput.parse({ url: "http://127.0.0.1:8080/weather.json", type: "weather" }, at);
 * assert.deepEqual(httpInput.needs!(config), { net: ["127.0.0.1:8080"] });
 * ```
 */
export const httpInput: InputKind<HttpConfig> = {
  kind: "http",
  polled: true,
  keys: ["url", "headers", "timeout_s", "max_bytes"],
  parse: (raw, at: ConfigAt): HttpConfig => {
    requireType(raw, at);
    let url: URL | undefined;
    try {
      url = typeof raw.url === "string" ? new URL(raw.url) : undefined;
    } catch { /* refused below */ }
    if (url === undefined || (url.protocol !== "http:" && url.protocol !== "https:")) {
      at.fail(
        "url",
        `must be an http:// or https:// URL, not ${JSON.stringify(raw.url) ?? "missing"}`,
        'set "url": "http://weather.local/now.json"',
      );
    }
    const headers: Record<string, string> = {};
    if (raw.headers !== undefined) {
      const h = raw.headers;
      if (h === null || typeof h !== "object" || Array.isArray(h)) {
        at.fail(
          "headers",
          "must be an object of header name -> text",
          'write "headers": {"Accept": "application/json"}',
        );
      }
      for (const [name, value] of Object.entries(h)) {
        if (typeof value !== "string" || !/^[!#$%&'*+.^_`|~\w-]+$/.test(name)) {
          at.child("headers").fail(
            name,
            "must be a header name with a text value",
            `write "${name}": "..."`,
          );
        }
        headers[name] = value;
      }
    }
    checkPointers(raw, at);
    return {
      url,
      headers,
      timeoutMs: seconds(raw.timeout_s, at, "timeout_s", DEFAULT_TIMEOUT_S) * 1000,
      maxBytes: bytes(raw.max_bytes, at),
    };
  },
  create: (config, common) => ({
    poll: async (sink, signal) => {
      const what = `the page at ${config.url.href}`;
      const limit = AbortSignal.any([signal, AbortSignal.timeout(config.timeoutMs)]);
      let res: Response;
      try {
        res = await fetch(config.url, { headers: config.headers, signal: limit });
      } catch (err) {
        throw new Error(`GET ${config.url.href} failed: ${failure(err, config.timeoutMs)}`);
      }
      if (!res.ok) {
        await res.body?.cancel();
        throw new Error(`GET ${config.url.href} answered ${res.status} ${res.statusText}`);
      }
      const length = Number(res.headers.get("content-length") ?? NaN);
      if (length > config.maxBytes) {
        await res.body?.cancel();
        throw tooLarge(`${what} (${length} bytes)`, config.maxBytes);
      }
      let body: Uint8Array;
      try {
        body = res.body ? await readBounded(res.body, config.maxBytes, what) : new Uint8Array();
      } catch (err) {
        if (err instanceof RangeError) throw err;
        throw new Error(`reading ${what} failed: ${failure(err, config.timeoutMs)}`);
      }
      let doc: unknown;
      try {
        doc = JSON.parse(new TextDecoder().decode(body));
      } catch (err) {
        throw new Error(`${what} is not JSON (${(err as Error).message.split("\n")[0]})`);
      }
      sink.record(jsonRecord(doc, common, sink, what));
    },
  }),
  needs: (config) => ({ net: [hostOf(config.url)] }),
};

/** `host:port` of a URL, with the scheme's default port. */
function hostOf(url: URL): string {
  return `${url.hostname}:${url.port || (url.protocol === "https:" ? "443" : "80")}`;
}

function failure(err: unknown, timeoutMs: number): string {
  if (err instanceof DOMException && err.name === "TimeoutError") {
    return `no answer within ${timeoutMs / 1000} s (raise "timeout_s" if it is slow)`;
  }
  return (err instanceof Error ? err.message : String(err)).split("\n")[0]!;
}

/**
 * Refuses an input without `type`: a polled record needs an event type.
 *
 * @param raw The input object.
 * @param at Where it is.
 */
export function requireType(raw: Readonly<Record<string, unknown>>, at: ConfigAt): void {
  if (raw.type === undefined) {
    at.fail("type", "is missing", 'set "type": "weather", the event type of what it reads');
  }
}

/**
 * Refuses `fields` and `ts` that are not JSON Pointers (JSON sources).
 *
 * @param raw The input object.
 * @param at Where it is.
 */
export function checkPointers(raw: Readonly<Record<string, unknown>>, at: ConfigAt): void {
  const fields = raw.fields;
  if (fields !== null && typeof fields === "object" && !Array.isArray(fields)) {
    for (const [name, where] of Object.entries(fields)) {
      if (typeof where === "string" && !isJsonPointer(where)) {
        at.child("fields").fail(
          name,
          `is ${JSON.stringify(where)}, not a JSON Pointer`,
          `write it as "/${where.replaceAll(".", "/")}"`,
        );
      }
    }
  }
  if (typeof raw.ts === "string" && !isJsonPointer(raw.ts)) {
    at.fail(
      "ts",
      `is ${JSON.stringify(raw.ts)}, not a JSON Pointer`,
      `write it as "/${raw.ts.replaceAll(".", "/")}"`,
    );
  }
}

/**
 * An optional number of seconds.
 *
 * @param value The raw value.
 * @param at Where it is.
 * @param key Its key.
 * @param fallback When absent.
 * @returns Seconds.
 */
export function seconds(value: unknown, at: ConfigAt, key: string, fallback: number): number {
  if (value === undefined) return fallback;
  if (typeof value !== "number" || !Number.isFinite(value) || value <= 0 || value > 3600) {
    at.fail(
      key,
      `must be a number of seconds from 0 to 3600, not ${JSON.stringify(value)}`,
      `set "${key}": ${fallback}`,
    );
  }
  return value;
}

/**
 * An optional `max_bytes`.
 *
 * @param value The raw value.
 * @param at Where it is.
 * @returns Bytes.
 */
export function bytes(value: unknown, at: ConfigAt): number {
  if (value === undefined) return DEFAULT_MAX_BYTES;
  if (
    typeof value !== "number" || !Number.isSafeInteger(value) || value < 1 ||
    value > 64 * 1024 * 1024
  ) {
    at.fail(
      "max_bytes",
      `must be a whole number of bytes from 1 to 67108864, not ${JSON.stringify(value)}`,
      `set "max_bytes": ${DEFAULT_MAX_BYTES}`,
    );
  }
  return value;
}
