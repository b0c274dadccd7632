import t from "tap";
import { firstPage, mapPage, nextAfter, pageOf, pageOfSorted, type Page, type PageQuery } from "../../lib/page.js";
import { listObject } from "../../modules/openai/mod.js";

// Pages of lists held whole (lib/page.ts) and OpenAI's envelope around any page (listObject):
// the cursor `after`, the limit, and has_more at its boundary. Paging from KV (pageRecords) is
// checked on a real nats-server (test/e2e/nats/page-records.test.ts), against the same answers
// pageOfSorted gives.

const items = ["a", "b", "c", "d", "e"].map((id) => ({ id }));
const ids = (page: Page<{ id: string }> | undefined) => page && { ids: page.data.map((x) => x.id), has_more: page.has_more };
const query = (limit: number, order: "asc" | "desc", after?: string): PageQuery => ({ limit, order, after });

t.test("firstPage: items read one past the limit say more follow; exactly the limit says none", async (t) => {
  t.same(firstPage([1, 2, 3], 2), { data: [1, 2], has_more: true });
  t.same(firstPage([1, 2], 2), { data: [1, 2], has_more: false });
  t.same(firstPage([1], 2), { data: [1], has_more: false });
  t.same(firstPage([], 2), { data: [], has_more: false });
});

t.test("pageOf: the list in its own order or reversed, from after the item named", async (t) => {
  t.same(ids(pageOf(items, query(2, "asc"))), { ids: ["a", "b"], has_more: true });
  t.same(ids(pageOf(items, query(2, "desc"))), { ids: ["e", "d"], has_more: true });
  t.same(ids(pageOf(items, query(2, "asc", "b"))), { ids: ["c", "d"], has_more: true });
  t.same(ids(pageOf(items, query(2, "desc", "b"))), { ids: ["a"], has_more: false });
  t.same(ids(pageOf(items, query(5, "asc"))), { ids: ["a", "b", "c", "d", "e"], has_more: false }, "the whole list in one page of its length: nothing more");
  t.same(ids(pageOf(items, query(4, "asc"))), { ids: ["a", "b", "c", "d"], has_more: true }, "one short of it: one more");
  t.same(ids(pageOf(items, query(2, "asc", "c"))), { ids: ["d", "e"], has_more: false }, "a page that ends at the list's end");
  t.same(ids(pageOf(items, query(2, "asc", "e"))), { ids: [], has_more: false }, "after the last item: an empty page");
  t.same(ids(pageOf([], query(2, "desc"))), { ids: [], has_more: false });
});

t.test("pageOf: an after that names no item of the list is undefined (the caller's 400)", async (t) => {
  t.equal(pageOf(items, query(2, "asc", "x")), undefined);
  t.equal(pageOf(items, query(2, "asc", "")), undefined, "an empty after names no item");
  t.equal(pageOf([], query(2, "asc", "a")), undefined);
});

t.test("pageOf: items named by another field (a conversation item's position names it by item id)", async (t) => {
  const positions = [{ key: "k1", itemId: "msg_1" }, { key: "k2", itemId: "msg_2" }, { key: "k3", itemId: "msg_3" }];
  const page = pageOf(positions, query(1, "asc", "msg_1"), (p) => p.itemId);
  t.same(page, { data: [{ key: "k2", itemId: "msg_2" }], has_more: true });
});

t.test("walking pageOf's pages with nextAfter visits every item once, in both orders", async (t) => {
  for (const order of ["asc", "desc"] as const)
    for (const limit of [1, 2, 3, 5, 6]) {
      const seen: string[] = [];
      let after: string | undefined;
      for (;;) {
        const page = pageOf(items, query(limit, order, after))!;
        seen.push(...page.data.map((x) => x.id));
        if (!page.has_more) break;
        after = nextAfter(page);
      }
      const all = items.map((x) => x.id);
      t.same(seen, order === "asc" ? all : all.reverse(), `${order}, limit ${limit}`);
    }
});

t.test("pageOfSorted: after is a place in id order and need not be an item", async (t) => {
  t.same(ids(pageOfSorted(items, query(2, "asc", "bb"))), { ids: ["c", "d"], has_more: true });
  t.same(ids(pageOfSorted(items, query(2, "desc", "bb"))), { ids: ["b", "a"], has_more: false });
  t.same(ids(pageOfSorted(items, query(2, "desc", "c"))), { ids: ["b", "a"], has_more: false });
  t.same(ids(pageOfSorted(items, query(3, "asc", "b"))), { ids: ["c", "d", "e"], has_more: false }, "exactly the limit left: nothing more");
  t.same(ids(pageOfSorted(items, query(2, "asc", "z"))), { ids: [], has_more: false });
  t.same(ids(pageOfSorted(items, query(2, "desc"))), { ids: ["e", "d"], has_more: true });
});

t.test("nextAfter: the last item's id, or where a page that stopped at its read bound stopped", async (t) => {
  t.equal(nextAfter({ data: [{ id: "a" }, { id: "b" }], has_more: true }), "b");
  t.equal(nextAfter({ data: [{ id: "a" }], has_more: true, cursor: "f" }), "f", "the cursor, even past the last item");
  t.equal(nextAfter({ data: [], has_more: true, cursor: "f" }), "f", "an empty page that stopped at its bound still goes on");
  t.equal(nextAfter({ data: [], has_more: false }), undefined);
  t.equal(nextAfter({ data: [{ name: "A" }, { name: "B" }], has_more: false }, (x) => x.name), "B");
});

t.test("mapPage keeps where the page ended", async (t) => {
  t.same(mapPage({ data: [{ id: "a" }], has_more: true, cursor: "c" }, (x) => x.id), { data: ["a"], has_more: true, cursor: "c" });
  t.same(mapPage({ data: [{ id: "a" }], has_more: false }, (x) => x.id), { data: ["a"], has_more: false });
});

t.test("listObject: OpenAI's envelope, every key present", async (t) => {
  t.same(listObject({ data: [{ id: "a" }, { id: "b" }], has_more: true }), { object: "list", data: [{ id: "a" }, { id: "b" }], first_id: "a", last_id: "b", has_more: true });
  t.same(listObject({ data: [{ id: "a" }], has_more: false }), { object: "list", data: [{ id: "a" }], first_id: "a", last_id: "a", has_more: false });
  t.same(listObject({ data: [], has_more: false }), { object: "list", data: [], first_id: null, last_id: null, has_more: false }, "an empty page: null ids");
  t.same(Object.keys(listObject({ data: [], has_more: false })).sort(), ["data", "first_id", "has_more", "last_id", "object"]);
});

t.test("listObject: last_id is where a page that stopped at its read bound stopped (the next page's after)", async (t) => {
  t.same(listObject({ data: [{ id: "a" }], has_more: true, cursor: "f" }), { object: "list", data: [{ id: "a" }], first_id: "a", last_id: "f", has_more: true });
  t.same(listObject({ data: [], has_more: true, cursor: "f" }), { object: "list", data: [], first_id: null, last_id: "f", has_more: true });
  t.notOk("cursor" in listObject({ data: [], has_more: true, cursor: "f" }), "the cursor is not a key of the envelope");
});

t.test("listObject: items named by another field (secrets by name)", async (t) => {
  const secrets = [{ name: "A", object: "secret" }, { name: "B", object: "secret" }];
  t.same(listObject({ data: secrets, has_more: false }, (s) => s.name), { object: "list", data: secrets, first_id: "A", last_id: "B", has_more: false });
});
