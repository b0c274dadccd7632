import t from "tap";
import { FinishReason } from "../../proto/gen/tributary/v1/inference.js";
import { ResponseOutputBuilder, type ResponseEvent } from "../../modules/openai/mod.js";

const delta = (text: string, calls: Array<{ index: number; id?: string; name?: string; arguments?: string }> = []) => ({
  choiceIndex: 0,
  text,
  tokens: 1,
  toolCalls: calls.map((c) => ({ index: c.index, id: c.id ?? "", name: c.name ?? "", arguments: c.arguments ?? "" })),
});

t.test("text then two calls: message at 0, calls at 1 and 2, each closed before the next opens", async (t) => {
  const events: ResponseEvent[] = [];
  const b = new ResponseOutputBuilder((e) => events.push(e));
  b.delta(delta("Let me "));
  b.delta(delta("check."));
  b.delta(delta("", [{ index: 0, id: "call_a", name: "f", arguments: "" }]));
  b.delta(delta("", [{ index: 0, arguments: "{\"x\":" }]));
  b.delta(delta("", [{ index: 0, arguments: "1}" }]));
  b.delta(delta("", [{ index: 1, id: "call_b", name: "g", arguments: "{}" }]));
  b.end(FinishReason.FINISH_REASON_TOOL_CALLS);
  t.same(events.map((e) => `${e.type}@${e.output_index}`), [
    "response.output_item.added@0", "response.content_part.added@0", "response.output_text.delta@0", "response.output_text.delta@0",
    "response.output_text.done@0", "response.content_part.done@0", "response.output_item.done@0",
    "response.output_item.added@1", "response.function_call_arguments.delta@1", "response.function_call_arguments.delta@1",
    "response.function_call_arguments.done@1", "response.output_item.done@1",
    "response.output_item.added@2", "response.function_call_arguments.delta@2", "response.function_call_arguments.done@2", "response.output_item.done@2",
  ]);
  t.match(b.output, [
    { type: "message", status: "completed", content: [{ type: "output_text", text: "Let me check." }] },
    { type: "function_call", call_id: "call_a", name: "f", arguments: "{\"x\":1}", status: "completed" },
    { type: "function_call", call_id: "call_b", name: "g", arguments: "{}", status: "completed" },
  ]);
  const added = events[0] as unknown as { item: { content: unknown[]; status: string } };
  t.same(added.item.content, [], "events carry copies: the added item stays as it was");
  t.equal(added.item.status, "in_progress");
});

t.test("a choice cut by the output budget leaves its item incomplete", async (t) => {
  const events: ResponseEvent[] = [];
  const b = new ResponseOutputBuilder((e) => events.push(e));
  b.delta(delta("Once"));
  b.end(FinishReason.FINISH_REASON_LENGTH);
  t.equal(b.output[0]!.status, "incomplete");
  t.match(events.at(-1), { type: "response.output_item.done", item: { status: "incomplete" } });
});

t.test("a reset choice starts from nothing", async (t) => {
  const events: ResponseEvent[] = [];
  const b = new ResponseOutputBuilder((e) => events.push(e));
  b.delta(delta("first try"));
  b.reset();
  b.delta(delta("second"));
  b.end(FinishReason.FINISH_REASON_STOP);
  t.equal(b.output.length, 1);
  t.match(b.output[0], { type: "message", content: [{ text: "second" }], status: "completed" });
});
