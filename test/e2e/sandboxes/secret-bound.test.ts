import t from "tap";
import { SHARED_SECRETS_KEY, sharedStackWithGateway } from "../../harness/shared-stack.js";
import { loadKeyRing, SecretStore } from "../../../modules/secrets/mod.js";

// The per-project secret bound (TRIBUTARY_SECRETS_MAX_PER_PROJECT, here 3) is exact under
// parallel creates: with 2 secrets present, of 5 creates sent at once exactly one is made (in each
// of five rounds) and the others are refused with 400 secret_limit_reached naming `name`. Only new names take a place:
// rotating a secret or creating a name in use (409) does not, and a deleted secret frees its place.
const MAX = 3;
// The bound is the gateway's: a gateway of this file's own on the shared stack.
const stack = await sharedStackWithGateway(t, { TRIBUTARY_SECRETS_MAX_PER_PROJECT: String(MAX) });
const KEYS = { racers: (await stack.project("racers")).key, edge: (await stack.project("edge")).key };
type Answer = { status: number; body: { name?: string; error?: { type: string; code: string; param: string | null; message: string } } };
const call = async (key: string, path: string, body?: unknown, method = "POST"): Promise<Answer> => {
  const res = await stack.fetch(path, { method, headers: { authorization: `Bearer ${key}` }, ...(body === undefined ? {} : { body: JSON.stringify(body) }) });
  return { status: res.status, body: (await res.json()) as Answer["body"] };
};
const create = (key: string, name: string) => call(key, "/v1/secrets", { name, value: `value of ${name}` });
const names = async (key: string) => ((await (await stack.fetch("/v1/secrets", { headers: { authorization: `Bearer ${key}` } })).json()) as { data: Array<{ name: string }> }).data.map((s) => s.name);
const limitReached = { status: 400, body: { error: { type: "invalid_request_error", param: "name", code: "secret_limit_reached", message: new RegExp(`the limit is ${MAX}\\.`) } } };
const nameInUse = { status: 409, body: { error: { param: "name", code: "secret_exists" } } };

t.test("parallel creates at the edge: exactly one gets the last place, round after round", async (t) => {
  for (let i = 1; i < MAX; i++) t.equal((await create(KEYS.racers, `PRESENT_${i}`)).status, 200, `secret ${i}: made`);
  // Five connections open and kept alive first, so the five creates reach the gateway together.
  await Promise.all(Array.from({ length: 5 }, () => names(KEYS.racers)));
  // Rounds: one race may be won by timing alone; and after the first, the winner is deleted (the
  // counter not told), so each later race also starts with a recount at the bound.
  for (let round = 1; round <= 5; round++) {
    const answers = await Promise.all(Array.from({ length: 5 }, (_, i) => create(KEYS.racers, `RACER_${round}_${i}`)));
    const made = answers.filter((a) => a.status === 200);
    t.equal(made.length, 1, `round ${round}: one create made the last secret`);
    const refused = answers.filter((a) => a.status !== 200);
    t.equal(refused.length, 4);
    for (const a of refused) t.match(a, limitReached, "the others: 400 secret_limit_reached naming the param");
    t.equal((await names(KEYS.racers)).length, MAX, "the project holds exactly the bound");
    for (const a of made) t.equal((await call(KEYS.racers, `/v1/secrets/${a.body.name}`, undefined, "DELETE")).status, 200, "the winner deleted");
  }
});

t.test("at the limit passes, one past it fails; rotations and names in use take no place", async (t) => {
  for (let i = 1; i < MAX; i++) t.equal((await create(KEYS.edge, `KEPT_${i}`)).status, 200);
  for (let i = 0; i < 3; i++) t.match(await call(KEYS.edge, "/v1/secrets/KEPT_1", { value: `rotated ${i}` }), { status: 200, body: { name: "KEPT_1" } }, "a rotation");
  t.match(await create(KEYS.edge, "KEPT_2"), nameInUse, "a name in use: 409");
  t.match(await create(KEYS.edge, "LAST"), { status: 200, body: { name: "LAST" } }, `secret ${MAX}: made`);
  t.match(await create(KEYS.edge, "ONE_TOO_MANY"), limitReached, `secret ${MAX + 1}: refused`);
  t.match(await create(KEYS.edge, "LAST"), nameInUse, "a name in use at the limit: still 409");
  t.match(await call(KEYS.edge, "/v1/secrets/LAST", { value: "rotated at the limit" }), { status: 200 }, "a rotation at the limit");
  // Deletes do not tell the counter; the counter is recounted when it says the bound is reached.
  t.equal((await call(KEYS.edge, "/v1/secrets/KEPT_2", undefined, "DELETE")).status, 200);
  t.match(await create(KEYS.edge, "AFTER_DELETE"), { status: 200 }, "a deleted secret's place is free again");
  t.match(await create(KEYS.edge, "KEPT_2"), limitReached, "and the bound holds again");
  t.same((await names(KEYS.edge)).sort(), ["AFTER_DELETE", "KEPT_1", "LAST"]);
});

t.test("creates of one name at once: one is made, the others find it in use, it takes one place", async (t) => {
  const { projectId: project } = await stack.project("same name");
  const connections = await Promise.all(Array.from({ length: 5 }, () => stack.nats.connect()));
  t.teardown(() => Promise.all(connections.map((c) => c.close())));
  // Stores as five gateways hold them, with room for all five creates.
  const stores = await Promise.all(connections.map((c) => SecretStore.open(c, loadKeyRing(SHARED_SECRETS_KEY, "", "/nonexistent"))));
  const results = await Promise.all(stores.map((s) => s.create(project, "SAME", "v", 10)));
  t.equal(results.filter((r) => "created" in r).length, 1, "one made it");
  t.equal(results.filter((r) => "exists" in r).length, 4, "the others: the name is in use");
  t.ok("created" in (await stores[0]!.create(project, "SECOND", "v", 2)), "with a bound of 2, one place was left");
  t.same(await stores[0]!.create(project, "THIRD", "v", 2), { held: 2 }, "and then none");
});
