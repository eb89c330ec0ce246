/**
 * The field entry points (docs/cli.md#permissions, docs/operations.md): `deno task start` on a
 * fresh checkout with no network, `deno task install`, and the launcher that runs `telemetry run`
 * with exactly the permissions its flags need. Every test starts real processes; the permissions
 * a service holds are read from its command line in /proc, the flags Deno enforces.
 * @module
 */

import assert from "node:assert/strict";
import { join } from "node:path";
import denoJson from "../deno.json" with { type: "json" };
import { freePort, tempDir } from "./_shared/util.ts";
import { curl, netns, netnsUnavailable } from "./_shared/net.ts";
import { DEFAULT_HOST, DEFAULT_PORT } from "../wire/address.ts";
import { RUN_FLAGS, SERVER_ENV_VARS } from "../cli/flags.ts";
import { LAUNCHED_ENV, runPermissionFlags } from "../cli/permissions.ts";
import { launchArgs, withoutTaskSeparator } from "../cli/launch.ts";

const ROOT = new URL("..", import.meta.url).pathname;
const decoder = new TextDecoder();

/** Why the process tests cannot run here, or `undefined`. */
function processSkip(): string | undefined {
  if (Deno.build.os !== "linux") return "skipping: reads /proc/<pid>/cmdline (Linux only)";
  const path = (Deno.env.get("PATH") ?? "").split(":");
  const found = path.some((dir) => {
    try {
      return Deno.statSync(join(dir, "deno")).isFile;
    } catch {
      return false;
    }
  });
  return found ? undefined : "skipping: no deno on the PATH (the tasks and obs-utils run `deno`)";
}

const skip = processSkip();
// deno-lint-ignore no-console
if (skip) console.log(`launch_test: ${skip}`);

/** A checkout as `git clone` would make it: the tracked files of this worktree, as they are now. */
async function freshCheckout(into: string): Promise<string | undefined> {
  let out;
  try {
    out = await new Deno.Command("git", {
      args: ["ls-files", "-z", "--cached", "--others", "--exclude-standard"],
      cwd: ROOT,
      stdout: "piped",
      stderr: "null",
    }).output();
  } catch {
    return "skipping: git is not installed (the fresh checkout is copied from git ls-files)";
  }
  if (!out.success) return "skipping: not a git checkout";
  for (const file of decoder.decode(out.stdout).split("\0").filter((f) => f !== "")) {
    try {
      await Deno.mkdir(join(into, file, ".."), { recursive: true });
      await Deno.copyFile(join(ROOT, file), join(into, file));
    } catch (err) {
      if (!(err instanceof Deno.errors.NotFound)) throw err; // deleted but not yet committed
    }
  }
  return undefined;
}

/** Sends a request to `url` and answers the status, 0 when nothing answered. */
type Ask = (method: "GET" | "POST", url: string) => Promise<number>;

/** Asks with `fetch`, from this machine. */
const fetchAsk: Ask = async (method, url) => {
  try {
    const res = await fetch(url, { method, signal: AbortSignal.timeout(1000) });
    await res.body?.cancel();
    return res.status;
  } catch {
    return 0; // not listening (yet)
  }
};

/**
 * Waits (at most `ms`) until the service `child` started on `siteDir` answers `url/health` with
 * 200, or throws with the process's output. The port was free when the test picked it, but another
 * program on this machine (another copy of the suite) may have bound it since: the answer is this
 * service's once the site's lock names `url`, as the service writes it once it listens.
 */
async function waitHealthy(
  url: string,
  child: Deno.ChildProcess,
  siteDir: string,
  ask: Ask = fetchAsk,
  ms = 30_000,
): Promise<void> {
  let exited: Deno.CommandStatus | undefined;
  void child.status.then((s) => (exited = s));
  const deadline = Date.now() + ms;
  while (Date.now() < deadline) {
    if (exited) throw new Error(`exited with ${exited.code} before answering /health`);
    const lock = await Deno.readTextFile(join(siteDir, ".lock")).catch(() => "");
    if (lock.split("\n")[1] === url && await ask("GET", `${url}/health`) === 200) return;
    await new Promise((r) => setTimeout(r, 100));
  }
  throw new Error(`${url}/health did not answer within ${ms} ms`);
}

/** The arguments of the process serving `siteDir`: the `deno run` of `cli.ts telemetry run`. */
function servingArgs(siteDir: string): string[] {
  const found: string[][] = [];
  for (const entry of Deno.readDirSync("/proc")) {
    if (!/^\d+$/.test(entry.name)) continue;
    let args: string[];
    try {
      args = decoder.decode(Deno.readFileSync(`/proc/${entry.name}/cmdline`)).split("\0");
    } catch {
      continue; // gone, or not ours to read
    }
    const cli = args.findIndex((a) => a.endsWith("/cli.ts"));
    if (cli > 0 && args[cli + 2] === "run" && args.includes(siteDir)) found.push(args);
  }
  assert.equal(found.length, 1, `one process serves ${siteDir}: ${JSON.stringify(found)}`);
  return found[0]!;
}

/** Ends the service (POST /shutdown) and returns the exit code of `child`. */
async function shutdown(
  url: string,
  child: Deno.ChildProcess,
  ask: Ask = fetchAsk,
): Promise<number> {
  await ask("POST", `${url}/shutdown`);
  const status = await Promise.race([
    child.status,
    new Promise<never>((_, reject) =>
      setTimeout(() => reject(new Error("did not exit within 15 s")), 15_000)
    ),
  ]);
  return status.code;
}

Deno.test({
  name:
    "a fresh checkout with an empty DENO_DIR and an unreachable npm registry starts the service with deno task start and answers /health",
  ignore: skip !== undefined,
  async fn() {
    await using checkout = await tempDir("obs-telemetry-checkout-");
    const reason = await freshCheckout(checkout.path);
    if (reason) {
      // deno-lint-ignore no-console
      console.log(`launch_test: ${reason}`);
      return;
    }
    await using cache = await tempDir("obs-telemetry-deno-dir-");
    await using site = await tempDir();
    const port = freePort();
    const child = new Deno.Command("deno", {
      args: ["task", "start", "--", "--port", String(port), "--site-dir", site.path],
      cwd: checkout.path,
      env: { DENO_DIR: cache.path, NPM_CONFIG_REGISTRY: "http://127.0.0.1:9/", NO_COLOR: "1" },
      stdout: "piped",
      stderr: "piped",
    }).spawn();
    const output = Promise.all([
      new Response(child.stdout).text(),
      new Response(child.stderr).text(),
    ]);
    const url = `http://localhost:${port}`;
    try {
      await waitHealthy(url, child, site.path);
    } catch (err) {
      try {
        child.kill("SIGKILL");
      } catch {
        // already gone
      }
      await child.status;
      throw new Error(`${(err as Error).message}\n${(await output).join("\n")}`);
    }
    assert.equal(await shutdown(url, child), 0);
    const [, stderr] = await output;
    assert.doesNotMatch(stderr, /Download|npm/, stderr);
  },
});

Deno.test({
  name:
    "deno task start -- --port P serves on P, and the service holds exactly the permissions its flags derive",
  ignore: skip !== undefined,
  async fn() {
    await using site = await tempDir();
    const port = freePort();
    const child = new Deno.Command("deno", {
      args: ["task", "start", "--", "--port", String(port), "--site-dir", site.path],
      cwd: ROOT,
      env: { NO_COLOR: "1" },
      stdout: "null",
      stderr: "null",
    }).spawn();
    const url = `http://localhost:${port}`;
    await waitHealthy(url, child, site.path);
    const args = servingArgs(site.path);
    const allow = args.filter((a) => a.startsWith("--allow-"));
    assert.deepEqual(
      allow,
      runPermissionFlags({ siteDir: site.path, host: "localhost", port }, [LAUNCHED_ENV]),
    );
    assert.ok(!args.includes("-A") && !args.includes("--allow-all"), args.join(" "));
    assert.equal(await shutdown(url, child), 0);
  },
});

Deno.test({
  name:
    "deno task install puts obs-utils in DENO_INSTALL_ROOT, and its telemetry run --port --types --site-dir serves with those flags' permissions only",
  ignore: skip !== undefined,
  async fn() {
    await using root = await tempDir("obs-telemetry-install-");
    const install = await new Deno.Command("deno", {
      args: ["task", "install"],
      cwd: ROOT,
      env: { DENO_INSTALL_ROOT: root.path, NO_COLOR: "1" },
      stdout: "piped",
      stderr: "piped",
    }).output();
    assert.ok(install.success, decoder.decode(install.stderr));
    const obsUtils = join(root.path, "bin", "obs-utils");
    await using site = await tempDir();
    const types = join(root.path, "types.json");
    await Deno.writeTextFile(types, JSON.stringify({ weather: { stale_after_s: 600 } }));
    const port = freePort();
    const child = new Deno.Command(obsUtils, {
      args: ["telemetry", "run", "--port", String(port), "--types", types, "--site-dir", site.path],
      env: { NO_COLOR: "1" },
      stdout: "null",
      stderr: "null",
    }).spawn();
    const url = `http://localhost:${port}`;
    await waitHealthy(url, child, site.path);
    const allow = servingArgs(site.path).filter((a) => a.startsWith("--allow-"));
    assert.deepEqual(
      allow,
      runPermissionFlags({ siteDir: site.path, host: "localhost", port, typesFile: types }, [
        LAUNCHED_ENV,
      ]),
    );
    const stop = await new Deno.Command(obsUtils, {
      args: ["telemetry", "stop", "--port", String(port)],
      stdout: "piped",
      stderr: "piped",
    }).output();
    assert.ok(stop.success, decoder.decode(stop.stderr));
    assert.equal((await child.status).code, 0);
  },
});

Deno.test({
  name: "a permission the launched service is denied is advised as a run flag, not a Deno flag",
  ignore: skip !== undefined,
  async fn() {
    await using site = await tempDir();
    const port = freePort();
    // The permissions of another port: what a launched service would meet if a flag had no row.
    const flags = runPermissionFlags({ siteDir: site.path, host: "127.0.0.1", port: 1 }, [
      LAUNCHED_ENV,
    ]);
    const run = (env: Record<string, string>) =>
      new Deno.Command(Deno.execPath(), {
        args: [
          "run",
          "--no-prompt",
          ...flags,
          join(ROOT, "cli.ts"),
          "telemetry",
          "run",
          "--host",
          "127.0.0.1",
          "--port",
          String(port),
          "--site-dir",
          site.path,
        ],
        env: { NO_COLOR: "1", ...env },
        stdout: "null",
        stderr: "piped",
      }).output();
    const launched = await run({ [LAUNCHED_ENV]: "1" });
    assert.equal(launched.code, 1);
    assert.match(
      decoder.decode(launched.stderr),
      new RegExp(`requires net access to 127\\.0\\.0\\.1:${port}; .*give it with --host, --port`),
    );
    assert.doesNotMatch(decoder.decode(launched.stderr), /--allow-/);
    const direct = await run({});
    assert.match(
      decoder.decode(direct.stderr),
      new RegExp(`add --allow-net=127\\.0\\.0\\.1:${port}`),
    );
  },
});

Deno.test("every run flag whose value is a file or directory says which permission it needs", () => {
  for (const flag of RUN_FLAGS) {
    if (flag.arg === "FILE" || flag.arg === "DIR") {
      assert.ok(flag.grants === "read" || flag.grants === "read-write", `--${flag.name}`);
    }
  }
});

Deno.test("the launcher derives --tls-cert, --tls-key and --allow-run-root permissions from the flags alone", () => {
  const args = launchArgs([
    "telemetry",
    "run",
    "--site-dir",
    "/srv/t",
    "--tls-cert",
    "/etc/c.pem",
    "--tls-key",
    "/etc/k.pem",
    "--allow-run-root",
    "/data",
    "--host",
    "::1",
  ], () => undefined)!;
  assert.ok(args.includes("--allow-net=[::1]:6562"), args.join(" "));
  assert.ok(args.includes("--allow-read=/srv/t,/data,/etc/c.pem,/etc/k.pem"), args.join(" "));
  assert.ok(args.includes("--allow-write=/srv/t,/data"), args.join(" "));
});

Deno.test("the launcher takes the port from OBS_TELEMETRY_PORT when no --port is given", () => {
  const env = (name: string) => name === "OBS_TELEMETRY_PORT" ? "7001" : undefined;
  assert.ok(launchArgs(["telemetry", "run"], env)!.includes("--allow-net=localhost:7001"));
});

Deno.test("the launcher leaves help, other commands and bad flags to the command itself", () => {
  const none = () => undefined;
  assert.equal(launchArgs(["telemetry", "run", "--help"], none), undefined);
  assert.equal(launchArgs(["telemetry", "run", "--prot", "1"], none), undefined);
  assert.equal(launchArgs(["telemetry", "run", "--port", "x"], none), undefined);
  assert.equal(launchArgs(["telemetry", "current"], none), undefined);
  assert.deepEqual(withoutTaskSeparator(["telemetry", "run", "--", "--port", "1"]), [
    "telemetry",
    "run",
    "--port",
    "1",
  ]);
});

/**
 * Environment of a machine without network: this Deno cache and no way to any registry (the
 * registry's address is kept when the cache was filled from it: Deno files packages under it).
 */
function offlineEnv(denoDir: string, keepRegistry = false): Record<string, string> {
  const nowhere = "http://127.0.0.1:9";
  return {
    DENO_DIR: denoDir,
    ...(keepRegistry ? {} : { NPM_CONFIG_REGISTRY: `${nowhere}/` }),
    HTTPS_PROXY: nowhere,
    HTTP_PROXY: nowhere,
    NO_PROXY: "",
    NO_COLOR: "1",
  };
}

/** Runs `deno task cli -- telemetry ...args` in the checkout. */
function cliTask(args: string[], env: Record<string, string>): Promise<Deno.CommandOutput> {
  return new Deno.Command("deno", {
    args: ["task", "cli", "--", "telemetry", ...args],
    cwd: ROOT,
    env,
    stdout: "piped",
    stderr: "piped",
  }).output();
}

Deno.test({
  name:
    "every command's --help, forward's and archive's too, works with an empty DENO_DIR and no network",
  ignore: skip !== undefined,
  async fn() {
    await using cache = await tempDir("obs-telemetry-deno-dir-");
    const commands = ["run", "stop", "current", "post", "read", "runs", "check", "migrate"];
    for (const command of [...commands, "forget", "start-run", "stop-run", "forward", "archive"]) {
      const out = await cliTask([command, "--help"], offlineEnv(cache.path));
      const stdout = decoder.decode(out.stdout);
      assert.equal(out.code, 0, `${command} --help: ${decoder.decode(out.stderr)}`);
      assert.match(stdout, new RegExp(`^Usage: obs-utils telemetry ${command}\\b`), command);
    }
  },
});

Deno.test({
  name: "forward on a machine that never ran deno task cache stops with one line naming it",
  ignore: skip !== undefined,
  async fn() {
    await using cache = await tempDir("obs-telemetry-deno-dir-");
    await using site = await tempDir();
    const out = await cliTask(
      ["forward", "--status", "--site-dir", site.path],
      offlineEnv(cache.path),
    );
    assert.equal(out.code, 1);
    const lines = decoder.decode(out.stderr).split("\n").filter((l) => l.startsWith("error"));
    assert.equal(lines.length, 1, decoder.decode(out.stderr));
    assert.match(lines[0]!, /run 'deno task cache' once on a machine with network access/);
  },
});

/** Why the npm registry cannot be reached from here, or `undefined`. */
async function registrySkip(): Promise<string | undefined> {
  const registry = Deno.env.get("NPM_CONFIG_REGISTRY") ?? "https://registry.npmjs.org/";
  try {
    const res = await fetch(new URL("postgres", registry), { signal: AbortSignal.timeout(5000) });
    await res.body?.cancel();
    return res.ok ? undefined : `skipping: the npm registry answered ${res.status}`;
  } catch (err) {
    return `skipping: the npm registry is unreachable (${(err as Error).message})`;
  }
}

Deno.test({
  name: "after deno task cache, forward works with the network gone",
  ignore: skip !== undefined,
  async fn() {
    const reason = await registrySkip();
    if (reason) {
      // deno-lint-ignore no-console
      console.log(`launch_test: ${reason}`);
      return;
    }
    await using cache = await tempDir("obs-telemetry-deno-dir-");
    await using site = await tempDir();
    const cached = await new Deno.Command("deno", {
      args: ["task", "cache"],
      cwd: ROOT,
      env: { DENO_DIR: cache.path, NO_COLOR: "1" },
      stdout: "piped",
      stderr: "piped",
    }).output();
    assert.ok(cached.success, decoder.decode(cached.stderr));
    const out = await cliTask(
      ["forward", "--status", "--site-dir", site.path],
      offlineEnv(cache.path, true),
    );
    assert.equal(out.code, 0, decoder.decode(out.stderr));
    assert.match(decoder.decode(out.stdout), /no forwarding cursor/);
  },
});

Deno.test("the compile tasks carry exactly the derived permissions of run's defaults over ./telemetry", () => {
  for (const task of ["compile", "compile:x86_64", "compile:aarch64"]) {
    const words = (denoJson.tasks as Record<string, string>)[task]!.split(/\s+/);
    assert.deepEqual(
      words.filter((w) => w.startsWith("--allow-")),
      runPermissionFlags({ siteDir: "./telemetry", host: DEFAULT_HOST, port: DEFAULT_PORT }),
      task,
    );
  }
});

/** Whether the default port is free on this machine right now. */
function defaultPortFree(): boolean {
  try {
    Deno.listen({ hostname: "127.0.0.1", port: DEFAULT_PORT }).close();
    return true;
  } catch {
    return false;
  }
}

const noNetns = netnsUnavailable();

Deno.test({
  name: "deno run with the compile task's permission flags serves run's defaults",
  ignore: skip !== undefined,
  async fn() {
    // Run's default port is fixed: the service gets a network namespace of its own, so a service
    // on this machine (another copy of the suite) neither blocks it nor is reached by it.
    if (noNetns && !defaultPortFree()) {
      // deno-lint-ignore no-console
      console.log(
        `launch_test: skipping: port ${DEFAULT_PORT} is in use (the binary's default), ${noNetns}`,
      );
      return;
    }
    await using ns = noNetns ? undefined : await netns();
    await using cwd = await tempDir();
    const words = denoJson.tasks.compile.split(/\s+/);
    const deno = [
      Deno.execPath(),
      "run",
      "--no-prompt",
      ...words.filter((w) => w.startsWith("--allow-") || w.startsWith("--v8-flags")),
      join(ROOT, "cli.ts"),
      "telemetry",
      "run",
    ];
    const [cmd, ...args] = ns ? ["ip", "netns", "exec", ns.name, ...deno] : deno;
    const child = new Deno.Command(cmd!, {
      args,
      cwd: cwd.path,
      env: { NO_COLOR: "1" },
      stdout: "null",
      stderr: "piped",
    }).spawn();
    const stderr = new Response(child.stderr).text();
    const url = `http://localhost:${DEFAULT_PORT}`;
    const ask: Ask = ns
      ? async (method, url) => (await curl(url, { method, ns: ns.name })).status
      : fetchAsk;
    try {
      await waitHealthy(url, child, join(cwd.path, "telemetry"), ask);
    } catch (err) {
      try {
        child.kill("SIGKILL");
      } catch {
        // already gone
      }
      await child.status;
      throw new Error(`${(err as Error).message}: ${await stderr}`);
    }
    assert.equal(await shutdown(url, child, ask), 0);
    await stderr;
    assert.ok((await Deno.stat(join(cwd.path, "telemetry", ".site.json"))).isFile);
  },
});

Deno.test({
  name:
    "a Ctrl-C that reaches deno task start twice (terminal and relay) stops the service once, gracefully, with exit 0",
  ignore: skip !== undefined,
  async fn() {
    await using site = await tempDir();
    const port = freePort();
    // A process group of its own, as a terminal gives the foreground job; Ctrl-C signals all of it.
    const child = new Deno.Command("deno", {
      args: ["task", "start", "--", "--port", String(port), "--site-dir", site.path],
      cwd: ROOT,
      env: { NO_COLOR: "1" },
      stdout: "piped",
      stderr: "piped",
      detached: true,
    }).spawn();
    const output = Promise.all([
      new Response(child.stdout).text(),
      new Response(child.stderr).text(),
    ]);
    await waitHealthy(`http://localhost:${port}`, child, site.path);
    Deno.kill(-child.pid, "SIGINT");
    // The same keypress as `deno task` relays it on a loaded machine: a moment later, not merged
    // with the first, while the service is still shutting down (unless it is already gone).
    await new Promise((r) => setTimeout(r, 20));
    try {
      Deno.kill(-child.pid, "SIGINT");
    } catch (err) {
      if (!(err instanceof Deno.errors.NotFound)) throw err;
    }
    const status = await child.status;
    const [stdout, stderr] = await output;
    assert.equal(status.code, 0, stderr);
    assert.match(stdout, /telemetry service stopped; all files flushed and closed/);
    assert.doesNotMatch(stderr, /second signal/);
  },
});

Deno.test("deno task start allows the launcher to read the run variables and start deno, nothing more", () => {
  const words = denoJson.tasks.start.split(/\s+/);
  assert.deepEqual(words.filter((w) => w.startsWith("--allow-")), [
    `--allow-env=${SERVER_ENV_VARS.join(",")}`,
    "--allow-run=deno",
  ]);
  assert.deepEqual(words.slice(-4), ["telemetry", "run", "--site-dir", "./telemetry"]);
});
