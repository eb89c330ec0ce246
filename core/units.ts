/**
 * The ASCOM Alpaca ObservingConditions properties a types-file field may feed (its `"alpaca"`
 * key, docs/types.md), the unit each property is answered in, and the conversions from the units
 * a field may be recorded in (docs/safety.md, "ASCOM Alpaca (N.I.N.A.)"). Pure arithmetic: no
 * I/O, no HTTP.
 *
 * @example Usage
 * ```ts
 * import { alpacaConverter } from "./units.ts";
 * import assert from "node:assert/strict";
 *
 * const toCelsius = alpacaConverter("temperature", "°F");
 * assert.equal(toCelsius?.(212), 100);
 * assert.equal(alpacaConverter("temperature", "m/s"), undefined);
 * ```
 *
 * @module
 */

/**
 * The ObservingConditions properties, lower case as they appear in Alpaca URLs.
 *
 * @example Usage
 * ```ts
 * import { ALPACA_PROPERTIES } from "./units.ts";
 * import assert from "node:assert/strict";
 *
 * assert.ok(ALPACA_PROPERTIES.includes("skytemperature"));
 * ```
 */
export const ALPACA_PROPERTIES = [
  "cloudcover",
  "dewpoint",
  "humidity",
  "pressure",
  "rainrate",
  "skybrightness",
  "skyquality",
  "skytemperature",
  "starfwhm",
  "temperature",
  "winddirection",
  "windgust",
  "windspeed",
] as const;

/** One of {@linkcode ALPACA_PROPERTIES}. */
export type AlpacaProperty = typeof ALPACA_PROPERTIES[number];

/** The quantity of a property, which decides the units it may be converted from. */
type Quantity =
  | "percent"
  | "temperature"
  | "pressure"
  | "rain"
  | "lux"
  | "sqm"
  | "arcsec"
  | "angle"
  | "speed";

const QUANTITY: Readonly<Record<AlpacaProperty, Quantity>> = {
  cloudcover: "percent",
  dewpoint: "temperature",
  humidity: "percent",
  pressure: "pressure",
  rainrate: "rain",
  skybrightness: "lux",
  skyquality: "sqm",
  skytemperature: "temperature",
  starfwhm: "arcsec",
  temperature: "temperature",
  winddirection: "angle",
  windgust: "speed",
  windspeed: "speed",
};

/**
 * The property names as the ASCOM interface spells them (`devicestate` names, page labels).
 *
 * @example Usage
 * ```ts
 * import { ALPACA_PROPERTY_NAMES } from "./units.ts";
 * import assert from "node:assert/strict";
 *
 * assert.equal(ALPACA_PROPERTY_NAMES.starfwhm, "StarFWHM");
 * ```
 */
export const ALPACA_PROPERTY_NAMES: Readonly<Record<AlpacaProperty, string>> = {
  cloudcover: "CloudCover",
  dewpoint: "DewPoint",
  humidity: "Humidity",
  pressure: "Pressure",
  rainrate: "RainRate",
  skybrightness: "SkyBrightness",
  skyquality: "SkyQuality",
  skytemperature: "SkyTemperature",
  starfwhm: "StarFWHM",
  temperature: "Temperature",
  winddirection: "WindDirection",
  windgust: "WindGust",
  windspeed: "WindSpeed",
};

const identity = (value: number): number => value;

/**
 * Per quantity: the unit Alpaca answers in, then every accepted spelling (compared in lower case
 * without spaces) with its conversion into that unit. The factors are the exact definitions:
 * 1 mph = 0.44704 m/s, 1 kn = 1852/3600 m/s, 1 inHg = 3386.389 Pa, 1 in = 25.4 mm.
 */
const UNITS: Readonly<
  Record<Quantity, { alpaca: string; from: Readonly<Record<string, (value: number) => number>> }>
> = {
  percent: { alpaca: "%", from: { "%": identity, "percent": identity } },
  temperature: {
    alpaca: "°C",
    from: {
      "°c": identity,
      "degc": identity,
      "c": identity,
      "celsius": identity,
      "°f": (f) => (f - 32) * 5 / 9,
      "degf": (f) => (f - 32) * 5 / 9,
      "f": (f) => (f - 32) * 5 / 9,
      "fahrenheit": (f) => (f - 32) * 5 / 9,
      "k": (k) => k - 273.15,
      "kelvin": (k) => k - 273.15,
    },
  },
  pressure: {
    alpaca: "hPa",
    from: {
      "hpa": identity,
      "mbar": identity,
      "mb": identity,
      "pa": (pa) => pa / 100,
      "kpa": (kpa) => kpa * 10,
      "inhg": (inHg) => inHg * 33.86389,
    },
  },
  rain: {
    alpaca: "mm/h",
    from: {
      "mm/h": identity,
      "mm/hr": identity,
      "in/h": (inches) => inches * 25.4,
      "in/hr": (inches) => inches * 25.4,
    },
  },
  lux: { alpaca: "lux", from: { "lux": identity, "lx": identity } },
  sqm: {
    alpaca: "mag/arcsec^2",
    from: { "mag/arcsec^2": identity, "mag/arcsec²": identity, "mpsas": identity },
  },
  arcsec: { alpaca: "arcsec", from: { "arcsec": identity, '"': identity } },
  angle: { alpaca: "°", from: { "°": identity, "deg": identity, "degrees": identity } },
  speed: {
    alpaca: "m/s",
    from: {
      "m/s": identity,
      "mps": identity,
      "km/h": (kmh) => kmh / 3.6,
      "kmh": (kmh) => kmh / 3.6,
      "kph": (kmh) => kmh / 3.6,
      "mph": (mph) => mph * 0.44704,
      "kn": (kn) => kn * 1852 / 3600,
      "kt": (kn) => kn * 1852 / 3600,
      "kts": (kn) => kn * 1852 / 3600,
      "knots": (kn) => kn * 1852 / 3600,
    },
  },
};

/**
 * Whether a text names an ObservingConditions property (lower case, as the types file writes it).
 *
 * @param name The text of an `"alpaca"` key.
 * @returns `true` for one of {@linkcode ALPACA_PROPERTIES}.
 *
 * @example Usage
 * ```ts
 * import { isAlpacaProperty } from "./units.ts";
 * import assert from "node:assert/strict";
 *
 * assert.equal(isAlpacaProperty("windspeed"), true);
 * assert.equal(isAlpacaProperty("WindSpeed"), false);
 * ```
 */
export function isAlpacaProperty(name: string): name is AlpacaProperty {
  return (ALPACA_PROPERTIES as readonly string[]).includes(name);
}

/**
 * The unit Alpaca answers a property in.
 *
 * @param property The property.
 * @returns The unit, such as `"°C"` or `"m/s"`.
 *
 * @example Usage
 * ```ts
 * import { alpacaUnit } from "./units.ts";
 * import assert from "node:assert/strict";
 *
 * assert.equal(alpacaUnit("pressure"), "hPa");
 * ```
 */
export function alpacaUnit(property: AlpacaProperty): string {
  return UNITS[QUANTITY[property]].alpaca;
}

/**
 * The units a field feeding a property may be recorded in, as the error messages list them.
 *
 * @param property The property.
 * @returns The accepted spellings.
 *
 * @example Usage
 * ```ts
 * import { acceptedUnits } from "./units.ts";
 * import assert from "node:assert/strict";
 *
 * assert.ok(acceptedUnits("windspeed").includes("kn"));
 * ```
 */
export function acceptedUnits(property: AlpacaProperty): string[] {
  return Object.keys(UNITS[QUANTITY[property]].from);
}

/**
 * The conversion of a value recorded in `unit` into the unit Alpaca answers `property` in.
 *
 * @param property The property the field feeds.
 * @param unit The field's `unit` in the types file (any letter case, spaces ignored).
 * @returns The conversion, or `undefined` when the unit is not one of that quantity.
 *
 * @example Usage
 * ```ts
 * import { alpacaConverter } from "./units.ts";
 * import assert from "node:assert/strict";
 *
 * assert.equal(alpacaConverter("windspeed", "km/h")?.(36), 10);
 * assert.equal(alpacaConverter("pressure", "Pa")?.(101325), 1013.25);
 * ```
 */
export function alpacaConverter(
  property: AlpacaProperty,
  unit: string,
): ((value: number) => number) | undefined {
  const key = unit.replace(/\s+/g, "").toLowerCase();
  const from = UNITS[QUANTITY[property]].from;
  return Object.hasOwn(from, key) ? from[key] : undefined;
}
