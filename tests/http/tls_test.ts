/**
 * HTTPS (docs/operations.md): `--tls-cert`/`--tls-key` with a self-signed certificate made by `openssl`
 * in a temp dir; the client, the CLI (`current`, `post`, `stop`) and the dashboard over it, and
 * the operator's mistakes each refused in one line.
 * @module
 */
import assert from "node:assert/strict";
import { join } from "node:path";
import { TelemetryClient } from "../../client.ts";
import { spawnServer } from "../../server.ts";
import { opensslMissing, selfSignedCert } from "../_shared/net.ts";
import { CLI, cliRunArgs, freePort, readSiteLines, tempDir, testServer } from "../_shared/util.ts";
import { permissionFlags } from "../../cli/spawn.ts";

const skip = opensslMissing();
if (skip) {
  // deno-lint-ignore no-console
  console.log(`tls_test.ts: skipping: ${skip}`);
}
const decoder = new TextDecoder();

async function cli(args: string[], env: Record<string, string>) {
  const out = await new Deno.Command(Deno.execPath(), {
    args: ["run", "--no-prompt", "--allow-net", "--allow-read", "--allow-env", CLI, ...args],
    env: { NO_COLOR: "1", ...env },
    stdout: "piped",
    stderr: "piped",
  }).output();
  return { code: out.code, stdout: decoder.decode(out.stdout), stderr: decoder.decode(out.stderr) };
}

Deno.test({
  name:
    "over HTTPS the client, the CLI's post, current and stop, and the dashboard work, under the scoped permissions",
  ignore: skip !== undefined,
  async fn() {
    await using dir = await tempDir();
    await using site = await tempDir();
    const { cert, key } = await selfSignedCert(dir.path);
    await using server = await spawnServer({
      siteDir: site.path,
      host: "127.0.0.1",
      port: 0,
      timeZone: "UTC",
      token: "t0k",
      tlsCert: cert,
      tlsKey: key,
      output: "null",
    });
    assert.match(server.url, /^https:\/\/127\.0\.0\.1:\d+$/);
    const port = new URL(server.url).port;

    // The client, trusting the certificate through its fetch option (per client, no env).
    using http = Deno.createHttpClient({ caCerts: [await Deno.readTextFile(cert)] });
    const client = new TelemetryClient({
      baseUrl: server.url,
      token: "t0k",
      fetch: (input, init) => fetch(input, { ...init, client: http }),
    });
    const posted = await client.postEvent("weather", { wind_mps: 2.5 });
    assert.equal(posted.seq, 1);

    // The CLI, trusting it through DENO_CERT.
    const env = { DENO_CERT: cert, OBS_TELEMETRY_TOKEN: "t0k" };
    const conn = ["--host", "127.0.0.1", "--port", port, "--tls"];
    const post = await cli(["telemetry", "post", "dome", "--data", '{"open":true}', ...conn], env);
    assert.equal(post.code, 0, post.stderr);
    const current = await cli(["telemetry", "current", "--json", ...conn], env);
    assert.equal(current.code, 0, current.stderr);
    const snapshot = JSON.parse(current.stdout);
    assert.deepEqual(Object.keys(snapshot).toSorted(), ["dome", "weather"]);
    assert.equal(snapshot.weather.data.wind_mps, 2.5);

    // Without --tls the CLI speaks HTTP to an HTTPS port: a failure in one line, exit 1.
    const plain = await cli(["telemetry", "current", "--host", "127.0.0.1", "--port", port], env);
    assert.equal(plain.code, 1);
    assert.equal(plain.stderr.trim().split("\n").length, 1, plain.stderr);
    // Without the CA, the certificate is refused, also in one line.
    const untrusted = await cli(["telemetry", "current", ...conn], { OBS_TELEMETRY_TOKEN: "t0k" });
    assert.equal(untrusted.code, 1);
    assert.equal(untrusted.stderr.trim().split("\n").length, 1, untrusted.stderr);

    // The dashboard page and its stream.
    const page = await fetch(`${server.url}/`, {
      client: http,
      headers: { authorization: "Bearer t0k" },
    });
    assert.equal(page.status, 200);
    assert.match(await page.text(), /<html/i);
    const stream = await fetch(`${server.url}/stream`, {
      client: http,
      headers: { authorization: "Bearer t0k" },
    });
    const reader = stream.body!.pipeThrough(new TextDecoderStream()).getReader();
    let text = "";
    while (!text.includes("\n\n")) text += (await reader.read()).value ?? "";
    assert.match(text, /^event: snapshot\ndata: .*"dome"/m);
    await reader.cancel();

    const stop = await cli(["telemetry", "stop", ...conn], env);
    assert.equal(stop.code, 0, stop.stderr);
    assert.equal((await server.process.status).code, 0);
    assert.equal((await readSiteLines(site.path)).length, 2);
  },
});

Deno.test({
  name: "a plain-HTTP request or a garbage handshake on the HTTPS port does not stop the server",
  ignore: skip !== undefined,
  async fn() {
    await using dir = await tempDir();
    await using site = await tempDir();
    const { cert, key } = await selfSignedCert(dir.path);
    await using server = await testServer({ siteDir: site.path, tlsCert: cert, tlsKey: key });
    assert.match(server.url, /^https:/);
    // Seeded garbage, bounded: 20 connections of random bytes, then plain HTTP.
    let seed = 15;
    const rand = () => (seed = (seed * 1103515245 + 12345) % 2 ** 31) / 2 ** 31;
    for (let i = 0; i < 20; i++) {
      const conn = await Deno.connect({ hostname: "127.0.0.1", port: server.addr.port });
      const bytes = Uint8Array.from({ length: 1 + Math.floor(rand() * 512) }, () => rand() * 256);
      await conn.write(bytes).catch(() => {});
      conn.close();
    }
    await fetch(`http://127.0.0.1:${server.addr.port}/health`).then(
      (r) => r.body?.cancel(),
      () => {},
    );
    using http = Deno.createHttpClient({ caCerts: [await Deno.readTextFile(cert)] });
    const res = await fetch(`https://localhost:${server.addr.port}/health`, { client: http });
    assert.deepEqual(await res.json(), { ok: true });
  },
});

Deno.test({
  name:
    "run refuses half a TLS configuration, a missing file and a non-PEM file, each in one line naming the flag",
  ignore: skip !== undefined,
  async fn() {
    await using dir = await tempDir();
    const { cert, key } = await selfSignedCert(dir.path);
    await Deno.mkdir(join(dir.path, "other"));
    const other = await selfSignedCert(join(dir.path, "other"));
    const der = join(dir.path, "cert.der");
    await Deno.writeFile(der, Uint8Array.from([0x30, 0x82, 0x01, 0x0a, 0, 1, 2, 3]));
    const cases: [string[], RegExp][] = [
      [
        ["--tls-cert", cert],
        /^HTTPS needs both --tls-cert and --tls-key; only --tls-cert was given\.$/,
      ],
      [
        ["--tls-key", key],
        /^HTTPS needs both --tls-cert and --tls-key; only --tls-key was given\.$/,
      ],
      [
        ["--tls-cert", join(dir.path, "nope.pem"), "--tls-key", key],
        /^Cannot read --tls-cert .*nope\.pem: .*; give the path of a readable PEM file\.$/,
      ],
      [["--tls-cert", der, "--tls-key", key], /^--tls-cert .*cert\.der is not a PEM certificate/],
      [["--tls-cert", cert, "--tls-key", cert], /^--tls-key .*cert\.pem is not a PEM private key/],
      [
        ["--tls-cert", cert, "--tls-key", other.key],
        /^--tls-key .*other\/key\.pem does not fit --tls-cert .*cert\.pem \(.*\); give the private key the certificate was made with\.$/,
      ],
      [
        ["--tls-cert", dir.path, "--tls-key", key],
        /^Cannot read --tls-cert .*: Is a directory; give/,
      ],
    ];
    for (const [extra, message] of cases) {
      await using site = await tempDir();
      const port = freePort();
      const out = await new Deno.Command(Deno.execPath(), {
        args: cliRunArgs(site.path, port, extra, ["--allow-all"]),
        env: { NO_COLOR: "1" },
        stdout: "piped",
        stderr: "piped",
      }).output();
      const stderr = decoder.decode(out.stderr).trim();
      assert.equal(out.code, 1, `${extra.join(" ")}: ${stderr}`);
      assert.equal(stderr.split("\n").length, 1, stderr);
      assert.match(stderr.replace(/^error: /, ""), message);
      assert.equal(decoder.decode(out.stdout), "");
    }
  },
});

Deno.test({
  name:
    "a SIGTERM that comes while the service is still starting shuts it down cleanly once it is up",
  ignore: skip !== undefined,
  async fn() {
    await using dir = await tempDir();
    await using site = await tempDir();
    const { cert, key } = await selfSignedCert(dir.path);
    // The certificate comes through a named pipe, so start-up waits in its read until the test
    // has sent the signal: the window a supervisor's early SIGTERM falls into, held open.
    const fifo = join(dir.path, "cert.fifo");
    const made = await new Deno.Command("mkfifo", { args: [fifo] }).output();
    assert.ok(made.success, "mkfifo failed");
    const child = new Deno.Command(Deno.execPath(), {
      args: cliRunArgs(site.path, freePort(), ["--tls-cert", fifo, "--tls-key", key], [
        "--allow-all",
      ]),
      env: { NO_COLOR: "1" },
      stdout: "piped",
      stderr: "piped",
    }).spawn();
    const output = child.output();
    // Opening the pipe for writing returns once the service has opened it to read.
    const pipe = await Deno.open(fifo, { write: true });
    child.kill("SIGTERM");
    // Let the signal land before start-up can go on.
    await new Promise((r) => setTimeout(r, 200));
    await pipe.write(await Deno.readFile(cert));
    pipe.close();
    const out = await output;
    const stdout = decoder.decode(out.stdout);
    assert.equal(out.code, 0, decoder.decode(out.stderr));
    assert.match(stdout, /listening on https:/);
    assert.match(stdout, /telemetry service stopped; all files flushed and closed/);
  },
});

Deno.test("permissionFlags() grants read, not write, on the TLS files", () => {
  const flags = permissionFlags({
    siteDir: "/srv/t",
    host: "0.0.0.0",
    port: 6562,
    readFiles: ["/etc/obs/cert.pem", "/etc/obs/key.pem"],
  });
  assert.ok(
    flags.includes("--allow-read=/srv/t,/etc/obs/cert.pem,/etc/obs/key.pem"),
    flags.join(" "),
  );
  assert.ok(flags.includes("--allow-write=/srv/t"), flags.join(" "));
});
