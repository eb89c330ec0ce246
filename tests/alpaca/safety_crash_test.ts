/**
 * External events set over Alpaca across kill -9 (docs/safety.md, "Actions: the safety hub over
 * Alpaca"): `cli.ts telemetry run` as a child process under the scoped permissions of the flag
 * table, killed with SIGKILL right after an answer or at random moments while a client sets and
 * clears events, and restarted on the same site directory. A `SetExternalEvents` that was
 * answered is saved and fdatasynced: it holds its profiles after the restart unless an answered
 * `ClearExternalEvents` followed, and an answered clear stays cleared.
 *
 * Replay a failing run with `FAULT_SEED=<seed> deno test -A tests/alpaca/safety_crash_test.ts`.
 * @module
 */

import assert from "node:assert/strict";
import { join } from "node:path";
import { Rng, seedFromEnv } from "../_shared/fault_util.ts";
import { getJson, tempDir } from "../_shared/util.ts";
import {
  actionOk,
  alpacaAction,
  eventIds,
  isSafe,
  postSafe,
  PROFILE_TYPES,
  safetyEvent,
  spawnAlpacaChild,
  writeTypes,
} from "../_shared/alpaca_util.ts";

const SEED = seedFromEnv(0xa1ac_5afe);

function delay(ms: number): Promise<void> {
  return new Promise((resolve) => setTimeout(resolve, ms));
}

Deno.test("an external event set through Alpaca survives kill -9 right after its answer", async () => {
  await using dir = await tempDir();
  const siteDir = join(dir.path, "site");
  const types = await writeTypes(siteDir, PROFILE_TYPES);
  {
    await using service = await spawnAlpacaChild(siteDir, types);
    await postSafe(service.url);
    assert.equal(await isSafe(service.base, 0), true);
    await actionOk(service.base, 0, "SetExternalEvents", [safetyEvent("ups")]);
    await service.child.kill("SIGKILL");
  }
  await using again = await spawnAlpacaChild(siteDir, types);
  assert.deepEqual(await eventIds(again.base, 0), ["ups"]);
  assert.equal(await isSafe(again.base, 0), false);
  // The event is what holds the site: the sensors are as fresh as before the kill.
  const safety = await getJson(`${again.url}/safety`);
  assert.deepEqual((safety.body as { reasons: string[] }).reasons, ["external: UPS: on battery"]);
});

/** What the client knows of one event `Id`: held (and through which monitor), cleared, unknown. */
type Known = { held: false } | { held: true; device: 0 | 1 } | undefined;

/**
 * Checks every known `Id` against a restarted service, and learns the unknown ones (a request the
 * kill cut short may or may not have been saved). safetymonitor/1 (north) sees the events held
 * by every profile and its own; safetymonitor/0 (site) only the first.
 */
async function check(base: string, known: Map<string, Known>, round: number): Promise<void> {
  const north = new Set(await eventIds(base, 1));
  const site = new Set(await eventIds(base, 0));
  for (const [id, state] of known) {
    const at = `round ${round} (seed ${SEED}), ${id}`;
    if (state === undefined) {
      known.set(id, north.has(id) ? { held: true, device: site.has(id) ? 0 : 1 } : { held: false });
    } else if (state.held) {
      assert.ok(north.has(id), `${at}: answered set, lost after kill -9`);
      assert.equal(site.has(id), state.device === 0, `${at}: held by the wrong profiles`);
    } else {
      assert.ok(!north.has(id) && !site.has(id), `${at}: answered clear, back after kill -9`);
    }
  }
  const held = [...known.values()].filter((s) => s?.held);
  assert.equal(await isSafe(base, 1), held.length === 0, `round ${round}: north's issafe`);
  assert.equal(
    await isSafe(base, 0),
    !held.some((s) => s?.held && s.device === 0),
    `round ${round}: site's issafe`,
  );
}

/**
 * One client setting and clearing events one request at a time until the kill cuts it off:
 * every answered change is written to `known`, the one in flight at the kill leaves its `Id`
 * unknown. Returns the changes answered.
 */
async function client(base: string, rng: Rng, known: Map<string, Known>): Promise<number> {
  const ids = [...known.keys()];
  let answered = 0;
  for (;;) {
    const id = rng.pick(ids);
    const state = known.get(id);
    const clear = state?.held === true && rng.chance(0.5);
    const device = rng.int(0, 1) as 0 | 1;
    known.set(id, undefined);
    let body;
    try {
      body = clear
        ? await alpacaAction(base, device, "ClearExternalEvents", [id])
        : await alpacaAction(base, device, "SetExternalEvents", [safetyEvent(id)]);
    } catch (err) {
      if (err instanceof assert.AssertionError) throw err;
      return answered; // killed: the Id stays unknown
    }
    assert.equal(body.ErrorNumber, 0, `seed ${SEED}: ${body.ErrorMessage}`);
    known.set(id, clear ? { held: false } : { held: true, device });
    answered++;
  }
}

Deno.test("every answered SetExternalEvents is in force after kill -9 at a random moment unless an answered clear followed", async () => {
  // deno-lint-ignore no-console
  console.log(`seed ${SEED}`);
  const rng = new Rng(SEED);
  await using dir = await tempDir();
  const siteDir = join(dir.path, "site");
  const types = await writeTypes(siteDir, PROFILE_TYPES);
  const known = new Map<string, Known>(
    ["ups", "door", "rain", "cloud", "power", "mount"].map((id) => [id, { held: false }]),
  );
  const ROUNDS = 8;
  const deadline = Date.now() + 120_000;
  let answered = 0, rounds = 0;
  for (let round = 0; round < ROUNDS && Date.now() < deadline; round++) {
    await using service = await spawnAlpacaChild(siteDir, types);
    if (round === 0) await postSafe(service.url);
    await check(service.base, known, round);
    const running = client(service.base, rng, known);
    await delay(rng.int(5, 250));
    await service.child.kill("SIGKILL");
    answered += await running;
    rounds++;
  }
  await using last = await spawnAlpacaChild(siteDir, types);
  await check(last.base, known, rounds);
  // deno-lint-ignore no-console
  console.log(`${answered} changes answered over ${rounds} kills`);
  assert.ok(rounds >= 3, `only ${rounds} rounds within the time bound`);
  assert.ok(answered >= rounds, `only ${answered} changes answered in ${rounds} rounds`);
});
