/**
 * The ASCOM Alpaca devices (docs/safety.md, "ASCOM Alpaca (N.I.N.A.)"): every member of
 * safetymonitor/0 and observingconditions/0 over a real listener, each answer checked against
 * the official Alpaca OpenAPI document (tests/fixtures/alpaca/), the unit conversions against
 * independent values, the errors, the parameters, and hostile input.
 */

import assert from "node:assert/strict";
import { join } from "node:path";
import { CLI, freePort, postJson, rawHttp, tempDir, testServer } from "../_shared/util.ts";
import { AlpacaApi } from "../_shared/alpaca_openapi.ts";
import { alpacaServer } from "../_shared/alpaca_util.ts";
import { permissionFlags, type ServerHandle, spawnServer, VERSION } from "../../server.ts";
import { alpacaConverter } from "../../core/units.ts";
import { createAlpacaHandler } from "../../alpaca/listener.ts";
import { parseTypes, TypesFileError } from "../../core/types_registry.ts";

const api = await AlpacaApi.load();

/** A types file whose weather fields are recorded in units other than Alpaca's. */
const TYPES = {
  weather: {
    description: "Dome weather station",
    critical: true,
    stale_after_s: 300,
    fields: {
      temp_f: { unit: "°F", alpaca: "temperature", label: "Air temperature", alarm_above: 120 },
      dew_k: { unit: "K", alpaca: "dewpoint" },
      wind_kmh: { unit: "km/h", alpaca: "windspeed" },
      gust_mph: { unit: "mph", alpaca: "windgust" },
      "baro.inhg": { unit: "inHg", alpaca: "pressure" },
      rain_inh: { unit: "in/h", alpaca: "rainrate" },
      humidity: { unit: "%", alpaca: "humidity" },
      "sky.temp_c": { unit: "°C", alpaca: "skytemperature" },
      wind_dir: { unit: "deg", alpaca: "winddirection" },
    },
  },
  sqm: { fields: { mpsas: { unit: "mag/arcsec^2", alpaca: "skyquality" } } },
};

/** The values posted, and what Alpaca must answer for them (computed by hand, not by the code). */
const WEATHER = {
  temp_f: 68, // 20 °C
  dew_k: 283.15, // 10 °C
  wind_kmh: 36, // 10 m/s
  gust_mph: 10, // 4.4704 m/s (1 mph = 0.44704 m/s exactly)
  baro: { inhg: 29.92 }, // 1013.2076 hPa (1 inHg = 3386.389 Pa, NIST SP 811)
  rain_inh: 0.5, // 12.7 mm/h
  humidity: 55,
  sky: { temp_c: -18.5 },
  wind_dir: 270,
};
const EXPECTED: Record<string, number> = {
  temperature: 20,
  dewpoint: 10,
  windspeed: 10,
  windgust: 4.4704,
  pressure: 1013.2076,
  rainrate: 12.7,
  humidity: 55,
  skytemperature: -18.5,
  winddirection: 270,
  skyquality: 21.3,
};
const UNMAPPED = ["cloudcover", "skybrightness", "starfwhm"];

/** GETs a member and checks the answer against the document. */
async function get(base: string, path: string): Promise<Record<string, unknown>> {
  const url = `${base}${path}`;
  return await api.check("GET", url, await fetch(url)) as Record<string, unknown>;
}

/** PUTs a form and checks the answer against the document. */
async function put(base: string, path: string, form = ""): Promise<Record<string, unknown>> {
  const url = `${base}${path}`;
  const res = await fetch(url, {
    method: "PUT",
    headers: { "content-type": "application/x-www-form-urlencoded" },
    body: form,
  });
  return await api.check("PUT", url, res) as Record<string, unknown>;
}

function ok(body: Record<string, unknown>, value?: unknown): void {
  assert.equal(body.ErrorNumber, 0, String(body.ErrorMessage));
  assert.equal(body.ErrorMessage, "");
  if (arguments.length > 1) assert.deepEqual(body.Value, value);
}

async function postWeather(server: ServerHandle, data: unknown = WEATHER): Promise<void> {
  const res = await postJson(`${server.url}/event`, { type: "weather", data });
  assert.equal(res.status, 200, JSON.stringify(res.body));
}

Deno.test("every common member of both devices answers as the Alpaca document says", async () => {
  await using site = await tempDir();
  await using alpaca = await alpacaServer(site.path, TYPES);
  for (const device of ["safetymonitor", "observingconditions"]) {
    const at = `/api/v1/${device}/0`;
    ok(await get(alpaca.base, `${at}/connected?ClientID=1&ClientTransactionID=1`), true);
    ok(await get(alpaca.base, `${at}/connecting`), false);
    ok(await get(alpaca.base, `${at}/driverversion`), VERSION);
    ok(await get(alpaca.base, `${at}/interfaceversion`), device === "safetymonitor" ? 3 : 2);
    ok(
      await get(alpaca.base, `${at}/supportedactions`),
      device === "safetymonitor"
        ? ["SafetyEvents", "SetExternalEvents", "ClearExternalEvents"]
        : [],
    );
    for (const member of ["description", "driverinfo", "name"]) {
      const body = await get(alpaca.base, `${at}/${member}`);
      ok(body);
      assert.ok(typeof body.Value === "string" && body.Value.length > 0, member);
    }
    ok(await get(alpaca.base, `${at}/devicestate`));
    ok(
      await put(alpaca.base, `${at}/connected`, "Connected=True&ClientID=1&ClientTransactionID=2"),
    );
    ok(await put(alpaca.base, `${at}/connected`, "Connected=false"));
    ok(await get(alpaca.base, `${at}/connected`), false);
    ok(await put(alpaca.base, `${at}/connect`));
    ok(await put(alpaca.base, `${at}/disconnect`));
    ok(await get(alpaca.base, `${at}/connected`), false);
    ok(await put(alpaca.base, `${at}/connect`));
    ok(await get(alpaca.base, `${at}/connected`), true);
    for (const member of ["action", "commandblind", "commandbool", "commandstring"]) {
      const body = await put(
        alpaca.base,
        `${at}/${member}`,
        "Action=x&Parameters=&Command=x&Raw=false",
      );
      // A safety monitor has actions, but none named x: ActionNotImplemented.
      const error = member === "action" && device === "safetymonitor" ? 0x40c : 0x400;
      assert.equal(body.ErrorNumber, error, member);
      assert.ok(!("Value" in body), member);
    }
  }
});

Deno.test("issafe is false until the critical weather is fresh, and false again in alarm", async () => {
  await using site = await tempDir();
  await using alpaca = await alpacaServer(site.path, TYPES);
  ok(await get(alpaca.base, "/api/v1/safetymonitor/0/issafe"), false);
  await postWeather(alpaca.server);
  ok(await get(alpaca.base, "/api/v1/safetymonitor/0/issafe"), true);
  ok(await get(alpaca.base, "/api/v1/safetymonitor/0/devicestate"), [{
    Name: "IsSafe",
    Value: true,
  }]);
  await postWeather(alpaca.server, { ...WEATHER, temp_f: 130 });
  ok(await get(alpaca.base, "/api/v1/safetymonitor/0/issafe"), false);
});

Deno.test("issafe is false when no critical type is registered", async () => {
  await using site = await tempDir();
  await using alpaca = await alpacaServer(site.path, { sqm: TYPES.sqm });
  ok(await get(alpaca.base, "/api/v1/safetymonitor/0/issafe"), false);
});

Deno.test("ObservingConditions answers each mapped field converted into Alpaca's unit", async () => {
  await using site = await tempDir();
  await using alpaca = await alpacaServer(site.path, TYPES);
  await postWeather(alpaca.server);
  assert.equal(
    (await postJson(`${alpaca.server.url}/event`, {
      type: "sqm",
      data: { mpsas: "21.3 mag/arcsec^2" },
    })).status,
    200,
  );
  for (const [property, expected] of Object.entries(EXPECTED)) {
    const body = await get(alpaca.base, `/api/v1/observingconditions/0/${property}`);
    ok(body);
    assert.ok(
      Math.abs((body.Value as number) - expected) < 1e-4,
      `${property}: ${body.Value} != ${expected}`,
    );
  }
  const state = await get(alpaca.base, "/api/v1/observingconditions/0/devicestate");
  ok(state);
  const names = (state.Value as { Name: string }[]).map((entry) => entry.Name);
  assert.deepEqual(names, [
    "DewPoint",
    "Humidity",
    "Pressure",
    "RainRate",
    "SkyQuality",
    "SkyTemperature",
    "Temperature",
    "WindDirection",
    "WindGust",
    "WindSpeed",
  ]);
});

Deno.test("the unit conversions agree with independent reference values", () => {
  const cases: [string, string, number, number][] = [
    ["temperature", "degF", 212, 100],
    ["temperature", "°F", -40, -40],
    ["temperature", "K", 0, -273.15],
    ["temperature", "°C", 7.5, 7.5],
    ["windspeed", "km/h", 90, 25],
    ["windspeed", "mph", 100, 44.704],
    ["windspeed", "kn", 1, 0.514444],
    ["windspeed", "m/s", 3, 3],
    ["pressure", "mbar", 1013.25, 1013.25],
    ["pressure", "inHg", 1, 33.86389],
    ["pressure", "Pa", 101325, 1013.25],
    ["pressure", "hPa", 990, 990],
    ["rainrate", "in/h", 1, 25.4],
    ["rainrate", "mm/h", 2, 2],
  ];
  for (const [property, unit, value, expected] of cases) {
    const convert = alpacaConverter(property as "temperature", unit);
    assert.ok(convert, `${unit} converts to ${property}`);
    assert.ok(Math.abs(convert(value) - expected) < 1e-5, `${value} ${unit}: ${convert(value)}`);
  }
});

Deno.test("ObservingConditions members without a value answer the documented errors", async () => {
  await using site = await tempDir();
  await using alpaca = await alpacaServer(site.path, TYPES);
  const at = "/api/v1/observingconditions/0";
  for (const property of UNMAPPED) {
    const body = await get(alpaca.base, `${at}/${property}`);
    assert.equal(body.ErrorNumber, 0x400);
    assert.match(String(body.ErrorMessage), new RegExp(`"alpaca": "${property}"`));
  }
  // Mapped, but no event yet: InvalidOperation, "not ready"; never updated: -1.
  assert.equal((await get(alpaca.base, `${at}/temperature`)).ErrorNumber, 0x40b);
  ok(await get(alpaca.base, `${at}/timesincelastupdate?SensorName=Temperature`), -1);
  assert.equal(
    (await get(alpaca.base, `${at}/sensordescription?SensorName=CloudCover`)).ErrorNumber,
    0x400,
  );
  assert.equal(
    (await get(alpaca.base, `${at}/sensordescription?SensorName=Colour`)).ErrorNumber,
    0x401,
  );
});

Deno.test("averageperiod is 0, a PUT of 0 is accepted and any other value is InvalidValue", async () => {
  await using site = await tempDir();
  await using alpaca = await alpacaServer(site.path, TYPES);
  const at = "/api/v1/observingconditions/0";
  ok(await get(alpaca.base, `${at}/averageperiod`), 0);
  ok(await put(alpaca.base, `${at}/averageperiod`, "AveragePeriod=0"));
  ok(await put(alpaca.base, `${at}/averageperiod`, "AveragePeriod=0.0"));
  for (const value of ["0.5", "1", "-1", "abc", ""]) {
    const body = await put(alpaca.base, `${at}/averageperiod`, `AveragePeriod=${value}`);
    assert.equal(body.ErrorNumber, 0x401, value);
  }
  ok(await put(alpaca.base, `${at}/refresh`));
});

Deno.test("timesincelastupdate is the age by ts, and sensordescription the field's label", async () => {
  await using site = await tempDir();
  await using alpaca = await alpacaServer(site.path, TYPES);
  const ts = new Date(Date.now() - 42_000).toISOString();
  const res = await postJson(`${alpaca.server.url}/event`, { type: "weather", ts, data: WEATHER });
  assert.equal(res.status, 200);
  const at = "/api/v1/observingconditions/0";
  for (const name of ["Temperature", "temperature", ""]) {
    const age = await get(alpaca.base, `${at}/timesincelastupdate?SensorName=${name}`);
    ok(age);
    assert.ok((age.Value as number) >= 42 && (age.Value as number) < 72, `${name}: ${age.Value}`);
  }
  ok(await get(alpaca.base, `${at}/sensordescription?SensorName=Temperature`), "Air temperature");
  // Without a label: the type's description.
  ok(
    await get(alpaca.base, `${at}/sensordescription?SensorName=WindSpeed`),
    "Dome weather station",
  );
});

Deno.test("query parameter names are case-insensitive, and form field names of a PUT taken as the reference spells them", async () => {
  await using site = await tempDir();
  await using alpaca = await alpacaServer(site.path, TYPES);
  await postWeather(alpaca.server);
  const at = "/api/v1/observingconditions/0";
  for (const name of ["ClientTransactionID", "clienttransactionid", "CLIENTTRANSACTIONID"]) {
    const body = await get(alpaca.base, `${at}/temperature?${name}=77&clientid=3`);
    assert.equal(body.ClientTransactionID, 77, name);
  }
  assert.equal(
    (await get(alpaca.base, `${at}/timesincelastupdate?sensorname=Temperature`)).ErrorNumber,
    0,
  );
  const body = await put(
    alpaca.base,
    `${at}/averageperiod`,
    "AveragePeriod=0&ClientTransactionID=9&ClientID=4",
  );
  ok(body);
  assert.equal(body.ClientTransactionID, 9);
  ok(await put(alpaca.base, "/api/v1/safetymonitor/0/connected", "Connected=true"));
});

Deno.test("ServerTransactionID increases with every answer, and a missing ClientTransactionID echoes 0", async () => {
  await using site = await tempDir();
  await using alpaca = await alpacaServer(site.path, TYPES);
  let last = 0;
  for (let i = 0; i < 20; i++) {
    const body = await get(
      alpaca.base,
      i % 2 ? "/api/v1/safetymonitor/0/issafe" : "/management/apiversions",
    );
    assert.ok((body.ServerTransactionID as number) > last);
    assert.equal(body.ClientTransactionID, 0);
    last = body.ServerTransactionID as number;
  }
});

Deno.test("an unknown device or member, or a malformed ClientID or ClientTransactionID, is HTTP 400 plain text", async () => {
  await using site = await tempDir();
  await using alpaca = await alpacaServer(site.path, TYPES);
  const cases = [
    "/api/v1/safetymonitor/1/issafe",
    "/api/v1/telescope/0/connected",
    "/api/v1/safetymonitor/0/issafe?ClientID=-1",
    "/api/v1/safetymonitor/0/issafe?ClientTransactionID=abc",
    "/api/v1/safetymonitor/0/issafe?ClientTransactionID=4294967296",
    "/api/v1/safetymonitor/0/issafe?ClientID=1.5",
    "/api/v1/observingconditions/0/sensordescription",
  ];
  for (const path of cases) {
    const url = `${alpaca.base}${path}`;
    const res = await fetch(url);
    assert.equal(res.status, 400, path);
    const text = await api.check("GET", url, res);
    assert.ok(typeof text === "string" && text.length > 10, path);
  }
  // A member the device does not have: 400 too (no document operation describes it).
  const res = await fetch(`${alpaca.base}/api/v1/safetymonitor/0/temperature`);
  assert.equal(res.status, 400);
  assert.match(await res.text(), /no member "temperature"/);
  const wrong = `${alpaca.base}/api/v1/safetymonitor/0/connected`;
  const bad = await fetch(wrong, {
    method: "PUT",
    body: "Connected=maybe",
    headers: { "content-type": "application/x-www-form-urlencoded" },
  });
  assert.equal(bad.status, 400);
  await api.check("PUT", wrong, bad);
});

Deno.test("the Alpaca listener needs no token and serves nothing else of the service", async () => {
  await using site = await tempDir();
  await using alpaca = await alpacaServer(site.path, TYPES, "s3cret");
  ok(await get(alpaca.base, "/api/v1/safetymonitor/0/issafe"), false);
  for (const path of ["/current", "/health", "/safety", "/metrics", "/api/v1", "/"]) {
    const res = await fetch(`${alpaca.base}${path}`);
    assert.equal(res.status, 404, path);
    assert.match(res.headers.get("content-type") ?? "", /^text\/plain/);
    await res.body?.cancel();
  }
  const post = await fetch(`${alpaca.base}/event`, { method: "POST", body: "{}" });
  assert.equal(post.status, 405);
  assert.equal(post.headers.get("allow"), "GET, PUT");
  await post.body?.cancel();
});

Deno.test("bound to loopback, the Alpaca listener refuses a request whose Host is not loopback", async () => {
  await using site = await tempDir();
  await using alpaca = await alpacaServer(site.path, TYPES);
  const port = alpaca.server.alpaca!.addr.port;
  const conn = await Deno.connect({ hostname: "127.0.0.1", port });
  await conn.write(new TextEncoder().encode(
    "GET /api/v1/safetymonitor/0/issafe HTTP/1.1\r\nHost: evil.example\r\nConnection: close\r\n\r\n",
  ));
  const answer = new TextDecoder().decode(await new Response(conn.readable).bytes());
  assert.match(answer, /^HTTP\/1\.1 403/);
  assert.match(answer, /evil\.example/);
});

Deno.test("hostile input (a huge query, bad form bodies, 1000 rapid requests) is answered and bounded", async () => {
  await using site = await tempDir();
  await using alpaca = await alpacaServer(site.path, TYPES);
  const issafe = `${alpaca.base}/api/v1/safetymonitor/0/issafe`;
  // A request head far past any limit: refused by the HTTP layer, or closed, never a crash.
  const huge = await rawHttp(
    alpaca.server.alpaca!.addr.port,
    `GET /api/v1/safetymonitor/0/issafe?x=${
      "a".repeat(200_000)
    } HTTP/1.1\r\nHost: localhost\r\nConnection: close\r\n\r\n`,
  ).catch((err) => {
    // The server may reset the connection while the head is still being sent.
    if (!(err instanceof Deno.errors.ConnectionReset)) throw err;
    return { status: 0 };
  });
  assert.ok([0, 400, 414, 431].includes(huge.status), `huge query answered ${huge.status}`);
  const at = `${alpaca.base}/api/v1/observingconditions/0/averageperiod`;
  const forms: [string, string][] = [
    ["application/json", '{"AveragePeriod": 0}'],
    ["application/x-www-form-urlencoded", "%zz=%%&&==&AveragePeriod"],
    ["application/x-www-form-urlencoded", "AveragePeriod=" + "9".repeat(64 * 1024)],
  ];
  for (const [type, body] of forms) {
    const res = await fetch(at, { method: "PUT", headers: { "content-type": type }, body });
    assert.ok(res.status === 200 || res.status === 400, `${type}: ${res.status}`);
    await api.check("PUT", at, res);
  }
  const invalid = await fetch(at, {
    method: "PUT",
    headers: { "content-type": "application/x-www-form-urlencoded" },
    body: new Uint8Array([0x41, 0x3d, 0xff, 0xfe]),
  });
  assert.equal(invalid.status, 400);
  await invalid.body?.cancel();
  const started = performance.now();
  let answered = 0;
  for (let batch = 0; batch < 20; batch++) {
    const answers = await Promise.all(
      Array.from({ length: 50 }, () => fetch(issafe).then((r) => r.json())),
    );
    answered += answers.filter((b) => b.ErrorNumber === 0).length;
  }
  assert.equal(answered, 1000);
  assert.ok(performance.now() - started < 60_000);
  ok(await get(alpaca.base, "/api/v1/safetymonitor/0/issafe"), false);
});

Deno.test("a types file with a bad alpaca mapping is refused naming the field and the fix", () => {
  const refused: [unknown, RegExp][] = [
    [
      { w: { fields: { t: { unit: "°C", alpaca: "temprature" } } } },
      /\$\.w\.fields\.t\.alpaca .*use one of cloudcover/,
    ],
    [
      { w: { fields: { t: { unit: "furlongs", alpaca: "windspeed" } } } },
      /\$\.w\.fields\.t\.unit the unit "furlongs" cannot be converted to Alpaca windspeed \(m\/s\)/,
    ],
    [
      { w: { fields: { t: { alpaca: "temperature" } } } },
      /\$\.w\.fields\.t the field feeds Alpaca temperature but has no "unit"; add "unit": "°C"/,
    ],
    [
      {
        w: { fields: { a: { unit: "°C", alpaca: "temperature" } } },
        v: { fields: { b: { unit: "K", alpaca: "temperature" } } },
      },
      /\$\.v\.fields\.b\.alpaca Alpaca temperature is already fed by \$\.w\.fields\.a; one field per property/,
    ],
    [
      { w: { fields: { t: { unit: "°C", alpaca: 3 } } } },
      /the number 3 is not an ObservingConditions property/,
    ],
  ];
  for (const [types, message] of refused) {
    assert.throws(() => parseTypes(JSON.stringify(types), "types.json"), (err: unknown) => {
      assert.ok(err instanceof TypesFileError);
      assert.match(err.message, message);
      assert.doesNotMatch(err.message, /\n/);
      return true;
    });
  }
});

Deno.test("run refuses to start with an unconvertible unit: one line on stderr, exit 1", async () => {
  await using site = await tempDir();
  const types = join(site.path, "types.json");
  await Deno.writeTextFile(
    types,
    JSON.stringify({
      weather: { fields: { wind: { unit: "furlongs/fortnight", alpaca: "windspeed" } } },
    }),
  );
  const port = freePort();
  const out = await new Deno.Command(Deno.execPath(), {
    args: [
      "run",
      "--no-prompt",
      ...permissionFlags({
        siteDir: join(site.path, "t"),
        host: "127.0.0.1",
        port,
        readFiles: [types],
      }),
      CLI,
      "telemetry",
      "run",
      "--site-dir",
      join(site.path, "t"),
      "--host",
      "127.0.0.1",
      "--port",
      String(port),
      "--types",
      types,
      "--alpaca-port",
      String(freePort()),
      // Discovery's default UDP port is fixed: another service on this machine may hold it.
      "--alpaca-discovery-port",
      "0",
    ],
    env: { NO_COLOR: "1" },
    stdout: "null",
    stderr: "piped",
  }).output();
  const stderr = new TextDecoder().decode(out.stderr).trim();
  assert.equal(out.code, 1);
  assert.equal(stderr.split("\n").length, 1, stderr);
  assert.match(
    stderr,
    /fields\.wind\.unit the unit "furlongs\/fortnight" cannot be converted to Alpaca windspeed/,
  );
});

Deno.test("spawnServer() with alpacaPort serves Alpaca under the scoped permissions of the flag table", async () => {
  await using site = await tempDir();
  const types = join(site.path, "types.json");
  await Deno.writeTextFile(types, JSON.stringify(TYPES));
  const alpacaPort = freePort();
  await using server = await spawnServer({
    siteDir: join(site.path, "t"),
    host: "127.0.0.1",
    port: 0,
    typesFile: types,
    alpacaPort,
    alpacaDiscoveryPort: 0,
    output: "null",
  });
  const res = await postJson(`${server.url}/event`, { type: "weather", data: WEATHER });
  assert.equal(res.status, 200);
  const base = `http://127.0.0.1:${alpacaPort}`;
  ok(await get(base, "/api/v1/safetymonitor/0/issafe?ClientTransactionID=5"), true);
  ok(await get(base, "/api/v1/observingconditions/0/windspeed"), 10);
});

Deno.test("issafe is the latched verdict of GET /safety: false while a critical type is clearing", async () => {
  await using site = await tempDir();
  const types = { ...TYPES, weather: { ...TYPES.weather, clear_after_s: 3600 } };
  await using alpaca = await alpacaServer(site.path, types);
  await postWeather(alpaca.server);
  const safety = await (await fetch(`${alpaca.server.url}/safety`)).json();
  assert.equal(safety.safe, false);
  assert.match(safety.reasons.join("; "), /clearing/);
  ok(await get(alpaca.base, "/api/v1/safetymonitor/0/issafe"), false);
});

Deno.test("behind the connection guard, the Alpaca port answers and closes a request head that never completes", async () => {
  await using site = await tempDir();
  const server = await testServer({
    siteDir: site.path,
    alpacaPort: 0,
    alpacaDiscoveryPort: 0,
    connectionGuard: true,
    connectionLimits: { headTimeoutMs: 300 },
  });
  try {
    const base = `http://127.0.0.1:${server.alpaca!.addr.port}`;
    ok(await get(base, "/api/v1/safetymonitor/0/issafe"), false);
    const conn = await Deno.connect({ hostname: "127.0.0.1", port: server.alpaca!.addr.port });
    await conn.write(new TextEncoder().encode("GET /api/v1/safetymonitor/0/issafe HTTP/1.1\r\nHo"));
    const started = performance.now();
    // The guard closes it after 300 ms; without a guard this test's own timer closes it at 5 s.
    const timer = setTimeout(() => conn.close(), 5_000);
    const closed = await conn.read(new Uint8Array(1024)).catch(() => null);
    clearTimeout(timer);
    const waited = performance.now() - started;
    try {
      conn.close();
    } catch {
      // Closed by the timer already.
    }
    assert.equal(closed, null);
    assert.ok(waited < 3_000, `the partial head stayed open ${waited.toFixed(0)} ms`);
    ok(await get(base, "/api/v1/safetymonitor/0/issafe"), false);
  } finally {
    await server.shutdown();
  }
});

Deno.test("an Alpaca port held by another program refuses start-up naming --alpaca-port, and the site is released", async () => {
  await using site = await tempDir();
  using holder = Deno.listen({ hostname: "127.0.0.1", port: 0 });
  await assert.rejects(
    testServer({ siteDir: site.path, alpacaPort: holder.addr.port, alpacaDiscoveryPort: 0 }),
    /choose another --alpaca-port/,
  );
  // Nothing was left holding the site directory: it starts again at once.
  const server = await testServer({ siteDir: site.path });
  await server.shutdown();
});

Deno.test("an unexpected failure of a device is HTTP 500 plain text and reaches the service log", async () => {
  const logged: unknown[] = [];
  const handler = await createAlpacaHandler({
    types: new Map(),
    source: {
      isSafe: () => {
        throw new Error("verdict unavailable");
      },
      latest: () => undefined,
      now: Date.now,
    },
    siteId: "0b6f9c1e-7a54-4d0e-9a51-3f1c8f1b2d3a",
    hostname: "127.0.0.1",
    onError: (err) => logged.push(err),
  });
  const url = "http://localhost/api/v1/safetymonitor/0/issafe";
  const res = await handler(new Request(url, { headers: { host: "localhost" } }));
  assert.equal(res.status, 500);
  assert.match(String(await api.check("GET", url, res)), /see the service log/);
  assert.equal(logged.length, 1);
  assert.match(String(logged[0]), /verdict unavailable/);
});

Deno.test("every operation the Alpaca document lists for both devices answers as it says", async () => {
  await using site = await tempDir();
  await using alpaca = await alpacaServer(site.path, TYPES);
  await postWeather(alpaca.server);
  let count = 0;
  for (const device of ["safetymonitor", "observingconditions"]) {
    const requests = api.deviceRequests(device);
    for (const { method, path, form } of requests) {
      const url = `${alpaca.base}${path}`;
      const res = await fetch(url, {
        method,
        ...(form === undefined
          ? {}
          : { body: form, headers: { "content-type": "application/x-www-form-urlencoded" } }),
      });
      assert.equal(res.status, 200, `${method} ${path}`);
      const body = await api.check(method, url, res) as Record<string, unknown>;
      // The document's example action names no action of the device: ActionNotImplemented.
      assert.ok(
        [0, 0x400, 0x40b, ...(path.endsWith("/action") ? [0x40c] : [])].includes(
          body.ErrorNumber as number,
        ),
        `${method} ${path}: ${JSON.stringify(body)}`,
      );
      count++;
      // The document lists disconnect among the others: connect again for the rest.
      if (path.endsWith("/disconnect")) {
        ok(await put(alpaca.base, path.replace(/disconnect$/, "connect")));
      }
    }
  }
  // The 16 common operations on each device, issafe, and ObservingConditions' own 18.
  assert.equal(count, 16 * 2 + 1 + 18);
});
