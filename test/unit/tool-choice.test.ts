import t from "tap";
import { parseCatalog } from "../../modules/catalog/mod.js";
import { chatToGenerateRequest, checkResponseRequest, parseChatCompletionRequest, parseResponseCreateRequest } from "../../modules/openai/mod.js";
import { ToolChoice_Mode } from "../../proto/gen/tributary/v1/inference.js";

// The rules tying tool_choice to tools live in one place (modules/openai/translate/tool-choice.ts);
// both APIs reach them through their translation, with their own parameter names.

const [spec] = parseCatalog("models: [{ id: t/sim, engine: sim, context_length: 4096 }]", "t", {});
const ctx = { requestId: "req_1", deadlineUnixMs: 0 };
const chat = (extra: Record<string, unknown>) =>
  chatToGenerateRequest(parseChatCompletionRequest({ model: "t/sim", messages: [{ role: "user", content: "hi" }], ...extra }), spec!, ctx);
const responses = (extra: Record<string, unknown>) => checkResponseRequest(parseResponseCreateRequest({ model: "t/sim", input: "hi", ...extra }), spec!);
const chatTool = (name: string) => ({ type: "function", function: { name } });
const responsesTool = (name: string) => ({ type: "function", name });

/** The InvalidParam a call throws, as the client sees its fields. */
function refusal(call: () => unknown): { param: string | null; message: string } | undefined {
  try {
    call();
    return undefined;
  } catch (err) {
    const e = err as { _tag: string; param: string | null; message: string };
    return e._tag === "InvalidParam" ? { param: e.param, message: e.message } : undefined;
  }
}

t.test("a forced function must be one of the tools", async (t) => {
  t.same(refusal(() => chat({ tools: [chatTool("f")], tool_choice: { type: "function", function: { name: "g" } } })), {
    param: "tool_choice",
    message: "Invalid value for 'tool_choice': function 'g' is not in 'tools'.",
  });
  t.same(refusal(() => responses({ tools: [responsesTool("f")], tool_choice: { type: "function", name: "g" } })), {
    param: "tool_choice.name",
    message: "Invalid value for 'tool_choice': function 'g' is not in 'tools'.",
  });
  t.same(chat({ tools: [chatTool("f")], tool_choice: { type: "function", function: { name: "f" } } }).toolChoice, { mode: ToolChoice_Mode.MODE_FUNCTION, functionName: "f" });
  t.same(responses({ tools: [responsesTool("f")], tool_choice: { type: "function", name: "f" } }).toolChoice, { mode: ToolChoice_Mode.MODE_FUNCTION, functionName: "f" });
});

t.test("tool_choice other than none needs tools", async (t) => {
  const message = "Invalid value for 'tool_choice': 'tool_choice' is only allowed when 'tools' are specified.";
  t.same(refusal(() => chat({ tool_choice: "required" })), { param: "tool_choice", message });
  t.same(refusal(() => responses({ tool_choice: "auto" })), { param: "tool_choice", message });
  t.same(chat({ tool_choice: "none" }).toolChoice, { mode: ToolChoice_Mode.MODE_NONE, functionName: "" }, "none without tools is fine");
});

t.test("function names are unique, named at the duplicate", async (t) => {
  t.same(refusal(() => chat({ tools: [chatTool("f"), chatTool("g"), chatTool("f")] })), { param: "tools[2].function.name", message: "Duplicate function name 'f' in tools." });
  t.same(refusal(() => responses({ tools: [responsesTool("f"), responsesTool("f")] })), { param: "tools[1].name", message: "Duplicate function name 'f' in tools." });
});
