// Scripted replies (lineage-server --test-reply-script, a test instrument; docs/testing.md
// "Scripted replies"): the random-weight test models answer each request with a reply of the
// script, which the engine generates token by token. A test writes the script here and starts the
// server with its path; the server reads the file again when it changes.
import fs from 'node:fs';
import os from 'node:os';
import path from 'node:path';

/** A new script file in a fresh temporary folder holding `replies`; returns its path. */
export function newScript(replies = []) {
  const dir = fs.mkdtempSync(path.join(os.tmpdir(), 'lineage-script-'));
  const file = path.join(dir, 'replies.json');
  writeScript(file, replies);
  return file;
}

/** Replaces the script at `file` with `replies` in one rename (the server never reads half a
 *  file); the replies' used marks start over. */
export function writeScript(file, replies) {
  const tmp = `${file}.${process.pid}.tmp`;
  fs.writeFileSync(tmp, JSON.stringify({ replies }, null, 1));
  fs.renameSync(tmp, file);
}
