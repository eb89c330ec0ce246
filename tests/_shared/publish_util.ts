/**
 * What the publish tests share: the publisher as its own process (`spawnPublisher()`) with its
 * log kept, a real `mosquitto_sub` reading the broker back, a local CA made by `openssl` for
 * `mqtts://`, and a broker that accepts and never answers. When a program is missing the test
 * skips with the reason these helpers give.
 *
 * @module
 */

import { join } from "node:path";
import { spawnPublisher, type SpawnPublisherOptions } from "../../publish.ts";
import { mosquittoMissing, runs } from "./collect_push_util.ts";
import { waitUntil } from "./util.ts";

export { waitUntil };

/** Why the publish tests cannot run here (mosquitto, its clients, openssl), or `undefined`. */
export function publishMissing(): string | undefined {
  return mosquittoMissing() ??
    (runs("mosquitto_sub", ["--help"])
      ? undefined
      : "mosquitto_sub is not installed (apt-get install -y mosquitto-clients)") ??
    (runs("mosquitto_passwd", ["-h"])
      ? undefined
      : "mosquitto_passwd is not installed (apt-get install -y mosquitto)") ??
    (runs("openssl", ["version"])
      ? undefined
      : "openssl is not installed (apt-get install -y openssl)");
}

/** One line the publisher printed: its level and message. */
export interface PublisherLine {
  level: string;
  message: string;
}

/** A publisher process whose log is kept. */
export interface RunningPublisher extends AsyncDisposable {
  /** Its process id. */
  readonly pid: number;
  /** Its log lines so far (stdout and stderr). */
  readonly log: PublisherLine[];
  /** SIGTERM, and waits for it. */
  stop(): Promise<Deno.CommandStatus>;
  /** SIGKILL, and waits for it. */
  kill9(): Promise<void>;
}

/** Reads a stream's lines into `log` until it ends. */
async function keepLines(stream: ReadableStream<Uint8Array>, log: PublisherLine[]): Promise<void> {
  let rest = "";
  for await (const text of stream.pipeThrough(new TextDecoderStream())) {
    const lines = (rest + text).split("\n");
    rest = lines.pop()!;
    for (const line of lines) {
      const m = /^\S+ (info|warn|error) (.*)$/.exec(line);
      log.push(m ? { level: m[1]!, message: m[2]! } : { level: "other", message: line });
    }
  }
}

/**
 * Starts `obs-utils telemetry publish` as `spawnPublisher()` does, its output kept in `log`.
 *
 * @param options The publisher's flags (the service on 127.0.0.1 unless `host` says otherwise).
 * @returns The running publisher.
 */
export function startPublisher(options: SpawnPublisherOptions): RunningPublisher {
  const child = spawnPublisher({ host: "127.0.0.1", ...options, output: "piped" });
  const log: PublisherLine[] = [];
  const reading = Promise.all([
    keepLines(child.process.stdout, log),
    keepLines(child.process.stderr, log),
  ]);
  const stop = async () => {
    const status = await child.stop();
    await reading;
    return status;
  };
  return {
    pid: child.pid,
    log,
    stop,
    async kill9() {
      try {
        child.process.kill("SIGKILL");
      } catch { /* gone */ }
      await stop();
    },
    async [Symbol.asyncDispose]() {
      await stop();
    },
  };
}

/** One message `mosquitto_sub` printed. */
export interface SubMessage {
  /** Whether it came as a retained message (one the broker held when the reader subscribed). */
  retained: boolean;
  topic: string;
  payload: string;
}

/** Connection flags of `mosquitto_sub` for a broker URL (credentials and TLS included). */
function subArgs(url: string, ca: string | undefined): string[] {
  const u = new URL(url);
  return [
    "-h",
    u.hostname,
    "-p",
    u.port,
    ...(u.username ? ["-u", decodeURIComponent(u.username)] : []),
    ...(u.password ? ["-P", decodeURIComponent(u.password)] : []),
    ...(u.protocol === "mqtts:" && ca !== undefined ? ["--cafile", ca] : []),
  ];
}

/**
 * A real `mosquitto_sub` subscribed to `filters`, every message it prints kept, until disposed.
 * `latest()` is what a reader would hold now: the last payload per topic, a removed (empty)
 * retained message gone.
 */
export class MqttReader implements AsyncDisposable {
  /** Every message, in order. */
  readonly messages: SubMessage[] = [];
  #child: Deno.ChildProcess;
  #reading: Promise<void>;

  /**
   * @param url The broker, `mqtt://[user:pass@]127.0.0.1:port` (or `mqtts://`).
   * @param filters The topic filters.
   * @param ca The CA file for `mqtts://`.
   */
  constructor(url: string, filters: string[] = ["#"], ca?: string) {
    this.#child = new Deno.Command("mosquitto_sub", {
      args: [
        ...subArgs(url, ca),
        "-q",
        "1",
        "-F",
        "%r\\t%t\\t%p",
        ...filters.flatMap((f) => ["-t", f]),
      ],
      stdin: "null",
      stdout: "piped",
      stderr: "null",
    }).spawn();
    this.#reading = this.#read();
  }

  async #read(): Promise<void> {
    let rest = "";
    for await (const text of this.#child.stdout.pipeThrough(new TextDecoderStream())) {
      const lines = (rest + text).split("\n");
      rest = lines.pop()!;
      for (const line of lines) {
        const [retained, topic, ...payload] = line.split("\t");
        this.messages.push({
          retained: retained === "1",
          topic: topic!,
          payload: payload.join("\t"),
        });
      }
    }
  }

  /** The last payload per topic (a topic whose retained message was removed left out). */
  latest(): Map<string, string> {
    const out = new Map<string, string>();
    for (const m of this.messages) {
      if (m.payload === "") out.delete(m.topic);
      else out.set(m.topic, m.payload);
    }
    return out;
  }

  /** The messages after the first `from`. */
  since(from: number): SubMessage[] {
    return this.messages.slice(from);
  }

  /**
   * Waits until a topic's latest payload passes `check`.
   *
   * @returns The payload.
   */
  async waitFor(
    topic: string,
    check: (payload: string) => boolean = () => true,
    ms = 15_000,
  ): Promise<string> {
    let found: string | undefined;
    await waitUntil(
      () => {
        found = this.latest().get(topic);
        return found !== undefined && check(found);
      },
      ms,
      `${topic} (latest: ${this.latest().get(topic)})`,
    );
    return found!;
  }

  async [Symbol.asyncDispose](): Promise<void> {
    try {
      this.#child.kill("SIGTERM");
    } catch { /* gone */ }
    await this.#child.status;
    await this.#reading;
  }
}

/**
 * What a broker retains now under `filters`, read by a new `mosquitto_sub` that leaves after the
 * retained messages (a second with nothing more).
 *
 * @param url The broker.
 * @param filters The topic filters.
 * @param ca The CA file for `mqtts://`.
 * @returns Topic -> payload.
 */
export async function retained(
  url: string,
  filters: string[] = ["#"],
  ca?: string,
): Promise<Map<string, string>> {
  const out = await new Deno.Command("mosquitto_sub", {
    args: [
      ...subArgs(url, ca),
      "-F",
      "%t\\t%p",
      "--retained-only",
      "-W",
      "1",
      ...filters.flatMap((f) => ["-t", f]),
    ],
    stdout: "piped",
    stderr: "null",
  }).output();
  const map = new Map<string, string>();
  for (const line of new TextDecoder().decode(out.stdout).split("\n")) {
    if (line === "") continue;
    const [topic, ...payload] = line.split("\t");
    map.set(topic!, payload.join("\t"));
  }
  return map;
}

/** A CA and a certificate it signed for 127.0.0.1 and localhost, as PEM files. */
export interface LocalCa {
  /** The CA's certificate: what `--ca` and `--cafile` trust. */
  ca: string;
  /** The broker's certificate. */
  cert: string;
  /** Its private key. */
  key: string;
}

async function openssl(args: string[]): Promise<void> {
  const out = await new Deno.Command("openssl", { args, stdout: "null", stderr: "piped" }).output();
  if (!out.success) {
    throw new Error(`openssl ${args[0]} failed: ${new TextDecoder().decode(out.stderr)}`);
  }
}

/**
 * Makes a local CA in `dir` with `openssl` and a broker certificate it signed (P-256, two days).
 *
 * @param dir Where the files go.
 * @returns Their paths.
 */
export async function localCa(dir: string): Promise<LocalCa> {
  const file = (name: string) => join(dir, name);
  const ec = ["-newkey", "ec", "-pkeyopt", "ec_paramgen_curve:prime256v1", "-nodes"];
  await openssl([
    "req",
    "-x509",
    ...ec,
    "-keyout",
    file("ca.key"),
    "-out",
    file("ca.pem"),
    "-days",
    "2",
    "-subj",
    "/CN=obs-telemetry test CA",
    "-addext",
    "basicConstraints=critical,CA:TRUE",
    "-addext",
    "keyUsage=critical,keyCertSign,cRLSign",
  ]);
  await openssl([
    "req",
    ...ec,
    "-keyout",
    file("broker.key"),
    "-out",
    file("broker.csr"),
    "-subj",
    "/CN=localhost",
  ]);
  await Deno.writeTextFile(
    file("broker.ext"),
    "subjectAltName=DNS:localhost,IP:127.0.0.1\nbasicConstraints=CA:FALSE\nextendedKeyUsage=serverAuth\n",
  );
  await openssl([
    "x509",
    "-req",
    "-in",
    file("broker.csr"),
    "-CA",
    file("ca.pem"),
    "-CAkey",
    file("ca.key"),
    "-CAcreateserial",
    "-out",
    file("broker.pem"),
    "-days",
    "2",
    "-extfile",
    file("broker.ext"),
  ]);
  // Started as root, mosquitto reads its certificate and key as the user mosquitto.
  await Deno.chmod(dir, 0o755);
  for (const name of ["broker.pem", "broker.key"]) await Deno.chmod(file(name), 0o644);
  return { ca: file("ca.pem"), cert: file("broker.pem"), key: file("broker.key") };
}

/**
 * A broker that accepts connections, reads what it is sent and never answers (no CONNACK): a
 * broker that hangs.
 */
export class SilentBroker implements AsyncDisposable {
  #listener: Deno.Listener;
  #conns = new Set<Deno.Conn>();
  #readers: Promise<void>[] = [];
  #serving: Promise<void>;
  /** Connections accepted so far. */
  accepted = 0;

  constructor() {
    this.#listener = Deno.listen({ hostname: "127.0.0.1", port: 0 });
    this.#serving = this.#serve();
  }

  /** `mqtt://127.0.0.1:<port>`. */
  get url(): string {
    return `mqtt://127.0.0.1:${(this.#listener.addr as Deno.NetAddr).port}`;
  }

  async #serve(): Promise<void> {
    try {
      for await (const conn of this.#listener) {
        this.accepted++;
        this.#conns.add(conn);
        // Read and drop: a broker that takes the bytes but says nothing.
        this.#readers.push((async () => {
          const buf = new Uint8Array(16 * 1024);
          try {
            while ((await conn.read(buf)) !== null) { /* dropped */ }
          } catch { /* closed */ }
          this.#conns.delete(conn);
          try {
            conn.close();
          } catch { /* closed */ }
        })());
      }
    } catch { /* listener closed */ }
  }

  async [Symbol.asyncDispose](): Promise<void> {
    this.#listener.close();
    for (const conn of this.#conns) {
      try {
        conn.close();
      } catch { /* closed */ }
    }
    await this.#serving;
    await Promise.all(this.#readers);
  }
}
