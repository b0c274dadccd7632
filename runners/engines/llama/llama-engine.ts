import { getLlama, LlamaLogLevel, LlamaText, SpecialToken, TokenBias, type ChatModelFunctions, type ChatWrapper, type Llama, type LlamaContext, type LlamaContextSequence, type LlamaModel, type Token } from "node-llama-cpp";
import { ErrorCode, ResponseFormat_Type, ToolChoice_Mode, Truncation, type GenerateRequest } from "../../../proto/gen/tributary/v1/inference.js";
import { InvalidGguf, type ModelSpec } from "../../../modules/catalog/mod.js";
import type { Logger } from "../../../lib/log.js";
import { EngineRequestError, type DecodeThreadsStatus, type ChoiceOutcome, type ChoiceSink, type Engine, type PreparedRequest } from "../engine.js";
import { dropOldestTurns } from "../context-fit.js";
import { fitsContext, resolveOutputBudget } from "../output-budget.js";
import { callSyntaxOf, ChatWrappers, renderPrompt, replyMayOpenThought, thoughtSegment, type CallSyntax, type ThoughtSegment } from "./chat-prompt.js";
import { ChoiceDecoder, MAX_CALLS_PER_CHOICE, type DecodePlan, type ToolPlan } from "./choice-decoder.js";
import { GrammarCache } from "./grammar-cache.js";
import { UnsupportedSchemaError } from "./json-schema-subset.js";
import { openNativeContext } from "./addon-context.js";
import { DecodeSteps } from "./decode-steps.js";
import { SlotSequence } from "./slot-sequence.js";
import { ThreadTuner } from "./thread-tuner.js";
import { TokenBytes } from "./token-bytes.js";

interface LlamaPrepared extends PreparedRequest {
  plan: DecodePlan;
}

/** OpenAI's bound on top_logprobs (the gateway checks it too). */
const MAX_TOP_LOGPROBS = 20;

const NO_PARAMETERS = JSON.stringify({ type: "object", properties: {}, additionalProperties: false });

export interface LlamaEngineOptions {
  /** Resolves the catalog source to a local GGUF path (downloading it when needed). */
  modelPath: () => Promise<string>;
  log: Logger;
  /** DecodeSteps' wait for a new request after a sequence stopped, at most (ms; default LINGER_MAX_MS). */
  lingerMaxMs?: number;
  /** Queue each step's samples with its decode: only when libuv's pool has one thread (DecodeSteps). */
  samplesFollowDecode?: boolean;
  /** On CPU with threads > 1: pick each step's threads from the steps served (ThreadTuner). */
  tuneThreads?: boolean;
  /** TRIBUTARY_FLASH_ATTENTION (unset: "auto"). */
  flashAttention?: FlashAttentionSetting;
}

/**
 * node-llama-cpp engine: one model, one context with a sequence per slot. The engine decodes
 * through node-llama-cpp's native addon itself (see addon-context.ts for why): DecodeSteps puts
 * the queued input of all sequences into one batch per step, so every active choice advances
 * together and a new one joins at the next step.
 */
/**
 * Why node-llama-cpp could not load a file as a model, when it is the file's fault: its GGUF
 * parser's errors (not exported, known by class name), and llama.cpp's bare "Failed to load model"
 * (a corrupt or truncated file, or an architecture it does not know; llama.cpp prints which on
 * stderr). Undefined for anything else (memory, the backend).
 */
function notGguf(err: unknown): string | undefined {
  if (!(err instanceof Error)) return undefined;
  // The magic it read is quoted raw: a file of zeros would put NULs on the terminal.
  if (/^(InvalidGguf|UnsupportedGguf)/.test(err.constructor.name)) return err.message.replace(/[\x00-\x1f\x7f]/g, (c) => `\\x${c.charCodeAt(0).toString(16).padStart(2, "0")}`);
  if (err.message === "Failed to load model") return "llama.cpp could not load it: corrupt, incomplete, or an unknown architecture (its reason is in the runner's log)";
  return undefined;
}

export class LlamaEngine implements Engine {
  readonly kind = "llama" as const;
  readonly slots: number;
  private llama!: Llama;
  private model!: LlamaModel;
  private context!: LlamaContext;
  private sequences: SlotSequence[] = [];
  private librarySequences: LlamaContextSequence[] = [];
  private steps: DecodeSteps | undefined;
  private tuner: ThreadTuner | undefined;
  private wrappers!: ChatWrappers;
  /** Per wrapper (the template's and its effort variants): its call syntax and thought segment. */
  private readonly wrapperTraits = new Map<ChatWrapper, { callSyntax: CallSyntax; thought: ThoughtSegment | undefined }>();
  private grammars!: GrammarCache;
  private vocabularySize = 0;
  private tokenBytes!: TokenBytes;

  constructor(private readonly spec: ModelSpec, private readonly options: LlamaEngineOptions) {
    this.slots = spec.slots;
  }

  async load(): Promise<void> {
    const path = await this.options.modelPath();
    const gpu = this.spec.gpuLayers !== 0;
    // maxThreads 0: no thread budget shared between contexts (a runner has one context, with the
    // catalog's threads). With a budget, node-llama-cpp awaits a thread allocation at every
    // decode step: a promise and an allocation per token. A load that is retried (the runner
    // retries a failed one) keeps the first: each getLlama adds process listeners of its own.
    this.llama ??= await getLlama({ gpu: gpu ? "auto" : false, build: "never", logLevel: LlamaLogLevel.error, progressLogs: false, maxThreads: 0 });
    this.model = await this.llama.loadModel({ modelPath: path, gpuLayers: this.spec.gpuLayers as number | "auto" | "max" }).catch((err: unknown) => {
      const reason = notGguf(err);
      throw reason !== undefined ? new InvalidGguf({ path, detail: reason }) : err;
    });
    this.context = await this.model.createContext({
      sequences: this.slots,
      contextSize: this.spec.contextLength,
      threads: this.spec.threads,
      batchSize: this.spec.batchSize,
      // llama.cpp enables flash attention where the backend supports it (llama-server's -fa auto);
      // node-llama-cpp leaves it off. On the CPU it fuses attention into one graph node, so a
      // step has fewer barriers between its threads: llama-bench -t 2 on the random ~100M model,
      // 155-158 against 143 tok/s.
      ...flashAttentionOption(this.options.flashAttention ?? "auto", gpu),
      failedCreationRemedy: false,
    });
    // The library's sequence objects only reserve the ids (and must stay referenced for that);
    // they are never evaluated: the engine owns the context's batches and KV cells.
    this.librarySequences = Array.from({ length: this.slots }, () => this.context.getSequence());
    const opened = openNativeContext(this.llama, this.model, this.context, this.librarySequences);
    const model = this.model;
    const log = this.options.log;
    const tuner = (this.tuner = !gpu && this.spec.threads > 1 && this.options.tuneThreads
      ? new ThreadTuner(this.spec.threads, (change) => log.info("decode threads changed", { ...change, threadsByStepWidth: tuner!.describe() }))
      : undefined);
    this.steps = new DecodeSteps(opened.native, this.context.batchSize, {
      ...(this.options.lingerMaxMs === undefined ? {} : { lingerMaxMs: this.options.lingerMaxMs }),
      samplesFollowDecode: this.options.samplesFollowDecode ?? false,
      ...(tuner ? { threads: tuner } : {}),
    });
    this.wrappers = new ChatWrappers(this.model, this.spec.chatTemplate);
    const base = this.traitsOf(this.wrappers.base);
    // node-llama-cpp ends generation on llama.cpp's end-of-turn token (eot) too, even where
    // llama.cpp does not: gpt-oss's <|end|> (its eot by name) closes every message, the analysis
    // one included, and the reply goes on to <|return|> or <|call|>. A token of the template's
    // thought markers never ends a reply.
    const insideReply = base.thought?.markerTokens;
    const slotContext = {
      native: opened.native,
      steps: this.steps,
      contextSize: this.context.contextSize,
      createSampler: opened.createSampler,
      isEogToken: (token: Token) => model.isEogToken(token) && !insideReply?.has(token),
    };
    this.sequences = opened.sequenceIds.map((id) => new SlotSequence(slotContext, id));
    this.grammars = new GrammarCache(this.llama);
    this.tokenBytes = new TokenBytes(this.model);
    const vocabulary = (this.model.fileInfo.metadata as { tokenizer?: { ggml?: { tokens?: readonly unknown[] } } }).tokenizer?.ggml?.tokens;
    this.vocabularySize = vocabulary?.length ?? [...this.model.iterateAllTokens()].length;
    this.options.log.info("model loaded", {
      path,
      template: this.wrappers.base.wrapperName,
      thoughtSegment: base.thought ? `${base.thought.markers.open || "(opened by the template)"} ... ${base.thought.markers.close}` : "none",
      contextPerSlot: this.context.contextSize,
      slots: this.slots,
      threads: this.spec.threads,
      ...(tuner ? { threadsTuned: tuner.candidates.join("|") } : {}),
      samplesFollowDecode: this.options.samplesFollowDecode ?? false,
      gpu: this.llama.gpu,
      library: this.llama.buildType,
    });
    // The prebuilt CPU library (no OpenMP) starts its worker threads anew at every decode step
    // and spins at every barrier between graph nodes, so a thread that loses its CPU stalls the
    // others: threads > 1 ran 5-25x slower than threads 1 on a busy 2-core machine.
    if (!gpu && this.spec.threads > 1 && this.llama.buildType === "prebuilt")
      this.options.log.warn("threads > 1 with node-llama-cpp's prebuilt CPU library decodes slower than threads 1 when CPUs are busy; build the library from source (TRIBUTARY_LLAMA_SOURCE_BUILD=on, then npm start) or set threads 1", { threads: this.spec.threads });
  }

  async prepare(request: GenerateRequest): Promise<LlamaPrepared> {
    const sampling = request.sampling;
    const choices = Math.max(1, sampling?.n ?? 1);
    if (choices > this.slots)
      throw new EngineRequestError(ErrorCode.ERROR_CODE_INVALID_REQUEST, `n (${choices}) exceeds this model's ${this.slots} decoding slots`, "n");

    // The template as the request's reasoning effort asks for it (Qwen3: thinking on or off; gpt-oss: its reasoning level).
    const wrapper = this.wrappers.forEffort(request.reasoningEffort);
    const traits = this.traitsOf(wrapper);
    const tools = this.toolPlan(request, traits.callSyntax);
    const functions: ChatModelFunctions | undefined = tools
      ? Object.fromEntries(request.tools.map((t) => [t.name, { description: t.description || undefined, params: t.parametersJson ? JSON.parse(t.parametersJson) : undefined }]))
      : undefined;

    let prompt: Token[];
    /** The chat template's rendering of the prompt (none for a raw prompt). */
    let renderedChat: LlamaText | undefined;
    let renderedPrompt: string | undefined;
    let droppedMessages = 0;
    const stopTexts = [...(sampling?.stop ?? [])];
    const stopTokens = new Set<Token>();
    if (request.messages.length > 0) {
      const requested = sampling?.maxTokens ?? 0;
      let rendered = renderPrompt(wrapper, request.messages, functions);
      prompt = rendered.text.tokenize(this.model.tokenizer);
      if (request.truncation === Truncation.TRUNCATION_AUTO && requested <= this.spec.maxOutputTokens && !fitsContext(this.spec, prompt.length, requested)) {
        const fitted = dropOldestTurns(request.messages, (messages) =>
          fitsContext(this.spec, renderPrompt(wrapper, messages, functions).text.tokenize(this.model.tokenizer).length, requested));
        if (fitted) {
          rendered = renderPrompt(wrapper, fitted.messages, functions);
          prompt = rendered.text.tokenize(this.model.tokenizer);
          droppedMessages = fitted.dropped;
        }
      }
      this.collectTemplateStops(rendered.stopTriggers, stopTexts, stopTokens);
      renderedChat = rendered.text;
      if (request.wantRenderedPrompt) renderedPrompt = rendered.text.toString();
    } else {
      prompt = LlamaText([this.model.tokens.shouldPrependBosToken ? new SpecialToken("BOS") : "", request.prompt]).tokenize(this.model.tokenizer);
      if (request.wantRenderedPrompt) renderedPrompt = request.prompt;
    }
    if (prompt.length === 0) throw new EngineRequestError(ErrorCode.ERROR_CODE_INVALID_REQUEST, "the prompt is empty", "messages");

    let responseGrammar = this.responseGrammar(request);
    if (responseGrammar) for (const t of responseGrammar.stopGenerationTriggers) if (typeof t === "string") stopTexts.push(t);
    // A raw prompt is not a chat turn: nothing in it opens a thought.
    let thought = renderedChat ? traits.thought : undefined;
    if (responseGrammar && thought && renderedChat && (!tools || tools.mode === "auto")) {
      // A reply under a grammar reasons first, then answers under it (ChoiceDecoder): the grammar
      // waits for a thought the reply starts inside. A reply that may or may not open the thought
      // (Qwen3 writes `<think>` itself) has it opened in the prompt, as if the model had written
      // the marker: otherwise its first token would be sampled free of the grammar whenever it
      // does not open one. With thinking off the template closed an empty thought: the grammar
      // holds from the first token, as without reasoning.
      if (replyMayOpenThought(renderedChat, thought.markers)) {
        prompt = [...prompt, ...this.model.tokenize(thought.markers.open, true)];
        if (renderedPrompt !== undefined) renderedPrompt += thought.markers.open;
        thought = { ...thought, markers: { ...thought.markers, openAtStart: true } };
      }
      if (thought.markers.openAtStart) responseGrammar = this.grammars.afterThought(responseGrammar);
    }

    const maxTokens = resolveOutputBudget(this.spec, prompt.length, sampling?.maxTokens ?? 0);
    const temperature = sampling?.temperature ?? 1;
    const plan: DecodePlan = {
      prompt,
      maxTokens,
      stopTexts: stopTexts.filter((s) => s.length > 0),
      stopTokens,
      sampling: {
        temperature,
        topP: sampling?.topP ?? 1,
        topK: 0,
        minP: 0,
        tokenBias: this.tokenBias(request),
      },
      seed: sampling?.seed !== undefined ? Number(BigInt.asUintN(32, BigInt(Math.trunc(sampling.seed)))) : (Math.random() * 2 ** 32) >>> 0,
      // Same seed and input, same output: seeded requests evaluate their whole prompt.
      reuseCache: sampling?.seed === undefined,
      penalties: sampling && (sampling.frequencyPenalty !== 0 || sampling.presencePenalty !== 0)
        ? { frequency: sampling.frequencyPenalty, presence: sampling.presencePenalty }
        : undefined,
      responseGrammar,
      tools,
      logprobs: this.logprobsPlan(request),
      thought,
    };
    return { request, promptTokens: prompt.length, maxTokens, choices, plan, droppedMessages, renderedPrompt };
  }

  /**
   * The free slot holding the longest prefix of the prompt (a system prompt, the earlier turns
   * of a conversation), so that its cache is reused, when that prefix is at least half the
   * prompt. Otherwise the slot used least recently: a prompt that shares only a template's first
   * tokens with a slot would throw away that slot's cached prompt for nothing (llama.cpp's server
   * picks slots the same way). -1 (no preference) for requests that evaluate their whole prompt.
   */
  preferredSlot(prepared: PreparedRequest, free: readonly number[]): number {
    const plan = (prepared as LlamaPrepared).plan;
    if (!plan.reuseCache) return -1;
    let best = -1;
    let bestShared = 0;
    let oldest = -1;
    // From the end: among equals the slot freed last wins, as without a preference.
    for (let i = free.length - 1; i >= 0; i--) {
      const slot = this.sequences[free[i]!]!;
      const shared = slot.sharedPrefix(plan.prompt);
      if (shared > bestShared) [best, bestShared] = [i, shared];
      if (oldest < 0 || slot.lastUsed < this.sequences[free[oldest]!]!.lastUsed) oldest = i;
    }
    return bestShared * 2 >= plan.prompt.length ? best : oldest;
  }

  runChoice(prepared: PreparedRequest, choiceIndex: number, slot: number, sink: ChoiceSink, signal: AbortSignal): Promise<ChoiceOutcome> {
    const plan = (prepared as LlamaPrepared).plan;
    return new ChoiceDecoder(this.model, this.sequences[slot]!, plan, choiceIndex, sink, signal, this.tokenBytes).run();
  }

  decodeThreads(): DecodeThreadsStatus | undefined {
    return this.tuner?.status();
  }

  async dispose(): Promise<void> {
    // No decode may be in flight on the native context when it is freed.
    await this.steps?.close();
    await this.context?.dispose();
    await this.model?.dispose();
    await this.llama?.dispose();
  }

  /** A wrapper's call syntax and thought segment, found once per wrapper. */
  private traitsOf(wrapper: ChatWrapper): { callSyntax: CallSyntax; thought: ThoughtSegment | undefined } {
    let traits = this.wrapperTraits.get(wrapper);
    if (!traits) this.wrapperTraits.set(wrapper, (traits = { callSyntax: callSyntaxOf(wrapper), thought: thoughtSegment(wrapper, this.model) }));
    return traits;
  }

  private toolPlan(request: GenerateRequest, syntax: CallSyntax): ToolPlan | undefined {
    const choice = request.toolChoice?.mode ?? ToolChoice_Mode.MODE_AUTO;
    if (request.tools.length === 0 || choice === ToolChoice_Mode.MODE_NONE) return undefined;
    const argumentGrammars = new Map<string, import("node-llama-cpp").LlamaGrammar>();
    request.tools.forEach((tool, i) => {
      try {
        argumentGrammars.set(tool.name, this.grammars.forJsonSchema(tool.parametersJson || NO_PARAMETERS));
      } catch (err) {
        const why = err instanceof UnsupportedSchemaError || err instanceof SyntaxError ? err.message : "it cannot be compiled to a grammar";
        throw new EngineRequestError(ErrorCode.ERROR_CODE_INVALID_REQUEST, `Invalid schema for function '${tool.name}': ${why}`, `tools[${i}].function.parameters`);
      }
    });
    let mode: ToolPlan["mode"] = "auto";
    let functionName: string | undefined;
    if (choice === ToolChoice_Mode.MODE_REQUIRED) mode = "required";
    if (choice === ToolChoice_Mode.MODE_FUNCTION) {
      // The contract: a forced function is one of the request's tools (the gateway's translation checks tool_choice).
      functionName = request.toolChoice!.functionName;
      if (!argumentGrammars.has(functionName)) throw new Error(`GenerateRequest breaks its contract: tool_choice forces '${functionName}', which is not among its tools`);
      mode = "function";
    }
    return {
      mode,
      functionName,
      argumentGrammars,
      nameGrammar: this.grammars.forOneOf(request.tools.map((t) => t.name)),
      syntax,
      parallel: request.parallelToolCalls,
      maxCalls: request.maxToolCalls > 0 ? Math.min(request.maxToolCalls, MAX_CALLS_PER_CHOICE) : MAX_CALLS_PER_CHOICE,
    };
  }

  private responseGrammar(request: GenerateRequest) {
    const format = request.responseFormat;
    if (!format || format.type === ResponseFormat_Type.TYPE_TEXT) return undefined;
    if (format.type === ResponseFormat_Type.TYPE_JSON_OBJECT) return this.grammars.forAnyJsonObject();
    try {
      return this.grammars.forJsonSchema(format.schemaJson);
    } catch (err) {
      const why = err instanceof UnsupportedSchemaError || err instanceof SyntaxError ? err.message : "it cannot be compiled to a grammar";
      throw new EngineRequestError(ErrorCode.ERROR_CODE_INVALID_REQUEST, `Invalid schema for response_format '${format.name}': ${why}`, "response_format");
    }
  }

  private logprobsPlan(request: GenerateRequest): DecodePlan["logprobs"] {
    const sampling = request.sampling;
    if (!sampling?.logprobs) return undefined;
    const top = sampling.topLogprobs ?? 0;
    if (top > MAX_TOP_LOGPROBS) throw new EngineRequestError(ErrorCode.ERROR_CODE_INVALID_REQUEST, `top_logprobs must be at most ${MAX_TOP_LOGPROBS}, got ${top}`, "top_logprobs");
    return { top };
  }

  private tokenBias(request: GenerateRequest): TokenBias | undefined {
    const entries = request.sampling?.logitBias ?? [];
    if (entries.length === 0) return undefined;
    const vocabulary = this.vocabularySize;
    const bias = new TokenBias(this.model.tokenizer);
    for (const { token, bias: value } of entries) {
      if (token < 0 || token >= vocabulary)
        throw new EngineRequestError(ErrorCode.ERROR_CODE_INVALID_REQUEST, `logit_bias names token ${token}, outside this model's vocabulary of ${vocabulary}`, "logit_bias");
      bias.set(token as Token, value <= -100 ? "never" : { logit: value });
    }
    return bias;
  }

  /** Template stop triggers: plain text goes to the text matcher, special tokens to a token set. */
  private collectTemplateStops(triggers: readonly LlamaText[], texts: string[], tokens: Set<Token>): void {
    for (const trigger of triggers) {
      const plain = trigger.values.every((v) => typeof v === "string");
      if (plain) {
        const text = trigger.toString();
        if (text.trim()) texts.push(text);
        continue;
      }
      const ids = trigger.tokenize(this.model.tokenizer);
      if (ids.length === 1) tokens.add(ids[0]!);
    }
  }
}

/** TRIBUTARY_FLASH_ATTENTION: "auto" is on when decoding on the CPU, node-llama-cpp's default on a GPU. */
export type FlashAttentionSetting = "auto" | "on" | "off";

/** The context's flash attention for a setting (nothing: the library's default). */
export function flashAttentionOption(setting: FlashAttentionSetting, gpu: boolean): { flashAttention?: boolean } {
  if (setting === "auto") return gpu ? {} : { flashAttention: true };
  return { flashAttention: setting === "on" };
}
