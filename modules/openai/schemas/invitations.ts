import * as Schema from "effect/Schema";
import { decodeBody } from "./common.js";

const Name = Schema.String.check(Schema.isMinLength(1), Schema.isMaxLength(200));

/** POST /v1/invitations/redeem */
export const RedeemInvitationBody = Schema.Struct({
  /** The invitation code an operator sent. */
  code: Schema.String.check(Schema.isMinLength(1), Schema.isMaxLength(256)),
  organization_name: Name,
  project_name: Schema.optionalKey(Name),
  key_name: Schema.optionalKey(Name),
  /** The organization's first owner, who signs in to the dashboard with this email and password. */
  email: Schema.optionalKey(Schema.String.check(Schema.isMinLength(3), Schema.isMaxLength(254))),
  password: Schema.optionalKey(Schema.String.check(Schema.isMinLength(8), Schema.isMaxLength(1024))),
});

export type RedeemInvitationRequest = typeof RedeemInvitationBody.Type;

export function parseRedeemInvitation(input: unknown): RedeemInvitationRequest {
  return decodeBody(RedeemInvitationBody, input);
}
