import * as Effect from "effect/Effect";
import * as Schema from "effect/Schema";
import { valueSchema } from "../../../lib/nats/kv-records.js";
import type { ResultLine } from "../batch-lines.js";
import type { TokenUsage } from "../token-usage.js";
import type { Item, OutputItem, ResponseObject } from "../translate/responses-object.js";
import { InputFile, InputImage, InputText, Refusal } from "./responses.js";

// Schemas of the objects this platform writes (responses, items, batch result lines), for reading
// them back from JetStream. They describe what the code writes, every key included (keys a
// schema leaves out are dropped on read); each is checked against its type where it is declared.

const Int = Schema.Number;
const Str = Schema.String;
const NullOr = Schema.NullOr;
const MutableArray = <S extends Schema.Top>(s: S) => Schema.mutable(Schema.Array(s));

export const TokenUsageSchema = Schema.Struct({
  input_tokens: Int,
  input_tokens_details: Schema.Struct({ cached_tokens: Int }),
  output_tokens: Int,
  output_tokens_details: Schema.Struct({ reasoning_tokens: Int }),
  total_tokens: Int,
});

/** A Response's usage; `cache_write_tokens` reads as 0 in responses stored before it was written. */
const ResponseUsageSchema = Schema.Struct({
  input_tokens: Int,
  input_tokens_details: Schema.Struct({ cached_tokens: Int, cache_write_tokens: Int.pipe(Schema.withDecodingDefaultKey(Effect.succeed(0))) }),
  output_tokens: Int,
  output_tokens_details: Schema.Struct({ reasoning_tokens: Int }),
  total_tokens: Int,
});

const ItemStatus = Schema.Literals(["in_progress", "completed", "incomplete"]);
const OutputTextPart = Schema.Struct({
  type: Schema.Literal("output_text"),
  text: Str,
  annotations: MutableArray(Schema.Unknown),
  logprobs: MutableArray(Schema.Unknown),
});

const MessageItem = Schema.Struct({
  type: Schema.Literal("message"),
  id: Str,
  role: Schema.Literals(["user", "assistant", "system", "developer"]),
  status: ItemStatus,
  content: MutableArray(Schema.Union([OutputTextPart, InputText, InputImage, InputFile, Refusal])),
});

const FunctionCallItem = Schema.Struct({
  type: Schema.Literal("function_call"),
  id: Str,
  call_id: Str,
  name: Str,
  arguments: Str,
  status: ItemStatus,
});

const FunctionCallOutputItem = Schema.Struct({
  type: Schema.Literal("function_call_output"),
  id: Str,
  call_id: Str,
  output: Schema.Union([Str, MutableArray(Schema.Union([InputText, InputImage, InputFile]))]),
  status: ItemStatus,
});

const ReasoningItem = Schema.Struct({
  type: Schema.Literal("reasoning"),
  id: Str,
  summary: MutableArray(Schema.Unknown),
  content: Schema.optionalKey(Schema.Unknown),
  encrypted_content: Schema.optionalKey(Schema.Unknown),
  status: Schema.optionalKey(Schema.Unknown),
});

/** An item as stored: input items, output items, conversation items. */
export const ItemSchema = Schema.Union([MessageItem, FunctionCallItem, FunctionCallOutputItem, ReasoningItem]);
const OutputItemSchema = Schema.Union([MessageItem, FunctionCallItem, ReasoningItem]);

export const ResponseObjectSchema = Schema.Struct({
  id: Str,
  object: Schema.Literal("response"),
  created_at: Int,
  completed_at: NullOr(Int),
  status: Schema.Literals(["queued", "in_progress", "completed", "incomplete", "failed", "cancelled"]),
  background: Schema.Boolean,
  conversation: NullOr(Schema.Struct({ id: Str })),
  error: NullOr(Schema.Struct({ code: Str, message: Str })),
  incomplete_details: NullOr(Schema.Struct({ reason: Schema.Literals(["max_output_tokens", "content_filter"]) })),
  instructions: NullOr(Str),
  max_output_tokens: NullOr(Int),
  max_tool_calls: NullOr(Int),
  model: Str,
  output: MutableArray(OutputItemSchema),
  parallel_tool_calls: Schema.Boolean,
  previous_response_id: NullOr(Str),
  prompt_cache_key: NullOr(Str),
  prompt_cache_retention: NullOr(Str),
  reasoning: Schema.Struct({ effort: NullOr(Str), summary: NullOr(Str) }),
  safety_identifier: NullOr(Str),
  service_tier: Str,
  store: Schema.Boolean,
  temperature: Schema.Number,
  text: Schema.Struct({ format: Schema.Unknown, verbosity: Str }),
  tool_choice: Schema.Unknown,
  tools: MutableArray(Schema.Unknown),
  top_logprobs: Int,
  top_p: Schema.Number,
  presence_penalty: Schema.Number,
  frequency_penalty: Schema.Number,
  truncation: Schema.Literals(["auto", "disabled"]),
  usage: NullOr(ResponseUsageSchema),
  user: NullOr(Str),
  metadata: Schema.Record(Str, Str),
});

export const ResultLineSchema = Schema.Struct({
  id: Str,
  custom_id: Str,
  response: NullOr(Schema.Struct({ status_code: Int, request_id: Str, body: Schema.Unknown })),
  error: NullOr(Schema.Struct({ code: Str, message: Str })),
});

/** Checked readers of the objects above (and compile-time proof that each schema decodes its type). */
export const storedValues = {
  usage: valueSchema<TokenUsage>()(TokenUsageSchema),
  item: valueSchema<Item>()(ItemSchema),
  items: valueSchema<Item[]>()(MutableArray(ItemSchema)),
  outputItem: valueSchema<OutputItem>()(OutputItemSchema),
  response: valueSchema<ResponseObject>()(ResponseObjectSchema),
  resultLine: valueSchema<ResultLine>()(ResultLineSchema),
};
