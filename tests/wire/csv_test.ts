/**
 * CSV output never hands a spreadsheet a formula: text cells that start with `=`, `+`, `-`, `@`,
 * TAB or CR get a `'` in front, numbers stay as they are (docs/history.md, "CSV"). @module
 */

import assert from "node:assert/strict";
import { join } from "node:path";
import { CLI, tempDir } from "../_shared/util.ts";
import { csvCell } from "../../wire/csv.ts";

const HOSTILE = {
  eq: '=HYPERLINK("http://evil.example","x")',
  plus: "+1+cmd|' /C calc'!A0",
  minus: "-2+3+cmd|' /C calc'!A0",
  at: "@SUM(1+1)*cmd|' /C calc'!A0",
  tab: "\t=1+1",
  cr: "\r=1+1",
};

/** Splits one RFC 4180 record (quoted fields may hold commas, quotes and line breaks). */
function parseRecord(text: string): string[] {
  const cells: string[] = [];
  let at = 0;
  while (at <= text.length) {
    if (text[at] === '"') {
      let cell = "";
      at++;
      while (at < text.length) {
        if (text[at] === '"' && text[at + 1] === '"') (cell += '"', at += 2);
        else if (text[at] === '"') break;
        else cell += text[at++];
      }
      cells.push(cell);
      at += 2; // the closing quote and the comma
    } else {
      const end = text.indexOf(",", at);
      cells.push(text.slice(at, end < 0 ? text.length : end));
      at = end < 0 ? text.length + 1 : end + 1;
    }
  }
  return cells;
}

Deno.test("read --format csv puts a quote before text cells a spreadsheet would run as formulas", async () => {
  await using dir = await tempDir();
  const data = { ...HOSTILE, n: -3.5, s: "-3.5", plain: "dome open" };
  const line = JSON.stringify({
    seq: 1,
    ts: "2026-05-10T13:00:00.000Z",
    type: "weather",
    data,
    meta: {},
  });
  await Deno.writeTextFile(join(dir.path, "site_20260510.ndjson"), line + "\n");
  const fields = Object.keys(data);
  const out = await new Deno.Command(Deno.execPath(), {
    args: [
      "run",
      `--allow-read=${dir.path}`,
      "--allow-env",
      CLI,
      "telemetry",
      "read",
      "--site-dir",
      dir.path,
      "--format",
      "csv",
      "--fields",
      fields.join(","),
    ],
    env: { OBS_TELEMETRY_TZ: "UTC" },
    stdout: "piped",
    stderr: "piped",
  }).output();
  const text = new TextDecoder().decode(out.stdout);
  assert.equal(out.code, 0, new TextDecoder().decode(out.stderr));
  const [header, record] = text.split("\r\n");
  assert.equal(header, ["seq", "ts", "type", ...fields].join(","));
  const cells = parseRecord(record!);
  const byField = Object.fromEntries(fields.map((f, i) => [f, cells[i + 3]]));
  for (const [field, value] of Object.entries(HOSTILE)) {
    assert.equal(byField[field], `'${value}`, `${field}: ${record}`);
  }
  assert.equal(byField.n, "-3.5");
  assert.equal(byField.s, "-3.5");
  assert.equal(byField.plain, "dome open");
  assert.equal(cells[0], "1");
});

Deno.test("a CSV cell leaves numbers, and texts that are plain numbers, exactly as they are", () => {
  for (const n of [-3.5, 0, 1e21, -0.001, 42]) assert.equal(csvCell(n), JSON.stringify(n));
  for (const s of ["-3.5", "+7", "-1e-3", ".5", "12"]) assert.equal(csvCell(s), s);
  assert.equal(csvCell(true), "true");
  assert.equal(csvCell(null), "null");
  assert.equal(csvCell("-"), "'-");
  assert.equal(csvCell("-3.5+A1"), "'-3.5+A1");
  assert.equal(csvCell("=1,2"), `"'=1,2"`);
});
