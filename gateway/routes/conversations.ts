import { newId } from "../../lib/ids.js";
import { listObject, parseConversationCreate, parseConversationItems, parseConversationUpdate, normalizeInputItems } from "../../modules/openai/mod.js";
import { errors, shown } from "../../modules/errors/mod.js";
import type { HttpExchange } from "../http/exchange.js";
import type { Router } from "../http/router.js";
import type { ConversationStore } from "../../modules/responses/mod.js";
import type { Item } from "../../modules/openai/mod.js";
import { listQuery } from "./list-query.js";

export interface ConversationRouteDeps {
  conversations: ConversationStore;
  maxBodyBytes: number;
}

const notFound = (id: string) => errors.notFound(`Conversation with id '${shown(id)}' not found.`);

/** /v1/conversations: create, retrieve, update metadata, delete, and its items. */
export function registerConversationRoutes(router: Router, deps: ConversationRouteDeps): void {
  const store = deps.conversations;

  router.post("/v1/conversations", async (ex) => {
    // The body is optional: the SDK's create() may send none.
    const raw = await ex.readBody(deps.maxBodyBytes);
    const body = parseConversationCreate(raw.length === 0 ? {} : parseJson(raw));
    const items = normalize(body.items, []);
    const conversation = { id: newId("conv_"), object: "conversation" as const, created_at: Math.floor(Date.now() / 1000), metadata: body.metadata };
    await store.create(projectOf(ex), conversation, items);
    ex.json(200, conversation);
  });

  router.get("/v1/conversations/:id", async (ex, { id }) => {
    const conversation = await store.get(projectOf(ex), id!);
    if (!conversation) throw notFound(id!);
    ex.json(200, conversation);
  });

  router.post("/v1/conversations/:id", async (ex, { id }) => {
    const body = parseConversationUpdate(await ex.readJson(deps.maxBodyBytes));
    const conversation = await store.updateMetadata(projectOf(ex), id!, body.metadata);
    if (!conversation) throw notFound(id!);
    ex.json(200, conversation);
  });

  router.delete("/v1/conversations/:id", async (ex, { id }) => {
    if (!(await store.delete(projectOf(ex), id!))) throw notFound(id!);
    ex.json(200, { id, object: "conversation.deleted", deleted: true });
  });

  router.get("/v1/conversations/:id/items", async (ex, { id }) => {
    const query = listQuery(ex);
    const projectId = projectOf(ex);
    if (!(await store.get(projectId, id!))) throw notFound(id!);
    const page = await store.page(projectId, id!, query);
    if (!page) throw errors.invalidParam("after", `No item with id '${shown(query.after ?? "")}' in conversation '${shown(id!)}'.`);
    ex.json(200, listObject(page));
  });

  router.post("/v1/conversations/:id/items", async (ex, { id }) => {
    const input = parseConversationItems(await ex.readJson(deps.maxBodyBytes));
    const projectId = projectOf(ex);
    if (!(await store.get(projectId, id!))) throw notFound(id!);
    const existing = await store.items(projectId, id!);
    const appended = await store.append(projectId, id!, normalize(input, existing));
    if (!appended) throw notFound(id!);
    ex.json(200, listObject({ data: appended, has_more: false }));
  });

  router.get("/v1/conversations/:id/items/:item", async (ex, { id, item }) => {
    const projectId = projectOf(ex);
    if (!(await store.get(projectId, id!))) throw notFound(id!);
    const found = await store.item(projectId, id!, item!);
    if (!found) throw errors.notFound(`Item with id '${shown(item!)}' not found in conversation '${shown(id!)}'.`);
    ex.json(200, found);
  });

  router.delete("/v1/conversations/:id/items/:item", async (ex, { id, item }) => {
    const projectId = projectOf(ex);
    const conversation = await store.get(projectId, id!);
    if (!conversation) throw notFound(id!);
    if (!(await store.deleteItem(projectId, id!, item!))) throw errors.notFound(`Item with id '${shown(item!)}' not found in conversation '${shown(id!)}'.`);
    ex.json(200, conversation);
  });
}

/** Items as stored; references may point at items already in the conversation. */
function normalize(items: Parameters<typeof normalizeInputItems>[0], existing: readonly Item[]): Item[] {
  const known = new Map(existing.map((i) => [i.id, i]));
  return normalizeInputItems(items, (id) => known.get(id), "items");
}

function parseJson(raw: Buffer): unknown {
  try {
    return JSON.parse(raw.toString("utf8"));
  } catch (err) {
    throw errors.invalidJson((err as Error).message);
  }
}

function projectOf(ex: HttpExchange): string {
  return ex.principal!.projectId;
}
