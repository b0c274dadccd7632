// Writing JSON by hand where the generic JSON.stringify walk showed in profiles (traces, chat
// completion bodies): a string's JSON literal.

/** Printable ASCII but `"` and `\`: nothing in it is escaped by JSON.stringify. */
const PLAIN = /^[\x20\x21\x23-\x5b\x5d-\x7e]*$/;

/** Whether `s` is printable ASCII that JSON writes as it is (no escape), between quotes. */
export function isPlainJsonText(s: string): boolean {
  return PLAIN.test(s);
}

/**
 * JSON.stringify(s), exactly. Most strings (ids, names, English text) need no escape: a regular
 * expression tells in a fraction of the time JSON.stringify takes to copy them character by
 * character; the rest go through JSON.stringify.
 */
export function jsonString(s: string): string {
  return PLAIN.test(s) ? `"${s}"` : JSON.stringify(s);
}
