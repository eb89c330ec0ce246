/**
 * What a newcomer meets on a fresh clone through the launchers (docs/cli.md, docs/collect.md):
 * the installed `obs-utils` (`deno task install` into a temporary DENO_INSTALL_ROOT) and
 * `deno task cli`, as real child processes, against a real mosquitto, a real libfaketime and a
 * real read-only mount.
 *
 * @module
 */

import assert from "node:assert/strict";
import { join } from "node:path";
import mqtt from "npm:mqtt@^5.14.1";
import { freePort, tempDir } from "../_shared/util.ts";
import { Mosquitto, mosquittoMissing } from "../_shared/collect_push_util.ts";
import { spawnCliServer } from "../_shared/fault_util.ts";

const ROOT = new URL("../..", import.meta.url).pathname;
const decoder = new TextDecoder();
const LIBFAKETIME = "/usr/lib/x86_64-linux-gnu/faketime/libfaketime.so.1";

const noBroker = mosquittoMissing();
const noFaketime = (() => {
  try {
    Deno.statSync(LIBFAKETIME);
    return undefined;
  } catch {
    return `${LIBFAKETIME} is not installed (apt-get install -y libfaketime)`;
  }
})();
for (const reason of [noBroker, noFaketime]) {
  // deno-lint-ignore no-console
  if (reason) console.log(`launcher_test.ts: skipping: ${reason}`);
}

/** Runs `deno task cli -- telemetry ...args` in the checkout. */
function cliTask(args: string[], env: Record<string, string> = {}): Promise<Deno.CommandOutput> {
  return new Deno.Command("deno", {
    args: ["task", "cli", "--", "telemetry", ...args],
    cwd: ROOT,
    env: { NO_COLOR: "1", ...env },
    stdout: "piped",
    stderr: "piped",
  }).output();
}

/** `deno task install` into `root`; returns the path of the installed `obs-utils`. */
async function install(root: string): Promise<string> {
  const out = await new Deno.Command("deno", {
    args: ["task", "install"],
    cwd: ROOT,
    env: { DENO_INSTALL_ROOT: root, NO_COLOR: "1" },
    stdout: "piped",
    stderr: "piped",
  }).output();
  assert.ok(out.success, decoder.decode(out.stderr));
  return join(root, "bin", "obs-utils");
}

/** Publishes `payload` on `topic` with QoS 1, retained: the collector gets it as it subscribes. */
async function retain(url: string, topic: string, payload: string): Promise<void> {
  const client = await mqtt.connectAsync(url, { reconnectPeriod: 0 });
  try {
    await client.publishAsync(topic, payload, { qos: 1, retain: true });
  } finally {
    await client.endAsync();
  }
}

/** The MQTT config of docs/collect.md's example, on `url`, written into `dir`. */
async function mqttConfig(dir: string, url: string, extra: unknown[] = []): Promise<string> {
  const config = join(dir, "mqtt.json");
  await Deno.writeTextFile(
    config,
    JSON.stringify({
      inputs: [
        {
          name: "station",
          kind: "mqtt",
          url,
          topics: { "weather/+/temperature": { type: "weather" } },
        },
        ...extra,
      ],
    }),
  );
  return config;
}

/** Lines of `text`, without the empty last one. */
function lines(text: string): string[] {
  return text.split("\n").filter((line) => line !== "");
}

/** Asserts that a collector's `--once` printed the retained reading and exited 0. */
function assertReadTheTopic(out: Deno.CommandOutput): void {
  const stderr = decoder.decode(out.stderr);
  assert.equal(out.code, 0, stderr);
  const events = lines(decoder.decode(out.stdout)).map((line) => JSON.parse(line));
  assert.deepEqual(events.map((e) => [e.type, e.data]), [["weather", { temperature: 12.5 }]]);
  assert.match(stderr, / info input station \(mqtt\) up\n/);
}

Deno.test({
  name:
    "the installed obs-utils telemetry collect --config mqtt.json --once reads a real mosquitto's topic and exits 0",
  ignore: noBroker !== undefined,
  async fn() {
    await using broker = await Mosquitto.start();
    await using dir = await tempDir();
    await retain(broker.url, "weather/north/temperature", "12.5");
    const obsUtils = await install(dir.path);
    const config = await mqttConfig(dir.path, broker.url);
    const out = await new Deno.Command(obsUtils, {
      args: ["telemetry", "collect", "--config", config, "--once"],
      env: { NO_COLOR: "1" },
      stdout: "piped",
      stderr: "piped",
    }).output();
    assertReadTheTopic(out);
  },
});

Deno.test({
  name:
    "deno task cli -- telemetry collect --config mqtt.json --once reads a real mosquitto's topic and exits 0",
  ignore: noBroker !== undefined,
  async fn() {
    await using broker = await Mosquitto.start();
    await using dir = await tempDir();
    await retain(broker.url, "weather/north/temperature", "12.5");
    const config = await mqttConfig(dir.path, broker.url);
    assertReadTheTopic(await cliTask(["collect", "--config", config, "--once"]));
  },
});

Deno.test({
  name:
    "obs-utils telemetry collect --once exits 1 naming the input that never came up and why, after printing what the others read",
  ignore: noBroker !== undefined,
  async fn() {
    await using dir = await tempDir();
    const station = join(dir.path, "station.txt");
    await Deno.writeTextFile(station, "temp=4.5\n");
    // Nothing listens on the broker's port: the MQTT input is down for the whole --once.
    const config = await mqttConfig(dir.path, `mqtt://127.0.0.1:${freePort()}`, [
      { name: "st", kind: "file", type: "station", path: station, format: "keyvalue" },
    ]);
    const out = await cliTask(["collect", "--config", config, "--once"]);
    const stderr = decoder.decode(out.stderr);
    assert.equal(out.code, 1, stderr);
    const events = lines(decoder.decode(out.stdout)).map((line) => JSON.parse(line));
    assert.deepEqual(events.map((e) => [e.type, e.data]), [["station", { temp: 4.5 }]]);
    const errors = lines(stderr).filter((line) => /^\S+Z error /.test(line));
    assert.equal(errors.length, 1, stderr);
    assert.match(
      errors[0]!,
      /Z error input station \(mqtt\) never came up, so --once read nothing from it: MQTT mqtt:\/\/127\.0\.0\.1:\d+: Connection refused/,
    );
  },
});

/** The one line of a launcher that could not start its child with LD_PRELOAD set. */
async function preloadRefusal(site: string, port: number): Promise<string> {
  const out = await cliTask(["run", "--site-dir", site, "--port", String(port)], {
    LD_PRELOAD: LIBFAKETIME,
  });
  const stderr = decoder.decode(out.stderr);
  assert.equal(out.code, 1, stderr);
  const printed = lines(stderr).filter((line) => !line.startsWith("Task "));
  assert.equal(printed.length, 1, stderr);
  assert.doesNotMatch(stderr, /^\s+at /m, stderr);
  return printed[0]!;
}

Deno.test({
  name:
    "the launcher started with LD_PRELOAD says in one line why it cannot pass it on and what to run, never a stack trace",
  ignore: noFaketime !== undefined,
  async fn() {
    await using site = await tempDir();
    const line = await preloadRefusal(site.path, freePort());
    assert.match(
      line,
      /^error: cannot start the service with LD_PRELOAD set: Deno lets a program start another with an LD_\* or DYLD_\* variable only if it may run every program, and this launcher may run deno alone; run the service itself with that variable: deno run .* telemetry run --site-dir \S+ --port \d+ \(or unset LD_PRELOAD\)$/,
    );
  },
});

Deno.test({
  name: "the command the launcher gives for LD_PRELOAD serves on libfaketime's clock",
  ignore: noFaketime !== undefined,
  async fn() {
    await using site = await tempDir();
    const port = freePort();
    const line = await preloadRefusal(site.path, port);
    const command = /that variable: (deno run .*) \(or unset LD_PRELOAD\)$/.exec(line)![1]!;
    await using server = await spawnCliServer({
      siteDir: site.path,
      port,
      command: ["sh", ["-c", `exec ${command}`]],
      env: { LD_PRELOAD: LIBFAKETIME, FAKETIME: "@2020-01-01 00:00:00", NO_COLOR: "1" },
    });
    const res = await fetch(`${server.url}/event`, {
      method: "POST",
      headers: { "content-type": "application/json" },
      body: '{"type":"probe","data":{"v":1}}',
    });
    assert.match((await res.json()).ts, /^2020-01-01T/, server.output());
  },
});

Deno.test("obs-utils telemetry run --site-dir /proc/telemetry says in one line to choose a writable directory, exit 2", async () => {
  const out = await cliTask(["run", "--site-dir", "/proc/telemetry", "--port", String(freePort())]);
  const stderr = decoder.decode(out.stderr);
  assert.equal(out.code, 2, stderr);
  const printed = lines(stderr).filter((line) => !line.startsWith("Task "));
  assert.deepEqual(printed, [
    `obs-utils telemetry run: --site-dir must be a directory the service can store in, not "/proc/telemetry": /proc holds the kernel's files, not storage; choose a writable directory, such as --site-dir /var/lib/obs-telemetry. Run 'obs-utils telemetry run --help' for usage.`,
  ]);
});

/** Mounts `dir` on itself read-only; the reason it cannot, or `undefined` when it did. */
async function mountReadOnly(dir: string): Promise<string | undefined> {
  for (const args of [["--bind", dir, dir], ["-o", "remount,ro,bind", dir]]) {
    try {
      const out = await new Deno.Command("mount", { args, stdout: "null", stderr: "piped" })
        .output();
      if (!out.success) return `mount ${args.join(" ")}: ${decoder.decode(out.stderr).trim()}`;
    } catch (err) {
      return `mount: ${(err as Error).message}`;
    }
  }
  return undefined;
}

Deno.test("obs-utils telemetry run on a site directory mounted read-only says in one line to choose a writable --site-dir, exit 1", async () => {
  await using dir = await tempDir();
  const mounted = join(dir.path, "ro");
  const site = join(mounted, "site");
  await Deno.mkdir(site, { recursive: true });
  const reason = await mountReadOnly(mounted);
  try {
    if (reason) {
      // deno-lint-ignore no-console
      console.log(`launcher_test.ts: skipping the read-only mount: ${reason}`);
      return;
    }
    const out = await cliTask(["run", "--site-dir", site, "--port", String(freePort())]);
    const stderr = decoder.decode(out.stderr);
    assert.equal(out.code, 1, stderr);
    const printed = lines(stderr).filter((line) => !line.startsWith("Task "));
    assert.equal(printed.length, 1, stderr);
    assert.match(
      printed[0]!,
      new RegExp(
        `^error: Cannot use site directory ${site}: it is on a file system mounted read-only \\(Read-only file system \\(os error 30\\): .*\\); choose a writable directory with --site-dir \\(or OBS_TELEMETRY_SITE_DIR\\), or remount it read-write$`,
      ),
    );
  } finally {
    await new Deno.Command("umount", { args: [mounted], stdout: "null", stderr: "null" })
      .output().catch(() => {});
  }
});
