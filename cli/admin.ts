import { join } from "node:path";
import type { ApiKey, Invitation, Organization, Project } from "../proto/gen/tributary/v1/admin.js";
import { adminClient, adminStatusName, isAdminCallError, resolveAdminToken } from "../modules/admin-api/mod.js";
import { accountsConfig, commonConfig, gatewayConfig, optionToUndefined, readConfig, secretsConfig } from "../lib/config.js";
import { CommandFailed, parseCommand, UsageError } from "./args.js";
import { readHidden } from "./hidden-input.js";
import { recordedGatewayUrl } from "./local-stack.js";
import { localOrigin } from "../lib/local-origin.js";
import { formatTime as when, renderTable } from "./table.js";

// `tributary admin ...`: the operators' command line, a thin client of the admin gRPC service
// (proto/tributary/v1/admin.proto) that the actor host serves on TRIBUTARY_ADMIN_ADDR.

export const adminUsage = `usage: tributary admin [--json] [--addr host:port] [--token TOKEN] <resource> <action> [options]

  org create --name NAME [--project-name NAME]     an organization and its first (default) project
  org list
  project create --org ORG_ID --name NAME
  project list --org ORG_ID
  key create --project PROJECT_ID [--name NAME]    a project key (sk-proj-...), shown once
  key create --org ORG_ID [--name NAME]            an organization key (sk-org-...): every project of the
                                                   organization, chosen with the OpenAI-Project header
  key list (--org ORG_ID | --project PROJECT_ID) [--all]   --all includes revoked keys
  key revoke KEY_ID                                effective on every gateway within a second
  invitation create [--note TEXT] [--expires-in 14d]       the code is shown once
  invitation list
  invitation revoke INVITATION_ID
  invitation redeem CODE --org-name NAME [--project-name NAME] [--key-name NAME] [--owner-email EMAIL]
                                                   with --owner-email, the owner's password is asked for
                                                   (not shown as typed), or read from stdin when piped
  sign-in-link                                     a dashboard link that signs in once as the local organization's
                                                   owner (on the local stack's gateway)
  secrets rewrap                                   wrap every secret's data key with the current master key
                                                   (TRIBUTARY_SECRETS_KEY; the old one in TRIBUTARY_SECRETS_PREVIOUS_KEYS);
                                                   talks to NATS (NATS_URL) directly, not to the admin service

The service is found at TRIBUTARY_ADMIN_ADDR (default 127.0.0.1:50051); the token is
TRIBUTARY_ADMIN_TOKEN, else the one the actor host made in $TRIBUTARY_HOME/admin-token.
--json prints the reply as JSON (proto3 field names).
`;

/** "14d", "12h", "30m", "90s" or plain seconds. */
export function parseDurationSeconds(text: string): number {
  const m = /^(\d+)\s*([dhms]?)$/.exec(text.trim());
  if (!m) throw new UsageError(`tributary admin: --expires-in: expected a duration like 14d, 12h, 30m or 3600, got '${text}'`);
  return Number(m[1]) * { d: 86_400, h: 3_600, m: 60, s: 1, "": 1 }[m[2] as "d"];
}

const orgRows = (orgs: Organization[]) => renderTable(["ID", "NAME", "DEFAULT PROJECT", "CREATED"], orgs.map((o) => [o.id, o.name, o.defaultProjectId, when(o.createdAt)]));
const projectRows = (ps: Project[]) => renderTable(["ID", "ORGANIZATION", "NAME", "CREATED"], ps.map((p) => [p.id, p.organizationId, p.name, when(p.createdAt)]));
const keyRows = (ks: ApiKey[]) =>
  renderTable(
    ["ID", "PREFIX", "NAME", "SCOPE", "CREATED", "LAST USED", "REVOKED"],
    ks.map((k) => [k.id, `${k.prefix}...`, k.name, k.projectId || `organization ${k.organizationId}`, when(k.createdAt), when(k.lastUsedAt), when(k.revokedAt)]),
  );
const invitationRows = (is: Invitation[]) =>
  renderTable(["ID", "STATUS", "NOTE", "CREATED", "EXPIRES", "ORGANIZATION"], is.map((i) => [i.id, i.status, i.note || "-", when(i.createdAt), when(i.expiresAt), i.organizationId || "-"]));

export async function runAdmin(argv: string[], out: NodeJS.WritableStream = process.stdout): Promise<number> {
  const { values: o, positionals } = parseCommand(argv, {
    name: "tributary admin",
    usage: adminUsage,
    positionals: ["RESOURCE", "[ACTION]", "[ARG]"],
    options: {
      json: { type: "boolean", default: false },
      addr: { type: "string" },
      token: { type: "string" },
      name: { type: "string" },
      "project-name": { type: "string" },
      "org-name": { type: "string" },
      "key-name": { type: "string" },
      "owner-email": { type: "string" },
      org: { type: "string" },
      project: { type: "string" },
      note: { type: "string" },
      "expires-in": { type: "string" },
      all: { type: "boolean", default: false },
    },
  });
  const [resource, action, arg] = positionals as [string, string?, string?];

  const common = readConfig(commonConfig);
  if (resource === "secrets" && action === "rewrap") return rewrapSecrets(common.natsUrl, common.home, out, o.json);
  const accounts = readConfig(accountsConfig);
  const addr = o.addr ?? accounts.adminAddr;
  const token = o.token ?? resolveAdminToken(optionToUndefined(accounts.adminToken), common.home, false);
  if (!token) {
    process.stderr.write(`no admin token: set TRIBUTARY_ADMIN_TOKEN (or run where the actor host keeps ${common.home}/admin-token)\n`);
    return 2;
  }
  const client = adminClient(addr, token);
  const print = (json: unknown, human: string) => out.write(o.json ? JSON.stringify(json, null, 2) + "\n" : human);
  const need = (value: string | undefined, what: string): string => {
    if (!value) throw new UsageError(`tributary admin ${resource} ${action}: ${what} is required`, adminUsage);
    return value;
  };

  try {
    switch (`${resource} ${action ?? ""}`.trim()) {
      case "org create": {
        const r = await client.createOrganization({ name: need(o.name, "--name"), projectName: o["project-name"] ?? "" });
        print(r, `organization ${r.organization!.id} (${r.organization!.name}), default project ${r.project!.id} (${r.project!.name})\n`);
        break;
      }
      case "org list": {
        const r = await client.listOrganizations({});
        print(r, orgRows(r.organizations));
        break;
      }
      case "project create": {
        const r = await client.createProject({ organizationId: need(o.org, "--org"), name: need(o.name, "--name") });
        print(r, `project ${r.id} (${r.name}) in ${r.organizationId}\n`);
        break;
      }
      case "project list": {
        const r = await client.listProjects({ organizationId: need(o.org, "--org") });
        print(r, projectRows(r.projects));
        break;
      }
      case "key create": {
        if (!o.project === !o.org) throw new UsageError("key create: give --project (a project key) or --org (an organization key)");
        const r = await client.createApiKey({ projectId: o.project ?? "", organizationId: o.org ?? "", name: o.name ?? "" });
        const scope = r.key!.projectId ? `project ${r.key!.projectId}` : `organization ${r.key!.organizationId} (all its projects)`;
        print(r, `key ${r.key!.id} for ${scope}. Copy it now: it is not stored and will not be shown again.\n\n  ${r.secret}\n\n`);
        break;
      }
      case "key list": {
        if (!o.project && !o.org) throw new UsageError("key list: give --org or --project");
        const r = await client.listApiKeys({ organizationId: o.org ?? "", projectId: o.project ?? "", includeRevoked: o.all ?? false });
        print(r, keyRows(r.keys));
        break;
      }
      case "key revoke": {
        const r = await client.revokeApiKey({ keyId: need(arg, "KEY_ID") });
        print(r, `key ${r.id} (${r.prefix}...) revoked at ${when(r.revokedAt)}\n`);
        break;
      }
      case "invitation create": {
        const r = await client.createInvitation({ note: o.note ?? "", expiresInSeconds: o["expires-in"] ? parseDurationSeconds(o["expires-in"]) : 0 });
        print(r, `invitation ${r.invitation!.id}, valid until ${when(r.invitation!.expiresAt)}. Send this code (it will not be shown again):\n\n  ${r.code}\n\n`);
        break;
      }
      case "invitation list": {
        const r = await client.listInvitations({});
        print(r, invitationRows(r.invitations));
        break;
      }
      case "invitation revoke": {
        const r = await client.revokeInvitation({ invitationId: need(arg, "INVITATION_ID") });
        print(r, `invitation ${r.id} revoked\n`);
        break;
      }
      case "invitation redeem": {
        const r = await client.redeemInvitation({
          code: need(arg, "CODE"),
          organizationName: need(o["org-name"], "--org-name"),
          projectName: o["project-name"] ?? "",
          keyName: o["key-name"] ?? "",
          ownerEmail: o["owner-email"] ?? "",
          // Never on the command line, where other users could see it.
          ownerPassword: o["owner-email"] ? await readHidden(`password for ${o["owner-email"]}: `, { confirm: true }) : "",
        });
        print(r, `organization ${r.organization!.id} (${r.organization!.name}), project ${r.project!.id}${r.ownerId ? `, owner ${r.ownerId}` : ""}, key ${r.key!.id}:\n\n  ${r.secret}\n\n`);
        break;
      }
      case "sign-in-link": {
        const r = await client.createSignInLink({});
        // The running local stack's address (tributary start records it), else the configured one;
        // a port picked at start and not recorded: the path alone, to open on that gateway.
        const gateway = readConfig(gatewayConfig);
        const origin = recordedGatewayUrl(readConfig(commonConfig).home) ?? (gateway.port === 0 ? "" : localOrigin(gateway.host, gateway.port));
        const url = origin + r.path;
        print({ ...r, url }, `Sign in to the dashboard as ${r.memberEmail} (${r.organizationId}) with this link: it works once, until ${when(r.expiresAt)}.\n\n  ${url}\n\n`);
        break;
      }
      default:
        throw new UsageError(`tributary admin: unknown command '${positionals.join(" ")}'`, adminUsage);
    }
    return 0;
  } catch (err) {
    if (isAdminCallError(err)) throw new CommandFailed(`${err.details || err.message} (${adminStatusName(err.code)})`);
    throw err;
  } finally {
    client.close();
  }
}

/** `tributary admin secrets rewrap`: the master key rotation's second step (docs/operations.md, "Upgrades and rotations"). */
async function rewrapSecrets(natsUrl: string, home: string, out: NodeJS.WritableStream, json: boolean): Promise<number> {
  // Loaded here: the other admin commands need neither NATS nor the secrets module.
  const [{ connect }, { DEFAULT_NATS_URL, natsClientOptions }, { nkeySeedFile }, { loadKeyRing, SecretStore }] = await Promise.all([
    import("@nats-io/transport-node"),
    import("../lib/nats/connection.js"),
    import("../lib/nats/identities.js"),
    import("../modules/secrets/mod.js"),
  ]);
  const settings = readConfig(secretsConfig);
  const ring = loadKeyRing(settings.masterKey, settings.previousKeys, home);
  // As the operators' NATS identity: the environment's (TRIBUTARY_NATS_*) with NATS_URL, else the
  // one `tributary start` made for its embedded server in $TRIBUTARY_HOME.
  const natsCredentials = natsUrl ? natsClientOptions("admin") : natsClientOptions("admin", { TRIBUTARY_NATS_NKEY_FILE: nkeySeedFile(join(home, "nats", "identities"), "admin") });
  const nc = await connect({ servers: (natsUrl || DEFAULT_NATS_URL).split(","), name: "tributary-admin-secrets", ...natsCredentials });
  try {
    const store = await SecretStore.open(nc, ring);
    const result = await store.rewrap();
    out.write(json ? JSON.stringify({ key_id: ring.current.id, ...result }) + "\n" : `re-wrapped ${result.rewrapped} data keys with master key ${ring.current.id}; ${result.current} were already under it\n`);
    return 0;
  } catch (err) {
    process.stderr.write(`secrets rewrap failed: ${(err as Error).message}\n`);
    return 1;
  } finally {
    await nc.close();
  }
}
