import t from "tap";
import { ConnectionLimiter } from "../../gateway/http/connection-limiter.js";

t.test("requests in progress are capped per address, then in total", async (t) => {
  const limiter = new ConnectionLimiter(3, 2);
  t.equal(limiter.acquire("10.0.0.1"), undefined);
  t.equal(limiter.acquire("10.0.0.1"), undefined);
  t.equal(limiter.acquire("10.0.0.1")?._tag, "TooManyConnections", "a third from the same address is refused");
  t.equal(limiter.inProgress, 2, "a refused request is not counted");
  t.equal(limiter.acquire("10.0.0.2"), undefined);
  const refused = limiter.acquire("10.0.0.3");
  t.same(refused && { tag: refused._tag, scope: (refused as { scope: string }).scope }, { tag: "TooManyConnections", scope: "server" });
  limiter.release("10.0.0.1");
  t.equal(limiter.acquire("10.0.0.3"), undefined, "a released slot is free again");
});

t.test("0 disables a cap; releasing an unknown address changes nothing", async (t) => {
  const limiter = new ConnectionLimiter(0, 0);
  const refusals = Array.from({ length: 1000 }, () => limiter.acquire("10.0.0.1")).filter((r) => r !== undefined);
  t.equal(refusals.length, 0);
  limiter.release("10.9.9.9");
  t.equal(limiter.inProgress, 1000);
});
