import { mkdtempSync, writeFileSync } from "node:fs";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { stringify } from "yaml";
import { writeScriptedModel, type ScriptedModel } from "../../bench/gguf/scripted-model.js";

// Qwen3-style models whose replies are scripted (bench/gguf/scripted-model.ts), for tests of
// reasoning: served with node-llama-cpp's Qwen chat wrapper (chat_template: qwen), the one
// Qwen3's own template resolves to. Each reply ends with <|im_end|>, the end of the turn.

export const SCRIPTS = {
  /** Thinks (`</think>` one token), then answers; with thinking off, answers at once. */
  think: {
    afterNewline: ["<think>", "\nLet", " me", " think", ".\n", "</think>", "\n\nHello", " there", "!", "<|im_end|>"],
    afterBlankLine: ["Direct", " answer", ".", "<|im_end|>"],
  },
  /** Thinks, closing the thought in three plain tokens: "</", "think", ">\n\n". */
  splitClose: {
    afterNewline: ["<think>", "\nHmm", ", ok", ".\n", "</", "think", ">\n\n", "Sure", "!", "<|im_end|>"],
  },
  /**
   * Thinks, then answers `{"answer": "yes"}`; with thinking off, answers `{"answer":"no"}` at once.
   * For response_format JSON_SCHEMA: its grammar allows every answer token (the first after the
   * blank line that follows a thought).
   */
  json: {
    afterNewline: ["<think>", "\nThe", " user", " wants", " JSON", ".\n", "</think>", '\n\n{"', "answer", '":', ' "', "yes", '"}', "<|im_end|>"],
    afterBlankLine: ["{", '"answer":', '"no"', "}", "<|im_end|>"],
  },
  /**
   * Thinks, closing the thought in plain tokens, the last of which starts the JSON: `>{"`. Under a
   * response grammar the engine takes that token back (the rest of the answer is then unscripted).
   */
  jsonSplitClose: {
    afterNewline: ["<think>", "\nOk", "</", "think", '>{"', "<|im_end|>"],
  },
  /** Thinks, then calls a function (the engine writes the call under its grammars). */
  tool: {
    afterNewline: ["<think>", "\nI", " should", " call", " it.\n", "</think>", "<tool_call>", '\n{"name": "'],
  },
} satisfies Record<string, ScriptedModel>;

export type ScriptName = keyof typeof SCRIPTS;

/** What each script's reply is: its reasoning, its answer, and its reasoning tokens (<think> through </think>). */
export const REPLIES: Record<ScriptName, { reasoning: string; answer: string; reasoningTokens: number }> = {
  think: { reasoning: "Let me think.", answer: "Hello there!", reasoningTokens: 6 },
  splitClose: { reasoning: "Hmm, ok.", answer: "Sure!", reasoningTokens: 7 },
  tool: { reasoning: "I should call it.", answer: "", reasoningTokens: 6 },
  // Under a response grammar the reply starts inside the thought: the engine writes `<think>` in
  // the prompt, the script goes on from it, and its reasoning tokens are the ones after it.
  json: { reasoning: "The user wants JSON.", answer: '{"answer": "yes"}', reasoningTokens: 6 },
  jsonSplitClose: { reasoning: "Ok", answer: '{"', reasoningTokens: 4 },
};
export const JSON_THINKING_OFF_ANSWER = '{"answer":"no"}';
/** A schema the json script's answers keep to (response_format json_schema). */
export const JSON_SCHEMA = { type: "object", properties: { answer: { type: "string", enum: ["yes", "no"] } }, required: ["answer"], additionalProperties: false };
export const THINKING_OFF_ANSWER = "Direct answer.";

export const scriptedModelId = (name: ScriptName) => `test/qwen3-${name.replace(/[A-Z]/g, (c) => `-${c.toLowerCase()}`)}`;

/** Writes every scripted model and a catalog serving them; returns the catalog's path and each model's file. */
export function writeScriptedCatalog(): { catalog: string; files: Record<ScriptName, string> } {
  const dir = mkdtempSync(join(tmpdir(), "tributary-scripted-"));
  const files = {} as Record<ScriptName, string>;
  const models = (Object.keys(SCRIPTS) as ScriptName[]).map((name) => {
    files[name] = join(dir, `${name}.gguf`);
    writeScriptedModel(files[name], SCRIPTS[name]);
    return {
      id: scriptedModelId(name),
      owned_by: "tributary",
      engine: "llama",
      source: files[name],
      context_length: 2048,
      max_output_tokens: 256,
      slots: 2,
      chat_template: "qwen",
      rate_limits: { requests_per_minute: 100000, tokens_per_minute: 10000000 },
    };
  });
  const catalog = join(dir, "catalog.yaml");
  writeFileSync(catalog, stringify({ models }));
  return { catalog, files };
}
