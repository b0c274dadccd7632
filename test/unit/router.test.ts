import t from "tap";
import { type DomainError } from "../../modules/errors/mod.js";
import { openAIError } from "../../modules/openai/mod.js";
import { Router } from "../../gateway/http/router.js";

const noop = () => {};
const router = new Router()
  .get("/v1/models", noop)
  .get("/v1/models/*id", noop)
  .post("/v1/chat/completions", noop)
  .get("/v1/files/:id/content", noop)
  .delete("/v1/files/:id", noop)
  .get("/healthz", noop, { public: true });

t.test("static, parameter and rest routes", async (t) => {
  t.same(router.match("GET", "/v1/models").params, {});
  t.same(router.match("GET", "/v1/models/test%2Fstories-260k").params, { id: "test/stories-260k" });
  t.same(router.match("GET", "/v1/models/test/stories-260k").params, { id: "test/stories-260k" });
  t.same(router.match("GET", "/v1/files/file-1/content").params, { id: "file-1" });
  t.equal(router.match("GET", "/healthz").public, true);
  t.equal(router.match("HEAD", "/v1/models").public, false, "HEAD is served by GET");
});

t.test("unknown path is 404, known path with another method is 405 with Allow", async (t) => {
  const refusal = (method: string, path: string) => {
    try {
      router.match(method, path);
    } catch (e) {
      return openAIError(e as DomainError, "req_test");
    }
    throw new Error(`${method} ${path} matched`);
  };
  const e404 = refusal("GET", "/v1/unknown");
  t.equal(e404.status, 404);
  t.equal(e404.body.error.code, "unknown_url");
  const e405 = refusal("PUT", "/v1/files/x");
  t.equal(e405.status, 405);
  t.equal(e405.headers.allow, "DELETE");
});

t.test("a reserved first segment takes no route, before or after it is reserved", async (t) => {
  const r = new Router().get("/v1/models", noop);
  r.reserve("apps");
  t.throws(() => r.get("/apps/:org/:project", noop), /\/apps\/ is reserved/);
  t.throws(() => r.post("/apps", noop), /\/apps\/ is reserved/);
  r.get("/v1/apps/deployments", noop).get("/applications", noop);
  t.throws(() => new Router().get("/apps/x", noop).reserve("apps"), /route GET \/apps\/x: \/apps\/ is reserved/);
});
