// The benchmark's trace (docs/benchmarks/README.md "What the trace is"): one seed and the flags
// make the whole plan of conversations, turns, scripted tool results and events; only the
// assistant replies come from the server at run time (they are echoed back exactly as returned).
//
// A conversation is a persona session: the persona's system prompt + tools, then 6-10 steps.
// A step is a user message (5-200 tokens) or an agent-loop step (a scripted assistant tool call
// and its result, 50-800 tokens, after the echoed reply), then the request for the reply.
// Events, drawn per step: regenerate (the same prompt again; the new reply replaces the old),
// edit (the last user message rewritten near its end, everything after it dropped, sent again),
// a dropped stream (the client aborts after a few tokens, then retries the same request).
// Conversations run `concurrency` at a time; when one ends a new session starts on a persona
// (the first three: forge, carmen, forge2 — a sibling of forge). The runner restarts the server
// once after `restartAt` of the planned requests.
import { PERSONAS, personaPrompt, prose, rng, toolStep } from './personas.mjs';

export const DEFAULTS = {
  seed: 1,
  concurrency: 4,
  conversations: 24,
  turnsMin: 6,
  turnsMax: 10,
  userMin: 5,
  userMax: 200,
  toolMin: 50,
  toolMax: 800,
  maxTokensMin: 16,
  maxTokensMax: 64,
  pTool: 0.5,
  pRegenerate: 0.10,
  pEdit: 0.10,
  pDrop: 0.05,
  dropAfterMin: 2,
  dropAfterMax: 6,
  restartAt: 2 / 3,
  personaScale: 1,
  // systemVariation (not in the defaults, so that the default trace's options stay the same):
  // per-session lines in every system text, as agents write them (docs/architecture.md "The anchor
  // ladder"): 'none'; 'end': the working folder and the date as its last lines (pi, opencode);
  // 'mid': a per-project memory path at ~80% of its length (qwen-code). thinkMs (likewise): a pause
  // before each user turn after the first, ms (run.mjs; 0: closed loop). coldPersonas (likewise; 1:
  // on): every session is a new persona, its system text opening with a line of its own, so that no
  // session shares more than the tool block with any earlier one (the cold-heavy trace).
};

const PROJECTS = ['lineage', 'atlas', 'orchard', 'quill', 'harbor', 'ember', 'tessellate', 'juniper'];

/** `system` with the per-session lines of `variation` for session `n` of `persona`. */
export function withSessionLines(system, variation, persona, n) {
  if (variation === 'none') return system;
  const project = `${PROJECTS[n % PROJECTS.length]}-${persona}-${n}`;
  const day = new Date(Date.UTC(2026, 5, 1) + n * 86_400_000 * 3).toISOString().slice(0, 10);
  if (variation === 'end') {
    return `${system}\n\nWorking directory: /home/dev/src/${project}\nToday's date: ${day}`;
  }
  if (variation === 'mid') {
    // The paragraph break nearest 80% of the text: where the memory section goes.
    const target = Math.floor(system.length * 0.8);
    let at = system.lastIndexOf('\n\n', target);
    if (at < 0) at = target;
    return `${system.slice(0, at)}\n\n# Memory\nProject notes are kept in /home/dev/.agent/memory/${project}/NOTES.md; read them before large changes.${system.slice(at)}`;
  }
  throw new Error(`unknown --system-variation ${variation} (none, end, mid)`);
}

const between = (r, lo, hi) => lo + Math.floor(r() * (hi - lo + 1));

/** `text` rewritten near its end: its first 50-90% of words kept, the rest new prose. */
function editOf(text, r) {
  const words = text.split(' ');
  const keep = Math.max(1, Math.floor(words.length * (0.5 + 0.4 * r())));
  const fresh = prose(Math.max(4, Math.round((words.length - keep) * 1.3) + 4), Math.floor(r() * 1e9));
  return `${words.slice(0, keep).join(' ')} ${fresh}`;
}

/** The whole plan for `opts` (DEFAULTS overridden). Deterministic in opts. */
export function makeTrace(options = {}) {
  const o = { ...DEFAULTS, ...options };
  const r = rng(o.seed * 7919 + 17);
  const sessions = Object.fromEntries(PERSONAS.map((p) => [p, 0]));
  const conversations = [];
  let total = 0;
  for (let c = 0; c < o.conversations; c++) {
    const persona = c < PERSONAS.length ? PERSONAS[c] : (() => {
      const x = r();
      return x < 0.4 ? 'forge' : x < 0.7 ? 'carmen' : 'forge2';
    })();
    const session = sessions[persona]++;
    const prompt = personaPrompt(persona, session, o.personaScale);
    const own = o.coldPersonas ? `You are agent ${c + 1} of this team (${PROJECTS[c % PROJECTS.length]} desk, persona ${persona}).\n\n` : '';
    const system = own + withSessionLines(prompt.system, o.systemVariation ?? 'none', persona, session);
    const { tools } = prompt;
    const nSteps = between(r, o.turnsMin, o.turnsMax);
    const steps = [];
    let lastUser = null;
    for (let i = 0; i < nSteps; i++) {
      const step = { index: i, maxTokens: between(r, o.maxTokensMin, o.maxTokensMax) };
      if (i === 0 || r() >= o.pTool) {
        step.turn = 'user';
        step.user = prose(between(r, o.userMin, o.userMax), Math.floor(r() * 1e9));
        lastUser = step.user;
      } else {
        step.turn = 'tool';
        step.tool = toolStep(persona, between(r, o.toolMin, o.toolMax), Math.floor(r() * 1e9));
      }
      const e = r();
      if (e < o.pRegenerate) {
        step.event = 'regenerate';
        step.eventMaxTokens = between(r, o.maxTokensMin, o.maxTokensMax);
      } else if (e < o.pRegenerate + o.pEdit) {
        step.event = 'edit';
        step.edit = editOf(lastUser, r);
        lastUser = step.edit;
        step.eventMaxTokens = between(r, o.maxTokensMin, o.maxTokensMax);
      } else if (e < o.pRegenerate + o.pEdit + o.pDrop) {
        step.event = 'drop';
        step.dropAfter = between(r, o.dropAfterMin, o.dropAfterMax);
      }
      total += step.event ? 2 : 1;
      steps.push(step);
    }
    conversations.push({ id: c, persona, session, system, tools, steps });
  }
  return { options: o, conversations, totalRequests: total, restartAfter: Math.round(o.restartAt * total) };
}
