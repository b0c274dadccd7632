import t from "tap";
import { parseUsageQuery } from "../../modules/usage/mod.js";

// GET /v1/organization/usage/completions: every parameter's bounds at its edge.

const param = (s: string) => {
  try {
    parseUsageQuery(new URLSearchParams(s));
    return "accepted";
  } catch (err) {
    return (err as { param: string }).param;
  }
};
const q = (s: string) => parseUsageQuery(new URLSearchParams(s));

t.test("defaults follow OpenAI", async (t) => {
  t.match(q("start_time=0"), { width: "1d", limit: 7, groupBy: [], batch: undefined });
  t.equal(q("start_time=0&bucket_width=1h").limit, 24);
  t.equal(q("start_time=0&bucket_width=1m").limit, 60);
});

t.test("limits per width, at the edge", async (t) => {
  for (const [w, max] of [["1d", 31], ["1h", 168], ["1m", 1440]] as const) {
    t.equal(param(`start_time=0&bucket_width=${w}&limit=${max}`), "accepted");
    t.equal(param(`start_time=0&bucket_width=${w}&limit=${max + 1}`), "limit");
  }
  t.equal(param("start_time=0&limit=0"), "limit");
});

t.test("times, lists, group_by, batch and page", async (t) => {
  t.equal(param(""), "start_time");
  t.equal(param("start_time=4294967296"), "start_time");
  t.equal(param("start_time=10&end_time=10"), "end_time");
  t.equal(param("start_time=0&bucket_width=1w"), "bucket_width");
  const hundred = Array.from({ length: 100 }, (_, i) => `project_ids=p${i}`).join("&");
  t.equal(param(`start_time=0&${hundred}`), "accepted");
  t.equal(param(`start_time=0&${hundred}&project_ids=p100`), "project_ids");
  t.same(q("start_time=0&project_ids[]=a&project_ids=b").projectIds!.sort(), ["a", "b"], "both list spellings");
  t.equal(param("start_time=0&api_key_ids=a b"), "api_key_ids");
  t.equal(param(`start_time=0&models=${"m".repeat(257)}`), "models");
  t.same(q("start_time=0&group_by=model&group_by=batch").groupBy, ["model", "batch"]);
  t.equal(param("start_time=0&group_by=org"), "group_by");
  t.equal(q("start_time=0&batch=false").batch, false);
  t.equal(param("start_time=0&batch=1"), "batch");
  t.equal(q("start_time=60&page=page_120").page, 120);
  t.equal(param("start_time=60&page=page_0"), "page", "before start_time");
  t.equal(param("start_time=60&end_time=120&page=page_120"), "page", "at end_time");
  t.equal(param("start_time=0&page=2"), "page");
  t.equal(param("start_time=0&colour=red"), "colour");
});
