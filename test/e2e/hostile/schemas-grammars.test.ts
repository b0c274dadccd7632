// tier: serial (hostile cases run beside another tenant's streams, whose timing they check)
import t from "tap";
import { expectError, hostileCase, startHostileStack } from "../../harness/hostile.js";
import { TEST_MODEL } from "../../harness/processes.js";

// Hostile JSON schemas and grammars, and what the platform says about itself: a json_schema
// 3,000 objects deep (a stack overflow: a 500), schemas llama.cpp cannot compile (it printed a
// ~1,000-line grammar into the runner's log), unknown top-level parameters named like
// Object.prototype's members (accepted silently), and a model that fails to load (its file paths
// were echoed in 503s). Each case asserts the exact status, code and parameter, then that the
// gateway still serves and that a stream of organization B running meanwhile finished untouched.

const BROKEN_MODEL = "test/broken";
const SECRET_PATH = "/nonexistent/tributary-secret-dir/model.gguf";
const hostile = await startHostileStack(t, {
  extraModels: [{ id: BROKEN_MODEL, engine: "llama", source: SECRET_PATH, context_length: 512, max_output_tokens: 16, slots: 1, queue_limit: 4, threads: 1 }],
});
const { a } = hostile;

const MAX_SCHEMA_DEPTH = 32;
const messages = [{ role: "user", content: "Once upon a time" }];
const post = (path: string, body: unknown) => a.fetch(path, { method: "POST", body: typeof body === "string" ? body : JSON.stringify(body) });
const chat = (fields: Record<string, unknown>) => post("/v1/chat/completions", { model: TEST_MODEL, messages, max_tokens: 4, ...fields });
const invalid = (param: string | null, code = "invalid_value") => ({ status: 400, code, param });
const responseFormat = (schema: unknown) => ({ response_format: { type: "json_schema", json_schema: { name: "s", schema } } });

/** A JSON schema `levels` objects deep, as text (no recursion anywhere): each level is 2 levels of JSON nesting. */
const deepSchemaText = (levels: number) => '{"type":"object","properties":{"a":'.repeat(levels) + '{"type":"string"}' + "}}".repeat(levels);
/** A schema exactly `depth` levels of JSON nesting deep. */
const schemaOfDepth = (depth: number) => JSON.parse(depth % 2 ? deepSchemaText((depth - 1) / 2) : `{"wrap":${deepSchemaText(depth / 2 - 1)}}`);

const grammarLines = () => hostile.stack.runners.flatMap((r) => r.logs).filter((r) => JSON.stringify(r).includes("::="));

hostileCase(t, hostile, "a json_schema 3,000 objects deep is a 400, and so is one just past the schema depth", async (t) => {
  await expectError(t, "chat response_format", await post("/v1/chat/completions", `{"model":"${TEST_MODEL}","messages":[{"role":"user","content":"hi"}],"response_format":{"type":"json_schema","json_schema":{"name":"s","schema":${deepSchemaText(3000)}}}}`), invalid("response_format", "json_too_deep"));
  await expectError(t, "responses text.format", await post("/v1/responses", `{"model":"${TEST_MODEL}","input":"hi","text":{"format":{"type":"json_schema","name":"s","schema":${deepSchemaText(3000)}}}}`), invalid("text", "json_too_deep"));
  await expectError(t, "tool parameters", await post("/v1/chat/completions", `{"model":"${TEST_MODEL}","messages":[{"role":"user","content":"hi"}],"tools":[{"type":"function","function":{"name":"f","parameters":${deepSchemaText(3000)}}}]}`), invalid("tools", "json_too_deep"));
  await expectError(t, `a schema ${MAX_SCHEMA_DEPTH + 1} levels deep`, await chat(responseFormat(schemaOfDepth(MAX_SCHEMA_DEPTH + 1))), invalid("response_format.json_schema.schema", "schema_too_deep"));
  await expectError(t, `tool parameters ${MAX_SCHEMA_DEPTH + 1} levels deep`, await chat({ tools: [{ type: "function", function: { name: "f", parameters: schemaOfDepth(MAX_SCHEMA_DEPTH + 1) } }] }), invalid("tools[0].function.parameters", "schema_too_deep"));
  const atLimit = await chat(responseFormat(schemaOfDepth(MAX_SCHEMA_DEPTH)));
  t.equal(atLimit.status, 200, `a schema ${MAX_SCHEMA_DEPTH} levels deep is served`);
  await atLimit.text();
});

hostileCase(t, hostile, "schemas llama.cpp cannot compile are 400s, and no grammar reaches the runner's log", async (t) => {
  const before = grammarLines().length;
  await expectError(t, "minLength 100000", await chat(responseFormat({ type: "object", properties: { s: { type: "string", minLength: 100_000 } }, required: ["s"] })), invalid("response_format"));
  await expectError(t, "minItems 100000 in tool parameters", await chat({ tools: [{ type: "function", function: { name: "f", parameters: { type: "object", properties: { l: { type: "array", items: { type: "string" }, minItems: 100_000 } } } } }] }), invalid("tools[0].function.parameters"));
  await expectError(t, "an enum value with NUL", await chat(responseFormat({ type: "object", properties: { e: { enum: ["a\u0000b"] } } })), invalid("response_format"));
  await expectError(t, "a property name with a lone surrogate", await chat(responseFormat({ type: "object", properties: { ["\ud800"]: { type: "string" } } })), invalid("response_format"));
  const fine = await chat(responseFormat({ type: "object", properties: { s: { type: "string", minLength: 2, maxLength: 100_000 } }, required: ["s", "constructor"] }));
  t.equal(fine.status, 200, "a large maxLength and a required name not among the properties compile");
  await fine.text();
  t.same(grammarLines().slice(before), [], "the runner logged no grammar");
});

hostileCase(t, hostile, "unknown top-level parameters are refused alike, Object.prototype's names included", async (t) => {
  const bodies: Array<[string, string]> = [
    ["/v1/chat/completions", `"model":"${TEST_MODEL}","messages":[{"role":"user","content":"hi"}]`],
    ["/v1/responses", `"model":"${TEST_MODEL}","input":"hi"`],
    ["/v1/conversations", `"metadata":{}`],
    ["/v1/prompts", `"name":"p","model":"${TEST_MODEL}","input":"hi"`],
    ["/v1/batches", `"input_file_id":"file-x","endpoint":"/v1/responses","completion_window":"24h"`],
  ];
  for (const [path, fields] of bodies)
    for (const name of ["constructor", "toString", "__proto__", "valueOf", "hasOwnProperty", "isPrototypeOf", "made_up"])
      await expectError(t, `${path} with '${name}'`, await post(path, `{${fields},${JSON.stringify(name)}:1}`), invalid(name, "unknown_parameter"));
  const valid = await post("/v1/responses", `{"model":"${TEST_MODEL}","input":"hi","max_output_tokens":16,"metadata":{"__proto__":"x","constructor":"y"}}`);
  t.equal(valid.status, 200, "metadata keys named like prototype members are just keys");
  t.same(((await valid.json()) as { metadata: unknown }).metadata, JSON.parse(`{"__proto__":"x","constructor":"y"}`));
});

hostileCase(t, hostile, "a model that fails to load: 503s say so without its paths", async (t) => {
  const answers: Array<{ status: number; message: string }> = [];
  const deadline = Date.now() + 15_000;
  for (;;) {
    const res = await post("/v1/chat/completions", { model: BROKEN_MODEL, messages, max_tokens: 4 });
    const body = (await res.json()) as { error: { message: string; code: string } };
    answers.push({ status: res.status, message: body.error.message });
    if (/failed to load/.test(body.error.message) || Date.now() > deadline) break;
    await new Promise((r) => setTimeout(r, 300));
  }
  t.ok(answers.every((x) => x.status === 503), "every answer is a 503");
  t.match(answers.at(-1)!.message, /failed to load/, "the last one says the model failed to load");
  t.same(answers.filter((x) => /nonexistent|secret-dir|\.gguf|\//.test(x.message.replace(BROKEN_MODEL, ""))), [], "no message holds a path");
});
