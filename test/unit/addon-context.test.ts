import t from "tap";
import type { Llama, LlamaContext, LlamaContextSequence, LlamaModel } from "node-llama-cpp";
import { openNativeContext } from "../../runners/engines/llama/addon-context.js";

// The engine drives node-llama-cpp's private internals (pinned 3.21.1): a version without them
// must fail at load, naming what is missing and the installed version, not misbehave later.

const fn = () => undefined;
const complete = () => ({
  llama: { _bindings: { AddonSampler: class {} } },
  model: { _model: {} },
  context: { _ctx: { initBatch: fn, addToBatch: fn, decodeBatch: fn, sampleToken: fn, removeTokenCellsFromSequence: fn, setThreads: fn } },
  sequences: [{ _sequenceId: 0, _resolveSamplerConfig: fn }, { _sequenceId: 1, _resolveSamplerConfig: fn }],
});
const open = (parts: ReturnType<typeof complete>) =>
  openNativeContext(parts.llama as unknown as Llama, parts.model as unknown as LlamaModel, parts.context as unknown as LlamaContext, parts.sequences as unknown as LlamaContextSequence[]);

t.test("all members present: the context opens with the sequences' ids", async (t) => {
  t.same(open(complete()).sequenceIds, [0, 1]);
});

t.test("a missing member fails naming it and the installed version", async (t) => {
  const parts = complete();
  delete (parts.context._ctx as Record<string, unknown>).sampleToken;
  delete (parts.llama._bindings as Record<string, unknown>).AddonSampler;
  t.throws(() => open(parts), /node-llama-cpp 3\.21\.1 lacks .*LlamaContext\._ctx\.sampleToken, Llama\._bindings\.AddonSampler/);
});
