// Shared by the disk-tier suites (disk.test.mjs, disk-damage.test.mjs): the blob files of a
// cache directory, the hit a follow-up gets when its first turn's entry is restored, and a
// per-describe fixture (a never-cached reference server, temporary cache directories, and the
// servers a test starts on them, all stopped or removed after the describe, so that a failed
// test cannot leave a server running and writing into a directory that is being removed).
import fs from 'node:fs';
import os from 'node:os';
import path from 'node:path';
import { after, before } from 'node:test';

import { GEN, RERENDER_SHARED, SERVER_ARGS } from './scenario.mjs';
import { modelPath, startServer } from './server.mjs';

/** The blob files (*.lcache) in `dir`, sorted by name. */
export const blobFiles = (dir) => fs.readdirSync(dir).filter((f) => f.endsWith('.lcache')).sort();

/** Bytes of the blob files in `dir` now; a file the disk thread deletes between the listing and
 *  its stat occupies nothing. */
export const blobBytes = (dir) => blobFiles(dir).reduce((n, f) => {
  try {
    return n + fs.statSync(path.join(dir, f)).size;
  } catch (e) {
    if (e.code === 'ENOENT') return n;
    throw e;
  }
}, 0);

/** {cached, kind} of the follow-up P + reply + U when the entry of P (`p` prompt tokens) is
 *  restored (as in scenario.mjs resendAndFollowUp): a hybrid restores its turn checkpoint, a
 *  dense model the prefix shared with the re-rendered reply. */
export const followUpHit = (hybrid, p) => (hybrid ? { cached: p - GEN, kind: 'turn' } : { cached: p - GEN + RERENDER_SHARED, kind: 'prefix' });

/** Registers the current describe's hooks for a disk suite of `arch` and returns the fixture:
 *   ref                      the never-cached reference server (`${tag}-ref-${arch}`, with `args`), started before
 *   dir(name)                a new temporary directory (lineage-${tag}-${arch}-${name}-*)
 *   startOn(a, d, name, x)   a server of arch `a` with SERVER_ARGS, `args`, --cache-dir d, then x
 *  After the describe: every server startOn started is stopped, ref is stopped gracefully, the
 *  directories are removed. */
export function diskSuite({ arch, tag, args = [] }) {
  const started = [];
  const dirs = [];
  const suite = {
    ref: undefined,
    dir(name) {
      const d = fs.mkdtempSync(path.join(os.tmpdir(), `lineage-${tag}-${arch}-${name}-`));
      dirs.push(d);
      return d;
    },
    async startOn(a, d, name, extra = []) {
      const srv = await startServer({ model: modelPath(a), name, args: [...SERVER_ARGS, ...args, '--cache-dir', d, ...extra] });
      started.push(srv);
      return srv;
    },
  };
  before(async () => {
    suite.ref = await startServer({ model: modelPath(arch), name: `${tag}-ref-${arch}`,
      args: [...SERVER_ARGS, ...args, '--no-cache-prompt'] });
  });
  after(async () => {
    for (const srv of started.splice(0)) await srv.stop();
    await suite.ref?.stopGracefully();
    for (const d of dirs) fs.rmSync(d, { recursive: true, force: true });
  });
  return suite;
}
