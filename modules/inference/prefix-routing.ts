import { createHash } from "node:crypto";
import type { GenerateRequest } from "../../proto/gen/tributary/v1/inference.js";

// Routing that knows the cache. A runner keeps the prompt tokens of its last requests in its
// slots' KV cache and reuses the longest prefix a new prompt shares with one of them (the llama
// engine picks that slot; with none shared, it reuses the slot used least recently), so requests
// that share a prefix run fastest on the runner that ran it last. The prefix is named by a key.
//
// Bounded-load placement ("consistent hashing with bounded loads", Mirrokni et al.): a runner
// with S slots holds at most S prefixes in its cache, so the client remembers which runner each
// key was last sent to (its home) and, per runner, its S most recent keys: a model of the
// runner's cache, evicted the way the runner evicts slots (least recently used). A key that has a
// home keeps going there while the home has room for the request (a free slot, or queued work
// within the load bound below). A new key (or one whose home is gone or has no room) goes to the
// first runner in the key's rendezvous order that has room for the request and a slot not held
// by another live prefix (one used within the idle time): rendezvous hashing makes the first
// choice the same on every gateway and spreads keys evenly, and counting live prefixes against
// slots keeps a runner from being given more conversations than it can keep cached (with plain
// hashing, 3 runners of 2 slots got 3 conversations on one runner, which then evicted each
// other). With no such runner, the least loaded takes it (capacity routing). The load bound: once
// its slots are busy, a runner still takes a request until it would hold more than
// ceil(loadFactor × (work in flight + 1) × its share of the slots), so a popular prefix spreads.
//
// The memory is bounded: per runner at most its slots' worth of keys (capped), overall at most
// `maxEntries` (least recently used dropped first), so clients that invent endless prefixes
// cost a bounded table, and they only push out keys the runners' caches would have lost too.
// A runner that leaves takes nothing with it: its keys find no home among the candidates and are
// placed anew (then re-homed) on their next request; a runner that joins moves no key.
//
// Several gateways (and the actor host's workers) each route on their own knowledge: the table
// records only this process's requests; it is not shared (a shared one would cost a round
// trip or a KV write per request). Rendezvous order makes their first choices agree, so a key
// seen by several gateways usually lands on one runner, but each gateway counts only its own
// prefixes against a runner's slots: with G gateways a runner may be given up to G × slots live
// prefixes, and a conversation whose turns arrive through different gateways may change runner
// (a cache miss, never an error). The load bound, computed from heartbeats, is common to all.

/** Prefix routing as the generation client applies it: to these models, with these limits. */
export interface PrefixRouting {
  loadFactor: number;
  /** A key not seen for this long no longer holds a slot of its runner against new keys. */
  idleMs: number;
  /** Models whose engine keeps a KV cache (llama); the sim engine has none to reuse. */
  models: ReadonlySet<string>;
}

/** The routing configuration (TRIBUTARY_ROUTING*). */
export interface RoutingSettings {
  mode: "prefix" | "load";
  loadFactor: number;
  prefixIdleMs: number;
}

/** The client option for a routing configuration and catalog: undefined routes by load only. */
export function prefixRoutingOption(routing: RoutingSettings, catalog: Iterable<{ id: string; engine: "llama" | "sim" }>): PrefixRouting | undefined {
  if (routing.mode !== "prefix") return undefined;
  const models = new Set<string>();
  for (const m of catalog) if (m.engine === "llama") models.add(m.id);
  return models.size > 0 ? { loadFactor: routing.loadFactor, idleMs: routing.prefixIdleMs, models } : undefined;
}

/** How much of the shared part is read to name it: enough to tell long prompts apart. */
const KEY_TEXT_LIMIT = 16_384;

/**
 * What requests that share a cached prefix have in common: the tools and the leading system and
 * developer messages when there are any (a deployment's system prompt: the chat template puts
 * them first), else the first message (a conversation's first turn: its later turns carry it),
 * or the start of a raw prompt; and the model. Undefined when there is nothing to share.
 */
export function prefixKey(request: GenerateRequest): string | undefined {
  // The model is part of it: the same prompt to two models shares no cache.
  const hash = createHash("sha256").update(request.model).update("\u0000");
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

/** A runner's rendezvous score for a key: the highest score is the key's first choice. */
function score(key: string, runnerId: string): number {
  return createHash("sha256").update(key).update("\u0000").update(runnerId).digest().readUIntBE(0, 6);
}

/** Keys remembered per runner at most, whatever slot count it reports. */
const MAX_KEYS_PER_RUNNER = 1024;
/** Keys remembered per client at most (a few hundred bytes each). */
export const DEFAULT_MAX_PREFIX_ENTRIES = 10_000;

interface Home {
  runnerId: string;
  /** The caller's clock (ms) when a request with this key was last sent. */
  lastUsed: number;
}

/**
 * Where each prefix key was last sent, and per runner its most recent keys: the routing
 * decision's memory (see the top of this file). One per generation client (process), not shared,
 * not persisted; the clock is the caller's (`now` in ms), so the decision is a pure function of
 * the runners' figures and the placements recorded.
 */
export class PrefixPlacements {
  /** key -> home, least recently used first. */
  private readonly homes = new Map<string, Home>();
  /** runnerId -> its keys, least recently used first (a model of its slots' cache). */
  private readonly byRunner = new Map<string, Set<string>>();

  constructor(
    private readonly limits: { loadFactor: number; idleMs: number; maxEntries?: number },
  ) {}

  /** Keys remembered. */
  get size(): number {
    return this.homes.size;
  }

  /** The runner `key` was last sent to, if remembered. */
  homeOf(key: string): string | undefined {
    return this.homes.get(key)?.runnerId;
  }

  /** Keys remembered on `runnerId` (least recently used first). */
  keysOn(runnerId: string): string[] {
    return [...(this.byRunner.get(runnerId) ?? [])];
  }

  /**
   * Orders `byLoad` (the candidates, least loaded first) for a request with prefix `key`: first
   * the runner chosen for it (the key's home while it has room; else the first runner in the
   * key's rendezvous order with room and a slot not held by another live key; else the least
   * loaded), then the others in load order (where a refused admission goes next).
   */
  order<T extends RoutedRunner>(byLoad: readonly T[], key: string | undefined, now: number): T[] {
    if (!key || byLoad.length < 2) return [...byLoad];
    const work = (r: RoutedRunner) => r.slotsBusy + r.queueLength;
    const totalWork = byLoad.reduce((n, r) => n + work(r), 0);
    const totalSlots = byLoad.reduce((n, r) => n + slotsOf(r), 0);
    const bound = (r: RoutedRunner) => Math.ceil((this.limits.loadFactor * (totalWork + 1) * slotsOf(r)) / totalSlots);
    const hasRoom = (r: RoutedRunner) => work(r) + 1 <= slotsOf(r) || work(r) + 1 <= bound(r);
    const home = this.homes.get(key);
    const homeRunner = home ? byLoad.find((r) => r.runnerId === home.runnerId) : undefined;
    let chosen: T | undefined = homeRunner && hasRoom(homeRunner) ? homeRunner : undefined;
    if (!chosen) {
      const ranked = byLoad.filter((r) => r !== homeRunner).map((r) => ({ r, s: score(key, r.runnerId) })).sort((a, b) => b.s - a.s);
      chosen = ranked.find(({ r }) => hasRoom(r) && this.liveKeys(r.runnerId, key, now) < slotsOf(r))?.r;
    }
    chosen ??= byLoad[0]!;
    return [chosen, ...byLoad.filter((r) => r !== chosen)];
  }

  /**
   * A request with `key` was sent to `runner` at `now` (recorded when sent, so that a burst sees
   * its own placements; a runner that refuses it hands the key on to the next one tried): that
   * runner is its home from now on, and the key is its most recent. Keys past its slots (the least
   * recent) are forgotten, as the runner's cache loses them; past the overall cap, the least
   * recent keys anywhere are.
   */
  record(key: string | undefined, runner: { runnerId: string; slotsTotal: number }, now: number): void {
    if (!key) return;
    const previous = this.homes.get(key);
    if (previous) {
      this.homes.delete(key);
      this.unlink(key, previous.runnerId);
    }
    this.homes.set(key, { runnerId: runner.runnerId, lastUsed: now });
    let keys = this.byRunner.get(runner.runnerId);
    if (!keys) this.byRunner.set(runner.runnerId, (keys = new Set()));
    keys.add(key);
    const keep = Math.min(slotsOf(runner), MAX_KEYS_PER_RUNNER);
    for (const oldest of keys) {
      if (keys.size <= keep) break;
      keys.delete(oldest);
      this.homes.delete(oldest);
    }
    const cap = this.limits.maxEntries ?? DEFAULT_MAX_PREFIX_ENTRIES;
    for (const [oldest, home] of this.homes) {
      if (this.homes.size <= cap) break;
      this.homes.delete(oldest);
      this.unlink(oldest, home.runnerId);
    }
  }

  /** Keys other than `key` on `runnerId` used within the idle time: the slots they hold. */
  private liveKeys(runnerId: string, key: string, now: number): number {
    let n = 0;
    for (const k of this.byRunner.get(runnerId) ?? []) if (k !== key && now - (this.homes.get(k)?.lastUsed ?? -Infinity) < this.limits.idleMs) n++;
    return n;
  }

  private unlink(key: string, runnerId: string): void {
    const keys = this.byRunner.get(runnerId);
    if (!keys) return;
    keys.delete(key);
    if (keys.size === 0) this.byRunner.delete(runnerId);
  }
}

/** What the routing decision needs of a runner (RunnerView has it). */
export interface RoutedRunner {
  runnerId: string;
  slotsTotal: number;
  slotsBusy: number;
  queueLength: number;
}

const slotsOf = (r: { slotsTotal: number }) => Math.max(1, r.slotsTotal);

/**
 * The decision with nothing recorded yet: the key's first runner in rendezvous order that has
 * room for the request, else the least loaded (how a fresh gateway places every key).
 */
export function orderByPrefix<T extends RoutedRunner>(byLoad: readonly T[], key: string | undefined, loadFactor: number): T[] {
  return new PrefixPlacements({ loadFactor, idleMs: 0 }).order(byLoad, key, 0);
}
