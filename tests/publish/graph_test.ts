/**
 * The publisher and its MQTT client stay out of the service's, the client's and the other
 * commands' module graphs (docs/publish.md, docs/architecture.md): `cli.ts` loads it with a
 * computed specifier; `deno task cache` caches its program for an offline start.
 *
 * @module
 */

import assert from "node:assert/strict";
import denoJson from "../../deno.json" with { type: "json" };
import { moduleGraph as graph } from "../_shared/util.ts";

Deno.test("the service, the CLI, its launcher, the client and the collector never load the publisher or MQTT.js", async () => {
  const root = new URL("../..", import.meta.url).href;
  for (
    const entry of [
      "cli.ts",
      "cli/launch.ts",
      "server.ts",
      "mod.ts",
      "client.ts",
      "forward.ts",
      "collect.ts",
    ]
  ) {
    const loaded = (await graph(entry))
      .map((s) => s.replace(root, ""))
      .filter((s) => /^publish(\/|\.ts$)|^cli\/publish\.ts$|^npm:mqtt/.test(s));
    // The collector loads MQTT.js on first use of an mqtt input, never as part of its graph.
    assert.deepEqual(loaded, [], entry);
  }
});

Deno.test("the publisher's program holds the publisher and MQTT.js, and deno task cache caches it", async () => {
  const modules = await graph("cli/publish_main.ts");
  for (const file of ["publish/publisher.ts", "publish/broker.ts", "cli/publish.ts"]) {
    assert.ok(modules.some((s) => s.endsWith(file)), file);
  }
  assert.ok(modules.some((s) => s.startsWith("npm:") && s.includes("mqtt")), "npm:mqtt");
  const cache = (denoJson.tasks as Record<string, string>).cache!.split(" ");
  assert.ok(cache.includes("cli/publish_main.ts"), cache.join(" "));
});
