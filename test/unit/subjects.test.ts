import t from "tap";
import { decodeModelToken, modelToken, subjects } from "../../lib/nats/subjects.js";

t.test("model ids become one subject token and back", async (t) => {
  for (const id of ["test/stories-260k", "meta/llama-3.1-8b", "a/b*c>d e%f"]) {
    const token = modelToken(id);
    t.notMatch(token, /[.*>\s]/, token);
    t.equal(decodeModelToken(token), id);
  }
  t.equal(subjects.generate("qwen/qwen3-0.6b"), "tributary.v1.generate.qwen/qwen3-0%2E6b");
});
