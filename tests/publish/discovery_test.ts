/**
 * Home Assistant discovery configs (docs/publish.md, "Home Assistant"): a sensor or a
 * binary_sensor per registered field, its unit and device class, distinct unique ids, and the
 * verdicts as safety binary_sensors.
 *
 * @module
 */

import assert from "node:assert/strict";
import { discoveryConfigs, type DiscoveryInput, profilesOf, SiteTopics } from "../../publish.ts";

const SITE = "0b6f9c1e-7a54-4d0e-9a51-3f1c8f1b2d3a";

function configs(
  types: DiscoveryInput["types"],
  data: Record<string, Record<string, unknown>> = {},
  profiles = ["site"],
) {
  const made = discoveryConfigs({
    discoveryPrefix: "homeassistant",
    topics: new SiteTopics("obs", SITE),
    version: "0.7.0",
    types,
    data: (type) => data[type],
    profiles,
  });
  return new Map([...made].map(([topic, payload]) => [topic, JSON.parse(payload)]));
}

Deno.test("discoveryConfigs() gives each unit its device class and Home Assistant's spelling", () => {
  const made = configs({
    w: {
      fields: {
        t: { unit: "degC" },
        h: { unit: "%" },
        p: { unit: "hPa" },
        v: { unit: "m/s" },
        u: { unit: "V" },
        i: { unit: "A" },
        g: { unit: "GB" },
      },
    },
  });
  const classes = Object.fromEntries(
    [...made.values()].filter((c) => c.unique_id.startsWith(`${SITE}_w_`)).map((
      c,
    ) => [c.unique_id.slice(-1), [c.device_class, c.unit_of_measurement]]),
  );
  assert.deepEqual(classes, {
    t: ["temperature", "°C"],
    h: ["humidity", "%"],
    p: ["pressure", "hPa"],
    v: ["wind_speed", "m/s"],
    u: ["voltage", "V"],
    i: ["current", "A"],
    g: [undefined, "GB"],
  });
});

Deno.test("discoveryConfigs() makes a field with a boolean alarm_if a binary_sensor, and one with a limit a sensor", () => {
  const made = configs({ w: { fields: { rain: { alarm_if: true }, wind: { alarm_above: 15 } } } });
  assert.ok(made.has(`homeassistant/binary_sensor/${SITE}_w_rain/config`));
  assert.ok(made.has(`homeassistant/sensor/${SITE}_w_wind/config`));
});

Deno.test("discoveryConfigs() decides a field with no unit or limit by its latest value", () => {
  const types = { w: { fields: { dark: {}, state: {} } } };
  const made = configs(types, { w: { dark: true, state: "open" } });
  assert.ok(made.has(`homeassistant/binary_sensor/${SITE}_w_dark/config`));
  assert.ok(made.has(`homeassistant/sensor/${SITE}_w_state/config`));
  assert.ok(configs(types).has(`homeassistant/sensor/${SITE}_w_dark/config`));
});

Deno.test("discoveryConfigs() keeps the unique ids of a_b + c and a + b_c apart", () => {
  const made = configs({ a_b: { fields: { c: {} } }, a: { fields: { b_c: {} } } });
  const ids = [...made.values()].map((c) => c.unique_id);
  assert.equal(new Set(ids).size, ids.length);
  for (const id of ids) assert.match(id, /^[A-Za-z0-9_-]+$/);
});

Deno.test("discoveryConfigs() makes one safety binary_sensor per profile, on meaning unsafe", () => {
  const made = configs({}, {}, ["site", "north"]);
  const site = made.get(`homeassistant/binary_sensor/${SITE}/safety/config`);
  const north = made.get(`homeassistant/binary_sensor/${SITE}/safety_north/config`);
  assert.equal(site.device_class, "safety");
  assert.equal(site.state_topic, `obs/${SITE}/safety`);
  assert.equal(north.state_topic, `obs/${SITE}/safety/north`);
  assert.equal(north.unique_id, `${SITE}-safety-north`);
  assert.equal(site.value_template, "{{ 'OFF' if value_json.safe is sameas true else 'ON' }}");
});

Deno.test("profilesOf() lists site first, then the profiles of critical_for by name", () => {
  assert.deepEqual(
    profilesOf({
      a: { critical_for: ["south", "north"] },
      b: { critical_for: ["north", "bad name", 3] },
      c: {},
    }),
    ["site", "north", "south"],
  );
});
