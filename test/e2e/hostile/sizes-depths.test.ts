// tier: serial (hostile cases run beside another tenant's streams, whose timing they check)
import { readFileSync } from "node:fs";
import t from "tap";
import { expectError, hostileCase, startHostileStack } from "../../harness/hostile.js";
import { TEST_MODEL } from "../../harness/processes.js";

// Hostile sizes and depths: bodies nested 100,000 deep (which overflowed the stack: a 500),
// bodies of too many values, parameters past their bounds (max_tool_calls 1e12, logit_bias token
// ids beyond int32, n, stop, tools, metadata), and a prompt template whose inputs would render
// to gigabytes (a 2 MB request once rendered ~200 MB). Every bound is checked before any work
// (lib/config.ts requestLimitsConfig, defaults here): each case asserts the exact status, code
// and parameter, then that the gateway still serves and that a stream of organization B running
// meanwhile finished untouched.

const hostile = await startHostileStack(t);
const { a } = hostile;

const MAX_JSON_DEPTH = 64;
const MAX_JSON_ELEMENTS = 200_000;
const messages = [{ role: "user", content: "Once upon a time" }];
const post = (path: string, body: unknown) => a.fetch(path, { method: "POST", body: typeof body === "string" ? body : JSON.stringify(body) });
const chat = (fields: Record<string, unknown>) => post("/v1/chat/completions", { model: TEST_MODEL, messages, max_tokens: 4, ...fields });
const respond = (fields: Record<string, unknown>) => post("/v1/responses", { model: TEST_MODEL, input: "hi", max_output_tokens: 16, ...fields });
const invalid = (param: string | null, code = "invalid_value") => ({ status: 400, code, param });

/** JSON text of a value nested `depth` levels deep ({"a": ... 1 ...}), built as text: no recursion anywhere. */
const nestedText = (depth: number) => '{"a":'.repeat(depth) + "1" + "}".repeat(depth);

/** Resident memory of the gateway process, in bytes. */
function gatewayRss(): number {
  const status = readFileSync(`/proc/${hostile.stack.gateway.child.pid}/status`, "utf8");
  return Number(/VmRSS:\s+(\d+) kB/.exec(status)![1]) * 1024;
}

hostileCase(t, hostile, "100,000 levels of nesting in tools, response formats and templates are 400s naming the parameter", async (t) => {
  const deep = nestedText(100_000);
  const tooDeep = (param: string) => invalid(param, "json_too_deep");
  await expectError(t, "chat tools[].function.parameters", await post("/v1/chat/completions", `{"model":"${TEST_MODEL}","messages":[{"role":"user","content":"hi"}],"tools":[{"type":"function","function":{"name":"f","parameters":${deep}}}]}`), tooDeep("tools"));
  await expectError(t, "chat response_format.json_schema", await post("/v1/chat/completions", `{"model":"${TEST_MODEL}","messages":[{"role":"user","content":"hi"}],"response_format":{"type":"json_schema","json_schema":{"name":"s","schema":${deep}}}}`), tooDeep("response_format"));
  await expectError(t, "responses tools[].parameters", await post("/v1/responses", `{"model":"${TEST_MODEL}","input":"hi","tools":[{"type":"function","name":"f","parameters":${deep}}]}`), tooDeep("tools"));
  await expectError(t, "responses text.format.schema", await post("/v1/responses", `{"model":"${TEST_MODEL}","input":"hi","text":{"format":{"type":"json_schema","name":"s","schema":${deep}}}}`), tooDeep("text"));
  await expectError(t, "a prompt template's input", await post("/v1/prompts", `{"name":"deep","model":"${TEST_MODEL}","input":[${deep}]}`), tooDeep("input"));
  await expectError(t, "a template run's inputs", await post("/v1/responses/deep", `{"inputs":${deep}}`), tooDeep("inputs"));
  await expectError(t, "a conversation's items", await post("/v1/conversations", `{"items":[${deep}]}`), tooDeep("items"));
  await expectError(t, "a bare nested array", await post("/v1/chat/completions", `{"messages":${"[".repeat(100_000)}${"]".repeat(100_000)}}`), tooDeep("messages"));
});

hostileCase(t, hostile, "nesting at the limit is decoded, one level past it is a 400", async (t) => {
  // `prediction` is accepted and not acted upon: a place for any JSON. The body is level 1.
  const atLimit = await post("/v1/chat/completions", `{"model":"${TEST_MODEL}","messages":[{"role":"user","content":"hi"}],"max_tokens":4,"prediction":${nestedText(MAX_JSON_DEPTH - 1)}}`);
  t.equal(atLimit.status, 200, `${MAX_JSON_DEPTH} levels: served`);
  await atLimit.text();
  await expectError(t, `${MAX_JSON_DEPTH + 1} levels`, await post("/v1/chat/completions", `{"model":"${TEST_MODEL}","messages":[{"role":"user","content":"hi"}],"max_tokens":4,"prediction":${nestedText(MAX_JSON_DEPTH)}}`), invalid("prediction", "json_too_deep"));
});

hostileCase(t, hostile, "too many values in a body is a 400", async (t) => {
  // The body and its model, messages, the message and its 2 fields, max_tokens and the list: 8 values around the zeros.
  const zeros = (n: number) => `{"model":"${TEST_MODEL}","messages":[{"role":"user","content":"hi"}],"max_tokens":4,"prediction":[${new Array(n).fill(0).join(",")}]}`;
  const atLimit = await post("/v1/chat/completions", zeros(MAX_JSON_ELEMENTS - 8));
  t.equal(atLimit.status, 200, `${MAX_JSON_ELEMENTS} values: served`);
  await atLimit.text();
  await expectError(t, `${MAX_JSON_ELEMENTS + 1} values`, await post("/v1/chat/completions", zeros(MAX_JSON_ELEMENTS - 7)), invalid("prediction", "json_too_large"));
  await expectError(t, "a million values", await post("/v1/responses", `{"model":"${TEST_MODEL}","input":[${new Array(1_000_000).fill("0").join(",")}]}`), invalid("input", "json_too_large"));
});

hostileCase(t, hostile, "numbers and counts past their bounds are 400s naming the parameter", async (t) => {
  await expectError(t, "max_tool_calls 1e12", await respond({ max_tool_calls: 1e12 }), invalid("max_tool_calls", "integer_above_max_value"));
  await expectError(t, "max_tool_calls 1025", await respond({ max_tool_calls: 1025 }), invalid("max_tool_calls", "integer_above_max_value"));
  await expectError(t, "a logit_bias token id beyond int32", await chat({ logit_bias: { "4294967296": 1 } }), invalid("logit_bias"));
  await expectError(t, "a logit_bias token id of 2^31", await chat({ logit_bias: { "2147483648": 1 } }), invalid("logit_bias"));
  await expectError(t, "1025 logit_bias entries", await chat({ logit_bias: Object.fromEntries(Array.from({ length: 1025 }, (_, i) => [String(i), 1])) }), invalid("logit_bias"));
  await expectError(t, "n 129", await chat({ n: 129 }), invalid("n", "integer_above_max_value"));
  await expectError(t, "5 stop sequences", await chat({ stop: ["a", "b", "c", "d", "e"] }), invalid("stop", "array_above_max_length"));
  await expectError(t, "a stop sequence of 257 characters", await chat({ stop: ["s".repeat(257)] }), invalid("stop[0]", "string_above_max_length"));
  await expectError(t, "129 tools", await chat({ tools: Array.from({ length: 129 }, (_, i) => ({ type: "function", function: { name: `f${i}` } })) }), invalid("tools", "array_above_max_length"));
  await expectError(t, "17 metadata keys", await respond({ metadata: Object.fromEntries(Array.from({ length: 17 }, (_, i) => [`k${i}`, "v"])) }), invalid("metadata"));
  await expectError(t, "a metadata key of 65 characters", await respond({ metadata: { ["k".repeat(65)]: "v" } }), invalid("metadata"));
  const longValue = await respond({ metadata: { k: "v".repeat(513) } });
  t.equal(longValue.status, 400, "a metadata value of 513 characters: 400");
  t.equal(((await longValue.json()) as { error: { param: string } }).error.param.startsWith("metadata"), true, "naming metadata");
  // The tiny model has 512 tokens: logit_bias at its limit is a unit test (request-limits.test.ts).
  const atLimits = await chat({ n: 2, stop: ["a", "b", "c", "s".repeat(256)], logit_bias: Object.fromEntries(Array.from({ length: 256 }, (_, i) => [String(i), 0])) });
  t.equal(atLimits.status, 200, "stop at its limits, a large logit_bias: served");
  await atLimits.text();
});

hostileCase(t, hostile, "a template that would render to gigabytes is refused before it is rendered", async (t) => {
  const template = await post("/v1/prompts", { name: "amplifier", model: TEST_MODEL, max_output_tokens: 16, input: "{{x}}".repeat(1000) });
  t.equal(template.status, 200, "the template is stored");
  const before = gatewayRss();
  const twoMegabytes = "x".repeat(2 * 1024 * 1024);
  for (let i = 0; i < 3; i++)
    await expectError(t, `a 2 MB input rendered 1000 times (${i + 1})`, await post("/v1/responses/amplifier", { inputs: { x: twoMegabytes } }), invalid("inputs", "template_too_large"));
  const grown = gatewayRss() - before;
  t.ok(grown < 64 * 1024 * 1024, `the gateway's memory grew by ${Math.round(grown / 1024 / 1024)} MB (under 64 MB)`);
  const small = await post("/v1/responses/amplifier", { inputs: { x: "a" } });
  t.equal(small.status, 200, "the same template with a short input runs");
  await small.text();
});
