// What the Dawn scripts share: Dawn installed as `navigator.gpu` (setup.cjs, beside this file),
// their `--name value` options, the www folder (`--www DIR`, default the project's www/) and a
// package entry of the web build loaded from it.
import { createRequire } from "node:module";
import fs from "node:fs";
import path from "node:path";
import { pathToFileURL } from "node:url";

export const require = createRequire(import.meta.url);
require("./setup.cjs");

export const args = process.argv.slice(2);

/** The value after option `name`, or undefined. */
export function opt(name) {
  const i = args.indexOf(name);
  return i >= 0 ? args[i + 1] : undefined;
}

export const www = path.resolve(opt("--www") ?? new URL("../../www", import.meta.url).pathname);

/** Imports a module of the www folder. */
export const load = (file) => import(pathToFileURL(path.join(www, file)).href);

/** Imports and starts a package entry of the web build (`pkg` or `pkg/models` under www). */
export async function loadPackage(entry) {
  const pkg = await load(`${entry}/gpukit.js`);
  await pkg.default({ module_or_path: fs.readFileSync(path.join(www, entry, "gpukit_bg.wasm")) });
  return pkg;
}
