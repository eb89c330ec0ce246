/**
 * `GET /safety/indi` (docs/safety.md) read by a real INDI server running Debian's
 * `indi_weather_safety_proxy`: its `WEATHER_SAFETY` parameter follows the verdict.
 */

import assert from "node:assert/strict";
import { join } from "node:path";
import { parseTypes } from "../../core/types_registry.ts";
import { getJson, postJson, tempDir, testServer } from "../_shared/util.ts";
import { IndiServer } from "../_shared/collect_push_util.ts";

const DEVICE = "Weather Safety Proxy";

const TYPES = parseTypes(
  JSON.stringify({
    weather: {
      critical: true,
      clear_after_s: 0,
      fields: { wind_mps: { unit: "m/s", alarm_above: 15 } },
    },
  }),
  "types.json",
);

/** Why the INDI test cannot run here, or undefined when it can. */
function indiMissing(): string | undefined {
  for (const tool of ["indiserver", "indi_weather_safety_proxy", "indi_getprop", "indi_setprop"]) {
    try {
      new Deno.Command(tool, { args: ["--help"], stdout: "null", stderr: "null" }).outputSync();
    } catch {
      return `${tool} is not installed (apt-get install -y indi-bin)`;
    }
  }
  return undefined;
}

const missing = indiMissing();
if (missing) {
  // deno-lint-ignore no-console
  console.log(`safety_indi_test.ts: skipping the INDI tests: ${missing}`);
}

async function indi(tool: string, args: string[], home: string): Promise<string> {
  const out = await new Deno.Command(tool, {
    args,
    env: { HOME: home },
    stdout: "piped",
    stderr: "piped",
  }).output();
  const text = new TextDecoder().decode(out.stdout);
  if (!out.success) {
    throw new Error(`${tool} ${args.join(" ")} failed: ${new TextDecoder().decode(out.stderr)}`);
  }
  return text;
}

/** Polls `fn` every 100 ms until it answers true, for at most `ms`. */
async function until(what: string, fn: () => Promise<boolean>, ms = 30_000): Promise<void> {
  const deadline = Date.now() + ms;
  let last: unknown;
  for (let i = 0; i < 1_000 && Date.now() <= deadline; i++) {
    try {
      if (await fn()) return;
    } catch (err) {
      last = err;
    }
    await new Promise((r) => setTimeout(r, 100));
  }
  throw new Error(`timed out after ${ms} ms waiting for ${what}${last ? `: ${last}` : ""}`);
}

Deno.test({
  name:
    "GET /safety/indi is the document INDI's weather safety proxy reads, and its WEATHER_SAFETY follows the verdict",
  ignore: missing !== undefined,
  async fn() {
    await using dir = await tempDir();
    await using server = await testServer({ siteDir: join(dir.path, "site"), types: TYPES });
    const doc = await getJson(`${server.url}/safety/indi`);
    assert.equal(doc.status, 200);
    const body = doc.body as { timestamp_utc: string; roof_status: Record<string, unknown> };
    assert.match(body.timestamp_utc, /^\d{4}-\d\d-\d\dT\d\d:\d\d:\d\dZ$/);
    assert.deepEqual(body.roof_status, { open_ok: 0, reasons: "weather: stale, never seen" });

    // Its own local socket and HOME: another indiserver on this machine is not disturbed.
    await using indiserver = await IndiServer.start(["indi_weather_safety_proxy"]);
    const home = indiserver.home;
    const p = ["-p", String(indiserver.port), "-t", "2"];
    const get = async (prop: string) =>
      (await indi("indi_getprop", [...p, "-1", `${DEVICE}.${prop}`], home)).trim();
    await until(
      "indiserver to list the driver",
      async () => (await get("SCRIPT_OR_CURL.Use url")) === "Off",
    );
    const url = `${server.url}/safety/indi`;
    await indi(
      "indi_setprop",
      [...p, `${DEVICE}.WEATHER_SAFETY_URLS.WEATHER_SAFETY_URL=${url}`],
      home,
    );
    await indi(
      "indi_setprop",
      [...p, `${DEVICE}.SCRIPT_OR_CURL.Use script;Use url=Off;On`],
      home,
    );
    await until(
      "the URL to be set",
      async () => (await get("WEATHER_SAFETY_URLS.WEATHER_SAFETY_URL")) === url,
    );
    await indi("indi_setprop", [...p, `${DEVICE}.CONNECTION.CONNECT=On`], home);
    await until("the driver to connect", async () => (await get("CONNECTION.CONNECT")) === "On");
    await indi("indi_setprop", [...p, `${DEVICE}.WEATHER_UPDATE.PERIOD=1`], home);
    await until(
      "WEATHER_SAFETY 0 while unsafe",
      async () => Number(await get("WEATHER_PARAMETERS.WEATHER_SAFETY")) === 0,
    );
    assert.equal(await get("WEATHER_SAFETY_REASONS.Reasons"), "weather: stale, never seen");

    await postJson(`${server.url}/event`, { type: "weather", data: { wind_mps: 3 } });
    await until(
      "WEATHER_SAFETY 1 once safe",
      async () => Number(await get("WEATHER_PARAMETERS.WEATHER_SAFETY")) === 1,
    );

    await postJson(`${server.url}/event`, { type: "weather", data: { wind_mps: 22 } });
    await until(
      "WEATHER_SAFETY 0 in alarm",
      async () => Number(await get("WEATHER_PARAMETERS.WEATHER_SAFETY")) === 0,
    );
    assert.equal(
      await get("WEATHER_SAFETY_REASONS.Reasons"),
      "weather: wind_mps 22 m/s above alarm 15",
    );
  },
});
