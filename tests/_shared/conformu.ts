/**
 * ConformU's checks of an ASCOM Alpaca SafetyMonitor or ObservingConditions device, reproduced
 * as a test-side checker (docs/safety.md, "ASCOM Alpaca (N.I.N.A.)"). ConformU
 * (ASCOMInitiative/ConformU) is the conformance checker ASCOM asks of devices; this file walks the
 * same requests and applies the same judgements over real HTTP against a running Alpaca server,
 * and returns what ConformU would log: `{level: "OK" | "INFO" | "ISSUE" | "ERROR", member,
 * message}`. A device conforms when no ISSUE or ERROR comes back.
 *
 * Two checks, as ConformU has them:
 * - {@linkcode conformanceCheck}: ConformanceTestManager's order over DeviceTesterBaseClass.cs,
 *   SafetyMonitorTester.cs and ObservingConditionsTester.cs: interface version, the connect and
 *   disconnect cycle, the common members, DeviceState, the device's own members (ConformU reaches
 *   them through ASCOM.Alpaca.Clients, whose behaviour is reproduced by {@linkcode DeviceClient}).
 * - {@linkcode protocolCheck}: AlpacaProtocolTestManager.cs in strict mode: parameter casing,
 *   missing, empty, negative and non-numeric ClientID and ClientTransactionID, wrong HTTP methods,
 *   bad URLs and device numbers, `Value` in every GET answer.
 *
 * Every rule cites the ConformU file and method it reproduces. What is reproduced and what is
 * deliberately skipped is listed by name ({@linkcode REPRODUCED_PROTOCOL_TESTS},
 * {@linkcode SKIPPED_PROTOCOL_TESTS}, {@linkcode REPRODUCED_CONFORMANCE_TESTS},
 * {@linkcode SKIPPED_CONFORMANCE_TESTS}); {@linkcode conformuTestNames} reads the names out of
 * ConformU's source so that a test can prove the lists cover it. A situation a rule here does not
 * reproduce is an ERROR finding, never a silent pass.
 *
 * Deliberate departures, none of which can turn an ISSUE into an OK: ConformU's waits (1 s after
 * creating the device, 0.5 s after Connected=True, its 500 ms polls of Connecting) are not
 * waited, since they only give slow drivers time; timing targets (LogTiming) are not measured.
 */

/** The level of a finding, as ConformU logs it. */
export type Level = "OK" | "INFO" | "ISSUE" | "ERROR";

/** One line of ConformU's log. */
export interface Finding {
  readonly level: Level;
  /** ConformU's test name (the member or check). */
  readonly member: string;
  readonly message: string;
}

/** The device to check. */
export interface ConformuTarget {
  /** The Alpaca server, `http://127.0.0.1:PORT`. */
  readonly base: string;
  readonly device: "safetymonitor" | "observingconditions";
  /** The device number (0). */
  readonly number?: number;
}

/** ConformU settings the conformance check reads (Settings.cs defaults). */
export interface ConformanceOptions {
  /** `ObservingConditionsMaxRetries` (5): retries of a sensor that answers "not ready". */
  readonly notReadyRetries?: number;
  /** `ObservingConditionsRetryTime` (1 s) between them, in ms. */
  readonly notReadyWaitMs?: number;
  /** `ConnectDisconnectTimeout` (5 s) for Connecting to turn false, in ms. */
  readonly connectTimeoutMs?: number;
}

/** AlpacaConfiguration.cs settings the protocol check reads. */
export interface ProtocolOptions {
  /** `ProtocolStrictChecks`; the checks here default to strict (ConformU's default is off). */
  readonly strict?: boolean;
  /** `ProtocolTestPrimaryUrlStructure`: the /apx, /api/1, POST and DELETE probes (INFO only). */
  readonly primaryUrlStructure?: boolean;
  /** `ProtocolReportNotImplementedErrors` (false). */
  readonly reportNotImplemented?: boolean;
}

/** The findings that fail a device: every ISSUE and ERROR. */
export function problems(findings: readonly Finding[]): Finding[] {
  return findings.filter((f) => f.level === "ISSUE" || f.level === "ERROR");
}

// ---------------------------------------------------------------------------------------------
// The names of ConformU's checks, reproduced or skipped.
// ---------------------------------------------------------------------------------------------

/**
 * AlpacaProtocolTestManager.cs test names reproduced by {@linkcode protocolCheck}: the message
 * prefixes of its CallApi/SendToDevice calls (a literal method appended in brackets), and the
 * member calls of TestCommon, TestConnect, TestSafetyMonitor and TestObservingConditions.
 */
export const REPRODUCED_PROTOCOL_TESTS: readonly string[] = [
  // TestAlpacaProtocol: connect, disconnect, re-connect with re-ordered parameters, disconnect.
  "True [Connected]",
  "False [Connected]",
  // TestCommon, ProtocolTestPrimaryUrlStructure.
  'Bad Alpaca URL base element (api = apx)"',
  "Bad Alpaca URL version element (no v)",
  "Bad Alpaca URL version element (no number)",
  "Bad Alpaca URL version element (capital V)",
  "Bad Alpaca URL version element (v2)",
  "Value empty [Connected]",
  "Number [Connected]",
  "Empty [Connected]",
  // TestCommon: URL structure and bad Connected values.
  "Bad Alpaca URL device type (capitalised {settings.DeviceType.Value.ToString().ToUpper()})",
  "Bad Alpaca URL device type (baddevicetype)",
  "Bad Alpaca URL device number (-1)",
  "Bad Alpaca URL device number (99999)",
  "Bad Alpaca URL device number (A)",
  "Bad Alpaca URL method name (descrip)",
  "Bad parameter value - Empty string [Connected]",
  "Bad parameter value - Number [Connected]",
  "Bad parameter value - Meaningless string [Connected]",
  // GetNoParameters, GetOneParameter, PutNoParameters, PutOneParameter, TestBadIdValues.
  "Good ClientID and ClientTransactionID casing",
  "Good ClientID and ClientTransactionID casing with additional parameter",
  "Different ClientID casing",
  "Different ClientTransactionID casing",
  "Parameter {parameterName} (Good casing)",
  "Parameter {parameterName} (Good casing with extra parameter)",
  "Parameter {parameterName} (Bad value)",
  "Parameter {parameterName} (Inverted casing)",
  "Good ID name casing",
  "Good ID casing + extra parameter",
  "Bad ClientID casing",
  "Bad ClientTransactionID casing",
  "Parameter {parameterName} (Good casing + extra parameter)",
  "Parameter {parameterName} (Bad casing)",
  "ClientID is empty",
  "ClientID is white space",
  "ClientID is negative",
  "ClientID is not numeric",
  "ClientTransactionID is empty",
  "ClientTransactionID is white space",
  "ClientTransactionID is negative",
  "ClientTransactionID is a string",
  // Member calls of TestCommon and TestConnect.
  'GetNoParameters("Connected")',
  'GetNoParameters("Description")',
  'GetNoParameters("DriverInfo")',
  'GetNoParameters("DriverVersion")',
  'GetNoParameters("InterfaceVersion")',
  'GetNoParameters("Name")',
  'GetNoParameters("SupportedActions")',
  'GetNoParameters("DeviceState")',
  'PutNoParameters("Disconnect")',
  'PutNoParameters("Connect")',
  'GetNoParameters("Connecting")',
  // TestSafetyMonitor.
  'GetNoParameters("IsSafe")',
  // TestObservingConditions.
  'GetNoParameters("AveragePeriod")',
  'PutOneParameter("AveragePeriod", "AveragePeriod")',
  'GetNoParameters("CloudCover")',
  'GetNoParameters("DewPoint")',
  'GetNoParameters("Humidity")',
  'GetNoParameters("Pressure")',
  'GetNoParameters("RainRate")',
  'GetNoParameters("SkyBrightness")',
  'GetNoParameters("SkyQuality")',
  'GetNoParameters("SkyTemperature")',
  'GetNoParameters("StarFWHM")',
  'GetNoParameters("Temperature")',
  'GetNoParameters("WindDirection")',
  'GetNoParameters("WindGust")',
  'GetNoParameters("WindSpeed")',
  'PutNoParameters("Refresh")',
  'GetOneParameter("SensorDescription", "SensorName", "Pressure")',
  'GetOneParameter("TimeSinceLastUpdate", "SensorName", "Pressure")',
  'GetOneParameter("TimeSinceLastUpdate", "SensorName", "")',
];

/** AlpacaProtocolTestManager.cs test names not reproduced, each with the reason. */
export const SKIPPED_PROTOCOL_TESTS: Readonly<Record<string, string>> = {
  "True [Tracking]": "Telescope only (TestTelescope)",
  "False [Tracking]": "Telescope only (TestTelescope)",
  "Parameter {parameterName1} and {parameterName2} (Good casing)":
    "GetTwoParameters: no SafetyMonitor or ObservingConditions member takes two parameters",
  "Parameter {parameterName1} and {parameterName2} (Good casing with extra parameter)":
    "GetTwoParameters: no SafetyMonitor or ObservingConditions member takes two parameters",
  "Parameters {parameterName1} and {parameterName2} (Good casing)":
    "PutTwoParameters: no SafetyMonitor or ObservingConditions member takes two parameters",
  "Parameters {parameterName1} and {parameterName2} (Good casing with extra parameter)":
    "PutTwoParameters: no SafetyMonitor or ObservingConditions member takes two parameters",
  "Parameter {parameterName1} (Bad value)":
    "Get/PutTwoParameters: no SafetyMonitor or ObservingConditions member takes two parameters",
  "Parameter {parameterName2} (Bad value)":
    "Get/PutTwoParameters: no SafetyMonitor or ObservingConditions member takes two parameters",
  "Parameter {parameterName1} (Inverted casing)":
    "GetTwoParameters: no SafetyMonitor or ObservingConditions member takes two parameters",
  "Parameter {parameterName2} (Inverted casing)":
    "GetTwoParameters: no SafetyMonitor or ObservingConditions member takes two parameters",
  "Parameter {parameterName1} (Bad casing)":
    "PutTwoParameters: no SafetyMonitor or ObservingConditions member takes two parameters",
  "Parameter {parameterName2} (Bad casing)":
    "PutTwoParameters: no SafetyMonitor or ObservingConditions member takes two parameters",
};

/**
 * ConformU conformance checks reproduced by {@linkcode conformanceCheck}: the members of
 * ObservingConditionsTester's `ObservingConditionsProperty` and SafetyMonitorTester's
 * `RequiredProperty`, and the base class's steps.
 */
export const REPRODUCED_CONFORMANCE_TESTS: readonly string[] = [
  "DeviceTesterBaseClass.ValidateInterfaceVersion",
  "DeviceTesterBaseClass.Connect",
  "DeviceTesterBaseClass.CheckCommonMethods",
  "DeviceTesterBaseClass.Disconnect",
  "SafetyMonitorTester.RequiredProperty.PropIsSafe",
  "ObservingConditionsProperty.AveragePeriod",
  "ObservingConditionsProperty.CloudCover",
  "ObservingConditionsProperty.DewPoint",
  "ObservingConditionsProperty.Humidity",
  "ObservingConditionsProperty.Pressure",
  "ObservingConditionsProperty.RainRate",
  "ObservingConditionsProperty.SkyBrightness",
  "ObservingConditionsProperty.SkyQuality",
  "ObservingConditionsProperty.SkyTemperature",
  "ObservingConditionsProperty.StarFWHM",
  "ObservingConditionsProperty.Temperature",
  "ObservingConditionsProperty.WindDirection",
  "ObservingConditionsProperty.WindGust",
  "ObservingConditionsProperty.WindSpeed",
  "ObservingConditionsProperty.TimeSinceLastUpdateLatest",
  "ObservingConditionsProperty.TimeSinceLastUpdateCloudCover",
  "ObservingConditionsProperty.TimeSinceLastUpdateDewPoint",
  "ObservingConditionsProperty.TimeSinceLastUpdateHumidity",
  "ObservingConditionsProperty.TimeSinceLastUpdatePressure",
  "ObservingConditionsProperty.TimeSinceLastUpdateRainRate",
  "ObservingConditionsProperty.TimeSinceLastUpdateSkyBrightness",
  "ObservingConditionsProperty.TimeSinceLastUpdateSkyQuality",
  "ObservingConditionsProperty.TimeSinceLastUpdateSkyTemperature",
  "ObservingConditionsProperty.TimeSinceLastUpdateStarFwhm",
  "ObservingConditionsProperty.TimeSinceLastUpdateTemperature",
  "ObservingConditionsProperty.TimeSinceLastUpdateWindDirection",
  "ObservingConditionsProperty.TimeSinceLastUpdateWindGust",
  "ObservingConditionsProperty.TimeSinceLastUpdateWindSpeed",
  "ObservingConditionsProperty.SensorDescriptionCloudCover",
  "ObservingConditionsProperty.SensorDescriptionDewPoint",
  "ObservingConditionsProperty.SensorDescriptionHumidity",
  "ObservingConditionsProperty.SensorDescriptionPressure",
  "ObservingConditionsProperty.SensorDescriptionRainRate",
  "ObservingConditionsProperty.SensorDescriptionSkyBrightness",
  "ObservingConditionsProperty.SensorDescriptionSkyQuality",
  "ObservingConditionsProperty.SensorDescriptionSkyTemperature",
  "ObservingConditionsProperty.SensorDescriptionStarFwhm",
  "ObservingConditionsProperty.SensorDescriptionTemperature",
  "ObservingConditionsProperty.SensorDescriptionWindDirection",
  "ObservingConditionsProperty.SensorDescriptionWindGust",
  "ObservingConditionsProperty.SensorDescriptionWindSpeed",
];

/** ConformU conformance checks not reproduced, each with the reason. */
export const SKIPPED_CONFORMANCE_TESTS: Readonly<Record<string, string>> = {
  "DeviceTesterBaseClass.PerformanceTestCommon":
    "CheckPerformance runs only with TestPerformance, off by default (Settings.cs); it measures rates and logs OK or INFO, never an ISSUE",
  "SafetyMonitorTester.PerformanceProperty.IsSafe": "CheckPerformance, off by default",
  "SafetyMonitorTester.PerformanceProperty.GetSafetyState": "CheckPerformance, off by default",
  "SafetyMonitorTester.PerformanceProperty.SetSafetyState": "CheckPerformance, off by default",
  "SafetyMonitorTester.PerformanceProperty.ClearSafetyState": "CheckPerformance, off by default",
  "DeviceTesterBaseClass.CheckConfiguration":
    "reports ConformU's own settings (configuration alerts), nothing of the device",
  "DeviceTesterBaseClass.ReportTiming":
    "timings are LogTiming entries, not issues; the tests here measure no time",
};

// ---------------------------------------------------------------------------------------------
// Reading the names out of ConformU's source.
// ---------------------------------------------------------------------------------------------

/** A C# string literal's content (`$` interpolation kept as written, escapes resolved). */
function csharpString(literal: string): string {
  return literal.replace(/^\$?"|"$/g, "").replace(/\\(.)/g, "$1");
}

const LITERAL = String.raw`\$?"(?:[^"\\]|\\.)*"`;

/**
 * The test names of AlpacaProtocolTestManager.cs, as {@linkcode REPRODUCED_PROTOCOL_TESTS}
 * spells them: the message prefix of every CallApi and SendToDevice call (a literal method
 * appended in brackets), and the member calls (GetNoParameters and its kin, with their literal
 * arguments) of TestCommon, TestConnect, TestSafetyMonitor and TestObservingConditions.
 *
 * @param source The text of ConformU/AlpacaProtocolTestManager.cs.
 * @returns The names, sorted, each once.
 */
export function conformuTestNames(source: string): string[] {
  const names = new Set<string>();
  const callApi = new RegExp(String.raw`\bCallApi\(\s*(${LITERAL})(?:\s*,\s*(${LITERAL}))?`, "g");
  for (const [, prefix, method] of source.matchAll(callApi)) {
    names.add(
      method === undefined
        ? csharpString(prefix!)
        : `${csharpString(prefix!)} [${csharpString(method)}]`,
    );
  }
  // SendToDevice(testName, messagePrefix, ...): the plumbing call of CallApi passes variables.
  const send = new RegExp(String.raw`\bSendToDevice\(\s*${LITERAL}\s*,\s*(${LITERAL})`, "g");
  for (const [, prefix] of source.matchAll(send)) names.add(csharpString(prefix!));
  for (const fn of ["TestCommon", "TestConnect", "TestSafetyMonitor", "TestObservingConditions"]) {
    const start = source.search(new RegExp(String.raw`private async Task ${fn}\(`));
    if (start < 0) throw new Error(`AlpacaProtocolTestManager.cs has no ${fn}()`);
    const rest = source.slice(start + 1);
    const end = rest.search(/private async Task \w+\(|#endregion/);
    const body = rest.slice(0, end < 0 ? undefined : end);
    const helper = /\b((?:Get|Put)(?:No|One|Two)Parameters?)\(([^;]*)\);/g;
    for (const [, name, args] of body.matchAll(helper)) {
      const literals = [...args!.matchAll(new RegExp(LITERAL, "g"))].map((m) =>
        JSON.stringify(csharpString(m[0]))
      );
      names.add(`${name}(${literals.join(", ")})`);
    }
  }
  return [...names].sort();
}

/**
 * The conformance test names of ConformU's testers, as {@linkcode REPRODUCED_CONFORMANCE_TESTS}
 * spells them: the members of ObservingConditionsTester's `ObservingConditionsProperty` and of
 * SafetyMonitorTester's `RequiredProperty` and `PerformanceProperty`.
 *
 * @param safetyMonitor The text of ConformU/Conform/SafetyMonitorTester.cs.
 * @param observingConditions The text of ConformU/Conform/ObservingConditionsTester.cs.
 * @returns The names, sorted.
 */
export function conformuTesterNames(safetyMonitor: string, observingConditions: string): string[] {
  const members = (source: string, name: string): string[] => {
    const body = new RegExp(String.raw`enum ${name}\s*\{([^}]*)\}`).exec(source)?.[1];
    if (body === undefined) throw new Error(`no enum ${name}`);
    return body.replace(/\/\/.*$/gm, "").split(",").map((m) => m.trim().split(/\s|=/)[0]!)
      .filter((m) => m !== "");
  };
  return [
    ...members(observingConditions, "ObservingConditionsProperty").map((m) =>
      `ObservingConditionsProperty.${m}`
    ),
    ...members(safetyMonitor, "RequiredProperty").map((m) =>
      `SafetyMonitorTester.RequiredProperty.${m}`
    ),
    ...members(safetyMonitor, "PerformanceProperty").map((m) =>
      `SafetyMonitorTester.PerformanceProperty.${m}`
    ),
  ].sort();
}

// ---------------------------------------------------------------------------------------------
// The log.
// ---------------------------------------------------------------------------------------------

class Log {
  readonly findings: Finding[] = [];
  ok(member: string, message: string): void {
    this.findings.push({ level: "OK", member, message });
  }
  info(member: string, message: string): void {
    this.findings.push({ level: "INFO", member, message });
  }
  issue(member: string, message: string): void {
    this.findings.push({ level: "ISSUE", member, message });
  }
  error(member: string, message: string): void {
    this.findings.push({ level: "ERROR", member, message });
  }
}

// ---------------------------------------------------------------------------------------------
// The client ConformU's conformance check speaks through (ASCOM.Alpaca.Clients).
// ---------------------------------------------------------------------------------------------

/** Alpaca error numbers (ASCOM.Common AlpacaErrors). */
const ERR = {
  notImplemented: 0x400,
  invalidValue: 0x401,
  valueNotSet: 0x402,
  notConnected: 0x407,
  invalidOperation: 0x40b,
  actionNotImplemented: 0x40c,
} as const;

const EXCEPTION_NAMES: Readonly<Record<number, string>> = {
  [ERR.notImplemented]: "NotImplementedException",
  [ERR.invalidValue]: "InvalidValueException",
  [ERR.valueNotSet]: "ValueNotSetException",
  [ERR.notConnected]: "NotConnectedException",
  [ERR.invalidOperation]: "InvalidOperationException",
  [ERR.actionNotImplemented]: "ActionNotImplementedException",
};

/**
 * An ASCOM error as the Alpaca client throws it: ASCOM.Common's ExceptionFromErrorCode maps
 * ErrorNumber to an exception class (0x400 NotImplementedException, 0x401 InvalidValueException,
 * 0x402 ValueNotSetException, 0x407 NotConnectedException, 0x40B InvalidOperationException,
 * 0x40C ActionNotImplementedException, anything else a DriverException). An HTTP status other
 * than 200, or a body the client cannot read, is a DriverException too (number 0).
 */
class AscomError extends Error {
  constructor(readonly number: number, message: string) {
    super(message);
  }
  get exceptionName(): string {
    return EXCEPTION_NAMES[this.number] ?? `DriverException(0x${this.number.toString(16)})`;
  }
}

/** Request parameters in their order: name and value. */
type Params = readonly (readonly [string, string])[];

/** The types the client reads a `Value` into. */
type ValueType = "boolean" | "number" | "string" | "array";

/** The Alpaca client ConformU's conformance check uses (ASCOM.Alpaca.Clients, strict casing). */
class DeviceClient {
  #transaction = 0;
  #url: string;

  constructor(target: ConformuTarget) {
    this.#url = `${target.base}/api/v1/${target.device}/${target.number ?? 0}`;
  }

  async #send(method: "GET" | "PUT", member: string, params: Params): Promise<unknown> {
    // Globals.CLIENT_NUMBER_DEFAULT is 1; the client numbers its transactions from 1.
    const all = new URLSearchParams([
      ["ClientID", "1"],
      ["ClientTransactionID", String(++this.#transaction)],
      ...params.map(([n, v]) => [n, v]),
    ]);
    const res = method === "GET"
      ? await fetch(`${this.#url}/${member}?${all}`, { headers: { accept: "application/json" } })
      : await fetch(`${this.#url}/${member}`, {
        method,
        headers: {
          accept: "application/json",
          "content-type": "application/x-www-form-urlencoded",
        },
        body: all.toString(),
      });
    const text = await res.text();
    if (res.status !== 200) {
      throw new AscomError(0, `HTTP status ${res.status} from ${method} ${member}: ${text.trim()}`);
    }
    let body: Record<string, unknown>;
    try {
      body = JSON.parse(text);
    } catch {
      throw new AscomError(0, `${method} ${member} answered JSON the client cannot read: ${text}`);
    }
    const number = body.ErrorNumber;
    if (typeof number === "number" && number !== 0) {
      throw new AscomError(number, String(body.ErrorMessage));
    }
    return body.Value;
  }

  /** A property; the client reads `Value` into the member's type or throws. */
  async get<T>(member: string, type: ValueType, query: Params = []): Promise<T> {
    const value = await this.#send("GET", member, query);
    if ((Array.isArray(value) ? "array" : typeof value) !== type) {
      throw new AscomError(0, `GET ${member}: Value ${JSON.stringify(value)} is not a ${type}`);
    }
    return value as T;
  }

  async put(member: string, form: Params = []): Promise<unknown> {
    return await this.#send("PUT", member, form);
  }
}

function messageOf(err: unknown): string {
  return err instanceof Error ? err.message : String(err);
}

function numberOf(err: unknown): number | undefined {
  return err instanceof AscomError ? err.number : undefined;
}

type MemberType = "Property" | "Method";
type Required = "Optional" | "Mandatory" | "MustBeImplemented" | "MustNotBeImplemented";

/**
 * DeviceTesterBaseClass.cs HandleException: an Alpaca NotImplementedException is judged by
 * whether the member is required; every other error is an "Unexpected error" ISSUE.
 */
function handleException(
  log: Log,
  member: string,
  _type: MemberType,
  required: Required,
  err: unknown,
  userMessage = "",
): void {
  if (numberOf(err) === ERR.notImplemented) {
    const name = "NotImplementedException";
    switch (required) {
      case "Mandatory":
        return log.issue(
          member,
          `This member is mandatory but returned a ${name} error, it must function per the ASCOM specification.`,
        );
      case "MustNotBeImplemented":
        return log.ok(member, `${userMessage} and a ${name} error was generated as expected`);
      case "MustBeImplemented":
        return log.issue(
          member,
          `${userMessage} and a ${name} error was returned, this method must function per the ASCOM specification.`,
        );
      case "Optional":
        return log.ok(member, `Optional member returned a ${name} error.`);
    }
  }
  log.issue(
    member,
    `Unexpected error${userMessage === "" ? ":" : ` - ${userMessage}:`} ${messageOf(err)}`,
  );
}

/** DeviceTesterBaseClass.cs IsInvalidValueException. */
function isInvalidValue(log: Log, member: string, err: unknown): boolean {
  const number = numberOf(err);
  if (number === ERR.invalidValue) return true;
  if (number === ERR.invalidOperation) {
    log.issue(
      member,
      "Received ASCOM.InvalidOperationException rather than ASCOM.InvalidValueException",
    );
  }
  return false;
}

/** DeviceTesterBaseClass.cs HandleInvalidValueExceptionAsOk. */
function invalidValueAsOk(
  log: Log,
  member: string,
  type: MemberType,
  required: Required,
  err: unknown,
  message: string,
): void {
  if (isInvalidValue(log, member, err)) log.ok(member, message);
  else handleException(log, member, type, required, err);
}

// ---------------------------------------------------------------------------------------------
// The conformance check (ConformanceTestManager.cs and the device testers).
// ---------------------------------------------------------------------------------------------

/** ASCOM.Common DeviceCapabilities: the interface versions that exist, per device type. */
const VALID_INTERFACES = { safetymonitor: [1, 2, 3], observingconditions: [1, 2] } as const;
/** DeviceCapabilities.HasConnectAndDeviceState: the Platform 7 interfaces. */
const CONNECT_AND_DEVICESTATE = { safetymonitor: 3, observingconditions: 2 } as const;

/** DeviceTesterBaseClass.cs CheckCommonMethods, DeviceState: the operational properties. */
const OPERATIONAL: Readonly<Record<ConformuTarget["device"], readonly string[]>> = {
  safetymonitor: ["IsSafe"],
  observingconditions: [
    "CloudCover",
    "DewPoint",
    "Humidity",
    "Pressure",
    "RainRate",
    "SkyBrightness",
    "SkyQuality",
    "SkyTemperature",
    "StarFWHM",
    "Temperature",
    "WindDirection",
    "WindGust",
    "WindSpeed",
  ],
};

/** DeviceTesterBaseClass.cs: the safety actions of the draft ISafetyMonitorV4. */
const SAFETY_EVENTS = "SafetyEvents";
const SET_EXTERNAL_EVENTS = "SetExternalEvents";
const CLEAR_EXTERNAL_EVENTS = "ClearExternalEvents";

/** DeviceTesterBaseClass.cs: the test event (SAFETY_SOURCE_NAME, SAFETY_RULE_NAME, ...). */
const TEST_EVENT = {
  Source: "Conform Universal",
  Name: "Test Rule",
  Type: "CloudCover",
  Trigger: "AboveThreshold",
  Description: "Cloud cover above safety limit: 30%",
} as const;

/** What ObservingConditionsTester records per sensor for its consistency check. */
interface SensorRecord {
  readonly value: Set<string>;
  readonly description: Set<string>;
  readonly lastUpdate: Set<string>;
}

interface Conformance {
  readonly log: Log;
  readonly client: DeviceClient;
  readonly target: ConformuTarget;
  readonly options: Settings;
  readonly interfaceVersion: number;
  readonly sensors: SensorRecord;
}

/** ConformanceOptions with ConformU's defaults filled in. */
type Settings = { readonly [K in keyof ConformanceOptions]-?: ConformanceOptions[K] };

/**
 * Runs ConformU's conformance check of one device (ConformanceTestManager.cs TestDevice, over
 * DeviceTesterBaseClass.cs and SafetyMonitorTester.cs or ObservingConditionsTester.cs) and
 * returns its log. The device is left disconnected, as ConformU leaves it.
 *
 * @param target The server and the device.
 * @param options ConformU's settings (its defaults when left out).
 * @returns Every finding, in ConformU's order.
 */
export async function conformanceCheck(
  target: ConformuTarget,
  options: ConformanceOptions = {},
): Promise<Finding[]> {
  const log = new Log();
  const client = new DeviceClient(target);
  const settings: Settings = {
    notReadyRetries: options.notReadyRetries ?? 5,
    notReadyWaitMs: options.notReadyWaitMs ?? 1000,
    connectTimeoutMs: options.connectTimeoutMs ?? 5000,
  };
  // SafetyMonitorTester.CreateDevice / ObservingConditionsTester.CreateDevice:
  // DeviceTesterBaseClass.ValidateInterfaceVersion; ConformanceTestManager reports a failure as
  // an ISSUE and tests no further.
  let interfaceVersion: number;
  try {
    interfaceVersion = await client.get<number>("interfaceversion", "number");
  } catch (err) {
    log.issue("Initialise", `Unable to access the device: ${messageOf(err)}`);
    return log.findings;
  }
  if (!(VALID_INTERFACES[target.device] as readonly number[]).includes(interfaceVersion)) {
    log.issue(
      "CreateDevice",
      `The returned interface version is invalid for a ${target.device} device: ${interfaceVersion}`,
    );
    return log.findings;
  }
  log.ok("CreateDevice", `Found a valid interface version: ${interfaceVersion}`);
  const at: Conformance = {
    log,
    client,
    target,
    options: settings,
    interfaceVersion,
    sensors: { value: new Set(), description: new Set(), lastUpdate: new Set() },
  };
  // SafetyMonitorTester.PreConnectChecks is empty (its IsSafe check was removed in March 2025).
  // ConformanceTestManager.TestDevice: a failed connection abandons the test.
  try {
    await connect(at);
  } catch (err) {
    log.issue(
      "ConnectToDevice",
      `Connection exception - further testing abandoned: ${messageOf(err)}`,
    );
    return log.findings;
  }
  await checkCommonMethods(at);
  if (target.device === "safetymonitor") {
    await safetyMonitorProperties(at);
  } else {
    await conditionsProperties(at);
    await conditionsMethods(at);
  }
  // CheckPerformance: TestPerformance is off by default (SKIPPED_CONFORMANCE_TESTS).
  try {
    await disconnect(at);
  } catch (err) {
    // ConformanceTestManager.TestDevice, the Disconnect stage.
    log.issue("Connected", `Exception when setting Connected to False: ${messageOf(err)}`);
  }
  return log.findings;
}

function hasConnect(at: Conformance): boolean {
  return at.interfaceVersion >= CONNECT_AND_DEVICESTATE[at.target.device];
}

/** DeviceTesterBaseClass.cs WaitWhile: polls until false, or throws after the timeout. */
async function waitWhile(what: string, condition: () => Promise<boolean>, timeoutMs: number) {
  const until = Date.now() + timeoutMs;
  while (await condition()) {
    if (Date.now() > until) {
      throw new Error(`The "${what}" operation exceeded its ${timeoutMs / 1000} second timeout.`);
    }
    await new Promise((resolve) => setTimeout(resolve, 100));
  }
}

/**
 * DeviceTesterBaseClass.cs Connect and Disconnect, Platform 7: the method runs only when no
 * connection change is in progress (else an INFO), then Connecting is waited out.
 */
async function unlessConnecting(
  at: Conformance,
  test: string,
  waiting: string,
  run: () => Promise<void>,
): Promise<void> {
  const connecting = () => at.client.get<boolean>("connecting", "boolean");
  if (await connecting()) {
    at.log.info(
      test,
      "Ignoring this request because a Connect() or Disconnect() operation is already in progress.",
    );
    return;
  }
  await run();
  await waitWhile(waiting, connecting, at.options.connectTimeoutMs);
}

/** Connected Get must say `expected`, else the stage fails with `message`. */
async function expectConnected(at: Conformance, expected: boolean, message: string) {
  if (await at.client.get<boolean>("connected", "boolean") !== expected) throw new Error(message);
}

/** Sets Connected, which Connected Get must then say (DeviceTesterBaseClass.cs Connect). */
async function setConnected(at: Conformance, value: boolean, failure: string, ok: string) {
  await at.client.put("connected", [["Connected", value ? "True" : "False"]]);
  await expectConnected(at, value, failure);
  at.log.ok("Connected", ok);
}

/** DeviceTesterBaseClass.cs Connect. */
async function connect(at: Conformance): Promise<void> {
  const { client, log } = at;
  if (hasConnect(at)) {
    await unlessConnecting(at, "Connect", "Connecting to device", async () => {
      await setConnected(
        at,
        true,
        "Set Connected True - The device connected without error but Connected Get returned False.",
        "Connected to device successfully using Connected = True",
      );
      // AllowConnectedTrueAfterDisconnect is false by default.
      await setConnected(
        at,
        false,
        "Set Connected False - The device disconnected without error but Connected Get returned True.",
        "Disconnected from device successfully using Connected = False",
      );
      await client.put("connect");
    });
  } else {
    await client.put("connected", [["Connected", "True"]]);
  }
  await expectConnected(
    at,
    true,
    "The device connected without error but Connected Get returned False.",
  );
  log.ok("Connect", "Connected to device successfully using Connect()");
}

/** DeviceTesterBaseClass.cs Disconnect. */
async function disconnect(at: Conformance): Promise<void> {
  if (hasConnect(at)) {
    await unlessConnecting(at, "Disconnect", "Disconnecting from device", async () => {
      await at.client.put("disconnect");
    });
  } else {
    await at.client.put("connected", [["Connected", "False"]]);
  }
  await expectConnected(
    at,
    false,
    "The device disconnected without error but Connected Get returned True.",
  );
  at.log.ok("Disconnect", "Disconnected from device successfully using Disconnect()");
}

/** DeviceTesterBaseClass.cs CheckCommonMethods. */
async function checkCommonMethods(at: Conformance): Promise<void> {
  const { client, log } = at;
  try {
    const version = await client.get<number>("interfaceversion", "number");
    if (version < 1) {
      log.issue(
        "InterfaceVersion",
        `InterfaceVersion must be 1 or greater but driver returned: ${version}`,
      );
    } else log.ok("InterfaceVersion", String(version));
  } catch (err) {
    handleException(log, "InterfaceVersion", "Property", "Mandatory", err);
  }
  try {
    log.ok("Connected", String(await client.get<boolean>("connected", "boolean")));
  } catch (err) {
    log.issue("Connected", messageOf(err));
  }
  for (
    const [member, name, empty] of [
      ["description", "Description", "No description string"],
      ["driverinfo", "DriverInfo", "No DriverInfo string"],
      ["driverversion", "DriverVersion", "No DriverVersion string"],
      ["name", "Name", "Name is empty"],
    ] as const
  ) {
    try {
      const text = await client.get<string>(member, "string");
      if (text === "") log.info(name, empty);
      else log.ok(name, text);
    } catch (err) {
      // DriverVersion logs any error as an ISSUE; the others go through HandleException.
      if (name === "DriverVersion") log.issue(name, messageOf(err));
      else handleException(log, name, "Property", "Mandatory", err);
    }
  }
  const safety = { get: false, set: false, clear: false };
  try {
    const actions = await client.get<unknown[]>("supportedactions", "array");
    if (actions.length === 0) log.ok("SupportedActions", "Driver returned an empty action list");
    actions.forEach((action, i) => {
      if (typeof action !== "string") {
        log.issue(
          "SupportedActions",
          `Actions must be strings. The type of action ${i + 1} ${action} is: ${typeof action}`,
        );
      } else if (action === "") {
        log.issue("SupportedActions", `Supported action ${i + 1} Is an empty string`);
      } else {
        log.ok("SupportedActions", `Found action: ${action}`);
        const name = action.trim().toLowerCase();
        if (name === SAFETY_EVENTS.toLowerCase()) safety.get = true;
        if (name === SET_EXTERNAL_EVENTS.toLowerCase()) safety.set = true;
        if (name === CLEAR_EXTERNAL_EVENTS.toLowerCase()) safety.clear = true;
      }
    });
  } catch (err) {
    handleException(log, "SupportedActions", "Property", "Optional", err);
    log.issue("SupportedActions", messageOf(err));
  }
  await safetyActions(at, safety);
  if (hasConnect(at)) await deviceState(at);
  else {log.info(
      "DeviceState",
      "DeviceState tests omitted - DeviceState is not a member of this interface version.",
    );}
}

/** The answer of the `SafetyEvents` action (DeviceTesterBaseClass.cs GetSafetyStates). */
async function safetyEvents(client: DeviceClient): Promise<Record<string, unknown>[]> {
  const text = await client.put("action", [["Action", SAFETY_EVENTS], ["Parameters", ""]]);
  if (typeof text !== "string" || text === "") {
    throw new AscomError(
      ERR.invalidValue,
      `Action - ${SAFETY_EVENTS} - Returned string is null or empty.`,
    );
  }
  const events = JSON.parse(text);
  if (!Array.isArray(events)) throw new Error(`${SAFETY_EVENTS} is not a JSON array: ${text}`);
  return events;
}

/** An Action that must be refused: any error passes (DeviceTesterBaseClass.cs, the null checks). */
async function mustRefuse(at: Conformance, test: string, name: string, kind: string) {
  try {
    await at.client.put("action", [["Action", name], ["Parameters", ""]]);
    at.log.issue(test, `The device did not reject a ${kind} serialised safety state string.`);
  } catch {
    at.log.ok(test, `The device correctly rejected a ${kind} JSON safety state string.`);
  }
}

/** IsSafe must be `expected` (DeviceTesterBaseClass.cs, the SetExternalEvents checks). */
async function expectIsSafe(
  at: Conformance,
  test: string,
  expected: boolean,
  ok: string,
  bad: string,
) {
  try {
    if (await at.client.get<boolean>("issafe", "boolean") === expected) at.log.ok(test, ok);
    else at.log.issue(test, bad);
  } catch (err) {
    at.log.issue(test, `Exception calling IsSafe: ${messageOf(err)}`);
  }
}

/**
 * DeviceTesterBaseClass.cs CheckCommonMethods, SetExternalEvents: IsSafe must be true first; the
 * test event must then be listed once by SafetyEvents with its values, and IsSafe false; null and
 * empty parameters must be refused. Returns whether the event was set.
 */
async function setExternalEvents(at: Conformance, id: string): Promise<boolean> {
  const { client, log } = at;
  const test = `Action - ${SET_EXTERNAL_EVENTS}`;
  let set = false;
  await expectIsSafe(
    at,
    test,
    true,
    "IsSafe returned true at the start of the test.",
    "IsSafe is false at the start of the test. This invalidates the check that IsSafe is false after an external event is sent.",
  );
  try {
    const event = { ...TEST_EVENT, Id: id, EventTimeUtc: new Date().toISOString() };
    await client.put("action", [
      ["Action", SET_EXTERNAL_EVENTS],
      ["Parameters", JSON.stringify([event])],
    ]);
    const found = (await safetyEvents(client)).filter((e) => e.Id === id);
    if (found.length === 0) {
      log.issue(
        test,
        "The Conform test safety event was not added to the events in the device's GetSafetyState response.",
      );
    } else if (found.length > 1) {
      log.issue(
        test,
        `More than 1 Conform test rules were found in the device's SafetyState response: ${found.length}.`,
      );
    } else {
      set = true;
      log.ok(
        test,
        "The Conform test safety event was successfully added to the device's GetSafetyState response.",
      );
      const got = found[0]!;
      if (
        (Object.keys(TEST_EVENT) as (keyof typeof TEST_EVENT)[]).every((k) =>
          got[k] === TEST_EVENT[k]
        )
      ) {
        log.ok(test, "The Conform test safety event values all match those set.");
      } else {
        log.issue(
          test,
          "One or more of the returned Conform test safety event values did not match those set.",
        );
      }
      await expectIsSafe(
        at,
        test,
        false,
        "IsSafe returned false, as expected, after the test safety event was set.",
        "IsSafe returned true after the test safety event was set.",
      );
    }
  } catch (err) {
    log.issue(test, `Error while trying to add safety event: ${messageOf(err)}`);
  }
  // ConformU sends these to the action name "SetSafetyState" (sic), with null and "".
  await mustRefuse(at, test, "SetSafetyState", "null");
  await mustRefuse(at, test, "SetSafetyState", "empty");
  return set;
}

/**
 * DeviceTesterBaseClass.cs CheckCommonMethods, ClearExternalEvents: the test event, when it was
 * set, must be gone from SafetyEvents after it; null and empty parameters must be refused.
 */
async function clearExternalEvents(at: Conformance, id: string, set: boolean): Promise<void> {
  const { client, log } = at;
  const test = `Action - ${CLEAR_EXTERNAL_EVENTS}`;
  if (set) {
    try {
      await client.put("action", [
        ["Action", CLEAR_EXTERNAL_EVENTS],
        ["Parameters", JSON.stringify([id])],
      ]);
      if ((await safetyEvents(client)).some((e) => e.Id === id)) {
        log.issue(
          test,
          `The Conform test event: ${id} was found in the device's SafetyState response after it was cleared.`,
        );
      } else log.ok(test, "Conform test event cleared OK");
    } catch (err) {
      log.issue(test, `Error while trying to clear safety event: ${messageOf(err)}`);
    }
  } else {
    log.issue(
      test,
      "Skipping ClearSafetyState check because the test rule was not set successfully by SetSafetyState.",
    );
  }
  await mustRefuse(at, test, CLEAR_EXTERNAL_EVENTS, "null");
  await mustRefuse(at, test, CLEAR_EXTERNAL_EVENTS, "empty");
}

/**
 * DeviceTesterBaseClass.cs CheckCommonMethods, the safety actions of the draft ISafetyMonitorV4,
 * each run only when SupportedActions lists it.
 */
async function safetyActions(
  at: Conformance,
  has: { get: boolean; set: boolean; clear: boolean },
): Promise<void> {
  const id = crypto.randomUUID();
  const set = has.set && await setExternalEvents(at, id);
  if (has.get) {
    const test = `Action - ${SAFETY_EVENTS}`;
    try {
      // ConformU reads IsSafe first, to let a driver prepare its events; errors pass.
      await at.client.get<boolean>("issafe", "boolean").catch(() => false);
      const events = await safetyEvents(at.client);
      at.log.ok(
        test,
        `JSON read OK, ${events.length} record${events.length === 1 ? "" : "s"} returned`,
      );
    } catch (err) {
      at.log.issue(test, messageOf(err));
    }
  }
  if (has.clear) await clearExternalEvents(at, id, set);
  if (!has.get && !has.set && !has.clear) {
    at.log.info("Action", "Conform cannot test the Action method");
  }
}

/** DeviceTesterBaseClass.cs CheckCommonMethods, DeviceState. */
async function deviceState(at: Conformance): Promise<void> {
  const { client, log, target } = at;
  try {
    const state = await client.get<{ Name?: unknown; Value?: unknown }[]>("devicestate", "array");
    log.ok(
      "DeviceState",
      `Received ${state.length} operational state propert${state.length === 1 ? "y" : "ies"}.`,
    );
    const expected = new Map(OPERATIONAL[target.device].map((name) => [name, false]));
    for (const item of state) {
      const name = String(item?.Name);
      if (expected.has(name) || name === "TimeStamp") {
        expected.set(name, true);
        log.ok("DeviceState", `  ${name} = ${JSON.stringify(item.Value)}`);
      } else {
        const cased = [...expected.keys()].find((k) => k.toLowerCase() === name.toLowerCase());
        if (cased !== undefined) {
          log.issue(
            "DeviceState",
            `The ${cased} property name is mis-cased: ${name}. The correct casing is: ${cased}`,
          );
        } else {
          log.issue(
            "DeviceState",
            `A non-operational property was included in the DeviceState response: ${name} = ${
              JSON.stringify(item?.Value)
            }`,
          );
        }
      }
    }
    const missing = [...expected].filter(([name, seen]) => !seen && name !== "TimeStamp");
    for (const [name] of missing) {
      log.info(
        "DeviceState",
        `Operational property ${name} was not included in the DeviceState response.`,
      );
    }
    if (missing.length === 0) log.ok("DeviceState", "Found all expected operational properties");
  } catch (err) {
    handleException(log, "DeviceState", "Property", "Mandatory", err);
  }
}

/** SafetyMonitorTester.cs CheckProperties, RequiredPropertiesTest(PropIsSafe). */
async function safetyMonitorProperties(at: Conformance): Promise<void> {
  try {
    at.log.ok("IsSafe", String(await at.client.get<boolean>("issafe", "boolean")));
  } catch (err) {
    handleException(at.log, "IsSafe", "Property", "Mandatory", err);
  }
}

/** ObservingConditionsTester.cs: the sensor properties by name, with their valid ranges. */
const SENSORS: readonly [string, number, number][] = [
  ["CloudCover", 0, 100],
  ["DewPoint", -273.15, 100],
  ["Humidity", 0, 100],
  ["Pressure", 0, 1100],
  ["RainRate", 0, 20000],
  ["SkyBrightness", 0, 1000000],
  ["SkyQuality", -20, 30],
  ["StarFWHM", 0, 1000],
  ["SkyTemperature", -273.15, 100],
  ["Temperature", -273.15, 100],
  ["WindDirection", 0, 360],
  ["WindGust", 0, 1000],
  ["WindSpeed", 0, 1000],
];

/**
 * ObservingConditionsTester.cs TestDouble: reads a number, checks its range; an
 * InvalidOperationException means "not ready" and is retried (INFO), any other error goes to
 * HandleException. Returns NaN when no value was read.
 */
async function testDouble(
  at: Conformance,
  propertyName: string,
  testName: string,
  read: () => Promise<number>,
  min: number,
  max: number,
  required: Required,
  type: MemberType,
): Promise<number> {
  const { log, options } = at;
  let retries = 0;
  for (;;) {
    try {
      const value = await read();
      if (value < min) {
        log.issue(propertyName, `Invalid value (below minimum expected - ${min}): ${value}`);
      } else if (value > max) {
        log.issue(propertyName, `Invalid value (above maximum expected - ${max}): ${value}`);
      } else log.ok(testName, String(value));
      if (testName.startsWith("TimeSinceLastUpdate")) at.sensors.lastUpdate.add(propertyName);
      else at.sensors.value.add(propertyName);
      return value;
    } catch (err) {
      // IsInvalidOperationException.
      if (numberOf(err) !== ERR.invalidOperation) {
        handleException(log, propertyName, type, required, err);
        return NaN;
      }
      retries++;
      log.info(
        propertyName,
        `Sensor not ready, received InvalidOperationException, waiting ${
          options.notReadyWaitMs / 1000
        } second to retry. Attempt ${retries} out of ${options.notReadyRetries}`,
      );
      if (retries > options.notReadyRetries) {
        log.info(
          propertyName,
          `InvalidOperationException persisted for longer than ${
            options.notReadyRetries * options.notReadyWaitMs / 1000
          } seconds.`,
        );
        return NaN;
      }
      await new Promise((resolve) => setTimeout(resolve, options.notReadyWaitMs));
    }
  }
}

/** ObservingConditionsTester.cs: the DewPoint & Humidity rule, both or neither. */
function dewPointAndHumidity(log: Log, dewPoint: boolean, humidity: boolean): void {
  if (dewPoint && humidity) {
    log.ok(
      "DewPoint & Humidity",
      "Dew point and humidity are both implemented per the interface specification",
    );
  } else if (!dewPoint && !humidity) {
    log.ok(
      "DewPoint & Humidity",
      "Dew point and humidity are both not implemented per the interface specification",
    );
  } else {
    log.issue(
      "DewPoint & Humidity",
      "One of Dew point or humidity is implemented and the other is not. Both must be implemented or both must not be implemented per the interface specification",
    );
  }
}

/** ObservingConditionsTester.cs CheckProperties. */
async function conditionsProperties(at: Conformance): Promise<void> {
  const { client, log } = at;
  const property = (name: string) => () => client.get<number>(name.toLowerCase(), "number");
  const period = await testDouble(
    at,
    "AveragePeriod",
    "AveragePeriod",
    property("AveragePeriod"),
    0,
    100000,
    "Mandatory",
    "Property",
  );
  const write = "AveragePeriod Write";
  if (!Number.isNaN(period)) {
    const set = (value: number) => client.put("averageperiod", [["AveragePeriod", String(value)]]);
    // A write, what its success means, and whether InvalidValue is a pass (with that message).
    const writes: [number, Level, string, string | undefined][] = [
      [
        -2,
        "ISSUE",
        "No error generated on setting the average period < -1.0",
        "Invalid Value exception generated as expected on set average period < -1.0",
      ],
      [0, "OK", "Successfully set average period to 0.0", undefined],
      [
        5,
        "OK",
        "Successfully set average period to 5.0",
        "Invalid value exception thrown when average period is set to 5.0, which is permitted by the specification",
      ],
    ];
    for (const [value, level, done, invalid] of writes) {
      try {
        await set(value);
        if (level === "OK") log.ok(write, done);
        else log.issue(write, done);
      } catch (err) {
        if (invalid === undefined) handleException(log, write, "Property", "Mandatory", err);
        else invalidValueAsOk(log, write, "Property", "Mandatory", err, invalid);
      }
    }
    try {
      await set(period);
      log.ok(write, `Successfully restored original average period: ${period}`);
    } catch (err) {
      log.info(write, "Unable to restore original average period");
      handleException(log, write, "Property", "Mandatory", err);
    }
  } else log.info(write, "Test skipped because AveragePerid cold not be read");
  const values = new Map<string, number>();
  for (const [name, min, max] of SENSORS) {
    values.set(
      name,
      await testDouble(at, name, name, property(name), min, max, "Optional", "Property"),
    );
    if (name === "Humidity") {
      dewPointAndHumidity(
        log,
        !Number.isNaN(values.get("DewPoint")!),
        !Number.isNaN(values.get("Humidity")!),
      );
    }
  }
  // The wind has no direction while its speed is 0.
  const speed = values.get("WindSpeed")!;
  const direction = values.get("WindDirection")!;
  if (speed === 0 && !Number.isNaN(direction)) {
    if (direction === 0) {
      log.ok("WindSpeed", "Wind direction is reported as 0.0 when wind speed is 0.0");
    } else {
      log.issue(
        "WindSpeed",
        `When wind speed is reported as 0.0, wind direction should also be reported as 0.0, it is actually reported as ${direction}`,
      );
    }
  }
}

/** ObservingConditionsTester.cs CheckMethods: TimeSinceLastUpdate, Refresh, SensorDescription, consistency. */
async function conditionsMethods(at: Conformance): Promise<void> {
  const { client, log } = at;
  const since = (name: string) => () =>
    client.get<number>("timesincelastupdate", "number", [["SensorName", name]]);
  await testDouble(
    at,
    "LatestUpdateTime",
    "TimeSinceLastUpdateLatest",
    since(""),
    -1,
    Number.MAX_VALUE,
    "Mandatory",
    "Method",
  );
  const ages = new Map<string, number>();
  for (const [name] of SENSORS) {
    // CloudCover, DewPoint and Humidity from -1, the others any number (as ConformU orders them).
    const min = ["CloudCover", "DewPoint", "Humidity"].includes(name) ? -1 : -Number.MAX_VALUE;
    const test = `TimeSinceLastUpdate${name === "StarFWHM" ? "StarFwhm" : name}`;
    ages.set(
      name,
      await testDouble(at, name, test, since(name), min, Number.MAX_VALUE, "Optional", "Method"),
    );
    if (name === "Humidity") {
      dewPointAndHumidity(
        log,
        !Number.isNaN(ages.get("DewPoint")!),
        !Number.isNaN(ages.get("Humidity")!),
      );
    }
  }
  try {
    await client.put("refresh");
    log.ok("Refresh", "Refreshed OK");
  } catch (err) {
    handleException(log, "Refresh", "Method", "Optional", err);
  }
  const descriptions = new Map<string, string | null>();
  for (const [name] of SENSORS) {
    const test = `SensorDescription${name === "StarFWHM" ? "StarFwhm" : name}`;
    let description: string | null = null;
    try {
      const value = await client.get<unknown>("sensordescription", "string", [[
        "SensorName",
        name,
      ]]) as string;
      if (value === "") log.ok(test, 'The driver returned an empty string: ""');
      else log.ok(test, value);
      at.sensors.description.add(name);
      description = value;
    } catch (err) {
      handleException(log, test, "Method", "Optional", err);
    }
    descriptions.set(name, description);
    if (name === "Humidity") {
      dewPointAndHumidity(
        log,
        descriptions.get("DewPoint") !== null,
        descriptions.get("Humidity") !== null,
      );
    }
  }
  const record = at.sensors;
  for (const [name] of SENSORS) {
    const value = record.value.has(name);
    const description = record.description.has(name);
    const lastUpdate = record.lastUpdate.has(name);
    if ((value && description && lastUpdate) || (!value && !description && !lastUpdate)) {
      log.ok(
        `Consistency - ${name}`,
        `Sensor value, description and time since last update are all ${
          value ? "" : "not "
        }implemented as required by the specification`,
      );
    } else {
      log.issue(
        `Consistency - ${name}`,
        `Sensor ${name} value is implemented: ${value}, Sensor description is implemented: ${description}, Sensor time since last update is implemented: ${lastUpdate}`,
      );
    }
  }
}

// ---------------------------------------------------------------------------------------------
// The protocol check (AlpacaProtocolTestManager.cs).
// ---------------------------------------------------------------------------------------------

const TEST_CLIENT_ID = "123456";
const TEST_TRANSACTION_ID = "67890";
const BAD_PARAMETER_VALUE = "asduio6fghZZ";

const CLIENT = ["ClientID", TEST_CLIENT_ID] as const;
const TRANSACTION = ["ClientTransactionID", TEST_TRANSACTION_ID] as const;

/** AlpacaProtocolTestManager.cs: the pre-formed parameter lists. */
const PARAMS = {
  ok: [CLIENT, TRANSACTION],
  okPlusExtra: [CLIENT, TRANSACTION, ["ExtraParameter", "ExtraValue"]],
  clientIdLowerCase: [["clientid", TEST_CLIENT_ID], TRANSACTION],
  transactionIdLowerCase: [CLIENT, ["clienttransactionid", TEST_TRANSACTION_ID]],
  connectedTrue: [CLIENT, TRANSACTION, ["Connected", "True"]],
  connectedTrueReordered: [TRANSACTION, ["Connected", "True"], CLIENT],
  connectedFalse: [CLIENT, TRANSACTION, ["Connected", "False"]],
  connectedEmpty: [CLIENT, TRANSACTION, ["Connected", ""]],
  connectedNumeric: [CLIENT, TRANSACTION, ["Connected", "123456"]],
  connectedString: [CLIENT, TRANSACTION, ["Connected", "asdqwe"]],
} as const satisfies Record<string, Params>;

/** TestBadIdValues: the bad ClientID and ClientTransactionID values, by test name. */
const BAD_IDS: readonly [string, Params, boolean][] = [
  ["ClientID is empty", [["ClientID", ""], TRANSACTION], false],
  ["ClientID is white space", [["ClientID", "     "], TRANSACTION], false],
  ["ClientID is negative", [["ClientID", "-12345"], TRANSACTION], true],
  ["ClientID is not numeric", [["ClientID", "NASDAQ"], TRANSACTION], false],
  ["ClientTransactionID is empty", [CLIENT, ["ClientTransactionID", ""]], false],
  ["ClientTransactionID is white space", [CLIENT, ["ClientTransactionID", "     "]], false],
  ["ClientTransactionID is negative", [CLIENT, ["ClientTransactionID", "-67890"]], true],
  ["ClientTransactionID is a string", [CLIENT, ["ClientTransactionID", "qweqwe"]], false],
];

interface Send {
  readonly strict: boolean;
  readonly reportNotImplemented: boolean;
  readonly log: Log;
  readonly target: ConformuTarget;
  readonly typeName: string;
}

interface SendFlags {
  readonly badlyCasedTransactionIdName?: boolean;
  readonly acceptInvalidValueError?: boolean;
  readonly badUri?: boolean;
  readonly negativeIds?: boolean;
  readonly deviceState?: boolean;
}

/** .NET UInt32.TryParse (NumberStyles.Integer): the value, or 0 when it does not parse. */
function tryParseUint32(text: string): number {
  if (!/^\s*\+?\d+\s*$/.test(text)) return 0;
  const n = Number(text.trim());
  return n <= 0xffffffff ? n : 0;
}

/** A JSON property System.Text.Json reads into a `uint`: absent is 0, anything else throws. */
function readUint(body: Record<string, unknown>, name: string): number {
  const value = body[name];
  if (value === undefined) return 0;
  if (typeof value !== "number" || !Number.isInteger(value) || value < 0 || value > 0xffffffff) {
    throw new SyntaxError(
      `The JSON value could not be converted to System.UInt32. Path: $.${name}`,
    );
  }
  return value;
}

/** AlpacaProtocolTestManager.cs InvertCasing. */
function invertCasing(text: string): string {
  return [...text].map((c) => c === c.toUpperCase() ? c.toLowerCase() : c.toUpperCase()).join("");
}

/** What SendToDevice reads from an answer's JSON (System.Text.Json into its Response class). */
interface Answer {
  readonly transactionId: number;
  readonly serverTransactionId: number;
  readonly errorNumber: number;
  readonly errorMessage: string;
}

const NO_ANSWER: Answer = {
  transactionId: 0,
  serverTransactionId: 0,
  errorNumber: 0,
  errorMessage: "",
};

/**
 * AlpacaProtocolTestManager.cs SendToDevice, a 200 answer: the JSON read into its Response class
 * (case-sensitive names; a negative or non-numeric ID cannot be read), the casing of the four
 * common keys, and `Value` in a GET answer (in strict mode even with an error).
 */
function readAnswer(
  at: Send,
  testName: string,
  prefix: string,
  method: string,
  text: string,
  flags: SendFlags,
): Answer | undefined {
  const { log } = at;
  let body: Record<string, unknown>;
  let answer: Answer;
  try {
    body = JSON.parse(text);
    if (typeof body !== "object" || body === null || Array.isArray(body)) {
      throw new SyntaxError("The JSON value could not be converted to Response.");
    }
    const errorNumber = body.ErrorNumber ?? 0;
    if (typeof errorNumber !== "number" || !Number.isInteger(errorNumber)) {
      throw new SyntaxError("The JSON value could not be converted to AlpacaErrors.");
    }
    const errorMessage = body.ErrorMessage ?? "";
    if (typeof errorMessage !== "string") {
      throw new SyntaxError("The JSON value could not be converted to System.String.");
    }
    answer = {
      transactionId: readUint(body, "ClientTransactionID"),
      serverTransactionId: readUint(body, "ServerTransactionID"),
      errorNumber,
      errorMessage,
    };
  } catch (err) {
    if (!at.strict && flags.negativeIds) {
      log.info(
        testName,
        `${prefix} - Could not parse the returned JSON. Possibly the device returned the supplied negative ID value, which is not a valid unsigned integer value.`,
      );
    } else log.error(testName, `${prefix} - ${messageOf(err)}`);
    return undefined;
  }
  const keys = ["ClientTransactionID", "ServerTransactionID", "ErrorNumber", "ErrorMessage"];
  for (const key of keys) {
    for (const name of Object.keys(body)) {
      if (name.toLowerCase() !== key.toLowerCase()) continue;
      if (name === key) log.ok(testName, `${key} is correctly cased`);
      else {
        log.issue(
          testName,
          `The ${key} JSON parameter is incorrectly cased, it should be cased like this: ${key}`,
        );
      }
    }
  }
  if (method !== "GET") return answer;
  if (!Object.hasOwn(body, "Value")) {
    if (at.strict || answer.errorNumber === 0) {
      log.issue(
        testName,
        "A JSON parameter of name Value was expected, but was not found in the JSON response. This test is case sensitive.",
      );
      log.info(testName, "The JSON Value parameter must exist and be cased like this: Value.");
    }
    return answer;
  }
  log.ok(testName, "JSON Value parameter found OK");
  if (flags.deviceState) deviceStateKeys(log, testName, body.Value);
  return answer;
}

/** SendToDevice, AdditionalParameterCheck.DeviceState: each item has `Name` and `Value`. */
function deviceStateKeys(log: Log, testName: string, items: unknown): void {
  if (!Array.isArray(items)) {
    log.issue(testName, "Exception while parsing Alpaca response JSON: Value is not an array");
    return;
  }
  for (const item of items) {
    const has = (key: string) =>
      typeof item === "object" && item !== null && Object.hasOwn(item, key);
    const name = has("Name") ? String(item.Name) : "";
    for (const key of ["Name", "Value"]) {
      if (has(key)) log.ok(testName, `${name} - JSON ${key} parameter found OK`);
      else {
        log.issue(
          testName,
          `A JSON parameter of name ${key} was expected, but was not found within the returned DeviceState object: ${
            JSON.stringify(item)
          }. This test is case sensitive.`,
        );
      }
    }
  }
}

/** SendToDevice: the ClientTransactionID round trip and the ServerTransactionID of a 200. */
function judgeIds(
  at: Send,
  testName: string,
  prefix: string,
  sent: number | undefined,
  answer: Answer,
  badlyCased: boolean,
): void {
  const { log } = at;
  const got = answer.transactionId;
  const unexpected =
    `${prefix} - An unexpected ClientTransactionID was returned: ${got}, Expected: ${sent}`;
  if (sent !== undefined && badlyCased) {
    if (got === 0) {
      log.ok(testName, `${prefix} - The returned ClientTransactionID was 0 as expected.`);
    } else if (!at.strict && got === sent) {
      log.info(
        testName,
        `${prefix} - The ClientTransactionID was round-tripped suggesting that the device did not treat it as case sensitive. Sent value: ${sent}, Returned value: ${got}`,
      );
    } else log.issue(testName, unexpected);
  } else if (sent !== undefined) {
    if (got === sent) {
      log.ok(testName, `${prefix} - The expected ClientTransactionID was returned: ${got}`);
    } else log.issue(testName, unexpected);
  }
  const server = answer.serverTransactionId;
  if (server >= 1) {
    log.ok(testName, `${prefix} - The ServerTransactionID was 1 or greater: ${server}`);
  } else if (at.strict) {
    log.issue(
      testName,
      `${prefix} - An unexpected ServerTransactionID was returned: 0, Expected: 1 or greater`,
    );
  } else {
    log.ok(
      testName,
      `${prefix} - The device either did not return a ServerTransactionID key or returned a ServerTransactionID key with a value of zero`,
    );
  }
}

/** SendToDevice: the HTTP status against the expected ones, and a reported ASCOM error. */
function judgeStatus(
  at: Send,
  testName: string,
  prefix: string,
  status: number,
  answer: Answer,
  expected: readonly number[],
  acceptInvalidValueError: boolean,
): void {
  const { log } = at;
  const { errorNumber, errorMessage } = answer;
  let outcome: string | undefined;
  if (errorNumber !== 0 || errorMessage !== "") {
    if (!(errorNumber === ERR.notImplemented && !at.reportNotImplemented)) {
      outcome = `Device returned a ${EXCEPTION_NAMES[errorNumber] ?? "error"} error (0x${
        errorNumber.toString(16)
      }) for client transaction: ${answer.transactionId}, server transaction: ${answer.serverTransactionId}. Error message: ${errorMessage}`;
    }
  }
  const received = `${prefix} - Received HTTP status ${status}`;
  if (expected.length === 0) log.info(testName, received);
  else if (expected.includes(status)) {
    if (status === 200 && outcome !== undefined) {
      log.info(
        testName,
        `${received} as expected but the device reported an ASCOM error: ${outcome}`,
      );
    } else log.ok(testName, `${received} as expected.`);
  } else if (status === 200 && acceptInvalidValueError && errorNumber === ERR.invalidValue) {
    log.ok(testName, `${received} and an invalid value error: ${errorMessage}`);
  } else if (
    status === 200 && errorNumber === ERR.notImplemented && !at.strict &&
    expected.length === 1 && expected[0] === 400
  ) {
    log.ok(testName, `${received} and a not implemented error: ${errorMessage}`);
  } else {
    log.issue(
      testName,
      `${prefix} - Expected HTTP status${expected.length > 1 ? "es" : ""}: ${
        expected.join(", ")
      } but received status: ${status}.`,
    );
  }
}

/** AlpacaProtocolTestManager.cs SendToDevice: one request and every judgement of its answer. */
async function sendToDevice(
  at: Send,
  testName: string,
  prefix: string,
  path: string,
  method: string,
  params: Params,
  expected: readonly number[],
  flags: SendFlags = {},
): Promise<void> {
  // A ClientTransactionID in any casing is expected back (0 when its value does not parse).
  const sent = params.find(([name]) => name.toUpperCase() === "CLIENTTRANSACTIONID");
  const headers = { accept: "application/json", "user-agent": "ConformUniversal/4" };
  let res: Response;
  try {
    if (method === "GET") {
      // The query is built by hand (`name=value&...`), values as UriBuilder escapes them.
      const query = params.map(([n, v]) => `${n}=${encodeURIComponent(v)}`).join("&");
      res = await fetch(`${at.target.base}${path}${query === "" ? "" : `?${query}`}`, { headers });
    } else {
      res = await fetch(`${at.target.base}${path}`, {
        method,
        headers: { ...headers, "content-type": "application/x-www-form-urlencoded" },
        body: new URLSearchParams(params.map(([n, v]) => [n, v])).toString(),
      });
    }
  } catch (err) {
    if (flags.badUri) at.log.ok(testName, `${prefix} - Host rejected the bad URI.`);
    else at.log.error(testName, `${prefix} - ${messageOf(err)}`);
    return;
  }
  const text = await res.text();
  let answer = NO_ANSWER;
  if (res.status === 200 && !text.includes("<!DOCTYPE")) {
    const type = res.headers.get("content-type") ?? "application/json";
    if (/imagebytes/i.test(type) || res.headers.has("base64handoff")) {
      at.log.error(
        testName,
        `${prefix} - ImageBytes and Base64HandOff answers are not reproduced here`,
      );
      return;
    }
    const read = readAnswer(at, testName, prefix, method, text, flags);
    if (read === undefined) return;
    answer = read;
  }
  if (res.status === 200) {
    const expectedId = sent === undefined ? undefined : tryParseUint32(sent[1]);
    judgeIds(at, testName, prefix, expectedId, answer, flags.badlyCasedTransactionIdName ?? false);
  }
  judgeStatus(
    at,
    testName,
    prefix,
    res.status,
    answer,
    expected,
    flags.acceptInvalidValueError ?? false,
  );
}

/** AlpacaProtocolTestManager.cs CallApi: SendToDevice on `/api/v1/{type}/{number}/{method}`. */
function callApi(
  at: Send,
  prefix: string,
  member: string,
  method: string,
  params: Params,
  expected: readonly number[],
  flags: SendFlags = {},
): Promise<void> {
  const path = `/api/v1/${at.target.device}/${at.target.number ?? 0}/${member.toLowerCase()}`;
  return sendToDevice(at, `${method} ${member}`, prefix, path, method, params, expected, flags);
}

/** AlpacaProtocolTestManager.cs GetInterfaceVersion: the interface version, with its checks. */
async function getInterfaceVersion(at: Send): Promise<number> {
  const { log } = at;
  const testName = "GET InterfaceVersion";
  const query = PARAMS.ok.map(([n, v]) => `${n}=${v}`).join("&");
  const path = `/api/v1/${at.target.device}/${at.target.number ?? 0}/interfaceversion?${query}`;
  let res: Response;
  try {
    res = await fetch(`${at.target.base}${path}`, { headers: { accept: "application/json" } });
  } catch (err) {
    log.error(testName, messageOf(err));
    return 0;
  }
  const text = await res.text();
  let body: Record<string, unknown> = {};
  if (res.status === 200) {
    try {
      body = JSON.parse(text);
      readUint(body, "ClientTransactionID");
      readUint(body, "ServerTransactionID");
    } catch (err) {
      log.issue(
        testName,
        `Received HTTP status 200 (OK) but could not de-serialise the returned JSON string. Exception message: ${
          messageOf(err)
        }`,
      );
      return 0;
    }
    const transactionId = readUint(body, "ClientTransactionID");
    if (transactionId === Number(TEST_TRANSACTION_ID)) {
      log.ok(testName, `The expected ClientTransactionID was returned: ${transactionId}`);
    } else {
      log.issue(
        testName,
        `An unexpected ClientTransactionID was returned: ${transactionId}, Expected: ${TEST_TRANSACTION_ID}`,
      );
    }
    const server = readUint(body, "ServerTransactionID");
    if (server >= 1) log.ok(testName, `The ServerTransactionID was 1 or greater: ${server}`);
    else {log.issue(
        testName,
        `An unexpected ServerTransactionID was returned: ${server}, Expected: 1 or greater`,
      );}
    log.ok(testName, "Received HTTP status 200 (OK) as expected.");
  } else {
    log.issue(testName, `Expected HTTP status: 200 but received status: ${res.status}.`);
  }
  return typeof body.Value === "number" ? body.Value : 0;
}

/** AlpacaProtocolTestManager.cs TestBadIdValues. */
async function testBadIdValues(at: Send, member: string, method: string, extra: Params) {
  const allowed = at.strict ? [400] : [200, 400];
  for (const [prefix, ids, negative] of BAD_IDS) {
    await callApi(at, prefix, member, method, [...ids, ...extra], allowed, {
      acceptInvalidValueError: true,
      negativeIds: negative,
    });
  }
}

/**
 * The names ConformU gives the same check in its GET and its PUT helpers, and what a parameter
 * name with inverted casing must get: in a GET it is the parameter (200), in a PUT it is not, so
 * the parameter is missing (400).
 */
const WORDING = {
  GET: {
    good: "Good ClientID and ClientTransactionID casing",
    goodExtra: "Good ClientID and ClientTransactionID casing with additional parameter",
    extra: "Good casing with extra parameter",
    casing: "Inverted casing",
    casingStatus: 200,
    clientId: "Different ClientID casing",
    transactionId: "Different ClientTransactionID casing",
  },
  PUT: {
    good: "Good ID name casing",
    goodExtra: "Good ID casing + extra parameter",
    extra: "Good casing + extra parameter",
    casing: "Bad casing",
    casingStatus: 400,
    clientId: "Bad ClientID casing",
    transactionId: "Bad ClientTransactionID casing",
  },
} as const;

/**
 * The casing checks of ClientID and ClientTransactionID shared by the four helpers: 200 either
 * way; a PUT's ClientTransactionID with other casing is ignored, so its answer must echo 0.
 */
async function idCasing(at: Send, method: "GET" | "PUT", member: string, extra: Params) {
  const words = WORDING[method];
  await callApi(at, words.clientId, member, method, [...PARAMS.clientIdLowerCase, ...extra], [200]);
  await callApi(
    at,
    words.transactionId,
    member,
    method,
    [
      ...PARAMS.transactionIdLowerCase,
      ...extra,
    ],
    [200],
    { badlyCasedTransactionIdName: method === "PUT" },
  );
  await testBadIdValues(at, member, method, extra);
}

/** AlpacaProtocolTestManager.cs GetNoParameters and PutNoParameters. */
async function noParameters(at: Send, method: "GET" | "PUT", member: string, deviceState = false) {
  const words = WORDING[method];
  await callApi(at, words.good, member, method, PARAMS.ok, [200], { deviceState });
  await callApi(at, words.goodExtra, member, method, PARAMS.okPlusExtra, [200]);
  await idCasing(at, method, member, []);
}

/** AlpacaProtocolTestManager.cs GetOneParameter and PutOneParameter. */
async function oneParameter(
  at: Send,
  method: "GET" | "PUT",
  member: string,
  name: string,
  value: string,
) {
  const words = WORDING[method];
  const call = (prefix: string, params: Params, expected: number[], flags?: SendFlags) =>
    callApi(at, `Parameter ${name} (${prefix})`, member, method, params, expected, flags);
  const param: Params = [[name, value]];
  await call("Good casing", [...PARAMS.ok, ...param], [200]);
  await call(words.extra, [...PARAMS.okPlusExtra, ...param], [200]);
  await call("Bad value", [...PARAMS.ok, [name, BAD_PARAMETER_VALUE]], [400], {
    acceptInvalidValueError: true,
  });
  await call(words.casing, [...PARAMS.ok, [invertCasing(name), value]], [words.casingStatus]);
  await idCasing(at, method, member, param);
}

/** The device as ConformU's protocol check reads it between checks (ASCOM.Alpaca.Clients). */
async function readConnecting(at: Send): Promise<boolean> {
  return await new DeviceClient(at.target).get<boolean>("connecting", "boolean");
}

/**
 * Runs ConformU's Alpaca protocol check of one device (AlpacaProtocolTestManager.cs
 * TestAlpacaProtocol) and returns its log. The device is left disconnected, as ConformU leaves it.
 *
 * @param target The server and the device.
 * @param options ConformU's protocol settings: strict mode and the URL structure probes by default.
 * @returns Every finding, in ConformU's order.
 */
export async function protocolCheck(
  target: ConformuTarget,
  options: ProtocolOptions = {},
): Promise<Finding[]> {
  const log = new Log();
  const at: Send = {
    strict: options.strict ?? true,
    reportNotImplemented: options.reportNotImplemented ?? false,
    log,
    target,
    typeName: target.device === "safetymonitor" ? "SafetyMonitor" : "ObservingConditions",
  };
  const lower = target.device;
  const n = target.number ?? 0;
  const client = new DeviceClient(target);
  try {
    // TestAlpacaProtocol: connect, disconnect, connect with the parameters re-ordered.
    await callApi(at, "True", "Connected", "PUT", PARAMS.connectedTrue, [200]);
    await callApi(at, "False", "Connected", "PUT", PARAMS.connectedFalse, [200]);
    await callApi(at, "True", "Connected", "PUT", PARAMS.connectedTrueReordered, [200]);
    await getInterfaceVersion(at);
    // TestCommon.
    if (options.primaryUrlStructure ?? true) {
      for (
        const [prefix, path] of [
          ['Bad Alpaca URL base element (api = apx)"', `/apx/v1/${lower}/${n}/description`],
          ["Bad Alpaca URL version element (no v)", `/api/1/${lower}/${n}/description`],
          ["Bad Alpaca URL version element (no number)", `/api/v/${lower}/${n}/description`],
          ["Bad Alpaca URL version element (capital V)", `/api/V1/${lower}/${n}/description`],
          ["Bad Alpaca URL version element (v2)", `/api/v2/${lower}/${n}/description`],
        ] as const
      ) {
        await sendToDevice(at, "GET Description", prefix, path, "GET", PARAMS.ok, [], {
          badUri: true,
        });
      }
      for (const method of ["POST", "DELETE"]) {
        await callApi(at, "True", "Connected", method, PARAMS.connectedTrue, []);
        await callApi(
          at,
          method === "POST" ? "Value empty" : "Empty",
          "Connected",
          method,
          PARAMS.connectedEmpty,
          [],
        );
        await callApi(at, "Number", "Connected", method, PARAMS.connectedNumeric, []);
      }
    }
    const any4xx = [400, 401, 402, 403, 404, 405, 406, 407, 409, 410];
    for (
      const [prefix, path] of [
        [
          `Bad Alpaca URL device type (capitalised ${at.typeName.toUpperCase()})`,
          `/api/v1/${at.typeName.toUpperCase()}/${n}/description`,
        ],
        ["Bad Alpaca URL device type (baddevicetype)", "/api/v1/baddevicetype/0/description"],
        ["Bad Alpaca URL device number (-1)", `/api/v1/${lower}/-1/description`],
        ["Bad Alpaca URL device number (99999)", `/api/v1/${lower}/99999/description`],
        ["Bad Alpaca URL device number (A)", `/api/v1/${lower}/A/description`],
        ["Bad Alpaca URL method name (descrip)", `/api/v1/${lower}/${n}/descrip`],
      ] as const
    ) {
      await sendToDevice(at, "GET Description", prefix, path, "GET", PARAMS.ok, any4xx, {
        badUri: true,
      });
    }
    await noParameters(at, "GET", "Connected");
    for (
      const [prefix, params] of [
        ["Bad parameter value - Empty string", PARAMS.connectedEmpty],
        ["Bad parameter value - Number", PARAMS.connectedNumeric],
        ["Bad parameter value - Meaningless string", PARAMS.connectedString],
      ] as const
    ) {
      await callApi(at, prefix, "Connected", "PUT", params, [400], {
        acceptInvalidValueError: true,
      });
    }
    for (
      const member of [
        "Description",
        "DriverInfo",
        "DriverVersion",
        "InterfaceVersion",
        "Name",
        "SupportedActions",
      ]
    ) {
      await noParameters(at, "GET", member);
    }
    let version = await getInterfaceVersion(at);
    if (version >= CONNECT_AND_DEVICESTATE[target.device]) {
      await noParameters(at, "GET", "DeviceState", true);
    }
    // TestSafetyMonitor / TestObservingConditions: Connected = true through the client, errors
    // ignored; then TestConnect.
    await client.put("connected", [["Connected", "True"]]).catch(() => {});
    version = await getInterfaceVersion(at);
    if (version >= CONNECT_AND_DEVICESTATE[target.device]) {
      await noParameters(at, "PUT", "Disconnect");
      await waitWhile("Disconnecting", () => readConnecting(at), 5000);
      await noParameters(at, "PUT", "Connect");
      await waitWhile("Connecting", () => readConnecting(at), 5000);
      await noParameters(at, "GET", "Connecting");
    }
    if (target.device === "safetymonitor") {
      await noParameters(at, "GET", "IsSafe");
    } else {
      await noParameters(at, "GET", "AveragePeriod");
      let period = "0.0";
      try {
        period = String(await client.get<number>("averageperiod", "number"));
      } catch {
        // ConformU keeps "0.0".
      }
      await oneParameter(at, "PUT", "AveragePeriod", "AveragePeriod", period);
      // TestObservingConditions reads the sensors in alphabetical order.
      for (const [name] of SENSORS.toSorted(([a], [b]) => a < b ? -1 : 1)) {
        await noParameters(at, "GET", name);
      }
      await noParameters(at, "PUT", "Refresh");
      await oneParameter(at, "GET", "SensorDescription", "SensorName", "Pressure");
      const before = log.findings.filter((f) => f.level === "ISSUE").length;
      await oneParameter(at, "GET", "TimeSinceLastUpdate", "SensorName", "Pressure");
      const pressure = log.findings.filter((f) => f.level === "ISSUE").length - before;
      await oneParameter(at, "GET", "TimeSinceLastUpdate", "SensorName", "");
      if (pressure > 0) {
        log.info(
          "TimeSinceLastUpdate",
          'Failed when retrieving the last update time for the Pressure sensor (SensorName = "Pressure").',
        );
      }
      if (log.findings.filter((f) => f.level === "ISSUE").length - pressure - before > 0) {
        log.info(
          "TimeSinceLastUpdate",
          'Failed when retrieving the last update time for all sensors (SensorName = "").',
        );
      }
    }
    await client.put("connected", [["Connected", "False"]]).catch(() => {});
    // TestAlpacaProtocol: finally Connected false.
    await callApi(at, "False", "Connected", "PUT", PARAMS.connectedFalse, [200]);
  } catch (err) {
    // TestAlpacaProtocol's catch: anything thrown (a WaitWhile timeout) ends the check.
    log.error("", messageOf(err));
  }
  return log.findings;
}
