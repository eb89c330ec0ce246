/**
 * The publisher's flags (docs/publish.md, "Flags" and "Permissions"): each bad value is one
 * error naming the flag, and the permissions follow from the flags.
 *
 * @module
 */

import assert from "node:assert/strict";
import {
  checkTopicPrefix,
  parseBrokerUrl,
  publisherArgs,
  publisherEnv,
  publishPermissionFlags,
  publishSettings,
} from "../../publish.ts";
import { CLI } from "../_shared/util.ts";

Deno.test("parseBrokerUrl() takes the credentials out of --to and fills in the scheme's port", () => {
  assert.deepEqual(parseBrokerUrl("mqtt://ha:p%40ss@10.0.0.2"), {
    url: "mqtt://10.0.0.2:1883",
    host: "10.0.0.2",
    port: 1883,
    tls: false,
    username: "ha",
    password: "p@ss",
  });
  assert.equal(parseBrokerUrl("mqtts://[::1]").url, "mqtts://[::1]:8883");
});

Deno.test("parseBrokerUrl() refuses anything but a broker's mqtt:// or mqtts:// URL, naming --to", () => {
  for (
    const [url, problem] of [
      ["broker.lan:1883", /--to must start with mqtt:\/\/ or mqtts:\/\//],
      ["http://broker.lan", /--to must start with mqtt:\/\//],
      ["mqtt://broker.lan/obs", /--to must name only the broker/],
      ["mqtt://broker.lan:0", /--to names port 0/],
      ["not a url", /--to is not a URL/],
    ] as const
  ) {
    assert.throws(() => parseBrokerUrl(url), problem, url);
  }
});

Deno.test("checkTopicPrefix() refuses wildcards, empty levels and $, naming the flag", () => {
  assert.throws(
    () => checkTopicPrefix("obs/+", "--prefix"),
    /--prefix must not hold the wildcards/,
  );
  assert.throws(() => checkTopicPrefix("/obs", "--prefix"), /--prefix must be topic levels/);
  assert.throws(() => checkTopicPrefix("", "--discovery-prefix"), /--discovery-prefix must be/);
  assert.throws(() => checkTopicPrefix("$SYS", "--prefix"), /--prefix must not start with \$/);
});

Deno.test("publishSettings() reads --to from OBS_TELEMETRY_PUBLISH when the flag is not given", () => {
  const env = (name: string) =>
    name === "OBS_TELEMETRY_PUBLISH" ? "mqtt://127.0.0.1:1999" : undefined;
  assert.equal(publishSettings({}, env).broker.port, 1999);
});

Deno.test("publishSettings() refuses --ca for a broker that is not mqtts://", () => {
  assert.throws(
    () => publishSettings({ to: "mqtt://127.0.0.1", ca: "ca.pem" }, () => undefined),
    /--ca is for an mqtts:\/\/ broker/,
  );
});

Deno.test("publishSettings() refuses --discovery-prefix with --no-discovery", () => {
  assert.throws(
    () =>
      publishSettings(
        { to: "mqtt://127.0.0.1", discoveryPrefix: "ha", noDiscovery: true },
        () => undefined,
      ),
    /--discovery-prefix and --no-discovery contradict each other/,
  );
});

Deno.test("publishPermissionFlags() grants net to the broker and the service, and read of --ca alone", () => {
  assert.deepEqual(
    publishPermissionFlags({
      to: "mqtts://broker.lan",
      ca: "/etc/obs/ca.pem",
      host: "::1",
      port: 7000,
    }),
    [
      "--allow-net=broker.lan:8883,[::1]:7000",
      "--allow-read=/etc/obs/ca.pem",
      "--allow-env=OBS_TELEMETRY_PUBLISH,OBS_TELEMETRY_HOST,OBS_TELEMETRY_PORT,OBS_TELEMETRY_TOKEN",
      "--ignore-env=DEBUG,READABLE_STREAM",
    ],
  );
});

Deno.test("publisherArgs() keeps the broker's password and the token off the command line; publisherEnv() carries them", () => {
  const options = { to: "mqtt://ha:s3cret@127.0.0.1:1883", port: 7000, token: "t0ken" };
  const args = publisherArgs(options).join(" ");
  assert.ok(!args.includes("s3cret") && !args.includes("t0ken"), args);
  assert.deepEqual(publisherEnv(options), {
    OBS_TELEMETRY_PUBLISH: "mqtt://ha:s3cret@127.0.0.1:1883",
    OBS_TELEMETRY_TOKEN: "t0ken",
  });
});

/** Runs `cli.ts telemetry publish <args>` and returns its exit code and stderr. */
async function publishCli(args: string[]): Promise<{ code: number; stderr: string }> {
  const out = await new Deno.Command(Deno.execPath(), {
    args: ["run", "-A", CLI, "telemetry", "publish", ...args],
    env: { OBS_TELEMETRY_PUBLISH: "" },
    stdout: "null",
    stderr: "piped",
  }).output();
  return { code: out.code, stderr: new TextDecoder().decode(out.stderr) };
}

Deno.test("obs-utils telemetry publish without --to exits 2 with one line that says what to give", async () => {
  const { code, stderr } = await publishCli([]);
  assert.equal(code, 2);
  assert.equal(
    stderr,
    "obs-utils telemetry publish: --to is required (or set OBS_TELEMETRY_PUBLISH): the broker, such as mqtt://127.0.0.1:1883. Run 'obs-utils telemetry publish --help' for usage.\n",
  );
});

Deno.test("obs-utils telemetry publish with a bad --prefix exits 2 naming the flag", async () => {
  const { code, stderr } = await publishCli(["--to", "mqtt://127.0.0.1", "--prefix", "obs/#"]);
  assert.equal(code, 2);
  assert.match(stderr, /^obs-utils telemetry publish: --prefix must not hold the wildcards/);
});

Deno.test("obs-utils telemetry publish with an unreadable --ca exits 1 naming the file", async () => {
  const { code, stderr } = await publishCli([
    "--to",
    "mqtts://127.0.0.1",
    "--ca",
    "/nonexistent/ca.pem",
  ]);
  assert.equal(code, 1);
  assert.match(stderr, /^error: Cannot read --ca \/nonexistent\/ca\.pem: .*give the PEM file/);
});
