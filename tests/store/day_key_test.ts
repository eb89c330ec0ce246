/**
 * Tests of `store/day_key.ts`, the night a moment belongs to (local noon to noon), and of the site file
 * the service chooses by it: at local noon, also on DST change days, by receive time.
 * @module
 */

import assert from "node:assert/strict";
import { join } from "node:path";
import fc from "npm:fast-check@^4.10.2";
import { dayKey, DayKeyer } from "../../store/day_key.ts";
import { TelemetryService } from "../../core/service.ts";
import { readLines, siteFiles, tempDir } from "../_shared/util.ts";

/** Opens a service whose clock the test sets: `now.ms = …` before each record(). */
async function openAt(
  siteDir: string,
  timeZone: string,
): Promise<{ service: TelemetryService; now: { ms: number } }> {
  const now = { ms: 0 };
  const service = await TelemetryService.open({ siteDir, timeZone, clock: () => now.ms });
  return { service, now };
}

/** Records one `probe` event at `iso` and answers the site file it landed in. */
async function fileOfEventAt(
  service: TelemetryService,
  now: { ms: number },
  iso: string,
): Promise<string> {
  now.ms = Date.parse(iso);
  const [event] = await service.record([{ type: "probe", data: { at: iso } }]);
  for (const name of await siteFiles(service.siteDir)) {
    const lines = await readLines(join(service.siteDir, name));
    if (lines.includes(event!.line)) return name;
  }
  throw new Error(`The event posted at ${iso} is in no site file`);
}

/** The UTC offset of a zone at an instant, as Temporal reports it. */
function offsetAt(iso: string, timeZone: string): string {
  return Temporal.Instant.from(iso).toZonedDateTimeISO(timeZone).offset;
}

/** Asserts the test premise: the zone's offset changes during the given UTC span. */
function assertOffsetChanges(fromIso: string, toIso: string, timeZone: string): void {
  assert.notEqual(
    offsetAt(fromIso, timeZone),
    offsetAt(toIso, timeZone),
    `${timeZone} should change its UTC offset between ${fromIso} and ${toIso}; update the test dates to a DST change day`,
  );
}

Deno.test("dayKey() puts 11:59:59.999 local in the previous day and 12:00:00.000 in the current one", () => {
  // 2026-01-15 12:00 in America/Santiago (UTC-3 in January) is 15:00Z.
  assert.equal(dayKey(Date.parse("2026-01-15T14:59:59.999Z"), "America/Santiago"), "20260114");
  assert.equal(dayKey(Date.parse("2026-01-15T15:00:00.000Z"), "America/Santiago"), "20260115");
});

Deno.test("dayKey() agrees with the local date and hour from Intl.DateTimeFormat for any instant", () => {
  const zones = [
    "UTC",
    "Europe/Berlin",
    "America/Santiago",
    "Australia/Sydney",
    "Pacific/Chatham",
    "Asia/Kolkata",
    "America/St_Johns",
  ];
  const formats = new Map(zones.map((z) => [
    z,
    new Intl.DateTimeFormat("en-US", {
      timeZone: z,
      year: "numeric",
      month: "2-digit",
      day: "2-digit",
      hour: "2-digit",
      hourCycle: "h23",
    }),
  ]));
  const expected = (ms: number, zone: string): string => {
    const parts = Object.fromEntries(
      formats.get(zone)!.formatToParts(ms).map((p) => [p.type, p.value]),
    );
    const civil = new Date(
      Date.UTC(Number(parts.year), Number(parts.month) - 1, Number(parts.day)),
    );
    if (Number(parts.hour) < 12) civil.setUTCDate(civil.getUTCDate() - 1);
    return civil.toISOString().slice(0, 10).replaceAll("-", "");
  };
  fc.assert(
    fc.property(
      fc.integer({ min: Date.UTC(1990, 0, 1), max: Date.UTC(2090, 0, 1) }),
      fc.constantFrom(...zones),
      (ms, zone) => dayKey(ms, zone) === expected(ms, zone),
    ),
    { numRuns: 2000 },
  );
});

Deno.test("DayKeyer.keyFor() agrees with dayKey() for a sequence of instants jumping back and forth", () => {
  fc.assert(
    fc.property(
      fc.array(fc.integer({ min: Date.UTC(2020, 0, 1), max: Date.UTC(2030, 0, 1) }), {
        minLength: 1,
        maxLength: 30,
      }),
      (instants) => {
        const keyer = new DayKeyer("Europe/Berlin");
        return instants.every((ms) => keyer.keyFor(ms) === dayKey(ms, "Europe/Berlin"));
      },
    ),
    { numRuns: 200 },
  );
});

Deno.test("TelemetryService.record() rotates the site file at local noon, not before", async () => {
  await using dir = await tempDir();
  const { service, now } = await openAt(dir.path, "America/Santiago");
  await using _ = service;
  assert.equal(
    await fileOfEventAt(service, now, "2026-01-15T14:59:59.999Z"),
    "site_20260114.ndjson",
  );
  assert.equal(
    await fileOfEventAt(service, now, "2026-01-15T15:00:00.000Z"),
    "site_20260115.ndjson",
  );
});

Deno.test("TelemetryService.record() rotates at local noon on the Europe/Berlin spring DST day", async () => {
  // 2026-03-29: 02:00 CET -> 03:00 CEST; noon CEST is 10:00Z (12 real hours before is 23:00 CET).
  assertOffsetChanges("2026-03-28T23:00:00Z", "2026-03-29T09:00:00Z", "Europe/Berlin");
  await using dir = await tempDir();
  const { service, now } = await openAt(dir.path, "Europe/Berlin");
  await using _ = service;
  assert.equal(
    await fileOfEventAt(service, now, "2026-03-29T09:59:59.999Z"),
    "site_20260328.ndjson",
  );
  assert.equal(
    await fileOfEventAt(service, now, "2026-03-29T10:00:00.000Z"),
    "site_20260329.ndjson",
  );
});

Deno.test("TelemetryService.record() rotates at local noon on the Europe/Berlin autumn DST day", async () => {
  // 2026-10-25: 03:00 CEST -> 02:00 CET; noon CET is 11:00Z.
  assertOffsetChanges("2026-10-24T23:00:00Z", "2026-10-25T09:00:00Z", "Europe/Berlin");
  await using dir = await tempDir();
  const { service, now } = await openAt(dir.path, "Europe/Berlin");
  await using _ = service;
  assert.equal(
    await fileOfEventAt(service, now, "2026-10-25T10:59:59.999Z"),
    "site_20261024.ndjson",
  );
  assert.equal(
    await fileOfEventAt(service, now, "2026-10-25T11:00:00.000Z"),
    "site_20261025.ndjson",
  );
});

Deno.test("TelemetryService.record() rotates at local noon on the Australia/Sydney autumn DST day", async () => {
  // 2026-04-05: 03:00 AEDT -> 02:00 AEST; noon AEST (UTC+10) is 02:00Z.
  assertOffsetChanges("2026-04-04T14:00:00Z", "2026-04-05T01:00:00Z", "Australia/Sydney");
  await using dir = await tempDir();
  const { service, now } = await openAt(dir.path, "Australia/Sydney");
  await using _ = service;
  assert.equal(
    await fileOfEventAt(service, now, "2026-04-05T01:59:59.999Z"),
    "site_20260404.ndjson",
  );
  assert.equal(
    await fileOfEventAt(service, now, "2026-04-05T02:00:00.000Z"),
    "site_20260405.ndjson",
  );
});

Deno.test("TelemetryService.record() rotates at local noon on the Australia/Sydney spring DST day", async () => {
  // 2026-10-04: 02:00 AEST -> 03:00 AEDT; noon AEDT (UTC+11) is 01:00Z.
  assertOffsetChanges("2026-10-03T14:00:00Z", "2026-10-04T00:00:00Z", "Australia/Sydney");
  await using dir = await tempDir();
  const { service, now } = await openAt(dir.path, "Australia/Sydney");
  await using _ = service;
  assert.equal(
    await fileOfEventAt(service, now, "2026-10-04T00:59:59.999Z"),
    "site_20261003.ndjson",
  );
  assert.equal(
    await fileOfEventAt(service, now, "2026-10-04T01:00:00.000Z"),
    "site_20261004.ndjson",
  );
});

Deno.test("TelemetryService.record() rotates at local noon on the America/Santiago autumn DST day", async () => {
  // 2026-04-05: 00:00 -03 -> 23:00 -04 the day before; noon -04 is 16:00Z.
  assertOffsetChanges("2026-04-04T12:00:00Z", "2026-04-05T12:00:00Z", "America/Santiago");
  await using dir = await tempDir();
  const { service, now } = await openAt(dir.path, "America/Santiago");
  await using _ = service;
  assert.equal(
    await fileOfEventAt(service, now, "2026-04-05T15:59:59.999Z"),
    "site_20260404.ndjson",
  );
  assert.equal(
    await fileOfEventAt(service, now, "2026-04-05T16:00:00.000Z"),
    "site_20260405.ndjson",
  );
});

Deno.test("TelemetryService.record() rotates at local noon on the America/Santiago spring DST day", async () => {
  // 2026-09-06: 00:00 -04 -> 01:00 -03; noon -03 is 15:00Z.
  assertOffsetChanges("2026-09-05T12:00:00Z", "2026-09-06T12:00:00Z", "America/Santiago");
  await using dir = await tempDir();
  const { service, now } = await openAt(dir.path, "America/Santiago");
  await using _ = service;
  assert.equal(
    await fileOfEventAt(service, now, "2026-09-06T14:59:59.999Z"),
    "site_20260905.ndjson",
  );
  assert.equal(
    await fileOfEventAt(service, now, "2026-09-06T15:00:00.000Z"),
    "site_20260906.ndjson",
  );
});

Deno.test("TelemetryService.record() chooses the site file by receive time, never by ts", async () => {
  await using dir = await tempDir();
  const { service, now } = await openAt(dir.path, "UTC");
  await using _ = service;
  now.ms = Date.parse("2026-05-10T13:00:00Z");
  await service.record([{ type: "probe", data: {}, ts: "2020-01-01T13:00:00Z" }]);
  assert.deepEqual(await siteFiles(dir.path), ["site_20260510.ndjson"]);
});
