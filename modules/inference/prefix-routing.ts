import { createHash } from "node:crypto";
import type { GenerateRequest } from "../../proto/gen/tributary/v1/inference.js";

// Routing that knows the cache. A runner keeps the prompt tokens of its last requests in its
// slots' KV cache and reuses the longest prefix a new prompt shares with one of them (the llama
// engine picks that slot), so requests that share a prefix run fastest on the runner that saw it
// last. The prefix is named by a key; the key picks a preferred runner by rendezvous hashing (the
// same runner for the same key on every gateway, and only the keys of a runner that leaves move).
// The preferred runner takes the request while it has a free slot; when it has none, the load
// bound of consistent hashing with bounded loads decides whether it still does (it may queue
// there, up to its share of the work times `loadFactor`) or the next runner in the key's order
// that is under its bound does: a popular prefix spreads instead of piling onto one runner.

/** Prefix routing as the generation client applies it: to these models, with this load factor. */
export interface PrefixRouting {
  loadFactor: number;
  /** Models whose engine keeps a KV cache (llama); the sim engine has none to reuse. */
  models: ReadonlySet<string>;
}

/** The client option for a routing configuration (TRIBUTARY_ROUTING) and catalog: undefined routes by load only. */
export function prefixRoutingOption(routing: { mode: "prefix" | "load"; loadFactor: number }, catalog: Iterable<{ id: string; engine: "llama" | "sim" }>): PrefixRouting | undefined {
  if (routing.mode !== "prefix") return undefined;
  const models = new Set<string>();
  for (const m of catalog) if (m.engine === "llama") models.add(m.id);
  return models.size > 0 ? { loadFactor: routing.loadFactor, models } : undefined;
}

/** How much of the shared part is read to name it: enough to tell long prompts apart. */
const KEY_TEXT_LIMIT = 16_384;

/**
 * What requests that share a cached prefix have in common: the tools and the leading system and
 * developer messages when there are any (a deployment's system prompt: the chat template puts
 * them first), else the first message (a conversation's first turn: its later turns carry it),
 * or the start of a raw prompt. Undefined when there is nothing to share.
 */
export function prefixKey(request: GenerateRequest): string | undefined {
  const hash = createHash("sha256");
  let text = 0;
  const add = (part: string) => {
    const slice = part.slice(0, Math.max(0, KEY_TEXT_LIMIT - text));
    text += slice.length;
    hash.update(slice).update("\u0000");
  };
  for (const tool of request.tools) add(`${tool.name}\u0001${tool.description}\u0001${tool.parametersJson}`);
  const messages = request.messages;
  let leading = 0;
  while (leading < messages.length && (messages[leading]!.role === "system" || messages[leading]!.role === "developer")) {
    add(`${messages[leading]!.role}\u0001${messages[leading]!.content}`);
    leading++;
  }
  if (leading === 0 && messages.length > 0) add(`${messages[0]!.role}\u0001${messages[0]!.content}`);
  if (messages.length === 0) add(request.prompt);
  if (text === 0) return undefined;
  return hash.digest("base64url").slice(0, 22);
}

/** What the routing decision needs of a runner (RunnerView has it). */
export interface RoutedRunner {
  runnerId: string;
  slotsTotal: number;
  slotsBusy: number;
  queueLength: number;
}

/** A runner's rendezvous score for a key: the highest score is the preferred runner. */
function score(key: string, runnerId: string): number {
  return createHash("sha256").update(key).update("\u0000").update(runnerId).digest().readUIntBE(0, 6);
}

/**
 * Orders `byLoad` (the candidates, least loaded first) for a request with prefix `key`: first the
 * first runner in the key's order that has room for it: a free slot, or, when all its slots are
 * busy, work within its bound ceil(loadFactor × (work in flight + 1) × its share of the slots)
 * once it takes the request. With no such runner (rounding can leave none), the least loaded.
 * The others follow in load order (where a refused admission goes next).
 */
export function orderByPrefix<T extends RoutedRunner>(byLoad: readonly T[], key: string | undefined, loadFactor: number): T[] {
  if (!key || byLoad.length < 2) return [...byLoad];
  const work = (r: RoutedRunner) => r.slotsBusy + r.queueLength;
  const totalWork = byLoad.reduce((n, r) => n + work(r), 0);
  const totalSlots = byLoad.reduce((n, r) => n + Math.max(1, r.slotsTotal), 0);
  const bound = (r: RoutedRunner) => Math.ceil((loadFactor * (totalWork + 1) * Math.max(1, r.slotsTotal)) / totalSlots);
  const ranked = byLoad.map((r) => ({ r, s: score(key, r.runnerId) })).sort((a, b) => b.s - a.s);
  const hasRoom = (r: RoutedRunner) => work(r) + 1 <= Math.max(1, r.slotsTotal) || work(r) + 1 <= bound(r);
  const chosen = ranked.find(({ r }) => hasRoom(r))?.r ?? byLoad[0]!;
  return [chosen, ...byLoad.filter((r) => r !== chosen)];
}
