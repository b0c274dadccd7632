import t from "tap";
import { NotFoundError } from "openai";
import { sharedStack } from "../harness/shared-stack.js";
import { TEST_MODEL } from "../harness/processes.js";

const stack = await sharedStack(t);

t.test("GET /v1/models lists the catalog in OpenAI's list shape", async (t) => {
  const page = await stack.client.models.list();
  t.same(page.data.map((m) => m.id), stack.models);
  const m = page.data.find((m) => m.id === TEST_MODEL)!;
  t.equal(m.object, "model");
  t.equal(m.owned_by, "tributary");
  t.type(m.created, "number");
});

t.test("GET /v1/models/{id} accepts the id encoded (SDK) or raw (curl)", async (t) => {
  const m = await stack.client.models.retrieve(TEST_MODEL);
  t.equal(m.id, TEST_MODEL);
  const raw = await stack.fetch(`/v1/models/${TEST_MODEL}`);
  t.equal(raw.status, 200);
  t.equal(((await raw.json()) as { id: string }).id, TEST_MODEL);
  t.match(raw.headers.get("x-request-id"), /^req_/);
});

t.test("an unknown model is a 404 model_not_found", async (t) => {
  const err = await stack.client.models.retrieve("nobody/nothing").catch((e: unknown) => e);
  t.ok(err instanceof NotFoundError);
  t.equal((err as NotFoundError).code, "model_not_found");
});
