import type { ChatMessage } from "../../proto/gen/tributary/v1/inference.js";

/**
 * Truncation "auto": the longest suffix of the conversation, cut at turn boundaries, that `fits`.
 * A turn starts at a user message and holds the replies, tool calls and tool results after it, so
 * a call is never separated from its result. System and developer messages stay wherever they
 * are; the last turn is never dropped. `fits` shrinks monotonically with dropped turns, so the
 * cut is found by binary search (a few renders and tokenizations, however long the history).
 * Returns undefined when even the last turn alone does not fit.
 */
export function dropOldestTurns(
  messages: readonly ChatMessage[],
  fits: (messages: ChatMessage[]) => boolean,
): { messages: ChatMessage[]; dropped: number } | undefined {
  const pinned = (m: ChatMessage) => m.role === "system" || m.role === "developer";
  // turnOf[i]: the turn of message i (pinned messages get -1); turn boundaries at user messages.
  const turnOf: number[] = [];
  let turns = 0;
  let open = false;
  for (const m of messages) {
    if (pinned(m)) {
      turnOf.push(-1);
      continue;
    }
    if (m.role === "user" || !open) {
      turns++;
      open = true;
    }
    turnOf.push(turns - 1);
  }
  if (turns === 0) return undefined;
  const keepFrom = (firstTurn: number) => messages.filter((_, i) => turnOf[i] === -1 || turnOf[i]! >= firstTurn);

  // Smallest k in [1, turns-1] with fits(drop k turns); k = 0 is known not to fit.
  let lo = 1;
  let hi = turns - 1;
  if (hi < lo || !fits(keepFrom(hi))) return undefined;
  while (lo < hi) {
    const mid = (lo + hi) >> 1;
    if (fits(keepFrom(mid))) hi = mid;
    else lo = mid + 1;
  }
  const kept = keepFrom(lo);
  return { messages: kept, dropped: messages.length - kept.length };
}
