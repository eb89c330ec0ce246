/** Tests of `core/types_registry.ts`: the `--types` file, read strictly. @module */

import assert from "node:assert/strict";
import { join } from "node:path";
import { loadTypes, parseTypes, TypesFileError } from "../../core/types_registry.ts";
import { CLI, cliRunArgs, freePort, tempDir } from "../_shared/util.ts";

const EXAMPLE = new URL("../../examples/types.json", import.meta.url).pathname;

/** The one-line message parseTypes() gives for a file's text. */
function refusal(text: string): string {
  try {
    parseTypes(text, "types.json");
  } catch (err) {
    assert.ok(err instanceof TypesFileError, String(err));
    assert.doesNotMatch(err.message, /\n/);
    return err.message;
  }
  assert.fail(`accepted ${text}`);
}

Deno.test("the example types file describes a PANOPTES unit: weather stale after 180 s, AC power after 90 s", async () => {
  const types = await loadTypes(EXAMPLE);
  assert.deepEqual([...types.keys()], ["weather", "power", "safety", "environment", "status"]);
  assert.equal(types.get("weather")?.stale_after_s, 180);
  assert.equal(types.get("power")?.stale_after_s, 90);
  assert.equal(types.get("weather")?.critical, true);
  assert.equal(types.get("environment")?.critical, false);
  assert.equal(types.get("environment")?.fields["system.free_space"]?.warn_below, 20);
});

Deno.test("the registry keeps types and fields in the order of the file", () => {
  const types = parseTypes(
    '{"z": {"fields": {"b": {}, "a.c": {"unit": "m"}}}, "a": {"order": 2, "critical": true}}',
    "t.json",
  );
  assert.deepEqual([...types.keys()], ["z", "a"]);
  assert.deepEqual(Object.keys(types.get("z")!.fields), ["b", "a.c"]);
  assert.deepEqual(types.get("a"), { critical: true, order: 2, fields: {} });
});

Deno.test("a types file with an unknown key is refused naming the file, the JSON path and the keys accepted", () => {
  assert.equal(
    refusal('{"weather": {"stale_after": 180}}'),
    'Cannot use --types types.json: at $.weather.stale_after unknown key "stale_after"; a type accepts description, stale_after_s, critical, order, clear_after_s, critical_for, fields',
  );
  assert.equal(
    refusal('{"weather": {"fields": {"system.free_space": {"warn_bellow": 20}}}}'),
    'Cannot use --types types.json: at $.weather.fields["system.free_space"].warn_bellow unknown key "warn_bellow"; a field accepts label, unit, warn_above, warn_below, alarm_above, alarm_below, warn_if, alarm_if, alpaca',
  );
});

Deno.test("a types file that is not JSON is refused in one line that says to fix the syntax", () => {
  assert.match(
    refusal('{"weather": {"stale_after_s": 180,}}'),
    /^Cannot use --types types\.json: at \$ the file is not valid JSON \(.+\); fix the JSON syntax$/,
  );
});

Deno.test("a types file with a value of the wrong kind is refused saying what is expected", () => {
  const cases: [string, RegExp][] = [
    ["[]", /at \$ expected an object keyed by event type, .* not an array$/],
    ['{"weather": 1}', /at \$\.weather expected an object describing the type/],
    [
      '{"weather": {"stale_after_s": "180"}}',
      /at \$\.weather\.stale_after_s expected a number of seconds above 0, not the string "180"$/,
    ],
    [
      '{"weather": {"stale_after_s": 0}}',
      /stale_after_s expected a number of seconds above 0, not the number 0$/,
    ],
    ['{"weather": {"critical": "yes"}}', /at \$\.weather\.critical expected true or false/],
    ['{"weather": {"order": null}}', /at \$\.weather\.order expected a number, not null$/],
    ['{"weather": {"fields": []}}', /at \$\.weather\.fields expected an object keyed by field/],
    [
      '{"weather": {"fields": {"wind": {"alarm_above": "15"}}}}',
      /\.wind\.alarm_above expected a number, not the string "15"$/,
    ],
    [
      '{"weather": {"fields": {"wind": {"unit": 5}}}}',
      /\.wind\.unit expected a string, not the number 5$/,
    ],
    [
      '{"weather": {"fields": {"a..b": {}}}}',
      /\["a\.\.b"\] the field path must be names joined by single dots/,
    ],
    ['{"": {}}', /at \$\[""\] the type name must be 1 to 128 characters$/],
    ['{"a\\u0007": {}}', /the type name must not hold control characters$/],
    [
      '{"w": {"fields": {"wind": {"warn_above": 20, "alarm_above": 15}}}}',
      /warn_above 20 is above alarm_above 15; the warning must come first, so make warn_above the smaller$/,
    ],
    [
      '{"p": {"fields": {"v": {"warn_below": 11, "alarm_below": 12}}}}',
      /warn_below 11 is below alarm_below 12; the warning must come first, so make warn_below the larger$/,
    ],
  ];
  for (const [text, want] of cases) assert.match(refusal(text), want, text);
});

Deno.test("a __proto__ type or field is an ordinary name, never a prototype", () => {
  const types = parseTypes('{"__proto__": {"fields": {"__proto__": {"unit": "m"}}}}', "t.json");
  assert.deepEqual([...types.keys()], ["__proto__"]);
  assert.equal(types.get("__proto__")!.fields["__proto__"]?.unit, "m");
  assert.equal(({} as Record<string, unknown>).unit, undefined);
});

Deno.test("random mutations of a valid file are accepted or refused in one line, never thrown otherwise", () => {
  const base = Deno.readTextFileSync(EXAMPLE);
  let seed = 20261125;
  const rand = (n: number) => {
    seed = (seed * 1103515245 + 12345) % 2 ** 31;
    return seed % n;
  };
  const junk = ['"', "{", "}", ",", ":", "1", "-", "x", "[", "]", "\\", "\u0000", "e9"];
  for (let i = 0; i < 500; i++) {
    let text = base;
    for (let k = 0; k < 1 + rand(3); k++) {
      const at = rand(text.length);
      text = rand(2) === 0
        ? text.slice(0, at) + junk[rand(junk.length)] + text.slice(at)
        : text.slice(0, at) + text.slice(at + 1 + rand(4));
    }
    try {
      parseTypes(text, "types.json");
    } catch (err) {
      assert.ok(err instanceof TypesFileError, `${err} for ${text}`);
      assert.match(err.message, /^Cannot use --types types\.json: at \$\S* /);
      assert.doesNotMatch(err.message, /\n/);
    }
  }
});

Deno.test("loadTypes() refuses a missing file, a directory and a huge file in one line naming --types", async () => {
  await using dir = await tempDir();
  await assert.rejects(loadTypes(join(dir.path, "nope.json")), {
    name: "TypesFileError",
    message:
      `Cannot use --types ${dir.path}/nope.json: at $ the file does not exist; check the path given to --types (or OBS_TELEMETRY_TYPES)`,
  });
  await assert.rejects(
    loadTypes(dir.path),
    /at \$ it is not a regular file; point --types at a JSON file$/,
  );
  // A FIFO (or /dev/stdin) would block start-up forever: refused before it is opened.
  const fifo = join(dir.path, "types.fifo");
  await new Deno.Command("mkfifo", { args: [fifo] }).output();
  await assert.rejects(loadTypes(fifo), /at \$ it is not a regular file/);
  const huge = join(dir.path, "huge.json");
  await Deno.writeTextFile(huge, `{"a": {"description": "${"x".repeat(5 * 1024 * 1024)}"}}`);
  await assert.rejects(loadTypes(huge), /more than the 4194304 allowed; describe fewer types$/);
  const latin1 = join(dir.path, "latin1.json");
  await Deno.writeFile(latin1, new Uint8Array([0x7b, 0x22, 0xe9, 0x22, 0x3a, 0x7b, 0x7d, 0x7d]));
  await assert.rejects(loadTypes(latin1), /the file is not valid UTF-8; save it as UTF-8$/);
});

Deno.test("run refuses to start with a bad --types file: one line on stderr, exit 1, nothing listening", async () => {
  await using dir = await tempDir();
  const file = join(dir.path, "types.json");
  await Deno.writeTextFile(file, '{"weather": {"fields": {"wind": {"alarm_abov": 15}}}}');
  const site = join(dir.path, "site");
  const port = freePort();
  const out = await new Deno.Command(Deno.execPath(), {
    args: cliRunArgs(site, port, ["--types", file], ["--allow-all"]),
    stdout: "piped",
    stderr: "piped",
  }).output();
  const stderr = new TextDecoder().decode(out.stderr);
  assert.equal(out.code, 1);
  assert.equal(new TextDecoder().decode(out.stdout), "");
  assert.equal(
    stderr,
    `error: Cannot use --types ${file}: at $.weather.fields.wind.alarm_abov unknown key "alarm_abov"; a field accepts label, unit, warn_above, warn_below, alarm_above, alarm_below, warn_if, alarm_if, alpaca\n`,
  );
  // The site directory was never opened.
  await assert.rejects(Deno.stat(site), Deno.errors.NotFound);
  assert.ok(CLI.endsWith("cli.ts"));
});

Deno.test("run reads OBS_TELEMETRY_TYPES when --types is absent", async () => {
  await using dir = await tempDir();
  const file = join(dir.path, "types.json");
  await Deno.writeTextFile(file, "not json");
  const out = await new Deno.Command(Deno.execPath(), {
    args: cliRunArgs(join(dir.path, "site"), freePort(), [], ["--allow-all"]),
    env: { OBS_TELEMETRY_TYPES: file },
    stdout: "piped",
    stderr: "piped",
  }).output();
  assert.equal(out.code, 1);
  assert.match(
    new TextDecoder().decode(out.stderr),
    new RegExp(
      `^error: Cannot use --types ${file}: at \\$ the file is not valid JSON .*; fix the JSON syntax\\n$`,
    ),
  );
});
