/**
 * `deno task publish`'s launcher, as the systemd unit runs it (docs/publish.md, "Permissions"):
 * the publisher runs as its child under the permissions of its flags, with the broker's URL and
 * password in its environment, never on a command line.
 *
 * @module
 */

import assert from "node:assert/strict";
import { join } from "node:path";
import denoJson from "../../deno.json" with { type: "json" };
import { SiteTopics } from "../../publish.ts";
import { tempDir, testServer } from "../_shared/util.ts";
import { Mosquitto } from "../_shared/collect_push_util.ts";
import { MqttReader, publishMissing, waitUntil } from "../_shared/publish_util.ts";

const missing = publishMissing();
const ROOT = new URL("../..", import.meta.url).pathname;

/** The command lines (NUL-separated words) and environments of the processes holding `mark`. */
async function processesWith(mark: string): Promise<{ cmdline: string; environ: string }[]> {
  const found = [];
  for await (const entry of Deno.readDir("/proc")) {
    if (!/^\d+$/.test(entry.name)) continue;
    try {
      const cmdline = await Deno.readTextFile(`/proc/${entry.name}/cmdline`);
      if (!cmdline.includes(mark)) continue;
      found.push({ cmdline, environ: await Deno.readTextFile(`/proc/${entry.name}/environ`) });
    } catch { /* gone, or not ours */ }
  }
  return found;
}

Deno.test({
  name:
    "deno task publish runs the publisher with the broker's password in its environment, never on a command line",
  ignore: missing !== undefined || Deno.build.os !== "linux",
  async fn() {
    await using broker = await Mosquitto.start({ users: { ha: "s3cret" } });
    await using dir = await tempDir("obs-publish-launch-");
    await using server = await testServer({ siteDir: join(dir.path, "site") });
    const port = String(server.addr.port);
    const to = broker.url.replace("mqtt://", "mqtt://ha:s3cret@");
    const task = (denoJson.tasks as Record<string, string>).publish!.split(" ");
    const launcher = new Deno.Command(Deno.execPath(), {
      args: [...task.slice(1), "--host", "127.0.0.1", "--port", port],
      cwd: ROOT,
      env: { OBS_TELEMETRY_PUBLISH: to },
      stdout: "null",
      stderr: "null",
    }).spawn();
    try {
      const { site_id } = JSON.parse(await Deno.readTextFile(join(dir.path, "site/.site.json")));
      const topics = new SiteTopics("obs", site_id);
      await using reader = new MqttReader(to, [topics.status]);
      await reader.waitFor(topics.status, (p) => p === "online");
      const mark = ["publish_main.ts", "--host", "127.0.0.1", "--port", port, ""].join("\0");
      await waitUntil(async () => (await processesWith(mark)).length === 1, 5_000, "the child");
      const [child] = await processesWith(mark);
      assert.ok(!child!.cmdline.includes("s3cret"), child!.cmdline);
      assert.ok(child!.environ.split("\0").includes(`OBS_TELEMETRY_PUBLISH=${to}`));
      assert.match(child!.cmdline, /--allow-net=127\.0\.0\.1:\d+,127\.0\.0\.1:\d+\0/);
      launcher.kill("SIGTERM");
      assert.equal((await launcher.status).code, 0);
      assert.equal(await reader.waitFor(topics.status, (p) => p === "offline"), "offline");
    } finally {
      try {
        launcher.kill("SIGKILL");
      } catch { /* gone */ }
      await launcher.status;
    }
  },
});
