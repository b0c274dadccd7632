import type { TokenLogprob } from "../../../proto/gen/tributary/v1/inference.js";

// Token log probabilities on the wire: chat's ChatCompletionTokenLogprob and Responses' LogProb
// have one shape, {token, logprob, bytes, top_logprobs: [{token, logprob, bytes}]}.

export interface OpenAITopLogprob {
  token: string;
  logprob: number;
  bytes: number[];
}

export interface OpenAILogprob extends OpenAITopLogprob {
  top_logprobs: OpenAITopLogprob[];
}

const strictUtf8 = new TextDecoder("utf-8", { fatal: true });

/**
 * A token's text: its bytes as UTF-8, or, for a token holding only part of a character, the
 * bytes written as `bytes:\xe2\x80` (what OpenAI sends for those; `bytes` has them exactly).
 */
export function tokenText(bytes: Uint8Array): string {
  try {
    return strictUtf8.decode(bytes);
  } catch {
    let out = "bytes:";
    for (const b of bytes) out += `\\x${b.toString(16).padStart(2, "0")}`;
    return out;
  }
}

function topLogprob(t: TokenLogprob): OpenAITopLogprob {
  return { token: tokenText(t.bytes), logprob: t.logprob, bytes: Array.from(t.bytes) };
}

/** The runner's logprobs of a delta's tokens, in OpenAI's form. */
export function openAILogprobs(tokens: readonly TokenLogprob[]): OpenAILogprob[] {
  return tokens.map((t) => ({ ...topLogprob(t), top_logprobs: t.top.map(topLogprob) }));
}
