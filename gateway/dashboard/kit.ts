import type { Logger } from "../../lib/log.js";
import type { AccountStore, MemberRecord, MemberStore, SessionRecord } from "../../modules/accounts/mod.js";
import type { BatchStore } from "../../modules/batches/mod.js";
import type { ModelSpec } from "../../modules/catalog/mod.js";
import { isDomainError, type DomainError } from "../../modules/errors/mod.js";
import type { FileStore } from "../../modules/files/mod.js";
import { openAIError } from "../../modules/openai/mod.js";
import type { BudgetReader, RateLimitScope } from "../../modules/ratelimit/mod.js";
import type { TraceStore } from "../../modules/traces/mod.js";
import type { UsageStore } from "../../modules/usage/mod.js";
import type { HttpExchange } from "../http/exchange.js";
import { Html, html, type Layout } from "./html.js";

// What the dashboard's page modules share: their dependencies, the signed-in session, and the
// helpers that send pages and check forms (made in routes.ts).

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
  readForm(ex: HttpExchange): Promise<URLSearchParams>;
  /** The form if it carries the session's CSRF token; otherwise a 403 was sent (undefined). */
  checkedForm(ex: HttpExchange, s: Signed): Promise<URLSearchParams | undefined>;
  layoutOf(s: Signed, title: string, active: NonNullable<Layout["active"]>): Layout;
  projectPicker(s: Signed, path: string, extra?: Html): Html;
  forbidden(ex: HttpExchange, s: Signed, active: NonNullable<Layout["active"]>, message: string): void;
  cookie(ex: HttpExchange, name: string, value: string, maxAge: number): string;
  /** Signs `member` in: sets the session cookie. */
  startSession(ex: HttpExchange, member: MemberRecord): Promise<void>;
}

export function messageOf(err: DomainError): string {
  return openAIError(err, "").body.error.message;
}

export function errorNotice(err: unknown): Html {
  if (!isDomainError(err)) throw err;
  return html`<div class="notice error">${messageOf(err)}</div>`;
}
