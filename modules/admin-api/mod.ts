// The admin gRPC service's two ends' shared pieces: the token that guards it and a promise
// client of it. Small on purpose: `tributary admin` loads this, not the accounts module.
export { adminClient, type AdminApi, adminStatusName, isAdminCallError } from "./admin-client.js";
export { resolveAdminToken, tokenMatches } from "./admin-token.js";
