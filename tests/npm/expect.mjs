// The check the npm tests share: a call must fail with a real `Error` (not a thrown string or a
// bare value) whose message matches `pattern`; `what` names the case in the failure.
import assert from "node:assert/strict";

export async function rejects(f, pattern, what) {
  try {
    await f();
  } catch (e) {
    assert.ok(e instanceof Error, `${what}: threw a non-Error ${e}`);
    assert.match(e.message, pattern, `${what}: ${e.message}`);
    return;
  }
  assert.fail(`${what}: no error`);
}

/** `rejects` for a synchronous call. */
export const throws = (f, pattern, what) => rejects(async () => f(), pattern, what);
