// Drives the market page of `gpu-market serve` in Debian's Chromium for client/tests/page.rs, with
// a test wallet registered through the Wallet Standard that signs with a known keypair.
//
// Environment: PAGE_URL (the page), SHOTS_DIR (where screenshots go), WALLET_SECRET (the 64-byte
// secret key as a JSON array), WALLET_ADDRESS (its public key, base58), WALLET_CHAIN (e.g.
// solana:localnet).
//
// Commands, one per line on standard input; each answers one JSON line on standard output:
//   read NAME     loads the page, saves NAME.png, answers what the DOM shows
//   stake AMOUNT  stakes AMOUNT through the page's stake form and the wallet, waits for the
//                 page's status, saves stake.png, answers the status and what the DOM shows
//   bid JSON      on the market page, fills the bid form with JSON's `fields` (each parameter's
//                 value) and its environment with `env`, submits it through the wallet (which
//                 signs the environment's salt, the bid, and the sealed copies), waits for the
//                 page's status; answers the status (with the bid) and what the DOM shows
//   console       follows the page's link to the connected wallet's console, answers its DOM
//   follow LEASE TEXT…
//                 opens the lease's logs (streamed as printed) through the page's form and the
//                 wallet's signMessage, waits until they show TEXT; answers them
//   await LEASE TEXT…
//                 waits until the logs open on this page show TEXT; answers them
//   lease LEASE file PATH
//                 downloads a file of the lease's through the page's form and the wallet's
//                 signMessage; answers the status and the file's sha256
//   lease LEASE status
//                 asks where to connect to the lease's ports, likewise; answers them
//   terminal LEASE [NAME]
//                 opens the lease's terminal, runs commands in it (with NAME, prints the
//                 container's environment variable NAME), resizes it, exits; answers the sizes
//                 and what it showed
//   quit
import { chromium } from 'playwright-core';
import { createInterface } from 'node:readline';
import path from 'node:path';

function env(name) {
  const v = process.env[name];
  if (!v) throw new Error(`${name} is not set`);
  return v;
}

const url = env('PAGE_URL');
const shots = env('SHOTS_DIR');
const wallet = {
  secret: JSON.parse(env('WALLET_SECRET')),
  address: env('WALLET_ADDRESS'),
  chain: env('WALLET_CHAIN'),
};

// Runs in the page before its scripts: a wallet as a browser extension would inject it, which
// registers itself both ways the Wallet Standard provides.
function testWallet({ secret, address, chain }) {
  const seed = new Uint8Array(secret.slice(0, 32));
  const publicKey = new Uint8Array(secret.slice(32, 64));
  // PKCS #8 of an Ed25519 private key: a fixed prefix, then the 32-byte seed.
  const pkcs8 = new Uint8Array([
    0x30, 0x2e, 0x02, 0x01, 0x00, 0x30, 0x05, 0x06, 0x03, 0x2b, 0x65, 0x70, 0x04, 0x22, 0x04, 0x20,
    ...seed,
  ]);
  const key = crypto.subtle.importKey('pkcs8', pkcs8, { name: 'Ed25519' }, false, ['sign']);
  const account = Object.freeze({
    address,
    publicKey,
    chains: [chain],
    features: ['solana:signTransaction', 'solana:signMessage'],
  });
  const listeners = { change: [] };
  let accounts = [];
  window.__testWallet = { connects: 0, signed: [], messages: 0 };

  // A compact-u16 (shortvec) at `at`: its value and the offset after it.
  function shortvec(bytes, at) {
    let value = 0;
    for (let i = 0; i < 3; i++) {
      const b = bytes[at + i];
      value |= (b & 0x7f) << (7 * i);
      if ((b & 0x80) === 0) return [value, at + i + 1];
    }
    throw new Error('bad compact-u16');
  }

  // Signs a legacy transaction's message and puts the signature in this key's slot.
  async function sign(tx) {
    const [count, sigsAt] = shortvec(tx, 0);
    const message = tx.subarray(sigsAt + 64 * count);
    const required = message[0];
    const [keys, keysAt] = shortvec(message, 3);
    let slot = -1;
    for (let i = 0; i < Math.min(required, keys); i++) {
      const k = message.subarray(keysAt + 32 * i, keysAt + 32 * (i + 1));
      if (k.every((b, j) => b === publicKey[j])) slot = i;
    }
    if (slot < 0 || slot >= count) throw new Error('the transaction asks no signature of this wallet');
    const signature = new Uint8Array(await crypto.subtle.sign('Ed25519', await key, message));
    const signed = new Uint8Array(tx);
    signed.set(signature, sigsAt + 64 * slot);
    window.__testWallet.signed.push(slot);
    return signed;
  }

  const testWallet = Object.freeze({
    version: '1.0.0',
    name: 'Test Wallet',
    icon: 'data:image/svg+xml;base64,PHN2ZyB4bWxucz0iaHR0cDovL3d3dy53My5vcmcvMjAwMC9zdmciIHZpZXdCb3g9IjAgMCAxIDEiPjxyZWN0IHdpZHRoPSIxIiBoZWlnaHQ9IjEiLz48L3N2Zz4=',
    chains: [chain],
    get accounts() {
      return accounts;
    },
    features: {
      'standard:connect': {
        version: '1.0.0',
        connect: async () => {
          accounts = [account];
          window.__testWallet.connects += 1;
          for (const l of listeners.change) l({ accounts });
          return { accounts };
        },
      },
      'standard:events': {
        version: '1.0.0',
        on: (event, listener) => {
          listeners[event].push(listener);
          return () => listeners[event].splice(listeners[event].indexOf(listener), 1);
        },
      },
      'solana:signMessage': {
        version: '1.0.0',
        signMessage: (...inputs) =>
          Promise.all(
            inputs.map(async (input) => {
              if (input.account.address !== address) throw new Error('not this wallet\'s account');
              window.__testWallet.messages += 1;
              const signature = new Uint8Array(await crypto.subtle.sign('Ed25519', await key, input.message));
              return { signedMessage: input.message, signature };
            })
          ),
      },
      'solana:signTransaction': {
        version: '1.0.0',
        supportedTransactionVersions: ['legacy'],
        signTransaction: (...inputs) =>
          Promise.all(
            inputs.map(async (input) => {
              if (input.account.address !== address) throw new Error('not this wallet\'s account');
              return { signedTransaction: await sign(input.transaction) };
            })
          ),
      },
    },
  });

  const callback = ({ register }) => register(testWallet);
  window.addEventListener('wallet-standard:app-ready', ({ detail: api }) => callback(api));
  window.dispatchEvent(new CustomEvent('wallet-standard:register-wallet', { detail: callback }));
}

// What the DOM shows: each record (`data-record`, `data-key`) with its own fields
// (`data-field`: `data-value` where the text is shortened, else the text).
function readDom() {
  const records = [...document.querySelectorAll('[data-record]')].map((r) => {
    const fields = {};
    for (const f of r.querySelectorAll('[data-field]')) {
      if (f.closest('[data-record]') !== r) continue;
      fields[f.dataset.field] = f.dataset.value ?? f.textContent.trim();
    }
    return { record: r.dataset.record, key: r.dataset.key, fields };
  });
  const status = document.getElementById('status');
  return {
    cluster_time: Number(document.getElementById('data').dataset.clusterTime),
    records,
    plots: [...document.querySelectorAll('svg.plot')].map((s) => ({
      id: s.id,
      polylines: s.querySelectorAll('polyline').length,
    })),
    wallets: [...document.querySelectorAll('#wallets option')].map((o) => o.textContent),
    forms: [...document.querySelectorAll('form[data-action]')].map((f) => ({
      action: f.dataset.action,
      enabled: !f.querySelector('button').disabled,
    })),
    status: {
      state: status.dataset.state ?? '',
      text: status.textContent,
      signature: status.dataset.signature ?? '',
      bid: status.dataset.bid ?? '',
      sealed_to: status.dataset.sealedTo ?? '',
    },
    wallet: window.__testWallet,
  };
}

const browser = await chromium.launch({
  executablePath: '/usr/bin/chromium',
  headless: true,
  args: [
    '--no-sandbox',
    '--disable-gpu',
    '--disable-quic',
    '--no-first-run',
    '--disable-background-networking',
    '--disable-component-update',
    '--disable-sync',
  ],
});
const page = await browser.newPage({ viewport: { width: 1280, height: 900 } });
page.on('pageerror', (e) => console.error(`page error: ${e.message}`));
page.on('console', (m) => console.error(`console.${m.type()}: ${m.text()}`));
await page.addInitScript(testWallet, wallet);

const answer = (obj) => process.stdout.write(`${JSON.stringify(obj)}\n`);

async function load() {
  await page.goto(url, { waitUntil: 'load' });
  // wallet.js has run and the test wallet has registered through the Wallet Standard: within a
  // minute, as a busy machine may take a while to load and run the page's scripts.
  await page.waitForFunction(() => !document.getElementById('connect').disabled, null, { timeout: 60000 });
}

async function stake(amount) {
  const form = page.locator('form[data-action^="/api/actions/stake"]');
  await form.locator('input[name="amount"]').fill(amount);
  await form.locator('button').click();
  await page.waitForFunction(
    () => ['done', 'error'].includes(document.getElementById('status').dataset.state),
    null,
    { timeout: 60000 }
  );
}

const lines = createInterface({ input: process.stdin });
try {
  for await (const line of lines) {
    const [command, arg] = line.trim().split(/\s+/);
    if (command === 'quit') break;
    if (command === 'read') {
      await load();
      await page.screenshot({ path: path.join(shots, `${arg}.png`), fullPage: true });
      answer({ event: 'read', name: arg, ...(await page.evaluate(readDom)) });
    } else if (command === 'stake') {
      await stake(arg);
      await page.screenshot({ path: path.join(shots, 'stake.png'), fullPage: true });
      answer({ event: 'stake', ...(await page.evaluate(readDom)) });
    } else if (command === 'follow' || command === 'await') {
      // `follow LEASE TEXT…`: opens the lease's logs through the page's form and the wallet,
      // and waits until they show TEXT; `await LEASE TEXT…` waits for more, on the same page.
      const [, lease, ...words] = line.trim().split(/\s+/);
      const until = words.join(' ');
      if (command === 'follow') {
        await load();
        await page.locator(`form[data-lease="${lease}"][data-call="logs"] button`).click();
      }
      await page.waitForFunction(
        ([l, u]) => {
          const logs = document.querySelector(`pre[data-logs="${l}"]`);
          return logs && logs.textContent.includes(u);
        },
        [lease, until],
        { timeout: 60000 }
      );
      const logs = await page.locator(`pre[data-logs="${lease}"]`).textContent();
      answer({ event: command, logs, ...(await page.evaluate(readDom)) });
    } else if (command === 'lease') {
      // `lease LEASE file PATH`: the lease's download form on this page, through the wallet's
      // signMessage; answers the status and what the form put below the lease.
      const [, lease, call, filePath] = line.trim().split(/\s+/);
      await load();
      const form = page.locator(`form[data-lease="${lease}"][data-call="${call}"]`);
      if (filePath) await form.locator('input[name="path"]').fill(filePath);
      await form.locator('button').click();
      await page.waitForFunction(
        () => ['done', 'error'].includes(document.getElementById('status').dataset.state),
        null,
        { timeout: 60000 }
      );
      await page.screenshot({ path: path.join(shots, `lease-${call}.png`), fullPage: true });
      const output = await page.evaluate((l) => {
        const out = document.querySelector(`[data-output="${l}"]`);
        const link = out && out.querySelector('a.download');
        return {
          logs: out && out.querySelector('pre.logs') ? out.querySelector('pre.logs').textContent : null,
          file: link ? link.textContent : null,
          sha256: out && out.querySelector('code.sha256') ? out.querySelector('code.sha256').textContent : null,
          connect: out ? [...out.querySelectorAll('ul.connect code')].map((c) => c.textContent) : null,
        };
      }, lease);
      answer({ event: 'lease', ...output, ...(await page.evaluate(readDom)) });
    } else if (command === 'terminal') {
      // `terminal LEASE [NAME]`: opens the lease's terminal through the page's form and the
      // wallet, runs `stty size`, an echo and a print that moves the cursor back, resizes the terminal's
      // element, runs `stty size` again, then `exit`; answers the sizes the page gave and what
      // the terminal showed (its xterm.js buffer).
      const [, lease, variable] = line.trim().split(/\s+/);
      await load();
      await page.locator(`form[data-lease="${lease}"][data-call="terminal"] button`).click();
      // The terminal's element; its `terminal` property is the page's xterm.js `Terminal`,
      // whose buffer (scrollback and screen, one line of text a row) is what it shows.
      const screen = page.locator(`div[data-terminal="${lease}"]`);
      const sized = async (not) =>
        page.waitForFunction(
          ([l, n]) => {
            const s = document.querySelector(`div[data-terminal="${l}"]`);
            return s && s.dataset.rows && `${s.dataset.rows} ${s.dataset.cols}` !== n;
          },
          [lease, not],
          { timeout: 60000 }
        );
      const size = () => screen.evaluate((s) => `${s.dataset.rows} ${s.dataset.cols}`);
      // Types `typed`, then waits until the terminal shows `until` (a string, or a regular
      // expression's source with `pattern`).
      const run = async (typed, until, pattern = false) => {
        await screen.evaluate((s) => s.terminal.focus());
        await page.keyboard.type(typed);
        await page.keyboard.press('Enter');
        await page.waitForFunction(
          ([l, u, p]) => {
            const text = window.__shownText(l);
            return p ? new RegExp(u).test(text) : text.includes(u);
          },
          [lease, until, pattern],
          { timeout: 30000 }
        );
      };
      await sized('');
      // What the terminal shows, read in the page (its CSP allows no eval).
      await page.evaluate(() => {
        window.__shownText = (l) => {
          const b = document.querySelector(`div[data-terminal="${l}"]`).terminal.buffer.active;
          return Array.from({ length: b.length }, (_, i) => b.getLine(i).translateToString(true)).join('\n');
        };
      });
      const first = await size();
      await run('stty size', `\n${first}`);
      await run('echo hello-$((6*7))', 'hello-42');
      // A program that moves the cursor as full-screen ones do: four columns back, then it
      // writes over what it printed (a terminal emulator shows abXYef; plain text, abcdefXY).
      await run("printf 'abcdef\\033[4DXY\\n'", '\nabXYef');
      // The variable's value as printed (the line typed shows `$NAME`, the output does not).
      if (variable) await run(`echo "${variable}=$${variable}."`, `\n${variable}=[^$\n]*\\.`, true);
      await screen.evaluate((s) => {
        s.style.width = '420px';
        s.style.height = '208px';
      });
      await sized(first);
      const second = await size();
      await run('stty size', `\n${second}`);
      await run('exit', '[exited with 0]');
      await page.screenshot({ path: path.join(shots, 'terminal.png'), fullPage: true });
      answer({ event: 'terminal', first, second, text: await page.evaluate((l) => window.__shownText(l), lease), ...(await page.evaluate(readDom)) });
    } else if (command === 'bid') {
      const { fields, env: text } = JSON.parse(line.trim().slice('bid'.length));
      await page.goto(new URL('/', url).href, { waitUntil: 'load' });
      await page.waitForFunction(() => !document.getElementById('connect').disabled, null, { timeout: 60000 });
      const form = page.locator('form[data-action^="/api/actions/bid"]');
      for (const [name, value] of Object.entries(fields)) {
        await form.locator(`input[name="${name}"]`).fill(String(value));
      }
      await form.locator('textarea[name="env"]').fill(text);
      await form.locator('button').click();
      await page.waitForFunction(
        () => ['done', 'error'].includes(document.getElementById('status').dataset.state),
        null,
        { timeout: 120000 }
      );
      await page.screenshot({ path: path.join(shots, 'bid.png'), fullPage: true });
      answer({ event: 'bid', ...(await page.evaluate(readDom)) });
    } else if (command === 'console') {
      // The connected wallet's console, through the link the page shows once it connects.
      await page.locator('#console').click();
      await page.waitForURL('**/wallet/**');
      await page.waitForFunction(() => !document.getElementById('connect').disabled, null, { timeout: 60000 });
      await page.screenshot({ path: path.join(shots, 'console.png'), fullPage: true });
      answer({ event: 'console', url: page.url(), ...(await page.evaluate(readDom)) });
    } else {
      throw new Error(`unknown command ${line}`);
    }
  }
} finally {
  // Nothing more is read: standard input no longer keeps the process alive.
  lines.close();
  process.stdin.destroy();
  await browser.close();
}
