import { JetStreamApiError } from "@nats-io/jetstream";
import t from "tap";
import { asDomainError } from "../../modules/errors/mod.js";
import { openAIError } from "../../modules/openai/mod.js";

// A request that fails because the NATS fabric is failing over (a server died mid-request, a
// stream electing a leader, a node still starting) is a 503 with retry-after, which clients and
// load balancers retry, not a 500.

const named = (name: string) => Object.assign(new Error("x"), { name });

t.test("the NATS client's outage errors become 503 service_unavailable with retry-after", async (t) => {
  for (const err of [named("TimeoutError"), named("JetStreamNotEnabled"), named("NoRespondersError"), named("ConnectionError"), Object.assign(new Error("x"), { api_error: { code: 503 } })]) {
    const mapped = openAIError(asDomainError(err), "req_1");
    t.equal(mapped.status, 503, String((err as Error).name));
    t.equal(mapped.headers?.["retry-after"], "1");
  }
});

t.test("the JetStream client's own 503 (no meta leader while a node rejoins) becomes a 503", async (t) => {
  const err = new JetStreamApiError({ code: 503, err_code: 10008, description: "JetStream system temporarily unavailable" });
  t.equal(openAIError(asDomainError(err), "req_1").status, 503);
  const notFound = new JetStreamApiError({ code: 404, err_code: 10059, description: "stream not found" });
  t.equal(openAIError(asDomainError(notFound), "req_1").status, 500, "a 404 from JetStream is not an outage");
});

t.test("any other error stays a 500", async (t) => {
  t.equal(openAIError(asDomainError(new TypeError("bug")), "req_1").status, 500);
  t.equal(openAIError(asDomainError(Object.assign(new Error("x"), { api_error: { code: 400 } })), "req_1").status, 500);
});
