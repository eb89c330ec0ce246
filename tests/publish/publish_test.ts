/**
 * The publisher against a real `mosquitto` and a real service (docs/publish.md): the publisher
 * runs as its own process (`spawnPublisher()`), and what the broker holds is read back with
 * `mosquitto_sub`.
 *
 * @module
 */

import assert from "node:assert/strict";
import { join } from "node:path";
import type { ServerHandle } from "../../server.ts";
import { SiteTopics } from "../../publish.ts";
import { postJson, tempDir, testServer } from "../_shared/util.ts";
import { Mosquitto } from "../_shared/collect_push_util.ts";
import {
  localCa,
  MqttReader,
  publishMissing,
  retained,
  type RunningPublisher,
  SilentBroker,
  startPublisher,
  waitUntil,
} from "../_shared/publish_util.ts";

const missing = publishMissing();
if (missing) {
  // deno-lint-ignore no-console
  console.log(`publish_test.ts: skipping: ${missing}`);
}
const ignore = missing !== undefined;

/** A types file: weather (critical, stale after 60 s) with a number, a temperature and a flag. */
const TYPES = {
  weather: {
    critical: true,
    stale_after_s: 60,
    fields: {
      wind_mps: { label: "Wind", unit: "m/s", alarm_above: 15 },
      temp: { label: "Temperature", unit: "degC" },
      rain: { label: "Rain", alarm_if: true },
    },
  },
};

/** A service on a temp site directory with a types file, and its site's topics. */
interface Site extends AsyncDisposable {
  readonly dir: string;
  server: ServerHandle;
  readonly topics: SiteTopics;
  /** Starts the service again on the same port (after `server.shutdown()`). */
  restart(): Promise<void>;
}

async function site(types: object = TYPES): Promise<Site> {
  const tmp = await tempDir("obs-publish-test-");
  const typesFile = join(tmp.path, "types.json");
  await Deno.writeTextFile(typesFile, JSON.stringify(types));
  const siteDir = join(tmp.path, "site");
  let server = await testServer({ siteDir, typesFile });
  const port = server.addr.port;
  const { site_id } = JSON.parse(await Deno.readTextFile(join(siteDir, ".site.json")));
  const out: Site = {
    dir: tmp.path,
    server,
    topics: new SiteTopics("obs", site_id),
    async restart() {
      server = await testServer({ siteDir, typesFile, port });
      out.server = server;
    },
    async [Symbol.asyncDispose]() {
      await server.shutdown().catch(() => {});
      await tmp[Symbol.asyncDispose]();
    },
  };
  return out;
}

async function post(url: string, type: string, data: object): Promise<void> {
  const { status } = await postJson(`${url}/event`, { type, data });
  assert.equal(status, 200);
}

/** A broker, a service with a weather event, a publisher and a reader, disposed in turn. */
interface Running extends AsyncDisposable {
  readonly broker: Mosquitto;
  readonly s: Site;
  readonly publisher: RunningPublisher;
  readonly reader: MqttReader;
}

/** Starts the usual four: mosquitto, the service (one weather event), the publisher, a reader. */
async function publishing(): Promise<Running> {
  const broker = await Mosquitto.start();
  const s = await site();
  await post(s.server.url, "weather", { wind_mps: 3.2, temp: 11.5, rain: false });
  const publisher = startPublisher({ to: broker.url, port: s.server.addr.port });
  const reader = new MqttReader(broker.url);
  return {
    broker,
    s,
    publisher,
    reader,
    async [Symbol.asyncDispose]() {
      await reader[Symbol.asyncDispose]();
      await publisher[Symbol.asyncDispose]();
      await s[Symbol.asyncDispose]();
      await broker[Symbol.asyncDispose]();
    },
  };
}

Deno.test({
  name:
    "publish retains each type's state, its availability, the verdict, the status and a discovery config per registered field",
  ignore,
  async fn() {
    await using running = await publishing();
    const { broker, s, publisher, reader } = running;
    const state = JSON.parse(await reader.waitFor(s.topics.state("weather")));
    assert.deepEqual(state.data, { wind_mps: 3.2, temp: 11.5, rain: false });
    assert.equal(await reader.waitFor(s.topics.availability("weather")), "online");
    assert.equal(await reader.waitFor(s.topics.status), "online");
    const verdict = JSON.parse(await reader.waitFor(s.topics.safety("site")));
    assert.deepEqual(Object.keys(verdict), ["safe", "since", "reasons"]);
    assert.equal(verdict.safe, true);
    const id = s.topics.siteId;
    const wind = JSON.parse(
      await reader.waitFor(`homeassistant/sensor/${id}_weather_wind_mps/config`),
    );
    assert.deepEqual(wind, {
      name: "Wind",
      unique_id: `${id}_weather_wind_mps`,
      state_topic: s.topics.state("weather"),
      value_template: "{{ value_json.data.get('wind_mps') }}",
      unit_of_measurement: "m/s",
      device_class: "wind_speed",
      availability: [{ topic: s.topics.status }, { topic: s.topics.availability("weather") }],
      availability_mode: "all",
      device: {
        identifiers: [id],
        name: `obs-utils telemetry ${id.slice(0, 8)}`,
        manufacturer: "obs-utils",
        sw_version: JSON.parse(await Deno.readTextFile(new URL("../../deno.json", import.meta.url)))
          .version,
      },
    });
    const temp = JSON.parse(await reader.waitFor(`homeassistant/sensor/${id}_weather_temp/config`));
    assert.equal(temp.device_class, "temperature");
    assert.equal(temp.unit_of_measurement, "°C");
    const rain = JSON.parse(
      await reader.waitFor(`homeassistant/binary_sensor/${id}_weather_rain/config`),
    );
    assert.equal(rain.device_class, undefined);
    const safety = JSON.parse(
      await reader.waitFor(`homeassistant/binary_sensor/${id}/safety/config`),
    );
    assert.equal(safety.device_class, "safety");
    assert.equal(safety.state_topic, s.topics.safety("site"));
    // Everything is retained: a reader that comes later gets all of it at once.
    const kept = await retained(broker.url);
    for (const topic of reader.latest().keys()) assert.ok(kept.has(topic), topic);
    assert.deepEqual(publisher.log.filter((l) => l.level !== "info"), []);
  },
});

/** Every topic a reader holds now, for comparing what is sent again. */
function topicsOf(reader: MqttReader): string[] {
  return [...reader.latest().keys()].sort();
}

/** Waits until the reader holds the state, availability, status, verdict and the 4 configs. */
async function complete(reader: MqttReader, s: Site): Promise<void> {
  await reader.waitFor(s.topics.state("weather"));
  await reader.waitFor(s.topics.status, (p) => p === "online");
  await reader.waitFor(s.topics.safety("site"), (p) => JSON.parse(p).safe === true);
  await waitUntil(
    () => topicsOf(reader).filter((t) => t.startsWith("homeassistant/")).length === 4,
    15_000,
    "the four discovery configs",
  );
}

Deno.test({
  name: "publish sends every topic again when it starts again after a stop",
  ignore,
  async fn() {
    await using broker = await Mosquitto.start();
    await using s = await site();
    await post(s.server.url, "weather", { wind_mps: 3.2, temp: 11.5, rain: false });
    await using reader = new MqttReader(broker.url);
    {
      await using _first = startPublisher({ to: broker.url, port: s.server.addr.port });
      await complete(reader, s);
    }
    const before = topicsOf(reader);
    const mark = reader.messages.length;
    await using _second = startPublisher({ to: broker.url, port: s.server.addr.port });
    await waitUntil(
      () => before.every((t) => reader.since(mark).some((m) => m.topic === t)),
      15_000,
      "every topic sent again",
    );
    assert.equal(await reader.waitFor(s.topics.status, (p) => p === "online"), "online");
  },
});

Deno.test({
  name: "publish sends every topic again to a broker that restarted and kept nothing",
  ignore,
  async fn() {
    await using broker = await Mosquitto.start();
    await using s = await site();
    await post(s.server.url, "weather", { wind_mps: 3.2, temp: 11.5, rain: false });
    await using publisher = startPublisher({ to: broker.url, port: s.server.addr.port });
    let before: string[];
    {
      await using reader = new MqttReader(broker.url);
      await complete(reader, s);
      before = topicsOf(reader);
    }
    await broker.kill();
    await broker.restart();
    // A reader of the new broker (which kept nothing: persistence false) gets them all again.
    await using reader = new MqttReader(broker.url);
    await waitUntil(
      () => before.every((t) => reader.latest().has(t)),
      20_000,
      "every topic on the restarted broker",
    );
    assert.deepEqual(topicsOf(reader), before);
    assert.deepEqual([...(await retained(broker.url)).keys()].sort(), before);
    // The outage is two lines: down once, up once (not one per try).
    await waitUntil(
      () =>
        publisher.log.filter((l) => l.message.startsWith("connected to the broker")).length === 2,
      5_000,
      "the reconnection logged",
    );
    assert.equal(publisher.log.filter((l) => l.message.startsWith("cannot publish")).length, 1);
  },
});

Deno.test({
  name: "publish sends every topic again when the service comes back after a restart",
  ignore,
  async fn() {
    await using running = await publishing();
    const { s, reader } = running;
    await complete(reader, s);
    const before = topicsOf(reader);
    await s.server.shutdown();
    await reader.waitFor(s.topics.status, (p) => p === "offline");
    const mark = reader.messages.length;
    await s.restart();
    await waitUntil(
      () => before.every((t) => reader.since(mark).some((m) => m.topic === t)),
      30_000,
      "every topic sent again after the service's restart",
    );
    assert.equal(await reader.waitFor(s.topics.status, (p) => p === "online"), "online");
    assert.equal(
      JSON.parse(await reader.waitFor(s.topics.safety("site"), (p) => JSON.parse(p).safe)).safe,
      true,
    );
  },
});

Deno.test({
  name:
    "publish publishes the status offline and the verdict unsafe while the service does not answer",
  ignore,
  async fn() {
    await using running = await publishing();
    const { s, publisher, reader } = running;
    await complete(reader, s);
    await s.server.shutdown();
    await reader.waitFor(s.topics.status, (p) => p === "offline");
    const verdict = JSON.parse(
      await reader.waitFor(s.topics.safety("site"), (p) => JSON.parse(p).safe === false),
    );
    assert.deepEqual(verdict.reasons, [
      "the telemetry service does not answer: the verdict is unknown",
    ]);
    assert.equal(
      publisher.log.filter((l) => l.message.startsWith("the service does not answer")).length,
      1,
    );
  },
});

Deno.test({
  name: "publish turns a type's availability offline once it is stale, with no new event",
  ignore,
  async fn() {
    await using broker = await Mosquitto.start();
    await using s = await site({ weather: { stale_after_s: 2, fields: {} } });
    const ts = new Date().toISOString();
    await postJson(`${s.server.url}/event`, { type: "weather", data: { wind_mps: 1 }, ts });
    await using _publisher = startPublisher({ to: broker.url, port: s.server.addr.port });
    await using reader = new MqttReader(broker.url);
    await reader.waitFor(s.topics.availability("weather"), (p) => p === "online");
    // Nothing is posted from here on: only time passes.
    await reader.waitFor(s.topics.availability("weather"), (p) => p === "offline", 15_000);
    assert.ok(Date.now() > Date.parse(ts) + 2000, "offline only once older than stale_after_s");
    const states = reader.messages.filter((m) => m.topic === s.topics.state("weather"));
    assert.equal(new Set(states.map((m) => m.payload)).size, 1, "no new event");
  },
});

Deno.test({
  name:
    "the broker publishes the publisher's last will, the status offline, once the publisher is killed with SIGKILL",
  ignore,
  async fn() {
    await using broker = await Mosquitto.start();
    await using s = await site();
    await using publisher = startPublisher({ to: broker.url, port: s.server.addr.port });
    await using reader = new MqttReader(broker.url, [s.topics.status]);
    await reader.waitFor(s.topics.status, (p) => p === "online");
    await publisher.kill9();
    await reader.waitFor(s.topics.status, (p) => p === "offline");
    assert.equal((await retained(broker.url, [s.topics.status])).get(s.topics.status), "offline");
  },
});

Deno.test({
  name: "publish, stopped with SIGTERM, leaves the verdict unsafe and the status offline",
  ignore,
  async fn() {
    await using broker = await Mosquitto.start();
    await using s = await site();
    await post(s.server.url, "weather", { wind_mps: 3.2, temp: 11.5, rain: false });
    const publisher = startPublisher({ to: broker.url, port: s.server.addr.port });
    await using reader = new MqttReader(broker.url);
    await complete(reader, s);
    assert.equal((await publisher.stop()).code, 0);
    const kept = await retained(broker.url);
    assert.equal(kept.get(s.topics.status), "offline");
    assert.deepEqual(JSON.parse(kept.get(s.topics.safety("site"))!).reasons, [
      "the publisher stopped: the verdict is unknown",
    ]);
  },
});

Deno.test({
  name: "publish removes a forgotten type's retained state and turns it offline",
  ignore,
  async fn() {
    await using running = await publishing();
    const { broker, s, reader } = running;
    await reader.waitFor(s.topics.availability("weather"), (p) => p === "online");
    const res = await fetch(`${s.server.url}/current/weather`, { method: "DELETE" });
    assert.equal(res.status, 204);
    await reader.waitFor(s.topics.availability("weather"), (p) => p === "offline");
    await waitUntil(() => !reader.latest().has(s.topics.state("weather")), 10_000, "removal");
    assert.equal((await retained(broker.url)).has(s.topics.state("weather")), false);
  },
});

Deno.test({
  name: "publish --no-discovery retains the state but no Home Assistant config",
  ignore,
  async fn() {
    await using broker = await Mosquitto.start();
    await using s = await site();
    await post(s.server.url, "weather", { wind_mps: 3.2, temp: 11.5, rain: false });
    await using _publisher = startPublisher({
      to: broker.url,
      port: s.server.addr.port,
      discovery: false,
    });
    await using reader = new MqttReader(broker.url);
    await reader.waitFor(s.topics.status, (p) => p === "online");
    await reader.waitFor(s.topics.safety("site"));
    const kept = await retained(broker.url);
    assert.ok(kept.has(s.topics.state("weather")));
    assert.deepEqual([...kept.keys()].filter((t) => t.startsWith("homeassistant/")), []);
  },
});

/** The broker's log (mosquitto writes it to stderr, kept in its directory). */
async function brokerLog(broker: Mosquitto): Promise<string> {
  return await Deno.readTextFile(join(broker.dir, "stderr.log")).catch(() => "");
}

Deno.test({
  name: "publish connects with the user name and password of --to",
  ignore,
  async fn() {
    await using broker = await Mosquitto.start({ users: { ha: "s3cret pass" } });
    await using s = await site();
    const auth = broker.url.replace("mqtt://", "mqtt://ha:s3cret%20pass@");
    await using _publisher = startPublisher({ to: auth, port: s.server.addr.port });
    await using reader = new MqttReader(auth, [s.topics.status]);
    assert.equal(await reader.waitFor(s.topics.status, (p) => p === "online"), "online");
  },
});

Deno.test({
  name:
    "publish with a wrong password logs one clear error that names --to, however often it tries again",
  ignore,
  async fn() {
    await using broker = await Mosquitto.start({ users: { ha: "right" } });
    await using s = await site();
    const wrong = broker.url.replace("mqtt://", "mqtt://ha:wrong@");
    await using publisher = startPublisher({ to: wrong, port: s.server.addr.port });
    // Three refusals at the broker: the publisher tried three times (with back-off).
    await waitUntil(
      async () => (await brokerLog(broker)).split("not authorised").length - 1 >= 3,
      20_000,
      "three refused connections",
    );
    const errors = publisher.log.filter((l) => l.level === "error");
    assert.equal(errors.length, 1, JSON.stringify(publisher.log));
    assert.match(
      errors[0]!.message,
      /refused the user name or password .*in --to \(or OBS_TELEMETRY_PUBLISH\) as mqtt:\/\/USER:PASSWORD@/,
    );
    assert.ok(!errors[0]!.message.includes("wrong"), "the password is not printed");
    const right = broker.url.replace("mqtt://", "mqtt://ha:right@");
    assert.equal((await retained(right)).size, 0);
  },
});

Deno.test({
  name: "publish over mqtts:// trusts the broker's certificate signed by the CA of --ca",
  ignore,
  async fn() {
    await using dir = await tempDir("obs-publish-ca-");
    const tls = await localCa(dir.path);
    await using broker = await Mosquitto.start({ tls });
    assert.match(broker.url, /^mqtts:/);
    await using s = await site();
    await post(s.server.url, "weather", { wind_mps: 3.2, temp: 11.5, rain: false });
    await using _publisher = startPublisher({
      to: broker.url,
      ca: tls.ca,
      port: s.server.addr.port,
    });
    await using reader = new MqttReader(broker.url, ["#"], tls.ca);
    assert.equal(await reader.waitFor(s.topics.status, (p) => p === "online"), "online");
    assert.ok(await reader.waitFor(s.topics.state("weather")));
  },
});

Deno.test({
  name: "publish over mqtts:// without the broker's CA logs one error that names --ca",
  ignore,
  async fn() {
    await using dir = await tempDir("obs-publish-ca-");
    const tls = await localCa(dir.path);
    await using broker = await Mosquitto.start({ tls });
    await using s = await site();
    await using publisher = startPublisher({ to: broker.url, port: s.server.addr.port });
    await waitUntil(
      () => publisher.log.some((l) => l.level === "error"),
      20_000,
      "the TLS error",
    );
    const errors = publisher.log.filter((l) => l.level === "error");
    assert.equal(errors.length, 1);
    assert.match(
      errors[0]!.message,
      /TLS connection to mqtts:\/\/127\.0\.0\.1:\d+ failed .*--ca FILE/,
    );
  },
});

/** Types and fields with every character a topic or an id cannot hold as it is. */
const HOSTILE = {
  "roof/north": {
    stale_after_s: 600,
    fields: { "wind/gust": { unit: "m/s" }, "#": { label: "Hash" }, "a+b": {} },
  },
  "sky quality #1": { fields: { "mag arcsec²": { unit: "mag/arcsec^2" } } },
  "température ☁": { fields: { "valeur": {}, "it's {x}": {} } },
  "+": { fields: { "x": {} } },
  "100%": { fields: { "a.b": {} } },
  "a_b": { fields: { "c": {} } },
  "a": { fields: { "b_c": {} } },
};

Deno.test({
  name: "publish turns hostile type and field names into valid topics and distinct unique ids",
  ignore,
  async fn() {
    await using broker = await Mosquitto.start();
    await using s = await site(HOSTILE);
    const data: Record<string, object> = {
      "roof/north": { "wind/gust": 7.5, "#": 1, "a+b": true },
      "sky quality #1": { "mag arcsec²": 21.3 },
      "température ☁": { "valeur": 4, "it's {x}": "y" },
      "+": { "x": 1 },
      "100%": { "a": { "b": 2 } },
      "a_b": { "c": 1 },
      "a": { "b_c": 2 },
    };
    for (const [type, d] of Object.entries(data)) await post(s.server.url, type, d);
    await using _publisher = startPublisher({ to: broker.url, port: s.server.addr.port });
    await using reader = new MqttReader(broker.url);
    const configs = () => topicsOf(reader).filter((t) => t.startsWith("homeassistant/"));
    // 10 fields and the verdict.
    await waitUntil(() => configs().length === 11, 15_000, "eleven configs");
    for (const type of Object.keys(HOSTILE)) {
      const topic = s.topics.state(type);
      // One level per type: `/`, `+` and `#` never make a level or a wildcard of their own.
      assert.equal(topic.split("/").length, 4, topic);
      assert.doesNotMatch(topic.split("/")[3]!, /[+#]/);
      assert.equal(JSON.parse(await reader.waitFor(topic)).type, type);
      assert.equal(await reader.waitFor(s.topics.availability(type)), "online");
    }
    const ids = new Set<string>();
    for (const topic of configs()) {
      const m =
        /^homeassistant\/(sensor|binary_sensor)\/(?:([A-Za-z0-9_-]+)\/)?([A-Za-z0-9_-]+)\/config$/
          .exec(topic);
      assert.ok(m, `${topic} is a discovery topic Home Assistant accepts`);
      const config = JSON.parse(reader.latest().get(topic)!);
      assert.match(config.unique_id, /^[A-Za-z0-9_-]+$/);
      assert.ok(!ids.has(config.unique_id), `${config.unique_id} is unique`);
      ids.add(config.unique_id);
      // Each config reads the topic its type is published on.
      assert.ok(reader.latest().has(config.state_topic), config.state_topic);
    }
    assert.equal(ids.size, 11);
  },
});

/** Whether python3 with jinja2 (the template engine of Home Assistant) is here. */
function jinjaMissing(): string | undefined {
  try {
    const out = new Deno.Command("python3", {
      args: ["-c", "import jinja2"],
      stdout: "null",
      stderr: "null",
    }).outputSync();
    return out.success ? undefined : "python3 has no jinja2 (apt-get install -y python3-jinja2)";
  } catch {
    return "python3 is not installed";
  }
}

/** Renders templates with jinja2 as Home Assistant does, each with `value_json` its payload. */
async function renderAll(items: { template: string; payload: string }[]): Promise<string[]> {
  const script = `
import json, sys, jinja2
env = jinja2.Environment(extensions=["jinja2.ext.loopcontrols"])
out = []
for item in json.load(sys.stdin):
    out.append(env.from_string(item["template"]).render(value_json=json.loads(item["payload"])))
print(json.dumps(out))
`;
  const child = new Deno.Command("python3", {
    args: ["-c", script],
    stdin: "piped",
    stdout: "piped",
    stderr: "piped",
  }).spawn();
  const writer = child.stdin.getWriter();
  await writer.write(new TextEncoder().encode(JSON.stringify(items)));
  await writer.close();
  const out = await child.output();
  assert.ok(out.success, new TextDecoder().decode(out.stderr));
  return JSON.parse(new TextDecoder().decode(out.stdout));
}

const noJinja = jinjaMissing();
if (noJinja) {
  // deno-lint-ignore no-console
  console.log(`publish_test.ts: skipping the value_template test: ${noJinja}`);
}

Deno.test({
  name:
    "each config's value_template reads its field from the retained state as Home Assistant's Jinja renders it",
  ignore: ignore || noJinja !== undefined,
  async fn() {
    await using broker = await Mosquitto.start();
    await using s = await site(HOSTILE);
    await post(s.server.url, "roof/north", { "wind/gust": 7.5, "#": 1, "a+b": true });
    await post(s.server.url, "température ☁", { "valeur": 4, "it's {x}": "y" });
    // A dotted field reads the nested path, as the service reads a field (docs/types.md).
    await post(s.server.url, "100%", { "a": { "b": 2 } });
    await using _publisher = startPublisher({ to: broker.url, port: s.server.addr.port });
    await using reader = new MqttReader(broker.url);
    await waitUntil(
      () => topicsOf(reader).filter((t) => t.startsWith("homeassistant/")).length === 11,
      15_000,
      "eleven configs",
    );
    await reader.waitFor(s.topics.state("100%"));
    const expected: Record<string, string> = {
      "Hash": "1",
      "wind/gust": "7.5",
      "a+b": "ON",
      "valeur": "4",
      "it's {x}": "y",
      "a.b": "2",
    };
    const items = [];
    for (const topic of topicsOf(reader).filter((t) => t.startsWith("homeassistant/"))) {
      const config = JSON.parse(reader.latest().get(topic)!);
      if (!(config.name in expected)) continue;
      items.push({
        name: config.name as string,
        template: config.value_template as string,
        payload: reader.latest().get(config.state_topic)!,
      });
    }
    assert.equal(items.length, Object.keys(expected).length);
    const rendered = await renderAll(items);
    assert.deepEqual(
      Object.fromEntries(items.map((item, i) => [item.name, rendered[i]])),
      expected,
    );
    // A safety verdict renders ON (unsafe) unless it says safe.
    const safety = JSON.parse(
      reader.latest().get(`homeassistant/binary_sensor/${s.topics.siteId}/safety/config`)!,
    );
    assert.deepEqual(
      await renderAll([
        { template: safety.value_template, payload: '{"safe": true}' },
        { template: safety.value_template, payload: '{"safe": false}' },
        { template: safety.value_template, payload: "{}" },
      ]),
      ["OFF", "ON", "ON"],
    );
  },
});

/** A gauge or counter of `GET /metrics` (without labels). */
async function metric(url: string, name: string): Promise<number> {
  const text = await (await fetch(`${url}/metrics`)).text();
  return Number(new RegExp(`^${name} (\\S+)$`, "m").exec(text)?.[1]);
}

Deno.test({
  name:
    "the service keeps the publisher's stream and answers every POST /event while the broker accepts and never answers",
  ignore,
  async fn() {
    await using broker = new SilentBroker();
    await using s = await site();
    await using publisher = startPublisher({ to: broker.url, port: s.server.addr.port });
    await waitUntil(
      () => publisher.log.some((l) => l.message.startsWith("following the service")),
      15_000,
      "the publisher following the service",
    );
    await waitUntil(() => broker.accepted > 0, 15_000, "a connection to the silent broker");
    // 24 MiB of events that do not compress, far more than /stream lets a client fall behind
    // (1 MiB) plus what the sockets between them hold: a publisher that waited for the broker
    // would stop reading and be dropped.
    const random = () => {
      const bytes = crypto.getRandomValues(new Uint8Array(1500));
      return btoa(String.fromCharCode(...bytes));
    };
    for (let batch = 0; batch < 40; batch++) {
      const lines = Array.from(
        { length: 300 },
        (_, i) => JSON.stringify({ type: "weather", data: { wind_mps: i % 10, filler: random() } }),
      );
      const res = await fetch(`${s.server.url}/events`, {
        method: "POST",
        headers: { "content-type": "application/x-ndjson" },
        body: lines.join("\n"),
      });
      assert.equal(res.status, 200, await res.text());
    }
    assert.equal(await metric(s.server.url, "telemetry_stream_dropped_total"), 0);
    assert.equal(await metric(s.server.url, "telemetry_stream_clients"), 1);
    assert.ok(publisher.log.every((l) => !l.message.startsWith("the service does not answer")));
  },
});

Deno.test({
  name:
    "publish retains one verdict per safety profile, each following its own types, and a discovery config for each",
  ignore,
  async fn() {
    await using broker = await Mosquitto.start();
    await using s = await site({
      ...TYPES,
      weather: { ...TYPES.weather, critical_for: ["north", "south"] },
      north_roof: { critical_for: ["north"], fields: { fault: { alarm_if: true } } },
      south_roof: { critical_for: ["south"], fields: { fault: { alarm_if: true } } },
    });
    const url = s.server.url;
    await post(url, "weather", { wind_mps: 3.2, temp: 11.5, rain: false });
    await post(url, "north_roof", { fault: false });
    await post(url, "south_roof", { fault: true });
    await using publisher = startPublisher({ to: broker.url, port: s.server.addr.port });
    await using reader = new MqttReader(broker.url);
    const safeOf = async (profile: string) =>
      JSON.parse(await reader.waitFor(s.topics.safety(profile))).safe;
    assert.equal(await safeOf("site"), true);
    assert.equal(await safeOf("north"), true);
    assert.equal(await safeOf("south"), false);
    const id = s.topics.siteId;
    const south = JSON.parse(
      await reader.waitFor(`homeassistant/binary_sensor/${id}/safety_south/config`),
    );
    assert.equal(south.state_topic, s.topics.safety("south"));
    // A change of one profile's verdict reaches its topic, and only its.
    await post(url, "south_roof", { fault: false });
    await reader.waitFor(s.topics.safety("south"), (p) => JSON.parse(p).safe === true);
    assert.equal(await safeOf("north"), true);
    assert.deepEqual(publisher.log.filter((l) => l.level !== "info"), []);
  },
});
