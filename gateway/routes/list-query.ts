import type { HttpExchange } from "../http/exchange.js";
import { listQuery as parseListQuery } from "../../modules/openai/mod.js";
import type { PageQuery } from "../../lib/page.js";

/** limit (1-100, default 20), order (asc|desc, default desc) and after, as OpenAI's item lists. */
export function listQuery(ex: HttpExchange): PageQuery {
  const params = ex.searchParams();
  // An empty `after` names no item here: the list refuses it as any unknown id (400 naming it).
  return { ...parseListQuery(params, { defaultLimit: 20, maxLimit: 100, orders: true }), after: params.get("after") ?? undefined };
}

/**
 * OpenAI's list envelope; every key present. `cursor`: where a page that stopped at its read
 * bound ended (pageRecords), given as `last_id` (the `after` of the next page) even when it is no
 * item of this page.
 */
export function listObject<T extends { id: string }>(data: T[], hasMore: boolean, cursor?: string) {
  return { object: "list" as const, data, first_id: data[0]?.id ?? null, last_id: cursor ?? data.at(-1)?.id ?? null, has_more: hasMore };
}
