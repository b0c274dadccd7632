import t from "tap";
import type { BatchItem, Token } from "node-llama-cpp";
import { sequenceOrder, shareTokens } from "../../runners/engines/llama/batch-order.js";

// A batch's items go to llama.cpp in sequence id order (one micro-batch per run of consecutive
// ids), with node-llama-cpp's share of the batch's tokens per item.

const item = (tokens: number): BatchItem => ({ tokens: Array.from({ length: tokens }, (_, i) => i as Token), logits: [], evaluationPriority: 5 });

t.test("items are ordered by their sequence, unknown ones last in queue order", async (t) => {
  const [a, b, c, d, e] = [item(1), item(1), item(20), item(1), item(1)];
  const sequence = new Map<BatchItem, number>([[a, 4], [b, 0], [c, 2], [d, 1]]);
  const out = sequenceOrder((x) => sequence.get(x))({ items: [a, b, c, d, e], size: 512 });
  t.same(out.map((p) => [sequence.get(p.item) ?? "?", p.processAmount]), [[0, 1], [1, 1], [2, 20], [4, 1], ["?", 1]]);
});

t.test("tokens are shared as node-llama-cpp shares them", async (t) => {
  // Room for 10: an equal share of 3 each first, then the rest to those that want more, in order.
  const [a, b, c] = [item(8), item(1), item(8)];
  t.same(shareTokens([a, b, c], 10).map((p) => p.processAmount), [3 + 3, 1, 3]);
  // More items than room: one token each until it is full.
  t.same(shareTokens([item(5), item(5), item(5)], 2).map((p) => p.processAmount), [1, 1]);
  t.same(shareTokens([], 8), []);
});
