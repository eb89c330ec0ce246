/**
 * Real network fixtures for the access and TLS tests: a network namespace joined to this
 * machine by a veth pair (a peer with a non-loopback address, on this machine only), a
 * self-signed certificate made by `openssl`, and `curl` to send requests from either side.
 * Each fixture says why it cannot run, so its test is skipped with the reason printed.
 * @module
 */
import { join } from "node:path";
import net from "node:net";

const decoder = new TextDecoder();

function tryRun(cmd: string, args: string[]): { ok: boolean; text: string } {
  try {
    const out = new Deno.Command(cmd, { args, stdout: "piped", stderr: "piped" }).outputSync();
    return {
      ok: out.success,
      text: decoder.decode(out.stderr).trim() || decoder.decode(out.stdout),
    };
  } catch (err) {
    return {
      ok: false,
      text: err instanceof Deno.errors.NotFound ? `${cmd} is not installed` : String(err),
    };
  }
}

/** Why `curl` cannot be used, or `undefined`. */
export function curlMissing(): string | undefined {
  const r = tryRun("curl", ["--version"]);
  return r.ok ? undefined : `curl is not available (apt-get install curl): ${r.text}`;
}

/** Why `openssl` cannot make a certificate, or `undefined`. */
export function opensslMissing(): string | undefined {
  const r = tryRun("openssl", ["version"]);
  return r.ok ? undefined : `openssl is not available (apt-get install openssl): ${r.text}`;
}

/** Why a network namespace cannot be made here, or `undefined`: tries one and removes it. */
export function netnsUnavailable(): string | undefined {
  if (Deno.build.os !== "linux") return `network namespaces need Linux, this is ${Deno.build.os}`;
  const missing = curlMissing();
  if (missing) return missing;
  const name = `obs-probe-${uniqueTag()}`;
  const added = tryRun("ip", ["netns", "add", name]);
  if (!added.ok) return `ip netns add is not permitted here: ${added.text}`;
  tryRun("ip", ["netns", "del", name]);
  return undefined;
}

/** A namespace with one veth pair: `hostAddr` on this side, `nsAddr` inside. */
export interface Netns extends AsyncDisposable {
  readonly name: string;
  /** The address of this machine's end (the server binds it or 0.0.0.0). */
  readonly hostAddr: string;
  /** The peer address the server sees for requests from inside. */
  readonly nsAddr: string;
}

/** `ip` failed: its arguments and what it printed. */
class IpError extends Error {
  readonly stderr: string;
  constructor(args: string[], stderr: string) {
    super(`ip ${args.join(" ")}: ${stderr}`);
    this.stderr = stderr;
  }
}

async function ip(args: string[]): Promise<string> {
  const out = await new Deno.Command("ip", { args, stdout: "piped", stderr: "piped" }).output();
  if (!out.success) throw new IpError(args, decoder.decode(out.stderr).trim());
  return decoder.decode(out.stdout);
}

/**
 * A name part no other run on this machine is using: the test files of one `deno test` share its
 * pid and other copies of the suite run beside it, so the pid alone is not enough: the pid and
 * six random characters, at most 11 in all, so `obh<tag>` fits an interface name (15).
 */
function uniqueTag(): string {
  const random = crypto.getRandomValues(new Uint32Array(1))[0]! % 36 ** 6;
  return `${Deno.pid.toString(36)}${random.toString(36).padStart(6, "0")}`;
}

/** The IPv4 address `a.b.c.d` as a number. */
function ipv4(address: string): number {
  return address.split(".").reduce((n, part) => n * 256 + Number(part), 0);
}

/**
 * Whether an interface other than `own` holds an address whose network overlaps `address`/30:
 * another namespace of this kind (another run) that drew the same /30, whose route could carry
 * this one's traffic.
 */
async function subnetTaken(own: string, address: string): Promise<boolean> {
  const ours = ipv4(address) - (ipv4(address) % 4);
  for (const line of (await ip(["-o", "-4", "addr", "show"])).split("\n")) {
    const m = /^\d+:\s+(\S+)\s+inet\s+([\d.]+)\/(\d+)/.exec(line);
    if (!m || m[1] === own) continue;
    const size = 2 ** (32 - Number(m[3]));
    const theirs = ipv4(m[2]!) - (ipv4(m[2]!) % size);
    if (Math.max(ours, theirs) < Math.min(ours + 4, theirs + size)) return true;
  }
  return false;
}

/** A name or a /30 another run holds: this attempt gave way, the next draws again. */
class Taken extends Error {}

/** How many draws of names and /30 a namespace tries before it gives up. */
const NETNS_ATTEMPTS = 5;

/**
 * Creates a namespace and a veth pair with a random /30 in 10.213.0.0/16 (traffic stays on this
 * machine: the namespace has no other route). Its names carry this process's pid and a random
 * part, and only what this call created is ever removed: a name or a /30 another run holds
 * (another copy of the suite on this machine) is drawn again, never taken over. Removed on
 * dispose, also after a failed set-up.
 */
export async function netns(): Promise<Netns> {
  for (let attempt = 1;; attempt++) {
    try {
      return await tryNetns();
    } catch (err) {
      if (!(err instanceof Taken) || attempt >= NETNS_ATTEMPTS) throw err;
    }
  }
}

async function tryNetns(): Promise<Netns> {
  const tag = uniqueTag();
  const name = `obs-t-${tag}`;
  const hostIf = `obh${tag}`, nsIf = `obn${tag}`;
  const third = Math.floor(Math.random() * 256), fourth = Math.floor(Math.random() * 63) * 4;
  const hostAddr = `10.213.${third}.${fourth + 1}`, nsAddr = `10.213.${third}.${fourth + 2}`;
  // What this call created, undone last first (deleting the host end deletes the pair).
  const undo: string[][] = [];
  const cleanup = async () => {
    for (const args of undo.splice(0).reverse()) await ip(args).catch(() => {});
  };
  // A name that exists already belongs to another run: give way rather than use or delete it.
  const create = async (args: string[], remove: string[]) => {
    try {
      await ip(args);
    } catch (err) {
      if (err instanceof IpError && /File exists/.test(err.stderr)) throw new Taken(err.message);
      throw err;
    }
    undo.push(remove);
  };
  try {
    await create(["netns", "add", name], ["netns", "del", name]);
    const veth = ["link", "add", hostIf, "type", "veth", "peer", "name", nsIf];
    await create(veth, ["link", "del", hostIf]);
    await ip(["link", "set", nsIf, "netns", name]);
    await ip(["addr", "add", `${hostAddr}/30`, "dev", hostIf]);
    // Two runs may draw the same /30 at once: each sees the other and draws again.
    if (await subnetTaken(hostIf, hostAddr)) throw new Taken(`${hostAddr}/30 is in use`);
    await ip(["link", "set", hostIf, "up"]);
    await ip(["netns", "exec", name, "ip", "addr", "add", `${nsAddr}/30`, "dev", nsIf]);
    await ip(["netns", "exec", name, "ip", "link", "set", nsIf, "up"]);
    await ip(["netns", "exec", name, "ip", "link", "set", "lo", "up"]);
  } catch (err) {
    await cleanup();
    throw err;
  }
  return { name, hostAddr, nsAddr, [Symbol.asyncDispose]: cleanup };
}

/** What `curl` got: the status (0 when no HTTP answer came) and the body. */
export interface CurlResult {
  status: number;
  body: string;
  /** curl's own error, when it had one. */
  error: string;
}

/** One request with `curl`, from this machine or, given `ns`, from inside that namespace. */
export async function curl(
  url: string,
  options: {
    method?: string;
    headers?: Record<string, string>;
    body?: string;
    ns?: string;
    cacert?: string;
  } = {},
): Promise<CurlResult> {
  const method = options.method ?? "GET";
  // `-X HEAD` would wait for a body that never comes; `-I` is curl's HEAD.
  const args = ["-sS", "--max-time", "10", "-o", "-", "-w", "\n%{http_code}"];
  args.push(...(method === "HEAD" ? ["-I"] : ["-X", method]));
  for (const [k, v] of Object.entries(options.headers ?? {})) args.push("-H", `${k}: ${v}`);
  if (options.body !== undefined) args.push("--data-binary", options.body);
  if (options.cacert) args.push("--cacert", options.cacert);
  args.push(url);
  const [cmd, all] = options.ns
    ? ["ip", ["netns", "exec", options.ns, "curl", ...args]]
    : ["curl", args];
  const out = await new Deno.Command(cmd, { args: all, stdout: "piped", stderr: "piped" }).output();
  const text = decoder.decode(out.stdout);
  const cut = text.lastIndexOf("\n");
  return {
    status: Number(text.slice(cut + 1)) || 0,
    body: text.slice(0, cut),
    error: decoder.decode(out.stderr).trim(),
  };
}

/** A self-signed certificate for `localhost`, 127.0.0.1, ::1 and the given addresses. */
export interface TestCert {
  cert: string;
  key: string;
}

/** Makes a self-signed P-256 certificate in `dir` with `openssl` (valid two days). */
export async function selfSignedCert(dir: string, addresses: string[] = []): Promise<TestCert> {
  const cert = join(dir, "cert.pem"), key = join(dir, "key.pem");
  const san = ["DNS:localhost", "IP:127.0.0.1", "IP:::1", ...addresses.map((a) => `IP:${a}`)];
  const out = await new Deno.Command("openssl", {
    args: [
      "req",
      "-x509",
      "-newkey",
      "ec",
      "-pkeyopt",
      "ec_paramgen_curve:prime256v1",
      "-nodes",
      "-keyout",
      key,
      "-out",
      cert,
      "-days",
      "2",
      "-subj",
      "/CN=localhost",
      "-addext",
      `subjectAltName=${san.join(",")}`,
      "-addext",
      "basicConstraints=critical,CA:FALSE",
    ],
    stdout: "null",
    stderr: "piped",
  }).output();
  if (!out.success) throw new Error(`openssl req failed: ${decoder.decode(out.stderr)}`);
  return { cert, key };
}

/** A TCP connection from a chosen source address, seen from the client's side. */
export interface PeerConn {
  /** The source address it was opened from. */
  readonly from: string;
  /** `true` once the server ended or reset it. */
  closedByServer(): boolean;
  /** Everything the server sent so far. */
  received(): string;
  /** Settles once the server ended or reset it. */
  readonly closed: Promise<void>;
  /** Sends text. */
  write(text: string): Promise<void>;
  /** Closes it from this side and waits until it is gone. */
  destroy(): Promise<void>;
}

/**
 * Opens a TCP connection to `127.0.0.1:port` from `from`, a loopback source address such as
 * `127.0.1.7`: Linux routes all of 127/8 to the loopback interface, so many peer addresses need
 * no namespace. `Deno.connect` cannot choose its source address; `node:net` can.
 */
export function connectFrom(from: string, port: number, host = "127.0.0.1"): Promise<PeerConn> {
  return new Promise((resolve, reject) => {
    const socket = net.createConnection({ host, port, localAddress: from });
    let text = "";
    let ended = false;
    const closed = Promise.withResolvers<void>();
    const gone = Promise.withResolvers<void>();
    socket.setEncoding("utf8");
    socket.on("data", (chunk: string) => text += chunk);
    socket.on("end", () => {
      ended = true;
      closed.resolve();
      socket.end();
    });
    socket.on("close", () => {
      ended = true;
      closed.resolve();
      gone.resolve();
    });
    socket.on("error", (err) => {
      ended = true;
      closed.resolve();
      reject(err);
    });
    socket.once("connect", () =>
      resolve({
        from,
        closedByServer: () => ended,
        received: () => text,
        closed: closed.promise,
        write: (chunk) =>
          new Promise((done, failed) => socket.write(chunk, (err) => err ? failed(err) : done())),
        destroy: async () => {
          socket.destroy();
          await gone.promise;
        },
      }));
  });
}

/** A TCP proxy on loopback that loses the answers of its first connections. */
export interface AnswerDroppingProxy extends AsyncDisposable {
  /** `http://127.0.0.1:<port>` of the proxy. */
  readonly url: string;
  /** The proxy's port. */
  readonly port: number;
  /** Connections accepted so far. */
  connections(): number;
  /** Connections whose answer was dropped so far. */
  dropped(): number;
}

/**
 * A proxy on 127.0.0.1 to a server on `targetPort`: each of its first `drop` connections has its
 * request forwarded, but when the server's answer comes back the proxy closes both sides without
 * passing it on, as a network that fails after the write would; later connections are relayed
 * both ways.
 */
export function answerDroppingProxy(targetPort: number, drop = 1): AnswerDroppingProxy {
  const listener = Deno.listen({ hostname: "127.0.0.1", port: 0 });
  const conns = new Set<Deno.Conn>();
  const relays = new Set<Promise<void>>();
  let connections = 0;
  let dropped = 0;
  const close = (conn: Deno.Conn) => {
    if (!conns.delete(conn)) return;
    try {
      conn.close();
    } catch {
      // already closed
    }
  };
  /** Copies `from` to `to` until `from` ends; with `dropAnswer`, closes both at the first bytes. */
  const pump = async (from: Deno.Conn, to: Deno.Conn, dropAnswer: boolean) => {
    const buf = new Uint8Array(64 * 1024);
    try {
      while (true) {
        const n = await from.read(buf);
        if (n === null) break;
        if (dropAnswer) break;
        let off = 0;
        while (off < n) off += await to.write(buf.subarray(off, n));
      }
    } catch {
      // a side closed
    }
    close(from);
    close(to);
  };
  const relay = async (client: Deno.Conn, dropAnswer: boolean) => {
    conns.add(client);
    let server: Deno.Conn;
    try {
      server = await Deno.connect({ hostname: "127.0.0.1", port: targetPort });
    } catch {
      close(client);
      return;
    }
    conns.add(server);
    await Promise.all([pump(client, server, false), pump(server, client, dropAnswer)]);
  };
  const accepting = (async () => {
    try {
      for await (const client of listener) {
        connections++;
        const dropAnswer = dropped < drop;
        if (dropAnswer) dropped++;
        const task = relay(client, dropAnswer);
        relays.add(task);
        task.finally(() => relays.delete(task));
      }
    } catch {
      // the listener closed
    }
  })();
  const port = (listener.addr as Deno.NetAddr).port;
  return {
    url: `http://127.0.0.1:${port}`,
    port,
    connections: () => connections,
    dropped: () => dropped,
    async [Symbol.asyncDispose]() {
      listener.close();
      await accepting;
      for (const conn of [...conns]) close(conn);
      await Promise.all(relays);
    },
  };
}
