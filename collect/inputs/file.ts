/**
 * The `file` input (docs/collect.md): a file a weather program rewrites, read again when its
 * modification time changes (checked every `every_s`). Formats: `boltwood` (the one-line
 * Boltwood II / Clarity II data file), `keyvalue` (`key=value` lines) and `json`. Only a regular
 * file is read (a FIFO or a device would block or never end), at most `max_bytes` of it.
 *
 * @module
 */

import { readSourceTime } from "../source_time.ts";
import { boltwoodTime, parseBoltwood } from "./boltwood.ts";
import type { ConfigAt, InputKind, InputSink, RecordReading } from "./input.ts";
import type { InputCommon } from "./input.ts";
import { bytes, checkPointers, requireType } from "./http.ts";
import { jsonRecord } from "./json_record.ts";
import { tooLarge } from "./read_bounded.ts";

/** The formats of a `file` input. */
export type FileFormat = "boltwood" | "keyvalue" | "json";
const FORMATS: readonly FileFormat[] = ["boltwood", "keyvalue", "json"];

/** The parsed keys of a `file` input. */
export interface FileConfig {
  /** The file. */
  readonly path: string;
  /** How it is written. */
  readonly format: FileFormat;
  /** `boltwood`: the zone of its local date and time. */
  readonly tz: string;
  /** `keyvalue`: what separates a key from its value. */
  readonly separator: string;
  /** Largest file read. */
  readonly maxBytes: number;
}

/**
 * The `file` input kind.
 *
 * @example Usage
 * ```ts
 * import { fileInput } from "./file.ts";
 * import assert from "node:assert/strict";
 *
 * const at = { path: "inputs[0]", fail: (k: string, p: string): never => { throw new Error(`${k} ${p}`); }, child: () => at };
 * const config = fileInput.parse({ path: "/var/lib/clarity/now.txt", format: "boltwood", type: "cloud" }, at);
 * assert.deepEqual(fileInput.needs!(config), { read: ["/var/lib/clarity/now.txt"] });
 * ```
 */
export const fileInput: InputKind<FileConfig> = {
  kind: "file",
  polled: true,
  keys: ["path", "format", "tz", "separator", "max_bytes"],
  parse: (raw, at: ConfigAt): FileConfig => {
    requireType(raw, at);
    if (typeof raw.path !== "string" || raw.path === "") {
      at.fail(
        "path",
        `must be the file's path, not ${JSON.stringify(raw.path) ?? "missing"}`,
        'set "path": "/var/lib/clarity/now.txt"',
      );
    }
    const format = raw.format as FileFormat;
    if (!FORMATS.includes(format)) {
      at.fail(
        "format",
        `is ${JSON.stringify(raw.format) ?? "missing"}`,
        `set it to one of ${FORMATS.join(", ")}`,
      );
    }
    const tz = zone(raw.tz, at, format);
    if (
      raw.separator !== undefined &&
      (typeof raw.separator !== "string" || raw.separator === "" || format !== "keyvalue")
    ) {
      at.fail(
        "separator",
        'goes with "format": "keyvalue" and must be non-empty text',
        'write "separator": ":" or remove it',
      );
    }
    if (format === "json") checkPointers(raw, at);
    if (format !== "json" && typeof raw.ts === "string" && format === "boltwood") {
      at.fail(
        "ts",
        "is not used by the boltwood format (its line holds the date and time)",
        'remove "ts"',
      );
    }
    return {
      path: raw.path,
      format,
      tz,
      separator: (raw.separator as string | undefined) ?? "=",
      maxBytes: bytes(raw.max_bytes, at),
    };
  },
  create: (config, common) => {
    let lastMtime: number | undefined;
    const state: FileState = { boltwoodTs: undefined };
    return {
      poll: async (sink) => {
        const info = await Deno.stat(config.path).catch((err) => {
          throw new Error(`cannot read ${config.path}: ${(err as Error).message.split("\n")[0]}`);
        });
        if (!info.isFile) {
          throw new Error(
            `${config.path} is ${
              kindOf(info)
            }, not a regular file; refused (point "path" at the data file itself)`,
          );
        }
        const mtime = info.mtime?.getTime() ?? NaN;
        // Not rewritten since the last read: nothing new was measured (docs/collect.md).
        if (mtime === lastMtime) return;
        if (info.size > config.maxBytes) {
          throw tooLarge(`${config.path} (${info.size} bytes)`, config.maxBytes);
        }
        const text = await readPlainFile(config.path, config.maxBytes);
        sink.record(parseFile(text, config, common, sink, mtime, state));
        lastMtime = mtime;
      },
    };
  },
  needs: (config) => ({ read: [config.path] }),
};

/** Reads at most `max` bytes of a file opened as a regular file (checked again on the handle). */
async function readPlainFile(path: string, max: number): Promise<string> {
  using file = await Deno.open(path, { read: true });
  const info = await file.stat();
  if (!info.isFile) throw new Error(`${path} is ${kindOf(info)}, not a regular file; refused`);
  const buffer = new Uint8Array(max + 1);
  let size = 0;
  while (size < buffer.length) {
    const n = await file.read(buffer.subarray(size));
    if (n === null) break;
    size += n;
  }
  if (size > max) throw tooLarge(path, max);
  return new TextDecoder().decode(buffer.subarray(0, size));
}

function kindOf(info: Deno.FileInfo): string {
  if (info.isDirectory) return "a directory";
  if (info.isFifo) return "a FIFO";
  if (info.isCharDevice || info.isBlockDevice) return "a device";
  if (info.isSocket) return "a socket";
  return "not a plain file";
}

/** What a `file` input remembers between reads. */
interface FileState {
  /** The measurement time of the last Boltwood line read. */
  boltwoodTs: number | undefined;
}

function parseFile(
  text: string,
  config: FileConfig,
  common: InputCommon,
  sink: InputSink,
  mtimeMs: number,
  state: FileState,
): RecordReading {
  const what = config.path;
  if (config.format === "json") {
    let doc: unknown;
    try {
      doc = JSON.parse(text);
    } catch (err) {
      throw new Error(`${what} is not JSON (${(err as Error).message.split("\n")[0]})`);
    }
    return jsonRecord(doc, common, sink, what);
  }
  if (config.format === "boltwood") {
    let line;
    try {
      line = parseBoltwood(text, config.tz, mtimeMs);
    } catch (err) {
      throw new Error(`${what}: ${(err as Error).message}`);
    }
    state.boltwoodTs = boltwoodTime(line, state.boltwoodTs);
    return { data: pick(line.data, common, sink, what), sourceTs: state.boltwoodTs };
  }
  const all = keyValues(text, config.separator);
  const data = pick(all, common, sink, what);
  if (common.ts === undefined) return { data };
  const at = all[common.ts];
  if (at === undefined) throw new Error(`${what} has no key ${common.ts} (the input's "ts")`);
  try {
    return { data, sourceTs: readSourceTime(at, common.tsFormat ?? "iso") };
  } catch (err) {
    throw new Error(`${what}: the time at ${common.ts} ${(err as Error).message}`);
  }
}

/** `key=value` lines; blank lines and `#` comments skipped; numbers and true/false typed. */
function keyValues(text: string, separator: string): Record<string, unknown> {
  const out: Record<string, unknown> = {};
  for (const raw of text.split(/\r?\n/)) {
    const line = raw.trim();
    if (line === "" || line.startsWith("#")) continue;
    const at = line.indexOf(separator);
    if (at <= 0) continue;
    const key = line.slice(0, at).trim();
    const value = line.slice(at + separator.length).trim();
    const n = value === "" ? NaN : Number(value);
    out[key] = Number.isFinite(n) ? n : value === "true" ? true : value === "false" ? false : value;
  }
  return out;
}

/** The record's data: every value, or the `fields` map (event field -> key/column). */
function pick(
  all: Readonly<Record<string, unknown>>,
  common: InputCommon,
  sink: InputSink,
  what: string,
): Record<string, unknown> {
  if (common.fields === undefined) return { ...all };
  const data: Record<string, unknown> = {};
  for (const [name, key] of Object.entries(common.fields)) {
    if (Object.hasOwn(all, key)) data[name] = all[key];
    else sink.warn(`field:${name}`, `${what} has no ${key} (field "${name}"): left out`);
  }
  return data;
}

function zone(value: unknown, at: ConfigAt, format: FileFormat): string {
  if (value === undefined) return Intl.DateTimeFormat().resolvedOptions().timeZone;
  if (format !== "boltwood") at.fail("tz", 'goes with "format": "boltwood" only', 'remove "tz"');
  try {
    if (typeof value !== "string") throw new Error();
    Temporal.Now.zonedDateTimeISO(value);
    return value;
  } catch {
    return at.fail(
      "tz",
      `is ${JSON.stringify(value)}, not an IANA time zone`,
      'set "tz": "Europe/Madrid"',
    );
  }
}
