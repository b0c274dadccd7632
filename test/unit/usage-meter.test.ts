import t from "tap";
import { UsageMeter, type Admission } from "../../modules/ratelimit/mod.js";
import type { GenerationListener } from "../../modules/inference/mod.js";
import { RunnerLost } from "../../modules/errors/mod.js";
import { ErrorCode, FinishReason, type TokenDelta } from "../../proto/gen/tributary/v1/inference.js";

// The usage meter between a generation and its listener: what passes through, and what the
// admission is settled with (an Admission counts its first settle only, as the interface says).

function admission() {
  const settles: number[] = [];
  const a: Admission & { settles: number[]; settled: number | undefined } = {
    headers: {},
    settles,
    get settled() {
      return settles[0];
    },
    settle: (tokens) => void settles.push(tokens),
    hold: () => undefined,
  };
  return a;
}

function recorder(): GenerationListener & { heard: unknown[] } {
  const heard: unknown[] = [];
  return {
    heard,
    delta: (d) => heard.push(d),
    choiceEnd: (e) => heard.push(e),
    choiceReset: (i) => heard.push(`reset ${i}`),
    final: (f) => heard.push(f),
    failure: (e) => heard.push(e),
  };
}

const delta = (tokens: number, text = "x"): TokenDelta => ({ choiceIndex: 0, text, toolCalls: [], tokens });

t.test("everything passes through unchanged and in order", async (t) => {
  const meter = new UsageMeter(admission(), 5);
  const l = recorder();
  const wrapped = meter.wrap(l);
  const events = [delta(1, "a"), { choiceIndex: 0, finishReason: FinishReason.FINISH_REASON_STOP, completionTokens: 1 }, { usage: { promptTokens: 5, completionTokens: 1, cachedPromptTokens: 0 }, error: undefined }];
  wrapped.delta(events[0] as TokenDelta);
  wrapped.choiceReset!(0);
  wrapped.choiceEnd(events[1] as never);
  wrapped.final(events[2] as never);
  t.same(l.heard, [events[0], "reset 0", events[1], events[2]]);
  t.equal(l.heard[0], events[0], "the same objects, not copies");
});

t.test("a final event with usage settles with the runner's count, not the streamed one", async (t) => {
  const a = admission();
  const wrapped = new UsageMeter(a, 5).wrap(recorder());
  wrapped.delta(delta(2));
  wrapped.delta(delta(1));
  wrapped.final({ usage: { promptTokens: 6, completionTokens: 9, cachedPromptTokens: 0 }, error: undefined });
  t.same(a.settles, [15]);
});

t.test("a final event without usage (a refusal) settles with the admitted prompt and what streamed", async (t) => {
  const a = admission();
  const wrapped = new UsageMeter(a, 5).wrap(recorder());
  wrapped.delta(delta(3, "abc"));
  wrapped.final({ usage: undefined, error: { code: ErrorCode.ERROR_CODE_ENGINE_FAILURE, message: "x", param: "" } });
  t.same(a.settles, [8], "tokens are counted from the deltas' token counts, not their text");
});

t.test("a failure settles with the prompt and what streamed before the listener hears it", async (t) => {
  const a = admission();
  const heard: string[] = [];
  const wrapped = new UsageMeter(a, 5).wrap({ ...recorder(), failure: () => heard.push(`failure after settle ${a.settled}`) });
  wrapped.delta(delta(4));
  wrapped.failure(new RunnerLost({ message: "gone" }));
  t.same(heard, ["failure after settle 9"]);
});

t.test("a client that leaves is charged the prompt and what streamed; before any token, the prompt", async (t) => {
  const early = admission();
  new UsageMeter(early, 5).abandon();
  t.same(early.settles, [5]);

  const late = admission();
  const meter = new UsageMeter(late, 5);
  const wrapped = meter.wrap(recorder());
  wrapped.delta(delta(2));
  wrapped.delta(delta(2));
  meter.abandon();
  t.equal(late.settled, 9);
});

t.test("a client that leaves after the final event changes nothing: the first settle counts", async (t) => {
  const a = admission();
  const meter = new UsageMeter(a, 5);
  meter.wrap(recorder()).final({ usage: { promptTokens: 5, completionTokens: 1, cachedPromptTokens: 0 }, error: undefined });
  meter.abandon();
  t.equal(a.settled, 6);
});
