import type { HttpExchange } from "../http/exchange.js";
import { listQuery as parseListQuery } from "../../modules/openai/mod.js";
import type { PageQuery } from "../../lib/page.js";

/** limit (1-100, default 20), order (asc|desc, default desc) and after, as OpenAI's item lists. */
export function listQuery(ex: HttpExchange): PageQuery {
  const params = ex.searchParams();
  // An empty `after` names no item here: the list refuses it as any unknown id (400 naming it).
  return { ...parseListQuery(params, { defaultLimit: 20, maxLimit: 100, orders: true }), after: params.get("after") ?? undefined };
}
