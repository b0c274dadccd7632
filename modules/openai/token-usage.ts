/**
 * Token usage in the input/output form OpenAI uses for responses and batches (chat completions
 * use prompt/completion names instead). Cached tokens: of the input, those the runner found in its
 * KV cache. Reasoning tokens are not counted separately by these engines: 0.
 */
export interface TokenUsage {
  input_tokens: number;
  input_tokens_details: { cached_tokens: number };
  output_tokens: number;
  output_tokens_details: { reasoning_tokens: number };
  total_tokens: number;
}

export function tokenUsage(input: number, output: number, cached = 0): TokenUsage {
  return {
    input_tokens: input,
    input_tokens_details: { cached_tokens: cached },
    output_tokens: output,
    output_tokens_details: { reasoning_tokens: 0 },
    total_tokens: input + output,
  };
}
