/**
 * `obs-utils telemetry post`: records one event from the shell and prints its envelope.
 *
 * @example Usage
 * ```ts ignore
 * import { postCommand } from "./post.ts";
 * Deno.exit(await postCommand(["weather", "--data", '{"wind_mps": 2.1}']));
 * ```
 *
 * @module
 */

import {
  client,
  clientFailure,
  connection,
  CONNECTION_HELP,
  CONNECTION_OPTIONS,
  Failure,
  parse,
  parseJsonObject,
  printHelp,
  printJson,
  UsageError,
} from "./common.ts";
import type { EventInput } from "../client/client.ts";

/** The `--help` text of `post`. */
export const POST_HELP: string = `Usage: obs-utils telemetry post TYPE [options]
       obs-utils telemetry post --file events.ndjson [--ephemeral] [--no-current]

Record one event and print its envelope; with --file, record a batch (all or nothing) and print
one envelope per line.

Options:
  --data JSON     The payload, a JSON object ('-' reads it from stdin)  [default {}]
  --meta JSON     Caller metadata, a JSON object
  --ts TIME       The event's own time, ISO 8601 with Z or an offset [default now]
  --file F        Post every line of an NDJSON file (or a JSON array) as one batch; each item
                  is {"type", "data", "meta"?, "ts"?, "store_permanently"?, "make_current"?}
                  ('-' reads stdin)
  --ephemeral     Update the current snapshot only; do not write to disk
  --no-current    Write to disk only; do not update the current snapshot (make_current false)
${CONNECTION_HELP}
`;

/**
 * Runs `obs-utils telemetry post`.
 *
 * @param args The arguments after `telemetry post`.
 * @returns The exit code, 0 once the service has recorded the event.
 * @throws {UsageError} For a bad flag, a missing TYPE or a payload that is not a JSON object.
 * @throws {Failure} If no service answers or it refuses the event.
 *
 * @example Usage
 * ```ts ignore
 * import { postCommand } from "./post.ts";
 * Deno.exit(await postCommand(["status", "--ephemeral"]));
 * ```
 */
export async function postCommand(args: string[]): Promise<number> {
  const { values, positionals } = parse("post", args, {
    ...CONNECTION_OPTIONS,
    data: { type: "string" },
    meta: { type: "string" },
    ts: { type: "string" },
    file: { type: "string" },
    ephemeral: { type: "boolean" },
    "no-current": { type: "boolean" },
  }, true);
  if (values.help) return printHelp(POST_HELP);
  if (values.file !== undefined) return await postFile(values.file, values, positionals);
  if (positionals.length !== 1) {
    throw new UsageError(
      positionals.length === 0 ? "missing TYPE, e.g. 'post weather'" : extraArguments(positionals),
      "post",
    );
  }
  const type = positionals[0]!;
  let dataText = values.data ?? "{}";
  let dataFlag = "--data";
  if (dataText === "-") {
    dataText = await new Response(Deno.stdin.readable).text();
    dataFlag = "--data - (stdin)";
  }
  const data = parseJsonObject(dataText, dataFlag, "post");
  const meta = values.meta === undefined
    ? undefined
    : parseJsonObject(values.meta, "--meta", "post");
  const conn = connection(values, "post");
  try {
    const event = await client(conn).postEvent(type, data, {
      ...(meta ? { meta } : {}),
      ...(values.ts !== undefined ? { ts: values.ts } : {}),
      ...(values.ephemeral ? { storePermanently: false } : {}),
      ...(values["no-current"] ? { makeCurrent: false } : {}),
    });
    printJson(JSON.stringify(event));
  } catch (err) {
    if (err instanceof TypeError) throw new UsageError(err.message, "post");
    throw clientFailure(err, conn);
  }
  return 0;
}

/** The fields of an event item (docs/http-api.md), in the order the messages list them. */
const ITEM_FIELDS = ["type", "data", "meta", "ts", "store_permanently", "make_current"];

/** `post --file`: every line (or array element) of the file is one item of one batch. */
async function postFile(
  file: string,
  values: {
    data?: string | undefined;
    meta?: string | undefined;
    ts?: string | undefined;
    ephemeral?: boolean | undefined;
    "no-current"?: boolean | undefined;
    host?: string | undefined;
    port?: string | undefined;
    token?: string | undefined;
  },
  positionals: string[],
): Promise<number> {
  const clash = positionals.length > 0
    ? "a TYPE"
    : values.data !== undefined
    ? "--data"
    : values.meta !== undefined
    ? "--meta"
    : values.ts !== undefined
    ? "--ts"
    : undefined;
  if (clash) {
    throw new UsageError(
      `--file takes each event's type, data, meta and ts from the file; drop ${clash}`,
      "post",
    );
  }
  const conn = connection(values, "post");
  const name = file === "-" ? "stdin" : file;
  let text: string;
  try {
    text = file === "-"
      ? await new Response(Deno.stdin.readable).text()
      : await Deno.readTextFile(file);
  } catch (err) {
    if (err instanceof Deno.errors.NotCapable) throw err;
    if (err instanceof Deno.errors.NotFound) throw new Failure(`no file ${file}; check --file`);
    throw new Failure(`cannot read ${name}: ${(err as Error).message}`);
  }
  const parsed = parseBatch(text, name);
  if (parsed.length === 0) throw new Failure(`${name} holds no events`);
  let events;
  try {
    events = await client(conn).postEvents(parsed.map(({ item }) => toInput(item, values)));
  } catch (err) {
    if (err instanceof TypeError) {
      // The client counts items from 0; name the line (or item) the way the file was read.
      const m = /^Cannot post events: items\[(\d+)\]:? ?(.*)$/.exec(err.message);
      const where = m ? parsed[Number(m[1])]?.where : undefined;
      throw new Failure(where ? `${where}: ${m![2]}` : `${name}: ${err.message}`);
    }
    throw clientFailure(err, conn);
  }
  printJson(events.map((event) => JSON.stringify(event)).join("\n"));
  return 0;
}

/**
 * The items of a batch file: a JSON array (items counted from 0, as the API does), or NDJSON
 * (lines counted from 1, as editors do; blank lines skipped).
 */
function parseBatch(
  text: string,
  name: string,
): { item: Record<string, unknown>; where: string }[] {
  const trimmed = text.trimStart();
  if (trimmed.startsWith("[")) {
    let value: unknown;
    try {
      value = JSON.parse(text);
    } catch (err) {
      throw new Failure(`${name} is not a valid JSON array (${oneLine(err)})`);
    }
    if (!Array.isArray(value)) throw new Failure(`${name} is not a valid JSON array`);
    return value.map((item, i) => {
      const where = `${name} item ${i} (0-based)`;
      return { item: checkItem(item, where), where };
    });
  }
  const items: { item: Record<string, unknown>; where: string }[] = [];
  const lines = text.split("\n");
  for (let i = 0; i < lines.length; i++) {
    const line = lines[i]!.trim();
    if (line === "") continue;
    const where = `${name} line ${i + 1}`;
    let value: unknown;
    try {
      value = JSON.parse(line);
    } catch (err) {
      throw new Failure(`${where} is not valid JSON (${oneLine(err)})`);
    }
    items.push({ item: checkItem(value, where), where });
  }
  return items;
}

function checkItem(value: unknown, where: string): Record<string, unknown> {
  if (typeof value !== "object" || value === null || Array.isArray(value)) {
    throw new Failure(`${where} must be a JSON object {"type": ..., "data": {...}}`);
  }
  const extra = Object.keys(value).find((key) => !ITEM_FIELDS.includes(key));
  if (extra !== undefined) {
    throw new Failure(
      `${where} has the field ${JSON.stringify(extra)}; an event accepts only ${
        ITEM_FIELDS.join(", ")
      }`,
    );
  }
  return value as Record<string, unknown>;
}

/** A wire item as the client's input; `--ephemeral`/`--no-current` fill what the item leaves. */
function toInput(
  item: Record<string, unknown>,
  flags: { ephemeral?: boolean | undefined; "no-current"?: boolean | undefined },
): EventInput {
  const store = item.store_permanently ?? (flags.ephemeral ? false : undefined);
  const current = item.make_current ?? (flags["no-current"] ? false : undefined);
  return {
    type: item.type,
    data: item.data,
    ...(item.meta !== undefined && item.meta !== null ? { meta: item.meta } : {}),
    ...(item.ts !== undefined && item.ts !== null ? { ts: item.ts } : {}),
    ...(store !== undefined && store !== null ? { storePermanently: store } : {}),
    ...(current !== undefined && current !== null ? { makeCurrent: current } : {}),
  } as EventInput;
}

/** An error's message on one line. */
function oneLine(err: unknown): string {
  return (err instanceof Error ? err.message : String(err)).replace(/\r?\n/g, "\\n");
}

/**
 * The usage error for more than one positional argument: data given as an argument gets the flag
 * it belongs to (docs/cli.md).
 */
function extraArguments(positionals: readonly string[]): string {
  const extra = positionals[1]!;
  if (/^\s*[{[]/.test(extra)) {
    return `expected one TYPE, got ${positionals.length} arguments; pass the data with --data, ` +
      `e.g. post ${positionals[0]} --data '${extra.length > 40 ? '{"wind_mps": 2.1}' : extra}'`;
  }
  return `expected one TYPE, got ${positionals.length} arguments ("${extra}" too); data goes in --data`;
}
