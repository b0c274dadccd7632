import t from "tap";
import { toGrammarSchema, UnsupportedSchemaError, MAX_MINIMUM_REPETITIONS } from "../../runners/engines/llama/json-schema-subset.js";

t.test("objects close their key set unless told otherwise", async (t) => {
  t.same(toGrammarSchema({ type: "object", properties: { a: { type: "string", description: "x" } }, required: ["a", "zzz"] }), {
    type: "object",
    properties: { a: { type: "string" } },
    required: ["a"],
    additionalProperties: false,
  });
  t.same(toGrammarSchema({ type: "object" }), { type: "object", properties: {}, additionalProperties: true });
});

t.test("anyOf, nullable, type lists, refs into definitions", async (t) => {
  t.same(toGrammarSchema({ anyOf: [{ type: "string" }, { type: "null" }] }), { oneOf: [{ type: "string" }, { type: "null" }] });
  t.same(toGrammarSchema({ type: "integer", nullable: true, minimum: 3 }), { oneOf: [{ type: "integer" }, { type: "null" }] });
  t.same(toGrammarSchema({ type: ["string", "null"] }), { type: ["string", "null"] });
  const withRefs = toGrammarSchema({ type: "object", properties: { p: { $ref: "#/definitions/P" } }, definitions: { P: { type: "string", enum: ["x"] } } }) as Record<string, unknown>;
  t.same((withRefs.properties as Record<string, unknown>).p, { $ref: "#/$defs/P" });
  t.same(withRefs.$defs, { P: { enum: ["x"] } });
});

t.test("what cannot become a grammar is refused with the place", async (t) => {
  t.throws(() => toGrammarSchema({ type: "bogus" }), UnsupportedSchemaError);
  t.throws(() => toGrammarSchema({ $ref: "http://x/y.json" }), /only local \$ref/);
  t.throws(() => toGrammarSchema({ allOf: [{}, {}] }), /allOf/);
  t.throws(() => toGrammarSchema(5), /must be an object/);
});

t.test("integers in grammars have no exponent (4e-4 is not an integer)", async (t) => {
  const { withStrictIntegers } = await import("../../runners/engines/llama/grammar-cache.js");
  const grammar = 'root ::= "{" integer-number-rule "}"\ninteger-number-rule ::= "-"? ("0" | [1-9] [0-9]{0,15}) ([eE] [-+]? ("0" | [1-9] [0-9]{0,15}))?\nother ::= "x"';
  t.equal(withStrictIntegers(grammar), 'root ::= "{" integer-number-rule "}"\ninteger-number-rule ::= "-"? ("0" | [1-9] [0-9]{0,15})\nother ::= "x"');
});

t.test("minimums llama.cpp cannot compile are refused: at the limit passes, one past fails", async (t) => {
  for (const [key, schema] of [
    ["minLength", (n: number) => ({ type: "string", minLength: n })],
    ["minItems", (n: number) => ({ type: "array", items: { type: "string" }, minItems: n })],
    ["minProperties", (n: number) => ({ type: "object", additionalProperties: { type: "string" }, minProperties: n })],
  ] as const) {
    t.doesNotThrow(() => toGrammarSchema(schema(MAX_MINIMUM_REPETITIONS)), `${key} ${MAX_MINIMUM_REPETITIONS}`);
    t.throws(() => toGrammarSchema(schema(MAX_MINIMUM_REPETITIONS + 1)), UnsupportedSchemaError, `${key} ${MAX_MINIMUM_REPETITIONS + 1}`);
    t.throws(() => toGrammarSchema(schema(-1)), UnsupportedSchemaError, `${key} -1`);
    t.throws(() => toGrammarSchema(schema(1.5)), UnsupportedSchemaError, `${key} 1.5`);
  }
  t.doesNotThrow(() => toGrammarSchema({ type: "string", maxLength: 10_000_000 }), "maximums of any size compile");
});

t.test("names and literals llama.cpp cannot hold are refused; prototype names stay names", async (t) => {
  t.throws(() => toGrammarSchema({ enum: ["a\u0000b"] }), UnsupportedSchemaError);
  t.throws(() => toGrammarSchema({ const: "\ud800" }), UnsupportedSchemaError);
  t.throws(() => toGrammarSchema({ type: "object", properties: { ["\udc00x"]: { type: "string" } } }), UnsupportedSchemaError);
  t.doesNotThrow(() => toGrammarSchema({ enum: ["😀", "é", "\u0001"] }), "well-formed text of any kind");
  const out = toGrammarSchema(JSON.parse('{"type":"object","properties":{"__proto__":{"type":"string"}},"required":["__proto__","constructor"]}')) as unknown as { properties: Record<string, unknown>; required: string[] };
  t.ok(Object.hasOwn(out.properties, "__proto__"), "__proto__ is a property");
  t.same(out.required, ["__proto__"], "a required name that is not a property (constructor) is dropped");
});
