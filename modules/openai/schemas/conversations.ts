import * as Schema from "effect/Schema";
import { Metadata, Nullable, decodeBody } from "./common.js";
import { decodeInputItems, type InputItem } from "./responses.js";

// /v1/conversations bodies. Items are Responses input items; at most 20 per call, as OpenAI.

const Items = Schema.Array(Schema.Unknown).check(Schema.isMaxLength(20, { message: "at most 20 items can be added at a time" }));

export const ConversationCreateSchema = Schema.Struct({ items: Nullable(Items), metadata: Nullable(Metadata) });
export const ConversationUpdateSchema = Schema.Struct({ metadata: Metadata });
export const ConversationItemsSchema = Schema.Struct({ items: Items.check(Schema.isMinLength(1)) });

export function parseConversationCreate(json: unknown): { items: InputItem[]; metadata: Record<string, string> } {
  const body = decodeBody(ConversationCreateSchema, json);
  return { items: decodeInputItems(body.items ?? [], "items"), metadata: { ...(body.metadata ?? {}) } };
}

export function parseConversationUpdate(json: unknown): { metadata: Record<string, string> } {
  return { metadata: { ...decodeBody(ConversationUpdateSchema, json).metadata } };
}

export function parseConversationItems(json: unknown): InputItem[] {
  return decodeInputItems(decodeBody(ConversationItemsSchema, json).items, "items");
}
