import { errors, shown } from "../../errors/mod.js";
import type { PageQuery } from "../../../lib/page.js";

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
