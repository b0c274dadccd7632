import t from "tap";
import Ajv from "ajv";
import type OpenAI from "openai";
import { sharedStack } from "../../harness/shared-stack.js";
import { TEST_MODEL } from "../../harness/processes.js";
import { expectApiError } from "./helpers.js";

// text.format json_schema and json_object: generation is grammar-constrained, so the output
// parses and validates whatever the (tiny) model would have written.
const stack = await sharedStack(t);
const ajv = new Ajv.default({ strict: false });

const schema = {
  type: "object",
  properties: {
    name: { type: "string", maxLength: 30 },
    age: { type: "integer" },
    pets: { type: "array", items: { type: "string", maxLength: 20 }, maxItems: 3 },
    mood: { type: "string", enum: ["happy", "sad"] },
    address: { type: "object", properties: { city: { type: "string", maxLength: 30 } }, required: ["city"], additionalProperties: false },
  },
  required: ["name", "age", "pets", "mood", "address"],
  additionalProperties: false,
};
const validate = ajv.compile(schema);

t.test("json_schema output parses and validates against the schema", async (t) => {
  for (let i = 0; i < 3; i++) {
    const r = await stack.client.responses.create({
      model: TEST_MODEL,
      input: "Describe a person.",
      max_output_tokens: 1000,
      text: { format: { type: "json_schema", name: "person", schema, strict: true } },
    });
    t.equal(r.status, "completed");
    const value = JSON.parse(r.output_text) as unknown;
    t.ok(validate(value), `valid: ${r.output_text}`);
    t.same(r.text?.format, { type: "json_schema", name: "person", schema, strict: true }, "the format is echoed");
  }
});

t.test("streamed json_schema output validates too", async (t) => {
  const stream = stack.client.responses.stream({
    model: TEST_MODEL, input: "Describe a person.", max_output_tokens: 1000,
    text: { format: { type: "json_schema", name: "person", schema, strict: true } },
  });
  const final = await stream.finalResponse();
  t.ok(validate(JSON.parse(final.output_text)), final.output_text);
});

t.test("responses.parse gives output_parsed", async (t) => {
  const r = await stack.client.responses.parse({
    model: TEST_MODEL, input: "Describe a person.", max_output_tokens: 1000,
    text: { format: { type: "json_schema", name: "person", schema, strict: true } },
  });
  t.ok(validate(r.output_parsed), "output_parsed validates");
});

t.test("json_object output is a JSON object", async (t) => {
  // The object has no bounds, so it may run out of tokens: a finished one parses.
  const r = await stack.client.responses.create({ model: TEST_MODEL, input: "Reply in JSON.", max_output_tokens: 1000, text: { format: { type: "json_object" } } });
  t.equal(r.text?.format?.type, "json_object");
  if (r.status !== "completed") return t.equal(r.status, "incomplete");
  const value = JSON.parse(r.output_text) as unknown;
  t.ok(value !== null && typeof value === "object" && !Array.isArray(value));
});

t.test("a json_schema format without schema, or with a bad name, is a 400", async (t) => {
  await expectApiError(t, stack.client.responses.create({
    model: TEST_MODEL, input: "x", text: { format: { type: "json_schema", name: "person" } } as unknown as OpenAI.Responses.ResponseTextConfig,
  }), { status: 400, code: "missing_required_parameter", param: "text.format.schema" });
  await expectApiError(t, stack.client.responses.create({
    model: TEST_MODEL, input: "x", text: { format: { type: "json_schema", name: "bad name", schema } },
  }), { status: 400, param: "text.format.name" });
  await expectApiError(t, stack.client.responses.create({
    model: TEST_MODEL, input: "x", text: { format: { type: "xml" } } as unknown as OpenAI.Responses.ResponseTextConfig,
  }), { status: 400 });
});
