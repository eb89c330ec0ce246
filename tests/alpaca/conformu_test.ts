/**
 * The Alpaca devices against ConformU, ASCOM's conformance checker (docs/safety.md, "ASCOM Alpaca
 * (N.I.N.A.)"): its conformance checks and its Alpaca protocol checks in strict mode, reproduced
 * by tests/_shared/conformu.ts over a real service with `--alpaca-port 0`, find no issue or
 * error; one focused test per rule the devices once broke; and the checker's lists of ConformU's
 * checks cover ConformU's source when its mirror is present.
 */

import assert from "node:assert/strict";
import { postJson, siteEventData, tempDir } from "../_shared/util.ts";
import { alpacaServer, postSafe, PROFILE_TYPES, PROFILES } from "../_shared/alpaca_util.ts";
import {
  conformanceCheck,
  type ConformuTarget,
  conformuTesterNames,
  conformuTestNames,
  type Finding,
  problems,
  protocolCheck,
  REPRODUCED_CONFORMANCE_TESTS,
  REPRODUCED_PROTOCOL_TESTS,
  SKIPPED_CONFORMANCE_TESTS,
  SKIPPED_PROTOCOL_TESTS,
} from "../_shared/conformu.ts";
import type { ServerHandle } from "../../server.ts";
import { createAlpacaHandler } from "../../alpaca/listener.ts";
import type { AlpacaActions } from "../../alpaca/devices.ts";

/** A critical type that is safe as soon as it has a fresh event (no latch). */
const SAFETY_TYPES = {
  weather: {
    critical: true,
    stale_after_s: 300,
    clear_after_s: 0,
    fields: { rain: { alarm_if: true } },
  },
};

/** Several properties mapped over three types, Dew point and humidity both. */
const CONDITIONS_TYPES = {
  weather: {
    description: "Dome weather station",
    critical: true,
    stale_after_s: 300,
    fields: {
      temp_f: { unit: "°F", alpaca: "temperature", label: "Air temperature" },
      dew_c: { unit: "°C", alpaca: "dewpoint" },
      humidity: { unit: "%", alpaca: "humidity" },
      baro: { unit: "hPa", alpaca: "pressure" },
      wind_kmh: { unit: "km/h", alpaca: "windspeed" },
      gust_kmh: { unit: "km/h", alpaca: "windgust" },
      wind_dir: { unit: "deg", alpaca: "winddirection" },
      rain_mmh: { unit: "mm/h", alpaca: "rainrate" },
      sky_c: { unit: "°C", alpaca: "skytemperature" },
    },
  },
  sqm: { fields: { mpsas: { unit: "mag/arcsec^2", alpaca: "skyquality" } } },
  clouds: { fields: { cover: { unit: "%", alpaca: "cloudcover" } } },
};

/** Calm air: the vane still points somewhere (225°) while the wind speed is 0. */
const CALM = {
  temp_f: 50,
  dew_c: 3.5,
  humidity: 71,
  baro: 1012.4,
  wind_kmh: 0,
  gust_kmh: 3.6,
  wind_dir: 225,
  rain_mmh: 0,
  sky_c: -21,
};

async function post(server: ServerHandle, type: string, data: unknown): Promise<void> {
  const res = await postJson(`${server.url}/event`, { type, data });
  assert.equal(res.status, 200, JSON.stringify(res.body));
}

async function postConditions(server: ServerHandle): Promise<void> {
  await post(server, "weather", CALM);
  await post(server, "sqm", { mpsas: 21.2 });
  await post(server, "clouds", { cover: 12 });
}

/** The findings as lines, for an assertion message. */
function show(findings: readonly Finding[]): string {
  return findings.map((f) => `${f.level} ${f.member}: ${f.message}`).join("\n");
}

/** Asserts no ISSUE or ERROR, and that the check got as far as `reached` (an OK of that member). */
function assertConforms(findings: readonly Finding[], reached: string[]): void {
  assert.deepEqual(problems(findings), [], show(problems(findings)));
  for (const member of reached) {
    assert.ok(
      findings.some((f) => f.level === "OK" && f.member === member),
      `no OK for ${member}:\n${show(findings)}`,
    );
  }
}

// --- ConformU as a whole ---------------------------------------------------------------------

Deno.test("the safetymonitor passes ConformU's conformance checks with no issue or error", async () => {
  await using site = await tempDir();
  await using alpaca = await alpacaServer(site.path, SAFETY_TYPES);
  await post(alpaca.server, "weather", { rain: false });
  const findings = await conformanceCheck({ base: alpaca.base, device: "safetymonitor" });
  assertConforms(findings, ["Connect", "Connected", "DeviceState", "IsSafe", "Disconnect"]);
});

Deno.test("the observingconditions passes ConformU's conformance checks with no issue or error", async () => {
  await using site = await tempDir();
  await using alpaca = await alpacaServer(site.path, CONDITIONS_TYPES);
  await postConditions(alpaca.server);
  const findings = await conformanceCheck({ base: alpaca.base, device: "observingconditions" });
  assertConforms(findings, [
    "Connect",
    "AveragePeriod Write",
    "Temperature",
    "WindSpeed",
    "TimeSinceLastUpdateLatest",
    "Consistency - Pressure",
    "Consistency - StarFWHM",
    "Disconnect",
  ]);
});

Deno.test("the safetymonitor passes ConformU's Alpaca protocol checks in strict mode", async () => {
  await using site = await tempDir();
  await using alpaca = await alpacaServer(site.path, SAFETY_TYPES);
  await post(alpaca.server, "weather", { rain: false });
  const findings = await protocolCheck({ base: alpaca.base, device: "safetymonitor" });
  assertConforms(findings, ["PUT Connected", "GET IsSafe", "PUT Disconnect", "GET DeviceState"]);
});

Deno.test("the observingconditions passes ConformU's Alpaca protocol checks in strict mode", async () => {
  await using site = await tempDir();
  await using alpaca = await alpacaServer(site.path, CONDITIONS_TYPES);
  await postConditions(alpaca.server);
  const findings = await protocolCheck({ base: alpaca.base, device: "observingconditions" });
  assertConforms(findings, ["PUT AveragePeriod", "GET TimeSinceLastUpdate", "GET CloudCover"]);
});

Deno.test("every safetymonitor of a types file with two profiles passes ConformU's conformance checks, its safety actions served by the service", async () => {
  await using site = await tempDir();
  await using alpaca = await alpacaServer(site.path, PROFILE_TYPES);
  await postSafe(alpaca.server.url);
  for (const [number, profile] of PROFILES.entries()) {
    const findings = await conformanceCheck({ base: alpaca.base, device: "safetymonitor", number });
    assertConforms(findings, [
      "Connect",
      "Action - SetExternalEvents",
      "Action - SafetyEvents",
      "Action - ClearExternalEvents",
      "IsSafe",
      "Disconnect",
    ]);
    assert.equal(alpaca.server.service.safety(profile).safe, true, profile);
  }
  // Each check's test event went through the service's hub, held its own profile (every profile
  // for safetymonitor/0), and was cleared through it.
  const audit = await siteEventData(site.path, "telemetry.safety.external");
  assert.deepEqual(
    audit.map((
      d,
    ) => [d.action, d.via, d.profile ?? "site", (d.event as { Source: string }).Source]),
    PROFILES.flatMap((p) => [
      ["set", "alpaca", p, "Conform Universal"],
      ["clear", "alpaca", p, "Conform Universal"],
    ]),
  );
});

Deno.test("every safetymonitor of a types file with two profiles passes ConformU's Alpaca protocol checks in strict mode", async () => {
  await using site = await tempDir();
  await using alpaca = await alpacaServer(site.path, PROFILE_TYPES);
  await postSafe(alpaca.server.url);
  for (const number of PROFILES.keys()) {
    const findings = await protocolCheck({ base: alpaca.base, device: "safetymonitor", number });
    assertConforms(findings, ["PUT Connected", "GET IsSafe", "PUT Disconnect", "GET DeviceState"]);
  }
});

// --- One rule at a time ----------------------------------------------------------------------

/** GETs a member, returning the status and the parsed body. */
async function get(base: string, path: string): Promise<Record<string, unknown>> {
  const res = await fetch(`${base}/api/v1/${path}`);
  assert.equal(res.status, 200, path);
  return await res.json();
}

/** PUTs a form, returning the response. */
function put(base: string, path: string, form: string): Promise<Response> {
  return fetch(`${base}/api/v1/${path}`, {
    method: "PUT",
    headers: { "content-type": "application/x-www-form-urlencoded" },
    body: form,
  });
}

Deno.test("PUT disconnect or Connected=False makes GET connected false and the other members NotConnected, until connect", async () => {
  await using site = await tempDir();
  await using alpaca = await alpacaServer(site.path, SAFETY_TYPES);
  for (
    const [device, member] of [["safetymonitor", "issafe"], ["observingconditions", "humidity"]]
  ) {
    for (const form of ["Connected=False", ""]) {
      const at = `${device}/0`;
      assert.equal((await get(alpaca.base, `${at}/connected`)).Value, true, "connected at start");
      const res = await put(alpaca.base, `${at}/${form === "" ? "disconnect" : "connected"}`, form);
      assert.equal((await res.json()).ErrorNumber, 0);
      assert.equal((await get(alpaca.base, `${at}/connected`)).Value, false, `${at} ${form}`);
      const refused = await get(alpaca.base, `${at}/${member}`);
      assert.equal(refused.ErrorNumber, 0x407, JSON.stringify(refused));
      assert.equal((await get(alpaca.base, `${at}/name`)).ErrorNumber, 0, "name answers");
      const again = await put(
        alpaca.base,
        `${at}/${form === "" ? "connect" : "connected"}`,
        form === "" ? "" : "Connected=True",
      );
      assert.equal((await again.json()).ErrorNumber, 0);
      assert.equal((await get(alpaca.base, `${at}/connected`)).Value, true);
    }
  }
});

Deno.test("a required PUT form parameter sent only with other casing is HTTP 400 naming the exact casing", async () => {
  await using site = await tempDir();
  await using alpaca = await alpacaServer(site.path, CONDITIONS_TYPES);
  for (
    const [path, form, name] of [
      ["observingconditions/0/averageperiod", "aVERAGEpERIOD=0", "AveragePeriod"],
      ["safetymonitor/0/connected", "connected=false", "Connected"],
    ] as const
  ) {
    const res = await put(alpaca.base, path, form);
    assert.equal(res.status, 400, form);
    assert.match(res.headers.get("content-type") ?? "", /^text\/plain/);
    const text = await res.text();
    assert.match(text, new RegExp(`send ${name}=<value> with exactly this casing`), text);
  }
  // The lower-case Connected changed nothing.
  assert.equal((await get(alpaca.base, "safetymonitor/0/connected")).Value, true);
});

Deno.test("a PUT ClientTransactionID sent with other casing is ignored: the answer echoes 0, a GET's is echoed", async () => {
  await using site = await tempDir();
  await using alpaca = await alpacaServer(site.path, CONDITIONS_TYPES);
  const res = await put(alpaca.base, "observingconditions/0/refresh", "clienttransactionid=67890");
  assert.equal((await res.json()).ClientTransactionID, 0);
  const got = await get(alpaca.base, "observingconditions/0/name?clienttransactionid=67890");
  assert.equal(got.ClientTransactionID, 67890);
});

Deno.test("every GET answer carries Value, error answers included, the default of the member's type", async () => {
  await using site = await tempDir();
  await using alpaca = await alpacaServer(site.path, CONDITIONS_TYPES);
  const cases: [string, number, unknown][] = [
    ["observingconditions/0/starfwhm", 0x400, 0],
    ["observingconditions/0/temperature", 0x40b, 0],
    ["observingconditions/0/sensordescription?SensorName=Colour", 0x401, ""],
  ];
  for (const [path, error, value] of cases) {
    const body = await get(alpaca.base, path);
    assert.equal(body.ErrorNumber, error, path);
    assert.ok(Object.hasOwn(body, "Value"), `${path}: ${JSON.stringify(body)}`);
    assert.deepEqual(body.Value, value, path);
  }
  assert.equal(
    (await (await put(alpaca.base, "safetymonitor/0/disconnect", "")).json()).ErrorNumber,
    0,
  );
  for (const [member, value] of [["issafe", false], ["devicestate", []]] as const) {
    const body = await get(alpaca.base, `safetymonitor/0/${member}`);
    assert.equal(body.ErrorNumber, 0x407);
    assert.deepEqual(body.Value, value, member);
  }
});

Deno.test("winddirection is 0 whenever windspeed is 0, and the vane's reading otherwise", async () => {
  await using site = await tempDir();
  await using alpaca = await alpacaServer(site.path, CONDITIONS_TYPES);
  await post(alpaca.server, "weather", CALM);
  assert.equal((await get(alpaca.base, "observingconditions/0/windspeed")).Value, 0);
  assert.equal((await get(alpaca.base, "observingconditions/0/winddirection")).Value, 0);
  const state = (await get(alpaca.base, "observingconditions/0/devicestate")).Value as {
    Name: string;
    Value: unknown;
  }[];
  assert.deepEqual(state.find((s) => s.Name === "WindDirection"), {
    Name: "WindDirection",
    Value: 0,
  });
  await post(alpaca.server, "weather", { ...CALM, wind_kmh: 7.2 });
  assert.equal((await get(alpaca.base, "observingconditions/0/winddirection")).Value, 225);
});

Deno.test("a mapped property whose type has no event yet answers InvalidOperation 0x40B, not ready", async () => {
  await using site = await tempDir();
  await using alpaca = await alpacaServer(site.path, CONDITIONS_TYPES);
  await post(alpaca.server, "sqm", { mpsas: 21.2 });
  const body = await get(alpaca.base, "observingconditions/0/temperature");
  assert.equal(body.ErrorNumber, 0x40b, JSON.stringify(body));
  assert.match(String(body.ErrorMessage), /not ready: no weather event has been recorded yet/);
  // A field missing from the latest event is not ready either.
  await post(alpaca.server, "weather", { dew_c: 3 });
  assert.equal((await get(alpaca.base, "observingconditions/0/temperature")).ErrorNumber, 0x40b);
  assert.equal((await get(alpaca.base, "observingconditions/0/dewpoint")).Value, 3);
});

Deno.test("timesincelastupdate with an empty SensorName is -1 while no mapped type has an event, then the newest age", async () => {
  await using site = await tempDir();
  await using alpaca = await alpacaServer(site.path, CONDITIONS_TYPES);
  const at = "observingconditions/0/timesincelastupdate";
  for (const name of ["", "Temperature"]) {
    const body = await get(alpaca.base, `${at}?SensorName=${name}`);
    assert.equal(body.ErrorNumber, 0, JSON.stringify(body));
    assert.equal(body.Value, -1, name);
  }
  const old = new Date(Date.now() - 600_000).toISOString();
  let res = await postJson(`${alpaca.server.url}/event`, { type: "weather", ts: old, data: CALM });
  assert.equal(res.status, 200);
  res = await postJson(`${alpaca.server.url}/event`, {
    type: "sqm",
    ts: new Date(Date.now() - 30_000).toISOString(),
    data: { mpsas: 21 },
  });
  assert.equal(res.status, 200);
  const newest = (await get(alpaca.base, `${at}?SensorName=`)).Value as number;
  assert.ok(newest >= 30 && newest < 300, String(newest));
  const weather = (await get(alpaca.base, `${at}?SensorName=Temperature`)).Value as number;
  assert.ok(weather >= 600, String(weather));
});

// --- The hook for device-specific actions ----------------------------------------------------

/**
 * A small in-memory implementation of the draft ISafetyMonitorV4 actions, enough to drive the
 * hook and ConformU's safety-action checks; the service's own is served elsewhere.
 */
function memoryActions(
  safe: { value: boolean },
): AlpacaActions & { external: Map<string, unknown> } {
  const external = new Map<string, unknown>();
  const refuse = (why: string) => ({ error: 0x401, message: why });
  return {
    external,
    names: ["SafetyEvents", "SetExternalEvents", "ClearExternalEvents"],
    run({ name, parameters }) {
      if (name === "SafetyEvents") return { value: JSON.stringify([...external.values()]) };
      let list: unknown;
      try {
        list = JSON.parse(parameters);
      } catch {
        return refuse("the parameters are not JSON");
      }
      if (!Array.isArray(list) || list.length === 0) return refuse("an empty list");
      for (const item of list) {
        if (name === "SetExternalEvents") external.set((item as { Id: string }).Id, item);
        else if (!external.delete(String(item))) return refuse(`no external event ${item}`);
      }
      safe.value = external.size === 0;
      return { value: "" };
    },
  };
}

Deno.test("a safetymonitor whose source has actions lists them in supportedactions, serves them through PUT action, and passes ConformU's safety-action checks", async () => {
  const safe = { value: true };
  const actions = memoryActions(safe);
  const handler = await createAlpacaHandler({
    types: new Map(),
    source: { isSafe: () => safe.value, latest: () => undefined, now: Date.now, actions },
    siteId: "0b6f9c1e-7a54-4d0e-9a51-3f1c8f1b2d3a",
    hostname: "127.0.0.1",
  });
  await using server = Deno.serve({ hostname: "127.0.0.1", port: 0, onListen: () => {} }, handler);
  const target: ConformuTarget = {
    base: `http://127.0.0.1:${server.addr.port}`,
    device: "safetymonitor",
  };
  const findings = await conformanceCheck(target);
  assertConforms(findings, [
    "Action - SetExternalEvents",
    "Action - SafetyEvents",
    "Action - ClearExternalEvents",
  ]);
  assert.equal(actions.external.size, 0);
  // Reconnected for the next requests (the check leaves the device disconnected).
  assert.equal(
    (await (await put(target.base, "safetymonitor/0/connect", "")).json()).ErrorNumber,
    0,
  );
  const unknown = await put(target.base, "safetymonitor/0/action", "Action=Reboot&Parameters=");
  const body = await unknown.json();
  assert.equal(body.ErrorNumber, 0x40c);
  assert.match(
    body.ErrorMessage,
    /has no action "Reboot"; it has SafetyEvents, SetExternalEvents, ClearExternalEvents/,
  );
});

// --- The checker covers ConformU --------------------------------------------------------------

/** The mirror of ConformU's repository (a bare git repository), if this machine has one. */
const CONFORMU_GIT_DIR = Deno.env.get("CONFORMU_GIT_DIR") ??
  "/work/.mirror/ASCOMInitiative+ConformU/repo";

async function conformuSource(path: string): Promise<string | undefined> {
  try {
    const out = await new Deno.Command("git", {
      args: ["-C", CONFORMU_GIT_DIR, "show", `HEAD:${path}`],
      stdout: "piped",
      stderr: "null",
    }).output();
    return out.success ? new TextDecoder().decode(out.stdout) : undefined;
  } catch {
    return undefined;
  }
}

Deno.test("the checker's lists name every check of ConformU's AlpacaProtocolTestManager.cs and testers, reproduced or skipped", async () => {
  const protocol = await conformuSource("ConformU/AlpacaProtocolTestManager.cs");
  const safety = await conformuSource("ConformU/Conform/SafetyMonitorTester.cs");
  const conditions = await conformuSource("ConformU/Conform/ObservingConditionsTester.cs");
  if (protocol === undefined || safety === undefined || conditions === undefined) {
    // deno-lint-ignore no-console
    console.log(
      `conformu_test.ts: skipping the coverage of ConformU's source: no ConformU mirror at ${CONFORMU_GIT_DIR} (set CONFORMU_GIT_DIR to a clone of ASCOMInitiative/ConformU)`,
    );
    return;
  }
  const listed = [...REPRODUCED_PROTOCOL_TESTS, ...Object.keys(SKIPPED_PROTOCOL_TESTS)];
  assert.equal(new Set(listed).size, listed.length, "a name is listed twice");
  assert.deepEqual(listed.toSorted(), conformuTestNames(protocol));
  const tester = [...REPRODUCED_CONFORMANCE_TESTS, ...Object.keys(SKIPPED_CONFORMANCE_TESTS)]
    .filter((name) => /^(ObservingConditionsProperty|SafetyMonitorTester)\./.test(name));
  assert.deepEqual(tester.toSorted(), conformuTesterNames(safety, conditions));
});
