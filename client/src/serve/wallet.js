// The market page's script: the app side of the Wallet Standard (what wallet-adapter dApps use),
// and the page's action forms posted for the connected wallet.
//
// Registration (github.com/wallet-standard/wallet-standard, @wallet-standard/app): the app
// dispatches `wallet-standard:app-ready` with an API `{register}` (for wallets loaded before it),
// and listens for `wallet-standard:register-wallet`, whose detail is a callback to call with
// that API (for wallets loaded after it). Offered: wallets with `standard:connect`, a `solana:`
// chain and a way to sign a Solana transaction.
//
// A form: connect → POST its `data-action` (with its inputs in the query) and
// `{"account": "<base58>"}` → `{"transaction": "<base64 unsigned>", "message"}` or an error
// `{"message"}` → `solana:signAndSendTransaction` where the wallet has it for the page's chain,
// else `solana:signTransaction` and `POST /api/send` → the signature in #status, then the page's
// data read again. The bid form's environment is sealed here first (`environment`, `sealTo`).
(function () {
  'use strict';

  const chain = document.currentScript.dataset.chain;
  const $ = (id) => document.getElementById(id);
  const wallets = [];
  let wallet = null;
  let account = null;

  // ---- Wallet Standard: the app's registry ----

  function register(...added) {
    const fresh = added.filter((w) => !wallets.includes(w) && usable(w));
    wallets.push(...fresh);
    showWallets();
    return function unregister() {
      for (const w of fresh) {
        const i = wallets.indexOf(w);
        if (i >= 0) wallets.splice(i, 1);
        if (w === wallet) setAccount(null, null);
      }
      showWallets();
    };
  }

  function usable(w) {
    const f = w.features || {};
    return (
      f['standard:connect'] &&
      (w.chains || []).some((c) => c.startsWith('solana:')) &&
      (f['solana:signTransaction'] || f['solana:signAndSendTransaction'])
    );
  }

  const api = Object.freeze({ register });
  window.addEventListener('wallet-standard:register-wallet', (event) => {
    try {
      event.detail(api);
    } catch (e) {
      console.error('a wallet failed to register', e);
    }
  });
  window.dispatchEvent(
    new CustomEvent('wallet-standard:app-ready', { detail: api, bubbles: false })
  );

  // ---- Connection ----

  function showWallets() {
    const select = $('wallets');
    const chosen = select.value;
    select.replaceChildren(
      ...(wallets.length ? wallets : [null]).map((w, i) => {
        const o = document.createElement('option');
        o.value = w ? String(i) : '';
        o.textContent = w ? w.name : 'no wallet found';
        return o;
      })
    );
    if (chosen && Number(chosen) < wallets.length) select.value = chosen;
    select.disabled = wallets.length < 2;
    $('connect').disabled = wallets.length === 0;
    enableForms();
  }

  function setAccount(w, a) {
    wallet = w;
    account = a;
    // The account, and a link to its console (its bids, leases and machines).
    const shown = $('account');
    shown.textContent = a ? `${a.address} · ` : '';
    if (a) {
      const link = document.createElement('a');
      link.id = 'console';
      link.href = `/wallet/${a.address}`;
      link.textContent = 'your console';
      shown.append(link);
    }
    $('connect').textContent = a ? 'Connected' : 'Connect wallet';
  }

  async function connect() {
    const w = wallets[Number($('wallets').value || 0)];
    if (!w) throw new Error('no Wallet Standard wallet with a Solana account is installed');
    const { accounts } = await w.features['standard:connect'].connect();
    const a = accounts.find((x) => (x.chains || []).includes(chain)) || accounts[0];
    if (!a) throw new Error(`${w.name} granted no account`);
    if (w !== wallet && w.features['standard:events']) {
      w.features['standard:events'].on('change', ({ accounts: now }) => {
        if (w !== wallet || !now) return;
        const same = now.find((x) => x.address === (account && account.address));
        setAccount(now.length ? w : null, same || now[0] || null);
      });
    }
    setAccount(w, a);
    return a;
  }

  function enableForms() {
    for (const b of document.querySelectorAll('form[data-action] button, form[data-lease] button')) {
      b.disabled = wallets.length === 0;
    }
  }

  // ---- Acting ----

  function status(state, html) {
    const s = $('status');
    s.dataset.state = state;
    s.innerHTML = html;
  }

  const escape = (t) =>
    String(t).replace(/[&<>"']/g, (c) => `&#${c.charCodeAt(0)};`);

  async function postJson(url, body) {
    const response = await fetch(url, {
      method: 'POST',
      headers: { 'Content-Type': 'application/json' },
      body: JSON.stringify(body),
    });
    let answer;
    try {
      answer = await response.json();
    } catch (e) {
      throw new Error(`${url} answered ${response.status} without JSON`);
    }
    if (!response.ok) throw new Error(answer.message || `${url} answered ${response.status}`);
    return answer;
  }

  // Signs `txs` (wire bytes) with the wallet, all in one request of it; sends them itself where
  // it can for the page's chain, else through the service, one after another. Returns each
  // signature (base58) and whether the service confirmed them.
  async function signAndSend(...txs) {
    const f = wallet.features;
    const sendable =
      f['solana:signAndSendTransaction'] &&
      ((account.chains || []).includes(chain) || (wallet.chains || []).includes(chain));
    const inputs = txs.map((transaction) => ({ account, transaction, chain }));
    if (sendable) {
      const out = await f['solana:signAndSendTransaction'].signAndSendTransaction(...inputs);
      return { signatures: out.map((o) => base58(o.signature)), confirmed: false };
    }
    if (!f['solana:signTransaction']) {
      throw new Error(`${wallet.name} cannot sign a transaction for ${chain}`);
    }
    const signed = await f['solana:signTransaction'].signTransaction(...inputs);
    const signatures = [];
    for (const out of signed) {
      const sent = await postJson('/api/send', { transaction: toBase64(out.signedTransaction) });
      signatures.push(sent.signature);
    }
    return { signatures, confirmed: true };
  }

  async function act(form) {
    const url = new URL(form.dataset.action, location.href);
    for (const input of form.querySelectorAll('input[name]')) {
      if (input.value.trim() !== '') url.searchParams.append(input.name, input.value.trim());
    }
    status('working', 'Asking the wallet…');
    if (!account) await connect();
    const text = form.querySelector('textarea[name="env"]');
    const env = text && text.value.trim() !== '' ? await environment(text.value) : null;
    if (env) url.searchParams.set('env-hash', hex(env.hash));
    status('working', 'Building the transaction…');
    const built = await postJson(url.pathname + url.search, { account: account.address });
    status('working', `${escape(built.message || '')}: waiting for the wallet to sign…`);
    const { signatures: [signature], confirmed } = await signAndSend(fromBase64(built.transaction));
    let sent = `${escape(built.message || 'Sent')}. Signature <code class="signature">${escape(signature)}</code>`;
    status('sent', sent);
    $('status').dataset.signature = signature;
    if (built.bid) $('status').dataset.bid = built.bid;
    if (env) {
      const n = await sealTo(built.bid, env.salted);
      sent += n
        ? `. Its environment is sealed to ${n} machine(s) that may run it.`
        : '. No machine may run it now: seal its environment later with <code>gpu-market bid seal</code>.';
      $('status').dataset.sealedTo = n;
    }
    await reload();
    // `done`: the data below is read after the transaction.
    status('done', sent);
    // A wallet that sent it itself answers before the cluster confirms: read once more.
    if (!confirmed) setTimeout(reload, 3000);
  }

  // ---- A sealed environment (`/web/seal.mjs`: the sdk's envelope, in the browser) ----

  // The text salted by the wallet's signature of the salt's message, as `bid place --env FILE`
  // salts it with a keypair's: the same wallet and text give the same hash again.
  async function environment(text) {
    const seal = await import('/web/seal.mjs');
    const plain = new TextEncoder().encode(text);
    const f = wallet.features['solana:signMessage'];
    if (!f) throw new Error(`${wallet.name} cannot sign a message, which sealing an environment needs`);
    const toSign = await postJson('/api/env/salt', { sha256: hex(seal.digest(plain)) });
    status('working', 'Waiting for the wallet to sign the environment\'s salt…');
    const [signed] = await f.signMessage({ account, message: fromBase64(toSign.message) });
    return seal.environment(plain, signed.signature);
  }

  // Seals `salted` to each machine that may run bid `bid` and has no copy, and stores the
  // copies through the wallet (one request of it for them all). Returns how many.
  async function sealTo(bid, salted) {
    status('working', 'Finding the machines that may run the bid…');
    let able;
    // A wallet that sent the bid itself answers before the cluster has it: wait for it.
    for (let tries = 0; ; tries++) {
      const response = await fetch(`/api/env/${bid}`, { cache: 'no-store' });
      able = await response.json();
      if (response.ok) break;
      if (tries >= 30) throw new Error(able.message || `the service answered ${response.status}`);
      await new Promise((r) => setTimeout(r, 1000));
    }
    const { seal } = await import('/web/seal.mjs');
    const txs = [];
    for (const m of able.machines) {
      const sealed = seal(salted, fromBase64(m.agent_bytes));
      const built = await postJson(`/api/env/${bid}/seal`, {
        account: account.address,
        recipient: m.agent,
        sealed: toBase64(sealed),
      });
      txs.push(fromBase64(built.transaction));
    }
    if (txs.length) {
      status('working', `Sealed to ${txs.length} machine(s): waiting for the wallet to sign their copies…`);
      await signAndSend(...txs);
    }
    return txs.length;
  }

  // A request of a lease's container (its logs, one of its files), signed by the wallet as a
  // Solana off-chain message over the bytes the service hands out (the request, its machine, a
  // nonce and an expiry) and sent by the service to the lease's agent. The answer goes below the
  // form: the logs as text; a file as a download link with its sha256, computed here.
  async function leaseCall(form) {
    const lease = form.dataset.lease;
    const request = { call: form.dataset.call };
    const path = form.querySelector('input[name="path"]');
    if (path) request.path = path.value.trim();
    status('working', 'Asking the wallet…');
    if (!account) await connect();
    request.account = account.address;
    const f = wallet.features['solana:signMessage'];
    if (!f) throw new Error(`${wallet.name} cannot sign a message`);
    if (request.call === 'terminal') return openTerminal(lease, request);
    if (request.call === 'logs') return openLogs(lease, request);
    const toSign = await postJson(`/api/lease/${lease}/sign`, request);
    status('working', 'Waiting for the wallet to sign the request…');
    const [signed] = await f.signMessage({ account, message: fromBase64(toSign.message) });
    status('working', 'Asking the lease\'s agent…');
    const response = await fetch(`/api/lease/${lease}/send`, {
      method: 'POST',
      headers: { 'Content-Type': 'application/json' },
      body: JSON.stringify({
        ...request,
        nonce: toSign.nonce,
        expires: toSign.expires,
        signature: toBase64(signed.signature),
      }),
    });
    if (!response.ok) {
      const answer = await response.json().catch(() => ({}));
      throw new Error(answer.message || `the service answered ${response.status}`);
    }
    const out = document.querySelector(`[data-output="${lease}"]`);
    if (request.call === 'status') return showStatus(out, await response.json());
    const bytes = new Uint8Array(await response.arrayBuffer());
    const digest = new Uint8Array(await crypto.subtle.digest('SHA-256', bytes));
    const sha256 = hex(digest);
    const claimed = response.headers.get('x-sha256');
    if (claimed && claimed !== sha256) throw new Error(`the file's sha256 is ${sha256}, not the ${claimed} announced`);
    // The service's name for it: the file's, or a folder's as FOLDER.tar.
    const disposition = /filename="([^"]+)"/.exec(response.headers.get('content-disposition') || '');
    const name = disposition ? disposition[1] : request.path.split('/').pop() || 'file';
    const link = document.createElement('a');
    link.href = URL.createObjectURL(new Blob([bytes]));
    link.download = name;
    link.textContent = `${name} (${bytes.length} bytes)`;
    link.className = 'download';
    out.innerHTML = '';
    out.append(link, ' sha256 ');
    const code = document.createElement('code');
    code.className = 'sha256';
    code.textContent = sha256;
    out.append(code);
    status('done', `Downloaded ${escape(name)}: sha256 ${sha256}, computed in this browser.`);
  }

  // The container's state and where to connect to its published ports, below its lease.
  function showStatus(out, answer) {
    const state = document.createElement('p');
    state.className = 'container-state';
    state.textContent = `Its container: ${answer.state.state}.`;
    const list = document.createElement('ul');
    list.className = 'connect';
    for (const line of answer.connect) {
      const item = document.createElement('li');
      const code = document.createElement('code');
      code.textContent = line;
      item.append(code);
      list.append(item);
    }
    out.replaceChildren(state, answer.connect.length ? list : 'It publishes no port.');
    status('done', `Where to connect: ${answer.connect.length} port(s) published, listed below the lease.`);
  }

  // A stream of the lease's agent (`lease_api::stream`): the request signed by the wallet once,
  // then a WebSocket of the service whose first message is that request. `onOpen` runs once it
  // is sent; `sink.write` gets the stream's bytes as they come, `sink.say` a line on how it
  // ended.
  async function openStream(lease, request, sink, onOpen) {
    const toSign = await postJson(`/api/lease/${lease}/sign`, request);
    status('working', 'Waiting for the wallet to sign the request…');
    const f = wallet.features['solana:signMessage'];
    const [signed] = await f.signMessage({ account, message: fromBase64(toSign.message) });
    const scheme = location.protocol === 'https:' ? 'wss' : 'ws';
    const ws = new WebSocket(`${scheme}://${location.host}/api/lease/${lease}/stream`);
    ws.binaryType = 'arraybuffer';
    ws.onopen = () => {
      ws.send(JSON.stringify({ ...request, nonce: toSign.nonce, expires: toSign.expires, signature: toBase64(signed.signature) }));
      onOpen();
    };
    ws.onmessage = (event) => {
      if (typeof event.data !== 'string') {
        sink.write(new Uint8Array(event.data));
        return;
      }
      const said = JSON.parse(event.data);
      if ('exit' in said) {
        sink.say(`[exited with ${said.exit}]`);
        sink.element.dataset.exit = said.exit;
      } else if (said.end) {
        sink.say('[the container stopped]');
        sink.element.dataset.ended = 'true';
      } else if (said.error) {
        status('error', escape(said.error));
      }
    };
    return ws;
  }

  // The container's output below its lease, as it is printed (its last 500 lines first).
  async function openLogs(lease, request) {
    const out = document.querySelector(`[data-output="${lease}"]`);
    out.innerHTML = '';
    const screen = document.createElement('pre');
    screen.className = 'logs';
    screen.dataset.logs = lease;
    out.append(screen);
    const decoder = new TextDecoder();
    const show = (text) => {
      screen.textContent += text;
      screen.scrollTop = screen.scrollHeight;
    };
    const sink = {
      element: screen,
      write: (bytes) => show(decoder.decode(bytes, { stream: true })),
      say: (line) => show(`\n${line}\n`),
    };
    await openStream(lease, request, sink, () =>
      status('done', 'The container\'s output is below its lease, as it is printed.')
    ).catch((e) => {
      out.replaceChildren();
      throw e;
    });
  }

  // A terminal on the lease's container: xterm.js (`/web/terminal.mjs`, loaded when first
  // opened) on a TTY session of its shell. Keys go to it as xterm sends them, its output is drawn
  // as a terminal draws it (colours, cursor moves, full-screen programs), and its size in
  // character cells follows the element's. The element's `terminal` property is the xterm
  // `Terminal` (its buffer is what it shows).
  async function openTerminal(lease, request) {
    const { Terminal, FitAddon } = await import('/web/terminal.mjs');
    if (!document.querySelector('link[data-terminal-css]')) {
      const css = document.createElement('link');
      css.rel = 'stylesheet';
      css.href = '/web/terminal.css';
      css.dataset.terminalCss = '';
      document.head.append(css);
    }
    const out = document.querySelector(`[data-output="${lease}"]`);
    out.innerHTML = '';
    const screen = document.createElement('div');
    screen.className = 'terminal';
    screen.dataset.terminal = lease;
    out.append(screen);
    const term = new Terminal({ cursorBlink: true, fontSize: 13, scrollback: 5000 });
    const fit = new FitAddon();
    term.loadAddon(fit);
    term.open(screen);
    fit.fit();
    screen.terminal = term;
    const sized = () => {
      screen.dataset.rows = term.rows;
      screen.dataset.cols = term.cols;
    };
    request.tty = `${term.rows}x${term.cols}`;
    const ws = await openStream(
      lease,
      request,
      { element: screen, write: (bytes) => term.write(bytes), say: (line) => term.write(`\r\n${line}\r\n`) },
      () => {
        sized();
        term.focus();
        status('done', 'A terminal on the container is open below its lease: type into it.');
      }
    ).catch((e) => {
      // Refused (a stranger's wallet): no terminal is left on the page.
      term.dispose();
      out.replaceChildren();
      throw e;
    });
    const encoder = new TextEncoder();
    term.onData((data) => {
      if (ws.readyState === WebSocket.OPEN) ws.send(encoder.encode(data));
    });
    term.onResize(({ rows, cols }) => {
      if (ws.readyState !== WebSocket.OPEN) return;
      ws.send(JSON.stringify({ rows, cols }));
      sized();
    });
    new ResizeObserver(() => fit.fit()).observe(screen);
  }

  // The page's data read again (the server renders it), in place.
  async function reload() {
    const response = await fetch(location.href, { cache: 'no-store' });
    if (!response.ok) return;
    const fresh = new DOMParser().parseFromString(await response.text(), 'text/html');
    const data = fresh.getElementById('data');
    if (data) {
      $('data').replaceWith(data);
      enableForms();
    }
  }

  document.addEventListener('submit', (event) => {
    const leaseForm = event.target.closest('form[data-lease]');
    if (leaseForm) {
      event.preventDefault();
      leaseCall(leaseForm).catch((e) => status('error', escape(e.message || e)));
      return;
    }
    const form = event.target.closest('form[data-action]');
    if (!form) return;
    event.preventDefault();
    act(form).catch((e) => status('error', escape(e.message || e)));
  });

  $('connect').addEventListener('click', () => {
    connect()
      .then((a) => status('done', `Connected ${escape(a.address)}`))
      .catch((e) => status('error', escape(e.message || e)));
  });

  // ---- Encodings ----

  function toBase64(bytes) {
    let s = '';
    for (const b of bytes) s += String.fromCharCode(b);
    return btoa(s);
  }

  const hex = (bytes) => [...bytes].map((b) => b.toString(16).padStart(2, '0')).join('');

  function fromBase64(text) {
    return Uint8Array.from(atob(text), (c) => c.charCodeAt(0));
  }

  const ALPHABET = '123456789ABCDEFGHJKLMNPQRSTUVWXYZabcdefghijkmnopqrstuvwxyz';
  function base58(bytes) {
    const digits = [];
    for (const byte of bytes) {
      let carry = byte;
      for (let j = 0; j < digits.length; j++) {
        carry += digits[j] * 256;
        digits[j] = carry % 58;
        carry = Math.floor(carry / 58);
      }
      while (carry > 0) {
        digits.push(carry % 58);
        carry = Math.floor(carry / 58);
      }
    }
    let out = '';
    for (const byte of bytes) {
      if (byte !== 0) break;
      out += '1';
    }
    for (let i = digits.length - 1; i >= 0; i--) out += ALPHABET[digits[i]];
    return out;
  }

  showWallets();
})();
