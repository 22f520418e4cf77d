// One page of headless Chromium (WebGPU on) on an origin of its own, for the peers that run
// beside gpukit in the browser: `site` (a folder under target/peers, made anew) gets a link per
// entry of `links` (name -> path) and www/index.html, is served on a free port, and
// `page.evaluate(inPage)` runs there. Returns what `inPage` returns; console errors are
// printed.
import { mkdirSync, rmSync, symlinkSync } from "node:fs";
import { join, resolve } from "node:path";
import { fileURLToPath } from "node:url";
import { chromium } from "playwright-core";
import { serve } from "../serve.mjs";

const root = fileURLToPath(new URL("../..", import.meta.url));

export async function inPage(site, links, inPage) {
  rmSync(site, { recursive: true, force: true });
  mkdirSync(site, { recursive: true });
  for (const [name, path] of Object.entries({ ...links, "index.html": "www/index.html" })) {
    symlinkSync(resolve(root, path), join(site, name));
  }
  const server = await serve(site, 0);
  const browser = await chromium.launch({
    executablePath: process.env.CHROMIUM || "/usr/bin/chromium",
    args: ["--headless=new", "--no-sandbox", "--enable-unsafe-webgpu", "--disable-dev-shm-usage"],
  });
  try {
    const page = await browser.newPage();
    page.on("console", (m) => m.type() === "error" && console.error(m.text()));
    await page.goto(`http://127.0.0.1:${server.address().port}/index.html`);
    return await page.evaluate(inPage);
  } finally {
    await browser.close();
    server.close();
  }
}
