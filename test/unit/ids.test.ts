import t from "tap";
import { isWellFormedId, isWellFormedTemplateName, MAX_ID_LENGTH, newId, newSortableId, sortableIdTime } from "../../lib/ids.js";
import { parseResponseCreateRequest } from "../../modules/openai/mod.js";
import { isDomainError } from "../../modules/errors/mod.js";

// The one id rule every store applies before an id becomes a KV key, an object name or a
// subject token (lib/ids.ts), at its edges.

t.test("an id of 1 to MAX_ID_LENGTH characters of [A-Za-z0-9_-] is well formed; one more is not", async (t) => {
  t.equal(MAX_ID_LENGTH, 128);
  t.ok(isWellFormedId("a"));
  t.ok(isWellFormedId("x".repeat(MAX_ID_LENGTH)), "at the limit");
  t.notOk(isWellFormedId("x".repeat(MAX_ID_LENGTH + 1)), "one past the limit");
  t.notOk(isWellFormedId(""), "empty");
  t.notOk(isWellFormedId("x".repeat(5 * 1024)), "5 KB");
  for (const odd of ["a.b", "a*b", "a>b", "a%2E", "a\u0000b", "a b", "a/b", "a=b", "😀", "resp_\n"]) t.notOk(isWellFormedId(odd), JSON.stringify(odd));
  t.notOk(isWellFormedId(123));
  t.notOk(isWellFormedId(null));
});

t.test("ids minted here have the shape", async (t) => {
  for (const prefix of ["resp_", "conv_", "msg_", "fc_", "batch_", "file-"]) {
    t.ok(isWellFormedId(newId(prefix)), prefix);
    t.ok(isWellFormedId(newSortableId(prefix)), `${prefix} sortable`);
  }
});

t.test("template names: 4 segments of 64 characters at most", async (t) => {
  const segment = "s".repeat(64);
  t.ok(isWellFormedTemplateName([segment, segment, segment, segment].join("/")), "at the limit");
  t.notOk(isWellFormedTemplateName([segment, segment, segment, segment, "s"].join("/")), "a fifth segment");
  t.notOk(isWellFormedTemplateName("s".repeat(65)), "a segment one past the limit");
  t.notOk(isWellFormedTemplateName("resp_abc"), "looks like a response id");
  t.notOk(isWellFormedTemplateName("x".repeat(5000)));
});

t.test("ids in request bodies are 400s naming the parameter", async (t) => {
  const cases: Array<[Record<string, unknown>, string]> = [
    [{ previous_response_id: "r".repeat(MAX_ID_LENGTH + 1) }, "previous_response_id"],
    [{ conversation: "c".repeat(5000) }, "conversation"],
    [{ conversation: { id: "conv.1" } }, "conversation.id"],
    [{ input: [{ type: "item_reference", id: "" }] }, "input[0].id"],
    [{ input: [{ role: "user", content: "hi", id: "a*b" }] }, "input[0].id"],
    [{ input: [{ type: "function_call", call_id: "c", name: "f", arguments: "{}", id: "x".repeat(200) }] }, "input[0].id"],
  ];
  for (const [fields, param] of cases) {
    try {
      parseResponseCreateRequest({ model: "m", ...fields });
      t.fail(`${param}: accepted`);
    } catch (err) {
      t.ok(isDomainError(err) && err._tag === "InvalidParam", `${param}: InvalidParam`);
      t.equal((err as { param: string }).param, param);
    }
  }
  t.doesNotThrow(() => parseResponseCreateRequest({ model: "m", previous_response_id: "r".repeat(MAX_ID_LENGTH) }), "an id at the limit passes");
});

t.test("unknown top-level parameters are refused alike, Object.prototype's names included", async (t) => {
  for (const name of ["constructor", "toString", "__proto__", "hasOwnProperty", "valueOf", "nonsense"]) {
    const body = JSON.parse(`{"model": "m", ${JSON.stringify(name)}: 1}`);
    try {
      parseResponseCreateRequest(body);
      t.fail(`${name}: accepted`);
    } catch (err) {
      t.match(err, { _tag: "InvalidParam", code: "unknown_parameter", param: name }, name);
    }
  }
});

t.test("a sortable id tells when it was minted", async (t) => {
  const before = Date.now();
  const id = newSortableId("job_");
  const minted = sortableIdTime(id, "job_")!;
  t.ok(minted >= before && minted <= Date.now(), "its clock reads back");
  t.equal(sortableIdTime(id, "file-"), undefined, "another prefix: not one");
  t.equal(sortableIdTime("job_abc", "job_"), undefined, "too short: not one");
  t.equal(sortableIdTime("job_0000000!xxxxxxxxxxxxxxxx", "job_"), undefined, "not base62: not one");
});
