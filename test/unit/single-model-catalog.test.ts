import t from "tap";
import { chmodSync, mkdtempSync, rmSync, writeFileSync } from "node:fs";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { CatalogError, loadCatalog, parseCatalog, SINGLE_MODEL_CONTEXT_LENGTH, singleModelCatalog, singleModelOf } from "../../modules/catalog/mod.js";
import { testCatalog } from "../harness/processes.js";

// `tributary start --model X` (modules/catalog/single-model.ts): a catalog of one model from a
// GGUF file or a Hugging Face address, with an id a catalog accepts.

const dir = mkdtempSync(join(tmpdir(), "tributary-single-model-"));
t.teardown(() => rmSync(dir, { recursive: true, force: true }));
/** Whatever the environment says (TRIBUTARY_SLOTS, ...): the files as written. */
const noOverrides = {};
/** The real tiny model the tests use (../shared/models/stories260K.gguf). */
const testModelPath = loadCatalog(testCatalog, noOverrides)[0]!.source;

t.test("a local GGUF file: id local/<file name>, its absolute path, its trained context", async (t) => {
  const model = singleModelOf(testModelPath);
  t.same(model, { id: "local/stories260K", source: testModelPath, path: testModelPath });
  const [spec, ...others] = parseCatalog(await singleModelCatalog(model), "--model", noOverrides);
  t.equal(others.length, 0);
  t.match(spec, { id: "local/stories260K", engine: "llama", source: testModelPath, contextLength: 2048 }, "stories260K was trained for 2048 tokens: less than the default");
});

t.test("a relative path resolves against the working directory; odd file names make valid ids", async (t) => {
  const file = join(dir, "My Model (v2)+q4.GGUF");
  // A GGUF header (version 3) with no tensors and no metadata.
  writeFileSync(file, Buffer.concat([Buffer.from("GGUF"), Buffer.from([3, 0, 0, 0]), Buffer.alloc(16)]));
  const model = singleModelOf("My Model (v2)+q4.GGUF", dir);
  t.same(model, { id: "local/My-Model-v2-q4", source: file, path: file });
  // No trained context in its metadata: the default.
  t.match(parseCatalog(await singleModelCatalog(model), "--model", noOverrides)[0], { id: "local/My-Model-v2-q4", contextLength: SINGLE_MODEL_CONTEXT_LENGTH });
});

t.test("Hugging Face addresses and references", async (t) => {
  t.same(singleModelOf("https://huggingface.co/Qwen/Qwen3-0.6B-GGUF/resolve/main/Qwen3-0.6B-Q8_0.gguf?download=true"), {
    id: "Qwen/Qwen3-0.6B-Q8_0",
    source: "hf:Qwen/Qwen3-0.6B-GGUF/Qwen3-0.6B-Q8_0.gguf",
    path: undefined,
  });
  t.same(singleModelOf("https://huggingface.co/org/repo/blob/abc123/sub/dir/m.gguf"), { id: "org/m", source: "hf:org/repo/sub/dir/m.gguf@abc123", path: undefined });
  t.same(singleModelOf("hf:org/repo/m.gguf@v1"), { id: "org/m", source: "hf:org/repo/m.gguf@v1", path: undefined });
  const catalog = parseCatalog(await singleModelCatalog(singleModelOf("hf:org/repo/m.gguf")), "--model", noOverrides);
  t.match(catalog, [{ id: "org/m", source: "hf:org/repo/m.gguf", contextLength: SINGLE_MODEL_CONTEXT_LENGTH }]);
});

t.test("what cannot be served is refused, saying why", async (t) => {
  const notGguf = join(dir, "notes.txt");
  writeFileSync(notGguf, "hello");
  const empty = join(dir, "empty.gguf");
  writeFileSync(empty, "");
  const garbled = join(dir, "garbled.gguf");
  writeFileSync(garbled, "GGUF and then anything");
  const cases: Array<[string, RegExp]> = [
    [join(dir, "missing.gguf"), /^no such file: .*missing\.gguf$/],
    [dir, /is not a file$/],
    [notGguf, /notes\.txt is not a GGUF model file/],
    [empty, /empty\.gguf is not a GGUF model file/],
    [garbled, /garbled\.gguf is not a GGUF model file this version reads \(GGUF version 1684955424\)/],
    ["https://example.com/m.gguf", /only Hugging Face addresses .* and local files/],
    ["http://huggingface.co/o/r/resolve/main/m.gguf", /only Hugging Face addresses/],
    ["https://huggingface.co/o/r", /names no \.gguf file/],
    ["https://huggingface.co/o/r/resolve/main/README.md", /names no \.gguf file/],
    ["hf:o/m.gguf", /not a Hugging Face reference/],
  ];
  for (const [arg, message] of cases) t.throws(() => singleModelOf(arg), { name: "CatalogError", message }, arg);
  if (process.getuid?.() !== 0) {
    // Root reads any file: the case exists only for other users.
    const locked = join(dir, "locked.gguf");
    writeFileSync(locked, "GGUF\u0003\u0000\u0000\u0000");
    chmodSync(locked, 0o000);
    t.throws(() => singleModelOf(locked), new CatalogError(`cannot read ${locked}: permission denied`));
  }
});
