/**
 * The up/down state (`wire/up_down.ts`) behind every "log once per change" of the package: it
 * says when it changed, and only then. @module
 */

import assert from "node:assert/strict";
import { UpDown } from "../../wire/up_down.ts";

Deno.test("UpDown.down() is true only when the state was not down already", () => {
  const peer = new UpDown("up");
  assert.deepEqual([peer.down(), peer.down(), peer.down()], [true, false, false]);
});

Deno.test("UpDown.up() is true only when the state was not up already", () => {
  const peer = new UpDown("down");
  assert.deepEqual([peer.up(), peer.up(), peer.up()], [true, false, false]);
});

Deno.test("UpDown created up says nothing for a first success", () => {
  assert.equal(new UpDown("up").up(), false);
});

Deno.test("UpDown created without a state counts the first outcome as a change", () => {
  assert.equal(new UpDown().up(), true);
  assert.equal(new UpDown().down(), true);
});

Deno.test("UpDown.state is undefined until the first outcome, then the last one", () => {
  const peer = new UpDown();
  assert.equal(peer.state, undefined);
  peer.down();
  assert.equal(peer.state, "down");
  peer.up();
  assert.equal(peer.state, "up");
});

Deno.test("UpDown reports each change of a flapping peer once", () => {
  const peer = new UpDown("up");
  const changes = [true, false, false, true, true, false, true]
    .map((ok) => ok ? peer.up() : peer.down());
  assert.deepEqual(changes, [false, true, false, true, false, true, true]);
});
