// Project secrets: write-only values, envelope-encrypted in KV, revealed only to sandbox hosts.
export { loadKeyRing, SECRET_NAME, SecretStore, type KeyRing, type SecretObject } from "./secret-store.js";
