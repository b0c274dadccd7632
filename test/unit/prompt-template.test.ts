import t from "tap";
import { isDomainError } from "../../modules/errors/mod.js";
import { checkInputs, placeholdersOf, renderBody } from "../../modules/responses/mod.js";

const body = {
  model: "m",
  instructions: "Greet {{ person }}.",
  input: [
    { role: "user", content: "From {{city}} with {{person}}" },
    { role: "user", content: [{ type: "input_text", text: "{{ extra }} {not a placeholder} {{1bad}}" }] },
    { type: "function_call", call_id: "c", name: "f", arguments: "{\"a\":\"{{notTemplated}}\"}" },
  ],
  tools: [{ type: "function", name: "f", description: "{{ignored}}" }],
};

t.test("placeholders are those of instructions and input text only", async (t) => {
  t.same([...placeholdersOf(body)].sort(), ["city", "extra", "person"]);
});

t.test("rendering fills every placeholder and leaves the rest alone", async (t) => {
  const out = renderBody(body, { person: "Ann", city: "Oslo", extra: "x" }) as typeof body;
  t.equal(out.instructions, "Greet Ann.");
  t.equal(out.input[0]!.content, "From Oslo with Ann");
  t.same(out.input[1]!.content, [{ type: "input_text", text: "x {not a placeholder} {{1bad}}" }]);
  t.same(out.input[2], body.input[2]);
  t.same(out.tools, body.tools);
  t.equal(body.instructions, "Greet {{ person }}.", "the template itself is unchanged");
});

t.test("inputs: all required, none unknown, scalars only", async (t) => {
  const names = new Set(["a", "b"]);
  t.same(checkInputs("x", names, { a: "1", b: 2 }), { a: "1", b: "2" });
  const paramOf = (inputs: Record<string, unknown>) => {
    try {
      checkInputs("x", names, inputs);
    } catch (e) {
      return isDomainError(e) && e._tag === "InvalidParam" ? e.param : "not an InvalidParam";
    }
    return "no error";
  };
  t.equal(paramOf({ a: "1" }), "inputs.b", "missing");
  t.equal(paramOf({ a: "1", b: "2", c: "3" }), "inputs.c", "unknown");
  t.equal(paramOf({ a: [1], b: "2" }), "inputs.a", "not a scalar");
});
