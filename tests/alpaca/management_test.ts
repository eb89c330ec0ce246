/**
 * The Alpaca Management API and setup pages (docs/safety.md, "ASCOM Alpaca (N.I.N.A.)"): each
 * answer checked against the official Alpaca Management OpenAPI document, UniqueIDs stable across
 * restarts of one site and different between sites, and setup pages that escape the types file.
 */

import assert from "node:assert/strict";
import { join } from "node:path";
import { tempDir, testServer } from "../_shared/util.ts";
import { AlpacaApi } from "../_shared/alpaca_openapi.ts";
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
