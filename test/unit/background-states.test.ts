import t from "tap";
import { newResponseObject, parseResponseCreateRequest, type ResponseObject } from "../../modules/openai/mod.js";
import { backgroundStates as states, type StoredResponse } from "../../modules/responses/mod.js";

// The moves of a background response's life at their edges: each is a pure function of the
// stored record (the lifecycle applies it with a compare-and-set), including the settlement of
// the rate-limit charge taken when the response was queued.

const MAX_ATTEMPTS = 3;
const held = { model: "test/sim", scope: "organization", scopeId: "org-1", window: 28_000_000, tokens: 1_000 };

function record(fields: { status?: ResponseObject["status"]; stream?: boolean; attempts?: number; charged?: boolean; spentTokens?: number; unmetered?: boolean } = {}): StoredResponse {
  const request = parseResponseCreateRequest({ model: "test/sim", input: "go", background: true, stream: fields.stream ?? false });
  const response = newResponseObject(request, { id: "resp_1", createdAt: 1, conversationId: null }, fields.status ?? "queued");
  const stored: StoredResponse = { response, ancestors: [], request: { ...request, input: [] } };
  if (fields.attempts !== undefined) stored.attempts = fields.attempts;
  if (fields.charged !== false) stored.charge = { held, spentTokens: fields.spentTokens ?? 0, unmetered: fields.unmetered ?? false };
  return stored;
}

/** A run's final object: `status`, with some output. */
function final(status: ResponseObject["status"]): ResponseObject {
  const r = record({ status }).response;
  r.output = [{ type: "message", id: "msg_1", role: "assistant", status: "completed", content: [{ type: "output_text", text: "Hi", annotations: [], logprobs: [] }] }];
  return r;
}

t.test("claim: a queued response runs, one attempt more, its charge untouched", async (t) => {
  const c = states.claim(record(), MAX_ATTEMPTS);
  t.equal(c.kind, "run");
  if (c.kind !== "run") return;
  t.equal(c.next.response.status, "in_progress");
  t.equal(c.next.attempts, 1);
  t.same(c.next.charge, { held, spentTokens: 0, unmetered: false });
  t.equal(states.claim(record({ attempts: 2 }), MAX_ATTEMPTS).kind, "run", "a requeued one runs whatever its attempts (they were counted when it was requeued)");
});

t.test("claim of a response left in_progress (its host died): runs again until its attempts are used up", async (t) => {
  const again = states.claim(record({ status: "in_progress", attempts: MAX_ATTEMPTS - 1 }), MAX_ATTEMPTS);
  t.equal(again.kind, "run", "attempts left: the run starts over");
  if (again.kind === "run") {
    t.equal(again.next.attempts, MAX_ATTEMPTS);
    t.equal(again.next.charge?.unmetered, true, "the dead run's usage is unknown");
  }
  const exhausted = states.claim(record({ status: "in_progress", attempts: MAX_ATTEMPTS }), MAX_ATTEMPTS);
  t.same(exhausted, { kind: "fail", error: { code: "server_error", message: `The background run was interrupted ${MAX_ATTEMPTS} times; giving up.` } });
  const streamed = states.claim(record({ status: "in_progress", attempts: 1, stream: true }), MAX_ATTEMPTS);
  t.same(streamed, { kind: "fail", error: { code: "server_error", message: states.STREAM_CUT } }, "a stream whose events went out cannot start over");
});

t.test("claim after the end: nothing to do", async (t) => {
  for (const status of ["completed", "incomplete", "failed", "cancelled"] as const) t.same(states.claim(record({ status }), MAX_ATTEMPTS), { kind: "over" }, status);
  const { request: _gone, ...withoutRequest } = record();
  t.same(states.claim(withoutRequest, MAX_ATTEMPTS), { kind: "fail", error: { code: "server_error", message: states.NO_REQUEST } });
});

t.test("cancel while queued: cancelled at once, the whole estimate goes back", async (t) => {
  const move = states.cancel(record());
  t.equal(move?.next.response.status, "cancelled");
  t.same(move?.settle, { held, usedTokens: 0 });
  t.equal(move?.next.charge, undefined, "the charge leaves the record: it cannot be settled twice");
  const handedBack = states.cancel(record({ spentTokens: 120 }));
  t.same(handedBack?.settle, { held, usedTokens: 120 }, "what earlier runs used stays charged");
});

t.test("cancel while in progress: cancelled, the charge stays for the run, which settles it when it stops", async (t) => {
  const move = states.cancel(record({ status: "in_progress", attempts: 1 }));
  t.equal(move?.next.response.status, "cancelled");
  t.equal(move?.settle, undefined);
  t.same(move?.next.charge, { held, spentTokens: 0, unmetered: false });
  const stopped = states.finish(move!.next, final("cancelled"), 40);
  t.equal(stopped?.next.response.status, "cancelled");
  t.equal(stopped?.next.response.output.length, 1, "the output produced until the stop is kept");
  t.equal(stopped?.next.response.completed_at, null);
  t.same(stopped?.settle, { held, usedTokens: 40 });
});

t.test("cancel after the end changes nothing", async (t) => {
  for (const status of ["completed", "incomplete", "failed", "cancelled"] as const) t.equal(states.cancel(record({ status })), undefined, status);
});

t.test("finish: the run's result is stored and its usage settled; a finish that finds the response moved on does nothing", async (t) => {
  for (const status of ["completed", "incomplete", "failed"] as const) {
    const move = states.finish(record({ status: "in_progress", attempts: 1 }), final(status), 300);
    t.equal(move?.next.response.status, status);
    t.same(move?.settle, { held, usedTokens: 300 });
    t.equal(move?.next.charge, undefined);
  }
  t.equal(states.finish(record({ status: "queued" }), final("completed"), 300), undefined, "requeued meanwhile");
  t.equal(states.finish(record({ status: "completed" }), final("completed"), 300), undefined, "finished already");
  t.equal(states.finish(record({ status: "in_progress", charged: false }), final("completed"), 300)?.settle, undefined, "rate limits off: nothing to settle");
});

t.test("settlement: earlier runs count, and a run whose usage died with its host refunds nothing", async (t) => {
  t.same(states.finish(record({ status: "in_progress", spentTokens: 250 }), final("completed"), 300)?.settle, { held, usedTokens: 550 }, "a run lost earlier used 250: used beyond the estimate");
  t.same(states.finish(record({ status: "in_progress", unmetered: true }), final("completed"), 300)?.settle, { held, usedTokens: 1_000 }, "at least the estimate");
  t.same(states.finish(record({ status: "in_progress", unmetered: true, spentTokens: 900 }), final("completed"), 300)?.settle, { held, usedTokens: 1_200 }, "or more when more is known");
});

t.test("runner lost mid-run: back to queued with what the run used remembered; the attempt counts", async (t) => {
  const move = states.requeue(record({ status: "in_progress", attempts: 2 }), final("failed"), 75, true);
  t.equal(move?.next.response.status, "queued");
  t.equal(move?.next.attempts, 2);
  t.same(move?.next.charge, { held, spentTokens: 75, unmetered: false });
  t.equal(move?.settle, undefined, "settled when a run ends it");
  t.equal(move?.next.response.output.length, 0, "nothing of the lost run is kept");
});

t.test("handed back at shutdown: queued again, not an attempt", async (t) => {
  const move = states.requeue(record({ status: "in_progress", attempts: 1 }), final("cancelled"), 20, false);
  t.equal(move?.next.response.status, "queued");
  t.equal(move?.next.attempts, 0);
  t.equal(move?.next.charge?.spentTokens, 20);
});

t.test("a run requeued after a cancel came in ends cancelled instead", async (t) => {
  const move = states.requeue(record({ status: "cancelled", attempts: 1 }), final("cancelled"), 20, true);
  t.equal(move?.next.response.status, "cancelled");
  t.same(move?.settle, { held, usedTokens: 20 });
  t.equal(states.requeue(record({ status: "completed" }), final("completed"), 20, true), undefined);
});

t.test("fail: from queued or in progress, never after the end", async (t) => {
  const error = { code: "invalid_prompt", message: "bad" };
  const fromQueued = states.fail(record(), error);
  t.equal(fromQueued?.next.response.status, "failed");
  t.same(fromQueued?.next.response.error, error);
  t.same(fromQueued?.settle, { held, usedTokens: 0 }, "nothing ran: all of the estimate goes back");
  t.same(states.fail(record({ status: "in_progress", spentTokens: 30 }), error)?.settle, { held, usedTokens: 30 });
  for (const status of ["completed", "incomplete", "failed", "cancelled"] as const) t.equal(states.fail(record({ status }), error), undefined, status);
});

t.test("the whole life: queued, lost twice, attempts used up", async (t) => {
  let r = record();
  for (let i = 1; i <= MAX_ATTEMPTS; i++) {
    const c = states.claim(r, MAX_ATTEMPTS);
    t.equal(c.kind, "run", `run ${i}`);
    if (c.kind !== "run") return;
    r = c.next;
    if (i < MAX_ATTEMPTS) r = states.requeue(r, final("failed"), 10, true)!.next;
  }
  t.equal(r.attempts, MAX_ATTEMPTS);
  // The last run dies with its host: its job comes back with the record still in_progress.
  const last = states.claim(r, MAX_ATTEMPTS);
  t.equal(last.kind, "fail");
  if (last.kind !== "fail") return;
  const ended = states.fail(r, last.error);
  t.equal(ended?.next.response.status, "failed");
  t.same(ended?.settle, { held, usedTokens: 20 }, "the two runs that ended with a known usage");
});
