/**
 * The Alpaca Management API and setup pages (docs/safety.md, "ASCOM Alpaca (N.I.N.A.)"): each
 * answer checked against the official Alpaca Management OpenAPI document, UniqueIDs stable across
 * restarts of one site and different between sites, one safety monitor per profile, and setup
 * pages that escape the types file.
 */

import assert from "node:assert/strict";
import { join } from "node:path";
import { tempDir, testServer } from "../_shared/util.ts";
import { AlpacaApi } from "../_shared/alpaca_openapi.ts";
import { alpacaServer, PROFILE_TYPES, writeTypes } from "../_shared/alpaca_util.ts";
import { type ServerHandle, VERSION } from "../../server.ts";

const api = await AlpacaApi.load();

async function withAlpaca<T>(
  siteDir: string,
  typesFile: string | undefined,
  fn: (base: string, server: ServerHandle) => Promise<T>,
): Promise<T> {
  const server = await testServer({
    siteDir,
    alpacaPort: 0,
    alpacaDiscoveryPort: 0,
    ...(typesFile ? { typesFile } : {}),
  });
  try {
    return await fn(`http://127.0.0.1:${server.alpaca!.addr.port}`, server);
  } finally {
    await server.shutdown();
  }
}

async function get(base: string, path: string): Promise<Record<string, unknown>> {
  const url = `${base}${path}`;
  return await api.check("GET", url, await fetch(url)) as Record<string, unknown>;
}

async function uniqueIds(siteDir: string): Promise<string[]> {
  return await withAlpaca(siteDir, undefined, async (base) => {
    const body = await get(base, "/management/v1/configureddevices?ClientTransactionID=3");
    return (body.Value as { UniqueID: string }[]).map((device) => device.UniqueID);
  });
}

Deno.test("the management API answers as the Alpaca Management document says", async () => {
  await using site = await tempDir();
  await withAlpaca(site.path, undefined, async (base) => {
    const versions = await get(base, "/management/apiversions?ClientID=9&ClientTransactionID=4");
    assert.deepEqual(versions.Value, [1]);
    assert.equal(versions.ClientTransactionID, 4);
    const description = await get(base, "/management/v1/description");
    const value = description.Value as Record<string, string>;
    assert.equal(value.ServerName, "obs-utils telemetry");
    assert.equal(value.ManufacturerVersion, VERSION);
    const siteId = JSON.parse(await Deno.readTextFile(join(site.path, ".site.json"))).site_id;
    assert.equal(value.Location, `site ${siteId}`);
    const devices = await get(base, "/management/v1/configureddevices");
    assert.deepEqual(
      (devices.Value as Record<string, unknown>[]).map((d) => [d.DeviceType, d.DeviceNumber]),
      [["SafetyMonitor", 0], ["ObservingConditions", 0]],
    );
    for (const answer of [versions, description, devices]) {
      assert.equal(answer.ErrorNumber, 0);
      assert.equal(answer.ErrorMessage, "");
    }
  });
});

Deno.test("UniqueIDs are the same after a restart of the site and differ between sites", async () => {
  await using one = await tempDir();
  await using other = await tempDir();
  const first = await uniqueIds(one.path);
  const again = await uniqueIds(one.path);
  const elsewhere = await uniqueIds(other.path);
  assert.deepEqual(again, first);
  assert.equal(new Set(first).size, 2);
  for (const id of first) assert.ok(!elsewhere.includes(id), id);
  for (const id of [...first, ...elsewhere]) {
    assert.match(id, /^[0-9a-f]{8}-[0-9a-f]{4}-8[0-9a-f]{3}-[89ab][0-9a-f]{3}-[0-9a-f]{12}$/);
  }
});

Deno.test("a malformed ClientTransactionID on a management path is HTTP 400 plain text", async () => {
  await using site = await tempDir();
  await withAlpaca(site.path, undefined, async (base) => {
    const url = `${base}/management/apiversions?ClientTransactionID=x`;
    const res = await fetch(url);
    assert.equal(res.status, 400);
    assert.match(String(await api.check("GET", url, res)), /ClientTransactionID/);
  });
});

Deno.test("the setup pages say where each value comes from, with the types file escaped", async () => {
  await using site = await tempDir();
  const types = join(site.path, "..", `types-${crypto.randomUUID()}.json`);
  await Deno.writeTextFile(
    types,
    JSON.stringify({
      "<script>alert(1)</script>": {
        critical: true,
        fields: {
          "t&<b>": { unit: "°F", alpaca: "temperature", label: '"><img src=x onerror=alert(2)>' },
        },
      },
    }),
  );
  try {
    await withAlpaca(site.path, types, async (base) => {
      const pages = [
        "/setup",
        "/setup/v1/safetymonitor/0/setup",
        "/setup/v1/observingconditions/0/setup",
      ];
      for (const path of pages) {
        const html = String(await get(base, path));
        assert.match(html, /^<!doctype html>/, path);
        assert.doesNotMatch(html, /<script>|<img|<b>/, path);
      }
      const conditions = String(await get(base, "/setup/v1/observingconditions/0/setup"));
      assert.match(
        conditions,
        /&lt;script&gt;alert\(1\)&lt;\/script&gt; <code>t&amp;&lt;b&gt;<\/code>/,
      );
      assert.match(conditions, /Temperature<\/td><td>°C/);
      assert.match(conditions, /CloudCover<\/td><td>%<\/td><td>not configured/);
      const safety = String(await get(base, "/setup/v1/safetymonitor/0/setup"));
      assert.match(safety, /&lt;script&gt;alert\(1\)&lt;\/script&gt;/);
      const url = `${base}/setup/v1/telescope/0/setup`;
      const res = await fetch(url);
      assert.equal(res.status, 403);
      await api.check("GET", url, res);
    });
  } finally {
    await Deno.remove(types);
  }
});

// --- One safety monitor per profile ----------------------------------------------------------

/** The configured devices of a site served with a types file. */
async function configured(siteDir: string, types: unknown): Promise<Record<string, unknown>[]> {
  const file = await writeTypes(siteDir, types);
  try {
    return await withAlpaca(siteDir, file, async (base) => {
      const body = await get(base, "/management/v1/configureddevices");
      return body.Value as Record<string, unknown>[];
    });
  } finally {
    await Deno.remove(file);
  }
}

/** The UUID of `text` as the service writes one: SHA-256, version 8, RFC 9562 variant. */
async function uuid8(text: string): Promise<string> {
  const bytes = new Uint8Array(
    await crypto.subtle.digest("SHA-256", new TextEncoder().encode(text)),
  ).slice(0, 16);
  bytes[6] = (bytes[6]! & 0x0f) | 0x80;
  bytes[8] = (bytes[8]! & 0x3f) | 0x80;
  const hex = [...bytes].map((b) => b.toString(16).padStart(2, "0")).join("");
  return [hex.slice(0, 8), hex.slice(8, 12), hex.slice(12, 16), hex.slice(16, 20), hex.slice(20)]
    .join("-");
}

Deno.test("configureddevices lists one safetymonitor per profile by name, with UniqueIDs that follow the profile across restarts", async () => {
  await using site = await tempDir();
  const first = await configured(site.path, PROFILE_TYPES);
  assert.deepEqual(first.map((d) => [d.DeviceType, d.DeviceNumber, d.DeviceName]), [
    ["SafetyMonitor", 0, "obs-utils telemetry safety"],
    ["SafetyMonitor", 1, "obs-utils telemetry safety (north)"],
    ["SafetyMonitor", 2, "obs-utils telemetry safety (south)"],
    ["ObservingConditions", 0, "obs-utils telemetry conditions"],
  ]);
  assert.equal(new Set(first.map((d) => d.UniqueID)).size, 4);
  // safetymonitor/0 keeps the UniqueID it had before profiles, so N.I.N.A. keeps its choice.
  const siteId = JSON.parse(await Deno.readTextFile(join(site.path, ".site.json"))).site_id;
  assert.equal(
    first[0]!.UniqueID,
    await uuid8(`obs-utils-telemetry/alpaca/${siteId}/safetymonitor/0`),
  );
  assert.deepEqual(await configured(site.path, PROFILE_TYPES), first);
  // A profile added before north in name order renumbers north and south; each keeps its ID.
  const more = {
    ...PROFILE_TYPES,
    mount: { critical_for: ["east"], stale_after_s: 60, fields: {} },
  };
  const after = await configured(site.path, more);
  const byName = (list: Record<string, unknown>[]) =>
    new Map(list.map((d) => [d.DeviceName, [d.DeviceNumber, d.UniqueID]]));
  assert.deepEqual(byName(after).get("obs-utils telemetry safety (north)"), [
    2,
    first[1]!.UniqueID,
  ]);
  assert.deepEqual(byName(after).get("obs-utils telemetry safety (south)"), [
    3,
    first[2]!.UniqueID,
  ]);
  assert.equal(byName(after).get("obs-utils telemetry safety")![1], first[0]!.UniqueID);
});

Deno.test("each safetymonitor's setup page lists its profile's critical types, and an unknown device names every device", async () => {
  await using site = await tempDir();
  await using alpaca = await alpacaServer(site.path, PROFILE_TYPES);
  const expected = [["weather"], ["weather", "dome"], ["weather", "shutter"]];
  for (const [number, types] of expected.entries()) {
    const html = String(await get(alpaca.base, `/setup/v1/safetymonitor/${number}/setup`));
    const listed = [...html.matchAll(/<li>([^<]*)<\/li>/g)].map((m) => m[1]);
    assert.deepEqual(listed, types, `safetymonitor/${number}`);
    assert.match(html, new RegExp(`SafetyMonitor ${number}: obs-utils telemetry safety`));
  }
  const index = String(await get(alpaca.base, "/setup"));
  assert.match(index, /SafetyMonitor 2: obs-utils telemetry safety \(south\)/);
  const res = await fetch(`${alpaca.base}/api/v1/safetymonitor/3/issafe`);
  assert.equal(res.status, 400);
  assert.match(
    await res.text(),
    /the devices are safetymonitor\/0, safetymonitor\/1 \(profile north\), safetymonitor\/2 \(profile south\) and observingconditions\/0/,
  );
});
