import { randomToken } from "../../lib/ids.js";
import { MEMBER_INVITATION_TTL_SECONDS, memberInvitationStatus, type MemberInvitationRecord } from "../../modules/accounts/mod.js";
import { isDomainError } from "../../modules/errors/mod.js";
import type { HttpExchange } from "../http/exchange.js";
import type { Router } from "../http/router.js";
import { cell, formatTime, Html, html, listTable, page } from "./html.js";
import { type DashboardKit, HOME, messageOf, SIGNIN_COOKIE, type Signed } from "./kit.js";
import { parseCookies, sameToken } from "./sign-in-guard.js";

// Projects (list for everyone; create and rename for owners) and invitations of members (owners
// create them with a role, list and revoke them; the invited person redeems the code on the public
// join page, choosing a password, and is signed in). The accounts module has no archive of a
// project: nothing here offers one.

const pub = { public: true };

export function registerOrganizationPages(router: Router, kit: DashboardKit): void {
  const { deps } = kit;
  const ownerOnly = "Only owners of the organization can do this.";

  // ---- projects ----

  async function projectsPage(ex: HttpExchange, s: Signed, status = 200, message?: { text: string; error?: boolean }): Promise<void> {
    const org = await deps.accounts.getOrganization(s.session.organization_id);
    const projects = await deps.accounts.listProjects(s.session.organization_id);
    const owner = s.session.role === "owner";
    const csrf = html`<input type="hidden" name="csrf" value="${s.session.csrf}">`;
    const rows = projects.map((p) => [
      html`<span>${p.name}${p.id === org?.default_project_id ? html` <span class="muted">(default)</span>` : ""}</span>`,
      html`<code>${p.id}</code>`,
      formatTime(p.created_at),
      owner ? html`<form class="inline" method="post" action="/dashboard/projects/${p.id}/rename"><input type="hidden" name="csrf" value="${s.session.csrf}"><input name="name" maxlength="200" required aria-label="new name of ${p.id}" value="${p.name}"><button class="quiet" type="submit">Rename</button></form>` : "",
    ]);
    kit.sendHtml(ex, status, page(kit.layoutOf(s, "Projects", "projects"), html`<h1>Projects</h1>
${message ? html`<div class="notice${message.error ? " error" : ""}" role="status">${message.text}</div>` : ""}
${listTable(["Name", "Id", "Created", ""], rows, "projects")}
${owner ? html`<h2>New project</h2><div class="card"><form class="filters" method="post" action="/dashboard/projects">${csrf}<label>Name<input name="name" maxlength="200" required></label><button type="submit">Create project</button></form>
<p class="muted">A project has its own keys, files, batches, logs and usage. Projects cannot be archived yet: revoke a project's keys to stop it.</p></div>` : html`<p class="muted">Owners create and rename projects.</p>`}`));
  }

  /**
   * The form an owner posted: signed in, carrying the session's CSRF token, with the owner role.
   * Otherwise undefined, and the answer was sent (sign-in redirect, or a 403 page).
   */
  const ownerForm = async (ex: HttpExchange, active: "projects" | "invitations"): Promise<{ s: Signed; form: URLSearchParams } | undefined> => {
    const s = await kit.signedIn(ex);
    if (!s) return undefined;
    const form = await kit.checkedForm(ex, s);
    if (!form) return undefined;
    if (s.session.role !== "owner") {
      kit.forbidden(ex, s, active, ownerOnly);
      return undefined;
    }
    return { s, form };
  };

  router.get("/dashboard/projects", async (ex) => {
    const s = await kit.signedIn(ex);
    if (s) await projectsPage(ex, s);
  }, pub);

  router.post("/dashboard/projects", async (ex) => {
    const owner = await ownerForm(ex, "projects");
    if (!owner) return;
    const { s, form } = owner;
    try {
      const p = await deps.accounts.createProject({ organizationId: s.session.organization_id, name: form.get("name") ?? "" });
      await projectsPage(ex, s, 200, { text: `Project ${p.name} (${p.id}) created.` });
    } catch (err) {
      if (!isDomainError(err)) throw err;
      await projectsPage(ex, s, 400, { text: messageOf(err), error: true });
    }
  }, pub);

  router.post("/dashboard/projects/:id/rename", async (ex, { id }) => {
    const owner = await ownerForm(ex, "projects");
    if (!owner) return;
    const { s, form } = owner;
    try {
      // Scoped to the session's organization: another organization's project is not found.
      const p = await deps.accounts.renameProject(s.session.organization_id, id!, form.get("name") ?? "");
      await projectsPage(ex, s, 200, { text: `Project ${p.id} is now called ${p.name}.` });
    } catch (err) {
      if (!isDomainError(err)) throw err;
      await projectsPage(ex, s, err._tag === "NotFound" ? 404 : 400, { text: messageOf(err), error: true });
    }
  }, pub);

  // ---- invitations of members ----

  async function invitationsPage(ex: HttpExchange, s: Signed, status = 200, notice?: { text: string; error?: boolean }, created?: { invitation: MemberInvitationRecord; code: string }): Promise<void> {
    const invitations = await deps.members.listInvitations(s.session.organization_id);
    const owner = s.session.role === "owner";
    const now = Math.floor(Date.now() / 1000);
    const rows = invitations.map((inv) => {
      const state = memberInvitationStatus(inv, now);
      return [
        inv.email,
        inv.role,
        cell(state, `status-${state === "pending" ? "success" : "cancelled"}`),
        html`<code>${inv.id}</code>`,
        formatTime(inv.created_at),
        formatTime(inv.expires_at),
        owner && state === "pending" ? html`<form class="inline" method="post" action="/dashboard/invitations/${inv.id}/revoke"><input type="hidden" name="csrf" value="${s.session.csrf}"><button class="danger" type="submit">Revoke</button></form>` : "",
      ];
    });
    const link = created ? `${origin(ex)}/dashboard/join?code=${encodeURIComponent(created.code)}` : "";
    kit.sendHtml(ex, status, page(kit.layoutOf(s, "Invitations", "invitations"), html`<h1>Invitations</h1>
${notice ? html`<div class="notice${notice.error ? " error" : ""}" role="status">${notice.text}</div>` : ""}
${created ? html`<div class="card"><p>Invitation of <strong>${created.invitation.email}</strong> as ${created.invitation.role} created. Send them this link now: it is shown only once, works once and expires ${formatTime(created.invitation.expires_at)}.</p><div class="secret" id="invitation-link">${link}</div></div>` : ""}
${owner ? html`<div class="card"><form class="filters" method="post" action="/dashboard/invitations"><input type="hidden" name="csrf" value="${s.session.csrf}">
<label>Email<input name="email" type="email" maxlength="254" required></label><label>Role<select name="role"><option value="member">member</option><option value="owner">owner</option></select></label>
<button type="submit">Invite</button></form><p class="muted">The invited person opens the link, chooses a password and is a member from then on. An invitation is valid for ${MEMBER_INVITATION_TTL_SECONDS / 86_400} days.</p></div>` : html`<p class="muted">Owners invite members.</p>`}
${listTable(["Email", "Role", "Status", "Id", "Created", "Expires", ""], rows, "invitations")}
${invitations.length === 0 ? html`<p class="muted">No invitations.</p>` : ""}`));
  }

  router.get("/dashboard/invitations", async (ex) => {
    const s = await kit.signedIn(ex);
    if (s) await invitationsPage(ex, s);
  }, pub);

  router.post("/dashboard/invitations", async (ex) => {
    const owner = await ownerForm(ex, "invitations");
    if (!owner) return;
    const { s, form } = owner;
    try {
      const created = await deps.members.invite({
        organizationId: s.session.organization_id,
        email: form.get("email") ?? "",
        role: form.get("role") === "owner" ? "owner" : "member",
        invitedBy: s.session.member_id,
      });
      await invitationsPage(ex, s, 200, undefined, created);
    } catch (err) {
      if (!isDomainError(err)) throw err;
      await invitationsPage(ex, s, 400, { text: messageOf(err), error: true });
    }
  }, pub);

  router.post("/dashboard/invitations/:id/revoke", async (ex, { id }) => {
    const owner = await ownerForm(ex, "invitations");
    if (!owner) return;
    const { s } = owner;
    try {
      const inv = await deps.members.revokeInvitation(s.session.organization_id, id!);
      await invitationsPage(ex, s, 200, { text: `The invitation of ${inv.email} is revoked: its link no longer works.` });
    } catch (err) {
      if (!isDomainError(err)) throw err;
      await invitationsPage(ex, s, err._tag === "NotFound" ? 404 : 409, { text: messageOf(err), error: true });
    }
  }, pub);

  // ---- redeeming an invitation (public: the code is the credential) ----

  async function joinPage(ex: HttpExchange, status: number, code: string, message?: string): Promise<void> {
    let body: Html;
    try {
      const inv = await deps.members.pendingInvitation(code);
      const org = await deps.accounts.getOrganization(inv.organization_id);
      // Double-submit token, as on the sign-in form: a post must come from this page.
      const token = randomToken(32);
      ex.responseHeaders["set-cookie"] = kit.cookie(ex, SIGNIN_COOKIE, token, 3600);
      body = html`<div class="signin card"><h1>Join ${org?.name ?? inv.organization_id}</h1>
${message ? html`<div class="notice error" role="alert">${message}</div>` : ""}
<p>You are invited as <strong>${inv.role}</strong> with the email <strong>${inv.email}</strong>. Choose a password to sign in with.</p>
<form method="post" action="/dashboard/join"><input type="hidden" name="csrf" value="${token}"><input type="hidden" name="code" value="${code}">
<label>Password<input name="password" type="password" autocomplete="new-password" minlength="8" maxlength="1024" required></label>
<label>Password again<input name="password2" type="password" autocomplete="new-password" minlength="8" maxlength="1024" required></label>
<button type="submit">Join</button></form></div>`;
    } catch (err) {
      if (!isDomainError(err)) throw err;
      status = err._tag === "Gone" ? 410 : err._tag === "Conflict" ? 409 : 404;
      body = html`<div class="signin card"><h1>Invitation</h1><div class="notice error" role="alert">${messageOf(err)}</div><p><a href="/dashboard/sign-in">Sign in</a></p></div>`;
    }
    kit.sendHtml(ex, status, page({ title: "Join" }, body));
  }

  router.get("/dashboard/join", async (ex) => joinPage(ex, 200, (ex.searchParams().get("code") ?? "").slice(0, 256)), pub);

  router.post("/dashboard/join", async (ex) => {
    const form = await kit.readForm(ex);
    const code = (form.get("code") ?? "").slice(0, 256);
    if (!sameToken(form.get("csrf"), parseCookies(ex.headers.cookie).get(SIGNIN_COOKIE))) return joinPage(ex, 403, code, "The form expired. Please try again.");
    const password = form.get("password") ?? "";
    if (password !== (form.get("password2") ?? "")) return joinPage(ex, 400, code, "The two passwords differ.");
    try {
      const member = await deps.members.acceptInvitation(code, password);
      await kit.startSession(ex, member);
      kit.redirect(ex, HOME);
    } catch (err) {
      if (!isDomainError(err)) throw err;
      return joinPage(ex, 400, code, messageOf(err));
    }
  }, pub);
}

/** The dashboard's origin as the browser reached it (behind a TLS proxy: https). */
function origin(ex: HttpExchange): string {
  const proto = ex.headers["x-forwarded-proto"] === "https" ? "https" : "http";
  const host = /^[A-Za-z0-9.:[\]-]{1,255}$/.test(ex.headers.host ?? "") ? ex.headers.host : "localhost";
  return `${proto}://${host}`;
}
