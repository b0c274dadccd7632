import { chmodSync, existsSync, mkdirSync, readFileSync, writeFileSync } from "node:fs";
import { join } from "node:path";
import { nkeys } from "@nats-io/nats-core";
import { NATS_IDENTITIES, type NatsIdentity, type NatsUserCredential } from "./permissions.js";

// nkey identities on one machine: one seed file per kind of process, made once and kept (mode
// 0600) in a directory of $TRIBUTARY_HOME. The server's configuration holds only the public keys,
// so it contains no secret; each process is handed the path of its own seed.

export interface NkeyIdentity {
  identity: NatsIdentity;
  seedFile: string;
  publicKey: string;
}

/** The seed file of `identity` in `dir`. */
export const nkeySeedFile = (dir: string, identity: NatsIdentity) => join(dir, `${identity}.nk`);

/** Makes the seed of every identity that has none in `dir` yet, and returns them all. */
export function ensureNkeyIdentities(dir: string): Map<NatsIdentity, NkeyIdentity> {
  mkdirSync(dir, { recursive: true, mode: 0o700 });
  const out = new Map<NatsIdentity, NkeyIdentity>();
  for (const identity of NATS_IDENTITIES) {
    const seedFile = nkeySeedFile(dir, identity);
    if (!existsSync(seedFile)) {
      const seed = new TextDecoder().decode(nkeys.createUser().getSeed());
      writeFileSync(seedFile, seed + "\n", { mode: 0o600 });
    }
    chmodSync(seedFile, 0o600);
    out.set(identity, { identity, seedFile, publicKey: readNkeySeed(seedFile).publicKey });
  }
  return out;
}

/** Reads a seed file: the seed (as the client's authenticator wants it) and its public key. */
export function readNkeySeed(seedFile: string): { seed: Uint8Array; publicKey: string } {
  const text = readFileSync(seedFile, "utf8").trim();
  if (!text.startsWith("SU")) throw new Error(`${seedFile} does not hold a NATS user nkey seed (SU...)`);
  const seed = new TextEncoder().encode(text);
  return { seed, publicKey: nkeys.fromSeed(seed).getPublicKey() };
}

/** The server-side credentials of these identities (for natsAuthorizationBlock). */
export const nkeyUsers = (identities: Iterable<NkeyIdentity>): NatsUserCredential[] =>
  [...identities].map((i) => ({ identity: i.identity, nkey: i.publicKey }));
