/**
 * `obs-utils telemetry collect` as a user runs it (docs/collect.md, docs/cli.md): a bad config
 * in one line with exit 2, `--once`, `spawnCollector()` and `deno task collect` under the scoped
 * permissions of `collectPermissionFlags()`, against a real service, page and file.
 *
 * @module
 */

import assert from "node:assert/strict";
import { join } from "node:path";
import denoJson from "../../deno.json" with { type: "json" };
import { collectorArgs, collectPermissionFlags, spawnCollector } from "../../collect.ts";
import { COLLECT_ENV_VARS, INPUT_KINDS, readCollectConfig } from "../../collect.ts";
import { collectLaunchArgs } from "../../cli/collect_launch.ts";
import { CLI, tempDir, testServer } from "../_shared/util.ts";
import { localServer, storedEvents, waitUntil } from "../_shared/collect_util.ts";

const ROOT = new URL("../..", import.meta.url).pathname;
const decoder = new TextDecoder();

function cli(args: string[], env: Record<string, string> = {}): Promise<Deno.CommandOutput> {
  return new Deno.Command(Deno.execPath(), {
    args: ["run", "--allow-all", CLI, "telemetry", ...args],
    env: { NO_COLOR: "1", ...env },
    stdout: "piped",
    stderr: "piped",
  }).output();
}

/** A config of one page and one key=value file, written into `dir`. */
async function writeConfig(
  dir: string,
  pageUrl: string,
): Promise<{ config: string; file: string }> {
  const file = join(dir, "station.txt");
  await Deno.writeTextFile(file, "temp=4.5\n");
  const config = join(dir, "collect.json");
  await Deno.writeTextFile(
    config,
    JSON.stringify({
      inputs: [
        { name: "wx", kind: "http", type: "weather", url: pageUrl, every_s: 0.2 },
        { name: "st", kind: "file", type: "station", path: file, format: "keyvalue", every_s: 0.2 },
      ],
    }),
  );
  return { config, file };
}

Deno.test("collect refuses a bad config with one line naming the file, the JSON path and the fix, and exit 2", async () => {
  await using dir = await tempDir();
  const config = join(dir.path, "collect.json");
  await Deno.writeTextFile(
    config,
    JSON.stringify({
      inputs: [{ name: "a", kind: "http", type: "t", url: "http://x/", every_s: "9" }],
    }),
  );
  const out = await cli(["collect", "--config", config]);
  assert.equal(out.code, 2);
  assert.equal(decoder.decode(out.stdout), "");
  const stderr = decoder.decode(out.stderr);
  assert.equal(
    stderr,
    `Cannot use collect config ${config}: at inputs[0].every_s must be a number from 0.1 to 86400, not "9"; set "every_s": 30\n`,
  );
});

Deno.test("collect reads its config from OBS_TELEMETRY_COLLECT, and without one says so with exit 2", async () => {
  const none = await cli(["collect"]);
  assert.equal(none.code, 2);
  assert.match(
    decoder.decode(none.stderr),
    /--config FILE is required \(or set OBS_TELEMETRY_COLLECT\)/,
  );
  await using dir = await tempDir();
  const missing = await cli(["collect", "--once"], {
    OBS_TELEMETRY_COLLECT: join(dir.path, "nope.json"),
  });
  assert.equal(missing.code, 2);
  assert.match(
    decoder.decode(missing.stderr),
    /^Cannot use collect config .*nope\.json: cannot read it/,
  );
});

Deno.test("collect --once prints the events as NDJSON and posts nothing", async () => {
  await using dir = await tempDir();
  await using site = await tempDir();
  await using service = await testServer({ siteDir: site.path });
  await using page = localServer(() => Response.json({ t: 1, at: "2026-11-27T01:00:00Z" }));
  const { config } = await writeConfig(dir.path, page.url);
  const out = await cli([
    "collect",
    "--once",
    "--config",
    config,
    "--port",
    String(service.addr.port),
  ]);
  assert.equal(out.code, 0, decoder.decode(out.stderr));
  const events = decoder.decode(out.stdout).trim().split("\n").map((l) => JSON.parse(l));
  assert.deepEqual(events.map((e) => e.type).sort(), ["station", "weather"]);
  assert.deepEqual(events.find((e) => e.type === "station").data, { temp: 4.5 });
  assert.equal((await storedEvents(site.path)).length, 0);
});

Deno.test("collectPermissionFlags grants net to the inputs and the service, read to the config and the files", async () => {
  await using dir = await tempDir();
  const { config, file } = await writeConfig(dir.path, "http://10.1.2.3:8080/now.json");
  const flags = collectPermissionFlags(readCollectConfig(config, INPUT_KINDS), {
    host: "127.0.0.1",
    port: 7000,
  });
  assert.deepEqual(flags, [
    "--allow-net=10.1.2.3:8080,127.0.0.1:7000",
    `--allow-read=${config},${file}`,
    `--allow-env=${COLLECT_ENV_VARS.join(",")}`,
  ]);
  const args = collectorArgs({ config, host: "127.0.0.1", port: 7000 });
  assert.deepEqual(args.filter((a) => a.startsWith("--allow-")), flags);
  assert.deepEqual(
    collectLaunchArgs(["--config", config, "--host", "127.0.0.1", "--port", "7000"]),
    args,
  );
});

Deno.test("collectPermissionFlags lets the variables MQTT.js reads read as unset, by name, only for a config with an MQTT input", async () => {
  await using dir = await tempDir();
  const config = join(dir.path, "mqtt.json");
  await Deno.writeTextFile(
    config,
    JSON.stringify({
      inputs: [{
        name: "m",
        kind: "mqtt",
        url: "mqtt://10.1.2.4",
        topics: { "a/#": { type: "a" } },
      }],
    }),
  );
  assert.deepEqual(collectPermissionFlags(readCollectConfig(config, INPUT_KINDS)).slice(2), [
    `--allow-env=${COLLECT_ENV_VARS.join(",")}`,
    "--ignore-env=DEBUG,READABLE_STREAM",
  ]);
});

Deno.test("spawnCollector runs the collector under exactly its scoped permissions, and SIGTERM stops it with 0", async () => {
  await using dir = await tempDir();
  await using site = await tempDir();
  await using service = await testServer({ siteDir: site.path });
  await using page = localServer(() => Response.json({ t: 1 }));
  const { config } = await writeConfig(dir.path, page.url);
  const collector = spawnCollector({
    config,
    host: "127.0.0.1",
    port: service.addr.port,
    output: "piped",
  });
  const output = collector.process.output();
  try {
    await waitUntil(
      async () => {
        const types = new Set((await storedEvents(site.path)).map((e) => e.type));
        return types.has("weather") && types.has("station");
      },
      20_000,
      "events of both inputs",
    );
  } finally {
    await collector.stop();
  }
  const out = await output;
  const stderr = decoder.decode(out.stderr);
  assert.equal(out.code, 0, stderr);
  assert.doesNotMatch(stderr, /NotCapable|Requires .* access/, stderr);
  assert.match(decoder.decode(out.stdout), /info stopped\n$/);
});

Deno.test("deno task collect's launcher runs the collector under the config's permissions", async () => {
  await using dir = await tempDir();
  await using site = await tempDir();
  await using service = await testServer({ siteDir: site.path });
  await using page = localServer(() => Response.json({ t: 1 }));
  const { config } = await writeConfig(dir.path, page.url);
  const words = (denoJson.tasks as Record<string, string>).collect!.split(" ");
  assert.equal(words[0], "deno");
  const child = new Deno.Command(Deno.execPath(), {
    args: [
      ...words.slice(1).map((w) => w === "cli/collect_launch.ts" ? join(ROOT, w) : w),
      "--config",
      config,
      "--host",
      "127.0.0.1",
      "--port",
      String(service.addr.port),
    ],
    env: { NO_COLOR: "1" },
    stdout: "piped",
    stderr: "piped",
  }).spawn();
  const output = child.output();
  try {
    await waitUntil(async () => (await storedEvents(site.path)).length >= 2, 20_000, "events");
  } finally {
    child.kill("SIGTERM");
  }
  const out = await output;
  assert.equal(out.code, 0, decoder.decode(out.stderr));
});

Deno.test("collect --help and the command list need neither the collector's modules nor the network", async () => {
  await using cache = await tempDir("obs-telemetry-deno-dir-");
  const env = { DENO_DIR: cache.path, NPM_CONFIG_REGISTRY: "http://127.0.0.1:9/", NO_COLOR: "1" };
  const help = await new Deno.Command(Deno.execPath(), {
    args: ["run", "--no-lock", "--allow-env", CLI, "telemetry", "collect", "--help"],
    env,
    stdout: "piped",
    stderr: "piped",
  }).output();
  assert.equal(help.code, 0, decoder.decode(help.stderr));
  assert.match(decoder.decode(help.stdout), /^Usage: obs-utils telemetry collect --config FILE/);
  const list = await cli(["--help"]);
  assert.match(decoder.decode(list.stdout), /\n {2}collect {3}Read devices/);
});
