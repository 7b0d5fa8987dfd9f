// Bundles src/*.js(x) into OUT (argv[2]) with esbuild: one IIFE script (and its CSS) per page.
// Run by scripts/widgets with NODE_PATH set to the node_modules that `npm ci` installed.
import { readdirSync } from 'node:fs';
import { createRequire } from 'node:module';
import path from 'node:path';

const here = path.dirname(new URL(import.meta.url).pathname);
const nodeModules = process.env.NODE_PATH;
const esbuild = createRequire(path.join(nodeModules, 'x.js'))('esbuild');
const pages = readdirSync(path.join(here, 'src')).filter((f) => /^[a-z]+\.jsx?$/.test(f) && f !== 'report.js');
await esbuild.build({
  entryPoints: pages.map((f) => path.join(here, 'src', f)),
  outdir: process.argv[2],
  bundle: true,
  format: 'iife',
  jsx: 'automatic',
  minify: true,
  target: 'chrome120',
  nodePaths: [nodeModules],
  loader: { '.woff': 'file', '.woff2': 'file', '.svg': 'file' },
  define: { 'process.env.NODE_ENV': '"production"' },
  logLevel: 'warning',
});
