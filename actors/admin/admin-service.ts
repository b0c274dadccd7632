import { Server, ServerCredentials, status, type Metadata, type ServerUnaryCall, type sendUnaryData } from "@grpc/grpc-js";
import {
  AdminServiceService,
  type AdminServiceServer,
  type ApiKey,
  type Invitation,
  type Organization,
  type Project,
} from "../../proto/gen/tributary/v1/admin.js";
import { errors, isDomainError } from "../../modules/errors/mod.js";
import { dashboardConfig, readConfig } from "../../lib/config.js";
import { tokenMatches } from "../../modules/admin-api/mod.js";
import {
  AccountStore,
  checkEmail,
  checkPassword,
  localOwnerSignInToken,
  MemberStore,
  signInLinkPath,
  type ApiKeyView,
  invitationStatus,
  type InvitationRecord,
  type OrganizationRecord,
  type ProjectRecord,
} from "../../modules/accounts/mod.js";
import type { Logger } from "../../lib/log.js";
import type { Actor, ActorContext } from "../../modules/actor-runtime/mod.js";

export const toOrganization = (o: OrganizationRecord): Organization => ({ id: o.id, name: o.name, createdAt: o.created_at, defaultProjectId: o.default_project_id });
export const toProject = (p: ProjectRecord): Project => ({ id: p.id, organizationId: p.organization_id, name: p.name, createdAt: p.created_at });
export const toApiKey = (k: ApiKeyView): ApiKey => ({
  id: k.id,
  name: k.name,
  organizationId: k.organization_id,
  projectId: k.project_id ?? "",
  prefix: k.prefix,
  createdAt: k.created_at,
  lastUsedAt: k.last_used_at ?? 0,
  revokedAt: k.revoked_at ?? 0,
});
export const toInvitation = (i: InvitationRecord): Invitation => ({
  id: i.id,
  note: i.note,
  createdAt: i.created_at,
  expiresAt: i.expires_at,
  redeemedAt: i.redeemed_at ?? 0,
  organizationId: i.organization_id ?? "",
  revokedAt: i.revoked_at ?? 0,
  status: invitationStatus(i),
});

/** The gRPC status of a refused account operation (a domain error); undefined for anything else. */
function grpcStatusOf(err: unknown): status | undefined {
  if (!isDomainError(err)) return undefined;
  switch (err._tag) {
    case "InvalidParam":
      return status.INVALID_ARGUMENT;
    case "NotFound":
      return status.NOT_FOUND;
    case "Conflict":
      return err.code === "already_exists" ? status.ALREADY_EXISTS : status.FAILED_PRECONDITION;
    case "Gone":
      return status.FAILED_PRECONDITION;
    default:
      return undefined;
  }
}

interface GrpcError {
  code: status;
  details: string;
}

/** The AdminService implementation over the account and member stores; every call checks the admin token. */
export function adminServiceImpl(store: AccountStore, token: string, log: Logger, dashboard: { members: MemberStore; signInLinkTtlSeconds: number }): AdminServiceServer {
  const { members } = dashboard;
  const authorized = (metadata: Metadata): boolean => {
    const value = metadata.get("authorization")[0];
    const m = typeof value === "string" ? /^Bearer\s+(\S+)\s*$/i.exec(value) : null;
    return !!m && tokenMatches(m[1]!, token);
  };
  const unary =
    <Req, Res>(method: string, run: (req: Req) => Promise<Res>) =>
    (call: ServerUnaryCall<Req, Res>, callback: sendUnaryData<Res>): void => {
      if (!authorized(call.metadata)) {
        callback({ code: status.UNAUTHENTICATED, details: "missing or wrong admin token (authorization: Bearer <TRIBUTARY_ADMIN_TOKEN>)" } as GrpcError);
        return;
      }
      run(call.request).then(
        (res) => callback(null, res),
        (err: unknown) => {
          const code = grpcStatusOf(err);
          if (code !== undefined) return callback({ code, details: (err as Error).message } as GrpcError);
          log.error("admin call failed", { method, err });
          callback({ code: status.INTERNAL, details: "internal error (see the actor host's log)" } as GrpcError);
        },
      );
    };

  return {
    createOrganization: unary("CreateOrganization", async (req) => {
      const { organization, project } = await store.createOrganization({ name: req.name, projectName: req.projectName });
      return { organization: toOrganization(organization), project: toProject(project) };
    }),
    listOrganizations: unary("ListOrganizations", async () => ({ organizations: (await store.listOrganizations()).map(toOrganization) })),
    createProject: unary("CreateProject", async (req) => toProject(await store.createProject({ organizationId: req.organizationId, name: req.name }))),
    listProjects: unary("ListProjects", async (req) => ({ projects: (await store.listProjects(req.organizationId)).map(toProject) })),
    createApiKey: unary("CreateApiKey", async (req) => {
      const created = await store.createApiKey({ projectId: req.projectId || undefined, organizationId: req.organizationId || undefined, name: req.name });
      return { key: toApiKey(created.key), secret: created.secret };
    }),
    listApiKeys: unary("ListApiKeys", async (req) => ({
      keys: (await store.listApiKeys({ organizationId: req.organizationId || undefined, projectId: req.projectId || undefined, includeRevoked: req.includeRevoked })).map(toApiKey),
    })),
    revokeApiKey: unary("RevokeApiKey", async (req) => toApiKey(await store.revokeApiKey(req.keyId))),
    createInvitation: unary("CreateInvitation", async (req) => {
      const { invitation, code } = await store.createInvitation({ note: req.note, expiresInSeconds: req.expiresInSeconds });
      return { invitation: toInvitation(invitation), code };
    }),
    listInvitations: unary("ListInvitations", async () => ({ invitations: (await store.listInvitations()).map(toInvitation) })),
    revokeInvitation: unary("RevokeInvitation", async (req) => toInvitation(await store.revokeInvitation(req.invitationId))),
    redeemInvitation: unary("RedeemInvitation", async (req) => {
      // The owner's credentials are checked before the invitation is used up (as on the HTTP route).
      if (!!req.ownerEmail !== !!req.ownerPassword) throw errors.invalidParam(req.ownerEmail ? "owner_password" : "owner_email", "owner email and password go together: both or neither.");
      if (req.ownerEmail) {
        checkEmail(req.ownerEmail, "owner_email");
        checkPassword(req.ownerPassword, "owner_password");
      }
      const r = await store.redeemInvitation({ code: req.code, organizationName: req.organizationName, projectName: req.projectName, keyName: req.keyName });
      const owner = req.ownerEmail ? await members.create({ organizationId: r.organization.id, email: req.ownerEmail, password: req.ownerPassword, role: "owner" }) : undefined;
      return { organization: toOrganization(r.organization), project: toProject(r.project), key: toApiKey(r.key.key), secret: r.key.secret, ownerId: owner?.id ?? "" };
    }),
    createSignInLink: unary("CreateSignInLink", async () => {
      const { token, owner, record } = await localOwnerSignInToken(store, members, dashboard.signInLinkTtlSeconds);
      return { path: signInLinkPath(token), expiresAt: record.expires_at, organizationId: owner.organization_id, memberEmail: owner.email };
    }),
  };
}

const LOOPBACK = /^(127\.\d+\.\d+\.\d+|localhost|\[::1\]|::1)$/;

/**
 * The admin gRPC service, hosted by the platform actor host: it is stateless (all state is in KV),
 * so every actor host may serve it, and it needs nothing the host does not already have (a NATS
 * connection, supervision). Bound to loopback unless told otherwise; every call needs the token.
 */
export class AdminServiceActor implements Actor {
  readonly name = "admin service";
  private server: Server | undefined;

  /** `token` is read when the service starts: a failure to make one fails this actor, not the host. */
  constructor(private readonly address: string, private readonly token: () => string) {}

  async start(ctx: ActorContext): Promise<void> {
    let token: string;
    try {
      token = this.token();
    } catch (err) {
      throw new Error(`no admin token: set TRIBUTARY_ADMIN_TOKEN, or let the actor host write $TRIBUTARY_HOME/admin-token (${(err as Error).message})`);
    }
    const store = await AccountStore.open(ctx.nc);
    const dashboard = readConfig(dashboardConfig);
    const members = await MemberStore.open(ctx.nc, dashboard.sessionTtlSeconds);
    const server = new Server();
    server.addService(AdminServiceService, adminServiceImpl(store, token, ctx.log, { members, signInLinkTtlSeconds: dashboard.signInLinkTtlSeconds }));
    const port = await new Promise<number>((resolve, reject) =>
      server.bindAsync(this.address, ServerCredentials.createInsecure(), (err, p) => (err ? reject(err) : resolve(p))),
    );
    this.server = server;
    const host = this.address.slice(0, this.address.lastIndexOf(":"));
    if (!LOOPBACK.test(host)) ctx.log.warn("admin service bound beyond loopback: its traffic is not encrypted", { address: this.address });
    ctx.log.info("admin service listening", { address: `${host}:${port}`, port });
  }

  async stop(): Promise<void> {
    const server = this.server;
    if (!server) return;
    await new Promise<void>((resolve) => {
      const timer = setTimeout(() => {
        server.forceShutdown();
        resolve();
      }, 2_000);
      server.tryShutdown(() => {
        clearTimeout(timer);
        resolve();
      });
    });
  }
}
