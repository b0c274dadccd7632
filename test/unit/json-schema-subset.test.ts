import t from "tap";
import { toGrammarSchema, UnsupportedSchemaError } from "../../runners/engines/llama/json-schema-subset.js";

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
