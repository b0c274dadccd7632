import { errors, shown } from "../../errors/mod.js";

export interface ListQuery {
  limit: number;
  order: "asc" | "desc";
  after: string | undefined;
}

/** Reads the cursor-pagination query of OpenAI list endpoints (limit, order, after). */
export function listQuery(params: URLSearchParams, options: { defaultLimit: number; maxLimit: number; orders: boolean }): ListQuery {
  const rawLimit = params.get("limit");
  let limit = options.defaultLimit;
  if (rawLimit !== null) {
    limit = /^\d+$/.test(rawLimit) ? Number(rawLimit) : NaN;
    if (!(limit >= 1 && limit <= options.maxLimit))
      throw errors.invalidParam("limit", `Invalid value for 'limit': expected an integer between 1 and ${options.maxLimit}, got '${shown(rawLimit)}'.`);
  }
  const rawOrder = params.get("order");
  if (rawOrder !== null && (!options.orders || (rawOrder !== "asc" && rawOrder !== "desc")))
    throw options.orders ? errors.invalidParam("order", `Invalid value for 'order': expected 'asc' or 'desc', got '${shown(rawOrder)}'.`) : errors.unknownParam("order");
  const after = params.get("after");
  return { limit, order: (rawOrder as "asc" | "desc" | null) ?? "desc", after: after || undefined };
}
