import { errors, shown } from "../../errors/mod.js";
import { nextAfter, type Page, type PageQuery } from "../../../lib/page.js";

// The cursor pagination of OpenAI's list endpoints: the query they read and the envelope they answer.

/**
 * Reads the cursor-pagination query of OpenAI list endpoints (limit, order, after): `limit` an
 * integer from 1 to `maxLimit` (digits only: Number() would also take "0x10", "1e1", "+5" and
 * " 5"), `order` asc or desc (default desc; refused as unknown where a list has one order), an
 * empty `after` as none.
 */
export function listQuery(params: URLSearchParams, options: { defaultLimit: number; maxLimit: number; orders: boolean }): PageQuery {
  const rawLimit = params.get("limit");
  let limit = options.defaultLimit;
  if (rawLimit !== null) {
    limit = /^\d{1,10}$/.test(rawLimit) ? Number(rawLimit) : NaN;
    if (!(limit >= 1 && limit <= options.maxLimit))
      throw errors.invalidParam("limit", `Invalid value for 'limit': expected an integer between 1 and ${options.maxLimit}, got '${shown(rawLimit)}'.`);
  }
  const rawOrder = params.get("order");
  if (rawOrder !== null && (!options.orders || (rawOrder !== "asc" && rawOrder !== "desc")))
    throw options.orders ? errors.invalidParam("order", `Invalid value for 'order': expected 'asc' or 'desc', got '${shown(rawOrder)}'.`) : errors.unknownParam("order");
  const after = params.get("after");
  return { limit, order: (rawOrder as "asc" | "desc" | null) ?? "desc", after: after || undefined };
}

/** OpenAI's list envelope, every key present (`first_id`, `last_id` null on an empty page). */
export interface ListObject<T> {
  object: "list";
  data: T[];
  first_id: string | null;
  last_id: string | null;
  has_more: boolean;
}

/**
 * A page as OpenAI's list envelope: every list route answers through here. `last_id` is the
 * `after` of the next page (nextAfter): a page that stopped at its read bound (pageRecords'
 * `cursor`) names where it stopped, even when that is no item of this page. `idOf` names an
 * item where its id is not `id` (a secret's name).
 */
export function listObject<T extends { id: string }>(page: Page<T>): ListObject<T>;
export function listObject<T>(page: Page<T>, idOf: (item: T) => string): ListObject<T>;
export function listObject<T>(page: Page<T>, idOf: (item: T) => string = (item) => (item as { id: string }).id): ListObject<T> {
  const first = page.data[0];
  return { object: "list", data: page.data, first_id: first === undefined ? null : idOf(first), last_id: nextAfter(page, idOf) ?? null, has_more: page.has_more };
}
