/**
 * Token usage in the input/output form OpenAI uses for responses and batches (chat completions
 * use prompt/completion names instead). Cached tokens: of the input, those the runner found in its
 * KV cache. Reasoning tokens: of the output, those the model spent thinking (its thought segment).
 */
export interface TokenUsage {
  input_tokens: number;
  input_tokens_details: { cached_tokens: number };
  output_tokens: number;
  output_tokens_details: { reasoning_tokens: number };
  total_tokens: number;
}

export function tokenUsage(input: number, output: number, cached = 0, reasoning = 0): TokenUsage {
  return {
    input_tokens: input,
    input_tokens_details: { cached_tokens: cached },
    output_tokens: output,
    output_tokens_details: { reasoning_tokens: reasoning },
    total_tokens: input + output,
  };
}

/**
 * A Response's usage (ResponseUsage in OpenAI's spec 2.3.0): the batch form plus
 * `input_tokens_details.cache_write_tokens`, which the spec requires there. Always 0: a runner
 * keeps the prompt it evaluated in its slot's KV cache anyway, and nothing charges for writing it.
 */
export interface ResponseUsage {
  input_tokens: number;
  input_tokens_details: { cached_tokens: number; cache_write_tokens: number };
  output_tokens: number;
  output_tokens_details: { reasoning_tokens: number };
  total_tokens: number;
}

export function responseTokenUsage(input: number, output: number, cached = 0, reasoning = 0): ResponseUsage {
  return {
    input_tokens: input,
    input_tokens_details: { cached_tokens: cached, cache_write_tokens: 0 },
    output_tokens: output,
    output_tokens_details: { reasoning_tokens: reasoning },
    total_tokens: input + output,
  };
}
