//! Page-side JavaScript of the actions (functions run with `Runtime.callFunctionOn` on the
//! element, or expressions for `Runtime.evaluate` with a JSON argument spliced in).

/// `this` = element; (x, y) = click point in the element's document; `given`: the node Chrome
/// hit-tested at that point (an element in a child frame, whose document's coordinates are
/// not the root's), or `null` to hit-test here. Reports whether the element (or something
/// belonging to it: a descendant, its label, the control of a label) is the topmost hit, and
/// arms [`CLICK_RECEIPT`]: a capture listener on the element's window that notes whether a
/// trusted pointer or mouse event of the click reached the element.
pub const CLICK_PROBE: &str = r#"function(x, y, given) {
  const el = this;
  let hit = given;
  if (given === null || given === undefined) {
    const root = el.getRootNode ? el.getRootNode() : document;
    hit = (root && root.elementFromPoint) ? root.elementFromPoint(x, y) : document.elementFromPoint(x, y);
    while (hit && hit.shadowRoot && hit.shadowRoot.elementFromPoint) {
      const inner = hit.shadowRoot.elementFromPoint(x, y);
      if (!inner || inner === hit) break;
      hit = inner;
    }
  }
  const inside = (n, anc) => { while (n) { if (n === anc) return true; n = n.parentNode || n.host; } return false; };
  const labels = el.labels ? Array.from(el.labels) : [];
  let ok = false;
  if (hit) {
    ok = inside(hit, el)
      || (hit.tagName === 'LABEL' && hit.control === el)
      || (el.tagName === 'LABEL' && el.control === hit)
      || labels.some(l => inside(hit, l));
  }
  const KEY = Symbol.for('browserd.click');
  const w = (el.ownerDocument && el.ownerDocument.defaultView) || window;
  if (w[KEY]) w[KEY].disarm();
  const state = { reached: false };
  const related = (path) => path.includes(el)
    || labels.some(l => path.includes(l))
    || (el.tagName === 'LABEL' && !!el.control && path.includes(el.control));
  const types = ['pointerdown', 'mousedown', 'pointerup', 'mouseup', 'click'];
  // On the window (the path from there shows open shadow trees) and on the element and its
  // labels themselves (an element in a closed shadow tree is not in the path the window sees).
  const listened = [w, el, ...labels];
  const note = (event) => {
    if (state.reached || !event.isTrusted) return;
    if (event.currentTarget !== w) { state.reached = true; return; }
    try { if (related(event.composedPath())) state.reached = true; } catch (_) {}
  };
  let timer = 0;
  state.disarm = () => {
    for (const target of listened) for (const t of types) target.removeEventListener(t, note, true);
    clearTimeout(timer);
    if (w[KEY] === state) delete w[KEY];
  };
  for (const target of listened) for (const t of types) target.addEventListener(t, note, true);
  Object.defineProperty(w, KEY, { value: state, configurable: true, enumerable: false, writable: true });
  timer = setTimeout(state.disarm, 30000);
  return { ok, hit: hit ? String(hit.tagName || hit.nodeName).toLowerCase() : null };
}"#;

/// `this` = element probed by [`CLICK_PROBE`]: whether a trusted event of the mouse click
/// reached it (disarms the listener). `true` when nothing was armed: only a click proven not
/// to have arrived may be sent again.
pub const CLICK_RECEIPT: &str = r#"function() {
  const w = (this.ownerDocument && this.ownerDocument.defaultView) || window;
  const state = w[Symbol.for('browserd.click')];
  if (!state) return true;
  state.disarm();
  return state.reached;
}"#;

/// `this` = element: JavaScript click.
pub const JS_CLICK: &str = r#"function() {
  const el = this;
  if (el.scrollIntoView) el.scrollIntoView({block: 'center', inline: 'center'});
  if (typeof el.click === 'function') { el.click(); }
  else { el.dispatchEvent(new MouseEvent('click', {bubbles: true, cancelable: true, composed: true})); }
  return true;
}"#;

/// `this` = element; prepares typing: focuses the editable target, clears it when asked,
/// sets date-like inputs directly. Returns `{kind, value?}`.
pub const PREPARE_INPUT: &str = r#"function(clear, text) {
  let el = this;
  const editable = n => n && (n.isContentEditable || n.tagName === 'TEXTAREA' || (n.tagName === 'INPUT'));
  if (!editable(el)) {
    const inner = el.querySelector ? el.querySelector('input:not([type=hidden]), textarea, [contenteditable=""], [contenteditable="true"]') : null;
    if (inner) el = inner;
  }
  const nativeSetter = (n, v) => {
    const proto = n.tagName === 'TEXTAREA' ? HTMLTextAreaElement.prototype : HTMLInputElement.prototype;
    const desc = Object.getOwnPropertyDescriptor(proto, 'value');
    if (desc && desc.set) desc.set.call(n, v); else n.value = v;
  };
  const fire = (n, data) => {
    const init = {bubbles: true, composed: true, inputType: 'insertReplacementText', data};
    n.dispatchEvent(typeof InputEvent === 'function' ? new InputEvent('input', init) : new Event('input', init));
    n.dispatchEvent(new Event('change', {bubbles: true}));
  };
  if (el.tagName === 'INPUT') {
    const t = (el.type || 'text').toLowerCase();
    // Fields whose intermediate values are invalid (`37.` of `37.5`, half a date) or that have no
    // caret: the whole value at once, through the prototype's setter (a framework's own `value`
    // property, such as React's value tracker, would swallow it) and input + change events.
    if (['number', 'date', 'time', 'datetime-local', 'month', 'week', 'color', 'range'].includes(t)) {
      el.focus();
      const before = el.value;
      const value = (t === 'number' && !clear) ? before + text : text;
      nativeSetter(el, value);
      // The field's own sanitising empties a value it cannot hold: left as it was, no events.
      if (el.value === '' && value !== '') {
        nativeSetter(el, before);
        return { kind: 'rejected', type: t };
      }
      fire(el, text);
      return { kind: 'direct', value: el.value, before, type: t };
    }
    if (['checkbox', 'radio', 'file', 'submit', 'button', 'image', 'reset', 'hidden'].includes(t)) {
      return { kind: 'unsupported', type: t };
    }
  }
  el.focus();
  if (el.isContentEditable) {
    const sel = window.getSelection();
    const range = document.createRange();
    range.selectNodeContents(el);
    if (clear) {
      sel.removeAllRanges(); sel.addRange(range);
      if (!document.execCommand('delete')) el.textContent = '';
    }
    const end = document.createRange();
    end.selectNodeContents(el); end.collapse(false);
    sel.removeAllRanges(); sel.addRange(end);
    return { kind: 'contenteditable' };
  }
  if (el.tagName === 'INPUT' || el.tagName === 'TEXTAREA') {
    if (clear && el.value !== '') { nativeSetter(el, ''); el.dispatchEvent(new Event('input', {bubbles: true, composed: true})); }
    try { const n = el.value.length; el.setSelectionRange(n, n); } catch (e) {}
    return { kind: 'input', before: el.value, maxLength: el.maxLength, autocomplete: el.getAttribute('role') === 'combobox' || !!el.getAttribute('list') || el.getAttribute('aria-autocomplete') !== null };
  }
  const active = document.activeElement;
  return { kind: (active && editable(active)) ? 'focused' : 'other' };
}"#;

/// `this` = element: the value the user now sees in it (or in the focused editable).
pub const READ_VALUE: &str = r#"function() {
  let el = this;
  const deepActive = () => { let a = document.activeElement; while (a && a.shadowRoot && a.shadowRoot.activeElement) a = a.shadowRoot.activeElement; return a; };
  if (!(el.isContentEditable || 'value' in el)) el = deepActive() || el;
  if (el.isContentEditable) return el.innerText;
  return ('value' in el) ? String(el.value) : null;
}"#;

/// `this` = element: [`READ_VALUE`] once the page's reaction to the typing is over — first
/// the settle tracker's wait for what the typing started (requests, WebSocket answers, timers,
/// DOM mutations; at most 1.5 s), then a task after the next animation frame (at most 100 ms
/// later: frameworks that re-render in a frame or a timer rewrite the field by then). The field
/// is judged only after that, so a value the page (or its server) sets late is not "repaired".
/// The tracker's action mark is renewed, so that what a repair starts is waited for too.
pub const READ_VALUE_LATER: &str = r#"function() {
  let el = this;
  const win = (el.ownerDocument && el.ownerDocument.defaultView) || window;
  const tracker = win[Symbol.for('browserd.settle')];
  const deepActive = () => { let a = document.activeElement; while (a && a.shadowRoot && a.shadowRoot.activeElement) a = a.shadowRoot.activeElement; return a; };
  const settled = tracker
    ? Promise.resolve(tracker.settle(tracker.doc(), 50, 1500)).catch(() => null).then(() => { tracker.begin(); })
    : Promise.resolve();
  return settled.then(() => {
    if (!(el.isContentEditable || 'value' in el)) el = deepActive() || el;
    return new Promise((resolve) => {
      let done = false;
      const read = () => {
        if (done) return;
        done = true;
        resolve(el.isContentEditable ? el.innerText : ('value' in el) ? String(el.value) : null);
      };
      requestAnimationFrame(() => setTimeout(read, 0));
      setTimeout(read, 100);
    });
  });
}"#;

/// `this` = text field (`input` or `textarea`): sets `value` at once through the prototype's
/// setter (past a framework's own `value` property) and fires input + change, as a paste would;
/// answers the value once the page has reacted ([`READ_VALUE_LATER`]).
pub const SET_VALUE: &str = r#"function(value) {
  let el = this;
  if (!(el.tagName === 'INPUT' || el.tagName === 'TEXTAREA')) {
    const inner = el.querySelector ? el.querySelector('input:not([type=hidden]), textarea') : null;
    if (inner) el = inner;
  }
  const proto = el.tagName === 'TEXTAREA' ? HTMLTextAreaElement.prototype : HTMLInputElement.prototype;
  const desc = Object.getOwnPropertyDescriptor(proto, 'value');
  el.focus();
  if (desc && desc.set) desc.set.call(el, value); else el.value = value;
  const init = {bubbles: true, composed: true, inputType: 'insertReplacementText', data: value};
  el.dispatchEvent(typeof InputEvent === 'function' ? new InputEvent('input', init) : new Event('input', init));
  el.dispatchEvent(new Event('change', {bubbles: true}));
  return new Promise((resolve) => {
    let done = false;
    const read = () => { if (done) return; done = true; resolve(String(el.value)); };
    requestAnimationFrame(() => setTimeout(read, 0));
    setTimeout(read, 100);
  });
}"#;

/// Expression template: scrolls the page by `__ARG__.dy` (falls back to the largest visible
/// scroll container when the document does not move).
pub const SCROLL_PAGE: &str = r#"(function(o) {
  const se = document.scrollingElement || document.documentElement;
  const before = se.scrollTop;
  window.scrollBy({top: o.dy, left: 0, behavior: 'instant'});
  const moved = se.scrollTop - before;
  if (Math.abs(moved) >= 1) return {target: 'page', moved, top: se.scrollTop};
  const max = se.scrollHeight - se.clientHeight;
  if (max > 1 && ((o.dy > 0 && se.scrollTop >= max - 1) || (o.dy < 0 && se.scrollTop <= 0))) return {target: 'page', moved: 0, top: se.scrollTop, edge: true};
  let best = null, bestArea = 0;
  for (const el of document.querySelectorAll('*')) {
    if (el.scrollHeight <= el.clientHeight + 1) continue;
    const oy = getComputedStyle(el).overflowY;
    if (!/(auto|scroll|overlay)/.test(oy)) continue;
    const r = el.getBoundingClientRect();
    const area = Math.max(0, Math.min(r.bottom, innerHeight) - Math.max(r.top, 0)) * Math.max(0, Math.min(r.right, innerWidth) - Math.max(r.left, 0));
    if (area > bestArea) { best = el; bestArea = area; }
  }
  if (!best) return {target: 'page', moved: 0, top: se.scrollTop, edge: true};
  const b = best.scrollTop;
  best.scrollBy({top: o.dy, behavior: 'instant'});
  return {target: best.tagName.toLowerCase() + (best.id ? '#' + best.id : ''), moved: best.scrollTop - b, top: best.scrollTop};
})(__ARG__)"#;

/// `this` = element: scrolls its nearest scrollable ancestor-or-self by `pages` of its height.
pub const SCROLL_ELEMENT: &str = r#"function(pages) {
  const scrollable = n => { if (n.scrollHeight <= n.clientHeight + 1) return false; const oy = getComputedStyle(n).overflowY; return /(auto|scroll|overlay)/.test(oy) || n === document.scrollingElement; };
  let el = this;
  while (el && !(el.nodeType === 1 && scrollable(el))) {
    el = el.parentElement || (el.getRootNode && el.getRootNode().host) || null;
  }
  if (!el) { const dy = pages * innerHeight; const b = scrollY; window.scrollBy({top: dy, behavior: 'instant'}); return {target: 'page', moved: scrollY - b}; }
  const dy = pages * el.clientHeight;
  const b = el.scrollTop;
  el.scrollBy({top: dy, behavior: 'instant'});
  return {target: el.tagName.toLowerCase() + (el.id ? '#' + el.id : ''), moved: el.scrollTop - b, top: el.scrollTop};
}"#;

/// Expression template: browser-use's `search_page` (text grep with context).
pub const SEARCH_PAGE: &str = r#"(function(o) {
  const scope = o.css_scope ? document.querySelector(o.css_scope) : (document.body || document.documentElement);
  if (!scope) return {error: 'css_scope ' + JSON.stringify(o.css_scope) + ' matched no element'};
  let re;
  try {
    const src = o.regex ? o.pattern : o.pattern.replace(/[.*+?^${}()|[\]\\]/g, '\\$&');
    re = new RegExp(src, o.case_sensitive ? 'g' : 'gi');
  } catch (e) { return {error: 'invalid regex: ' + e.message}; }
  const walker = document.createTreeWalker(scope, NodeFilter.SHOW_TEXT, {acceptNode(n) {
    const p = n.parentElement; if (!p) return NodeFilter.FILTER_REJECT;
    if (['SCRIPT', 'STYLE', 'NOSCRIPT', 'TEMPLATE'].includes(p.tagName)) return NodeFilter.FILTER_REJECT;
    return NodeFilter.FILTER_ACCEPT; }});
  let text = ''; const nodes = []; let n;
  while ((n = walker.nextNode())) { nodes.push([text.length, n]); text += n.nodeValue; }
  const pathOf = el => { const parts = []; while (el && el.nodeType === 1 && parts.length < 4) { let s = el.tagName.toLowerCase(); if (el.id) s += '#' + el.id; else if (el.classList && el.classList.length) s += '.' + Array.from(el.classList).slice(0, 2).join('.'); parts.unshift(s); el = el.parentElement; } return parts.join(' > '); };
  const matches = []; let total = 0; let m;
  while ((m = re.exec(text))) {
    if (m[0].length === 0) { re.lastIndex++; continue; }
    total++;
    if (matches.length < o.max_results) {
      const s = m.index;
      let lo = 0, hi = nodes.length - 1;
      while (lo < hi) { const mid = (lo + hi + 1) >> 1; if (nodes[mid][0] <= s) lo = mid; else hi = mid - 1; }
      const el = nodes[lo] ? nodes[lo][1].parentElement : null;
      const ctx = text.slice(Math.max(0, s - o.context_chars), s + m[0].length + o.context_chars).replace(/\s+/g, ' ').trim();
      matches.push({match: m[0], context: ctx, path: pathOf(el)});
    }
    if (total > 10000) break;
  }
  return {total, matches};
})(__ARG__)"#;

/// Expression template: browser-use's `find_elements`.
pub const FIND_ELEMENTS: &str = r#"(function(o) {
  let list;
  try { list = document.querySelectorAll(o.selector); } catch (e) { return {error: 'invalid CSS selector: ' + e.message}; }
  const items = [];
  for (let i = 0; i < list.length && items.length < o.max_results; i++) {
    const el = list[i];
    const item = {tag: el.tagName.toLowerCase(), children: el.children.length};
    if (o.include_text) item.text = (el.innerText || el.textContent || '').replace(/\s+/g, ' ').trim().slice(0, 300);
    if (o.attributes) {
      item.attrs = {};
      for (const a of o.attributes) {
        const v = (a === 'value' && 'value' in el) ? el.value : el.getAttribute(a);
        if (v !== null && v !== undefined) item.attrs[a] = String(v).slice(0, 500);
      }
    }
    items.push(item);
  }
  return {total: list.length, items};
})(__ARG__)"#;

/// Expression template: scrolls the first element whose text contains `__ARG__` into view.
pub const FIND_TEXT: &str = r#"(function(text) {
  const needle = text.toLowerCase();
  const walker = document.createTreeWalker(document.body || document.documentElement, NodeFilter.SHOW_TEXT);
  let n;
  while ((n = walker.nextNode())) {
    if (!n.nodeValue || !n.nodeValue.toLowerCase().includes(needle)) continue;
    const el = n.parentElement;
    if (!el || ['SCRIPT', 'STYLE', 'NOSCRIPT'].includes(el.tagName)) continue;
    const r = el.getBoundingClientRect();
    if (r.width === 0 && r.height === 0) continue;
    el.scrollIntoView({block: 'center', behavior: 'instant'});
    return {found: true, top: (document.scrollingElement || document.documentElement).scrollTop};
  }
  return {found: false};
})(__ARG__)"#;

/// `this` = element: options of a native select or an ARIA listbox/menu/combobox.
pub const DROPDOWN_OPTIONS: &str = r#"function() {
  const el = this;
  const text = n => (n.innerText || n.textContent || '').replace(/\s+/g, ' ').trim();
  if (el.tagName === 'SELECT') {
    return {kind: 'select', options: Array.from(el.options).map((o, i) => ({index: i, text: text(o) || o.label, value: o.value, selected: o.selected}))};
  }
  const OPT = '[role=option],[role=menuitem],[role=menuitemradio],[role=menuitemcheckbox],[role=treeitem]';
  const findList = () => {
    const role = el.getAttribute('role');
    if (['listbox', 'menu', 'tree', 'radiogroup'].includes(role) && el.querySelector(OPT)) return el;
    for (const attr of ['aria-controls', 'aria-owns']) {
      const ids = (el.getAttribute(attr) || '').split(/\s+/).filter(Boolean);
      for (const id of ids) { const t = (el.getRootNode().getElementById ? el.getRootNode().getElementById(id) : null) || document.getElementById(id); if (t && (t.matches(OPT) || t.querySelector(OPT))) return t; }
    }
    const inner = el.querySelector('[role=listbox],[role=menu],[role=tree]');
    if (inner && inner.querySelector(OPT)) return inner;
    const sib = el.parentElement ? el.parentElement.querySelector('[role=listbox],[role=menu]') : null;
    if (sib && sib.querySelector(OPT)) return sib;
    return null;
  };
  let list = findList();
  if (!list && (el.getAttribute('aria-haspopup') || el.getAttribute('role') === 'combobox' || el.getAttribute('aria-expanded') === 'false')) {
    el.click();
    list = findList();
  }
  if (!list) return {kind: 'none'};
  const opts = list.matches(OPT) ? [list] : Array.from(list.querySelectorAll(OPT));
  return {kind: 'aria', options: opts.map((o, i) => ({index: i, text: text(o), value: o.getAttribute('data-value') || o.getAttribute('value') || text(o), selected: o.getAttribute('aria-selected') === 'true' || o.getAttribute('aria-checked') === 'true'}))};
}"#;

/// `this` = element, arg = text: selects the option whose text or value equals it.
pub const SELECT_OPTION: &str = r#"function(wanted) {
  const el = this;
  const text = n => (n.innerText || n.textContent || '').replace(/\s+/g, ' ').trim();
  const norm = s => String(s).replace(/\s+/g, ' ').trim();
  const w = norm(wanted);
  const pick = (opts, getText, getValue) => {
    let hit = opts.find(o => norm(getText(o)) === w || norm(getValue(o)) === w);
    if (!hit) hit = opts.find(o => norm(getText(o)).toLowerCase() === w.toLowerCase() || norm(getValue(o)).toLowerCase() === w.toLowerCase());
    return hit;
  };
  if (el.tagName === 'SELECT') {
    const opts = Array.from(el.options);
    const hit = pick(opts, o => text(o) || o.label, o => o.value);
    if (!hit) return {ok: false, options: opts.map(o => text(o) || o.label)};
    if (hit.disabled) return {ok: false, disabled: true, options: opts.map(o => text(o) || o.label)};
    el.focus();
    el.value = hit.value;
    hit.selected = true;
    el.dispatchEvent(new Event('input', {bubbles: true, composed: true}));
    el.dispatchEvent(new Event('change', {bubbles: true}));
    return {ok: el.value === hit.value, text: text(hit) || hit.label, value: hit.value};
  }
  const OPT = '[role=option],[role=menuitem],[role=menuitemradio],[role=menuitemcheckbox],[role=treeitem]';
  const lists = [];
  if (el.matches('[role=listbox],[role=menu],[role=tree]')) lists.push(el);
  for (const attr of ['aria-controls', 'aria-owns']) {
    for (const id of (el.getAttribute(attr) || '').split(/\s+/).filter(Boolean)) { const t = document.getElementById(id); if (t) lists.push(t); }
  }
  lists.push(el);
  if (el.parentElement) lists.push(el.parentElement);
  let opts = [];
  for (const l of lists) { opts = Array.from(l.querySelectorAll(OPT)); if (opts.length) break; }
  return (async () => {
    if (!opts.length && (el.getAttribute('aria-haspopup') || el.getAttribute('role') === 'combobox')) {
      // Opened once (not when it already is: a second click would close it), then its options
      // are waited for — a popup often renders them a frame or a request later.
      const controlled = () => {
        for (const attr of ['aria-controls', 'aria-owns']) {
          for (const id of (el.getAttribute(attr) || '').split(/\s+/).filter(Boolean)) {
            const t = document.getElementById(id);
            const found = t ? Array.from(t.querySelectorAll(OPT)) : [];
            if (found.length) return found;
          }
        }
        return [];
      };
      if (el.getAttribute('aria-expanded') !== 'true') el.click();
      opts = controlled();
      if (!opts.length) {
        opts = await new Promise((resolve) => {
          let timer = 0;
          const observer = new MutationObserver(() => {
            const found = controlled();
            if (found.length) { observer.disconnect(); clearTimeout(timer); resolve(found); }
          });
          observer.observe(document, {subtree: true, childList: true, attributes: true});
          timer = setTimeout(() => { observer.disconnect(); resolve(controlled()); }, 1500);
        });
      }
    }
    const hit = pick(opts, text, o => o.getAttribute('data-value') || o.getAttribute('value') || text(o));
    if (!hit) return {ok: false, options: opts.map(text)};
    hit.scrollIntoView({block: 'nearest'});
    hit.click();
    return {ok: true, text: text(hit), value: hit.getAttribute('data-value') || hit.getAttribute('value') || text(hit)};
  })();
}"#;

/// `this` = element: the file input to upload into (itself, one nearby, or the closest on
/// the page by vertical position); `null` when the page has none.
pub const UPLOAD_TARGET: &str = r#"function() {
  const el = this;
  if (el.tagName === 'INPUT' && el.type === 'file') return el;
  let n = el;
  for (let d = 0; d < 4 && n; d++) {
    const f = n.querySelector ? n.querySelector('input[type=file]') : null;
    if (f) return f;
    if (n.tagName === 'LABEL' && n.control && n.control.type === 'file') return n.control;
    n = n.parentElement;
  }
  const all = Array.from(document.querySelectorAll('input[type=file]'));
  if (!all.length) return null;
  const y = el.getBoundingClientRect().top;
  all.sort((a, b) => Math.abs(a.getBoundingClientRect().top - y) - Math.abs(b.getBoundingClientRect().top - y));
  return all[0];
}"#;

/// Expression template: the page HTML prepared for markdown (`__ARG__` = {links, images}).
pub const EXTRACT_HTML: &str = r#"(function(o) {
  const root = document.documentElement.cloneNode(true);
  root.querySelectorAll('script,style,noscript,template,svg,canvas,iframe,head,link,meta').forEach(e => e.remove());
  const liveInputs = document.querySelectorAll('input,textarea,select');
  const cloneInputs = root.querySelectorAll('input,textarea,select');
  if (liveInputs.length === cloneInputs.length) cloneInputs.forEach((c, i) => { if (c.type !== 'password' && c.type !== 'hidden') c.setAttribute('value', liveInputs[i].value); });
  if (o.images) { const live = document.images; root.querySelectorAll('img').forEach(img => { try { img.setAttribute('src', new URL(img.getAttribute('src') || '', document.baseURI).href); } catch (e) {} }); }
  else root.querySelectorAll('img,picture,video,audio,source').forEach(e => e.remove());
  root.querySelectorAll('a').forEach(a => {
    if (o.links) { try { a.setAttribute('href', new URL(a.getAttribute('href') || '', document.baseURI).href); } catch (e) {} }
    else a.replaceWith(...a.childNodes);
  });
  return root.outerHTML;
})(__ARG__)"#;

/// Splices a JSON argument into an expression template.
pub fn with_arg(template: &str, arg: &serde_json::Value) -> String {
    template.replace("__ARG__", &arg.to_string())
}

/// Expression template (`__ARG__` = `{ms, quietMs}`): the `wait` action. Finds what the page
/// says it is still loading — visible short texts such as "Loading…", "Checking availability…",
/// "Please wait", a progress bar, an `aria-busy` region — and resolves once every one of them
/// is gone, hidden or says something else and the DOM has then been quiet for `quietMs`, or at
/// `ms`. Answers `{indicators: [texts], replaced: bool, waited_ms}`; with no indicator it answers
/// at once (`indicators` empty) and the caller waits the whole time asked.
pub const WAIT_FOR_LOADING: &str = r#"(function(arg) {
  const started = Date.now();
  const BUSY = /^[\s\W]*(loading|please wait|one moment|just a moment|hold on|starting|connecting|initiali[sz]ing|checking|processing|searching|fetching|retrieving|updating|saving|submitting|sending|calculating|computing|verifying|validating|preparing|generating|uploading|downloading|waiting|refreshing|syncing|signing in|logging in|redirecting|working|thinking)\b/i;
  const ELLIPSIS = /(\u2026|\.\.\.)\s*$/;
  const visible = (el) => {
    if (!el.getClientRects || el.getClientRects().length === 0) return false;
    const style = getComputedStyle(el);
    return style.visibility !== 'hidden' && style.display !== 'none' && Number(style.opacity) !== 0;
  };
  const busyText = (text) => {
    const t = (text || '').replace(/\s+/g, ' ').trim();
    if (t.length < 3 || t.length > 120) return false;
    return BUSY.test(t) || (ELLIPSIS.test(t) && /\b[a-z]{3,}ing\b/i.test(t));
  };
  const label = (el) => (el.innerText || el.textContent || el.getAttribute('aria-label') || el.tagName).replace(/\s+/g, ' ').trim().slice(0, 80);
  const indicators = () => {
    const found = [];
    const body = document.body;
    if (!body) return found;
    for (const el of body.querySelectorAll('[role=progressbar],progress,[aria-busy=true]')) {
      if (visible(el)) found.push({ el, text: label(el), indicator: true });
    }
    const walker = document.createTreeWalker(body, NodeFilter.SHOW_TEXT);
    const seen = new Set();
    let n;
    while ((n = walker.nextNode()) && found.length < 20) {
      const el = n.parentElement;
      if (!el || seen.has(el) || /^(SCRIPT|STYLE|NOSCRIPT|TEMPLATE)$/.test(el.tagName)) continue;
      seen.add(el);
      const text = el.innerText !== undefined ? el.innerText : el.textContent;
      if (busyText(text) && visible(el)) found.push({ el, text: text.replace(/\s+/g, ' ').trim(), indicator: false });
    }
    return found;
  };
  const still = (item) => item.el.isConnected && visible(item.el) &&
    (item.indicator ? (item.el.getAttribute('aria-busy') !== 'false') : busyText(item.el.innerText !== undefined ? item.el.innerText : item.el.textContent));
  const initial = indicators();
  if (initial.length === 0) return { indicators: [], replaced: false, waited_ms: 0 };
  const texts = initial.map((i) => i.text);
  return new Promise((resolve) => {
    let lastMutation = Date.now();
    let gone = false;
    let quietTimer = 0;
    const finish = (replaced) => {
      observer.disconnect();
      clearTimeout(capTimer);
      clearTimeout(quietTimer);
      resolve({ indicators: texts, replaced, waited_ms: Date.now() - started });
    };
    const check = () => {
      if (!gone) gone = initial.every((item) => !still(item));
      if (!gone) return;
      const left = lastMutation + arg.quietMs - Date.now();
      clearTimeout(quietTimer);
      if (left <= 0) finish(true);
      else quietTimer = setTimeout(check, left);
    };
    const observer = new MutationObserver(() => { lastMutation = Date.now(); check(); });
    observer.observe(document, { subtree: true, childList: true, attributes: true, characterData: true });
    const capTimer = setTimeout(() => finish(false), Math.max(0, arg.ms - (Date.now() - started)));
    check();
  });
})(__ARG__)"#;
