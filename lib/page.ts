// Pages of lists: the one page type every store that pages returns, and the ways a page is cut
// from a list held whole. Paging from KV is `pageRecords` (lib/nats/kv-records.ts); OpenAI's list
// envelope around a page is `listObject` (modules/openai).

/** A page of a list as OpenAI's list routes ask for it: limit, order and the after cursor. */
export interface PageQuery {
  limit: number;
  order: "asc" | "desc";
  after?: string | undefined;
}

/**
 * One page of a list: its items and whether more follow. `cursor`, when set, is where a page that
 * stopped at its read bound ended (pageRecords): the `after` of the next page, even when it is no
 * item of this one.
 */
export interface Page<T> {
  data: T[];
  has_more: boolean;
  cursor?: string;
}

/** An item's id: the default of the overloads that take only items with one. */
const byId = <T>(item: T) => (item as { id: string }).id;

/** The `after` that asks for the page following this one (undefined: an empty page that stopped nowhere). */
export function nextAfter<T extends { id: string }>(page: Page<T>): string | undefined;
export function nextAfter<T>(page: Page<T>, idOf: (item: T) => string): string | undefined;
export function nextAfter<T>(page: Page<T>, idOf: (item: T) => string = byId): string | undefined {
  return page.cursor ?? (page.data.length > 0 ? idOf(page.data.at(-1)!) : undefined);
}

/** The first `limit` of `items`, read one past the limit when they could: that one says more follow. */
export function firstPage<T>(items: readonly T[], limit: number): Page<T> {
  return { data: items.slice(0, limit), has_more: items.length > limit };
}

/**
 * One page of a list held whole, `all` in its own order (oldest first; desc reverses it), where
 * `after` must name an item of the list: undefined when it names none (the caller's 400).
 */
export function pageOf<T extends { id: string }>(all: readonly T[], query: PageQuery): Page<T> | undefined;
export function pageOf<T>(all: readonly T[], query: PageQuery, idOf: (item: T) => string): Page<T> | undefined;
export function pageOf<T>(all: readonly T[], query: PageQuery, idOf: (item: T) => string = byId): Page<T> | undefined {
  const ordered = query.order === "desc" ? [...all].reverse() : all;
  let start = 0;
  if (query.after !== undefined) {
    const at = ordered.findIndex((item) => idOf(item) === query.after);
    if (at < 0) return undefined;
    start = at + 1;
  }
  return firstPage(ordered.slice(start, start + query.limit + 1), query.limit);
}

/**
 * One page of a list held whole whose ids sort in its order (sortable ids: creation order),
 * `sorted` ascending: `after` is a place in that order and need not be an item (one gone since),
 * as pageRecords answers from KV.
 */
export function pageOfSorted<T extends { id: string }>(sorted: readonly T[], query: PageQuery): Page<T> {
  const after = query.after;
  const ordered = query.order === "desc" ? [...sorted].reverse() : sorted;
  const rest = after === undefined ? ordered : ordered.filter((item) => (query.order === "desc" ? item.id < after : item.id > after));
  return firstPage(rest, query.limit);
}

/** The page with each item mapped; where it ended stays. */
export function mapPage<T, U>(page: Page<T>, f: (item: T) => U): Page<U> {
  return { ...page, data: page.data.map(f) };
}
