/**
 * The collector's config file (docs/collect.md, "Config"): `{"inputs": [...]}`, each input's
 * common keys checked here and its own keys by its kind. A bad config refuses start-up with one
 * line naming the file, the JSON path and the fix.
 *
 * @module
 */

import type { ConfigAt, InputCommon, InputKind } from "./inputs/input.ts";
import { TS_FORMATS, type TsFormat } from "./source_time.ts";

/** Largest config file read, in bytes. */
export const MAX_CONFIG_BYTES = 1024 * 1024;

/** The keys every input may have, whatever its kind (docs/collect.md). */
export const COMMON_KEYS: readonly string[] = [
  "name",
  "kind",
  "type",
  "fields",
  "every_s",
  "ts",
  "ts_format",
  "meta",
  "store_permanently",
  "merge_ms",
];

/** `every_s` when absent, in seconds. */
export const DEFAULT_EVERY_S = 30;
/** `merge_ms` when absent. */
export const DEFAULT_MERGE_MS = 500;

/**
 * A config the collector cannot use. The message is one line naming the file, the JSON path and
 * the fix.
 *
 * @example Usage
 * ```ts
 * import { CollectConfigError, parseCollectConfig } from "./config.ts";
 * import assert from "node:assert/strict";
 *
 * assert.throws(() => parseCollectConfig('{"inputs": 3}', "c.json", []), CollectConfigError);
 * ```
 */
export class CollectConfigError extends Error {
  /**
   * Creates the error.
   *
   * @param message The one line: file, JSON path, what is wrong, the fix.
   */
  constructor(message: string) {
    super(message);
    this.name = "CollectConfigError";
  }
}

/** The common settings of one input, as the collector uses them. */
export interface InputSettings extends InputCommon {
  /** The input's `kind`. */
  readonly kind: string;
  /** `every_s` in milliseconds. */
  readonly everyMs: number;
  /** `merge_ms`. */
  readonly mergeMs: number;
  /** `meta`, merged into each event's meta. */
  readonly meta?: Readonly<Record<string, unknown>> | undefined;
  /** `store_permanently` of each event, when given. */
  readonly storePermanently?: boolean | undefined;
}

/** One input of a parsed config: its common settings, its kind and the kind's own config. */
export interface CollectInputConfig {
  /** The common keys. */
  readonly settings: InputSettings;
  /** The kind that runs it. */
  // deno-lint-ignore no-explicit-any
  readonly kind: InputKind<any>;
  /** What the kind's `parse` returned. */
  readonly config: unknown;
}

/** A parsed collector config. */
export interface CollectConfig {
  /** The file it was read from, as given. */
  readonly file: string;
  /** The inputs in the file's order. */
  readonly inputs: readonly CollectInputConfig[];
}

/**
 * Parses and checks the text of a collector config.
 *
 * @param text The file's text.
 * @param file The file's name, as the messages show it.
 * @param kinds The input kinds known (`INPUT_KINDS` of `collect/inputs/mod.ts`).
 * @returns The config.
 * @throws {CollectConfigError} For anything the collector cannot use; the message is one line
 *   naming the file, the JSON path and the fix.
 *
 * @example Usage
 * ```ts
 * import { CollectConfigError, parseCollectConfig } from "./config.ts";
 * import assert from "node:assert/strict";
 *
 * assert.throws(
 *   () => parseCollectConfig('{"inputs": [{"name": "a", "kind": "telnet"}]}', "c.json", []),
 *   (err: unknown) => err instanceof CollectConfigError && /inputs\[0\]\.kind/.test(err.message),
 * );
 * ```
 */
export function parseCollectConfig(
  text: string,
  file: string,
  // deno-lint-ignore no-explicit-any
  kinds: readonly InputKind<any>[],
): CollectConfig {
  const root: ConfigAt = configAt(file, "");
  let value: unknown;
  try {
    value = JSON.parse(text);
  } catch (err) {
    const why = (err instanceof Error ? err.message : String(err)).replace(/\s+/g, " ");
    root.fail("", `is not valid JSON (${why})`, "fix the JSON syntax");
  }
  if (!isObject(value)) {
    root.fail("", `must be an object, not ${describe(value)}`, 'write {"inputs": [...]}');
  }
  for (const key of Object.keys(value)) {
    if (key !== "inputs") {
      root.fail(key, "is not a key of the config", 'the file holds only "inputs"');
    }
  }
  const list = value.inputs;
  if (!Array.isArray(list) || list.length === 0) {
    root.fail(
      "inputs",
      `must be a non-empty array of inputs, not ${describe(list)}`,
      'write "inputs": [{"name": "...", "kind": "http", ...}]',
    );
  }
  const names = new Map<string, number>();
  const inputs = list.map((raw, i) => {
    const at: ConfigAt = configAt(file, `inputs[${i}]`);
    const input = parseInput(raw, at, kinds);
    const earlier = names.get(input.settings.name);
    if (earlier !== undefined) {
      at.fail(
        "name",
        `repeats the name of inputs[${earlier}]`,
        "give every input a name of its own",
      );
    }
    names.set(input.settings.name, i);
    return input;
  });
  return { file, inputs };
}

/**
 * Reads and checks a collector config file.
 *
 * @param file The path.
 * @param kinds The input kinds known.
 * @returns The config.
 * @throws {CollectConfigError} When the file cannot be read, is too large or is not a config.
 *
 * @example Usage
 * ```ts ignore
 * import { readCollectConfig } from "./config.ts";
 * import { INPUT_KINDS } from "./inputs/mod.ts";
 * const config = readCollectConfig("/etc/obs-telemetry-collect.json", INPUT_KINDS);
 * ```
 */
export function readCollectConfig(
  file: string,
  // deno-lint-ignore no-explicit-any
  kinds: readonly InputKind<any>[],
): CollectConfig {
  let bytes: Uint8Array;
  try {
    const info = Deno.statSync(file);
    if (!info.isFile) throw new Error("it is not a regular file");
    if (info.size > MAX_CONFIG_BYTES) {
      throw new Error(`it has ${info.size} bytes, more than ${MAX_CONFIG_BYTES}`);
    }
    bytes = Deno.readFileSync(file);
  } catch (err) {
    if (err instanceof Deno.errors.NotCapable) throw err;
    const why = err instanceof Error ? err.message.split("\n")[0] : String(err);
    throw new CollectConfigError(
      `Cannot use collect config ${file}: cannot read it (${why}); pass --config with the path of a readable JSON file`,
    );
  }
  return parseCollectConfig(new TextDecoder().decode(bytes), file, kinds);
}

function parseInput(
  raw: unknown,
  at: ConfigAt,
  // deno-lint-ignore no-explicit-any
  kinds: readonly InputKind<any>[],
): CollectInputConfig {
  if (!isObject(raw)) {
    at.fail("", `must be an object, not ${describe(raw)}`, 'write {"name": "...", "kind": "..."}');
  }
  const names = kinds.map((k) => k.kind);
  const kindName = raw.kind;
  const kind = kinds.find((k) => k.kind === kindName);
  if (kind === undefined) {
    at.fail(
      "kind",
      `${kindName === undefined ? "is missing" : `is ${describe(kindName)}`}`,
      `set "kind" to one of ${names.map((n) => JSON.stringify(n)).join(", ")}`,
    );
  }
  const own = kind.keys;
  if (own !== undefined) {
    for (const key of Object.keys(raw)) {
      if (!COMMON_KEYS.includes(key) && !own.includes(key)) {
        at.fail(
          key,
          `is not a key of a "${kind.kind}" input`,
          `remove it; it takes ${[...COMMON_KEYS, ...own].join(", ")}`,
        );
      }
    }
  }
  const settings = parseCommon(raw, at, kind.kind);
  const config = kind.parse(raw, at);
  return { settings, kind, config };
}

function parseCommon(raw: Record<string, unknown>, at: ConfigAt, kind: string): InputSettings {
  const name = raw.name;
  if (typeof name !== "string" || !/^[\w.-]{1,64}$/.test(name)) {
    at.fail(
      "name",
      `must be 1 to 64 letters, digits, "_", "-" or ".", not ${describe(name)}`,
      'set "name": "weather-station"',
    );
  }
  const type = optionalType(raw.type, at);
  const fields = optionalFields(raw.fields, at);
  const everyS = optionalNumber(raw.every_s, at, "every_s", 0.1, 86_400, 'set "every_s": 30');
  const mergeMs = optionalNumber(raw.merge_ms, at, "merge_ms", 0, 3_600_000, 'set "merge_ms": 500');
  let ts: string | undefined;
  if (raw.ts !== undefined) {
    if (typeof raw.ts !== "string") {
      at.fail(
        "ts",
        `must be text naming where the time is, not ${describe(raw.ts)}`,
        'set "ts": "/time"',
      );
    }
    ts = raw.ts;
  }
  let tsFormat: TsFormat | undefined;
  if (raw.ts_format !== undefined) {
    if (!TS_FORMATS.includes(raw.ts_format as TsFormat)) {
      at.fail("ts_format", `is ${describe(raw.ts_format)}`, `use one of ${TS_FORMATS.join(", ")}`);
    }
    if (ts === undefined) at.fail("ts_format", 'is given without "ts"', 'add "ts" or remove it');
    tsFormat = raw.ts_format as TsFormat;
  }
  if (raw.meta !== undefined && !isObject(raw.meta)) {
    at.fail(
      "meta",
      `must be an object, not ${describe(raw.meta)}`,
      'write "meta": {"site": "north"}',
    );
  }
  if (raw.store_permanently !== undefined && typeof raw.store_permanently !== "boolean") {
    at.fail(
      "store_permanently",
      `must be true or false, not ${describe(raw.store_permanently)}`,
      "use true or false",
    );
  }
  return {
    name,
    kind,
    type,
    fields,
    everyMs: Math.round((everyS ?? DEFAULT_EVERY_S) * 1000),
    mergeMs: mergeMs ?? DEFAULT_MERGE_MS,
    ts,
    tsFormat: tsFormat ?? (ts === undefined ? undefined : "iso"),
    meta: raw.meta as Record<string, unknown> | undefined,
    storePermanently: raw.store_permanently as boolean | undefined,
  };
}

function optionalType(value: unknown, at: ConfigAt): string | undefined {
  if (value === undefined) return undefined;
  if (
    typeof value !== "string" || value.length === 0 || value.length > 128 ||
    // deno-lint-ignore no-control-regex
    /[\u0000-\u001f\u007f-\u009f]/.test(value)
  ) {
    at.fail(
      "type",
      `must be an event type of 1 to 128 printable characters, not ${describe(value)}`,
      'set "type": "weather"',
    );
  }
  return value;
}

function optionalFields(value: unknown, at: ConfigAt): Record<string, string> | undefined {
  if (value === undefined) return undefined;
  if (!isObject(value) || Object.keys(value).length === 0) {
    at.fail(
      "fields",
      `must be a non-empty object of field name -> source, not ${describe(value)}`,
      'write "fields": {"temp_c": "/temperature"}',
    );
  }
  const fields: ConfigAt = at.child("fields");
  for (const [name, where] of Object.entries(value)) {
    if (name === "" || name.length > 256) {
      fields.fail(name, "is not a field name of 1 to 256 characters", "rename it");
    }
    if (typeof where !== "string") {
      fields.fail(
        name,
        `must be text naming where the value is, not ${describe(where)}`,
        `write "${name}": "/path/in/source"`,
      );
    }
  }
  return value as Record<string, string>;
}

function optionalNumber(
  value: unknown,
  at: ConfigAt,
  key: string,
  min: number,
  max: number,
  fix: string,
): number | undefined {
  if (value === undefined) return undefined;
  if (typeof value !== "number" || !Number.isFinite(value) || value < min || value > max) {
    at.fail(key, `must be a number from ${min} to ${max}, not ${describe(value)}`, fix);
  }
  return value;
}

/**
 * A {@linkcode ConfigAt} for `path` of `file`.
 *
 * @param file The config file, as messages name it.
 * @param path The JSON path, e.g. `inputs[2]`; `""` for the root.
 * @returns The place.
 *
 * @example Usage
 * ```ts
 * import { CollectConfigError, configAt } from "./config.ts";
 * import assert from "node:assert/strict";
 *
 * assert.throws(
 *   () => configAt("c.json", "inputs[0]").child("topics").fail("a/#", "is bad", "fix it"),
 *   /c\.json: at inputs\[0\]\.topics\["a\/#"\] is bad; fix it/,
 * );
 * assert.ok(CollectConfigError);
 * ```
 */
export function configAt(file: string, path: string): ConfigAt {
  return {
    path,
    fail(key: string, problem: string, fix: string): never {
      const where = join(path, key) || "the top level";
      const line = `Cannot use collect config ${file}: at ${where} ${problem}; ${fix}`;
      throw new CollectConfigError(line.replace(/[\r\n]+/g, " "));
    },
    child(key: string): ConfigAt {
      return configAt(file, join(path, key));
    },
  };
}

/** `inputs[2]` + `every_s` -> `inputs[2].every_s`; odd keys are quoted: `topics["a/#"]`. */
function join(path: string, key: string): string {
  if (key === "") return path;
  if (/^\[\d+\]$/.test(key)) return path + key;
  if (/^[A-Za-z_][\w]*$/.test(key)) return path === "" ? key : `${path}.${key}`;
  return `${path}[${JSON.stringify(key)}]`;
}

function isObject(value: unknown): value is Record<string, unknown> {
  return value !== null && typeof value === "object" && !Array.isArray(value);
}

/**
 * A value as an error message shows it: its JSON, shortened.
 *
 * @param value Any value.
 * @returns `the string "x"`, `an array`, `missing`...
 *
 * @example Usage
 * ```ts
 * import { describe } from "./config.ts";
 * import assert from "node:assert/strict";
 *
 * assert.equal(describe("30"), '"30"');
 * ```
 */
export function describe(value: unknown): string {
  if (value === undefined) return "missing";
  if (Array.isArray(value)) return "an array";
  if (value !== null && typeof value === "object") return "an object";
  const text = JSON.stringify(value) ?? String(value);
  return text.length > 60 ? `${text.slice(0, 57)}...` : text;
}
