import { DNS_LABEL } from "./manifest.js";

// The two addresses of a hosted app; the gateway relays both to the same instance:
//   host name  <project slug>.<organization slug>.<apps domain>/...  (a real domain's wildcard; on
//              one machine *.apps.localhost, which curl and browsers resolve, glibc does not)
//   path       /apps/<organization slug>/<project slug>/...         (under the gateway's own
//              address: nothing to resolve, so every HTTP client reaches it)
// Under a path address the app's own absolute paths live below the prefix: the prefix reaches
// the app as its ASGI root_path (PREFIX_HEADER, read by launcher.py), and redirects and cookie
// paths the app writes come back under it (responseHeadsUnder).

/** The first path segment of path addresses: the gateway's router keeps it free. */
export const PATH_ADDRESS_SEGMENT = "apps";
/**
 * The header telling the app the prefix it is reached under (the name Traefik, Spring and
 * Werkzeug's ProxyFix use). The gateway sets it on path addresses and drops any copy a client
 * sent, so the app can trust it.
 */
export const PREFIX_HEADER = "x-forwarded-prefix";

/**
 * The `<project slug>.<organization slug>` a Host header names under `appsDomain` (case and a
 * port or trailing dot aside), or undefined: another host, more or fewer labels, or a label that
 * is not a DNS label.
 */
export function hostedAddressOf(host: string | undefined, appsDomain: string): string | undefined {
  if (!host || host.length > 300) return undefined;
  const name = host.toLowerCase().replace(/:\d{1,5}$/, "").replace(/\.$/, "");
  const suffix = `.${appsDomain}`;
  if (!name.endsWith(suffix)) return undefined;
  const labels = name.slice(0, -suffix.length).split(".");
  if (labels.length !== 2 || !labels.every((l) => DNS_LABEL.test(l))) return undefined;
  return labels.join(".");
}

/** A request path under a path address. */
export interface PathAddress {
  /** `<project slug>.<organization slug>`: the same key hostedAddressOf gives for the host name. */
  address: string;
  /** `/apps/<organization slug>/<project slug>` as the client wrote it: the app's root_path. */
  prefix: string;
  /** What follows the prefix, "/" at least: the path the app is asked for. */
  path: string;
}

/**
 * The path address a raw request path (as sent, percent-encoding kept) is under, or undefined:
 * not under `/apps/`, or a slug that is not a DNS label (case aside, as in a Host header; a
 * percent-encoded slug is not one).
 */
export function pathAddressOf(rawPath: string): PathAddress | undefined {
  const start = PATH_ADDRESS_SEGMENT.length + 2;
  if (!rawPath.startsWith(`/${PATH_ADDRESS_SEGMENT}/`)) return undefined;
  const organizationEnd = rawPath.indexOf("/", start);
  if (organizationEnd < 0) return undefined;
  const next = rawPath.indexOf("/", organizationEnd + 1);
  const projectEnd = next < 0 ? rawPath.length : next;
  // Labels are 63 characters at most: nothing longer is lowercased or matched.
  if (organizationEnd - start > 63 || projectEnd - organizationEnd - 1 > 63) return undefined;
  const organization = rawPath.slice(start, organizationEnd).toLowerCase();
  const project = rawPath.slice(organizationEnd + 1, projectEnd).toLowerCase();
  if (!DNS_LABEL.test(organization) || !DNS_LABEL.test(project)) return undefined;
  return { address: `${project}.${organization}`, prefix: rawPath.slice(0, projectEnd), path: rawPath.slice(projectEnd) || "/" };
}

/** The path address of a project's app on a gateway reached at `base` (`http://127.0.0.1:8080`). */
export function pathUrlOf(base: string, slugs: { organizationSlug: string; projectSlug: string }): string {
  return `${base}/${PATH_ADDRESS_SEGMENT}/${slugs.organizationSlug}/${slugs.projectSlug}/`;
}

/**
 * An app's response head as the client of a path address must get it: a `Location` that is an
 * absolute path, and a cookie's `Path`, name the app's own paths, which for this client live
 * under the prefix (what nginx's proxy_redirect and proxy_cookie_path do). Kept as they are:
 * values already under the prefix (an app that builds them from root_path, as Starlette's
 * url_for does), absolute and protocol-relative URLs, relative references, every other header.
 */
export function responseHeadsUnder(headers: ReadonlyArray<readonly [string, string]>, prefix: string): Array<[string, string]> {
  return headers.map(([name, value]): [string, string] => {
    if (name === "location") return [name, absolutePathUnder(value, prefix)];
    if (name === "set-cookie") return [name, value.replace(/(;\s*path\s*=\s*)([^;]*)/gi, (_, attribute: string, path: string) => attribute + cookiePathUnder(path.trim(), prefix))];
    return [name, value];
  });
}

function isUnder(value: string, prefix: string): boolean {
  if (!value.startsWith(prefix)) return false;
  const after = value.charAt(prefix.length);
  return after === "" || after === "/" || after === "?" || after === "#";
}

/** "/x" -> prefix + "/x"; "//host/x" and "/\host" are URLs of another host to browsers, kept. */
function absolutePathUnder(value: string, prefix: string): string {
  if (!value.startsWith("/") || value.startsWith("//") || value.startsWith("/\\") || isUnder(value, prefix)) return value;
  return prefix + value;
}

/** "/" -> the prefix itself (so it matches the prefix with and without a slash); "/x" -> prefix + "/x". */
function cookiePathUnder(path: string, prefix: string): string {
  if (!path.startsWith("/") || isUnder(path, prefix)) return path;
  return path === "/" ? prefix : prefix + path;
}
