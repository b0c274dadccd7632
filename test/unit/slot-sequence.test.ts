import t from "tap";
import type { Token } from "node-llama-cpp";
import type { NativeContext, NativeSampler } from "../../runners/engines/llama/addon-context.js";
import { DecodeSteps } from "../../runners/engines/llama/decode-steps.js";
import { ContextFullError, SlotSequence } from "../../runners/engines/llama/slot-sequence.js";

// A slot keeps the tokens its KV cells hold itself (node-llama-cpp's sequence bookkeeping is not
// used): the cached prompt prefix, erasing what a new prompt does not share, the token a caller
// stopped on fed first next time, and `length` instead of overrunning the context.

const EOG = 99;

/** Decodes at once; samples the tokens of `script` in turn. Records KV positions and removals. */
class ScriptedNative implements NativeContext {
  decoded: Array<{ position: number; tokens: number[] }> = [];
  removed: Array<[number, number]> = [];
  samplers = 0;
  constructor(private readonly script: number[]) {}
  initBatch(): void {}
  addToBatch(_sequenceId: number, position: number, tokens: Uint32Array, logitIndexes: Uint32Array): Uint32Array {
    this.decoded.push({ position, tokens: [...tokens] });
    return logitIndexes.slice();
  }
  decodeBatch(): Promise<void> {
    return Promise.resolve();
  }
  sampleToken(batchLogitIndex: number, sampler: NativeSampler): Promise<number>;
  sampleToken(batchLogitIndex: number, sampler: NativeSampler, probabilities: boolean, confidence?: boolean): Promise<[number, number[] | undefined, number | undefined]>;
  /** Reads of a logprobs probe (not used here) get the token just sampled as the only candidate. */
  sampleToken(_batchLogitIndex: number, _sampler: NativeSampler, probabilities?: boolean, confidence?: boolean): Promise<unknown> {
    if (probabilities !== undefined || confidence !== undefined) return Promise.resolve([-1, [this.sampled, 1], 1]);
    this.sampled = this.script.shift() ?? -1;
    return Promise.resolve(this.sampled);
  }
  private sampled = -1;
  removeTokenCellsFromSequence(_sequenceId: number, start: number, end: number): boolean {
    this.removed.push([start, end]);
    return true;
  }
  setThreads(): void {}
}

function slotOver(native: ScriptedNative, contextSize = 100): SlotSequence {
  const context = {
    native,
    steps: new DecodeSteps(native, 16),
    contextSize,
    createSampler: (): NativeSampler => {
      native.samplers++;
      return { applyConfig() {}, dispose() {} };
    },
    isEogToken: (token: Token) => token === EOG,
  };
  return new SlotSequence(context, 0);
}

async function take(slot: SlotSequence, input: number[], count: number): Promise<number[]> {
  const out: number[] = [];
  if (count === 0) return out;
  for await (const token of slot.generate(input as Token[], {})) {
    out.push(token);
    if (out.length >= count) break;
  }
  return out;
}

t.test("generates after the prompt, feeds the token it stopped on first next time, ends at end-of-generation", async (t) => {
  const native = new ScriptedNative([10, 11, 12, EOG]);
  const slot = slotOver(native);
  const input = await slot.reset([1, 2, 3] as Token[], true);
  t.same(input, [1, 2, 3]);
  t.same(await take(slot, input, 2), [10, 11]);
  t.equal(slot.length, 5, "the prompt and the first token are in the cache, the last one pending");
  t.same(await take(slot, [20], 5), [12], "end-of-generation ends the loop without being yielded");
  t.same(native.decoded, [
    { position: 0, tokens: [1, 2, 3] },
    { position: 3, tokens: [10] },
    { position: 4, tokens: [11, 20] },
    { position: 6, tokens: [12] },
  ]);
  t.equal(native.samplers, 2, "one sampler per generate call, not per token");
});

t.test("a new prompt keeps the shared prefix (minus its last token) and erases the rest", async (t) => {
  const native = new ScriptedNative([10, 11]);
  const slot = slotOver(native);
  await take(slot, await slot.reset([1, 2, 3, 4] as Token[], true), 2);
  t.equal(slot.sharedPrefix([1, 2, 3, 9] as Token[]), 3);
  t.same(await slot.reset([1, 2, 3, 9] as Token[], true), [9], "the cached prefix 1 2 3 is kept");
  t.same(native.removed, [[3, -1]]);
  t.same(await slot.reset([1, 2, 3] as Token[], true), [3], "a prompt held whole evaluates its last token again");
  t.same(await slot.reset([1, 2, 3] as Token[], false), [1, 2, 3], "without reuse everything is evaluated");
  t.same(native.removed.at(-1), [0, -1]);
});

t.test("truncate drops the tail, pending token included", async (t) => {
  const native = new ScriptedNative([10, 11, 12]);
  const slot = slotOver(native);
  await take(slot, await slot.reset([1, 2, 3] as Token[], true), 2);
  await slot.truncate(3);
  t.equal(slot.length, 3);
  t.same(native.removed, [[3, -1]]);
  await take(slot, [7], 1);
  t.same(native.decoded.at(-1), { position: 3, tokens: [7] }, "decoding resumes at the truncated position");
});

t.test("input that does not fit the context throws ContextFullError instead of decoding", async (t) => {
  const native = new ScriptedNative([10, 11, 12, 13]);
  const slot = slotOver(native, 5);
  const input = await slot.reset([1, 2, 3] as Token[], true);
  const out: number[] = [];
  const failure = await (async () => {
    for await (const token of slot.generate(input, {})) out.push(token);
  })().catch((err: unknown) => err);
  t.ok(failure instanceof ContextFullError, "the choice can end with length");
  t.same(out, [10, 11, 12], "positions 0-4 hold the prompt and two tokens; the third cannot be fed");
  t.equal(Math.max(...native.decoded.map((d) => d.position + d.tokens.length)), 5, "nothing decoded past the context");
});
