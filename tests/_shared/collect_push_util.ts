/**
 * Fixtures for the push and Alpaca input tests: a sink that keeps what an input delivers, a
 * `ConfigAt` that throws the config error, an input listening until disposed, and real
 * `mosquitto` and `indiserver` processes on free loopback ports in temp directories.
 * When a binary is missing the test skips with the reason these helpers give.
 * @module
 */

import { join } from "node:path";
import type {
  ConfigAt,
  FieldReading,
  Input,
  InputCommon,
  InputKind,
  InputSink,
  RecordReading,
} from "../../collect/inputs/input.ts";
import { waitUntil } from "./fleet_util.ts";
import { ServerProcess } from "./server_process.ts";

export { waitUntil };

/** A sink that keeps every reading and warning, and counts connections (`up`). */
export class SinkLog implements InputSink {
  readonly records: RecordReading[] = [];
  readonly fields: FieldReading[] = [];
  readonly warnings: { key: string; message: string }[] = [];
  ups = 0;

  record(reading: RecordReading): void {
    this.records.push(reading);
  }

  field(reading: FieldReading): void {
    this.fields.push(reading);
  }

  warn(key: string, message: string): void {
    this.warnings.push({ key, message });
  }

  /** The latest value of `field` of `type`, as the collector's merge would keep it. */
  latest(type: string, field: string): FieldReading | undefined {
    return this.fields.findLast((f) => f.type === type && f.field === field);
  }
}

/** A `ConfigAt` whose `fail` throws `inputs[0].<key>: <problem> (<fix>)`. */
export function configAt(path = "inputs[0]"): ConfigAt {
  return {
    path,
    fail(key: string, problem: string, fix: string): never {
      throw new Error(`${path}${key ? `.${key}` : ""}: ${problem} (${fix})`);
    },
    child(key: string): ConfigAt {
      return configAt(`${path}.${key}`);
    },
  };
}

/** Parses `raw` with `kind` and creates the input, as the collector does. */
export function build<C>(
  kind: InputKind<C>,
  raw: Record<string, unknown>,
  common: Partial<InputCommon> = {},
): { config: C; input: Input } {
  const config = kind.parse(raw, configAt());
  return { config, input: kind.create(config, { name: "test", ...common }) };
}

/**
 * Runs `listen` again after each rejection (50 ms apart, as a collector with a short back-off)
 * until disposed; keeps the rejections.
 */
export class Listening implements AsyncDisposable {
  readonly errors: Error[] = [];
  #abort = new AbortController();
  #loop: Promise<void>;

  constructor(input: Input, sink: SinkLog) {
    this.#loop = (async () => {
      while (!this.#abort.signal.aborted) {
        try {
          await input.listen!(sink, this.#abort.signal, () => sink.ups++);
        } catch (err) {
          this.errors.push(err as Error);
          await new Promise((r) => setTimeout(r, 50));
        }
      }
    })();
  }

  async [Symbol.asyncDispose](): Promise<void> {
    this.#abort.abort();
    await this.#loop;
  }
}

/** Whether `cmd args` runs here (it is installed and starts), whatever its exit code. */
export function runs(cmd: string, args: string[]): boolean {
  try {
    new Deno.Command(cmd, { args, stdout: "null", stderr: "null" }).outputSync();
    return true;
  } catch {
    return false;
  }
}

const MOSQUITTO = ["/usr/sbin/mosquitto", "mosquitto"].find((c) => runs(c, ["-h"]));

/** Why `mosquitto` cannot run here, or `undefined` when it can. */
export function mosquittoMissing(): string | undefined {
  return MOSQUITTO ? undefined : "mosquitto is not installed (apt-get install -y mosquitto)";
}

/** Why `indiserver` with the weather simulator cannot run here, or `undefined`. */
export function indiMissing(): string | undefined {
  return runs("indiserver", ["--help"]) && runs("indi_simulator_weather", ["--help"])
    ? undefined
    : "indiserver or indi_simulator_weather is not installed (apt-get install -y indi-bin)";
}

/** Options of {@linkcode Mosquitto.start}. */
export interface MosquittoOptions {
  /** Users and their passwords: a password file (`mosquitto_passwd`), and no anonymous client. */
  users?: Record<string, string>;
  /** A certificate and its key (PEM files): the listener speaks TLS (`mqtts://`). */
  tls?: { cert: string; key: string };
}

/**
 * A real `mosquitto` on 127.0.0.1 with its config file in a temp directory: anonymous, or with a
 * password file, over TCP or TLS. It keeps nothing across a restart (`persistence false`).
 */
export class Mosquitto extends ServerProcess {
  readonly #tls: boolean;

  private constructor(
    dir: string,
    tls: boolean,
    command: (port: number, dir: string) => [string, string[]],
  ) {
    super("mosquitto", dir, command);
    this.#tls = tls;
  }

  /** Starts a broker on a free port. */
  static async start(options: MosquittoOptions = {}): Promise<Mosquitto> {
    const dir = await Deno.makeTempDir({ prefix: "obs-mosquitto-" });
    const lines = ["persistence false"];
    if (options.users === undefined) lines.push("allow_anonymous true");
    else {
      const file = join(dir, "passwd");
      let first = true;
      for (const [user, password] of Object.entries(options.users)) {
        const made = new Deno.Command("mosquitto_passwd", {
          args: ["-b", ...(first ? ["-c"] : []), file, user, password],
          stdout: "null",
          stderr: "piped",
        }).outputSync();
        if (!made.success) {
          throw new Error(`mosquitto_passwd failed: ${new TextDecoder().decode(made.stderr)}`);
        }
        first = false;
      }
      // Started as root, mosquitto reads its files as the user mosquitto.
      await Deno.chmod(dir, 0o755);
      await Deno.chmod(file, 0o644);
      lines.push("allow_anonymous false", `password_file ${file}`);
    }
    if (options.tls !== undefined) {
      lines.push(`certfile ${options.tls.cert}`, `keyfile ${options.tls.key}`);
    }
    const broker = new Mosquitto(dir, options.tls !== undefined, (port, dir) => {
      const conf = join(dir, "mosquitto.conf");
      Deno.writeTextFileSync(conf, [`listener ${port} 127.0.0.1`, ...lines, ""].join("\n"));
      return [MOSQUITTO!, ["-c", conf]];
    });
    await broker.firstStart();
    return broker;
  }

  /** `mqtt://127.0.0.1:<port>`, or `mqtts://` for a TLS listener. */
  get url(): string {
    return `${this.#tls ? "mqtts" : "mqtt"}://127.0.0.1:${this.port}`;
  }
}

/**
 * A real `indiserver` running the given drivers on 127.0.0.1. Its local socket (abstract, named
 * `/tmp/indiserver` unless `-u` says otherwise) is named after its temp dir: a second indiserver
 * with the default name on this machine would exit at once.
 */
export class IndiServer extends ServerProcess {
  /** Starts `indiserver -p PORT -u DIR/indiserver.sock <drivers>` on a free port. */
  static async start(drivers = ["indi_simulator_weather"]): Promise<IndiServer> {
    const dir = await Deno.makeTempDir({ prefix: "obs-indi-" });
    const server = new IndiServer("indiserver", dir, (port, dir) => [
      "indiserver",
      ["-p", String(port), "-u", join(dir, "indiserver.sock"), "-r", "0", ...drivers],
    ]);
    await server.firstStart();
    return server;
  }
}
