import t from "tap";
import { answerEnding, heldConnections, relayedEnding, tryHoldConnection } from "../../gateway/http/connection-ending.js";
import { statusLine } from "../../gateway/http/status-line.js";

// The gateway's policy for a connection whose request body still arrives when its answer goes
// out, case by case; and the one status line function.

const DRAIN = 1000;
const may = () => true;
const mayNot = () => false;
const ending = (rest: number | undefined, closeConnection: boolean, lingerOnClose = false, hold = may) =>
  answerEnding(rest === undefined ? undefined : { remaining: rest }, { closeConnection, lingerOnClose, drainBodyBytes: DRAIN }, hold);

t.test("an answer's ending", async (t) => {
  t.equal(ending(undefined, false), "keep", "nothing left to read: the connection stays open");
  t.equal(ending(undefined, true), "close", "nothing left, a closing answer: closed at once");
  t.equal(ending(DRAIN, false), "drain", "a rest small enough is drained");
  t.equal(ending(DRAIN, true, true), "linger", "a closing answer that lingers waits for a small rest");
  t.equal(ending(DRAIN, true, false), "close", "a closing answer that does not linger closes");
  t.equal(ending(DRAIN + 1, false), "hold", "a rest too large is held unread");
  t.equal(ending(Infinity, true, true), "hold", "a rest of unknown length is held unread, closing or not");
  t.equal(ending(DRAIN + 1, false, false, mayNot), "close", "past the held bound: closed with the answer");
  let asked = 0;
  ending(DRAIN, false, false, () => (asked++, true));
  t.equal(asked, 0, "a drainable rest never takes a held place");
});

t.test("a relayed response's ending", async (t) => {
  t.equal(relayedEnding(undefined, DRAIN, may), "keep");
  t.equal(relayedEnding({ remaining: DRAIN }, DRAIN, may), "keep", "a small rest is dropped as it comes");
  t.equal(relayedEnding({ remaining: DRAIN + 1 }, DRAIN, may), "hold");
  t.equal(relayedEnding({ remaining: DRAIN + 1 }, DRAIN, mayNot), "close");
});

t.test("held connections are counted up to their bound", async (t) => {
  const before = heldConnections();
  t.ok(tryHoldConnection(before + 1), "one more fits");
  t.notOk(tryHoldConnection(before + 1), "the bound is reached");
  t.equal(heldConnections(), before + 1);
});

t.test("status lines carry the standard reason", async (t) => {
  t.equal(statusLine(200), "200 OK");
  t.equal(statusLine(303), "303 See Other");
  t.equal(statusLine(413), "413 Payload Too Large");
  t.equal(statusLine(431), "431 Request Header Fields Too Large");
  t.equal(statusLine(499), "499 Status", "a code without a standard reason");
  t.equal(statusLine(303), statusLine(303), "made once");
});
