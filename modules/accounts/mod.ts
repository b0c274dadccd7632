// The public surface of the accounts module: other modules and processes import from here only.
export { AccountAuthenticator } from "./account-authenticator.js";
export { AccountDirectory } from "./account-directory.js";
export { AccountStore, type ApiKeyView, MAX_KEYS_PER_ORGANIZATION } from "./account-store.js";
export { type Authenticator } from "./authenticator.js";
export { LastUsedRecorder } from "./last-used.js";
export { LOCAL_ORGANIZATION_ID, LOCAL_OWNER_EMAIL, LOCAL_PROJECT_ID, localOwnerSignInToken, parseConfiguredKeys, registerConfiguredKeys } from "./local-keys.js";
export { type Principal } from "./principal.js";
export { accountRecords, type InvitationRecord, invitationStatus, type OrganizationRecord, type ProjectRecord } from "./records.js";
export { isSignInTokenShape, SIGN_IN_LINK_PATH, signInLinkPath, type SignInTokenRecord, signInTokenStatus } from "./sign-in-links.js";
export { invitationIdOfCode, keyPrefix, newApiKey, newInvitationCode, sameDigest, sha256Hex } from "./secrets.js";
export {
  checkEmail,
  checkPassword,
  MAX_MEMBER_INVITATIONS,
  MEMBER_INVITATION_TTL_SECONDS,
  type MemberInvitationRecord,
  memberInvitationStatus,
  type MemberRecord,
  type MemberRole,
  MemberStore,
  MIN_PASSWORD_LENGTH,
  normalizeEmail,
  type SessionRecord,
} from "./members.js";
