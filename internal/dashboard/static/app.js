// Sluice dashboard. Everything that comes from policies or requests
// (names, keys, header values) is user data: it reaches the page only as
// text nodes and attribute values, never as HTML.
'use strict';

(() => {
  const $ = (sel) => document.querySelector(sel);
  const SVG = 'http://www.w3.org/2000/svg';

  // el builds an element; children that are not nodes become text.
  function el(tag, props, ...children) {
    const e = document.createElement(tag);
    for (const [k, v] of Object.entries(props || {})) {
      if (v === null || v === undefined || v === false) continue;
      if (k === 'class') e.className = v;
      else if (k.startsWith('on')) e.addEventListener(k.slice(2), v);
      else e.setAttribute(k, v === true ? '' : String(v));
    }
    for (const c of children.flat()) {
      if (c === null || c === undefined || c === false) continue;
      e.append(c instanceof Node ? c : String(c));
    }
    return e;
  }

  function svg(tag, attrs, text) {
    const e = document.createElementNS(SVG, tag);
    for (const [k, v] of Object.entries(attrs || {})) e.setAttribute(k, String(v));
    if (text !== undefined) e.textContent = text;
    return e;
  }

  const policyId = (ns, name) => ns + '/' + name;
  const limitId = (ns, name, limit) => ns + '/' + name + '/' + limit;

  // ---- state: policies, statuses and live counts ----

  let state = null;
  let policiesSig = '';
  let countCells = new Map();

  async function refresh() {
    try {
      const r = await fetch('/api/dashboard/state', { cache: 'no-store' });
      if (!r.ok) throw new Error('HTTP ' + r.status);
      apply(await r.json());
      $('#conn').textContent = '';
    } catch (e) {
      $('#conn').textContent = 'cannot reach the server: ' + e.message;
    }
  }

  function apply(s) {
    state = s;
    $('#mode').textContent = s.mode === 'local' ? 'local mode' : s.mode === 'cluster' ? 'cluster (read-only)' : s.mode;
    $('#revision').textContent = 'policy set revision ' + s.revision;
    $('#notice').textContent = s.notice;
    $('#problems').replaceChildren(...s.problems.map((p) => el('li', null, p)));
    const sig = JSON.stringify([s.editable, s.admin, s.policies]);
    if (sig !== policiesSig) {
      policiesSig = sig;
      renderPolicies(s);
      renderNamespaces(s);
    }
    renderCounts(s.counts);
  }

  function renderPolicies(s) {
    const table = $('#policies');
    for (const tb of table.querySelectorAll('tbody')) tb.remove();
    countCells = new Map();
    if (s.policies.length === 0) {
      table.append(el('tbody', null, el('tr', null, el('td', { colspan: 10, class: 'muted' }, 'No policies.'))));
      return;
    }
    for (const p of s.policies) {
      const group = el('tbody', { class: 'policy-group', 'data-policy': policyId(p.namespace, p.name) });
      const rows = p.limits.length ? [...p.limits] : [null];
      if (p.penalty) rows.push(PENALTY);
      const span = rows.length;
      rows.forEach((l, i) => {
        const tr = el('tr', l && l !== PENALTY ? { 'data-limit': l.name } : null);
        if (i === 0) {
          tr.append(
            el('td', { rowspan: span },
              el('div', null, el('b', null, p.name), ' ', el('span', { class: 'muted' }, p.namespace)),
              p.file ? el('div', { class: 'file' }, p.file) : null,
              p.edited ? el('span', { class: 'badge edited', title: 'edited from this page at ' + p.editedAt + '; the file has not changed since' }, 'edited here') : null),
            el('td', { rowspan: span }, readyCell(p)),
            el('td', { rowspan: span }, p.mode ? el('span', { class: 'badge' + (p.mode === 'Shadow' ? ' shadow' : '') }, p.mode) : '',
              modeSettings(p)),
            el('td', { rowspan: span }, p.key !== undefined ? el('code', null, p.key) : '', keySettings(p)));
        }
        if (l === PENALTY) {
          tr.className = 'penalty';
          tr.append(
            el('td', { title: 'a bucket denied this many times within the span is banned: every request denied until the ban ends; a ban soon after the last doubles, up to maxBan' }, el('b', null, 'penalty box')),
            el('td', { class: 'params' }, el('code', null, 'penalty'), ' ', params(p.penalty)),
            el('td', { colspan: 3 }));
        } else if (l) {
          const allowed = el('td', { class: 'num' }, '0');
          const denied = el('td', { class: 'num denied-count' }, '0');
          const shadow = el('td', { class: 'num' }, '0');
          countCells.set(limitId(p.namespace, p.name, l.name), { allowed, denied, shadow });
          tr.append(
            el('td', null, el('b', null, l.name), limitBadges(p, l)),
            el('td', { class: 'params' }, el('code', null, l.algorithm), ' ', params(l.params)),
            allowed, denied, shadow);
        } else {
          tr.append(el('td', { colspan: 5, class: 'muted' }, 'no version in force'));
        }
        if (i === 0) {
          const actions = el('td', { rowspan: span });
          if (p.inForce) {
            actions.append(el('button', { type: 'button', class: 'small', onclick: () => tryPolicy(p) }, 'Try'));
          }
          if (s.editable && p.editable) {
            actions.append(' ', el('button', { type: 'button', class: 'small edit', onclick: () => openEditor(p) }, 'Edit'));
          }
          if (s.admin && p.inForce) {
            actions.append(' ', el('button', { type: 'button', class: 'small ops', title: 'top key values, bans, overrides and reset', onclick: () => openOps(p) }, 'Keys'));
          }
          tr.append(actions);
        }
        group.append(tr);
      });
      table.append(group);
    }
  }

  // PENALTY stands for a policy's penalty box among its limits' rows.
  const PENALTY = {};

  // params shows numbers by their API names: a limit's, a penalty box's, a lease's.
  function params(list) {
    return list.map((pa) => el('span', { 'data-param': pa.name }, pa.name + ' ', el('b', null, pa.value)));
  }

  // setting is one of a policy's settings, shown when it is not the default.
  function setting(name, ...children) {
    return el('div', { class: 'small muted setting', 'data-setting': name }, ...children);
  }

  // modeSettings are what decides beside the limits: what is counted,
  // what Redis's failure answers, what a denial answers, and a lease.
  function modeSettings(p) {
    return [
      p.charge === 'Always' ? setting('charge', 'charge Always') : null,
      p.failureMode === 'Closed' ? setting('failureMode', 'failure mode Closed') : null,
      p.denyStatus ? setting('denyStatus', 'deny status ' + p.denyStatus) : null,
      p.headers && p.headers !== 'Both' ? setting('headers', 'headers ' + p.headers) : null,
      p.lease ? el('div', { class: 'small muted setting params', 'data-setting': 'lease' }, 'lease ', params(p.lease)) : null,
    ];
  }

  // keySettings are what goes with the key: a request without its value,
  // and the units a request takes.
  function keySettings(p) {
    return [
      p.onMissingKey && p.onMissingKey !== 'Skip' ? setting('onMissingKey', 'missing key: ' + p.onMissingKey) : null,
      p.cost > 1 ? setting('cost', 'cost ' + p.cost) : null,
    ];
  }

  function readyCell(p) {
    if (p.ready) return el('span', { class: 'ready' }, 'Ready');
    return el('div', null,
      el('span', { class: 'not-ready' }, p.inForce ? 'Not ready' : 'Not in force'),
      el('div', { class: 'message' }, p.message || ''));
  }

  // limitBadges shows a limit's own mode where it differs from its
  // policy's, and a limit hidden from clients.
  function limitBadges(p, l) {
    return [
      l.mode && l.mode !== p.mode ? el('span', { class: 'badge' + (l.mode !== 'Enforce' ? ' shadow' : ''), 'data-limit-mode': l.mode }, l.mode) : null,
      l.hidden ? el('span', { class: 'badge', title: 'never shown to clients (visibility: Hidden)' }, 'hidden') : null,
    ];
  }

  function renderCounts(counts) {
    for (const c of counts) {
      const cells = countCells.get(limitId(c.namespace, c.policy, c.limit));
      if (!cells) continue;
      cells.allowed.textContent = c.allowed;
      cells.denied.textContent = c.denied;
      // Would deny: a shadow limit's denials, and the requests a soft
      // limit let through over it.
      cells.shadow.textContent = c.shadowDenied + (c.softOver || 0);
    }
  }

  function renderNamespaces(s) {
    const nss = [...new Set(s.policies.map((p) => p.namespace))];
    $('#namespaces').replaceChildren(...nss.map((ns) => el('option', { value: ns })));
    const f = $('#try-form').elements;
    if (nss.length && !nss.includes(f.namespace.value.trim())) f.namespace.value = nss[0];
    renderPolicyOptions();
  }

  function renderPolicyOptions() {
    const f = $('#try-form').elements;
    const ns = f.namespace.value.trim();
    const chosen = f.policy.value;
    const names = state ? state.policies.filter((p) => p.namespace === ns && p.inForce).map((p) => p.name) : [];
    f.policy.replaceChildren(el('option', { value: '' }, 'every matching policy'),
      ...names.map((n) => el('option', { value: n }, n)));
    f.policy.value = names.includes(chosen) ? chosen : '';
  }

  function tryPolicy(p) {
    const f = $('#try-form').elements;
    f.namespace.value = p.namespace;
    renderPolicyOptions();
    f.policy.value = p.name;
    $('#try-section').scrollIntoView({ block: 'nearest' });
  }

  // ---- editing a policy's numbers (local mode) ----

  let editing = null;

  function openEditor(p) {
    editing = p;
    $('#edit-section').hidden = false;
    $('#edit-title').textContent = 'Edit ' + policyId(p.namespace, p.name);
    $('#edit-fields').replaceChildren(...p.limits.map((l) =>
      el('fieldset', { 'data-limit': l.name },
        el('legend', null, l.name + ' (' + l.algorithm + ')'),
        l.params.map((pa) => el('label', null, pa.name,
          el('input', { name: l.name + '.' + pa.name, 'data-param': pa.name, value: pa.value, size: 10,
            title: pa.duration ? 'a duration such as 500ms, 10s, 1m30s or 24h' : 'a whole number' }))))));
    $('#edit-revert').disabled = !p.edited;
    setEditResult('', '');
    $('#edit-section').scrollIntoView({ block: 'nearest' });
  }

  function setEditResult(text, cls) {
    const r = $('#edit-result');
    r.textContent = text;
    r.className = cls;
  }

  async function saveEdit(ev) {
    ev.preventDefault();
    if (!editing) return;
    const limits = [...$('#edit-fields').querySelectorAll('fieldset')].map((fs) => {
      const params = {};
      for (const input of fs.querySelectorAll('input')) params[input.dataset.param] = input.value;
      return { name: fs.dataset.limit, params };
    });
    await sendEdit('POST', 'limits', { limits }, 'Applied: the new numbers are in force now.');
  }

  async function revertEdit() {
    if (!editing) return;
    await sendEdit('DELETE', 'edit', null, 'Reverted: the file\'s version is in force again.');
  }

  async function sendEdit(method, what, body, okText) {
    const p = editing;
    const url = '/api/dashboard/policies/' + encodeURIComponent(p.namespace) + '/' + encodeURIComponent(p.name) + '/' + what;
    try {
      // Every change is declared JSON, even a revert without a body: the
      // server refuses any other (a cross-site form could send those).
      const r = await fetch(url, { method, headers: { 'Content-Type': 'application/json' }, body: body ? JSON.stringify(body) : undefined });
      const j = await r.json().catch(() => ({}));
      if (!r.ok) {
        setEditResult((j.title || 'HTTP ' + r.status) + (j.detail ? ':\n' + j.detail : ''), 'error');
        return;
      }
      apply(j);
      const now = j.policies.find((q) => q.namespace === p.namespace && q.name === p.name);
      if (now) {
        if (method === 'DELETE') openEditor(now);
        editing = now;
        $('#edit-revert').disabled = !now.edited;
      }
      setEditResult(okText + ' (policy set revision ' + j.revision + ')', 'ok');
    } catch (e) {
      setEditResult('The edit could not be sent: ' + e.message, 'error');
    }
  }

  // ---- a policy's key values: top, bans, overrides, reset (local mode,
  // through the admin API behind /api/dashboard/admin/) ----

  let operating = null;
  let opsSigs = {};

  function adminPath(p, resource, query) {
    const url = '/api/dashboard/admin/namespaces/' + encodeURIComponent(p.namespace) +
      '/ratelimitpolicies/' + encodeURIComponent(p.name) + '/' + resource;
    const qs = new URLSearchParams(query || {}).toString();
    return qs ? url + '?' + qs : url;
  }

  // errorText is what the server said: the admin API's Status message as
  // it is, or the dashboard's own problem.
  function errorText(j, status) {
    if (j && j.kind === 'Status' && j.message) return j.message;
    if (j && j.title) return j.title + (j.detail ? ': ' + j.detail : '');
    return 'HTTP ' + status;
  }

  async function adminCall(method, url, body) {
    const init = { method, cache: 'no-store' };
    if (method !== 'GET') {
      // Declared JSON, even without a body: the server refuses any other.
      init.headers = { 'Content-Type': 'application/json' };
      if (body) init.body = JSON.stringify(body);
    }
    const r = await fetch(url, init);
    const j = await r.json().catch(() => null);
    if (!r.ok) throw new Error(errorText(j, r.status));
    return j;
  }

  function openOps(p) {
    operating = p;
    opsSigs = {};
    $('#ops-section').hidden = false;
    $('#ops-title').textContent = 'Key values of ' + policyId(p.namespace, p.name);
    for (const t of ['#top-denied', '#top-admitted', '#bans', '#overrides']) $(t).replaceChildren();
    $('#top-bound').textContent = '';
    $('#reset-form').elements.limit.replaceChildren(el('option', { value: '' }, 'every limit'),
      ...p.limits.map((l) => el('option', { value: l.name }, l.name)));
    $('#override-form').elements.limits.placeholder = p.limits.map((l) => {
      const count = l.params.find((pa) => !pa.duration);
      return l.name + '=' + (count ? count.value * 10 : 100);
    }).join(' ');
    setOpsResult('', '');
    $('#ops-section').scrollIntoView({ block: 'nearest' });
    refreshOps();
  }

  function closeOps() {
    operating = null;
    $('#ops-section').hidden = true;
  }

  function setOpsResult(text, cls) {
    const r = $('#ops-result');
    r.textContent = text;
    r.className = cls;
  }

  async function refreshOps() {
    const p = operating;
    if (!p) return;
    try {
      const [top, bans, ovs] = await Promise.all(['top', 'bans', 'overrides'].map((what) => adminCall('GET', adminPath(p, what))));
      if (p !== operating) return;
      $('#ops-error').textContent = '';
      renderChanged('top', top, renderTop);
      renderChanged('bans', bans, renderBans);
      renderChanged('overrides', ovs, renderOverrides);
    } catch (e) {
      if (p === operating) $('#ops-error').textContent = e.message;
    }
  }

  // renderChanged renders what changed only, so that a button is not
  // replaced under the pointer every second.
  function renderChanged(what, data, render) {
    const sig = JSON.stringify(data);
    if (opsSigs[what] === sig) return;
    opsSigs[what] = sig;
    render(data);
  }

  const emptyRow = (text) => el('tbody', null, el('tr', null, el('td', { class: 'muted' }, text)));
  const head = (...names) => el('thead', null, el('tr', null, names.map((h) => el('th', null, h))));
  const keyCell = (key) => el('td', null, el('code', { class: 'key' }, key));

  function renderTop(top) {
    for (const [sel, entries, what] of [['#top-denied', top.denied, 'denied'], ['#top-admitted', top.admitted, 'admitted']]) {
      $(sel).replaceChildren(entries.length === 0 ? emptyRow('None ' + what + ' in the last ' + top.window + '.') : el('tbody', null,
        el('tr', null, el('th', null, 'Key value'), el('th', { class: 'num' }, 'Count'),
          el('th', { class: 'num', title: 'the count exceeds the true number of decisions by at most this' }, 'Over by at most'), el('th')),
        entries.map((e) => el('tr', { 'data-key': e.key },
          keyCell(e.key),
          el('td', { class: 'num count' }, e.count),
          el('td', { class: 'num' }, e.overestimate),
          el('td', null, el('button', { type: 'button', class: 'small reset', title: 'reset every limit of this key value', onclick: () => resetKey(e.key, '') }, 'Reset'))))));
    }
    $('#top-bound').textContent = 'Over the last ' + top.window + ': ' + top.errorBound + '.';
  }

  function renderBans(list) {
    $('#bans').replaceChildren(list.bans.length === 0 ? emptyRow('No bans in force.') : head('Key value', 'Time left', 'Ban length', ''),
      el('tbody', null, list.bans.map((b) => el('tr', { 'data-key': b.key },
        keyCell(b.key),
        el('td', { class: 'num' }, b.remaining),
        el('td', { class: 'num' }, b.length),
        el('td', null, el('button', { type: 'button', class: 'small lift', onclick: () => lift(b.key) }, 'Lift'))))));
  }

  function renderOverrides(list) {
    $('#overrides').replaceChildren(list.overrides.length === 0 ? emptyRow('No overrides.') : head('Key value', 'Limits', 'Source', 'Expires', 'Set by', ''),
      el('tbody', null, list.overrides.map((o) => el('tr', { 'data-key': o.key, 'data-source': o.source },
        keyCell(o.key),
        el('td', { class: 'limits' }, Object.keys(o.limits).sort().map((n) => el('span', { 'data-limit': n }, n + ' ', el('b', null, o.limits[n])))),
        el('td', null, o.source),
        el('td', null, o.expires || 'never'),
        el('td', null, o.setBy || (o.object ? 'object ' + o.object : '')),
        el('td', null, o.source === 'Runtime'
          ? el('button', { type: 'button', class: 'small delete', onclick: () => deleteOverride(o.key) }, 'Delete')
          : el('span', { class: 'muted small', title: 'declared in a RateLimitOverrides file: change it there' }, 'from a file'))))));
  }

  // act makes a change through the admin API and says how it went: what
  // was done, or the server's message as it is.
  async function act(method, resource, query, body, done) {
    const p = operating;
    if (!p) return;
    try {
      setOpsResult(done(await adminCall(method, adminPath(p, resource, query), body)), 'ok');
    } catch (e) {
      setOpsResult(e.message, 'error');
    }
    await refreshOps();
  }

  function resetKey(key, limit) {
    return act('DELETE', 'keys', limit ? { key, limit } : { key }, null,
      (j) => 'Reset ' + j.limits.join(', ') + ' of key value ' + j.key + '.');
  }

  function lift(key) {
    return act('DELETE', 'bans', { key }, null, (j) => 'Lifted the ban of key value ' + j.key + '.');
  }

  function deleteOverride(key) {
    return act('DELETE', 'overrides', { key }, null, (j) => 'Deleted the override of key value ' + j.key + '.');
  }

  function setOverride(ev) {
    ev.preventDefault();
    const f = $('#override-form').elements;
    const limits = {};
    for (const pair of f.limits.value.split(/[\s,]+/).filter(Boolean)) {
      const m = /^([^=]+)=(\d+)$/.exec(pair);
      if (!m) {
        setOpsResult('"' + pair + '" is not limit=number (a whole number), such as burst=50', 'error');
        return;
      }
      limits[m[1]] = Number(m[2]);
    }
    const body = { limits };
    const expiresIn = f.expiresIn.value.trim();
    if (expiresIn) body.expiresIn = expiresIn;
    act('PUT', 'overrides', { key: f.key.value }, body, (j) => 'Override set for key value ' + j.key + ': ' +
      Object.keys(j.limits).sort().map((n) => n + '=' + j.limits[n]).join(' ') + (j.expires ? ', until ' + j.expires : '') + '.');
  }

  function submitReset(ev) {
    ev.preventDefault();
    const f = $('#reset-form').elements;
    resetKey(f.key.value, f.limit.value);
  }

  // ---- trying a request ----

  function requestBody(dryRun) {
    const f = $('#try-form').elements;
    const headers = {};
    for (const line of f.headers.value.split('\n')) {
      const t = line.trim();
      if (!t) continue;
      const i = t.indexOf(':');
      if (i <= 0) throw new Error('the header line "' + t + '" is not "Name: value"');
      headers[t.slice(0, i).trim()] = t.slice(i + 1).trim();
    }
    const body = {
      namespace: f.namespace.value.trim(),
      request: { method: f.method.value, host: f.host.value.trim(), path: f.path.value.trim() || '/', headers },
      dryRun,
    };
    if (f.clientIP.value.trim()) body.request.clientIP = f.clientIP.value.trim();
    if (f.policy.value) body.policy = f.policy.value;
    const cost = parseInt(f.cost.value, 10);
    if (cost > 0) body.cost = cost;
    return body;
  }

  async function check(body) {
    const r = await fetch('/v1/check', { method: 'POST', headers: { 'Content-Type': 'application/json' }, body: JSON.stringify(body) });
    const j = await r.json().catch(() => ({}));
    if (!r.ok) throw new Error(j.detail || j.title || 'HTTP ' + r.status);
    return j;
  }

  function showError(where, e) {
    $(where).replaceChildren(el('div', { class: 'decision denied' }, e.message));
  }

  async function tryRequest(ev) {
    ev.preventDefault();
    let body;
    try {
      body = requestBody(true);
      renderResult(await check(body), body, 'Dry run: nothing was consumed or counted.');
    } catch (e) {
      showError('#try-result', e);
    }
  }

  function fmtSeconds(s) {
    return s === undefined || s === null ? '' : s + 's';
  }

  function renderResult(resp, body, note) {
    const out = [];
    const verdict = resp.allowed ? 'Allowed' : 'Denied';
    out.push(el('div', { class: 'decision ' + (resp.allowed ? 'allowed' : 'denied'), id: 'decision' },
      verdict, ' ', el('span', { class: 'muted' }, '(' + resp.reason + ')'),
      resp.retryAfterSeconds !== undefined ? el('span', { class: 'muted' }, ' retry after ' + resp.retryAfterSeconds + 's') : null,
      resp.degraded ? el('span', { class: 'muted' }, ' answered by the failure mode: ' + (resp.error || '')) : null,
      ' ', el('span', { class: 'muted' }, note)));
    if (resp.policies.length === 0) {
      out.push(el('p', { class: 'muted' }, body.policy
        ? 'Policy ' + policyId(body.namespace, body.policy) + ' does not match this request.'
        : 'No policy in namespace ' + body.namespace + ' matches this request.'));
    }
    for (const p of resp.policies) {
      const card = el('div', { class: 'card matched-policy', 'data-policy': policyId(p.namespace, p.name) },
        el('h3', null, policyId(p.namespace, p.name), ' ', el('span', { class: 'badge' + (p.mode === 'Shadow' ? ' shadow' : '') }, p.mode)),
        p.missingKey
          ? el('div', { class: 'kv' }, 'The request has no value for the key\'s placeholder.')
          : el('div', { class: 'kv' }, 'key ', el('code', { class: 'key' }, p.key)),
        p.whenError ? el('div', { class: 'kv error' }, 'when expression error (the policy applies): ' + p.whenError) : null);
      if (p.limits && p.limits.length) {
        card.append(el('table', { class: 'limits' },
          el('thead', null, el('tr', null, ['Limit', 'Algorithm', 'Decision', 'Remaining', 'Reset in', 'Retry after', 'Redis key (field)'].map((h) => el('th', null, h))) ),
          el('tbody', null, p.limits.map((l) => el('tr', { 'data-limit': l.name },
            el('td', null, el('b', null, l.name)),
            el('td', null, l.algorithm),
            el('td', { class: l.allowed ? 'allowed' : 'denied' }, (l.allowed ? 'allowed' : l.banned ? 'banned' : 'denied') + (l.cached ? ' (cached)' : '')),
            el('td', { class: 'num remaining' }, l.remaining + ' / ' + l.limit),
            el('td', { class: 'num' }, fmtSeconds(l.resetSeconds)),
            el('td', { class: 'num' }, fmtSeconds(l.retryAfterSeconds)),
            el('td', { class: 'rediskey' }, el('code', null, l.redisField ? l.redisKey + ' ' + l.redisField : l.redisKey)))))));
      }
      out.push(card);
    }
    $('#try-result').replaceChildren(...out);
  }

  // ---- burst and the chart ----

  const COLORS = ['#1f5fbf', '#d97706', '#7c3aed', '#0f766e', '#be185d', '#4d7c0f'];
  const WATCH_MS = 30000;
  const POLL_MS = 500;
  let watch = null;

  function policyCost(ns, name, body) {
    if (body.cost) return body.cost;
    const p = state && state.policies.find((q) => q.namespace === ns && q.name === name);
    return p && p.cost ? p.cost : 1;
  }

  // record adds one answer to the chart. A real call's remaining is what
  // is left; a dry run reports what would be left after consuming, so
  // the cost it would have taken is added back to show what is left now.
  function record(resp, body, t) {
    for (const p of resp.policies) {
      for (const l of p.limits || []) {
        const id = limitId(p.namespace, p.name, l.name);
        let s = watch.series.get(id);
        if (!s) {
          s = { label: id, limit: l.limit, color: COLORS[watch.series.size % COLORS.length], points: [] };
          watch.series.set(id, s);
        }
        s.limit = l.limit;
        let v = l.remaining;
        if (body.dryRun && resp.allowed && l.allowed) v += policyCost(p.namespace, p.name, body);
        s.points.push({ t, v: Math.min(v, l.limit) });
      }
    }
  }

  async function burst() {
    let body;
    try {
      body = requestBody(false);
    } catch (e) {
      showError('#try-result', e);
      return;
    }
    const f = $('#try-form').elements;
    const n = Math.min(Math.max(parseInt(f.burst.value, 10) || 10, 1), 200);
    if (!watch) watch = { start: performance.now(), series: new Map(), marks: [], timer: null, until: 0 };
    $('#burst-button').disabled = true;
    // One dry run first, so the chart starts from the level before the burst.
    const dry = Object.assign({}, body, { dryRun: true });
    try {
      record(await check(dry), dry, performance.now());
    } catch (e) {
      // The real requests below report the problem.
    }
    const log = $('#burst-log');
    log.replaceChildren();
    let allowed = 0, denied = 0, last = null;
    for (let i = 1; i <= n; i++) {
      const t = performance.now();
      try {
        last = await check(body);
      } catch (e) {
        showError('#try-result', e);
        break;
      }
      record(last, body, t);
      watch.marks.push({ t, allowed: last.allowed });
      if (last.allowed) allowed++; else denied++;
      log.append(el('li', { class: last.allowed ? 'allowed' : 'denied' }, describe(last)));
    }
    $('#burst-button').disabled = false;
    if (last) renderResult(last, body, 'Last request of the burst: real, consumed and counted.');
    const summary = $('#burst-summary');
    summary.className = 'result';
    summary.textContent = 'Burst of ' + (allowed + denied) + ': ' + allowed + ' allowed, ' + denied + ' denied. Watching in dry run for ' + WATCH_MS / 1000 + 's…';
    watch.body = Object.assign({}, body, { dryRun: true });
    watch.until = performance.now() + WATCH_MS;
    $('#stop-button').disabled = false;
    draw();
    if (!watch.timer) poll();
  }

  function describe(resp) {
    if (resp.allowed) {
      const left = resp.policies.flatMap((p) => (p.limits || []).map((l) => l.name + ' ' + l.remaining + ' left'));
      return 'allowed' + (left.length ? ' — ' + left.join(', ') : '');
    }
    const by = resp.policies.flatMap((p) => (p.limits || []).filter((l) => !l.allowed).map((l) => p.name + '/' + l.name));
    return 'denied' + (by.length ? ' by ' + by.join(', ') : '') + (resp.retryAfterSeconds !== undefined ? ', retry in ' + resp.retryAfterSeconds + 's' : '');
  }

  async function poll() {
    if (!watch) return;
    if (performance.now() > watch.until) {
      stopWatching();
      return;
    }
    try {
      record(await check(watch.body), watch.body, performance.now());
    } catch (e) {
      $('#burst-summary').textContent = 'Watching stopped: ' + e.message;
      stopWatching();
      return;
    }
    draw();
    watch.timer = setTimeout(poll, POLL_MS);
  }

  function stopWatching() {
    if (!watch) return;
    clearTimeout(watch.timer);
    watch.timer = null;
    watch.until = 0;
    $('#stop-button').disabled = true;
    const s = $('#burst-summary');
    s.textContent = s.textContent.replace(/ Watching in dry run for \d+s…$/, '') + ' Stopped watching.';
  }

  function draw() {
    // Drawn at the element's own width, so text keeps its CSS size.
    const W = Math.max(480, Math.round($('#chart').clientWidth || 760)), H = 250, L = 46, R = 14, T = 40, B = 30;
    const now = performance.now();
    const span = Math.max(20000, Math.min(60000, now - watch.start));
    const t1 = Math.max(now, watch.start + span), t0 = t1 - span;
    const x = (t) => L + ((t - t0) / span) * (W - L - R);
    const series = [...watch.series.values()];
    const limits = [...new Set(series.map((s) => s.limit))];
    const absolute = limits.length === 1;
    const top = absolute ? limits[0] : 100;
    const frac = (s, v) => (absolute ? v : (100 * v) / s.limit);
    const y = (u) => T + (1 - u / top) * (H - T - B);

    const root = svg('svg', { viewBox: '0 0 ' + W + ' ' + H, role: 'img', 'aria-label': 'remaining units of each limit over time' });
    root.append(svg('line', { class: 'axis', x1: L, y1: y(0), x2: W - R, y2: y(0) }));
    root.append(svg('line', { class: 'axis', x1: L, y1: T, x2: L, y2: y(0) }));
    const ticks = top <= 5 ? top : 4;
    for (let i = 0; i <= ticks; i++) {
      const u = (top * i) / ticks;
      root.append(svg('line', { class: 'axis', x1: L - 3, y1: y(u), x2: W - R, y2: y(u), 'stroke-dasharray': i ? '2 4' : '' }));
      root.append(svg('text', { class: 'tick', x: L - 6, y: y(u) + 4, 'text-anchor': 'end' }, absolute ? String(Math.round(u * 10) / 10) : Math.round(u) + '%'));
    }
    const step = span > 30000 ? 10000 : 5000;
    for (let t = Math.ceil((t0 - watch.start) / step) * step; watch.start + t <= t1; t += step) {
      root.append(svg('text', { class: 'tick', x: x(watch.start + t), y: H - 10, 'text-anchor': 'middle' }, Math.round(t / 1000) + 's'));
    }
    root.append(svg('text', { class: 'tick', x: L, y: 12 }, absolute ? 'remaining (of ' + top + ')' : 'remaining (% of each limit)'));

    for (const s of series) {
      const pts = s.points.filter((p) => p.t >= t0 - 60000);
      if (!pts.length) continue;
      let d = '';
      for (const p of pts) {
        const px = Math.max(L, x(p.t)).toFixed(1), py = y(frac(s, p.v)).toFixed(1);
        d += d ? ' H' + px + ' V' + py : 'M' + px + ' ' + py;
      }
      if (watch.until) d += ' H' + x(now).toFixed(1);
      root.append(svg('path', { class: 'series', d, stroke: s.color }));
    }
    // Requests of a burst arrive within milliseconds: each mark keeps its
    // own spot to the right of the previous one.
    let lastX = -Infinity;
    for (const m of watch.marks) {
      if (m.t < t0) continue;
      const mx = Math.min(Math.max(x(m.t), lastX + 9), W - R);
      lastX = mx;
      if (m.allowed) {
        root.append(svg('circle', { class: 'mark-allowed', cx: mx, cy: T - 12, r: 3.5 }, undefined));
      } else {
        const g = svg('g', { class: 'mark-denied' });
        g.append(svg('line', { x1: mx - 3.5, y1: T - 15.5, x2: mx + 3.5, y2: T - 8.5 }), svg('line', { x1: mx - 3.5, y1: T - 8.5, x2: mx + 3.5, y2: T - 15.5 }));
        root.append(g);
      }
    }
    $('#chart').replaceChildren(root);
    $('#legend').replaceChildren(
      el('span', { class: 'muted' }, 'along the top: ● allowed, ✕ denied (real requests)'),
      ...series.map((s) => {
        const sw = el('span', { class: 'swatch' });
        sw.style.background = s.color;
        const last = s.points.length ? s.points[s.points.length - 1].v : '?';
        return el('span', { class: 'legend-item' }, sw, s.label + ': ' + last + ' / ' + s.limit);
      }));
  }

  // ---- wiring ----

  function init() {
    $('#try-form').addEventListener('submit', tryRequest);
    $('#burst-button').addEventListener('click', burst);
    $('#stop-button').addEventListener('click', stopWatching);
    $('#edit-form').addEventListener('submit', saveEdit);
    $('#edit-revert').addEventListener('click', revertEdit);
    $('#edit-close').addEventListener('click', () => { editing = null; $('#edit-section').hidden = true; });
    $('#try-form').elements.namespace.addEventListener('input', renderPolicyOptions);
    $('#override-form').addEventListener('submit', setOverride);
    $('#reset-form').addEventListener('submit', submitReset);
    $('#ops-close').addEventListener('click', closeOps);
    const loop = async () => {
      await refresh();
      if (state && !state.admin) closeOps();
      await refreshOps();
      setTimeout(loop, 1000);
    };
    loop();
  }

  if (document.readyState === 'loading') document.addEventListener('DOMContentLoaded', init);
  else init();
})();
