/**
 * What one input of the collector must do (docs/collect.md): read its source, and hand what it
 * read to an {@linkcode InputSink}. The collector (`collect/collector.ts`) owns everything an
 * input shares with the others: the common config keys, merging per type, the "unchanged source
 * time posts nothing" rule, the queue to the service, back-off bookkeeping and the log. Each
 * input kind is one file beside this one (`http.ts`, `mqtt.ts`, `indi.ts`, `alpaca.ts`,
 * `file.ts`) exporting an {@linkcode InputKind}; `collect/inputs/mod.ts` lists them.
 *
 * Two shapes of source exist. A polled source (`http`, `alpaca`, `file`) reads a whole record
 * every `every_s` and calls {@linkcode InputSink.record}; a push source (`mqtt`, `indi`) hears one
 * value at a time and calls {@linkcode InputSink.field}, and the collector merges those per type.
 *
 * @example An input kind that reads a constant
 * ```ts
 * import type { InputKind, InputSink } from "./input.ts";
 * import assert from "node:assert/strict";
 *
 * const constant: InputKind<{ value: number }> = {
 *   kind: "constant",
 *   polled: true,
 *   parse: (raw, at) => {
 *     if (typeof raw.value !== "number") at.fail("value", "must be a number", "set it to 1");
 *     return { value: raw.value as number };
 *   },
 *   create: (config) => ({
 *     poll: (sink) => {
 *       sink.record({ data: { value: config.value } });
 *       return Promise.resolve();
 *     },
 *   }),
 * };
 * const seen: unknown[] = [];
 * const sink: InputSink = {
 *   record: (r) => seen.push(r.data),
 *   field: () => {},
 *   warn: () => {},
 * };
 * await constant.create({ value: 3 }, { name: "c", type: "demo" }).poll!(sink, new AbortController().signal);
 * assert.deepEqual(seen, [{ value: 3 }]);
 * ```
 *
 * @module
 */

/** Where a config value sits, to name it in an error: `inputs[2].topics["a/#"].type`. */
export interface ConfigAt {
  /** The JSON path of this object in the config file, e.g. `inputs[2]`. */
  readonly path: string;
  /**
   * Refuses the config: throws a config error that names the file, `path` + `key`, what is wrong
   * and the fix (one line, as the types file's errors read).
   *
   * @param key The key (or `[index]`) under this path; `""` for the object itself.
   * @param problem What is wrong, e.g. `must be a number of seconds >= 1`.
   * @param fix What to change, e.g. `set "every_s": 30`.
   */
  fail(key: string, problem: string, fix: string): never;
  /** The place of a nested object, for nested checks: `at.child("topics")`. */
  child(key: string): ConfigAt;
}

/** What every input has, parsed by the collector from the common keys (docs/collect.md). */
export interface InputCommon {
  /** The input's `name` (unique in the config), used in log lines. */
  readonly name: string;
  /** The input's `type`: the event type of what it reads (push inputs may name more per topic or device). */
  readonly type?: string | undefined;
  /** `fields`: event field name -> where the value is (JSON Pointer, `PROPERTY.ELEMENT`, property, key). */
  readonly fields?: Readonly<Record<string, string>> | undefined;
  /** `every_s` in milliseconds (default 30 s): how often a polled input reads. */
  readonly everyMs?: number | undefined;
  /** `ts`: where the source says when it measured (a JSON Pointer or key), with `ts_format`. */
  readonly ts?: string | undefined;
  /** `ts_format`: how that time is written. */
  readonly tsFormat?: "iso" | "unix" | "unix_ms" | undefined;
}

/** One whole record read from a polled source. */
export interface RecordReading {
  /** The event type; the input's `type` when absent. */
  readonly type?: string | undefined;
  /** The event's data. */
  readonly data: Record<string, unknown>;
  /**
   * When the source says it measured (epoch milliseconds); absent when the source has no time
   * (then the collector stamps the moment of reading). A record whose source time equals the
   * previous record's of the same input and type is not posted (docs/collect.md).
   */
  readonly sourceTs?: number | undefined;
}

/** One value heard from a push source, merged per type by the collector. */
export interface FieldReading {
  /** The event type the value belongs to. */
  readonly type: string;
  /** The event field name (dotted for nested, e.g. `WEATHER_PARAMETERS.WEATHER_TEMPERATURE`). */
  readonly field: string;
  /** The value: a number, boolean, string or JSON object (an object is merged as fields). */
  readonly value: unknown;
  /** When the source says it measured (epoch milliseconds), if it says. */
  readonly sourceTs?: number | undefined;
}

/** Where an input delivers what it reads, and reports trouble. */
export interface InputSink {
  /** A whole record (polled inputs). */
  record(reading: RecordReading): void;
  /** One value (push inputs); the collector merges values per type, at most once per `merge_ms`. */
  field(reading: FieldReading): void;
  /**
   * Something read was refused or damaged but the input stays up (a payload over the size
   * bound, an unparsable message): the collector logs it once per distinct `key` per state.
   */
  warn(key: string, message: string): void;
}

/** A running input. Exactly one of `poll` and `listen` is present, as the kind's `polled` says. */
export interface Input {
  /**
   * Reads the source once and delivers what it read. Rejects when the source is unreachable or
   * answers wrongly: the collector logs the change of state (up -> down) once and retries with
   * capped back-off.
   */
  poll?(sink: InputSink, signal: AbortSignal): Promise<void>;
  /**
   * Connects and delivers values until `signal` aborts (then resolves). Rejects when the
   * connection is lost or cannot be made; the collector logs the change of state once and calls
   * `listen` again after a capped back-off. Calls `up` once connected, so the collector can log
   * the recovery and reset its back-off.
   */
  listen?(sink: InputSink, signal: AbortSignal, up: () => void): Promise<void>;
  /** Releases what the input holds (sockets, clients); called once at the end. */
  close?(): Promise<void>;
}

/**
 * One kind of input: its config check and how to start it.
 *
 * @typeParam C The kind's parsed config (its own keys; the common ones are in {@linkcode InputCommon}).
 */
export interface InputKind<C> {
  /** The `kind` value in the config: `http`, `mqtt`, `indi`, `alpaca`, `file`. */
  readonly kind: string;
  /** True for polled sources (`poll`, every `every_s`), false for push sources (`listen`). */
  readonly polled: boolean;
  /**
   * The kind's own keys. When given, the collector refuses any other key of an input of this
   * kind (besides the common ones) with the list of both; when absent, `parse` must refuse
   * unknown keys itself.
   */
  readonly keys?: readonly string[];
  /**
   * Checks the kind's own keys of one `inputs[i]` object (the common keys are checked by the
   * collector) and returns its config; refuses with `at.fail()`.
   */
  parse(raw: Readonly<Record<string, unknown>>, at: ConfigAt): C;
  /** Builds the input; nothing is connected or read until `poll` or `listen`. */
  create(config: C, common: InputCommon): Input;
  /**
   * The hosts (`host:port`) the input connects to, for the collector's scoped `--allow-net`;
   * files it reads, for `--allow-read`; and environment variables its libraries read that must
   * read as unset, for `--ignore-env` (docs/collect.md, "Permissions").
   */
  readonly needs?: (config: C) => { net?: string[]; read?: string[]; ignoreEnv?: string[] };
}
