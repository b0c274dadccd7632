import { errors, shown, type DomainError } from "../../modules/errors/mod.js";

// What a request head must be before any route runs: within the header limits (else a 431), and
// readable one way only (else a 400 ambiguous_request).

/**
 * Headers a request may carry once (RFC 9112 §3.2, §6.3), as they are named in messages. uWS
 * frames the body by the first Content-Length (or any Transfer-Encoding) and reads the first
 * Host, where `headers` keeps the last: a second one would let the two disagree.
 */
const SINGLE_HEADERS: ReadonlyMap<string, string> = new Map([["host", "Host"], ["content-length", "Content-Length"], ["transfer-encoding", "Transfer-Encoding"]]);

/** The longest Content-Length uWS frames (it closes the connection on a longer one): 999,999,999 bytes. */
const MAX_CONTENT_LENGTH_DIGITS = 9;

/**
 * Whether header `name`, about to be stored in `headers`, repeats one of SINGLE_HEADERS. Only a
 * name as long as "host", "content-length" or "transfer-encoding" is looked up (most are not: a
 * few ns a head); one like "constructor" is found on the prototype, so the map decides.
 */
export function repeatsSingleHeader(headers: Record<string, string>, name: string): boolean {
  const n = name.length;
  return (n === 4 || n === 14 || n === 17) && headers[name] !== undefined && SINGLE_HEADERS.has(name);
}

/** The head's violation, or undefined (the common case: no allocation). */
export function headViolation(
  headers: Record<string, string>,
  counted: { count: number; bytes: number; repeated: string | undefined },
  limits: { maxHeaders: number; maxHeaderBytes: number },
): DomainError | undefined {
  if (counted.count > limits.maxHeaders) return errors.headersTooLarge(`Too many request headers: ${counted.count}, the limit is ${limits.maxHeaders}.`);
  if (counted.bytes > limits.maxHeaderBytes) return errors.headersTooLarge(`The request head is too large: ${counted.bytes} bytes, the limit is ${limits.maxHeaderBytes}.`);
  return ambiguity(headers, counted.repeated);
}

/**
 * Why the head can be read more than one way, or undefined. `repeated` is a header of
 * SINGLE_HEADERS the head holds more than once. uWS (20.30) drops some of these itself,
 * unanswered: a head without Host and a Content-Length beside a non-empty Transfer-Encoding
 * before calling the gateway, a Content-Length that is not 1 to 9 digits just after (closing the
 * connection, and any answer written meanwhile with it). The checks here cover what it lets
 * through (empty values, a repeated header, a Transfer-Encoding it frames as chunked whatever it
 * says), keep the gateway from running a route for the rest, and stand in for uWS's own checks
 * should those change.
 */
function ambiguity(headers: Record<string, string>, repeated: string | undefined): DomainError | undefined {
  if (repeated !== undefined) return errors.ambiguousRequest(`The request has more than one ${SINGLE_HEADERS.get(repeated)} header.`);
  if (headers.host === undefined) return errors.ambiguousRequest("The request has no Host header, which HTTP/1.1 requires.");
  const contentLength = headers["content-length"];
  const transferEncoding = headers["transfer-encoding"];
  if (transferEncoding !== undefined) {
    if (contentLength !== undefined) return errors.ambiguousRequest("The request has both a Content-Length and a Transfer-Encoding header.");
    // Transfer codings are case-insensitive; uWS frames any value as chunked, so nothing else is taken.
    if (transferEncoding !== "chunked" && transferEncoding.toLowerCase() !== "chunked")
      return errors.ambiguousRequest(`The Transfer-Encoding header must be "chunked", not ${JSON.stringify(shown(transferEncoding))}.`);
    return undefined;
  }
  if (contentLength !== undefined && !isDecimalLength(contentLength))
    return errors.ambiguousRequest(`The Content-Length header must be a decimal number of 1 to ${MAX_CONTENT_LENGTH_DIGITS} digits, not ${JSON.stringify(shown(contentLength))}.`);
  return undefined;
}

/** 1 to MAX_CONTENT_LENGTH_DIGITS ASCII digits (uWS has trimmed the spaces around a value). */
function isDecimalLength(value: string): boolean {
  if (value.length === 0 || value.length > MAX_CONTENT_LENGTH_DIGITS) return false;
  for (let i = 0; i < value.length; i++) {
    const c = value.charCodeAt(i);
    if (c < 48 || c > 57) return false;
  }
  return true;
}
