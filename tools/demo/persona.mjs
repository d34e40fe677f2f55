// The coding-agent persona of the demo (tools/demo/agent.mjs): a long system text of
// coding-assistant rules and nine tool schemas with long descriptions, about 3,000 tokens
// together once the chat template renders them, like the 9-12k-token system blocks of the
// seeds scaled down for CPU. Also the scripted tool results and user messages of the
// conversation, generated deterministically (same text on every run).

/** The system text. `variant` (0, 1, 2) changes a few tokens near its end (sibling personas). */
export function systemText({ variant = 0 } = {}) {
  const repo = ['lineage', 'lineage-fork', 'lineage-mirror'][variant] + ' (C++20, CMake + Ninja, GoogleTest)';
  const budget = `Keep answers under ${[300, 200, 250][variant]} words unless asked for more.`;
  return `You are Forge, an expert software engineering agent that works inside a developer's repository through the tools listed above. You pair-program with the user: you read code before you change it, you make the smallest change that solves the problem, and you prove that it works by running the tests.

# How you work

1. Understand before acting. Before you edit a file, read the relevant parts of it with read_file, and search for the callers and the tests of anything you change with search_code. Never guess the contents of a file you have not read in this session; files change between sessions.
2. Plan briefly. For any task that needs more than two edits, write a short plan (three to seven steps) and follow it. Mark a step done only when its tests pass.
3. Make minimal, focused changes. Do not reformat code you are not changing, do not rename things for taste, and do not add dependencies without asking. Match the surrounding style: naming, comment density, error handling and include order.
4. Verify. After every change run the narrowest test that covers it (run_tests with a filter), then the whole suite of the touched module before you report success. If a test fails, read the failure, fix the cause, and run it again; never weaken or delete a test to make it pass.
5. Report. End each task with what you changed (files and functions), why, how you verified it, and anything you could not finish or that the user should review.

# Code quality rules

- Correctness first, then clarity, then performance. Measure before optimizing and say what you measured.
- Every function that can fail returns a status or an expected value; exceptions do not cross module boundaries. Check every return value from external libraries.
- Half-open ranges [p0, p1) everywhere; say so in comments. Counts are named n_something; sizes carry their unit in the name (_bytes, _tokens, _seconds).
- Tests are named for behaviours, assert exact values, and never sleep to wait for something; they wait on the condition itself with a timeout.

# Tool use rules

- Prefer specific tools over run_shell: use read_file rather than cat, search_code rather than grep, list_dir rather than ls, git_diff rather than git diff. Use run_shell for builds, package managers and anything without a dedicated tool.
- Never run commands that are destructive or leave the repository: no rm -rf outside build directories, no git push, no git reset --hard, no force-checkout over uncommitted changes, no network access except through web_fetch, no sudo.
- Tool results can be long. Quote only the lines that matter in your answer, with file paths and line numbers in the form path:line.

# Communication

- Be direct and concrete. Lead with the answer, then the evidence.
- When the request is ambiguous, state your interpretation in one sentence and proceed; ask a question only when a wrong guess would waste significant work or is irreversible.
- Never invent APIs, flags, file names or test results. If you did not run it, you do not know its output.

# Repository facts

- Build: scripts/bootstrap, then ninja -C build. Tests: ctest --test-dir build (unit), and node --test in tests/e2e (end to end, needs build/bin/lineage-server).
- Layers: src/server (HTTP, routes, chat templates), src/scheduler, src/cache (keys, trie, lineage, tiers, policy; engine-agnostic), src/engine (the only llama.cpp caller). Tests mirror src/.
- The prompt cache must never change outputs: a cache hit must give the same greedy tokens as a cold run. Any change to src/cache or src/engine needs the equality tests in tests/engine and tests/e2e to pass.
- Repository: ${repo}.
${budget}`;
}

// JSON-schema builders of the tool definitions (also used by tools/bench/personas.mjs).
export const str = (description, extra = {}) => ({ type: 'string', description, ...extra });
export const int = (description, extra = {}) => ({ type: 'integer', description, ...extra });
export const bool = (description) => ({ type: 'boolean', description });
export const fn = (name, description, properties, required) =>
  ({ type: 'function', function: { name, description, parameters: { type: 'object', properties, required } } });

/** Nine tool schemas of a coding agent, with long descriptions (about 2,000 tokens as the
 *  Qwen3.5 template renders them, its tool-use instructions included). */
export const TOOLS = [
  fn('read_file',
    'Read a text file from the repository and return its contents with 1-based line numbers, one line per row in the form "N<TAB>text". Use this before editing any file, and to inspect tests, build files and documentation. Large files are truncated at max_lines; ask for a range with start_line and end_line to read the rest. Paths are relative to the repository root; absolute paths and paths that leave the repository are rejected.',
    {
      path: str('Path of the file relative to the repository root, e.g. "src/cache/trie.cpp".'),
      start_line: int('First line to return, 1-based. Defaults to 1.', { minimum: 1 }),
      end_line: int('Last line to return, inclusive. Defaults to start_line + max_lines - 1.', { minimum: 1 }),
      max_lines: int('Upper bound on the number of lines returned. Defaults to 400, at most 2000.', { minimum: 1, maximum: 2000 }),
    }, ['path']),
  fn('write_file',
    'Create a new file or replace an existing file with the given contents. Prefer edit_file for changes to existing files: write_file replaces the whole file and loses anything you did not read. Parent directories are created as needed. Refuses to write into .git, build directories and files larger than 1 MB.',
    {
      path: str('Path of the file relative to the repository root.'),
      content: str('The complete new contents of the file, UTF-8.'),
      overwrite: bool('Must be true to replace an existing file; false (the default) fails if the file exists.'),
    }, ['path', 'content']),
  fn('edit_file',
    'Replace one exact occurrence of old_text with new_text in a file. old_text must match the file byte for byte, including indentation and line breaks, and must occur exactly once unless replace_all is true; include enough surrounding lines to make it unique. Returns a unified diff of the change. Fails without changing anything when old_text is not found or is ambiguous, and the error message says which.',
    {
      path: str('Path of the file relative to the repository root.'),
      old_text: str('The exact text to replace (at least one full line is recommended).'),
      new_text: str('The replacement text. May be empty to delete old_text.'),
      replace_all: bool('Replace every occurrence instead of requiring exactly one.'),
    }, ['path', 'old_text', 'new_text']),
  fn('run_shell',
    'Run a command line with bash -lc in the repository root and return its exit code, standard output and standard error (each truncated to the last 400 lines). Use it for builds, package managers, formatters and other commands without a dedicated tool. The environment has no network access and no sudo. Commands that do not finish within timeout_s are killed together with their children and reported as timed out.',
    {
      command: str('The command line, e.g. "ninja -C build lineage-server".'),
      timeout_s: int('Seconds before the command is killed. Defaults to 120, at most 1800.', { minimum: 1, maximum: 1800 }),
      cwd: str('Working directory relative to the repository root. Defaults to the root.'),
    }, ['command']),
  fn('search_code',
    'Search the repository for a regular expression (ripgrep syntax) and return matching lines grouped by file, with line numbers and optional context lines. Use it to find definitions, callers, tests and configuration before you change something. Results are capped at max_results matches; narrow the search with path_glob or a more specific pattern when the cap is hit.',
    {
      pattern: str('Regular expression, e.g. "class\\s+trie\\b" or "cache_prompt".'),
      path_glob: str('Only search files matching this glob, e.g. "src/cache/**/*.cpp".'),
      context_lines: int('Lines of context before and after each match. Defaults to 0.', { minimum: 0, maximum: 10 }),
      case_sensitive: bool('Match case exactly. Defaults to false.'),
      max_results: int('Maximum number of matches to return. Defaults to 100.', { minimum: 1, maximum: 1000 }),
    }, ['pattern']),
  fn('list_dir',
    'List the entries of a directory in the repository: name, kind (file, dir, link) and size in bytes, sorted by name, directories first. With depth > 1, lists subdirectories recursively as an indented tree. Use it to orient yourself in an unfamiliar part of the repository.',
    {
      path: str('Directory relative to the repository root. Defaults to the root.'),
      depth: int('How many levels to descend. Defaults to 1.', { minimum: 1, maximum: 5 }),
      include_ignored: bool('Also list files ignored by git.'),
    }, []),
  fn('git_diff',
    'Show the changes in the working tree as a unified diff: against the index (staged false), the index against HEAD (staged true), or against any commit or branch given as base. Use it before reporting to review exactly what you changed, and to check that no unrelated file was touched.',
    {
      base: str('A commit, tag or branch to diff against, e.g. "HEAD~1" or "main". Defaults to the index.'),
      staged: bool('Show staged changes (index against HEAD) instead of unstaged ones.'),
      paths: { type: 'array', items: { type: 'string' }, description: 'Limit the diff to these paths.' },
      context_lines: int('Lines of context around each hunk. Defaults to 3.', { minimum: 0, maximum: 20 }),
    }, []),
  fn('run_tests',
    'Build what the tests need and run them: GoogleTest unit tests through ctest, or the end-to-end tests through node --test. Returns a summary (passed, failed, skipped, duration) and, for each failure, its name, the assertion message and the last 60 lines of its output.',
    {
      suite: str('Which tests to run.', { enum: ['unit', 'e2e', 'all'] }),
      filter: str('A ctest -R regular expression or a node --test-name-pattern, e.g. "trie|lineage".'),
      repeat: int('Run each selected test this many times to expose flakiness. Defaults to 1.', { minimum: 1, maximum: 50 }),
      timeout_s: int('Seconds before the run is stopped. Defaults to 600.', { minimum: 10, maximum: 3600 }),
    }, ['suite']),
  fn('web_fetch',
    'Fetch a public web page (documentation, specifications, issue threads) and return its main text converted to Markdown, truncated to max_chars. Only http and https URLs on public hosts are allowed. Use it only when the repository cannot answer the question, and cite the URL in your answer.',
    {
      url: str('The absolute http(s) URL to fetch.'),
      max_chars: int('Maximum number of characters of text to return. Defaults to 20000.', { minimum: 100, maximum: 200000 }),
      selector: str('Optional CSS selector: return only the text of matching elements.'),
    }, ['url']),
];

// --- Deterministic tool results --------------------------------------------------------

/** Deterministic PRNG (mulberry32): the same seed gives the same sequence on every run. */
export function rng(seed) {
  let a = seed >>> 0;
  return () => {
    a = (a + 0x6d2b79f5) >>> 0;
    let t = a;
    t = Math.imul(t ^ (t >>> 15), t | 1);
    t ^= t + Math.imul(t ^ (t >>> 7), t | 61);
    return ((t ^ (t >>> 14)) >>> 0) / 4294967296;
  };
}

/** Lines of C++ that file reads and searches quote. */
export const CODE = [
  '// Returns the longest restore point for `tokens` in [0, n_max); nullopt when none.',
  'std::optional<restore_point> trie::longest(std::span<const token> tokens, int32_t n_max) const {',
  '    const node * cur = &root_;',
  '    int32_t n = 0;',
  '    std::optional<restore_point> best;',
  '    while (n < n_max && cur != nullptr) {',
  '        auto it = cur->children.find(tokens[n]);',
  '        if (it == cur->children.end()) break;',
  '        const edge & e = it->second;',
  '        const int32_t m = common_prefix(e.label, tokens.subspan(n));',
  '        n += m;',
  '        if (m < static_cast<int32_t>(e.label.size())) break;  // diverged inside the edge',
  '        cur = e.child.get();',
  '        if (cur->point && cur->point->n_tokens <= n_max) best = cur->point;',
  '    }',
  '    return best;',
  '}',
  '',
  'void lineage::absorb(entry & older, entry & newer) {',
  '    assert(newer.extends(older));',
  '    newer.checkpoints.push_back({older.n_tokens, checkpoint_kind::turn, std::move(older.state)});',
  '    for (auto & c : older.checkpoints) newer.checkpoints.push_back(std::move(c));',
  '    thin(newer.checkpoints, max_checkpoints_);',
  '    stats_.bytes[tier::ram] -= older.bytes;',
  '}',
];

/** A read_file result of `nLines` numbered lines of C++ (about 12 tokens a line). */
export function fileResult(path, nLines, seed) {
  const r = rng(seed);
  const start = 1 + Math.floor(r() * 200);
  const lines = [];
  for (let i = 0; i < nLines; i++) lines.push(`${start + i}\t${CODE[(i + Math.floor(r() * 3)) % CODE.length]}`);
  return `${path} (lines ${start}-${start + nLines - 1})\n${lines.join('\n')}`;
}

/** A run_tests result with `nFail` failures (about 25 tokens a test line). */
export function testResult(nTests, nFail, seed) {
  const r = rng(seed);
  const names = ['TrieTest.LongestPrefix', 'TrieTest.DivergesInsideEdge', 'LineageTest.AbsorbKeepsCheckpoints',
    'LineageTest.ThinDropsGuardsFirst', 'TierTest.DiskEntrySurvivesRestart', 'TierTest.DamagedFileIsRemoved',
    'PolicyTest.AnchorsArePinned', 'PolicyTest.EvictionOrderIsLru', 'KeysTest.BucketIncludesTemplateSig'];
  const out = [`Test project /work/repo/build`];
  for (let i = 0; i < nTests; i++) {
    const name = names[i % names.length] + (i >= names.length ? `/${i}` : '');
    const failed = i < nFail;
    out.push(`${String(i + 1).padStart(3)}/${nTests} Test #${i + 1}: ${name.padEnd(42, '.')} ${failed ? '***Failed' : '   Passed'}  ${(r() * 0.9).toFixed(2)} sec`);
  }
  for (let i = 0; i < nFail; i++) {
    out.push('', `--- ${names[i]} ---`, 'tests/cache/test_trie.cpp:88: Failure',
      'Expected equality of these values:', '  got->n_tokens', `    Which is: ${300 + i * 17}`, '  want', `    Which is: ${316 + i * 17}`,
      'The restore point stops at the last full edge instead of the divergence inside it.');
  }
  out.push('', `${Math.round(100 * (nTests - nFail) / nTests)}% tests passed, ${nFail} tests failed out of ${nTests}`);
  return out.join('\n');
}

/** A git_diff result (about 150 tokens). */
export function diffResult() {
  return `diff --git a/src/cache/trie.cpp b/src/cache/trie.cpp
index 3f2c1aa..8b0e9d4 100644
--- a/src/cache/trie.cpp
+++ b/src/cache/trie.cpp
@@ -41,9 +41,12 @@ std::optional<restore_point> trie::longest(std::span<const token> tokens, int32_t n_max) const {
         const edge & e = it->second;
         const int32_t m = common_prefix(e.label, tokens.subspan(n));
         n += m;
-        if (m < static_cast<int32_t>(e.label.size())) break;  // diverged inside the edge
+        if (m < static_cast<int32_t>(e.label.size())) {
+            // Diverged inside the edge: a dense entry restores any length <= n.
+            if (e.child->point && e.child->point->dense) best = e.child->point->at(n);
+            break;
+        }
         cur = e.child.get();`;
}

/** A search_code result of `n` matches (about 20 tokens a match). */
export function searchResult(pattern, n, seed) {
  const r = rng(seed);
  const files = ['src/cache/trie.cpp', 'src/cache/lineage.cpp', 'src/cache/policy.cpp', 'tests/cache/test_trie.cpp', 'src/engine/restore.cpp'];
  const out = [];
  for (let i = 0; i < n; i++) {
    const f = files[Math.floor(r() * files.length)];
    out.push(`${f}:${10 + Math.floor(r() * 400)}: ${CODE[Math.floor(r() * CODE.length)].trim()}`);
  }
  return `${n} matches for /${pattern}/\n${out.join('\n')}`;
}
