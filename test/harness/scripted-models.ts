import { mkdtempSync, writeFileSync } from "node:fs";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { stringify } from "yaml";
import { HARMONY_FORMAT, QWEN3_FORMAT, writeScriptedModel, type ScriptedModel } from "../../bench/gguf/scripted-model.js";

// Models whose replies are scripted (bench/gguf/scripted-model.ts), for tests of reasoning:
//   Qwen3-style ones, served with node-llama-cpp's Qwen chat wrapper (chat_template: qwen), the one
//   Qwen3's own template resolves to; each reply ends with <|im_end|>, the end of the turn;
//   gpt-oss-style ones (harmony tokens, a harmony template), served with its Harmony wrapper
//   (chat_template: harmony); each reply is channel messages and ends with <|return|>. A token has
//   one successor, so the second message header of a reply is spelled in plain pieces ("<|chan",
//   "nel|>"): `harmonyThink` has the analysis header in special tokens, `harmonySplit` the final one.

/** A harmony template for the GGUFs to carry (the engine serves them with node-llama-cpp's Harmony wrapper). */
const HARMONY_TEMPLATE = [
  `{{- "<|start|>system<|message|>Reasoning: " + (reasoning_effort or "medium") + "\n\n# Valid channels: analysis, commentary, final.<|end|>" -}}`,
  `{%- for m in messages -%}`,
  `{%- if m.role == "assistant" -%}{{- "<|start|>assistant<|channel|>final<|message|>" + m.content + "<|end|>" -}}`,
  `{%- else -%}{{- "<|start|>" + m.role + "<|message|>" + m.content + "<|end|>" -}}{%- endif -%}`,
  `{%- endfor -%}`,
  `{%- if add_generation_prompt -%}{{- "<|start|>assistant" -}}{%- endif -%}`,
].join("");
const harmony = (reply: string[]): ScriptedModel => ({ format: HARMONY_FORMAT, chatTemplate: HARMONY_TEMPLATE, reply });

export const SCRIPTS = {
  /** Thinks (`</think>` one token), then answers; with thinking off, answers at once. */
  think: {
    reply: ["<think>", "\nLet", " me", " think", ".\n", "</think>", "\n\nHello", " there", "!", "<|im_end|>"],
    afterBlankLine: ["Direct", " answer", ".", "<|im_end|>"],
  },
  /** Thinks, closing the thought in three plain tokens: "</", "think", ">\n\n". */
  splitClose: {
    reply: ["<think>", "\nHmm", ", ok", ".\n", "</", "think", ">\n\n", "Sure", "!", "<|im_end|>"],
  },
  /**
   * Thinks, then answers `{"answer": "yes"}`; with thinking off, answers `{"answer":"no"}` at once.
   * For response_format JSON_SCHEMA: its grammar allows every answer token (the first after the
   * blank line that follows a thought).
   */
  json: {
    reply: ["<think>", "\nThe", " user", " wants", " JSON", ".\n", "</think>", '\n\n{"', "answer", '":', ' "', "yes", '"}', "<|im_end|>"],
    afterBlankLine: ["{", '"answer":', '"no"', "}", "<|im_end|>"],
  },
  /**
   * Thinks, closing the thought in plain tokens, the last of which starts the JSON: `>{"`. Under a
   * response grammar the engine takes that token back (the rest of the answer is then unscripted).
   */
  jsonSplitClose: {
    reply: ["<think>", "\nOk", "</", "think", '>{"', "<|im_end|>"],
  },
  /** Thinks, then calls a function (the engine writes the call under its grammars). */
  tool: {
    reply: ["<think>", "\nI", " should", " call", " it.\n", "</think>", "<tool_call>", '\n{"name": "'],
  },
  /** As `think`, with `<think>` and `</think>` control tokens, which the detokenizer leaves out of text unless told to show them. */
  hiddenThink: {
    format: { ...QWEN3_FORMAT, control: [...QWEN3_FORMAT.control, "<think>", "</think>"], userDefined: QWEN3_FORMAT.userDefined.filter((t) => !t.includes("think")) },
    reply: ["<think>", "\nLet", " me", " think", ".\n", "</think>", "\n\nHello", " there", "!", "<|im_end|>"],
  },
  /** gpt-oss: the analysis channel (its header in special tokens), then the final one. */
  harmonyThink: harmony(["<|channel|>", "analysis", "<|message|>", "Let", " me", " think", ".", "<|end|>", "<|start|>", "assistant", "<|chan", "nel|>", "final", "<|mess", "age|>", "Hello", " there", "!", "<|return|>"]),
  /** gpt-oss: the analysis channel (its header and `<|end|>` in plain pieces), then the final one in special tokens. */
  harmonySplit: harmony(["<|chan", "nel|>", "analysis", "<|mess", "age|>", "Hmm", ", ok", ".", "<|en", "d|>", "<|start|>", "assistant", "<|channel|>", "final", "<|message|>", "Sure", "!", "<|return|>"]),
  /** gpt-oss: analysis, then a call in the commentary channel (the engine writes the call under its grammars). */
  harmonyTool: harmony(["<|channel|>", "analysis", "<|message|>", "I", " should", " call", " it.", "<|end|>", "<|start|>", "assistant", "<|chan", "nel|>", "comment", "ary", " to", "=functions."]),
} satisfies Record<string, ScriptedModel>;

export type ScriptName = keyof typeof SCRIPTS;
/** The Qwen3-style scripts (the default catalog) and the gpt-oss ones. */
export const QWEN3_SCRIPTS = ["think", "splitClose", "tool"] as const satisfies readonly ScriptName[];
export const HARMONY_SCRIPTS = ["harmonyThink", "harmonySplit", "harmonyTool"] as const satisfies readonly ScriptName[];
/** The Qwen3-style scripts for response_format (their answers keep to JSON_SCHEMA). */
export const JSON_SCRIPTS = ["json", "jsonSplitClose"] as const satisfies readonly ScriptName[];

/**
 * What each script's reply is: its reasoning, its answer, and its reasoning tokens (<think>
 * through </think>; harmony: the analysis message's, its header through `<|end|>`).
 */
export const REPLIES: Record<ScriptName, { reasoning: string; answer: string; reasoningTokens: number }> = {
  think: { reasoning: "Let me think.", answer: "Hello there!", reasoningTokens: 6 },
  splitClose: { reasoning: "Hmm, ok.", answer: "Sure!", reasoningTokens: 7 },
  tool: { reasoning: "I should call it.", answer: "", reasoningTokens: 6 },
  // Under a response grammar the reply starts inside the thought: the engine writes `<think>` in
  // the prompt, the script goes on from it, and its reasoning tokens are the ones after it.
  json: { reasoning: "The user wants JSON.", answer: '{"answer": "yes"}', reasoningTokens: 6 },
  jsonSplitClose: { reasoning: "Ok", answer: '{"', reasoningTokens: 4 },
  hiddenThink: { reasoning: "Let me think.", answer: "Hello there!", reasoningTokens: 6 },
  harmonyThink: { reasoning: "Let me think.", answer: "Hello there!", reasoningTokens: 8 },
  harmonySplit: { reasoning: "Hmm, ok.", answer: "Sure!", reasoningTokens: 10 },
  harmonyTool: { reasoning: "I should call it.", answer: "", reasoningTokens: 8 },
};
export const JSON_THINKING_OFF_ANSWER = '{"answer":"no"}';
/** A schema the json script's answers keep to (response_format json_schema). */
export const JSON_SCHEMA = { type: "object", properties: { answer: { type: "string", enum: ["yes", "no"] } }, required: ["answer"], additionalProperties: false };
export const THINKING_OFF_ANSWER = "Direct answer.";

const kebab = (name: string) => name.replace(/[A-Z]/g, (c) => `-${c.toLowerCase()}`);
export const scriptedModelId = (name: ScriptName) =>
  name.startsWith("harmony") ? `test/gpt-oss-${kebab(name.slice("harmony".length)).slice(1)}` : `test/qwen3-${kebab(name)}`;

/** Writes the scripted models (the Qwen3-style ones by default) and a catalog serving them; returns the catalog's path and each model's file. */
export function writeScriptedCatalog(names: readonly ScriptName[] = QWEN3_SCRIPTS): { catalog: string; files: Partial<Record<ScriptName, string>> } {
  const dir = mkdtempSync(join(tmpdir(), "tributary-scripted-"));
  const files: Partial<Record<ScriptName, string>> = {};
  const models = names.map((name) => {
    const file = (files[name] = join(dir, `${name}.gguf`));
    const script: ScriptedModel = SCRIPTS[name];
    writeScriptedModel(file, script);
    return {
      id: scriptedModelId(name),
      owned_by: "tributary",
      engine: "llama",
      source: file,
      context_length: 2048,
      max_output_tokens: 256,
      slots: 2,
      chat_template: script.format === HARMONY_FORMAT ? "harmony" : "qwen",
      rate_limits: { requests_per_minute: 100000, tokens_per_minute: 10000000 },
    };
  });
  const catalog = join(dir, "catalog.yaml");
  writeFileSync(catalog, stringify({ models }));
  return { catalog, files };
}
