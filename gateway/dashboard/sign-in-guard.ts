import { timingSafeEqual } from "node:crypto";

/** Tokens compared in constant time (CSRF tokens). */
export function sameToken(a: string | undefined | null, b: string | undefined | null): boolean {
  if (!a || !b) return false;
  const x = Buffer.from(a);
  const y = Buffer.from(b);
  return x.length === y.length && timingSafeEqual(x, y);
}

/** The cookies of a request head (bounded: the head itself is). */
export function parseCookies(header: string | undefined): Map<string, string> {
  const out = new Map<string, string>();
  for (const part of (header ?? "").split(";")) {
    const eq = part.indexOf("=");
    if (eq <= 0) continue;
    out.set(part.slice(0, eq).trim(), part.slice(eq + 1).trim());
  }
  return out;
}

/**
 * Failed sign-ins per account and per client address within a window: past `limit`, sign-in is
 * refused for that account or address until the window ends (per gateway; an attacker spreading
 * over gateways gets `limit` tries on each). The map is bounded: the oldest entries go first.
 */
export class SignInThrottle {
  private readonly failures = new Map<string, { count: number; since: number }>();

  constructor(private readonly limit: number, private readonly windowMs = 15 * 60_000, private readonly maxEntries = 100_000) {}

  /**
   * Whether these keys may try now: `account:` keys get `limit` failures, `address:` keys five
   * times as many (people behind one NAT share an address).
   */
  allowed(keys: readonly string[], now = Date.now()): boolean {
    return keys.every((k) => {
      const f = this.failures.get(k);
      if (!f || now - f.since > this.windowMs) return true;
      return f.count < (k.startsWith("address:") ? this.limit * 5 : this.limit);
    });
  }

  failed(keys: readonly string[], now = Date.now()): void {
    for (const k of keys) {
      const f = this.failures.get(k);
      if (!f || now - f.since > this.windowMs) {
        this.failures.delete(k);
        this.failures.set(k, { count: 1, since: now });
      } else f.count++;
    }
    while (this.failures.size > this.maxEntries) this.failures.delete(this.failures.keys().next().value!);
  }

  succeeded(key: string): void {
    this.failures.delete(key);
  }
}
