import t from "tap";
import type { ChatMessage } from "../../proto/gen/tributary/v1/inference.js";
import { dropOldestTurns } from "../../runners/engines/context-fit.js";

const msg = (role: string, content: string, extra: Partial<ChatMessage> = {}): ChatMessage => ({ role, content, name: "", toolCalls: [], toolCallId: "", ...extra });
const size = (ms: ChatMessage[]) => ms.reduce((n, m) => n + m.content.length, 0);

const history = [
  msg("system", "SS"),
  msg("user", "u1u1"),
  msg("assistant", "a1a1", { toolCalls: [{ id: "c1", name: "f", arguments: "{}" }] }),
  msg("tool", "r1", { toolCallId: "c1" }),
  msg("assistant", "a1b"),
  msg("user", "u2u2"),
  msg("assistant", "a2a2"),
  msg("developer", "DD"),
  msg("user", "u3u3"),
];

t.test("drops whole turns from the front, keeping system and developer messages", async (t) => {
  const total = size(history);
  const one = dropOldestTurns(history, (ms) => size(ms) < total)!;
  t.same(one.messages.map((m) => m.content), ["SS", "u2u2", "a2a2", "DD", "u3u3"], "the first turn goes with its call and result");
  t.equal(one.dropped, 4);
  const two = dropOldestTurns(history, (ms) => size(ms) <= 8)!;
  t.same(two.messages.map((m) => m.content), ["SS", "DD", "u3u3"]);
  t.equal(dropOldestTurns(history, (ms) => size(ms) <= 7), undefined, "the last turn alone does not fit");
});

t.test("finds the smallest cut with few measurements", async (t) => {
  const long = [msg("system", "S"), ...Array.from({ length: 1000 }, (_, i) => msg(i % 2 ? "assistant" : "user", "x".repeat(10)))];
  let calls = 0;
  const fitted = dropOldestTurns(long, (ms) => (calls++, size(ms) <= 1 + 10 * 20))!;
  t.equal(fitted.messages.length, 21, "system + the last 10 turns");
  t.ok(calls <= 12, `binary search: ${calls} measurements`);
});
