// Bundles the market page's browser code with its pinned libraries (package-lock.json) into
// client/src/serve/web/, which `gpu-market serve` serves at /web/ (no CDN): seal.mjs (a bid's
// environment sealed in the browser) and terminal.mjs with terminal.css (xterm.js for a lease's
// terminal). The page imports each when it first needs it. `node build.mjs [OUTDIR]`;
// client/tests/seal.rs checks that the committed files are what this builds.
import { build } from 'esbuild';
import path from 'node:path';
import { fileURLToPath } from 'node:url';

const here = path.dirname(fileURLToPath(import.meta.url));
const generated = 'Generated from client/web by `node build.mjs` there (esbuild): edit that, not this.';
await build({
  entryPoints: ['seal.mjs', 'terminal.mjs'].map((f) => path.join(here, f)),
  outdir: process.argv[2] ?? path.join(here, '../src/serve/web'),
  outExtension: { '.js': '.mjs' },
  bundle: true,
  format: 'esm',
  target: 'es2022',
  minify: true,
  legalComments: 'eof',
  banner: { js: `// ${generated}`, css: `/* ${generated} */` },
  logLevel: 'warning',
});
