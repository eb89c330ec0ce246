/**
 * The `obs-utils` usage as the docs print it against the commands the program knows
 * (`COMMAND_NAMES` of cli/main.ts): a command added to the program and left out of a usage text,
 * docs/cli.md or the `./cli` module doc fails here, as `collect` and `safety` once were left out.
 * @module
 */

import assert from "node:assert/strict";
import { HELP_TEXT } from "../../cli.ts";
import { COMMAND_NAMES } from "../../cli/main.ts";

const ROOT = new URL("../../", import.meta.url);
const CLI_MD = await Deno.readTextFile(new URL("docs/cli.md", ROOT));

/** The command names of a "Commands:" list, with `prefix` before each ("telemetry " or ""). */
function listed(text: string, prefix: string): string[] {
  const list = text.split("\nCommands:\n")[1]?.split("\n\n")[0] ?? "";
  return [...list.matchAll(new RegExp(`^ {2}${prefix}(\\S+)`, "gm"))].map((m) => m[1]!);
}

/** The output docs/cli.md prints after `$ <command>`, up to the end of its block. */
function printed(command: string): string {
  const at = CLI_MD.indexOf(`\n$ ${command}\n`);
  assert.ok(at >= 0, `docs/cli.md runs "${command}"`);
  const rest = CLI_MD.slice(at + command.length + 4);
  return rest.slice(0, rest.search(/\n(?:\$ |```)/));
}

Deno.test("the docs' obs-utils usage lists every command cli/main.ts knows", async () => {
  const all = [...COMMAND_NAMES, "help"].toSorted();
  for (const name of COMMAND_NAMES) assert.ok(HELP_TEXT[name], `HELP_TEXT has ${name}`);
  // The program's own texts...
  assert.deepEqual(listed(HELP_TEXT[""]!, "telemetry ").toSorted(), all, "obs-utils");
  assert.deepEqual(listed(HELP_TEXT.telemetry!, "").toSorted(), all, "obs-utils telemetry --help");
  // ...as docs/cli.md prints them.
  assert.equal(printed("obs-utils"), HELP_TEXT[""]!.trimEnd());
  assert.equal(printed("obs-utils telemetry --help"), HELP_TEXT.telemetry!.trimEnd());
  // The module doc of the ./cli entry point names them too.
  const moduleDoc = (await Deno.readTextFile(new URL("cli.ts", ROOT))).split("*/")[0]!;
  const named = moduleDoc.replace(/\n \* /g, " ").match(/`obs-utils telemetry ([^`]+)`/)?.[1];
  assert.deepEqual(named?.split(" | ").toSorted(), [...COMMAND_NAMES].toSorted(), "cli.ts");
});
