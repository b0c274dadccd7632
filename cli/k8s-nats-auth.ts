import { NATS_IDENTITIES, natsAuthorizationBlock, type NatsIdentity } from "../lib/nats/permissions.js";

// k8s/nats-auth.yaml: the NATS servers' users and permissions for a cluster, rendered from
// lib/nats/permissions.ts (`tributary nats-auth-k8s > k8s/nats-auth.yaml`; a unit test fails when
// the file is stale). Users authenticate with passwords that nats-server reads from its
// environment, which the StatefulSet fills from the `tributary-nats-auth` Secret.

/** The environment variable of the NATS pods holding `identity`'s password. */
export const natsPasswordVariable = (identity: NatsIdentity) => `NATS_PASSWORD_${identity.toUpperCase().replace(/-/g, "_")}`;

export function k8sNatsAuthManifest(): string {
  const block = natsAuthorizationBlock(NATS_IDENTITIES.map((identity) => ({ identity, user: identity, password: `$${natsPasswordVariable(identity)}` })));
  return [
    "# Generated from lib/nats/permissions.ts by `node dist/cli/main.js nats-auth-k8s > k8s/nats-auth.yaml`: do not edit.",
    "# One NATS user per kind of process, its password from the Secret tributary-nats-auth (see docs/operations.md).",
    "apiVersion: v1",
    "kind: ConfigMap",
    "metadata:",
    "  name: nats-auth",
    "  namespace: tributary",
    "data:",
    "  auth.conf: |",
    ...block.split("\n").map((l) => "    " + l),
    "",
  ].join("\n");
}
