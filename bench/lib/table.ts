import { mkdirSync, writeFileSync } from "node:fs";
import { dirname, join } from "node:path";
import { fileURLToPath } from "node:url";
import { allowedCpus } from "../../lib/process/cpu-affinity.js";

export const resultsDir = join(dirname(fileURLToPath(import.meta.url)), "..", "..", "..", "bench", "results");

/** A markdown table. */
export function markdownTable(header: readonly string[], rows: ReadonlyArray<ReadonlyArray<string | number>>): string {
  const line = (cells: ReadonlyArray<string | number>) => `| ${cells.join(" | ")} |`;
  return [line(header), line(header.map(() => "---")), ...rows.map(line)].join("\n");
}

/** Writes a results page under bench/results/ and echoes it. */
export function writeResults(name: string, title: string, sections: string[]): string {
  const path = join(resultsDir, name);
  mkdirSync(dirname(path), { recursive: true });
  const text = `# ${title}\n\n${sections.join("\n\n")}\n`;
  writeFileSync(path, text);
  process.stdout.write(`\n${text}\nwritten to ${path}\n`);
  return path;
}

/** Counted at start-up: benchmarks narrow their own CPU affinity while they run. */
const machineCpus = allowedCpus().length;

export function machineLine(): string {
  return `Machine: ${process.platform} ${process.arch}, Node ${process.version}, ${machineCpus} CPUs. Date: ${new Date().toISOString()}.`;
}
