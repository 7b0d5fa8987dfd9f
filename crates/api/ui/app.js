// browserd dashboard: plain ES module, no framework, no build step. It uses the public /v1 API
// with the key the user signs in with, kept in this tab's sessionStorage only. Every value from
// the server is put into the page with textContent (never as HTML). The key never opens a
// WebSocket: each socket is opened with a single-use ticket, `view` for the event stream and the
// live view, and `control` only while a person takes over (ticked "Take over").
//
// What it reads from the server is checked against the Rust types by
// tests/tests/dashboard_contract.rs: an event's `p.field` per `case 'kind':` of onEvent against
// that kind's payload (browserd_types::EventBody), and `x.field` chains of every name typed
// with a JSDoc `@param {Shape} x` or `@type {Shape}` against that shape (TaskView, AgentOutput,
// ActionResult, AgentHistory, StepMetadata, UsageSummary, ScheduleView, ScheduleRunView). Keep
// reads in those forms.

const KEY_STORAGE = 'browserd.apiKey';
const TERMINAL = new Set(['finished', 'failed', 'stopped']);
const STATUSES = ['queued', 'running', 'paused', 'waiting', 'finished', 'failed', 'stopped'];
// Which control buttons each status allows (the server's status machine).
const CONTROLS = {
  queued: ['pause', 'stop'],
  running: ['pause', 'stop'],
  paused: ['resume', 'stop'],
  waiting: ['stop'],
};
const LIST_REFRESH_MS = 3000;
const RECONNECT_MIN_MS = 250;
const RECONNECT_MAX_MS = 5000;

// ---------------------------------------------------------------------------------------------
// Small helpers

function el(tag, attrs = {}, ...children) {
  const node = document.createElement(tag);
  for (const [name, value] of Object.entries(attrs)) {
    if (value === undefined || value === null || value === false) continue;
    if (name === 'class') node.className = value;
    else if (name === 'text') node.textContent = value;
    else if (name.startsWith('on')) node.addEventListener(name.slice(2), value);
    else if (value === true) node.setAttribute(name, '');
    else node.setAttribute(name, String(value));
  }
  for (const child of children.flat()) {
    if (child === undefined || child === null || child === false) continue;
    node.append(child instanceof Node ? child : document.createTextNode(String(child)));
  }
  return node;
}

function apiKey() {
  return sessionStorage.getItem(KEY_STORAGE);
}

function flash(message) {
  const box = document.getElementById('flash');
  box.textContent = message || '';
  box.hidden = !message;
}

function badge(status) {
  return el('span', { class: `badge ${status}`, 'data-status': status, text: status });
}

function when(iso) {
  if (!iso) return '';
  const date = new Date(iso);
  return Number.isNaN(date.getTime()) ? iso : date.toLocaleString();
}

function seconds(value) {
  return typeof value === 'number' && Number.isFinite(value) ? `${value.toFixed(1)} s` : '';
}

class ApiError extends Error {
  constructor(status, code, message) {
    super(message);
    this.status = status;
    this.code = code;
  }
}

// Calls the API with the key; resolves to parsed JSON (or the Response when `raw`).
async function api(path, { method = 'GET', body, raw = false } = {}) {
  const headers = { Authorization: `Bearer ${apiKey()}` };
  if (body !== undefined) headers['Content-Type'] = 'application/json';
  const response = await fetch(path, {
    method,
    headers,
    body: body === undefined ? undefined : JSON.stringify(body),
    cache: 'no-store',
  });
  if (!response.ok) {
    let code = 'http_error';
    let message = `${response.status} ${response.statusText}`;
    try {
      const data = await response.json();
      if (data && data.error) {
        code = data.error.code || code;
        message = data.error.message || message;
      }
    } catch (_) {
      // Not JSON: keep the status line.
    }
    if (response.status === 401) {
      signOut(`Signed out: ${message}`);
    }
    throw new ApiError(response.status, code, message);
  }
  if (raw) return response;
  if (response.status === 204) return null;
  return response.json();
}

function wsUrl(path) {
  const scheme = location.protocol === 'https:' ? 'wss:' : 'ws:';
  return `${scheme}//${location.host}${path}`;
}

// ---------------------------------------------------------------------------------------------
// Routing: #/ (tasks), #/tasks/<id> (one task), #/schedules. Leaving a view runs its cleanup.

let cleanup = [];

function onLeave(fn) {
  cleanup.push(fn);
}

function leave() {
  for (const fn of cleanup.splice(0)) {
    try {
      fn();
    } catch (err) {
      console.warn('cleanup failed', err);
    }
  }
}

function route() {
  leave();
  flash('');
  const app = document.getElementById('app');
  app.replaceChildren();
  document.getElementById('nav').hidden = !apiKey();
  if (!apiKey()) {
    renderSignIn(app);
    return;
  }
  const match = location.hash.match(/^#\/tasks\/([0-9a-fA-F-]{36})$/);
  if (match) renderTask(app, match[1]);
  else if (location.hash === '#/schedules') renderSchedules(app);
  else renderTasks(app);
}

function signOut(message) {
  sessionStorage.removeItem(KEY_STORAGE);
  route();
  if (message) flash(message);
}

// ---------------------------------------------------------------------------------------------
// Sign in

function renderSignIn(app) {
  const input = el('input', {
    id: 'api-key', type: 'password', autocomplete: 'off', spellcheck: 'false',
    placeholder: 'bd_…', required: true,
  });
  const error = el('p', { class: 'error', id: 'sign-in-error' });
  const form = el('form', { class: 'card signin', id: 'sign-in' },
    el('h1', { text: 'Sign in' }),
    el('p', { class: 'muted', text: 'Use an API key of this server (browserd keys create). It stays in this browser tab only.' }),
    el('label', { for: 'api-key', text: 'API key' }), input,
    el('div', { class: 'actions' }, el('button', { class: 'primary', type: 'submit', text: 'Sign in' })),
    error);
  form.addEventListener('submit', async (event) => {
    event.preventDefault();
    error.textContent = '';
    const key = input.value.trim();
    if (!key) return;
    try {
      const response = await fetch('/v1/tasks?limit=1', {
        headers: { Authorization: `Bearer ${key}` }, cache: 'no-store',
      });
      if (response.status === 401) {
        error.textContent = 'This key is not valid on this server.';
        return;
      }
      if (!response.ok) {
        error.textContent = `The server answered ${response.status}.`;
        return;
      }
      sessionStorage.setItem(KEY_STORAGE, key);
      route();
    } catch (err) {
      error.textContent = `Could not reach the server: ${err.message}`;
    }
  });
  app.append(form);
  input.focus();
}

// ---------------------------------------------------------------------------------------------
// Task list and the new task form

function renderTasks(app) {
  const filter = el('select', { id: 'status-filter', 'aria-label': 'Status' },
    el('option', { value: '', text: 'All statuses' }),
    STATUSES.map((s) => el('option', { value: s, text: s })));
  const saved = sessionStorage.getItem('browserd.statusFilter') || '';
  filter.value = STATUSES.includes(saved) ? saved : '';
  const body = el('tbody', { id: 'task-rows' });
  const more = el('button', { id: 'load-more', type: 'button', text: 'Load more', hidden: true });
  const table = el('table', { id: 'tasks' },
    el('thead', {}, el('tr', {}, ['Status', 'Task', 'Model', 'Created', 'Model calls'].map((h) => el('th', { text: h })))),
    body);
  app.append(
    el('h1', { text: 'Tasks' }),
    renderNewTaskForm(),
    el('div', { class: 'toolbar' }, el('label', { for: 'status-filter', text: 'Show' }), filter,
      el('span', { class: 'muted', id: 'list-state' })),
    table, el('div', { class: 'actions' }, more));

  let cursor = null;
  let timer = null;
  let extraPages = false;
  let stopped = false;
  onLeave(() => {
    stopped = true;
    clearTimeout(timer);
  });

  /** @param {TaskView} task */
  function row(task) {
    const calls = task.usage && typeof task.usage.invocations === 'number' ? task.usage.invocations : '';
    return el('tr', { 'data-task-id': task.id },
      el('td', {}, badge(task.status)),
      el('td', { class: 'task-text', title: task.task }, el('a', { href: `#/tasks/${task.id}`, text: task.task })),
      el('td', { text: task.model || 'default' }),
      el('td', { text: when(task.created_at) }),
      el('td', { text: calls }));
  }

  async function load(append) {
    const params = new URLSearchParams({ limit: '25' });
    if (filter.value) params.set('status', filter.value);
    if (append && cursor) params.set('cursor', cursor);
    try {
      const page = await api(`/v1/tasks?${params}`);
      if (stopped) return;
      const rows = page.items.map(row);
      if (append) body.append(...rows);
      else body.replaceChildren(...rows);
      if (!append) extraPages = false;
      cursor = page.next_cursor;
      more.hidden = !cursor;
      document.getElementById('list-state').textContent =
        body.children.length === 0 ? 'No tasks yet.' : '';
    } catch (err) {
      if (!stopped && err.status !== 401) flash(`Could not load tasks: ${err.message}`);
    }
  }

  // Live status: refresh the first page while the tab is visible (not when more pages are
  // shown, which would reorder them under the reader).
  async function refresh() {
    if (stopped) return;
    if (document.visibilityState === 'visible' && !extraPages) await load(false);
    if (!stopped) timer = setTimeout(refresh, LIST_REFRESH_MS);
  }

  filter.addEventListener('change', () => {
    sessionStorage.setItem('browserd.statusFilter', filter.value);
    cursor = null;
    load(false);
  });
  more.addEventListener('click', () => {
    extraPages = true;
    load(true);
  });
  refresh();
}

function renderNewTaskForm() {
  const model = el('select', { id: 'new-model' }, el('option', { value: '', text: 'Server default' }));
  const error = el('p', { class: 'error', id: 'new-task-error' });
  const form = el('form', { class: 'card', id: 'new-task' },
    el('h2', { text: 'Start a task' }),
    el('label', { for: 'new-task-text', text: 'Task' }),
    el('textarea', { id: 'new-task-text', required: true, placeholder: 'Find the cheapest 27-inch monitor and add it to the cart' }),
    el('div', { class: 'row' },
      el('div', {}, el('label', { for: 'new-model', text: 'Model' }), model),
      el('div', {}, el('label', { for: 'new-start-url', text: 'Start URL' }),
        el('input', { id: 'new-start-url', type: 'url', placeholder: 'https://…' })),
      el('div', {}, el('label', { for: 'new-max-steps', text: 'Max steps' }),
        el('input', { id: 'new-max-steps', type: 'number', min: '1', step: '1', placeholder: '100' }))),
    el('label', { for: 'new-allowed-domains' }, 'Allowed domains ', el('small', { text: '(one pattern per line or comma-separated; empty: any)' })),
    el('textarea', { id: 'new-allowed-domains', class: 'code', placeholder: '*.example.com' }),
    el('label', { for: 'new-output-schema' }, 'Output schema ', el('small', { text: '(JSON Schema; empty: free text)' })),
    el('textarea', { id: 'new-output-schema', class: 'code', placeholder: '{"type": "object", "properties": {…}}' }),
    el('div', { class: 'actions' }, el('button', { class: 'primary', type: 'submit', id: 'new-submit', text: 'Start task' })),
    error);

  api('/v1/models').then((list) => {
    for (const name of list.models) model.append(el('option', { value: name, text: name }));
    if (list.default) model.options[0].textContent = `Server default (${list.default})`;
  }).catch((err) => {
    if (err.status !== 401) error.textContent = `Could not load the models: ${err.message}`;
  });

  form.addEventListener('submit', async (event) => {
    event.preventDefault();
    error.textContent = '';
    const request = { task: form.querySelector('#new-task-text').value.trim() };
    if (!request.task) {
      error.textContent = 'Describe the task.';
      return;
    }
    if (model.value) request.model = model.value;
    const startUrl = form.querySelector('#new-start-url').value.trim();
    if (startUrl) request.start_url = startUrl;
    const maxSteps = form.querySelector('#new-max-steps').value.trim();
    if (maxSteps) request.max_steps = Number(maxSteps);
    const domains = form.querySelector('#new-allowed-domains').value
      .split(/[\s,]+/).map((d) => d.trim()).filter(Boolean);
    if (domains.length) request.allowed_domains = domains;
    const schema = form.querySelector('#new-output-schema').value.trim();
    if (schema) {
      try {
        request.output_schema = JSON.parse(schema);
      } catch (err) {
        error.textContent = `The output schema is not valid JSON: ${err.message}`;
        return;
      }
    }
    const submit = form.querySelector('#new-submit');
    submit.disabled = true;
    try {
      const task = await api('/v1/tasks', { method: 'POST', body: request });
      location.hash = `#/tasks/${task.id}`;
    } catch (err) {
      error.textContent = err.message;
    } finally {
      submit.disabled = false;
    }
  });
  return form;
}

// ---------------------------------------------------------------------------------------------
// One task: live steps, controls, live view, result, history download

function renderTask(app, id) {
  const status = el('span', { id: 'task-status' });
  const title = el('h1', { id: 'task-title', text: 'Task' });
  const buttons = {
    pause: el('button', { type: 'button', id: 'pause', text: 'Pause', disabled: true }),
    resume: el('button', { type: 'button', id: 'resume', text: 'Resume', disabled: true }),
    stop: el('button', { type: 'button', id: 'stop', class: 'danger', text: 'Stop', disabled: true }),
  };
  const download = el('button', { type: 'button', id: 'download-history', text: 'Download history JSON' });
  const details = el('p', { class: 'muted', id: 'task-details' });
  const result = el('div', { class: 'card', id: 'result', hidden: true });
  // The question the agent asks (`ask_human`) with an answer box, while the task waits.
  const question = el('form', { class: 'card question', id: 'question', hidden: true });
  const steps = el('div', { id: 'steps' });
  const liveImg = el('img', { id: 'live-frame', alt: 'Live view of the task\'s page', tabindex: '0' });
  const liveState = el('p', { class: 'muted', id: 'live-state', text: 'Connecting…' });
  // Take-over: while paused, the person's clicks, wheel and keys on the frame go to the page.
  const takeOverToggle = el('input', { type: 'checkbox', id: 'take-over' });
  const secretText = el('input', { type: 'password', id: 'take-over-secret', placeholder: 'Secret text (e.g. a password)', autocomplete: 'off' });
  const secretSend = el('button', { type: 'button', id: 'take-over-secret-send', text: 'Type secret' });
  const takeOverState = el('p', { class: 'muted', id: 'take-over-state' });
  const takeOver = el('div', { class: 'take-over', id: 'take-over-panel', hidden: true },
    el('label', {}, takeOverToggle, ' Take over: drive the page (click, scroll and type on the frame)'),
    el('div', { class: 'take-over-secret' }, secretText, secretSend),
    takeOverState);
  const live = el('div', { class: 'card live', id: 'live' }, el('h2', { text: 'Live view' }), liveImg, liveState, takeOver);

  app.append(
    el('div', { class: 'task-head' }, title, status),
    details,
    el('div', { class: 'actions' }, buttons.pause, buttons.resume, buttons.stop, download),
    question,
    result,
    el('div', { class: 'grid' },
      el('section', {}, el('h2', { text: 'Steps' }), steps,
        el('p', { class: 'muted', id: 'steps-empty', text: 'No steps yet.' })),
      el('aside', {}, live)));

  let current = null;
  let stopped = false;
  let liveSocket = null;
  let frameUrl = null;
  const objectUrls = [];
  onLeave(() => {
    stopped = true;
    if (liveSocket) liveSocket.close(1000);
    if (frameUrl) URL.revokeObjectURL(frameUrl);
    for (const url of objectUrls) URL.revokeObjectURL(url);
  });

  function setStatus(next) {
    if (!next || stopped) return;
    const changed = current !== next;
    current = next;
    status.replaceChildren(badge(next));
    const allowed = CONTROLS[next] || [];
    for (const [name, button] of Object.entries(buttons)) button.disabled = !allowed.includes(name);
    if (changed) updateLive();
    const drivable = next === 'paused' || next === 'waiting';
    takeOver.hidden = !drivable;
    if (!drivable) takeOverToggle.checked = false;
    rescopeLive();
  }

  /** @param {TaskView} task */
  function showTask(task) {
    title.textContent = task.task;
    title.title = task.task;
    details.textContent = [
      `Model: ${task.model || 'default'}`,
      task.start_url ? `Start: ${task.start_url}` : null,
      `Max steps: ${task.max_steps}`,
      task.allowed_domains && task.allowed_domains.length ? `Allowed: ${task.allowed_domains.join(', ')}` : null,
      `Created: ${when(task.created_at)}`,
    ].filter(Boolean).join(' · ');
    setStatus(task.status);
    if (task.question) {
      showQuestion(task.question.question_id, task.question.question, task.question.choices,
        task.question.secret);
    } else {
      hideQuestion(null);
    }
    if (TERMINAL.has(task.status)) showResult(task);
  }

  // The open question's id, when the card shows one.
  let questionId = null;

  function showQuestion(qid, text, choices, secret) {
    if (stopped || questionId === qid) return;
    questionId = qid;
    const input = el('input', {
      type: secret ? 'password' : 'text', id: 'answer-input', name: 'answer',
      autocomplete: 'off', maxlength: 4096, required: !(choices && choices.length),
      placeholder: secret ? 'Secret answer (sealed, never shown to the model)' : 'Your answer',
    });
    const send = async (body) => {
      try {
        const task = await api(`/v1/tasks/${id}/input`, { method: 'POST', body });
        hideQuestion(qid);
        showTask(task);
      } catch (err) {
        if (err.status !== 401) flash(err.message);
      }
    };
    const choiceButtons = (choices || []).map((choice) => el('button', {
      type: 'button', class: 'choice', text: choice,
      onclick: () => send({ choice, secret: Boolean(secret) }),
    }));
    question.replaceChildren(
      el('h2', { text: 'The agent asks' }),
      el('p', { id: 'question-text', text }),
      choiceButtons.length ? el('div', { class: 'actions', id: 'question-choices' }, choiceButtons) : null,
      el('div', { class: 'actions' }, input,
        el('button', { type: 'submit', id: 'answer-send', text: 'Answer' })),
    );
    question.onsubmit = (event) => {
      event.preventDefault();
      if (!input.value.trim()) return;
      send({ answer: input.value, secret: Boolean(secret) });
    };
    question.hidden = false;
  }

  function hideQuestion(qid) {
    if (qid !== null && questionId !== qid) return;
    questionId = null;
    question.hidden = true;
    question.replaceChildren();
  }

  /** @param {TaskView} task */
  function showResult(task) {
    result.hidden = false;
    const children = [el('h2', { text: task.status === 'finished' ? 'Result' : `Task ${task.status}` })];
    if (task.is_success === true) children.push(el('p', { class: 'ok', text: 'The agent reports success.' }));
    if (task.is_success === false) children.push(el('p', { class: 'bad', text: 'The agent reports it did not succeed.' }));
    if (task.output) children.push(el('pre', { class: 'result', id: 'result-output', text: task.output }));
    if (task.error) children.push(el('p', { class: 'error', id: 'result-error', text: task.error }));
    if (task.usage) {
      const tokens = task.usage.total
        ? (task.usage.total.input_tokens || 0) + (task.usage.total.output_tokens || 0) : null;
      const parts = [];
      if (tokens !== null) parts.push(`${tokens} tokens`);
      if (typeof task.usage.total_cost_usd === 'number') parts.push(`$${task.usage.total_cost_usd.toFixed(4)}`);
      if (parts.length) children.push(el('p', { class: 'muted', text: parts.join(' · ') }));
    }
    result.replaceChildren(...children);
  }

  async function reloadTask() {
    try {
      const task = await api(`/v1/tasks/${id}`);
      if (!stopped) showTask(task);
    } catch (err) {
      if (!stopped && err.status !== 401) flash(err.status === 404 ? 'No such task.' : err.message);
    }
  }

  for (const [name, button] of Object.entries(buttons)) {
    button.addEventListener('click', async () => {
      button.disabled = true;
      try {
        const task = await api(`/v1/tasks/${id}/${name}`, { method: 'POST' });
        showTask(task);
      } catch (err) {
        if (err.status !== 401) flash(err.message);
        reloadTask();
      }
    });
  }

  download.addEventListener('click', async () => {
    try {
      // The history comes in pages: follow `next_after_step` and join them into one file.
      const history = [];
      let usage = {};
      let after = null;
      do {
        const query = after === null ? 'limit=500' : `limit=500&after_step=${after}`;
        const page = await api(`/v1/tasks/${id}/history?${query}`);
        history.push(...page.history);
        usage = page.usage;
        after = page.next_after_step;
      } while (after !== null && after !== undefined);
      const blob = new Blob([JSON.stringify({ history, usage }, null, 2)],
        { type: 'application/json' });
      const url = URL.createObjectURL(blob);
      const link = el('a', { href: url, download: `task-${id}-history.json` });
      document.body.append(link);
      link.click();
      link.remove();
      setTimeout(() => URL.revokeObjectURL(url), 60_000);
    } catch (err) {
      if (err.status !== 401) flash(`Could not download the history: ${err.message}`);
    }
  });

  // Steps --------------------------------------------------------------------------------------

  const stepNodes = new Map();

  function stepNode(number) {
    let node = stepNodes.get(number);
    if (!node) {
      node = {
        root: el('article', { class: 'step', 'data-step': number }),
        head: el('h3', {}),
        thoughts: el('dl', {}),
        actions: el('ol', { class: 'step-actions' }),
        meta: el('p', { class: 'meta' }),
        shot: el('div', {}),
      };
      node.root.append(node.head, node.thoughts, node.actions, node.meta, node.shot);
      node.head.append(el('span', { text: number === 0 ? 'Start' : `Step ${number}` }));
      stepNodes.set(number, node);
      // Keep steps in number order whatever order their events come in.
      const later = [...stepNodes.entries()].filter(([n]) => n > number).sort((a, b) => a[0] - b[0]);
      if (later.length) steps.insertBefore(node.root, later[0][1].root);
      else steps.append(node.root);
      document.getElementById('steps-empty').hidden = true;
    }
    return node;
  }

  function setUrl(node, url) {
    if (!url) return;
    const old = node.head.querySelector('.url');
    if (old) old.remove();
    node.head.append(el('span', { class: 'url', title: url, text: url }));
  }

  /** @param {AgentOutput} output */
  function showThoughts(node, output) {
    if (!output) return;
    const rows = [];
    const add = (label, value, cls) => {
      if (value) rows.push(el('dt', { text: label }), el('dd', { class: cls, text: value }));
    };
    add('Thinking', output.thinking, 'thinking');
    add('Evaluation', output.evaluation_previous_goal, 'evaluation');
    add('Memory', output.memory, 'memory');
    add('Next goal', output.next_goal, 'next-goal');
    node.thoughts.replaceChildren(...rows);
  }

  // An action is `{"<name>": {params}}` (browser-use's shape).
  function actionName(action) {
    if (!action || typeof action !== 'object') return ['?', {}];
    const [name] = Object.keys(action);
    return [name || '?', action[name] || {}];
  }

  /** @param {ActionResult} outcome */
  function failed(outcome) {
    return Boolean(outcome && outcome.error);
  }

  /** @param {ActionResult} outcome */
  function isDone(outcome) {
    return Boolean(outcome && outcome.is_done);
  }

  /** @param {ActionResult} outcome */
  function actionItem(action, outcome) {
    const [name, params] = actionName(action);
    const item = el('li', { class: 'action' }, el('code', { text: `${name} ${JSON.stringify(params)}` }));
    if (outcome) {
      if (outcome.error) item.append(' → ', el('span', { class: 'bad', text: `✗ ${outcome.error}` }));
      else {
        const text = outcome.long_term_memory || outcome.extracted_content || '';
        item.append(' → ', el('span', { class: 'ok', text: text ? `✓ ${text}` : '✓' }));
      }
    }
    return item;
  }

  /** @param {StepMetadata} metadata */
  function showMeta(node, metadata) {
    if (!metadata) return;
    const parts = [];
    if (typeof metadata.step_start_time === 'number' && typeof metadata.step_end_time === 'number') {
      parts.push(`took ${seconds(metadata.step_end_time - metadata.step_start_time)}`);
    }
    if (typeof metadata.model_ms === 'number') parts.push(`model ${metadata.model_ms} ms`);
    if (typeof metadata.actions_ms === 'number') parts.push(`actions ${metadata.actions_ms} ms`);
    if (typeof metadata.capture_ms === 'number') parts.push(`capture ${metadata.capture_ms} ms`);
    if (metadata.usage) {
      parts.push(`${metadata.usage.input_tokens || 0} in / ${metadata.usage.output_tokens || 0} out tokens`);
    }
    if (typeof metadata.cost_usd === 'number') parts.push(`$${metadata.cost_usd.toFixed(4)}`);
    node.meta.textContent = parts.join(' · ');
  }

  async function showScreenshot(node, path) {
    if (!path || node.shot.dataset.src === path) return;
    node.shot.dataset.src = path;
    try {
      const response = await api(path, { raw: true });
      const url = URL.createObjectURL(await response.blob());
      objectUrls.push(url);
      if (stopped) return;
      node.shot.replaceChildren(el('img', { class: 'shot', src: url, alt: 'Screenshot of the step', loading: 'lazy' }));
    } catch (err) {
      node.shot.replaceChildren(el('p', { class: 'muted', text: `Screenshot unavailable: ${err.message}` }));
    }
  }

  function onEvent(event) {
    const p = event.payload || {};
    switch (event.kind) {
      case 'status':
        setStatus(p.status);
        if (TERMINAL.has(p.status)) reloadTask();
        break;
      case 'step_started': {
        const node = stepNode(p.number);
        setUrl(node, p.url);
        if (!node.meta.textContent) node.meta.textContent = 'running…';
        break;
      }
      case 'model_output': {
        const node = stepNode(p.number);
        showThoughts(node, p.output);
        break;
      }
      case 'action_result': {
        const node = stepNode(p.number);
        node.actions.append(actionItem(p.action, p.result));
        if (failed(p.result)) node.root.classList.add('has-error');
        break;
      }
      case 'step': {
        const node = stepNode(p.number);
        /** @type {AgentHistory} */
        const record = p.record || {};
        setUrl(node, p.url || (record.state && record.state.url));
        showThoughts(node, record.model_output);
        const actions = (record.model_output && record.model_output.action) || [];
        const results = record.result || [];
        if (actions.length || results.length) {
          const count = Math.max(actions.length, results.length);
          const items = [];
          for (let i = 0; i < count; i += 1) items.push(actionItem(actions[i], results[i]));
          node.actions.replaceChildren(...items);
        }
        node.root.classList.toggle('has-error', results.some(failed));
        node.root.classList.toggle('done', results.some(isDone));
        showMeta(node, record.metadata);
        if (p.has_screenshot) showScreenshot(node, p.screenshot_url);
        break;
      }
      case 'question':
        showQuestion(p.question_id, p.question, p.choices, p.secret);
        break;
      case 'answered':
        hideQuestion(p.question_id);
        break;
      case 'result':
        if (p.final_result || p.error) {
          result.hidden = false;
        }
        break;
      default:
        break; // Kinds this page does not know are ignored, as the API asks.
    }
  }

  // Event stream: replays everything, then live; reconnects from the last seq.
  let lastSeq = 0;
  let delay = RECONNECT_MIN_MS;
  let ended = false;
  let eventSocket = null;
  onLeave(() => {
    if (eventSocket) eventSocket.close(1000);
  });

  /**
   * A single-use ticket of `scope` ('view' or 'control') that opens one of this task's sockets:
   * the key itself is never sent on a WebSocket.
   */
  async function ticket(scope) {
    return api(`/v1/tasks/${id}/events/ticket`, { method: 'POST', body: { scope } });
  }

  async function connectEvents() {
    if (stopped || ended) return;
    let url;
    try {
      url = (await ticket('view')).url;
    } catch (err) {
      if (stopped) return;
      if (err instanceof ApiError && err.status === 401) return; // signed out
      if (err instanceof ApiError && err.status === 404) {
        ended = true;
        reloadTask();
        return;
      }
      setTimeout(connectEvents, delay);
      delay = Math.min(delay * 2, RECONNECT_MAX_MS);
      return;
    }
    if (stopped || ended) return;
    const socket = new WebSocket(wsUrl(`${url}&after_seq=${lastSeq}`));
    eventSocket = socket;
    socket.addEventListener('open', () => {
      delay = RECONNECT_MIN_MS;
    });
    socket.addEventListener('message', (message) => {
      let event;
      try {
        event = JSON.parse(message.data);
      } catch (err) {
        console.warn('unreadable event', err);
        return;
      }
      if (typeof event.seq !== 'number' || event.seq <= lastSeq) return;
      lastSeq = event.seq;
      onEvent(event);
    });
    socket.addEventListener('close', (close) => {
      if (stopped) return;
      if (close.code === 1000) {
        ended = true;
        reloadTask();
        return;
      }
      if (close.code === 1008) {
        signOut('Signed out: the API key was revoked.');
        return;
      }
      setTimeout(connectEvents, delay);
      delay = Math.min(delay * 2, RECONNECT_MAX_MS);
    });
  }

  // Live view: open while the task can still change the page.
  let liveDelay = RECONNECT_MIN_MS;

  function updateLive() {
    const active = current && !TERMINAL.has(current);
    if (!active) {
      if (liveSocket) liveSocket.close(1000);
      liveSocket = null;
      liveState.textContent = current ? 'The task has ended.' : 'Connecting…';
      liveState.dataset.state = 'ended';
      return;
    }
    if (current === 'paused') liveState.textContent = 'Paused.';
    else if (current === 'waiting') liveState.textContent = 'Waiting for your answer.';
    if (!liveSocket) connectLive();
  }

  // The scope of the live socket's ticket: 'control' only while a person takes over.
  let liveScope = null;
  // A ticket for the live socket is being fetched.
  let liveOpening = false;
  // Inputs made while the control socket is still opening (sent once it is open).
  let pendingInputs = [];

  function wantedScope() {
    return takingOver() ? 'control' : 'view';
  }

  /** Reopens the live view when the scope it needs changed (take over ticked or released). */
  function rescopeLive() {
    if (!takingOver()) pendingInputs = [];
    if (stopped || liveOpening || !current || TERMINAL.has(current)) return;
    if (liveSocket && liveScope === wantedScope()) return;
    if (liveSocket) {
      const old = liveSocket;
      old.replaced = true;
      liveSocket = null;
      old.close(1000);
    }
    delete takeOver.dataset.control;
    connectLive();
  }

  takeOverToggle.addEventListener('change', () => {
    takeOverState.textContent = takeOverToggle.checked ? 'Taking over: connecting…' : '';
    rescopeLive();
  });

  // The page's viewport in CSS pixels, as the server announces it before a frame of a new size.
  let frameViewport = null;
  let typed = '';
  let typedTimer = null;
  let wheel = null;

  /** Sends one take-over input on the live socket (a control one; else once it is open). */
  function sendInput(input) {
    if (liveSocket && liveScope === 'control' && liveSocket.readyState === WebSocket.OPEN) {
      liveSocket.send(JSON.stringify(input));
      return;
    }
    if (pendingInputs.length < 50) pendingInputs.push(input);
    takeOverState.textContent = 'Taking over: connecting…';
  }

  function takingOver() {
    return (current === 'paused' || current === 'waiting') && takeOverToggle.checked;
  }

  /** The page coordinates (CSS pixels) of a mouse event on the frame. */
  function pagePoint(event) {
    const box = liveImg.getBoundingClientRect();
    const width = frameViewport ? frameViewport.width : liveImg.naturalWidth;
    const height = frameViewport ? frameViewport.height : liveImg.naturalHeight;
    if (!box.width || !box.height || !width || !height) return null;
    return {
      x: Math.round((event.clientX - box.left) * width / box.width),
      y: Math.round((event.clientY - box.top) * height / box.height),
    };
  }

  function flushTyped() {
    if (typedTimer) clearTimeout(typedTimer);
    typedTimer = null;
    if (typed) sendInput({ type: 'type', text: typed });
    typed = '';
  }

  liveImg.addEventListener('click', (event) => {
    if (!takingOver()) return;
    const point = pagePoint(event);
    if (!point) return;
    flushTyped();
    liveImg.focus();
    sendInput({ type: 'click', x: point.x, y: point.y, click_count: Math.min(event.detail || 1, 3) });
  });
  liveImg.addEventListener('wheel', (event) => {
    if (!takingOver()) return;
    event.preventDefault();
    const point = pagePoint(event);
    if (!point) return;
    // Wheel turns within 150 ms go out as one scroll.
    if (!wheel) {
      wheel = { x: point.x, y: point.y, delta_x: 0, delta_y: 0 };
      setTimeout(() => {
        const due = wheel;
        wheel = null;
        if (due) sendInput({ type: 'scroll', x: due.x, y: due.y, delta_x: Math.round(due.delta_x), delta_y: Math.round(due.delta_y) });
      }, 150);
    }
    wheel.delta_x += event.deltaX;
    wheel.delta_y += event.deltaY;
  }, { passive: false });
  liveImg.addEventListener('keydown', (event) => {
    if (!takingOver()) return;
    event.preventDefault();
    const modifiers = [];
    if (event.ctrlKey) modifiers.push('Control');
    if (event.altKey) modifiers.push('Alt');
    if (event.metaKey) modifiers.push('Meta');
    if (event.key.length === 1 && modifiers.length === 0) {
      // Characters typed within 300 ms go out as one text.
      typed += event.key;
      if (typedTimer) clearTimeout(typedTimer);
      typedTimer = setTimeout(flushTyped, 300);
      return;
    }
    if (['Shift', 'Control', 'Alt', 'Meta'].includes(event.key)) return;
    flushTyped();
    if (event.shiftKey && event.key.length > 1) modifiers.push('Shift');
    sendInput({ type: 'keys', keys: [...modifiers, event.key].join('+') });
  });
  secretSend.addEventListener('click', () => {
    if (!takingOver() || !secretText.value) return;
    flushTyped();
    sendInput({ type: 'type', text: secretText.value, secret: true });
    secretText.value = '';
    liveImg.focus();
  });

  /** A text message on the live socket: the frame size, or the answer to an input. */
  function onLiveText(text) {
    let message;
    try { message = JSON.parse(text); } catch { return; }
    if (message.type === 'viewport') {
      frameViewport = { width: message.width, height: message.height };
      liveImg.dataset.viewport = `${message.width}x${message.height}`;
    }
    else if (message.type === 'input_refused') takeOverState.textContent = `Not applied: ${message.error}`;
    else if (message.type === 'input_accepted') takeOverState.textContent = 'Sent to the page; the agent will be told when it resumes.';
  }

  function retryLive() {
    setTimeout(() => {
      if (!liveSocket && current && !TERMINAL.has(current)) connectLive();
    }, liveDelay);
    liveDelay = Math.min(liveDelay * 2, RECONNECT_MAX_MS);
  }

  async function connectLive() {
    if (stopped || liveOpening) return;
    liveOpening = true;
    let scope;
    let url;
    try {
      // Take over may be ticked or released while the ticket is on its way: ask again then.
      do {
        scope = wantedScope();
        url = (await ticket(scope)).live_url;
      } while (!stopped && scope !== wantedScope());
    } catch (err) {
      liveOpening = false;
      if (stopped || (err instanceof ApiError && (err.status === 401 || err.status === 404))) return;
      retryLive();
      return;
    }
    liveOpening = false;
    if (stopped || liveSocket || !current || TERMINAL.has(current)) return;
    const socket = new WebSocket(wsUrl(url));
    socket.binaryType = 'blob';
    liveSocket = socket;
    liveScope = scope;
    socket.addEventListener('open', () => {
      if (scope !== 'control' || liveSocket !== socket) return;
      takeOver.dataset.control = 'ready';
      takeOverState.textContent = 'You drive the page: click, scroll and type on the frame.';
      const due = pendingInputs;
      pendingInputs = [];
      for (const input of due) socket.send(JSON.stringify(input));
    });
    let frames = 0;
    // The newest frame shown (frames are numbered as they arrive on this socket).
    let shownFrame = 0;
    liveState.dataset.state = 'waiting';
    if (current === 'queued') liveState.textContent = 'Waiting for the task to start…';
    else if (current !== 'paused') liveState.textContent = 'Waiting for the first frame…';
    socket.addEventListener('message', (message) => {
      if (typeof message.data === 'string') {
        onLiveText(message.data);
        return;
      }
      if (!(message.data instanceof Blob)) return;
      frames += 1;
      liveDelay = RECONNECT_MIN_MS;
      // The frame is decoded before it replaces the shown one (no blank image between two
      // frames); a frame decoded after a newer one was shown is dropped.
      const seq = frames;
      const url = URL.createObjectURL(message.data);
      const decoded = new Image();
      decoded.src = url;
      decoded.decode().then(() => {
        if (liveSocket !== socket || seq <= shownFrame) {
          URL.revokeObjectURL(url);
          return;
        }
        shownFrame = seq;
        liveImg.src = url;
        if (frameUrl) URL.revokeObjectURL(frameUrl);
        frameUrl = url;
        liveImg.dataset.frames = String(Number(liveImg.dataset.frames || 0) + 1);
        liveState.dataset.state = 'live';
        liveState.textContent = current === 'paused' ? 'Paused.' : `Live · ${new Date().toLocaleTimeString()}`;
      }, () => URL.revokeObjectURL(url));
    });
    socket.addEventListener('close', (close) => {
      if (liveSocket === socket) {
        liveSocket = null;
        delete takeOver.dataset.control;
      }
      if (stopped || socket.replaced) return;
      if (close.code === 1000 || (current && TERMINAL.has(current))) {
        liveState.textContent = 'The task has ended.';
        liveState.dataset.state = 'ended';
        return;
      }
      if (close.code === 1008) return;
      retryLive();
      if (frames === 0) liveState.textContent = 'Live view unavailable; retrying…';
    });
  }

  reloadTask().then(connectEvents);
}

// ---------------------------------------------------------------------------------------------
// Schedules (#/schedules): each schedule with its last runs, a form for a new scheduled task,
// enable/disable and delete.

const SCHEDULE_RUNS_SHOWN = 5;

function renderSchedules(app) {
  const body = el('tbody', { id: 'schedule-rows' });
  const table = el('table', { id: 'schedules' },
    el('thead', {}, el('tr', {}, ['Name', 'When', 'Next run', 'Last runs', ''].map((h) => el('th', { text: h })))),
    body);
  app.append(
    el('h1', { text: 'Schedules' }),
    renderNewScheduleForm(() => load()),
    el('p', { class: 'muted', id: 'schedules-state' }),
    table);

  let timer = null;
  let stopped = false;
  onLeave(() => {
    stopped = true;
    clearTimeout(timer);
  });

  /** @param {ScheduleRunView} run */
  function runLink(run) {
    return el('a', { href: `#/tasks/${run.task_id}`, class: 'run', title: when(run.scheduled_for) }, badge(run.status));
  }

  /** @param {ScheduleView} schedule */
  function row(schedule, runs) {
    const toggle = el('button', { type: 'button', text: schedule.enabled ? 'Disable' : 'Enable' });
    toggle.addEventListener('click', async () => {
      try {
        await api(`/v1/schedules/${schedule.id}`, { method: 'PATCH', body: { enabled: !schedule.enabled } });
        load();
      } catch (err) {
        flash(`Could not change the schedule: ${err.message}`);
      }
    });
    const remove = el('button', { type: 'button', class: 'danger', text: 'Delete' });
    remove.addEventListener('click', async () => {
      if (!window.confirm(`Delete the schedule “${schedule.name}”? Its tasks stay.`)) return;
      try {
        await api(`/v1/schedules/${schedule.id}`, { method: 'DELETE' });
        load();
      } catch (err) {
        flash(`Could not delete the schedule: ${err.message}`);
      }
    });
    return el('tr', { 'data-schedule-id': schedule.id },
      el('td', { class: 'task-text', title: schedule.name }, schedule.name,
        schedule.last_error ? el('div', { class: 'error', text: schedule.last_error }) : null),
      el('td', {}, el('code', { text: schedule.cron }), ' ', el('span', { class: 'muted', text: schedule.time_zone })),
      el('td', { text: schedule.enabled ? when(schedule.next_run_at) : 'disabled' }),
      el('td', { class: 'runs' }, runs.length ? runs.map(runLink) : el('span', { class: 'muted', text: schedule.last_run_at ? `last tick ${when(schedule.last_run_at)}` : 'none yet' })),
      el('td', {}, el('div', { class: 'actions' }, toggle, remove)));
  }

  async function load() {
    try {
      const list = await api('/v1/schedules?limit=100');
      const runs = await Promise.all(list.items.map((s) =>
        api(`/v1/schedules/${s.id}/runs?limit=${SCHEDULE_RUNS_SHOWN}`).then((page) => page.items).catch(() => [])));
      if (stopped) return;
      body.replaceChildren(...list.items.map((s, i) => row(s, runs[i])));
      document.getElementById('schedules-state').textContent =
        list.items.length === 0 ? 'No schedules yet.' : '';
    } catch (err) {
      if (!stopped && err.status !== 401) flash(`Could not load schedules: ${err.message}`);
    }
  }

  async function refresh() {
    if (stopped) return;
    if (document.visibilityState === 'visible') await load();
    if (!stopped) timer = setTimeout(refresh, LIST_REFRESH_MS);
  }
  refresh();
}

function renderNewScheduleForm(created) {
  const error = el('p', { class: 'error', id: 'new-schedule-error' });
  const zone = Intl.DateTimeFormat().resolvedOptions().timeZone || 'UTC';
  const form = el('form', { class: 'card', id: 'new-schedule' },
    el('h2', { text: 'Schedule a task' }),
    el('label', { for: 'schedule-task', text: 'Task' }),
    el('textarea', { id: 'schedule-task', required: true, placeholder: 'Download this month’s invoice' }),
    el('div', { class: 'row' },
      el('div', {}, el('label', { for: 'schedule-name', text: 'Name' }),
        el('input', { id: 'schedule-name', placeholder: 'Monthly invoice' })),
      el('div', {}, el('label', { for: 'schedule-cron' }, 'Cron ', el('small', { text: '(5 fields, or 6 with seconds)' })),
        el('input', { id: 'schedule-cron', required: true, placeholder: '0 9 1 * *', class: 'code' })),
      el('div', {}, el('label', { for: 'schedule-zone', text: 'Time zone' }),
        el('input', { id: 'schedule-zone', value: zone }))),
    el('div', { class: 'actions' }, el('button', { class: 'primary', type: 'submit', text: 'Create schedule' })),
    error);
  form.addEventListener('submit', async (event) => {
    event.preventDefault();
    error.textContent = '';
    const value = (id) => form.querySelector(id).value.trim();
    const request = { cron: value('#schedule-cron'), target: { task: { task: value('#schedule-task') } } };
    if (value('#schedule-name')) request.name = value('#schedule-name');
    if (value('#schedule-zone')) request.time_zone = value('#schedule-zone');
    try {
      await api('/v1/schedules', { method: 'POST', body: request });
      form.reset();
      form.querySelector('#schedule-zone').value = zone;
      created();
    } catch (err) {
      error.textContent = err.message;
    }
  });
  return form;
}

// ---------------------------------------------------------------------------------------------

document.getElementById('sign-out').addEventListener('click', () => signOut(''));
window.addEventListener('hashchange', route);
route();
