import { LlamaGrammar, LlamaJsonSchemaGrammar, type Llama } from "node-llama-cpp";
import { toGrammarSchema } from "./json-schema-subset.js";

/**
 * node-llama-cpp's "integer" rule allows an exponent, so `-4e-4` (not an integer) can come out
 * where a schema says integer. The rule is rewritten to plain integers.
 */
export function withStrictIntegers(grammar: string): string {
  return grammar.replace(/^integer-number-rule ::= .*$/m, 'integer-number-rule ::= "-"? ("0" | [1-9] [0-9]{0,15})');
}

/**
 * Grammars are compiled once per distinct schema: clients send the same tool definitions and
 * response formats with every request. Least recently used entries are evicted.
 */
export class GrammarCache {
  private readonly entries = new Map<string, LlamaGrammar>();

  constructor(private readonly llama: Llama, private readonly capacity = 256) {}

  /** Grammar for a JSON value matching `schemaJson` (JSON text of a JSON Schema). */
  forJsonSchema(schemaJson: string): LlamaGrammar {
    return this.memo(`schema:${schemaJson}`, () => {
      const generated = new LlamaJsonSchemaGrammar(this.llama, toGrammarSchema(JSON.parse(schemaJson)) as never);
      const grammar = withStrictIntegers(generated.grammar);
      if (grammar === generated.grammar) return generated;
      return new LlamaGrammar(this.llama, { grammar, stopGenerationTriggers: generated.stopGenerationTriggers, trimWhitespaceSuffix: generated.trimWhitespaceSuffix });
    });
  }

  /** Grammar for any JSON object (response_format json_object). */
  forAnyJsonObject(): LlamaGrammar {
    return this.memo("json-object", () => new LlamaJsonSchemaGrammar(this.llama, { type: "object", additionalProperties: true } as never));
  }

  /**
   * `grammar` with a little whitespace allowed before its value: the answer after a thought,
   * which models start on a new line (Qwen3: `</think>\n\n`). Its stop triggers are `grammar`'s.
   */
  afterThought(grammar: LlamaGrammar): LlamaGrammar {
    return this.memo(`after-thought:${grammar.rootRuleName}:${grammar.grammar}`, () => new LlamaGrammar(this.llama, {
      grammar: `${grammar.grammar}\nafter-thought ::= [ \\t\\n]{0,4} ${grammar.rootRuleName}\n`,
      rootRuleName: "after-thought",
      stopGenerationTriggers: grammar.stopGenerationTriggers,
      trimWhitespaceSuffix: grammar.trimWhitespaceSuffix,
    }));
  }

  /** Grammar that produces exactly one of `names`. */
  forOneOf(names: readonly string[]): LlamaGrammar {
    const key = `names:${names.join("\u0000")}`;
    return this.memo(key, () => new LlamaGrammar(this.llama, {
      grammar: `root ::= ${names.map((n) => JSON.stringify(n)).join(" | ")}`,
    }));
  }

  private memo(key: string, make: () => LlamaGrammar): LlamaGrammar {
    let grammar = this.entries.get(key);
    if (grammar) {
      this.entries.delete(key);
    } else {
      grammar = make();
      if (this.entries.size >= this.capacity) this.entries.delete(this.entries.keys().next().value!);
    }
    this.entries.set(key, grammar);
    return grammar;
  }
}
