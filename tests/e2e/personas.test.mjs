// The benchmark's trace must not move when the demo's persona changes: tools/bench/personas.mjs
// imports the forge system text and tools from tools/demo/persona.mjs, so this pins the digest
// of everything the benchmark generates (the personas at several sessions and scales, scripted
// tool steps, the default trace). A change that moves it makes earlier benchmark runs
// incomparable: if it is intended, say so in docs/benchmarks and update the digest here.
// No server needed.
//
//   cd tests/e2e && node --test personas.test.mjs
import assert from 'node:assert/strict';
import { createHash } from 'node:crypto';
import { it } from 'node:test';

import { PERSONAS, personaPrompt, toolStep } from '../../tools/bench/personas.mjs';
import { makeTrace } from '../../tools/bench/trace.mjs';
import { TOOLS, systemText } from '../../tools/demo/persona.mjs';

it('the benchmark personas and trace are byte-identical to the ones the published runs used', () => {
  const parts = [];
  for (const p of PERSONAS) {
    for (const session of [0, 1, 2]) {
      for (const scale of [1, 2]) parts.push(JSON.stringify(personaPrompt(p, session, scale)));
    }
    for (let i = 0; i < 8; i++) parts.push(JSON.stringify(toolStep(p, 50 + 100 * i, 7919 * i + 1)));
  }
  parts.push(JSON.stringify(makeTrace({})));
  const text = parts.join('\n');
  assert.equal(createHash('sha256').update(text).digest('hex'),
    '2fd997fb95dfab877dd7f464cd1b99334d1339cb1edbe4afaeeacf1f2287cc29', `digest of ${text.length} characters`);
});

it('forge and forge2 are the demo persona (variants 0 and 1) with its nine tools', () => {
  assert.deepEqual(personaPrompt('forge', 0), { system: systemText({ variant: 0 }), tools: TOOLS });
  assert.deepEqual(personaPrompt('forge2', 3), { system: systemText({ variant: 1 }), tools: TOOLS });
  assert.equal(TOOLS.length, 9);
  assert.notEqual(personaPrompt('carmen', 0).system, personaPrompt('carmen', 1).system, 'carmen: per-session timestamp');
});
