import type { Logger } from "../../lib/log.js";
import type { AccountStore, MemberRecord, MemberStore, Principal, SessionRecord } from "../../modules/accounts/mod.js";
import type { AppService } from "../../modules/apps/mod.js";
import type { ArtifactStore } from "../../modules/artifacts/mod.js";
import type { BatchStore } from "../../modules/batches/mod.js";
import type { ModelSpec } from "../../modules/catalog/mod.js";
import { isDomainError, type DomainError } from "../../modules/errors/mod.js";
import type { FileStore } from "../../modules/files/mod.js";
import type { JobStore } from "../../modules/jobs/mod.js";
import { openAIError } from "../../modules/openai/mod.js";
import type { BudgetReader, RateLimitScope } from "../../modules/ratelimit/mod.js";
import type { SandboxService } from "../../modules/sandboxes/mod.js";
import type { SecretStore } from "../../modules/secrets/mod.js";
import type { TraceStore } from "../../modules/traces/mod.js";
import type { UsageStore } from "../../modules/usage/mod.js";
import type { HttpExchange } from "../http/exchange.js";
import { CSP, Html, html, page, type Layout } from "./html.js";

// What the dashboard's page modules share: their dependencies, the signed-in session, and the
// helpers that send pages and check forms (made in routes.ts).

/**
 * Where a sign-in lands (a password, a link, an accepted invitation): the project's usage, which
 * shows every request, and what its sandboxes, jobs and apps ran (logs show only requests sent
 * with `log: true`).
 */
export const HOME = "/dashboard/usage";

/** The cookie of the double-submit token that protects the public forms (sign-in, join). */
export const SIGNIN_COOKIE = "tributary_signin";

export interface DashboardDeps {
  accounts: AccountStore;
  batches: BatchStore;
  files: FileStore;
  members: MemberStore;
  /** The catalog's models (their rate limits). */
  models: readonly ModelSpec[];
  /** Budgets' state, or undefined when rate limits are off. */
  budgets: BudgetReader | undefined;
  rateLimitScope: RateLimitScope;
  /** The configured window (the actor hosts' setting; a budget's record says which it was made with). */
  rateLimitWindowMs: number;
  traces: TraceStore;
  usage: UsageStore;
  /** The platform: the same services the API's routes call, always with the session's project. */
  sandboxes: SandboxService;
  jobs: JobStore;
  apps: AppService;
  artifacts: ArtifactStore;
  secrets: { store: SecretStore; maxPerProject: number; maxValueBytes: number };
  sessionTtlSeconds: number;
  signInAttempts: number;
  secureCookies: "auto" | "on" | "off";
  log: Logger;
}

export interface Signed {
  session: SessionRecord;
  token: string;
  project: string;
  projects: Array<{ id: string; name: string }>;
}

/** What the page modules share with the routes here: the session, forms, and sending pages. */
export interface DashboardKit {
  deps: DashboardDeps;
  sendHtml(ex: HttpExchange, status: number, body: string): void;
  redirect(ex: HttpExchange, to: string): void;
  /** The signed-in session, or undefined after redirecting to sign-in. */
  signedIn(ex: HttpExchange): Promise<Signed | undefined>;
  readForm(ex: HttpExchange, maxBytes?: number): Promise<URLSearchParams>;
  /** The form if it carries the session's CSRF token; otherwise a 403 was sent (undefined). */
  checkedForm(ex: HttpExchange, s: Signed, maxBytes?: number): Promise<URLSearchParams | undefined>;
  layoutOf(s: Signed, title: string, active: Active): Layout;
  projectPicker(s: Signed, path: string, extra?: Html): Html;
  forbidden(ex: HttpExchange, s: Signed, active: Active, message: string): void;
  cookie(ex: HttpExchange, name: string, value: string, maxAge: number): string;
  /** Signs `member` in: sets the session cookie. */
  startSession(ex: HttpExchange, member: MemberRecord): Promise<void>;
}

export type Active = NonNullable<Layout["active"]>;

/** `path` in the session's project (every link and form names it: a page without it shows the default project). */
export function inProject(s: Signed, path: string): string {
  return `${path}${path.includes("?") ? "&" : "?"}project=${encodeURIComponent(s.project)}`;
}

/** A form that posts to `action` (in the session's project) with the CSRF token, as one button. */
export function postButton(s: Signed, action: string, label: string, kind: "danger" | "quiet" = "danger"): Html {
  return html`<form class="inline" method="post" action="${inProject(s, action)}"><input type="hidden" name="csrf" value="${s.session.csrf}"><button class="${kind}" type="submit">${label}</button></form>`;
}

/**
 * The session as the principal of the services that take one (hosted apps): the member acting in
 * the session's project, with no API key.
 */
export function memberPrincipal(s: Signed): Principal {
  return { organizationId: s.session.organization_id, projectId: s.project, keyId: "", scope: "project" };
}

/** The 404 page of an object the session's project does not have (another project's looks the same). */
export function notFoundPage(kit: DashboardKit, ex: HttpExchange, s: Signed, active: Active, what: string): void {
  kit.sendHtml(ex, 404, page(kit.layoutOf(s, "Not found", active), html`<h1>${what} not found</h1><p>No such ${what.toLowerCase()} in project ${s.project}.</p>`));
}

/**
 * Headers of a download: always an attachment, never rendered (its bytes are whatever was stored),
 * under a CSP that would sandbox it even if a browser did render it.
 */
export function downloadHeaders(ex: HttpExchange, filename: string): void {
  const h = ex.responseHeaders;
  h["content-disposition"] = `attachment; filename="${filename.replace(/[^\x20-\x7e]|["\\]/g, "_")}"`;
  h["content-security-policy"] = CSP + "; sandbox";
  h["x-content-type-options"] = "nosniff";
  h["cache-control"] = "no-store";
}

/** A term and its value in a `dl.kv` grid; an absent value is a dash. */
export function field(term: string, value: unknown): Html {
  return html`<div><dt>${term}</dt><dd>${value === null || value === undefined || value === "" ? "—" : value}</dd></div>`;
}

export function messageOf(err: DomainError): string {
  return openAIError(err, "").body.error.message;
}

export function errorNotice(err: unknown): Html {
  if (!isDomainError(err)) throw err;
  return html`<div class="notice error">${messageOf(err)}</div>`;
}
