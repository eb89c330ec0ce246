/**
 * The `alpaca` input (docs/collect.md, "Alpaca"): polls the properties of one ASCOM Alpaca
 * device (`observingconditions/N` or `safetymonitor/N`) every `every_s` with a `ClientID` and an
 * increasing `ClientTransactionID`, as the Alpaca Device API asks. A property that answers
 * NotImplemented (ErrorNumber 0x400) is left out from then on; any other error is a warning and
 * the rest of the record is still posted. Each answer is bounded in size and time.
 *
 * @module
 */

import type { ConfigAt, Input, InputCommon, InputKind, InputSink } from "./input.ts";
import { readBounded } from "./read_bounded.ts";

/** The thirteen ObservingConditions properties the input reads by default. */
export const OBSERVING_CONDITIONS: readonly string[] = [
  "cloudcover",
  "dewpoint",
  "humidity",
  "pressure",
  "rainrate",
  "skybrightness",
  "skyquality",
  "skytemperature",
  "starfwhm",
  "temperature",
  "winddirection",
  "windgust",
  "windspeed",
];

/** The default largest answer (bytes, `max_bytes`) and longest wait for one (ms, `timeout_s`). */
export const ALPACA_BOUNDS = { maxAnswerBytes: 64 * 1024, timeoutMs: 5_000 } as const;

/** Alpaca's NotImplemented error number. */
const NOT_IMPLEMENTED = 0x400;

/** The `alpaca` input's own config keys. */
export interface AlpacaConfig {
  /** The Alpaca server, `http://host:11111`, without a trailing slash. */
  readonly url: string;
  /** The device, e.g. `observingconditions/0`. */
  readonly device: string;
  /** Event field name -> Alpaca property (lower case). */
  readonly properties: Readonly<Record<string, string>>;
  /** The longest wait for one answer (ms), `timeout_s`. */
  readonly timeoutMs: number;
  /** The largest answer read (bytes), `max_bytes`. */
  readonly maxBytes: number;
}

function parse(raw: Readonly<Record<string, unknown>>, at: ConfigAt): AlpacaConfig {
  const urlFix = 'set "url": "http://127.0.0.1:11111"';
  if (typeof raw.url !== "string") at.fail("url", "is missing or not a string", urlFix);
  let url: URL;
  try {
    url = new URL(raw.url);
  } catch {
    at.fail("url", `${JSON.stringify(raw.url)} is not a URL`, urlFix);
  }
  if (url.protocol !== "http:" && url.protocol !== "https:") {
    at.fail("url", `must start with http:// or https://, not ${url.protocol}//`, urlFix);
  }
  if ((url.pathname !== "/" && url.pathname !== "") || url.search || url.hash) {
    at.fail("url", "must name only the server (the input adds /api/v1/...)", urlFix);
  }
  const device = typeof raw.device === "string" ? raw.device.toLowerCase() : undefined;
  const m = device === undefined
    ? null
    : /^(observingconditions|safetymonitor)\/(\d{1,4})$/.exec(device);
  if (!m) {
    at.fail(
      "device",
      "must be observingconditions/N or safetymonitor/N",
      'set "device": "observingconditions/0"',
    );
  }
  const known = m[1] === "safetymonitor" ? ["issafe"] : OBSERVING_CONDITIONS;
  const fields = raw.fields ?? Object.fromEntries(known.map((p) => [p, p]));
  if (fields === null || typeof fields !== "object" || Array.isArray(fields)) {
    at.fail(
      "fields",
      "must be an object of field name -> property",
      `set "fields": {"temperature": "temperature"}`,
    );
  }
  const fieldsAt: ConfigAt = at.child("fields");
  const properties: Record<string, string> = {};
  for (const [name, property] of Object.entries(fields as Record<string, unknown>)) {
    const p = typeof property === "string" ? property.toLowerCase() : "";
    if (!known.includes(p)) {
      fieldsAt.fail(name, `is not a property of ${m[1]}`, `use one of ${known.join(", ")}`);
    }
    properties[name] = p;
  }
  const timeout = raw.timeout_s ?? ALPACA_BOUNDS.timeoutMs / 1000;
  if (typeof timeout !== "number" || !(timeout >= 0.1 && timeout <= 60)) {
    at.fail(
      "timeout_s",
      "must be a number of seconds from 0.1 to 60",
      'remove it (5 s) or set "timeout_s": 5',
    );
  }
  const maxBytes = raw.max_bytes ?? ALPACA_BOUNDS.maxAnswerBytes;
  if (
    typeof maxBytes !== "number" || !Number.isInteger(maxBytes) || maxBytes < 1024 ||
    maxBytes > 16 * 1024 * 1024
  ) {
    at.fail(
      "max_bytes",
      "must be a whole number of bytes from 1024 to 16777216",
      'remove it (65536) or set "max_bytes": 65536',
    );
  }
  return {
    url: url.origin,
    device: `${m[1]}/${m[2]}`,
    properties,
    timeoutMs: timeout * 1000,
    maxBytes,
  };
}

/** What one property's request gave. */
type Answer =
  | { ok: true; value: number | boolean }
  | { ok: false; notImplemented: true }
  | { ok: false; notImplemented?: false; transport: boolean; message: string };

/** The `alpaca` input of one config. */
class AlpacaInput implements Input {
  #config: AlpacaConfig;
  #clientId = 1 + Math.floor(Math.random() * 65535);
  #transaction = 0;
  #notImplemented = new Set<string>();

  constructor(config: AlpacaConfig, _common: InputCommon) {
    this.#config = config;
  }

  async poll(sink: InputSink, signal: AbortSignal): Promise<void> {
    const wanted = Object.entries(this.#config.properties)
      .filter(([, p]) => !this.#notImplemented.has(p));
    const answers = await Promise.all(wanted.map(([, p]) => this.#get(p, signal)));
    const data: Record<string, unknown> = {};
    const failures: string[] = [];
    answers.forEach((answer, i) => {
      const [field, property] = wanted[i]!;
      if (answer.ok) data[field] = answer.value;
      else if (answer.notImplemented) this.#notImplemented.add(property);
      else if (answer.transport) failures.push(`${property}: ${answer.message}`);
      else sink.warn(`error ${property}`, `Alpaca ${this.#where(property)}: ${answer.message}`);
    });
    if (failures.length > 0 && failures.length === wanted.length) {
      throw new Error(`Alpaca ${this.#config.url}/api/v1/${this.#config.device}: ${failures[0]}`);
    }
    for (const failure of failures) {
      sink.warn(`failed ${failure.split(":")[0]}`, `Alpaca ${this.#config.url}: ${failure}`);
    }
    if (Object.keys(data).length > 0) sink.record({ data });
  }

  #where(property: string): string {
    return `${this.#config.url}/api/v1/${this.#config.device}/${property}`;
  }

  /** One GET of one property, within the bounds of size and time. */
  async #get(property: string, signal: AbortSignal): Promise<Answer> {
    this.#transaction = this.#transaction >= 0xffffffff ? 1 : this.#transaction + 1;
    const url = `${
      this.#where(property)
    }?ClientID=${this.#clientId}&ClientTransactionID=${this.#transaction}`;
    let text: string;
    try {
      const res = await fetch(url, {
        signal: AbortSignal.any([signal, AbortSignal.timeout(this.#config.timeoutMs)]),
        headers: { accept: "application/json" },
      });
      const what = `the answer of ${property}`;
      text = res.body
        ? new TextDecoder().decode(await readBounded(res.body, this.#config.maxBytes, what))
        : "";
      if (res.status !== 200) {
        return {
          ok: false,
          transport: true,
          message: `HTTP ${res.status} ${text.trim().slice(0, 200)}`,
        };
      }
    } catch (err) {
      const message = (err as Error).name === "TimeoutError"
        ? `no answer within ${this.#config.timeoutMs} ms (timeout_s)`
        : (err as Error).message;
      return { ok: false, transport: true, message };
    }
    return this.#answer(property, text);
  }

  #answer(property: string, text: string): Answer {
    let body: Record<string, unknown>;
    try {
      body = JSON.parse(text);
    } catch {
      return { ok: false, transport: false, message: "the answer is not JSON" };
    }
    const error = body?.ErrorNumber;
    if (error === NOT_IMPLEMENTED) return { ok: false, notImplemented: true };
    if (typeof error === "number" && error !== 0) {
      const message = typeof body.ErrorMessage === "string" ? body.ErrorMessage : "";
      return {
        ok: false,
        transport: false,
        message: `error 0x${error.toString(16)} ${message.slice(0, 200)}`.trim(),
      };
    }
    const value = body.Value;
    const expected = property === "issafe" ? "boolean" : "number";
    if (typeof value !== expected || (typeof value === "number" && !Number.isFinite(value))) {
      return { ok: false, transport: false, message: `the Value is not a ${expected}` };
    }
    return { ok: true, value: value as number | boolean };
  }
}

/**
 * The `alpaca` input kind (docs/collect.md, "Alpaca").
 *
 * @example A config, checked
 * ```ts
 * import { alpacaInput } from "./alpaca.ts";
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
 * const config = alpacaInput.parse(
 *   { url: "http://10.0.0.9:11111", device: "safetymonitor/0" },
 *   at,
 * );
 * assert.deepEqual(config.properties, { issafe: "issafe" });
 * assert.deepEqual(alpacaInput.needs!(config), { net: ["10.0.0.9:11111"] });
 * ```
 */
export const alpacaInput: InputKind<AlpacaConfig> = {
  kind: "alpaca",
  polled: true,
  keys: ["url", "device", "timeout_s", "max_bytes"],
  parse,
  create: (config, common) => new AlpacaInput(config, common),
  needs: (config) => {
    const url = new URL(config.url);
    return { net: [`${url.hostname}:${url.port || (url.protocol === "https:" ? 443 : 80)}`] };
  },
};
