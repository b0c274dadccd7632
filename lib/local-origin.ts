/**
 * `http://host:port` of a listener bound to `host`, as a client on the same machine calls it: a
 * wildcard bind (`0.0.0.0`, `::`, none) is reached on the loopback; an IPv6 address is bracketed.
 */
export function localOrigin(host: string, port: number): string {
  const reachable = host === "0.0.0.0" || host === "" ? "127.0.0.1" : host === "::" ? "::1" : host;
  return `http://${reachable.includes(":") && !reachable.startsWith("[") ? `[${reachable}]` : reachable}:${port}`;
}
