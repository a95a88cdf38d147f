// Keel console. The kernel serves every page as the same shell; this script asks the kernel
// for the page's server-rendered view with the bearer token (kept in sessionStorage, sent as
// an Authorization header, never a cookie), keeps `data-live` regions fresh, sends the
// operator's actions through the ordinary JSON routes, and draws the execution timeline from
// the events snapshot plus the live stream (read with fetch: EventSource cannot send headers).
(() => {
  'use strict';

  const TOKEN_KEY = 'keel.token';
  const app = document.getElementById('app');
  const loginSection = document.getElementById('login');
  const loginError = document.getElementById('login-error');
  const logoutButton = document.getElementById('logout');
  const whoami = document.getElementById('whoami');
  const flashBox = document.getElementById('flash');
  const authRequired = document.body.dataset.auth === 'token';

  class Unauthorized extends Error {}

  const token = () => sessionStorage.getItem(TOKEN_KEY) || '';

  // Bidirectional-text controls in ids, labels and arguments (`invoice\u202Efdp.exe`) would
  // reorder what is shown: every one is shown as its code point instead (issue 38).
  const BIDI = /[\u061C\u200E\u200F\u202A-\u202E\u2066-\u2069]/;
  const BIDI_ALL = new RegExp(BIDI.source, 'g');

  function visible(text) {
    return BIDI.test(text)
      ? text.replace(BIDI_ALL, (ch) => '⟨U+' + ch.codePointAt(0).toString(16).toUpperCase().padStart(4, '0') + '⟩')
      : text;
  }

  // Shows the bidi controls of every text node and form value under `root` (server views).
  function reveal(root) {
    const walker = document.createTreeWalker(root, NodeFilter.SHOW_TEXT);
    for (let node = walker.nextNode(); node; node = walker.nextNode()) {
      if (BIDI.test(node.data)) node.data = visible(node.data);
    }
    for (const field of root.querySelectorAll('input[value]')) {
      if (BIDI.test(field.value)) field.title = visible(field.value);
    }
  }

  function headers(extra) {
    const result = Object.assign({}, extra || {});
    const value = token();
    if (value) result.Authorization = 'Bearer ' + value;
    return result;
  }

  async function request(method, url, body) {
    const init = { method, cache: 'no-store', headers: headers() };
    // Every state-changing request says JSON, body or not: the kernel refuses the others.
    if (method !== 'GET') init.headers['Content-Type'] = 'application/json';
    if (body !== undefined) init.body = JSON.stringify(body);
    const response = await fetch(url, init);
    if (response.status === 401) throw new Unauthorized('unauthorized');
    return response;
  }

  async function errorText(response) {
    try {
      const body = await response.json();
      return body.error || response.status + ' ' + response.statusText;
    } catch (_) {
      return response.status + ' ' + response.statusText;
    }
  }

  function flash(message, kind) {
    flashBox.textContent = message;
    flashBox.className = kind || 'info';
  }

  // --- pages ---------------------------------------------------------------------------

  function viewUrl() {
    const path = location.pathname;
    if (path === '/') return '/console/view/executions' + location.search;
    if (path.startsWith('/executions/')) return '/console/view' + path;
    if (['/approvals', '/directory', '/status'].includes(path)) {
      return '/console/view' + path + location.search;
    }
    return null;
  }

  function showLogin(message) {
    app.hidden = true;
    loginSection.hidden = false;
    logoutButton.hidden = true;
    whoami.hidden = true;
    loginError.textContent = message || '';
    document.getElementById('token').focus();
  }

  function markNav() {
    const path = location.pathname;
    const current = path === '/' || path.startsWith('/executions/') ? 'executions' : path.slice(1);
    for (const link of document.querySelectorAll('[data-nav]')) {
      if (link.dataset.nav === current) link.setAttribute('aria-current', 'page');
      else link.removeAttribute('aria-current');
    }
  }

  async function load() {
    markNav();
    const url = viewUrl();
    if (url === null || (authRequired && !token())) {
      showLogin('');
      return;
    }
    let response;
    try {
      response = await request('GET', url);
    } catch (error) {
      if (error instanceof Unauthorized) {
        sessionStorage.removeItem(TOKEN_KEY);
        showLogin('The kernel refused this token.');
      } else {
        flash('Cannot reach the kernel: ' + error.message, 'error');
      }
      return;
    }
    loginSection.hidden = true;
    app.hidden = false;
    logoutButton.hidden = !token();
    if (response.status === 403 && token()) {
      // A key whose role cannot read (agent, runner) cannot use the console: ask for another.
      const reason = await errorText(response);
      sessionStorage.removeItem(TOKEN_KEY);
      showLogin('This key cannot use the console (' + reason + '). Sign in with a reader, ' +
        'approver, operator or admin key.');
      return;
    }
    if (!response.ok) {
      const paragraph = document.createElement('p');
      paragraph.className = 'error';
      paragraph.setAttribute('role', 'alert');
      paragraph.textContent = await errorText(response);
      app.replaceChildren(paragraph);
      return;
    }
    app.innerHTML = await response.text();
    reveal(app);
    const root = app.firstElementChild;
    if (!root) return;
    showPrincipal(root);
    const heading = root.querySelector('h1');
    if (heading) document.title = heading.textContent.trim() + ' · Keel console';
    startLive(root);
    timeline = root.dataset.page === 'execution' ? new Timeline(root) : null;
    if (timeline) timeline.start();
  }

  // Names the signed-in key and its role in the header (what the pages offer follows the role).
  function showPrincipal(root) {
    const name = root.dataset.principal;
    whoami.hidden = !name || !token();
    if (!whoami.hidden) whoami.textContent = visible('Signed in as ' + name + ' (' + root.dataset.role + ')');
  }

  // --- live regions --------------------------------------------------------------------

  let refreshing = false;
  // A refresh asked for while one is in flight: that one may have read the view before the
  // change it was asked for, so another follows it.
  let refreshAgain = false;
  // The open execution page's timeline (null on the other pages).
  let timeline = null;

  async function refresh() {
    const url = viewUrl();
    if (url === null) return;
    if (refreshing) {
      refreshAgain = true;
      return;
    }
    refreshing = true;
    refreshAgain = false;
    try {
      const response = await request('GET', url);
      if (!response.ok) return;
      const fresh = new DOMParser().parseFromString(await response.text(), 'text/html');
      reveal(fresh.body);
      for (const region of fresh.querySelectorAll('[data-live][id]')) {
        const old = document.getElementById(region.id);
        if (!old || old.innerHTML === region.innerHTML) continue;
        // Never pull the rug from under the keyboard: keep a region the user types in, and
        // give the focus back to the same control (or the page) when one is replaced.
        const active = document.activeElement;
        const focused = active && active !== document.body && old.contains(active);
        if (focused && typing(active)) continue;
        const opened = [...old.querySelectorAll('details')].map((details) => details.open);
        const adopted = document.adoptNode(region);
        const fresher = [...adopted.querySelectorAll('details')];
        if (fresher.length === opened.length) {
          fresher.forEach((details, index) => { details.open = opened[index]; });
        }
        old.replaceWith(adopted);
        if (focused) {
          const again = active.id ? document.getElementById(active.id) : null;
          (again || app).focus();
        }
      }
    } catch (error) {
      if (error instanceof Unauthorized) showLogin('The kernel refused this token.');
    } finally {
      refreshing = false;
      // The header must catch up with every event the timeline shows (the view and the
      // events are separate reads: an event may commit between them).
      if (refreshAgain || (timeline && timeline.ahead())) refreshSoon();
    }
  }

  function typing(element) {
    const tag = element.tagName;
    if (tag === 'TEXTAREA' || tag === 'SELECT') return true;
    return tag === 'INPUT' && !['submit', 'button', 'checkbox', 'radio', 'reset'].includes(element.type);
  }

  function startLive(root) {
    const interval = Number(root.dataset.liveInterval || 0);
    if (interval > 0) {
      setInterval(() => { if (!document.hidden) refresh(); }, interval);
    }
  }

  let refreshTimer = null;
  function refreshSoon() {
    if (refreshTimer) return;
    refreshTimer = setTimeout(() => { refreshTimer = null; refresh(); }, 250);
  }

  // --- actions -------------------------------------------------------------------------

  async function act(description, method, url, body) {
    try {
      const response = await request(method, url, body);
      if (!response.ok) {
        flash(description + ' failed: ' + (await errorText(response)), 'error');
        return false;
      }
      flash(description + ': done.', 'ok');
      refreshSoon();
      return true;
    } catch (error) {
      if (error instanceof Unauthorized) showLogin('The kernel refused this token.');
      else flash(description + ' failed: ' + error.message, 'error');
      return false;
    }
  }

  // "Run again": a new execution with the same agent, input and labels; opens its page.
  async function runAgain(form) {
    try {
      const original = await request('GET', executionUrl(form));
      if (!original.ok) {
        flash('Run again failed: ' + (await errorText(original)), 'error');
        return;
      }
      const execution = await original.json();
      const body = { agent_id: execution.agent_id, input: execution.input };
      if (execution.labels) body.labels = execution.labels;
      const created = await request('POST', '/v0/executions', body);
      if (!created.ok) {
        flash('Run again failed: ' + (await errorText(created)), 'error');
        return;
      }
      const fresh = await created.json();
      location.assign('/executions/' + encodeURIComponent(fresh.id));
    } catch (error) {
      if (error instanceof Unauthorized) showLogin('The kernel refused this token.');
      else flash('Run again failed: ' + error.message, 'error');
    }
  }

  const executionUrl = (form) => '/v0/executions/' + encodeURIComponent(form.dataset.executionId);

  document.addEventListener('submit', async (event) => {
    const form = event.target;
    if (form.id === 'login-form') {
      event.preventDefault();
      const input = document.getElementById('token');
      sessionStorage.setItem(TOKEN_KEY, input.value);
      input.value = '';
      if (location.pathname === '/login') location.assign('/');
      else load();
    } else if (form.matches('[data-rerun]')) {
      event.preventDefault();
      await runAgain(form);
    } else if (form.matches('[data-reconcile]')) {
      event.preventDefault();
      const answer = event.submitter ? event.submitter.value : '';
      const outcome = await window.KeelSteps.submit(form, answer, act);
      if (outcome.invalid) flash(outcome.invalid, 'error');
    } else if (form.matches('[data-cancel]')) {
      event.preventDefault();
      await act('Cancel', 'POST', executionUrl(form) + '/cancel');
    } else if (form.matches('[data-signal]')) {
      event.preventDefault();
      const type = form.elements.signal_type.value.trim();
      const text = form.elements.payload.value.trim();
      let payload;
      if (text) {
        try {
          payload = JSON.parse(text);
        } catch (error) {
          flash('The payload is not valid JSON: ' + error.message, 'error');
          form.elements.payload.focus();
          return;
        }
      }
      const body = payload === undefined ? { signal_type: type } : { signal_type: type, payload };
      if (await act('Signal ' + type, 'POST', executionUrl(form) + '/signal', body)) form.reset();
    } else if (form.matches('[data-decision]')) {
      event.preventDefault();
      const approved = event.submitter ? event.submitter.value === 'true' : false;
      const payload = { step_id: form.dataset.stepId, approved };
      const reason = form.elements.reason.value.trim();
      if (reason) payload.reason = reason;
      const done = await act(approved ? 'Approve' : 'Deny', 'POST', executionUrl(form) + '/signal',
        { signal_type: 'step.approve', payload });
      if (done) {
        const row = form.closest('tr, .pending-approval');
        if (row) row.remove();
      }
    }
  });

  logoutButton.addEventListener('click', () => {
    sessionStorage.removeItem(TOKEN_KEY);
    flash('Signed out.', 'info');
    showLogin('');
  });

  // --- timeline ------------------------------------------------------------------------

  const PAGE = 1000;
  const SHOW_STEP = 500;
  const TERMINAL = new Set(['execution.completed', 'execution.failed', 'execution.cancelled']);
  const STEP_STATE = {
    'step.created': ['pending', '○'],
    'step.approval_required': ['waiting for approval', '‖'],
    'step.dispatched': ['dispatched', '→'],
    'step.started': ['running', '▶'],
    'step.completed': ['succeeded', '✔'],
    'step.failed': ['failed', '✖'],
    'step.timed_out': ['timed out', '⌛'],
    'step.retried': ['retrying', '↻'],
    'step.cancelled': ['cancelled', '⊘'],
  };
  const STEP_ENDS = new Set(['step.completed', 'step.timed_out', 'step.cancelled']);

  function el(tag, className, text) {
    const node = document.createElement(tag);
    if (className) node.className = className;
    if (text !== undefined) node.textContent = visible(String(text));
    return node;
  }

  function duration(ms) {
    if (!(ms >= 0)) return '';
    if (ms < 1000) return Math.round(ms) + ' ms';
    if (ms < 60000) return (ms / 1000).toFixed(1) + ' s';
    const minutes = Math.floor(ms / 60000);
    return minutes + ' min ' + Math.round((ms % 60000) / 1000) + ' s';
  }

  function clock(timestamp) {
    const text = String(timestamp || '');
    // The format of every page (YYYY-MM-DD HH:MM:SS UTC), with milliseconds on the timeline.
    const match = text.match(/^(\d{4}-\d\d-\d\d)T(\d\d:\d\d:\d\d(?:\.\d{1,3})?)/);
    return match ? match[1] + ' ' + match[2] + ' UTC' : text;
  }

  function preview(value, max) {
    const text = value === undefined ? '' : JSON.stringify(value);
    return text.length > max ? text.slice(0, max) + '…' : text;
  }

  function describe(event) {
    const payload = event.payload || {};
    switch (event.type) {
      case 'execution.created': return 'created for agent ' + payload.agent_id;
      case 'execution.assigned':
      case 'execution.started': return preview(payload, 120);
      case 'execution.blocked': return 'blocked on ' + payload.reason + (payload.ref ? ' (' + payload.ref + ')' : '');
      case 'execution.resumed': return 'resumed: ' + payload.reason;
      case 'execution.completed': return 'completed';
      case 'execution.failed': return 'failed: ' + payload.error;
      case 'execution.cancelled': return 'cancelled: ' + (payload.reason || '');
      case 'signal.received': return 'signal ' + payload.signal_type + ' ' + preview(payload.payload, 80);
      case 'intent.accepted': return payload.intent_type + ' accepted';
      case 'intent.denied': return 'denied: ' + (payload.reason || preview(payload, 100));
      case 'step.failed': return 'failed: ' + payload.error + (payload.retryable ? ' (will retry)' : '');
      case 'step.retried': return 'attempt ' + payload.next_attempt + ' scheduled';
      case 'step.approval_required': return 'needs approval: ' + payload.reason;
      case 'llm.called': return modelCall(payload);
      case 'step.progress': return 'progress ' + payload.progress + (payload.total ? '/' + payload.total : '') +
        (payload.message ? ': ' + payload.message : '');
      case 'step.outcome_unknown': return 'outcome unknown: ' + payload.reason;
      case 'step.reconciled': return 'reconciled: ' + payload.answer + (payload.by ? ' by ' + payload.by : '');
      default: return preview(payload, 100);
    }
  }

  // A model call through the LLM gateway: model, outcome, tokens, cost, latency.
  function modelCall(payload) {
    const tokens = (payload.input_tokens || 0) + ' in + ' + (payload.output_tokens || 0) + ' out tokens';
    const usd = payload.cost && payload.cost.usd !== undefined ? ', $' + Number(payload.cost.usd).toFixed(6) : '';
    return 'model call ' + payload.provider + '/' + payload.model + (payload.stream ? ' (stream)' : '') +
      ': ' + payload.outcome + ', ' + tokens + usd + ', ' + duration(payload.latency_ms) +
      (payload.fallback ? ', answered by ' + payload.fallback : '') +
      (payload.replay_of ? ', replayed from #' + payload.replay_of : '') +
      (payload.error ? ' — ' + payload.error : '');
  }

  function category(type, payload) {
    if (type === 'llm.called') return payload && payload.outcome === 'ok' ? 'plain' : 'bad';
    if (type === 'execution.completed' || type === 'step.completed') return 'good';
    if (type === 'execution.failed' || type === 'step.failed' || type === 'intent.denied' ||
        type === 'step.timed_out') return 'bad';
    if (type === 'execution.cancelled' || type === 'step.cancelled') return 'off';
    if (type === 'execution.blocked' || type === 'step.approval_required') return 'wait';
    return 'plain';
  }

  function eventRow(event) {
    const row = el('li', 'ev ev-' + category(event.type, event.payload));
    row.dataset.sequence = event.sequence;
    row.dataset.type = event.type;
    row.append(el('span', 'seq', '#' + event.sequence), ' ');
    const time = el('time', 'at', clock(event.timestamp));
    time.dateTime = event.timestamp;
    row.append(time, ' ', el('span', 'type mono', event.type), ' ', el('span', 'what', describe(event)));
    // Who caused it: a key's name, `admin` (the bearer token), `system` (timers, recovery).
    if (event.principal) {
      row.dataset.principal = event.principal;
      row.append(' ', el('span', 'by', 'by ' + event.principal));
    }
    const details = el('details', 'payload');
    details.append(el('summary', '', 'payload'));
    // The payload is rendered only when opened: 10k events stay cheap.
    details.addEventListener('toggle', () => {
      if (details.open && details.childElementCount === 1) {
        details.append(el('pre', 'json', JSON.stringify(event, null, 2)));
      }
    });
    row.append(' ', details);
    return row;
  }

  class Timeline {
    constructor(root) {
      this.root = root;
      this.id = root.dataset.executionId;
      this.entries = [];
      this.steps = new Map();
      this.llm = { calls: 0, input: 0, output: 0, usd: 0 };
      this.last = 0;
      this.count = 0;
      this.done = false;
      this.shown = 200;
      this.first = null;
      this.list = document.getElementById('timeline');
      this.summary = document.getElementById('timeline-summary');
      this.earlier = document.getElementById('timeline-earlier');
      this.liveNote = document.getElementById('timeline-live');
      this.renderTimer = null;
      this.earlier.addEventListener('click', () => {
        this.shown += SHOW_STEP;
        this.render();
      });
    }

    async start() {
      try {
        let after = 0;
        for (;;) {
          const response = await request('GET', '/v0/executions/' + encodeURIComponent(this.id) +
            '/events?after_sequence=' + after + '&limit=' + PAGE);
          if (!response.ok) {
            this.summary.textContent = 'Cannot read events: ' + (await errorText(response));
            return;
          }
          const body = await response.json();
          for (const event of body.events) this.add(event);
          if (body.events.length < PAGE) break;
          after = body.latest_sequence;
        }
        this.render();
        // Events committed after the header was rendered: refresh it too.
        if (this.ahead()) refreshSoon();
        if (!this.done) this.follow();
      } catch (error) {
        if (error instanceof Unauthorized) showLogin('The kernel refused this token.');
        else this.summary.textContent = 'Cannot read events: ' + error.message;
      }
    }

    async follow() {
      while (!this.done && document.body.contains(this.list)) {
        this.liveNote.textContent = '● Live: new events appear as they happen.';
        try {
          const response = await fetch('/v0/executions/' + encodeURIComponent(this.id) +
            '/stream?after_sequence=' + this.last,
          { headers: headers({ Accept: 'text/event-stream' }), cache: 'no-store' });
          if (response.status === 401) throw new Unauthorized('unauthorized');
          if (!response.ok || !response.body) throw new Error(await errorText(response));
          const reader = response.body.pipeThrough(new TextDecoderStream()).getReader();
          let buffer = '';
          for (;;) {
            const { value, done } = await reader.read();
            if (done) break;
            buffer += value.replace(/\r\n/g, '\n');
            let end;
            while ((end = buffer.indexOf('\n\n')) >= 0) {
              this.message(buffer.slice(0, end));
              buffer = buffer.slice(end + 2);
            }
          }
        } catch (error) {
          if (error instanceof Unauthorized) {
            showLogin('The kernel refused this token.');
            return;
          }
          this.liveNote.textContent = 'Stream interrupted (' + error.message + '); reconnecting…';
        }
        if (!this.done) await new Promise((resolve) => setTimeout(resolve, 2000));
      }
      this.liveNote.textContent = 'The execution has ended; the timeline is complete.';
    }

    // Whether the timeline holds events the header's view was rendered without.
    ahead() {
      const shown = document.getElementById('execution-events');
      return document.body.contains(this.list) && shown !== null &&
        Number(shown.dataset.sequence) < this.last;
    }

    message(block) {
      const data = block.split('\n').filter((line) => line.startsWith('data:'))
        .map((line) => line.slice(5).replace(/^ /, ''));
      if (data.length === 0) return;
      let event;
      try {
        event = JSON.parse(data.join('\n'));
      } catch (_) {
        return;
      }
      this.add(event);
      if (!this.renderTimer) {
        this.renderTimer = setTimeout(() => { this.renderTimer = null; this.render(); }, 50);
      }
      refreshSoon();
    }

    add(event) {
      if (event.sequence <= this.last) return;
      this.last = event.sequence;
      this.count += 1;
      if (this.first === null) this.first = Date.parse(event.timestamp);
      if (TERMINAL.has(event.type)) this.done = true;
      if (event.type === 'llm.called') {
        const payload = event.payload || {};
        const llm = this.llm;
        llm.calls += 1;
        llm.input += payload.input_tokens || 0;
        llm.output += payload.output_tokens || 0;
        if (payload.cost && payload.cost.usd !== undefined) llm.usd += Number(payload.cost.usd) || 0;
      }
      if (event.step_id) {
        let step = this.steps.get(event.step_id);
        if (!step) {
          step = { kind: 'step', id: event.step_id, events: [], node: null };
          this.steps.set(event.step_id, step);
          this.entries.push(step);
        }
        step.events.push(event);
        step.dirty = true;
      } else {
        this.entries.push({ kind: 'event', event, node: null });
      }
    }

    stepState(step) {
      let tool = '';
      let attempt = 1;
      let maxAttempts = 1;
      let state = ['pending', '○'];
      let type = 'step.created';
      for (const event of step.events) {
        const payload = event.payload || {};
        if (event.type === 'step.created') {
          tool = payload.tool_id || tool;
          attempt = payload.attempt || attempt;
          maxAttempts = payload.max_attempts || maxAttempts;
        }
        if (event.type === 'step.approval_required') tool = payload.tool_id || tool;
        if (event.type === 'step.retried') attempt = payload.next_attempt || attempt;
        if (STEP_STATE[event.type]) {
          state = STEP_STATE[event.type];
          type = event.type;
          if (event.type === 'step.failed' && payload.retryable) state = ['failed, will retry', '✖'];
        }
      }
      const start = Date.parse(step.events[0].timestamp);
      const lastEvent = step.events[step.events.length - 1];
      const ended = STEP_ENDS.has(type) || (type === 'step.failed' && !(lastEvent.payload || {}).retryable);
      const end = ended ? Date.parse(lastEvent.timestamp) : Date.now();
      return { tool, attempt, maxAttempts, state, type, took: end - start, ended };
    }

    stepNode(step) {
      const info = this.stepState(step);
      let node = step.node;
      if (!node) {
        node = el('li', 'step');
        const details = el('details');
        details.append(el('summary'));
        details.append(el('ol', 'step-events'));
        details.addEventListener('toggle', () => {
          if (details.open) this.fillStep(step);
        });
        node.append(details);
        step.node = node;
      }
      node.dataset.stepId = step.id;
      node.dataset.state = info.state[0];
      node.className = 'step ev-' + category(info.type);
      const summary = node.querySelector('summary');
      summary.replaceChildren(
        el('span', 'sym', info.state[1]), ' ',
        el('span', 'tool mono', info.tool || 'step'), ' ',
        el('span', 'state', info.state[0]), ' · ',
        el('span', 'attempt', 'attempt ' + info.attempt + ' of ' + info.maxAttempts), ' · ',
        el('span', 'took', (info.ended ? 'took ' : 'for ') + duration(info.took)), ' · ',
        el('span', 'muted', step.events.length + ' events, from ' + clock(step.events[0].timestamp)),
      );
      const principals = [...new Set(step.events.map((event) => event.principal).filter(Boolean))];
      if (principals.length) {
        node.dataset.principals = principals.join(',');
        summary.append(' · ', el('span', 'by', 'by ' + principals.join(', ')));
      }
      if (window.KeelSteps) {
        window.KeelSteps.decorate(this.id, step, node, summary, this.root.hasAttribute('data-operate'));
      }
      if (node.querySelector('details').open) this.fillStep(step);
      return node;
    }

    fillStep(step) {
      const list = step.node.querySelector('.step-events');
      for (let index = list.childElementCount; index < step.events.length; index += 1) {
        list.append(eventRow(step.events[index]));
      }
    }

    render() {
      const start = Math.max(0, this.entries.length - this.shown);
      const visible = this.entries.slice(start);
      for (let index = 0; index < start; index += 1) {
        const node = this.entries[index].node;
        if (node && node.parentNode === this.list) node.remove();
      }
      // Entries only ever join at the end, and "show earlier" only adds at the start: put
      // each visible node in order, creating the missing ones.
      let previous = null;
      for (const entry of visible) {
        let node;
        if (entry.kind === 'step') {
          node = entry.dirty || !entry.node ? this.stepNode(entry) : entry.node;
          entry.dirty = false;
        } else {
          if (!entry.node) entry.node = eventRow(entry.event);
          node = entry.node;
        }
        if (node.parentNode !== this.list || node.previousSibling !== previous) {
          if (previous) previous.after(node);
          else this.list.prepend(node);
        }
        previous = node;
      }
      const hidden = start;
      this.earlier.hidden = hidden === 0;
      this.earlier.textContent = 'Show ' + Math.min(hidden, SHOW_STEP) + ' earlier entries (' + hidden + ' hidden)';
      this.summary.textContent = this.count + ' events in ' + this.entries.length + ' entries (' +
        this.steps.size + ' steps, each collapsed into one line)' +
        (hidden ? '; showing the latest ' + visible.length + '.' : '.') +
        (this.llm.calls ? ' Model calls: ' + this.llm.calls + ', ' + this.llm.input + ' in + ' +
          this.llm.output + ' out tokens, $' + this.llm.usd.toFixed(6) + '.' : '');
    }
  }

  load();
})();
