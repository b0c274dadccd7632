import t from "tap";
import { getLlama, type Token } from "node-llama-cpp";
import { loadCatalog } from "../../../modules/catalog/mod.js";
import { createLogger } from "../../../lib/log.js";
import { GenerateRequest, type TokenLogprob } from "../../../proto/gen/tributary/v1/inference.js";
import { LlamaEngine } from "../../../runners/engines/llama/llama-engine.js";
import { TokenBytes } from "../../../runners/engines/llama/token-bytes.js";
import { TEST_MODEL, testCatalog } from "../../harness/processes.js";

// The llama engine's logprobs, checked against llama.cpp's own probabilities for the same
// tokens: the test model decoded greedily in process, and beside it node-llama-cpp's public
// evaluate API on a context of its own, asking for the full next-token distribution (the softmax
// of llama.cpp's logits over the whole vocabulary) at every step. Same tokens, the chosen one the
// most likely, the alternatives sorted, every value the log of llama.cpp's probability.

const spec = { ...loadCatalog(testCatalog).find((m) => m.id === TEST_MODEL)!, slots: 2 };
const engine = new LlamaEngine(spec, { modelPath: async () => spec.source, log: createLogger("test") });
await engine.load();
t.teardown(() => engine.dispose());

const TOKENS = 48;
const TOP = 5;

interface Choice {
  text: string;
  logprobs: TokenLogprob[];
  deltas: number;
}

async function generate(content: string, sampling: Partial<GenerateRequest["sampling"]>, choices = 1): Promise<{ prompt: Token[]; choices: Choice[] }> {
  const request = GenerateRequest.fromPartial({ requestId: "lp", model: spec.id, messages: [{ role: "user", content }], sampling: { maxTokens: TOKENS, n: choices, ...sampling } });
  const prepared = await engine.prepare(request);
  const out = await Promise.all(
    Array.from({ length: choices }, async (_, i) => {
      const choice: Choice = { text: "", logprobs: [], deltas: 0 };
      const outcome = await engine.runChoice(prepared, i, i, {
        text: (text, _tokens, logprobs) => {
          choice.text += text;
          choice.deltas++;
          if (logprobs) choice.logprobs.push(...logprobs);
        },
        toolCall: () => {},
        reasoning: () => t.fail("the test model has no thought segment"),
      }, new AbortController().signal);
      t.equal(outcome.finishReason, 2, "the test model never ends on its own: length");
      return choice;
    }),
  );
  return { prompt: (prepared as unknown as { plan: { prompt: Token[] } }).plan.prompt, choices: out };
}

/** llama.cpp's greedy decode of `prompt` on a context of its own, with each step's full distribution. */
async function reference(prompt: Token[], steps: number) {
  const llama = await getLlama({ gpu: false, build: "never" });
  const model = await llama.loadModel({ modelPath: spec.source });
  const context = await model.createContext({ contextSize: 512, threads: 1 });
  const out: Array<{ token: Token; probabilities: Map<Token, number> }> = [];
  for await (const step of context.getSequence().evaluateWithMetadata(prompt, { probabilities: true }, { temperature: 0 })) {
    out.push({ token: step.token, probabilities: step.probabilities });
    if (out.length === steps) break;
  }
  const bytes = new TokenBytes(model);
  const result = out.map((s) => ({ ...s, bytes: Array.from(bytes.of(s.token)), ranked: [...s.probabilities].map(([tok, p]) => ({ bytes: Array.from(bytes.of(tok)), logprob: Math.log(p) })) }));
  await context.dispose();
  await model.dispose();
  await llama.dispose();
  return result;
}

const TOLERANCE = 1e-3;

t.test("greedy: each token's logprob and its top alternatives are llama.cpp's, for the same tokens", async (t) => {
  const { prompt, choices } = await generate("Once upon a time", { temperature: 0, logprobs: true, topLogprobs: TOP });
  const [choice] = choices;
  const ref = await reference(prompt, choice!.logprobs.length);
  t.equal(choice!.logprobs.length, ref.length);
  t.ok(choice!.logprobs.length >= TOKENS - 8, `${choice!.logprobs.length} of ${TOKENS} tokens have logprobs (a stop sequence's start may be held back at the end)`);
  t.same(Buffer.concat(choice!.logprobs.map((l) => l.bytes)).toString("utf8"), choice!.text, "the tokens' bytes spell the text");
  let worst = 0;
  choice!.logprobs.forEach((l, i) => {
    const r = ref[i]!;
    t.same(Array.from(l.bytes), r.bytes, `token ${i}: the token llama.cpp chose`);
    t.equal(l.top.length, TOP);
    t.same(Array.from(l.top[0]!.bytes), Array.from(l.bytes), `token ${i}: greedy, so the chosen token is the most likely`);
    t.equal(l.top[0]!.logprob, l.logprob);
    for (let k = 1; k < l.top.length; k++) t.ok(l.top[k - 1]!.logprob >= l.top[k]!.logprob, `token ${i}: alternatives sorted`);
    l.top.forEach((alt, k) => {
      worst = Math.max(worst, Math.abs(alt.logprob - r.ranked[k]!.logprob));
      // Tokens of (nearly) equal probability may come in either order; any other is at the same rank.
      const apart = (j: number) => j < 0 || j >= r.ranked.length || Math.abs(r.ranked[j]!.logprob - r.ranked[k]!.logprob) > TOLERANCE;
      if (apart(k - 1) && apart(k + 1)) t.same(Array.from(alt.bytes), r.ranked[k]!.bytes, `token ${i}, rank ${k}`);
    });
    t.ok(l.logprob <= 0);
  });
  t.ok(worst < TOLERANCE, `every value within ${TOLERANCE} of ln(llama.cpp's probability) (worst ${worst.toExponential(2)})`);
  t.comment(`largest difference from llama.cpp's: ${worst.toExponential(2)}`);
});

t.test("sampled with temperature: the token's logprob is its raw probability's, wherever it ranks", async (t) => {
  const { prompt, choices } = await generate("The little dog", { temperature: 1.5, seed: 7, logprobs: true, topLogprobs: 0 });
  const [choice] = choices;
  t.ok(choice!.logprobs.every((l) => l.top.length === 0), "top_logprobs 0: no alternatives");
  // Replay the sampled tokens through llama.cpp and read each one's probability before it.
  const llama = await getLlama({ gpu: false, build: "never" });
  const model = await llama.loadModel({ modelPath: spec.source });
  const context = await model.createContext({ contextSize: 512, threads: 1 });
  const steps = context.getSequence().evaluateWithMetadata(prompt, { probabilities: true }, { temperature: 0 });
  let step = await steps.next();
  let checked = 0;
  const bytes = new TokenBytes(model);
  for (const l of choice!.logprobs) {
    if (step.done) break;
    // The token the engine sampled, found by its bytes among llama.cpp's candidates.
    const match = [...step.value.probabilities].find(([tok]) => Buffer.from(bytes.of(tok)).equals(Buffer.from(l.bytes)));
    t.ok(match, `token ${checked} is in llama.cpp's distribution`);
    if (!match) break;
    t.ok(Math.abs(Math.log(match[1]) - l.logprob) < TOLERANCE, `token ${checked}: ${l.logprob} against ${Math.log(match[1])}`);
    checked++;
    step = await steps.next(match[0]);
  }
  t.ok(checked >= TOKENS - 8, `${checked} sampled tokens checked`);
  await context.dispose();
  await model.dispose();
  await llama.dispose();
});

t.test("every choice of n has logprobs of its own; without logprobs, none", async (t) => {
  const { choices } = await generate("A cat", { temperature: 1, seed: 3, logprobs: true, topLogprobs: 2 }, 2);
  for (const [i, c] of choices.entries()) {
    t.same(Buffer.concat(c.logprobs.map((l) => l.bytes)).toString("utf8"), c.text, `choice ${i}: its own tokens`);
    t.ok(c.logprobs.every((l) => l.top.length === 2));
  }
  t.not(choices[0]!.text, choices[1]!.text, "different seeds, different choices");
  const plain = await generate("A cat", { temperature: 0 });
  t.same(plain.choices[0]!.logprobs, [], "not asked: no logprobs");
});
