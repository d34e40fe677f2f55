// The benchmark's personas and scripted content (docs/benchmarks/README.md "What the trace is"):
// three system prompts of system text + tool schemas, ~2,000-4,000 tokens each as the Qwen3.5
// template renders them:
//   forge   a coding agent: the demo's persona (tools/demo/persona.mjs, imported; the digest
//           check in tests/e2e/personas.test.mjs fails when a demo change would move the
//           benchmark): system text + nine tools;
//   forge2  its sibling: the same text but for a few tokens near the end (repository name and
//           word budget), as two variants of one coding tool's prompt differ;
//   carmen  a personal assistant whose system text carries a timestamp line that changes per
//           session (as scheduled agents stamp the time they run), near its end.
// `scale` (>= 1) appends project-notes sections to every system text, to scale the personas
// up towards the 9-12k tokens of a real coding agent's system prompt + tools on faster hardware.
// Everything here is deterministic: the same arguments give the same text on every run.

import { CODE, TOOLS, bool, fn, int, rng, str, systemText } from '../demo/persona.mjs';

export { rng };

const pick = (r, xs) => xs[Math.floor(r() * xs.length)];

// --- Filler prose (user messages, notes) ------------------------------------------------------

const SENTENCES = [
  'The lineage suite passes locally about four times out of five, but CI fails on the same assertion every time.',
  'Please keep the public interface unchanged, other people are working against it right now.',
  'I think the restore point is one edge too short when the prompt diverges inside an edge.',
  'Can you check whether the guard checkpoint is still taken when the uncached suffix is short?',
  'Run the narrowest test first and then the whole module before you tell me it works.',
  'The disk tier keeps files of absorbed entries around longer than it should.',
  'Summarize what you changed, why, and how you verified it, in a few bullet points.',
  'The benchmark numbers look off for new sessions; the anchor should make them warm.',
  'Look at how the scheduler admits a request while another one is still prefilling.',
  'I would rather not add a dependency for this; the standard library should be enough.',
  'There is a race between the HTTP thread and the engine thread when a client disconnects.',
  'Add one test that reproduces the bug before you fix it, and make sure it fails first.',
  'The log shows two prefill chunks for a sixteen-token suffix, which looks wasteful.',
  'Keep the change small enough that I can review it in ten minutes.',
  'What happens to the checkpoints of an entry when it is evicted from RAM?',
  'Explain the difference between a turn boundary and a guard checkpoint in two sentences.',
  'Compare the time to first token before and after the change on the long conversation.',
  'Does the template re-render the previous assistant turn differently from how it was generated?',
  'The RAM budget is exceeded briefly during a commit; find out where the reservation is lost.',
  'Please also update the architecture notes if the behaviour changes.',
  'Remind me to call the dentist tomorrow at ten and move the team sync to Thursday.',
  'Draft a short reply to Ana saying the report will be ready on Friday afternoon.',
  'What is on my calendar for next week, and which meetings can I skip?',
  'Find the flight confirmation from last month and tell me the booking reference.',
  'Add milk, coffee beans and batteries to the shopping list.',
];

/** About `nTokens` tokens of English-like prose (sentences from a fixed pool, ~1.3 tokens a
 *  word), deterministic in `seed`. */
export function prose(nTokens, seed) {
  const r = rng(seed);
  const out = [];
  let n = 0;
  while (n < nTokens) {
    let s = pick(r, SENTENCES);
    if (nTokens - n < 14) s = s.split(' ').slice(0, Math.max(2, Math.round((nTokens - n) / 1.3))).join(' ');
    out.push(s);
    n += Math.round(s.split(' ').length * 1.3) + 1;
  }
  return out.join(' ');
}

// --- Coding-agent persona (forge, forge2): the demo's own text and tools ---------------------------

const forgeSystem = (variant) => systemText({ variant });
const FORGE_TOOLS = TOOLS;

// --- Personal-assistant persona (carmen), with a per-session timestamp ---------------------------

function carmenSystem(timestamp) {
  return `You are Carmen, a personal assistant who manages the calendar, mail, notes, reminders and errands of one person, Lena, through the tools listed above. You act on Lena's behalf only within what she has asked for or what her standing instructions below allow.

# Standing instructions

1. Calendar. Never accept, decline or move a meeting with more than three participants without asking first. One-to-one meetings may be moved within the same day when Lena asks you to make room. Always leave fifteen minutes between meetings that are in different places, and never schedule anything before 08:30 or after 18:30 on weekdays, or at all on weekends, unless Lena says so explicitly.
2. Mail. Draft replies in Lena's voice: short, friendly, no exclamation marks, first names only. Never send a message without showing Lena the draft, except for confirmations of appointments she has already agreed to. Summaries of the inbox list the sender, the subject and one line on what the sender wants, most urgent first.
3. Notes and lists. Keep the shopping list, the reading list and the travel checklist in the notes tool, one item per line. When Lena mentions something she needs, add it without asking and say so in one line.
4. Reminders. A reminder has a time, a short title and, when useful, a link to the mail or note it is about. Confirm each reminder you set by repeating its time in Lena's time zone.
5. Errands and purchases. You may look up prices, opening hours and availability, but you never buy anything or give card details. Suggest at most three options, cheapest first, with the reason for each.
6. Privacy. Never share Lena's calendar, contacts or messages with anyone but Lena. When a message asks for personal information, flag it as suspicious instead of answering.

# How you answer

- Lead with what you did or found, then what needs Lena's decision. Use short bullet points for lists and plain sentences otherwise.
- When a tool fails or returns nothing, say so plainly and suggest the next step; never invent an appointment, a message or a booking reference.
- Dates are written as weekday, day month (e.g. Thursday 12 March) and times in 24-hour format in Lena's time zone (Europe/Madrid), unless she asks otherwise.
- When a request is ambiguous (which Ana? which week?), make the most likely choice, say which one you made, and offer the alternative in one line.

# Lena's context

- Works as an engineering manager; her team sync is on Tuesdays at 10:00, one-to-ones are on Wednesdays and Thursdays, and Fridays after 14:00 are kept free for focused work.
- Frequent contacts: Ana (manager), Jorge (partner), Dr. Ruiz (dentist), the Sunday football group, and the building administrator.
- Prefers trains to flights for trips under five hours; seat by the window, quiet coach.

Current date and time: ${timestamp}.`;
}

const CARMEN_TOOLS = [
  fn('calendar_list',
    'List the events of Lena\'s calendar between two dates, inclusive, with their title, start and end time, place, participants and status (confirmed, tentative, cancelled). Use it before proposing or moving any meeting. Results are ordered by start time and capped at max_results.',
    {
      from_date: str('First day to list, ISO 8601 (YYYY-MM-DD).'),
      to_date: str('Last day to list, ISO 8601 (YYYY-MM-DD). At most 31 days after from_date.'),
      max_results: int('Maximum number of events. Defaults to 50.', { minimum: 1, maximum: 500 }),
    }, ['from_date', 'to_date']),
  fn('calendar_create',
    'Create an event in Lena\'s calendar. Checks for conflicts first and fails with a description of the conflicting events instead of double-booking. Invitations are sent to the participants only when notify is true.',
    {
      title: str('Short title of the event.'),
      start: str('Start time, ISO 8601 with time zone offset.'),
      end: str('End time, ISO 8601 with time zone offset.'),
      place: str('Address or meeting link.'),
      participants: { type: 'array', items: { type: 'string' }, description: 'E-mail addresses of the other participants.' },
      notify: bool('Send invitations to the participants. Defaults to false.'),
    }, ['title', 'start', 'end']),
  fn('calendar_move',
    'Move an existing event to a new time, keeping its duration, place and participants. Fails when the new time conflicts with another event, and says which.',
    {
      event_id: str('The id returned by calendar_list.'),
      new_start: str('New start time, ISO 8601 with time zone offset.'),
      notify: bool('Tell the participants about the change. Defaults to true.'),
    }, ['event_id', 'new_start']),
  fn('mail_search',
    'Search Lena\'s mailbox and return matching messages with sender, date, subject and the first 300 characters of the body. Supports the operators from:, to:, subject:, after:, before: and has:attachment, combined with free text.',
    {
      query: str('Search query, e.g. "from:ana subject:report after:2025-01-01".'),
      max_results: int('Maximum number of messages. Defaults to 20.', { minimum: 1, maximum: 200 }),
    }, ['query']),
  fn('mail_draft',
    'Create a draft reply or a new message. The draft is saved, not sent; Lena reviews it in her mail client. Returns the id of the draft.',
    {
      to: { type: 'array', items: { type: 'string' }, description: 'Recipients.' },
      subject: str('Subject line.'),
      body: str('Plain-text body in Lena\'s voice.'),
      reply_to_id: str('Id of the message this replies to, if any.'),
    }, ['to', 'subject', 'body']),
  fn('notes_update',
    'Add or remove lines in one of Lena\'s notes (shopping list, reading list, travel checklist or any other note by title). Creates the note when it does not exist.',
    {
      title: str('Title of the note, e.g. "Shopping list".'),
      add: { type: 'array', items: { type: 'string' }, description: 'Lines to add.' },
      remove: { type: 'array', items: { type: 'string' }, description: 'Lines to remove (exact match).' },
    }, ['title']),
  fn('reminder_set',
    'Set a reminder that notifies Lena on her phone at the given time. Returns the reminder id and the time as it will be shown to her.',
    {
      time: str('When to remind, ISO 8601 with time zone offset.'),
      title: str('Short text of the reminder.'),
      link: str('Optional link to a mail, note or event.'),
    }, ['time', 'title']),
  fn('web_search',
    'Search the web and return the top results with title, URL and a snippet. Use it for opening hours, prices, train times and public information only, never for anything about Lena.',
    {
      query: str('Search query.'),
      max_results: int('Maximum number of results. Defaults to 5.', { minimum: 1, maximum: 20 }),
    }, ['query']),
];

// --- Personas -----------------------------------------------------------------------------------------

/** Project-notes sections that scale a system text up (`extraTokens` tokens, deterministic). */
function notes(extraTokens, seed) {
  if (extraTokens <= 0) return '';
  const out = [];
  let n = 0;
  for (let i = 1; n < extraTokens; i++) {
    const size = Math.min(400, extraTokens - n);
    out.push(`## Note ${i}\n\n${prose(size, seed * 1000 + i)}`);
    n += size + 6;
  }
  return `\n\n# Notes\n\n${out.join('\n\n')}`;
}

/** Approximate tokens of a persona at scale 1, rendered (used to size the notes for `scale`). */
const BASE_TOKENS = { forge: 3100, forge2: 3100, carmen: 2600 };

/** A session's timestamp for carmen: a fixed base plus 37 minutes per session. */
function timestampFor(session) {
  const t = new Date(Date.UTC(2026, 2, 9, 7, 12, 0) + session * 37 * 60_000);
  const wd = ['Sunday', 'Monday', 'Tuesday', 'Wednesday', 'Thursday', 'Friday', 'Saturday'][t.getUTCDay()];
  const mo = ['January', 'February', 'March', 'April', 'May', 'June', 'July', 'August', 'September', 'October',
    'November', 'December'][t.getUTCMonth()];
  const hh = String(t.getUTCHours() + 1).padStart(2, '0');
  const mm = String(t.getUTCMinutes()).padStart(2, '0');
  return `${wd} ${t.getUTCDate()} ${mo} ${t.getUTCFullYear()}, ${hh}:${mm} (Europe/Madrid)`;
}

export const PERSONAS = ['forge', 'carmen', 'forge2'];
/** Personas that are siblings of each other (differ by a few tokens). */
export const SIBLINGS = { forge: 'forge2', forge2: 'forge' };

/** The system text and tools of `persona` for session number `session` (0-based, per persona). */
export function personaPrompt(persona, session, scale = 1) {
  const extra = Math.round((scale - 1) * BASE_TOKENS[persona]);
  switch (persona) {
    case 'forge': return { system: forgeSystem(0) + notes(extra, 1), tools: FORGE_TOOLS };
    case 'forge2': return { system: forgeSystem(1) + notes(extra, 1), tools: FORGE_TOOLS };
    case 'carmen': return { system: carmenSystem(timestampFor(session)).replace(/\n\nCurrent date/, notes(extra, 2) + '\n\nCurrent date'), tools: CARMEN_TOOLS };
    default: throw new Error(`unknown persona ${persona}`);
  }
}

// --- Tool calls and results ----------------------------------------------------------------------

const FILES = ['src/cache/trie.cpp', 'src/cache/lineage.cpp', 'src/cache/policy.cpp', 'tests/cache/test_trie.cpp',
  'src/engine/restore.cpp', 'src/scheduler/scheduler.cpp', 'src/server/routes.cpp'];
const TESTS = ['TrieTest.LongestPrefix', 'TrieTest.DivergesInsideEdge', 'LineageTest.AbsorbKeepsCheckpoints',
  'LineageTest.ThinDropsGuardsFirst', 'TierTest.DiskEntrySurvivesRestart', 'TierTest.DamagedFileIsRemoved',
  'PolicyTest.AnchorsArePinned', 'PolicyTest.EvictionOrderIsLru', 'KeysTest.BucketIncludesTemplateSig'];

function fileResult(nTokens, r) {
  const path = pick(r, FILES);
  const nLines = Math.max(2, Math.round(nTokens / 13));
  const start = 1 + Math.floor(r() * 300);
  const lines = [];
  for (let i = 0; i < nLines; i++) lines.push(`${start + i}\t${CODE[(i + Math.floor(r() * 3)) % CODE.length]}`);
  return { name: 'read_file', args: { path, start_line: start, end_line: start + nLines - 1 },
    result: `${path} (lines ${start}-${start + nLines - 1})\n${lines.join('\n')}` };
}

function testResult(nTokens, r) {
  const nTests = Math.max(2, Math.round(nTokens / 28));
  const nFail = Math.floor(r() * 2);
  const out = ['Test project /work/repo/build'];
  for (let i = 0; i < nTests; i++) {
    const name = TESTS[i % TESTS.length] + (i >= TESTS.length ? `/${i}` : '');
    out.push(`${String(i + 1).padStart(3)}/${nTests} Test #${i + 1}: ${name.padEnd(42, '.')} ${i < nFail ? '***Failed' : '   Passed'}  ${(r() * 0.9).toFixed(2)} sec`);
  }
  out.push('', `${Math.round(100 * (nTests - nFail) / nTests)}% tests passed, ${nFail} tests failed out of ${nTests}`);
  return { name: 'run_tests', args: { suite: 'unit', filter: 'trie|lineage' }, result: out.join('\n') };
}

function searchResult(nTokens, r) {
  const n = Math.max(1, Math.round(nTokens / 22));
  const pattern = pick(r, ['longest', 'absorb', 'checkpoint', 'restore_point', 'thin']);
  const out = [];
  for (let i = 0; i < n; i++) out.push(`${pick(r, FILES)}:${10 + Math.floor(r() * 400)}: ${pick(r, CODE).trim()}`);
  return { name: 'search_code', args: { pattern }, result: `${n} matches for /${pattern}/\n${out.join('\n')}` };
}

function mailResult(nTokens, r) {
  const n = Math.max(1, Math.round(nTokens / 60));
  const out = [];
  for (let i = 0; i < n; i++) {
    out.push(`- id m${Math.floor(r() * 1e6)} | from ${pick(r, ['ana@work.example', 'jorge@home.example', 'recepcion@clinica.example', 'admin@building.example'])} | ${2 + Math.floor(r() * 27)} Feb | subject: ${pick(r, ['Quarterly report', 'Dinner on Saturday', 'Appointment confirmation', 'Water outage notice', 'Train tickets'])}\n  ${prose(40, Math.floor(r() * 1e6))}`);
  }
  return { name: 'mail_search', args: { query: 'after:2026-02-01' }, result: out.join('\n') };
}

function calendarResult(nTokens, r) {
  const n = Math.max(1, Math.round(nTokens / 30));
  const out = [];
  for (let i = 0; i < n; i++) {
    const h = 9 + Math.floor(r() * 9);
    out.push(`- ev${Math.floor(r() * 1e5)} | ${pick(r, ['Mon', 'Tue', 'Wed', 'Thu', 'Fri'])} ${10 + Math.floor(r() * 18)} Mar ${h}:00-${h}:45 | ${pick(r, ['Team sync', '1:1 Ana', 'Dentist', 'Hiring loop', 'Planning', 'Football'])} | ${pick(r, ['Room 4B', 'Video call', 'Calle Mayor 12', 'Office'])} | confirmed`);
  }
  return { name: 'calendar_list', args: { from_date: '2026-03-09', to_date: '2026-03-15' }, result: out.join('\n') };
}

/** A scripted tool call of `persona` with a result of about `nTokens` tokens, deterministic in `seed`:
 *  {preamble, call: {id, type, function: {name, arguments}}, result}. */
export function toolStep(persona, nTokens, seed) {
  const r = rng(seed);
  const gens = persona === 'carmen' ? [mailResult, calendarResult] : [fileResult, testResult, searchResult];
  const g = pick(r, gens)(nTokens, r);
  const id = `call_${(seed >>> 0).toString(36)}`;
  return {
    preamble: r() < 0.5 ? null : pick(r, ['Let me check that.', 'Looking into it.', 'One moment, reading the relevant part first.']),
    call: { id, type: 'function', function: { name: g.name, arguments: JSON.stringify(g.args) } },
    result: g.result,
  };
}
