import t from "tap";
import { ErrorCode, FinishReason, type Final } from "../../proto/gen/tributary/v1/inference.js";
import { parseCatalog } from "../../modules/catalog/mod.js";
import { RunnerLost } from "../../modules/errors/mod.js";
import type { GenerationListener } from "../../modules/inference/mod.js";
import { checkResponseRequest, normalizeInputItems, parseResponseCreateRequest, toChatMessages, type ResponseEvent, type ResponseObject } from "../../modules/openai/mod.js";
import { ResponseRun, type PreparedResponse, type RunSource, type TokenCharge } from "../../modules/responses/mod.js";

// The Responses run seam: a runner's events in (a scripted sequence through the generation
// listener, no NATS), OpenAI's event sequence and the final object out.

const [spec] = parseCatalog("models:\n  - id: test/sim\n    engine: sim\n    context_length: 2048\n", "test.yaml", {});

function prepared(fields: Record<string, unknown> = {}): PreparedResponse {
  const body = parseResponseCreateRequest({ model: "test/sim", input: "Say hello.", ...fields });
  const input = normalizeInputItems(body.input, () => undefined);
  return {
    projectId: "proj_1",
    id: "resp_1",
    createdAt: 1_700_000_000,
    body,
    spec: spec!,
    options: checkResponseRequest(body, spec!),
    history: [],
    input,
    ancestors: [],
    conversationId: null,
    messages: toChatMessages(body.instructions, [], input),
  };
}

/** A generation whose events the test sends: what a GenerationStream hands its listener. */
class ScriptedGeneration implements RunSource {
  readonly model = "test/sim";
  admitted = { runnerId: "runner-1", promptTokens: 7, maxTokens: 64, queuePosition: 0 };
  cancelled = false;
  private listener: GenerationListener | undefined;

  listen(listener: GenerationListener): void {
    this.listener = listener;
  }

  cancel(): void {
    this.cancelled = true;
  }

  text(...pieces: string[]): this {
    for (const text of pieces) this.listener!.delta({ choiceIndex: 0, text, tokens: 1, toolCalls: [] });
    return this;
  }

  call(id: string, name: string, args: string): this {
    this.listener!.delta({ choiceIndex: 0, text: "", tokens: 1, toolCalls: [{ index: 0, id, name, arguments: args }] });
    return this;
  }

  end(finishReason: FinishReason): this {
    this.listener!.choiceEnd({ choiceIndex: 0, finishReason, completionTokens: 0 });
    return this;
  }

  final(final: Final): void {
    this.listener!.final(final);
  }

  fail(error: RunnerLost): void {
    this.listener!.failure(error);
  }
}

interface Observed {
  run: ResponseRun;
  generation: ScriptedGeneration;
  events: ResponseEvent[];
  settled: number[];
  /** Event types seen when beforeEnd ran. */
  atBeforeEnd: string[] | undefined;
}

/** Starts a run, lets `script` send the runner's events, and returns what came out. */
async function drive(
  script: (g: ScriptedGeneration, run: ResponseRun) => void,
  options: { announce?: boolean; beforeEnd?: (r: ResponseObject) => Promise<void>; fields?: Record<string, unknown> } = {},
): Promise<Observed & { final: ResponseObject }> {
  const generation = new ScriptedGeneration();
  const settled: number[] = [];
  const charge: TokenCharge = { settle: (n) => settled.push(n) };
  const run = new ResponseRun(prepared(options.fields), generation, charge);
  const events: ResponseEvent[] = [];
  const observed: Observed = { run, generation, events, settled, atBeforeEnd: undefined };
  const done = run.run({
    sink: { event: (e) => events.push(e) },
    announce: options.announce,
    beforeEnd: async (r) => {
      observed.atBeforeEnd = events.map((e) => e.type);
      await options.beforeEnd?.(r);
    },
  });
  script(generation, run);
  const final = await done;
  return { ...observed, final };
}

const types = (events: ResponseEvent[]) => events.map((e) => e.type);
const responseOf = (event: ResponseEvent | undefined) => event?.response as ResponseObject;
const TEXT_ITEM = [
  "response.output_item.added",
  "response.content_part.added",
  "response.output_text.delta",
  "response.output_text.delta",
  "response.output_text.done",
  "response.content_part.done",
  "response.output_item.done",
];

t.test("completed: text in, OpenAI's event sequence and a completed object out", async (t) => {
  const { final, events, settled, atBeforeEnd } = await drive((g) => {
    g.text("Hel", "lo").end(FinishReason.FINISH_REASON_STOP).final({ usage: { promptTokens: 7, completionTokens: 2, cachedPromptTokens: 0 }, error: undefined });
  });
  t.same(types(events), ["response.created", "response.in_progress", ...TEXT_ITEM, "response.completed"]);
  t.equal(final.status, "completed");
  t.type(final.completed_at, "number");
  t.same(final.usage, { input_tokens: 7, input_tokens_details: { cached_tokens: 0, cache_write_tokens: 0 }, output_tokens: 2, output_tokens_details: { reasoning_tokens: 0 }, total_tokens: 9 });
  t.match(final.output, [{ type: "message", role: "assistant", status: "completed", content: [{ type: "output_text", text: "Hello" }] }]);
  t.same(settled, [9], "the charge is settled once, with the real usage");
  t.equal(atBeforeEnd?.at(-1), "response.output_item.done", "stored before the terminal event goes out");
  t.equal(responseOf(events.at(-1)).status, "completed");
  t.not(responseOf(events.at(-1)), final, "the terminal event carries a snapshot, not the live object");
  t.equal(responseOf(events[0]).status, "in_progress");
  t.same(responseOf(events[0]).output, [], "events carry the object as it was when they were emitted");
});

t.test("a function call, and announce: false (a background run's created event was written when it was queued)", async (t) => {
  const { final, events } = await drive(
    (g) => {
      g.call("call_1", "lookup", "{\"q\":1}").end(FinishReason.FINISH_REASON_TOOL_CALLS).final({ usage: { promptTokens: 7, completionTokens: 3, cachedPromptTokens: 0 }, error: undefined });
    },
    { announce: false },
  );
  t.same(types(events), [
    "response.in_progress",
    "response.output_item.added",
    "response.function_call_arguments.delta",
    "response.function_call_arguments.done",
    "response.output_item.done",
    "response.completed",
  ]);
  t.match(final.output, [{ type: "function_call", call_id: "call_1", name: "lookup", arguments: "{\"q\":1}", status: "completed" }]);
});

t.test("incomplete: the output budget ran out", async (t) => {
  const { final, events } = await drive((g) => {
    g.text("a", "b").end(FinishReason.FINISH_REASON_LENGTH).final({ usage: { promptTokens: 7, completionTokens: 16, cachedPromptTokens: 0 }, error: undefined });
  });
  t.equal(types(events).at(-1), "response.incomplete");
  t.equal(final.status, "incomplete");
  t.same(final.incomplete_details, { reason: "max_output_tokens" });
  t.equal(final.completed_at, null);
  t.match(final.output, [{ status: "incomplete" }]);
});

t.test("failed with usage: the runner failed after generating; its tokens are charged all the same", async (t) => {
  const { final, events, settled, run } = await drive((g) => {
    g.text("a", "b").final({ usage: { promptTokens: 7, completionTokens: 2, cachedPromptTokens: 0 }, error: { code: ErrorCode.ERROR_CODE_ENGINE_FAILURE, message: "decode failed", param: "" } });
  });
  t.same(types(events), ["response.created", "response.in_progress", ...TEXT_ITEM.slice(0, 4), "response.output_text.done", "response.content_part.done", "response.output_item.done", "response.failed"]);
  t.equal(final.status, "failed");
  t.same(final.error, { code: "server_error", message: "The response failed because of an internal error." }, "internal details stay out");
  t.equal(final.usage?.total_tokens, 9);
  t.match(final.output, [{ status: "incomplete", content: [{ text: "ab" }] }], "the partial output is kept, its item incomplete");
  t.same(settled, [9]);
  t.equal(run.failure()?._tag, "Internal");
});

t.test("runner lost mid-run: failed, settled with the prompt and what was generated", async (t) => {
  const { final, events, settled, run } = await drive((g) => {
    g.text("a", "b", "c").fail(new RunnerLost({ message: "The runner serving this request stopped responding." }));
  });
  t.equal(types(events).at(-1), "response.failed");
  t.same(final.error, { code: "server_error", message: "The runner serving this request stopped responding." });
  t.equal(final.usage, null, "no usage was reported");
  t.same(settled, [7 + 3], "admitted prompt tokens + tokens streamed");
  t.equal(run.failure()?._tag, "RunnerLost");
});

t.test("cancelled: stops the generation, ends without a terminal event, keeps the output so far", async (t) => {
  const { final, events, settled, generation, run } = await drive((g, r) => {
    g.text("a", "b");
    r.cancel();
    g.text("late"); // in flight when the cancel went out: not part of the result
  });
  t.ok(generation.cancelled, "the runner is told to stop");
  t.equal(final.status, "cancelled");
  t.notOk(types(events).some((e) => ["response.completed", "response.failed", "response.incomplete"].includes(e)), "no terminal event");
  t.equal(types(events).at(-1), "response.output_item.done", "the open item is closed");
  t.match(final.output, [{ status: "incomplete", content: [{ text: "ab" }] }]);
  t.equal(types(events).filter((e) => e === "response.output_text.delta").length, 2);
  t.same(settled, [7 + 2]);
  t.equal(run.failure(), undefined, "a cancel is not a failure");
});

t.test("cancelled before any event: nothing is generated, the whole prompt is still charged", async (t) => {
  const { final, events, settled } = await drive((_g, r) => r.cancel());
  t.equal(final.status, "cancelled");
  t.same(types(events), ["response.created", "response.in_progress"]);
  t.same(final.output, []);
  t.same(settled, [7]);
});

t.test("store failure: the result could not be kept, so the client is told it failed", async (t) => {
  const { final, events, run } = await drive(
    (g) => {
      g.text("Hi").end(FinishReason.FINISH_REASON_STOP).final({ usage: { promptTokens: 7, completionTokens: 1, cachedPromptTokens: 0 }, error: undefined });
    },
    {
      beforeEnd: async () => {
        throw new Error("JetStream unavailable");
      },
    },
  );
  t.equal(final.status, "failed");
  t.same(final.error, { code: "server_error", message: "The response could not be stored. Please retry." });
  t.equal(final.completed_at, null);
  t.equal(types(events).at(-1), "response.failed", "no response.completed goes out for a result that was not kept");
  t.ok(run.storeFailed);
  t.equal(run.failure()?._tag, "Internal");
});

t.test("events that arrive after the end change nothing", async (t) => {
  const { final, events } = await drive((g) => {
    g.text("x").end(FinishReason.FINISH_REASON_STOP).final({ usage: { promptTokens: 7, completionTokens: 1, cachedPromptTokens: 0 }, error: undefined });
    g.fail(new RunnerLost({ message: "late" }));
  });
  t.equal(final.status, "completed");
  t.equal(types(events).filter((e) => e === "response.completed" || e === "response.failed").length, 1);
});
