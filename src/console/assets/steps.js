// Keel console: what the step journal and MCP progress add to a step's line on the execution
// timeline (docs/console.md). Loaded before console.js, which calls `KeelSteps.decorate` for
// every step it draws and hands it its `act` helper for the reconcile form.
//   - "replayed from step X": the re-run got the recorded outcome of step X (no second call);
//   - "re-executed although a result was recorded": the call ran again (a local tool of the
//     rebuno SDK, or a rule with `replay: false`);
//   - "outcome unknown": an at_most_once step lost its runner; an operator answers here
//     (it happened, with its result / run it again / fail the step) when its key operates;
//   - the latest progress an MCP tool reported.
(() => {
  'use strict';

  function span(className, text, title) {
    const node = document.createElement('span');
    node.className = className;
    node.textContent = text;
    if (title) node.title = title;
    return node;
  }

  // What the step's events say beyond its state.
  function facts(events) {
    const found = { replayOf: '', repeats: '', unknown: false, progress: null };
    for (const event of events) {
      const payload = event.payload || {};
      if (event.type === 'step.created') {
        found.replayOf = payload.replay_of || '';
        found.repeats = payload.repeats || '';
      } else if (event.type === 'step.outcome_unknown') {
        found.unknown = true;
      } else if (event.type === 'step.reconciled' || event.type === 'step.completed' ||
                 event.type === 'step.failed' || event.type === 'step.cancelled') {
        found.unknown = false;
      } else if (event.type === 'step.progress') {
        found.progress = payload;
      }
    }
    return found;
  }

  function progressText(progress) {
    const amount = progress.total ? progress.progress + '/' + progress.total : String(progress.progress);
    return progress.message ? amount + ' ' + progress.message : amount;
  }

  function reconcileForm(executionId, stepId) {
    const form = document.createElement('form');
    form.className = 'reconcile';
    form.dataset.reconcile = '';
    form.dataset.executionId = executionId;
    form.dataset.stepId = stepId;
    const result = document.createElement('textarea');
    result.name = 'result';
    result.rows = 2;
    result.placeholder = 'Its result as JSON (for "it happened"), e.g. {"charged": true}';
    result.setAttribute('aria-label', 'Result (JSON) if it happened');
    const error = document.createElement('input');
    error.name = 'error';
    error.type = 'text';
    error.placeholder = 'Error (for "fail the step")';
    error.setAttribute('aria-label', 'Error if the step fails');
    form.append(span('muted', 'Did the call happen? '), result, error);
    for (const [answer, label, kind] of [
      ['happened', '✔ It happened', 'approve'],
      ['run_again', '↻ Run it again', ''],
      ['fail', '✖ Fail the step', 'deny'],
    ]) {
      const button = document.createElement('button');
      button.type = 'submit';
      button.name = 'answer';
      button.value = answer;
      button.textContent = label;
      if (kind) button.className = kind;
      form.append(' ', button);
    }
    return form;
  }

  // Adds the badges (and, for a key that operates, the reconcile form) to a step's node;
  // `summary` is its summary line.
  function decorate(executionId, step, node, summary, operates) {
    const found = facts(step.events);
    if (found.progress) {
      summary.append(' · ', span('progress', '⋯ ' + progressText(found.progress), 'Latest progress the tool reported'));
    }
    if (found.replayOf) {
      summary.append(' ', span('badge badge-replayed', '↺ replayed from step ' + found.replayOf,
        'A re-run got the recorded outcome of that step; the tool did not run again'));
    }
    if (found.repeats) {
      summary.append(' ', span('badge badge-repeated', '⚠ re-executed although a result was recorded',
        'Step ' + found.repeats + ' recorded a result, and this call ran again'));
    }
    if (found.unknown) {
      summary.append(' ', span('badge badge-unknown', '? outcome unknown',
        'The runner was lost after it got the job; an operator must say what happened'));
    }
    let form = node.querySelector(':scope > form.reconcile');
    if (found.unknown && operates && !form) {
      form = reconcileForm(executionId, step.id);
      node.append(form);
    } else if ((!found.unknown || !operates) && form) {
      form.remove();
    }
  }

  async function submit(form, answer, act) {
    const body = { answer };
    if (answer === 'happened') {
      const text = form.elements.result.value.trim();
      if (text) {
        try {
          body.result = JSON.parse(text);
        } catch (error) {
          return { invalid: 'The result is not valid JSON: ' + error.message };
        }
      }
    } else if (answer === 'fail') {
      const error = form.elements.error.value.trim();
      if (error) body.error = error;
    }
    const url = '/v0/executions/' + encodeURIComponent(form.dataset.executionId) + '/steps/' +
      encodeURIComponent(form.dataset.stepId) + '/reconcile';
    const labels = { happened: 'It happened', run_again: 'Run it again', fail: 'Fail the step' };
    return { done: await act('Reconcile: ' + labels[answer], 'POST', url, body) };
  }

  window.KeelSteps = { decorate, submit, facts };
})();
