// browserd's settle tracker. Installed in every document of a task's tabs before the page's own
// scripts run (Page.addScriptToEvaluateOnNewDocument, main world), it records what the page
// starts after an action so the next capture shows the page once that work is done:
//   - fetch() and XMLHttpRequest requests, and reading a fetched body (json(), text(), …);
//   - setTimeout callbacks of at most TIMER_MAX_MS (debounces, "show result in 100 ms");
//   - requestAnimationFrame callbacks (chains of at most FRAME_CHAIN_MAX frames);
//   - CSS transitions and animations (and Web Animations) that run at most ANIMATION_MAX_MS;
//   - IntersectionObserver / ResizeObserver callbacks and scroll listeners: with observers at
//     work or a scroll listener added, the settle lasts two rendering frames at least, after
//     which their callbacks (and what those start) have run;
//   - WebSocket messages: a message the page sends is pending until the socket's answer is over
//     (its first message, then WS_QUIET_MS without one while the page no longer says it is busy;
//     at most WS_REPLY_MAX_MS), and a socket opened is pending until it is open;
//   - scripts, stylesheets, preloaded modules (then until the DOM has been quiet for
//     MODULE_QUIET_MS: the page imports and renders them) and iframes inserted into the
//     document, until they load;
//   - form submissions and the start of a cross-document navigation (beforeunload);
//   - DOM mutations, for a quiet window after the last one (in the document and in every shadow
//     root the page attaches, whose animations are waited for too);
//   - on a new document, a loading screen (a page whose only text says it is loading, or a
//     progress bar / aria-busy element and little text): the settle waits until it is replaced;
//     and a blank app shell (no text, nothing to see or use, scripts: an app still importing
//     its code) until it shows something, while the document is younger than BLANK_SHELL_MAX_MS.
// It ignores what is long-lived or not the action's: EventSource, sendBeacon, keepalive
// fetches, analytics endpoints, setInterval, infinite or long animations, timers, frames,
// requests and WebSocket messages started by the page's own loops (from an ignored callback, or
// of a kind the page started twice on its own, outside any action, in the CHATTY_MS before the
// action; frame loops begun outside an action), work begun before the action, and mutations of
// nodes that were already changing in the CHATTY_MS before the action (clocks, tickers,
// animations).
//
// browserd calls `begin()` just before an action and `settle(doc, quietMs, capMs)` after it;
// `settle` resolves on events (a request finishing, a timer firing, an animation ending, a
// frame, the quiet window elapsing), never by polling. Everything lives in this closure except
// one symbol-keyed, non-enumerable property; wrapped functions are Proxies, so they still print
// as native code.
(() => {
  const KEY = Symbol.for('browserd.settle');
  if (Object.prototype.hasOwnProperty.call(window, KEY)) return;
  const TIMER_MAX_MS = 1000;
  const TIMER_CHAIN_MAX = 3;
  const CHATTY_MS = 2000;
  const RESOURCE_MAX_MS = 15000;
  const SUBMIT_MAX_MS = 1000;
  const LONG_REQUEST_MS = 1000;
  const CHATTY_COUNT = 5;
  const ACTION_MAX_MS = 60000;
  const FRAME_CHAIN_MAX = 10;
  const ANIMATION_MAX_MS = 1500;
  // A finite animation that started this long before the action's start is not its doing.
  const ANIMATION_EARLY_MS = 100;
  const WS_REPLY_MAX_MS = 1500;
  // A WebSocket answer is over once its socket has been quiet this long.
  const WS_QUIET_MS = 200;
  // Frames may not come at all (a hidden tab, a throttled frame): a frame is waited for this
  // long at most.
  const FRAME_WAIT_MAX_MS = 150;
  // After a preloaded module arrives, the page imports and renders it: its item ends once the
  // DOM has been quiet this long (at most MODULE_RENDER_MAX_MS after its load).
  const MODULE_QUIET_MS = 150;
  const MODULE_RENDER_MAX_MS = 1000;
  const LOADING_TEXT_MAX = 200;
  const LOADING_ELEMENTS_MAX = 400;
  // A new document whose body is still blank (no text, no media or controls) while it has
  // scripts is an app still loading its code (a dynamic `import()`, which nothing here sees):
  // waited for until the document is this old.
  const BLANK_SHELL_MAX_MS = 5000;
  const LOADING_TEXT = /^[\s\W]*(loading|please wait|one moment|just a moment|starting|connecting|initiali[sz]ing)\b/i;
  const IGNORED_URL = /google-analytics|googletagmanager|doubleclick|googlesyndication|facebook\.com\/tr|connect\.facebook|hotjar|segment\.(io|com)|mixpanel|amplitude|sentry|newrelic|nr-data|clarity\.ms|datadoghq|fullstory|intercom|\/collect(\?|$)|\/beacon|\/rum(\?|\/|$)|\/telemetry/i;

  const dateNow = Date.now;
  const now = () => dateNow.call(Date);
  const setTimer = window.setTimeout.bind(window);
  const clearTimer = window.clearTimeout.bind(window);
  const nextFrame =
    typeof window.requestAnimationFrame === 'function' ? window.requestAnimationFrame.bind(window) : null;
  const perf = window.performance;
  const perfNow = perf && typeof perf.now === 'function' ? perf.now.bind(perf) : () => 0;
  const docId = Math.random().toString(36).slice(2) + now().toString(36);

  const pending = new Map(); // id → {kind, what, start}
  let nextId = 1;
  let epoch = 0; // start of the current action; 0 = the document's start
  let perfEpoch = 0; // the same instant on the performance clock (animations' time base)
  let lastMutation = 0; // last mutation that counts
  let unloading = 0; // when a cross-document navigation began
  const nodeTimes = new WeakMap(); // node → {last, beforeEpoch, epoch}: its mutation times
  const waiters = new Set();
  // Every shadow root the page attached (WeakRefs where available): document-level
  // MutationObservers and document.getAnimations() do not see into shadow trees, where web
  // components render and animate (a select's popup closing, a label changing).
  const shadowRoots = new Set();
  const liveShadowRoots = () => {
    const roots = [];
    for (const ref of shadowRoots) {
      const root = typeof ref.deref === 'function' ? ref.deref() : ref;
      if (!root) shadowRoots.delete(ref);
      else if (root.host && root.host.isConnected) roots.push(root);
    }
    return roots;
  };

  const wake = () => {
    for (const waiter of [...waiters]) waiter();
  };
  const begin = (kind, what) => {
    const id = nextId++;
    pending.set(id, { kind, what: String(what || '').slice(0, 200), start: now() });
    return id;
  };
  // Ends an item after the page's own continuations have run: a fetch's `.then` chain and the
  // DOM changes it makes are microtasks (or MessageChannel tasks) queued before this timer.
  const endLater = (id) => {
    setTimer(() => {
      if (pending.delete(id)) wake();
    }, 0);
  };
  const endNow = (id) => {
    if (pending.delete(id)) wake();
  };
  // chainDepth: 0 outside timer callbacks, n inside a tracked timer's callback of depth n, -1
  // inside a callback the tracker ignores (what it starts is the page's own loop, not the
  // action's).
  let chainDepth = 0;
  // What the page was already doing repeatedly before the action is its background activity:
  // a key (a timer's delay, a request's URL without its query) seen at least twice in the
  // CHATTY_MS before the action's start. Catches loops the chain depth cannot see, such as
  // `while (true) { await sleep(500); … }` or a status poll.
  const recentKeys = new Map(); // key → {last, prev, before1, before2, epoch}
  // From begin() until its settle ends (bounded, in case no settle follows).
  let actionUntil = 0;
  const acting = () => now() < actionUntil;
  const recurring = (key) => {
    const t = now();
    let seen = recentKeys.get(key);
    if (!seen) {
      if (recentKeys.size > 500) recentKeys.clear();
      seen = { last: -Infinity, prev: -Infinity, before1: -Infinity, before2: -Infinity, epoch, count: 0 };
      recentKeys.set(key, seen);
    }
    if (seen.epoch !== epoch) {
      // The first use since the action began: keep the two latest uses before it.
      seen.before1 = seen.last;
      seen.before2 = seen.prev;
      seen.epoch = epoch;
    }
    // Only uses while no action is under way count as the page's own activity: an action's
    // requests (the same "add to cart" call, step after step) never make it "background".
    if (!acting()) {
      seen.prev = seen.last;
      seen.last = t;
    }
    seen.count += 1;
    // On a new document (no action yet) a loop shows itself by its third round.
    if (epoch === 0) return seen.count >= 3;
    return seen.before2 >= epoch - CHATTY_MS && seen.before1 < epoch;
  };
  const background = (url) => {
    let key = url;
    try {
      const parsed = new URL(url, location.href);
      key = parsed.origin + parsed.pathname;
    } catch (_) {}
    // Evaluate `recurring` first: it must see every request to keep its history.
    return recurring('request ' + key) || chainDepth < 0 || IGNORED_URL.test(url);
  };
  const backgroundResponses = new WeakSet();
  const urlOf = (input) => {
    try {
      return typeof input === 'string' ? input : (input && input.url) || String(input);
    } catch (_) {
      return '';
    }
  };

  // ---- fetch and response bodies ----
  if (typeof window.fetch === 'function') {
    window.fetch = new Proxy(window.fetch, {
      apply(target, thisArg, args) {
        const promise = Reflect.apply(target, thisArg, args);
        let keepalive = false;
        try {
          keepalive = !!((args[1] && args[1].keepalive) || (args[0] && args[0].keepalive));
        } catch (_) {}
        const url = urlOf(args[0]);
        if (background(url) || keepalive) {
          // Its body is read in the background too.
          Promise.resolve(promise).then((res) => backgroundResponses.add(res), () => {});
          return promise;
        }
        const id = begin('fetch', url);
        Promise.resolve(promise).then(() => endLater(id), () => endLater(id));
        return promise;
      },
    });
  }
  if (window.Response && window.Response.prototype) {
    for (const name of ['json', 'text', 'arrayBuffer', 'blob', 'formData', 'bytes']) {
      const original = window.Response.prototype[name];
      if (typeof original !== 'function') continue;
      window.Response.prototype[name] = new Proxy(original, {
        apply(target, thisArg, args) {
          const promise = Reflect.apply(target, thisArg, args);
          if (backgroundResponses.has(thisArg) || chainDepth < 0) return promise;
          const id = begin('body', thisArg && thisArg.url);
          Promise.resolve(promise).then(() => endLater(id), () => endLater(id));
          return promise;
        },
      });
    }
  }

  // ---- XMLHttpRequest ----
  if (window.XMLHttpRequest && window.XMLHttpRequest.prototype) {
    const proto = window.XMLHttpRequest.prototype;
    const urls = new WeakMap();
    proto.open = new Proxy(proto.open, {
      apply(target, xhr, args) {
        try {
          urls.set(xhr, String(args[1]));
        } catch (_) {}
        return Reflect.apply(target, xhr, args);
      },
    });
    proto.send = new Proxy(proto.send, {
      apply(target, xhr, args) {
        const url = urls.get(xhr) || '';
        if (background(url)) return Reflect.apply(target, xhr, args);
        const id = begin('xhr', url);
        try {
          xhr.addEventListener('loadend', () => endLater(id), { once: true });
          return Reflect.apply(target, xhr, args);
        } catch (err) {
          endNow(id);
          throw err;
        }
      },
    });
  }

  // ---- timers ----
  const timerItems = new Map(); // handle → item id
  const untracked = (fn) =>
    function (...a) {
      const saved = chainDepth;
      chainDepth = -1;
      try {
        return fn.apply(this, a);
      } finally {
        chainDepth = saved;
      }
    };
  window.setTimeout = new Proxy(window.setTimeout, {
    apply(target, thisArg, args) {
      const fn = args[0];
      if (typeof fn !== 'function') return Reflect.apply(target, thisArg, args);
      const delay = Number(args[1]) || 0;
      const depth = chainDepth;
      const loop = recurring('timer ' + delay);
      if (loop || delay > TIMER_MAX_MS || depth < 0 || depth >= TIMER_CHAIN_MAX) {
        args[0] = untracked(fn);
        return Reflect.apply(target, thisArg, args);
      }
      const id = begin('timer', delay + ' ms');
      let handle;
      args[0] = function (...a) {
        timerItems.delete(handle);
        const saved = chainDepth;
        chainDepth = depth + 1;
        try {
          return fn.apply(this, a);
        } finally {
          chainDepth = saved;
          endLater(id);
        }
      };
      handle = Reflect.apply(target, thisArg, args);
      timerItems.set(handle, id);
      return handle;
    },
  });
  window.clearTimeout = new Proxy(window.clearTimeout, {
    apply(target, thisArg, args) {
      const id = timerItems.get(args[0]);
      if (id !== undefined) {
        timerItems.delete(args[0]);
        endNow(id);
      }
      return Reflect.apply(target, thisArg, args);
    },
  });
  window.setInterval = new Proxy(window.setInterval, {
    apply(target, thisArg, args) {
      if (typeof args[0] === 'function') args[0] = untracked(args[0]);
      return Reflect.apply(target, thisArg, args);
    },
  });

  // ---- animation frames ----
  // frameDepth: 0 outside frame callbacks, n inside a tracked frame callback of chain depth n,
  // -1 inside a frame callback the tracker ignores. A frame requested outside an action (on a
  // document that has had one) belongs to the page's own loop, and so do the frames that loop
  // requests later, even while an action is under way.
  let frameDepth = 0;
  if (nextFrame) {
    const frameItems = new Map(); // handle → item id
    window.requestAnimationFrame = new Proxy(window.requestAnimationFrame, {
      apply(target, thisArg, args) {
        const fn = args[0];
        if (typeof fn !== 'function') return Reflect.apply(target, thisArg, args);
        const depth = frameDepth;
        // A hidden document (or a throttled frame) may not render for a long time: no frame
        // is waited for there, and none for longer than FRAME_WAIT_MAX_MS.
        const tracked =
          depth >= 0 &&
          depth < FRAME_CHAIN_MAX &&
          chainDepth >= 0 &&
          (epoch === 0 || acting()) &&
          document.visibilityState !== 'hidden';
        if (!tracked) {
          args[0] = function (...a) {
            const saved = frameDepth;
            frameDepth = -1;
            try {
              return fn.apply(this, a);
            } finally {
              frameDepth = saved;
            }
          };
          return Reflect.apply(target, thisArg, args);
        }
        const id = begin('frame', '');
        let handle;
        args[0] = function (...a) {
          frameItems.delete(handle);
          const saved = frameDepth;
          frameDepth = depth + 1;
          try {
            return fn.apply(this, a);
          } finally {
            frameDepth = saved;
            endLater(id);
          }
        };
        handle = Reflect.apply(target, thisArg, args);
        frameItems.set(handle, id);
        setTimer(() => endNow(id), FRAME_WAIT_MAX_MS);
        return handle;
      },
    });
    if (typeof window.cancelAnimationFrame === 'function') {
      window.cancelAnimationFrame = new Proxy(window.cancelAnimationFrame, {
        apply(target, thisArg, args) {
          const id = frameItems.get(args[0]);
          if (id !== undefined) {
            frameItems.delete(args[0]);
            endNow(id);
          }
          return Reflect.apply(target, thisArg, args);
        },
      });
    }
  }

  // ---- CSS transitions and animations ----
  const hookedAnimations = new WeakSet();
  const animationEnded = () => {
    // What the page does on transitionend/animationend (dispatched in the same rendering step)
    // comes before the quiet window ends.
    lastMutation = now();
    wake();
  };
  // The finite animations the action started that are still running (names for the report).
  const runningAnimations = (since) => {
    const running = [];
    if (typeof document.getAnimations !== 'function') return running;
    let animations;
    try {
      animations = document.getAnimations();
      for (const root of liveShadowRoots()) {
        if (typeof root.getAnimations === 'function') animations = animations.concat(root.getAnimations());
      }
    } catch (_) {
      return running;
    }
    const earliest = since === 0 ? -Infinity : perfEpoch - ANIMATION_EARLY_MS;
    for (const animation of animations) {
      try {
        if (animation.playState !== 'running') continue;
        const timing = animation.effect && animation.effect.getComputedTiming();
        if (!timing || !(timing.endTime <= ANIMATION_MAX_MS)) continue;
        const start = animation.startTime;
        if (start !== null && start < earliest) continue;
        if (!hookedAnimations.has(animation)) {
          hookedAnimations.add(animation);
          animation.finished.then(animationEnded, animationEnded);
        }
        running.push(animation.transitionProperty || animation.animationName || animation.id || 'animation');
      } catch (_) {}
    }
    return running;
  };

  // ---- scroll listeners ----
  // A scroll's `scroll` event is dispatched at the next rendering frame, after the action
  // returned: a page that listens for scrolls (a virtualised list rendering the rows now in view)
  // changes only then. Once any scroll listener was added, a settle lasts two frames at least.
  let scrollListeners = false;
  if (typeof EventTarget === 'function' && typeof EventTarget.prototype.addEventListener === 'function') {
    EventTarget.prototype.addEventListener = new Proxy(EventTarget.prototype.addEventListener, {
      apply(target, self, args) {
        if (args[0] === 'scroll') scrollListeners = true;
        return Reflect.apply(target, self, args);
      },
    });
  }

  // ---- IntersectionObserver and ResizeObserver ----
  // Their callbacks run after the next rendering frame: while any observes something, a settle
  // lasts two frames at least.
  let observedTargets = 0;
  for (const name of ['IntersectionObserver', 'ResizeObserver']) {
    const Observer = window[name];
    if (typeof Observer !== 'function' || !Observer.prototype) continue;
    const proto = Observer.prototype;
    const targets = new WeakMap(); // observer → Set of targets
    const observe = proto.observe;
    const unobserve = proto.unobserve;
    const disconnect = proto.disconnect;
    if (typeof observe !== 'function') continue;
    proto.observe = new Proxy(observe, {
      apply(target, observer, args) {
        const result = Reflect.apply(target, observer, args);
        let set = targets.get(observer);
        if (!set) {
          set = new Set();
          targets.set(observer, set);
        }
        if (args[0] && !set.has(args[0])) {
          set.add(args[0]);
          observedTargets += 1;
        }
        return result;
      },
    });
    if (typeof unobserve === 'function') {
      proto.unobserve = new Proxy(unobserve, {
        apply(target, observer, args) {
          const set = targets.get(observer);
          if (set && set.delete(args[0])) observedTargets -= 1;
          return Reflect.apply(target, observer, args);
        },
      });
    }
    if (typeof disconnect === 'function') {
      proto.disconnect = new Proxy(disconnect, {
        apply(target, observer, args) {
          const set = targets.get(observer);
          if (set) {
            observedTargets -= set.size;
            set.clear();
          }
          return Reflect.apply(target, observer, args);
        },
      });
    }
  }

  // ---- what the page says it is busy with ----
  // A page waiting for its server says so in its DOM: `aria-busy="true"`, a progress bar, a
  // state attribute (`data-state="running"`, Streamlit's `data-test-script-state="running"`)
  // or a class (`phx-click-loading`, `is-loading`, `pending`). The markers set or inserted while
  // an action's work (or a new document's) is tracked are remembered, and `pageBusy()` tells
  // whether one of them, still attached and rendered, still says so. A quiet WebSocket does not
  // end its answer while it does (below).
  const BUSY_WORD = /^(loading|running|pending|busy|processing|computing|working|submitting|saving|generating|in-?progress)$/i;
  const busyMarks = new Map(); // element → Set of attribute names ('' = the element itself)
  const busyValue = (el, name) => {
    if (name === '') return true;
    const value = el.getAttribute(name);
    if (value === null) return false;
    if (name === 'class') {
      return value.split(/\s+/).some((token) => token.split(/[-_]+/).some((part) => BUSY_WORD.test(part)));
    }
    // aria-busy="true", data-loading="" …: the attribute's name says busy, its value yes.
    const words = name.replace(/^(aria|data)-/, '').split(/[-_]+/);
    if (words.some((w) => BUSY_WORD.test(w) || w === 'busy')) return value === '' || value === 'true';
    return BUSY_WORD.test(value.trim());
  };
  const busyAttribute = (name) =>
    name === 'class' || name === 'aria-busy' || name.startsWith('data-') || /(state|status)$/i.test(name);
  const markBusy = (el, name) => {
    let names = busyMarks.get(el);
    if (!names) {
      if (busyMarks.size > 200) return;
      names = new Set();
      busyMarks.set(el, names);
    }
    names.add(name);
  };
  // Called with the observer's records while an action's (or a new document's) work is tracked.
  const noteBusy = (record) => {
    if (record.type === 'attributes') {
      const el = record.target;
      const name = record.attributeName;
      if (el.nodeType === 1 && busyAttribute(name) && busyValue(el, name)) markBusy(el, name);
      return;
    }
    if (record.type !== 'childList') return;
    for (const added of record.addedNodes) {
      if (added.nodeType !== 1) continue;
      for (const attr of added.attributes) {
        if (busyAttribute(attr.name) && busyValue(added, attr.name)) markBusy(added, attr.name);
      }
      if (added.matches('[role=progressbar],progress')) markBusy(added, '');
      if (!added.firstElementChild) continue;
      for (const inner of added.querySelectorAll('[aria-busy=true],[role=progressbar],progress')) {
        markBusy(inner, inner.hasAttribute('aria-busy') ? 'aria-busy' : '');
      }
    }
  };
  const pageBusy = () => {
    let busy = false;
    for (const [el, names] of busyMarks) {
      for (const name of names) if (!busyValue(el, name)) names.delete(name);
      if (names.size === 0 || !el.isConnected) busyMarks.delete(el);
      else if (el.getClientRects().length > 0) busy = true;
    }
    return busy;
  };
  // Sockets whose answer went quiet while the page said it was busy: settled by the mutation
  // that ends the busy state (or by their WS_REPLY_MAX_MS).
  const busySockets = new Set();
  let settleBusySockets = () => {};

  // ---- WebSocket ----
  // A message the page sends is pending until the socket's answer is over: its first message,
  // then until the socket has been quiet for WS_QUIET_MS (an answer streamed in several
  // messages, each re-rendering the page), at most WS_REPLY_MAX_MS after the send. A server
  // may pause in the middle of its answer to do the work asked (Streamlit re-runs the app's
  // script: its first messages come at once, the result once computed): while the page says
  // it is busy (above), a quiet socket's answer goes on. The item ends one task after the last
  // message, once the page's own handlers have run. A socket opened is pending until it is open.
  if (typeof window.WebSocket === 'function' && window.WebSocket.prototype) {
    const awaiting = new WeakMap(); // socket → {ids: Set of item ids, quiet: timer}
    const settleSocket = (socket) => {
      busySockets.delete(socket);
      const state = awaiting.get(socket);
      if (!state) return;
      clearTimer(state.quiet);
      state.quiet = 0;
      for (const id of state.ids) endLater(id);
      state.ids.clear();
    };
    const quietSocket = (socket) => {
      const state = awaiting.get(socket);
      if (!state) return;
      state.quiet = 0;
      if (state.ids.size > 0 && pageBusy()) busySockets.add(socket);
      else settleSocket(socket);
    };
    settleBusySockets = () => {
      if (busySockets.size === 0 || pageBusy()) return;
      for (const socket of [...busySockets]) settleSocket(socket);
    };
    const answered = (socket) => {
      const state = awaiting.get(socket);
      if (!state || state.ids.size === 0) return;
      busySockets.delete(socket);
      clearTimer(state.quiet);
      state.quiet = setTimer(() => quietSocket(socket), WS_QUIET_MS);
    };
    const expect = (socket, kind) => {
      let state = awaiting.get(socket);
      if (!state) {
        state = { ids: new Set(), quiet: 0 };
        awaiting.set(socket, state);
        socket.addEventListener('message', () => answered(socket));
        socket.addEventListener('close', () => settleSocket(socket));
        socket.addEventListener('error', () => settleSocket(socket));
      }
      const ids = state.ids;
      const id = begin(kind, socket.url);
      ids.add(id);
      setTimer(() => {
        if (ids.delete(id)) endNow(id);
      }, WS_REPLY_MAX_MS);
      return ids;
    };
    const tracksSocket = (key) => {
      // Evaluate `recurring` first: it must see every use to keep its history.
      const loop = recurring(key);
      return !loop && chainDepth >= 0 && (epoch === 0 || acting());
    };
    const proto = window.WebSocket.prototype;
    if (typeof proto.send === 'function') {
      proto.send = new Proxy(proto.send, {
        apply(target, socket, args) {
          const result = Reflect.apply(target, socket, args);
          try {
            if (tracksSocket('websocket ' + socket.url)) expect(socket, 'websocket');
          } catch (_) {}
          return result;
        },
      });
    }
    window.WebSocket = new Proxy(window.WebSocket, {
      construct(target, args, newTarget) {
        const socket = Reflect.construct(target, args, newTarget);
        try {
          if (tracksSocket('websocket open ' + socket.url)) {
            const ids = expect(socket, 'websocket open');
            socket.addEventListener('open', () => {
              for (const id of ids) endLater(id);
              ids.clear();
            });
          }
        } catch (_) {}
        return socket;
      },
    });
  }

  // ---- inserted resources and DOM mutations ----
  // `reloading`: a frame element whose document just began to navigate (told by the frame).
  // A module preloaded (`<link rel=modulepreload>`, as Vite's dynamic imports insert for the
  // chunk they import and its dependencies) is imported, run and rendered by the page after it
  // has arrived, in tasks nothing here sees (the import's promise, a framework's scheduler):
  // its item ends once the DOM has been quiet for MODULE_QUIET_MS after its load, at most
  // MODULE_RENDER_MAX_MS after it.
  const moduleWatchers = new Set(); // re-arm callbacks of loaded modules' quiet timers
  const endWhenQuiet = (id) => {
    let timer = 0;
    const end = () => {
      clearTimer(timer);
      moduleWatchers.delete(arm);
      endNow(id);
    };
    const arm = () => {
      clearTimer(timer);
      timer = setTimer(end, MODULE_QUIET_MS);
    };
    moduleWatchers.add(arm);
    arm();
    setTimer(end, MODULE_RENDER_MAX_MS);
  };
  const trackElement = (el, reloading) => {
    const tag = el.localName;
    let what = '';
    let preload = false;
    if (tag === 'script') what = el.src;
    else if (tag === 'link') {
      const rel = el.rel || '';
      preload = /\bmodulepreload\b/i.test(rel) || (/\bpreload\b/i.test(rel) && el.as === 'script');
      what = preload || /\bstylesheet\b/i.test(rel) ? el.href : '';
    } else if (tag === 'iframe' || tag === 'frame') {
      what = el.src || (reloading ? 'frame' : '');
      // A blank frame has loaded before the observer sees it.
      if (!what || (what === 'about:blank' && !reloading)) return;
    }
    if (!what) return;
    const id = begin(preload ? 'module' : tag, what);
    const done = () => {
      el.removeEventListener('load', done);
      el.removeEventListener('error', done);
      if (preload) endWhenQuiet(id);
      else endLater(id);
    };
    el.addEventListener('load', done);
    el.addEventListener('error', done);
    setTimer(done, RESOURCE_MAX_MS);
  };
  const observer = new MutationObserver((records) => {
    const t = now();
    let counts = false;
    const tracking = epoch === 0 || acting();
    for (const record of records) {
      if (tracking) {
        try {
          noteBusy(record);
        } catch (_) {}
      }
      const node = record.target;
      let times = nodeTimes.get(node);
      if (!times) {
        times = { last: -Infinity, beforeEpoch: -Infinity, epoch };
        nodeTimes.set(node, times);
      }
      if (times.epoch !== epoch) {
        // The first change of this node since the action began: remember its last one before.
        times.beforeEpoch = times.last;
        times.epoch = epoch;
      }
      times.last = t;
      times.count = (times.count || 0) + 1;
      // Before any action (a new document), a node changing again and again is animated.
      const chatty =
        epoch === 0
          ? times.count >= CHATTY_COUNT
          : times.beforeEpoch >= epoch - CHATTY_MS && times.beforeEpoch < epoch;
      if (!chatty) counts = true;
      if (record.type === 'childList') {
        for (const added of record.addedNodes) {
          if (added.nodeType !== 1) continue;
          if (/^(script|link|iframe)$/.test(added.localName)) trackElement(added);
          else if (added.firstElementChild && added.querySelectorAll) {
            for (const inner of added.querySelectorAll('script[src],link[href],iframe[src]')) {
              trackElement(inner);
            }
          }
        }
      }
    }
    settleBusySockets();
    if (counts) {
      lastMutation = t;
      for (const arm of moduleWatchers) arm();
      wake();
    }
  });
  const observed = { subtree: true, childList: true, attributes: true, characterData: true };
  observer.observe(document, observed);
  // Shadow roots: observed by the same observer, and remembered for their animations.
  if (typeof Element === 'function' && typeof Element.prototype.attachShadow === 'function') {
    Element.prototype.attachShadow = new Proxy(Element.prototype.attachShadow, {
      apply(target, host, args) {
        const root = Reflect.apply(target, host, args);
        try {
          observer.observe(root, observed);
          shadowRoots.add(typeof WeakRef === 'function' ? new WeakRef(root) : root);
        } catch (_) {}
        return root;
      },
    });
  }

  // ---- navigations ----
  addEventListener(
    'submit',
    (event) => {
      const id = begin('submit', event.target && event.target.action);
      // A handled submission (preventDefault) is over once its handlers ran; a real one
      // becomes a navigation (beforeunload) within a task or two.
      setTimer(() => {
        if (event.defaultPrevented) endNow(id);
      }, 0);
      setTimer(() => endNow(id), SUBMIT_MAX_MS);
    },
    true,
  );
  addEventListener(
    'beforeunload',
    () => {
      unloading = now();
      // A same-origin parent waits for this frame's next document to load.
      try {
        const frame = window.frameElement;
        const parentApi = frame && window.parent[KEY];
        if (parentApi) parentApi.expectFrameLoad(frame);
      } catch (_) {}
      wake();
    },
    true,
  );

  // ---- the API browserd calls ----
  const settleHere = (doc, quietMs, capMs) =>
    new Promise((resolve) => {
      const started = now();
      if (doc !== docId) {
        // A new document since begin(): everything since its start is the action's doing.
        epoch = 0;
        unloading = 0;
      }
      const since = epoch;
      let quietTimer = 0;
      let capTimer = 0;
      let animations = [];
      let loading = false;
      // With observers or scroll listeners at work, two rendering frames pass first (see the
      // header).
      let framesLeft = (observedTargets > 0 || scrollListeners) && nextFrame !== null;
      if (framesLeft) {
        const framesDone = () => {
          if (!framesLeft) return;
          framesLeft = false;
          check();
        };
        nextFrame(() => nextFrame(framesDone));
        setTimer(framesDone, FRAME_WAIT_MAX_MS);
      }
      const finish = (reason) => {
        actionUntil = 0;
        framesLeft = false;
        waiters.delete(check);
        clearTimer(quietTimer);
        clearTimer(capTimer);
        const busy = [...pending.values()]
          .filter((p) => p.start >= since)
          .map((p) => p.kind + (p.what ? ' ' + p.what : ''));
        for (const name of animations) busy.push('animation ' + name);
        if (loading) busy.push('loading screen');
        resolve({
          reason,
          doc: docId,
          waited_ms: now() - started,
          pending: busy.slice(0, 10),
        });
      };
      const check = () => {
        if (unloading && unloading >= since) return finish('navigation');
        if (framesLeft) return;
        const t = now();
        let recheck = Infinity;
        let busy = false;
        for (const p of pending.values()) {
          if (p.start < since) continue;
          if (since === 0 && (p.kind === 'fetch' || p.kind === 'xhr')) {
            // A new document: a request open for longer than LONG_REQUEST_MS is a long poll
            // or a stream, not data the page is about to show.
            const longLived = p.start + LONG_REQUEST_MS;
            if (t >= longLived) continue;
            recheck = Math.min(recheck, longLived);
          }
          busy = true;
        }
        if (busy) {
          if (recheck !== Infinity) {
            clearTimer(quietTimer);
            quietTimer = setTimer(check, recheck - t);
          }
          return;
        }
        // Ends with `animationEnded`, which wakes this check.
        animations = runningAnimations(since);
        if (animations.length > 0) return;
        if (lastMutation >= since) {
          const left = lastMutation + quietMs - now();
          if (left > 0) {
            clearTimer(quietTimer);
            quietTimer = setTimer(check, left);
            return;
          }
        }
        // A new document still showing its loading screen: its next mutation wakes this check.
        loading = since === 0 && loadingScreen();
        if (loading) return;
        // A blank app shell: its next mutation, or its deadline, wakes this check.
        const blankLeft = since === 0 ? blankShellLeft() : 0;
        if (blankLeft > 0) {
          loading = true;
          clearTimer(quietTimer);
          quietTimer = setTimer(check, blankLeft);
          return;
        }
        finish('quiet');
      };
      capTimer = setTimer(() => finish('cap'), capMs);
      waiters.add(check);
      check();
    });
  // Whether the document shows a loading screen rather than content: its only text says it
  // is loading, or it shows a progress bar or a busy region and little text. Costs a layout
  // only when the document holds little text.
  const loadingScreen = () => {
    const body = document.body;
    // A cheap bound before innerText (which lays out): a loading screen has few elements. Not
    // textContent: it counts inline scripts (an app's whole configuration, as Gradio serves it).
    if (!body || body.getElementsByTagName('*').length > LOADING_ELEMENTS_MAX) return false;
    const text = (body.innerText || '').trim();
    if (text.length > LOADING_TEXT_MAX) return false;
    if (LOADING_TEXT.test(text)) return true;
    for (const indicator of body.querySelectorAll('[role=progressbar],progress,[aria-busy=true]')) {
      if (indicator.getClientRects().length > 0) return true;
    }
    return false;
  };
  // How much longer a blank app shell is waited for (0: the document is not one, or is old
  // enough): a body with no text and nothing to see or use, in a document with scripts.
  const blankShellLeft = () => {
    const left = BLANK_SHELL_MAX_MS - perfNow();
    const body = document.body;
    if (left <= 0 || !body || document.scripts.length === 0) return 0;
    if (body.getElementsByTagName('*').length > LOADING_ELEMENTS_MAX) return 0;
    if (body.querySelector('img,svg,canvas,video,iframe,embed,object,input,button,select,textarea,a[href]')) {
      return 0;
    }
    return (body.innerText || '').trim() === '' ? left : 0;
  };
  const sameOriginFrames = () => {
    const found = [];
    for (let i = 0; i < window.frames.length; i++) {
      try {
        const api = window.frames[i][KEY];
        if (api) found.push(api);
      } catch (_) {}
    }
    return found;
  };
  const api = Object.freeze({
    // Marks the start of an action in this document and its same-origin frames.
    begin() {
      busyMarks.clear();
      epoch = now();
      perfEpoch = perfNow();
      actionUntil = epoch + ACTION_MAX_MS;
      unloading = 0;
      for (const frame of sameOriginFrames()) frame.begin();
      return docId;
    },
    // Waits until this document and its same-origin frames have settled (see the header).
    async settle(doc, quietMs, capMs) {
      const own = settleHere(doc, quietMs, capMs);
      const frames = sameOriginFrames().map((f) => f.settle(f.doc(), quietMs, capMs));
      const all = [await own, ...(await Promise.all(frames))];
      const top = all[0];
      const reasons = all.map((r) => r.reason);
      return {
        reason: top.reason === 'navigation' ? 'navigation' : reasons.includes('cap') ? 'cap' : 'quiet',
        doc: top.doc,
        waited_ms: Math.max(...all.map((r) => r.waited_ms)),
        pending: all.flatMap((r) => r.pending).slice(0, 10),
      };
    },
    doc() {
      return docId;
    },
    expectFrameLoad(frame) {
      trackElement(frame, true);
    },
  });
  Object.defineProperty(window, KEY, { value: api, enumerable: false, configurable: false, writable: false });
})();
