import t from "tap";
import { batchStates as states, emptyUsage, type BatchStatus, type StoredBatch } from "../../modules/batches/mod.js";
import { errors } from "../../modules/errors/mod.js";
import { failureLine, successLine, tokenUsage } from "../../modules/openai/mod.js";

// The moves of a batch's life at their edges: each is a pure function of the stored record (the
// coordinator applies it with a compare-and-set), and each refuses the states it does not leave.

const STATUSES: readonly BatchStatus[] = ["validating", "failed", "in_progress", "finalizing", "completed", "expired", "cancelling", "cancelled"];
const FINAL: readonly BatchStatus[] = ["failed", "completed", "expired", "cancelled"];
const AT = 1_700_000_100;

function record(status: BatchStatus = "validating", fields: Partial<StoredBatch> & { total?: number; started?: boolean } = {}): StoredBatch {
  const { total = 0, started = status !== "validating", ...rest } = fields;
  return {
    batch: {
      id: "batch_1",
      object: "batch",
      endpoint: "/v1/chat/completions",
      model: null,
      errors: null,
      input_file_id: "file-in",
      completion_window: "24h",
      status,
      output_file_id: null,
      error_file_id: null,
      created_at: 1_700_000_000,
      in_progress_at: started ? 1_700_000_010 : null,
      expires_at: 1_700_086_400,
      finalizing_at: null,
      completed_at: null,
      failed_at: null,
      expired_at: null,
      cancelling_at: null,
      cancelled_at: null,
      request_counts: { total, completed: 0, failed: 0 },
      metadata: null,
      usage: emptyUsage(),
    },
    project: "proj-1",
    outputTtlSeconds: null,
    enqueued: status !== "validating",
    ending: null,
    ...rest,
  };
}

/** The statuses other than `allowed`: a move from each of them is refused. */
const others = (...allowed: BatchStatus[]) => STATUSES.filter((s) => !allowed.includes(s));

t.test("isFinal: failed, completed, expired and cancelled, nothing else", async (t) => {
  for (const s of STATUSES) t.equal(states.isFinal(s), FINAL.includes(s), s);
});

t.test("validate: a validating batch runs with its total and model; from nowhere else", async (t) => {
  const next = states.validate(record("validating", { enqueued: true }), { total: 3, model: "test/sim" }, AT);
  t.equal(next?.batch.status, "in_progress");
  t.equal(next?.batch.in_progress_at, AT);
  t.same(next?.batch.request_counts, { total: 3, completed: 0, failed: 0 });
  t.equal(next?.batch.model, "test/sim");
  t.equal(next?.enqueued, false, "its lines are yet to be published");
  for (const s of others("validating")) t.equal(states.validate(record(s), { total: 3, model: null }, AT), undefined, s);
});

t.test("reject: a validating batch fails with the problems of its input; from nowhere else", async (t) => {
  const problems = [{ code: "invalid_json_line", message: "bad", param: null, line: 2 }];
  const next = states.reject(record(), problems, AT);
  t.equal(next?.batch.status, "failed");
  t.equal(next?.batch.failed_at, AT);
  t.same(next?.batch.errors, { object: "list", data: problems });
  for (const s of others("validating")) t.equal(states.reject(record(s), problems, AT), undefined, s);
});

t.test("enqueued: noted once on a live record; a final record never moves", async (t) => {
  t.equal(states.enqueued(record("in_progress", { enqueued: false }))?.enqueued, true);
  t.equal(states.enqueued(record("cancelling", { enqueued: false }))?.enqueued, true, "cancelled while it enqueued");
  t.equal(states.enqueued(record("in_progress", { enqueued: true })), undefined, "noted already");
  for (const s of FINAL) t.equal(states.enqueued(record(s, { enqueued: false })), undefined, s);
});

t.test("progress: the counters of a running batch; of no other", async (t) => {
  const usage = tokenUsage(10, 20);
  const next = states.progress(record("in_progress", { total: 5 }), { completed: 2, failed: 1 }, usage);
  t.equal(next?.batch.status, "in_progress");
  t.same(next?.batch.request_counts, { total: 5, completed: 2, failed: 1 });
  t.same(next?.batch.usage, usage);
  for (const s of others("in_progress")) t.equal(states.progress(record(s), { completed: 2, failed: 1 }, usage), undefined, s);
});

t.test("linesDone and expire: a running batch finalizes towards completed or expired", async (t) => {
  const usage = tokenUsage(7, 9);
  const done = states.linesDone(record("in_progress", { total: 2 }), { completed: 1, failed: 1 }, usage, AT);
  t.equal(done?.batch.status, "finalizing");
  t.equal(done?.batch.finalizing_at, AT);
  t.equal(done?.ending, "completed");
  t.same(done?.batch.request_counts, { total: 2, completed: 1, failed: 1 });
  t.same(done?.batch.usage, usage);
  const expired = states.expire(record("in_progress", { total: 2 }), AT);
  t.equal(expired?.batch.status, "finalizing");
  t.equal(expired?.batch.finalizing_at, AT);
  t.equal(expired?.ending, "expired");
  for (const s of others("in_progress")) {
    t.equal(states.linesDone(record(s), { completed: 0, failed: 0 }, usage, AT), undefined, `linesDone from ${s}`);
    t.equal(states.expire(record(s), AT), undefined, `expire from ${s}`);
  }
});

t.test("cancel: validating and running batches go cancelling; a cancelling one stays; others are refused", async (t) => {
  for (const s of ["validating", "in_progress"] as const) {
    const move = states.cancel(record(s), AT);
    t.equal(move.kind, "cancel", s);
    if (move.kind !== "cancel") continue;
    t.equal(move.next.batch.status, "cancelling");
    t.equal(move.next.batch.cancelling_at, AT);
  }
  t.same(states.cancel(record("cancelling"), AT), { kind: "cancelling" });
  for (const s of ["finalizing", ...FINAL] as const) t.same(states.cancel(record(s), AT), { kind: "refused", status: s }, s);
});

t.test("endEarly: a cancelling batch is cancelled, another live one fails for the reason; a final one stays", async (t) => {
  const cancelled = states.endEarly(record("cancelling"), "why", AT);
  t.equal(cancelled?.batch.status, "cancelled");
  t.equal(cancelled?.batch.cancelled_at, AT);
  t.equal(cancelled?.batch.errors, null);
  for (const s of ["validating", "in_progress", "finalizing"] as const) {
    const failed = states.endEarly(record(s), "the input file was deleted", AT);
    t.equal(failed?.batch.status, "failed", s);
    t.equal(failed?.batch.failed_at, AT);
    t.same(failed?.batch.errors, { object: "list", data: [{ code: "batch_failed", message: "the input file was deleted", param: null, line: null }] });
  }
  for (const s of FINAL) t.equal(states.endEarly(record(s), "why", AT), undefined, s);
});

t.test("finalize: the batch ends as its ending with its files and counters; from finalizing, cancelling or in_progress", async (t) => {
  const files = { outputFileId: "file-O", errorFileId: null };
  const usage = tokenUsage(3, 4);
  const stamp = { completed: "completed_at", expired: "expired_at", cancelled: "cancelled_at" } as const;
  for (const from of ["finalizing", "cancelling", "in_progress"] as const) {
    for (const ending of ["completed", "expired", "cancelled"] as const) {
      const current = record(from, { total: 4, ending: from === "finalizing" ? ending : null });
      const next = states.finalize(current, ending, files, { completed: 3, failed: 1 }, usage, AT);
      t.equal(next?.batch.status, ending, `${from} -> ${ending}`);
      t.equal(next?.batch[stamp[ending]], AT);
      t.equal(next?.batch.finalizing_at, AT, "set when it was not finalizing before");
      t.equal(next?.batch.output_file_id, "file-O");
      t.equal(next?.batch.error_file_id, null);
      t.same(next?.batch.request_counts, { total: 4, completed: 3, failed: 1 });
      t.same(next?.batch.usage, usage);
      t.equal(next?.ending, null);
    }
  }
  const finalizing = record("finalizing", { total: 1, ending: "completed" });
  finalizing.batch.finalizing_at = AT - 50;
  t.equal(states.finalize(finalizing, "completed", files, { completed: 1, failed: 0 }, usage, AT)?.batch.finalizing_at, AT - 50, "kept when it was finalizing");
  for (const s of others("finalizing", "cancelling", "in_progress")) t.equal(states.finalize(record(s), "completed", files, { completed: 0, failed: 0 }, usage, AT), undefined, s);
});

t.test("duty: what the coordinator does with a batch in each state", async (t) => {
  t.same(states.duty(record("validating")), { kind: "validate" });
  t.same(states.duty(record("in_progress", { enqueued: false })), { kind: "enqueue" });
  t.same(states.duty(record("in_progress", { enqueued: true })), { kind: "watch" });
  t.same(states.duty(record("cancelling")), { kind: "finalize", ending: "cancelled" });
  t.same(states.duty(record("finalizing", { ending: "expired" })), { kind: "finalize", ending: "expired" });
  t.same(states.duty(record("finalizing", { ending: null })), { kind: "finalize", ending: "completed" }, "a record without its ending completes");
  for (const s of FINAL) t.same(states.duty(record(s)), { kind: "done" }, s);
});

t.test("lineFate: lines wait while their batch validates, run while it is in progress, else are dropped", async (t) => {
  t.equal(states.lineFate("validating"), "wait");
  t.equal(states.lineFate("in_progress"), "run");
  for (const s of others("validating", "in_progress")) t.equal(states.lineFate(s), "drop", s);
  t.equal(states.lineFate(undefined), "drop", "deleted");
});

t.test("isOverdue and nothingRan", async (t) => {
  const batch = record("in_progress", { total: 2 }).batch;
  t.equal(states.isOverdue(batch, batch.expires_at * 1000 - 1), false);
  t.equal(states.isOverdue(batch, batch.expires_at * 1000), true);
  t.equal(states.nothingRan(batch), false);
  t.equal(states.nothingRan(record("cancelling", { started: false, total: 2 }).batch), true, "cancelled while validating");
  t.equal(states.nothingRan(record("cancelling", { total: 0 }).batch), true, "no lines");
});

t.test("FinalLines: each line's first result sorted once, then the lines without one", async (t) => {
  const ok = (id: string) => successLine(id, "req_1", { usage: { prompt_tokens: 5, completion_tokens: 2 } });
  const bad = (id: string) => failureLine(id, "req_2", errors.invalidParam("messages", "bad"));
  for (const ending of ["expired", "cancelled", "completed"] as const) {
    const lines = new states.FinalLines(5, ending);
    t.equal(lines.sort(0, ok("a")), "output");
    t.equal(lines.sort(1, bad("b")), "failed");
    t.equal(lines.sort(2, undefined), "lost", "stored, but it does not decode");
    t.equal(lines.sort(0, bad("a")), undefined, "a line that ran twice counts once");
    t.equal(lines.has(1), true);
    t.equal(lines.has(3), false);
    t.same(lines.counts(), { completed: 1, failed: 2 });
    t.same(lines.usage(), tokenUsage(5, 2));
    t.equal(lines.toErrorFile(1), true, "the failed result goes to the error file");
    t.equal(lines.toErrorFile(1), false, "once");
    t.equal(lines.toErrorFile(0), false, "a succeeded line does not");
    t.equal(lines.toErrorFile(2), false, "a lost one is written from the input");
    t.equal(lines.missing, true);
    t.equal(lines.notRun(0, "a"), undefined);
    t.equal(lines.notRun(1, "b"), undefined);
    t.same(lines.notRun(2, "c")?.error, states.LOST_RESULT);
    t.equal(lines.notRun(2, "c")?.custom_id, "c");
    t.same(lines.notRun(3, "d")?.error, states.neverRan(ending));
  }
  t.equal(states.neverRan("expired").code, "batch_expired");
  t.equal(states.neverRan("cancelled").code, "batch_cancelled");
  const all = new states.FinalLines(2, "completed");
  all.sort(0, successLine("a", "r", {}));
  all.sort(1, successLine("b", "r", {}));
  t.equal(all.missing, false, "every line has its result: the input is not read again");
});

t.test("the whole life: validated, cancelled while running, finalized as cancelled", async (t) => {
  let r = states.validate(record(), { total: 2, model: "test/sim" }, AT)!;
  r = states.enqueued(r)!;
  t.same(states.duty(r), { kind: "watch" });
  const c = states.cancel(r, AT + 1);
  if (c.kind !== "cancel") return t.fail(c.kind);
  r = c.next;
  t.equal(states.lineFate(r.batch.status), "drop", "its lines stop");
  const d = states.duty(r);
  t.same(d, { kind: "finalize", ending: "cancelled" });
  r = states.finalize(r, "cancelled", { outputFileId: null, errorFileId: "file-E" }, { completed: 0, failed: 0 }, emptyUsage(), AT + 2)!;
  t.equal(r.batch.status, "cancelled");
  t.same(states.duty(r), { kind: "done" });
  t.same(states.cancel(r, AT + 3), { kind: "refused", status: "cancelled" });
});

t.test("a batch's usage adds up its lines' reasoning tokens, chat's and Responses' alike", async (t) => {
  const lines = new states.FinalLines(2, "completed");
  lines.sort(0, successLine("a", "req_1", { usage: { prompt_tokens: 1, completion_tokens: 9, completion_tokens_details: { reasoning_tokens: 6 } } }));
  lines.sort(1, successLine("b", "req_2", { usage: { input_tokens: 1, output_tokens: 4, output_tokens_details: { reasoning_tokens: 3 } } }));
  t.same(lines.usage(), tokenUsage(2, 13, 0, 9));
});
