/**
 * InfluxDB line protocol (docs/influx.md, docs/http-api.md) from the real clients, no mocks:
 * Debian's `influx` command line (`-execute 'INSERT ...'`, `-import`), Debian's
 * `python3-influxdb` (`InfluxDBClient.write_points`, the token as the password), and the npm
 * `@influxdata/influxdb-client` (`WriteApi`, the v2 API; under Deno its fetch build, under Node
 * its Node build, which gzips), each writing into a real service on a loopback port with a token,
 * read back from the site files. Each client's tests skip, with the reason printed, when the
 * client is not installed.
 * @module
 */
import assert from "node:assert/strict";
import { join } from "node:path";
import { InfluxDB, Point } from "npm:@influxdata/influxdb-client@^1.35.0";
import {
  influxCliMissing,
  influxdMissing,
  influxPythonMissing,
  influxQuery,
  nodeInfluxClientMissing,
  runInfluxCli,
  runNodeWrite,
  runPythonWrite,
  testInfluxd,
} from "../_shared/influx_util.ts";
import { parseEnvelope, readSiteLines, tempDir, testServer } from "../_shared/util.ts";

const TOKEN = "lp-clients-token";

const skipCli = influxCliMissing();
const skipPython = influxPythonMissing();
const skipNode = nodeInfluxClientMissing();
const skipInfluxd = skipCli ?? influxdMissing();
for (
  const [what, why] of [
    ["the influx command line", skipCli],
    ["python3-influxdb", skipPython],
    ["the npm client under Node", skipNode],
    ["the comparison with InfluxDB 1.6", skipInfluxd],
  ] as const
) {
  // deno-lint-ignore no-console
  if (why !== undefined) console.log(`influx_clients_test.ts: skipping ${what}: ${why}`);
}

/** A stored event as the tests compare it: its time in ms, type, data and tags. */
interface Stored {
  ms: number;
  type: string;
  data: unknown;
  tags: unknown;
}

/** The events of the site files, in file order, without the service's own (`telemetry.*`). */
async function stored(siteDir: string): Promise<Stored[]> {
  return (await readSiteLines(siteDir)).map(parseEnvelope)
    .filter((e) => !e.type.startsWith("telemetry."))
    .map((e) => ({ ms: Date.parse(e.ts), type: e.type, data: e.data, tags: e.meta.tags }));
}

/** A temp file holding `text`, removed on dispose. */
async function textFile(text: string): Promise<{ path: string } & AsyncDisposable> {
  const dir = await tempDir("obs-telemetry-import-");
  const path = join(dir.path, "import.txt");
  await Deno.writeTextFile(path, text);
  return { path, [Symbol.asyncDispose]: () => dir[Symbol.asyncDispose]() };
}

/** The `influx -import` file of the import tests: escaping, blank lines, a comment, `-precision s`. */
const IMPORT_FILE = `# DML
# CONTEXT-DATABASE: site
# the dome's shutter, then the weather station
dome,name=north\\,east open=true,angle=90i 1796630400

dome,name=north\\,east open=false,angle=0i 1796630460
weather,station=WS\\ 2 temp_c=-3.25,note="frost, \\"light\\"" 1796630400
`;

/** What the service stores from {@linkcode IMPORT_FILE}. */
const IMPORTED: Stored[] = [
  {
    ms: 1796630400_000,
    type: "dome",
    data: { open: true, angle: 90 },
    tags: { name: "north,east" },
  },
  {
    ms: 1796630460_000,
    type: "dome",
    data: { open: false, angle: 0 },
    tags: { name: "north,east" },
  },
  {
    ms: 1796630400_000,
    type: "weather",
    data: { temp_c: -3.25, note: 'frost, "light"' },
    tags: { station: "WS 2" },
  },
];

// ---------------------------------------------------------------------------------------------
// Debian's influx command line (influxdb-client 1.6): basic auth, POST /write?db=&precision=.

Deno.test({
  name:
    "influx -execute 'INSERT ...' stores one event: the measurement as type, the fields as data, the tags as meta.tags, at the service's time",
  ignore: skipCli !== undefined,
  async fn() {
    await using site = await tempDir();
    await using server = await testServer({ siteDir: site.path, token: TOKEN });
    const before = Date.now();
    const out = await runInfluxCli(server.addr.port, TOKEN, [
      "-database",
      "site",
      "-execute",
      'INSERT weather,dome=north,site=La\\ Palma temp_c=7.5,humidity=61i,rain=false,station="WS \\"2\\""',
    ]);
    const after = Date.now();
    // The CLI prints a refused write as "ERR: ..." on stdout and still exits 0.
    assert.deepEqual(out, { code: 0, stdout: "", stderr: "" });
    const [event, ...rest] = await stored(site.path);
    assert.deepEqual(rest, []);
    assert.deepEqual(
      { ...event!, ms: 0 },
      {
        ms: 0,
        type: "weather",
        data: { temp_c: 7.5, humidity: 61, rain: false, station: 'WS "2"' },
        tags: { dome: "north", site: "La Palma" },
      },
    );
    assert.ok(
      event!.ms >= before && event!.ms <= after,
      `ts ${event!.ms} in [${before}, ${after}]`,
    );
  },
});

Deno.test({
  name: "influx -import stores every line of the file at its time in -precision s",
  ignore: skipCli !== undefined,
  async fn() {
    await using site = await tempDir();
    await using server = await testServer({ siteDir: site.path, token: TOKEN });
    await using file = await textFile(IMPORT_FILE);
    const out = await runInfluxCli(server.addr.port, TOKEN, [
      "-import",
      "-path",
      file.path,
      "-precision",
      "s",
    ]);
    assert.equal(out.code, 0, out.stderr);
    assert.match(out.stdout + out.stderr, /Processed 3 inserts/);
    assert.match(out.stdout + out.stderr, /Failed 0 inserts/);
    assert.deepEqual(await stored(site.path), IMPORTED);
  },
});

Deno.test({
  name:
    "influx -import of a file with a malformed line stores the other lines and reports the partial write naming that line",
  ignore: skipCli !== undefined,
  async fn() {
    await using site = await tempDir();
    await using server = await testServer({ siteDir: site.path, token: TOKEN });
    await using file = await textFile(
      `${IMPORT_FILE}weather temp_c= 1796630401\nweather temp_c=1.5 1796630402\n`,
    );
    const out = await runInfluxCli(server.addr.port, TOKEN, [
      "-import",
      "-path",
      file.path,
      "-precision",
      "s",
    ]);
    // The importer counts the whole batch as not inserted; the service kept its valid lines
    // (docs/influx.md), and the 400 told the importer not to send them again.
    assert.equal(out.code, 1, out.stderr);
    assert.match(out.stderr, /partial write: .*weather temp_c= 1796630401/);
    assert.deepEqual(await stored(site.path), [
      ...IMPORTED,
      { ms: 1796630402_000, type: "weather", data: { temp_c: 1.5 }, tags: undefined },
    ]);
  },
});

Deno.test({
  name: "influx -import with a wrong password stores nothing",
  ignore: skipCli !== undefined,
  async fn() {
    await using site = await tempDir();
    await using server = await testServer({ siteDir: site.path, token: TOKEN });
    await using file = await textFile(IMPORT_FILE);
    const out = await runInfluxCli(server.addr.port, "not-the-token", [
      "-import",
      "-path",
      file.path,
      "-precision",
      "s",
    ]);
    assert.notEqual(out.code, 0, out.stderr);
    assert.deepEqual(await stored(site.path), []);
  },
});

Deno.test({
  name:
    "influx -import leaves in the service the points it leaves in InfluxDB 1.6: times, tags and typed fields",
  ignore: skipInfluxd !== undefined,
  async fn() {
    await using site = await tempDir();
    await using server = await testServer({ siteDir: site.path, token: TOKEN });
    await using influxd = await testInfluxd("site");
    await using file = await textFile(IMPORT_FILE);
    for (const port of [server.addr.port, influxd.server.port]) {
      const out = await runInfluxCli(port, TOKEN, [
        "-import",
        "-path",
        file.path,
        "-precision",
        "s",
      ]);
      assert.equal(out.code, 0, out.stderr);
    }
    // InfluxDB's points as the service's events: each non-null column a tag or a field.
    const fromInflux: Stored[] = [];
    for (const measurement of ["dome", "weather"]) {
      const tagKeys = await influxQuery(
        influxd.server.url,
        "site",
        `SHOW TAG KEYS FROM ${measurement}`,
      );
      const tags = new Set(tagKeys.results[0]!.series?.[0]?.values.map((v) => v[0]) ?? []);
      const answer = await influxQuery(influxd.server.url, "site", `SELECT * FROM ${measurement}`);
      const { columns, values } = answer.results[0]!.series![0]!;
      for (const row of values) {
        const data: Record<string, unknown> = {};
        const pointTags: Record<string, unknown> = {};
        columns.forEach((column, k) => {
          if (k > 0 && row[k] !== null) (tags.has(column) ? pointTags : data)[column] = row[k];
        });
        // The service stores no meta.tags for a line without tags.
        const point: Stored = {
          ms: Date.parse(row[0] as string),
          type: measurement,
          data,
          tags: Object.keys(pointTags).length === 0 ? undefined : pointTags,
        };
        fromInflux.push(point);
      }
    }
    const key = (e: Stored) => `${e.type} ${e.ms}`;
    const sort = (xs: Stored[]) => xs.toSorted((a, b) => key(a).localeCompare(key(b)));
    assert.deepEqual(sort(await stored(site.path)), sort(fromInflux));
  },
});

// ---------------------------------------------------------------------------------------------
// Debian's python3-influxdb (5.3): basic auth, POST /write?db=site[&precision=], ns times.

Deno.test({
  name:
    "InfluxDBClient.write_points with the token as password stores each point with its tags, fields and time",
  ignore: skipPython !== undefined,
  async fn() {
    await using site = await tempDir();
    await using server = await testServer({ siteDir: site.path, token: TOKEN });
    const seen = await runPythonWrite(server.addr.port, TOKEN, [
      {
        measurement: "weather",
        tags: { dome: "north" },
        time: "2026-12-07T08:00:00.123456Z",
        fields: { temp_c: 7.5, cloud_cover: 3, safe: true, sky: "clear" },
      },
      {
        measurement: "weather",
        tags: { dome: "north" },
        time: "2026-12-07T08:00:01Z",
        fields: { temp_c: 7.25, cloud_cover: 4, safe: false, sky: "hazy" },
      },
    ]);
    assert.deepEqual(seen, { result: true });
    assert.deepEqual(await stored(site.path), [
      {
        ms: Date.parse("2026-12-07T08:00:00.123Z"), // ns truncated to ms
        type: "weather",
        data: { temp_c: 7.5, cloud_cover: 3, safe: true, sky: "clear" },
        tags: { dome: "north" },
      },
      {
        ms: Date.parse("2026-12-07T08:00:01Z"),
        type: "weather",
        data: { temp_c: 7.25, cloud_cover: 4, safe: false, sky: "hazy" },
        tags: { dome: "north" },
      },
    ]);
  },
});

Deno.test({
  name: "InfluxDBClient.write_points with time_precision='ms' stores each time as those ms",
  ignore: skipPython !== undefined,
  async fn() {
    await using site = await tempDir();
    await using server = await testServer({ siteDir: site.path, token: TOKEN });
    const seen = await runPythonWrite(
      server.addr.port,
      TOKEN,
      [{ measurement: "mount", time: 1796630400_250, fields: { alt_deg: 45.5 } }],
      { timePrecision: "ms" },
    );
    assert.deepEqual(seen, { result: true });
    assert.deepEqual(await stored(site.path), [
      { ms: 1796630400_250, type: "mount", data: { alt_deg: 45.5 }, tags: undefined },
    ]);
  },
});

Deno.test({
  name:
    "InfluxDBClient.write_points with a wrong password raises InfluxDBClientError 401 and stores nothing",
  ignore: skipPython !== undefined,
  async fn() {
    await using site = await tempDir();
    await using server = await testServer({ siteDir: site.path, token: TOKEN });
    const seen = await runPythonWrite(server.addr.port, "not-the-token", [
      { measurement: "weather", fields: { temp_c: 7.5 } },
    ]);
    assert.equal(seen.error?.code, 401, JSON.stringify(seen));
    assert.deepEqual(await stored(site.path), []);
  },
});

// ---------------------------------------------------------------------------------------------
// The npm @influxdata/influxdb-client (1.35): Authorization: Token, POST /api/v2/write.

/** The points the npm tests write: every field type of line protocol, at ms times. */
function npmPoints(count: number, t0: number) {
  return Array.from({ length: count }, (_, i) => ({
    measurement: "weather",
    tags: { dome: "north", sensor: i % 2 ? "b" : "a" },
    floats: { temp_c: 7.5 + i / 4 },
    ints: { cloud_cover: 2 - 2 * i }, // negatives from the third on
    uints: { samples: i },
    booleans: { safe: i % 3 !== 0 },
    strings: { sky: `clear, "${i}"` },
    timeMs: t0 + i * 1000 + 7,
  }));
}

/** What the service stores from {@linkcode npmPoints}. */
function npmStored(points: ReturnType<typeof npmPoints>): Stored[] {
  return points.map((p) => ({
    ms: p.timeMs,
    type: p.measurement,
    data: { ...p.floats, ...p.ints, ...p.uints, ...p.booleans, ...p.strings },
    tags: p.tags,
  }));
}

const T0 = Date.parse("2026-12-07T08:00:00Z");

Deno.test({
  name:
    "the npm client's WriteApi under Deno (fetch) stores points of every field type with Token auth",
  async fn() {
    await using site = await tempDir();
    await using server = await testServer({ siteDir: site.path, token: TOKEN });
    const points = npmPoints(3, T0);
    const writeApi = new InfluxDB({ url: server.url, token: TOKEN })
      .getWriteApi("obs", "site", "ms", { maxRetries: 0 });
    for (const p of points) {
      writeApi.writePoint(
        new Point(p.measurement).tag("dome", p.tags.dome).tag("sensor", p.tags.sensor)
          .floatField("temp_c", p.floats.temp_c).intField("cloud_cover", p.ints.cloud_cover)
          .uintField("samples", p.uints.samples).booleanField("safe", p.booleans.safe)
          .stringField("sky", p.strings.sky).timestamp(new Date(p.timeMs)),
      );
    }
    await writeApi.close();
    assert.deepEqual(await stored(site.path), npmStored(points));
  },
});

Deno.test({
  name:
    "the npm client's WriteApi under Node sends its batches gzipped and the service stores every point",
  ignore: skipNode !== undefined,
  async fn() {
    await using site = await tempDir();
    await using server = await testServer({ siteDir: site.path, token: TOKEN });
    const points = npmPoints(50, T0);
    // gzipThreshold 0: the Node transport gzips every body (Content-Encoding: gzip).
    const seen = await runNodeWrite(server.url, TOKEN, points, { precision: "ns" });
    assert.deepEqual(seen, { ok: true });
    assert.deepEqual(await stored(site.path), npmStored(points));
  },
});

Deno.test({
  name: "the npm client's WriteApi with a wrong token fails with HttpError 401 and stores nothing",
  ignore: skipNode !== undefined,
  async fn() {
    await using site = await tempDir();
    await using server = await testServer({ siteDir: site.path, token: TOKEN });
    const seen = await runNodeWrite(server.url, "not-the-token", npmPoints(2, T0));
    assert.equal(seen.error?.statusCode, 401, JSON.stringify(seen));
    assert.equal(seen.error?.name, "HttpError");
    assert.deepEqual(await stored(site.path), []);
  },
});
