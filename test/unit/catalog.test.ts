import t from "tap";
import { CatalogError, parseCatalog } from "../../modules/catalog/mod.js";
import { repoRoot } from "../../lib/paths.js";
import { catalogOverridesConfig, ConfigurationError, readConfig } from "../../lib/config.js";

/** The overrides a process with these environment variables reads. */
const fromEnv = (env: Record<string, string>) => readConfig(catalogOverridesConfig, env);

const doc = `
models:
  - id: acme/small
    source: models/small.gguf
    context_length: 4096
    max_output_tokens: 1024
    rate_limits: { requests_per_minute: 10 }
  - id: acme/sim
    engine: sim
    context_length: 1000
`;

t.test("defaults, relative sources and rate limits", async (t) => {
  const [small, sim] = parseCatalog(doc, "x.yaml", {});
  t.equal(small!.source, `${repoRoot}/models/small.gguf`);
  t.equal(small!.slots, 4);
  t.equal(small!.rateLimits.requestsPerMinute, 10);
  t.equal(small!.rateLimits.tokensPerMinute, 100_000);
  t.equal(sim!.engine, "sim");
  t.equal(sim!.maxOutputTokens, 1000, "max output defaults to the context length");
});

t.test("environment overrides: global and per model", async (t) => {
  const [small, sim] = parseCatalog(doc, "x.yaml", fromEnv({
    TRIBUTARY_SLOTS: "16",
    TRIBUTARY_GPU_LAYERS: "auto",
    TRIBUTARY_MODEL_OVERRIDES: JSON.stringify({ "acme/sim": { slots: 2, sim: { tokens_per_second: 5 } } }),
  }));
  t.equal(small!.slots, 16);
  t.equal(small!.gpuLayers, "auto");
  t.equal(sim!.slots, 2);
  t.equal(sim!.sim.tokensPerSecond, 5);
  t.equal(parseCatalog(doc, "x.yaml", fromEnv({ TRIBUTARY_GPU_LAYERS: "12", TRIBUTARY_SLOTS: "" }))[0]!.gpuLayers, 12, "an empty variable is unset");
});

t.test("an override variable that is not valid names itself", async (t) => {
  for (const [name, value] of [["TRIBUTARY_SLOTS", "-1"], ["TRIBUTARY_THREADS", "two"], ["TRIBUTARY_GPU_LAYERS", "most"], ["TRIBUTARY_ENGINE", "vllm"]] as const)
    t.throws(() => fromEnv({ [name]: value }), { name: ConfigurationError.name, message: new RegExp(name) }, `${name}=${value}`);
});

t.test("every rule gives a clear error", async (t) => {
  const bad = (text: string, env: Record<string, string>, pattern: RegExp) => {
    try {
      parseCatalog(text, "c.yaml", fromEnv(env));
      t.fail(`accepted: ${text}`);
    } catch (e) {
      t.ok(e instanceof CatalogError, "a CatalogError");
      t.match((e as Error).message, pattern);
    }
  };
  bad("models: [{ id: nope, context_length: 5, engine: sim }]", {}, /models\[0\]\.id/);
  bad("models: [{ id: a/b, engine: sim }]", {}, /context_length/);
  bad("models: [{ id: a/b, context_length: 5 }]", {}, /"source" is required/);
  bad("models: [{ id: a/b, engine: sim, context_length: 5, max_output_tokens: 9 }]", {}, /exceeds context_length/);
  bad("models: [{ id: a/b, engine: sim, context_length: 5, colour: red }]", {}, /colour/);
  bad("models: [{ id: a/b, engine: sim, context_length: 5 }, { id: a/b, engine: sim, context_length: 5 }]", {}, /appears twice/);
  bad(doc, { TRIBUTARY_MODEL_OVERRIDES: "{" }, /not valid JSON/);
  bad(doc, { TRIBUTARY_MODEL_OVERRIDES: '{"x/y": {"slots": 1}}' }, /not in c\.yaml/);
  bad("models: [", {}, /not valid YAML/);
});
