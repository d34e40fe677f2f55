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
// Side calls (`sideCalls` N > 0, off by default): after each step's requests (its reply and any
// regenerate, edit or retry), N short requests that agents make beside their sessions, in the same
// conversation's flow before its next step: a title, a summary, a classification, a subagent's
// first step (SIDE_KINDS, in turn). Each kind has a short system text of its own, the same in every
// call of that kind, and a user message that quotes a window of the conversation's text ending in
// its latest step, so every side call's prompt is new; max_tokens 8-16. They are planned with an
// rng of their own: the conversations, steps and events are the same as without them.
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
  // sideCalls (likewise; 0: none): side calls after each step (SIDE_KINDS; see above), with
  // sideQuoteMin/Max (SIDE_DEFAULTS) tokens quoted and sideMaxTokensMin/Max tokens to generate.
};

/** The side-call options' defaults, used only when sideCalls > 0 (so the default trace's options
 *  stay the same). */
export const SIDE_DEFAULTS = { sideQuoteMin: 40, sideQuoteMax: 240, sideMaxTokensMin: 8, sideMaxTokensMax: 16 };

/** What agents send beside a session, in the order a step's side calls take them. */
export const SIDE_KINDS = ['title', 'summary', 'classify', 'subagent'];

/** Each kind's first lines (its task; written for this trace) and the tokens of prose after them. */
const SIDE_TASKS = {
  title: ['You name conversations for a sidebar. Reply with a title of at most six words for the excerpt ' +
    'the user sends: no quotes, no punctuation at the end.', 60, 101],
  summary: ['You keep the session log of a coding agent. Reply with one sentence that says what the excerpt ' +
    'the user sends is about and what is still open.', 120, 102],
  classify: ['You route messages. Reply with exactly one label for the excerpt the user sends: question, ' +
    'bug_report, change_request, status_update, errand or other.', 90, 103],
  subagent: ['You are a research subagent started by a coding agent. You get one task and answer it alone, ' +
    'without asking back: read what you need, then reply with at most three short lines of findings.', 320, 104],
};

/** The system text of side-call kind `kind`: its task, then context prose (deterministic). */
export function sideSystem(kind) {
  const [task, tokens, seed] = SIDE_TASKS[kind];
  return `${task}\n\n# Context\n\n${prose(tokens, seed)}`;
}

/** The first line of a side call's user message, before the excerpt. */
const SIDE_ASKS = {
  title: 'Title this conversation. Excerpt:',
  summary: 'Summarize for the log. Excerpt:',
  classify: 'Label this message. Excerpt:',
  subagent: 'Task from the main agent: find what the passage below refers to and report back. Passage:',
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
  const o = { ...DEFAULTS, ...(options.sideCalls > 0 ? SIDE_DEFAULTS : {}), ...options };
  const r = rng(o.seed * 7919 + 17);
  // Side calls draw from their own rng: the rest of the trace is the same with or without them.
  const rs = rng(o.seed * 104729 + 71);
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
    const said = [];  // the conversation's text so far, in words (side calls quote from it)
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
      if (o.sideCalls > 0) {
        const latest = (step.turn === 'user' ? (step.edit ?? step.user) : step.tool.result).split(/\s+/).filter(Boolean);
        step.side = sideCallsOf(o, rs, said, latest);
        total += step.side.length;
      }
      steps.push(step);
    }
    conversations.push({ id: c, persona, session, system, tools, steps });
  }
  const trace = { options: o, conversations, totalRequests: total, restartAfter: Math.round(o.restartAt * total) };
  if (o.sideCalls > 0) trace.sideSystems = Object.fromEntries(SIDE_KINDS.slice(0, o.sideCalls).map((k) => [k, sideSystem(k)]));
  return trace;
}

/** A step's side calls: [{kind, user, maxTokens}], each quoting a window of the
 *  conversation's words that ends inside the step's latest text (`latest`, appended to `said`). */
function sideCallsOf(o, rs, said, latest) {
  const start = said.length;
  said.push(...latest);
  const out = [];
  for (let k = 0; k < o.sideCalls; k++) {
    const kind = SIDE_KINDS[k % SIDE_KINDS.length];
    const words = Math.max(3, Math.round(between(rs, o.sideQuoteMin, o.sideQuoteMax) / 1.3));
    // The window ends in the second half of the latest text (at its end for a short one).
    const end = latest.length < 8 ? said.length : start + Math.ceil(latest.length / 2) + Math.floor(rs() * Math.floor(latest.length / 2)) + 1;
    const from = Math.max(0, Math.min(end, said.length) - words);
    const excerpt = said.slice(from, Math.min(end, said.length)).join(' ');
    out.push({ kind, user: `${SIDE_ASKS[kind]}\n\n${excerpt}`,
      maxTokens: between(rs, o.sideMaxTokensMin, o.sideMaxTokensMax) });
  }
  return out;
}
