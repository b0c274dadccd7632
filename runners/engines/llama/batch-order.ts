import type { BatchItem, PrioritizedBatchItem } from "node-llama-cpp";

/**
 * The tokens of a batch in sequence id order.
 *
 * With a KV cache per sequence, llama.cpp splits a batch into micro-batches of consecutive
 * increasing sequence ids (llama_batch_allocr::split_equal, sequential): one matrix pass each.
 * node-llama-cpp puts items in a batch in the order they were queued. DecodeSteps releases the
 * generating sequences in id order, but a new request's prompt is queued on its own path (after
 * its slot's cache edit, through more promise hops than a generating sequence's next token), so
 * the step a new request joins ran as two passes, one of them for a single sequence with the
 * one-column kernel (in process, ~500M model, 8 streams: 334 ms against 263 ms for the steps
 * around it). Sorting the items by sequence id makes such a step one pass again.
 *
 * `sequenceOf` names an item's sequence (undefined: unknown, kept after the known ones, in queue
 * order). The tokens per item are shared out as node-llama-cpp's default ("maximumParallelism")
 * does: an equal share each, then what is left to the items that wanted more, in order.
 */
export function sequenceOrder(sequenceOf: (item: BatchItem) => number | undefined) {
  return ({ items, size }: { items: readonly BatchItem[]; size: number }): PrioritizedBatchItem[] => {
    const ordered = items
      .map((item, index) => ({ item, index, sequence: sequenceOf(item) ?? Number.MAX_SAFE_INTEGER }))
      .sort((a, b) => a.sequence - b.sequence || a.index - b.index)
      .map((x) => x.item);
    return shareTokens(ordered, size);
  };
}

/** An equal share of `size` tokens for each item (at least 1, in order), then the rest to those that want more. */
export function shareTokens(items: readonly BatchItem[], size: number): PrioritizedBatchItem[] {
  const out: PrioritizedBatchItem[] = [];
  let left = size;
  const share = Math.max(1, Math.floor(size / Math.max(1, items.length)));
  for (const item of items) {
    if (left === 0) break;
    const amount = Math.min(item.tokens.length, share, left);
    out.push({ item, processAmount: amount });
    left -= amount;
  }
  for (const entry of out) {
    if (left === 0) break;
    const more = Math.min(entry.item.tokens.length - entry.processAmount, left);
    entry.processAmount += more;
    left -= more;
  }
  return out;
}
