import t from "tap";
import { formatTime, renderTable, shorten } from "../../cli/table.js";

// The tables list commands print for people (cli/table.ts): every column starts at the same place
// on every line, whatever the cells hold.

/** Where each column starts on a line, found from the header's words. */
const columnStarts = (header: string, names: string[]) => names.map((n) => header.indexOf(n));

t.test("columns line up under the header, two spaces apart, nothing trailing", async (t) => {
  const text = renderTable(["ID", "STATUS", "COMMAND"], [
    ["sbx_1", "running", "echo hi"],
    ["sbx_longer_id", "stopped (user_stop)", "x"],
    ["s", "", "python3 -c 'print(1)'"],
  ]);
  const lines = text.split("\n");
  t.equal(lines.pop(), "", "ends with a line end");
  t.equal(lines.length, 4);
  t.equal(lines[0], "ID             STATUS               COMMAND");
  const starts = columnStarts(lines[0]!, ["ID", "STATUS", "COMMAND"]);
  t.same(starts, [0, 15, 36]);
  t.equal(lines[1]!.indexOf("running"), starts[1]);
  t.equal(lines[2]!.indexOf("stopped"), starts[1]);
  t.equal(lines[3]!.indexOf("python3"), starts[2], "an empty cell keeps its column's width");
  for (const line of lines) t.equal(line, line.trimEnd(), "no trailing blanks");
});

t.test("whitespace in a cell (a command's newlines, tabs) becomes one space; wide characters count once", async (t) => {
  const text = renderTable(["A", "B"], [["x\ny\tz", "1"], ["é😀", "2"]]);
  t.equal(text, "A      B\nx y z  1\né😀     2\n");
});

t.test("no rows: the header alone; a short row: blank cells", async (t) => {
  t.equal(renderTable(["NAME", "VERSION"], []), "NAME  VERSION\n");
  t.equal(renderTable(["NAME", "VERSION", "X"], [["A"]]), "NAME  VERSION  X\nA\n");
});

t.test("shorten and formatTime", async (t) => {
  t.equal(shorten("abcdef", 6), "abcdef");
  t.equal(shorten("abcdefg", 6), "abcde…");
  t.equal([...shorten("😀".repeat(10), 4)].length, 4, "counts characters, not UTF-16 units");
  t.equal(formatTime(1_700_000_000), "2023-11-14T22:13:20Z");
  t.equal(formatTime(null), "-");
  t.equal(formatTime(0), "-");
});
