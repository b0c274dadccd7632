// Runs unit test files in this one process (scripts/test.mjs starts it): each file is imported in
// turn and its tests join this process's tap run. A unit test starts no stack and leaves nothing
// running, and node's and tap's start cost more than most of them: 89 files took about 140 s of CPU
// in processes of their own, and 10 s in one. The files are named in TEST_GROUP_FILES (one per
// line), not on the command line, which tap's fixture directories are named after.
import { pathToFileURL } from "node:url";

const files = (process.env.TEST_GROUP_FILES ?? "").split("\n").filter(Boolean);
for (const file of files) await import(pathToFileURL(file).href);
