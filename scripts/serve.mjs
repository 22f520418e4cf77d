// A static file server for www/ on 127.0.0.1 (no dependencies): `node scripts/serve.mjs
// [port]` serves until stopped; the e2e test imports `serve` and uses a free port.
import { createServer } from "node:http";
import { readFile } from "node:fs/promises";
import { extname, join, normalize, resolve } from "node:path";
import { fileURLToPath } from "node:url";

const TYPES = {
  ".html": "text/html; charset=utf-8",
  ".js": "text/javascript; charset=utf-8",
  ".mjs": "text/javascript; charset=utf-8",
  ".css": "text/css; charset=utf-8",
  ".json": "application/json",
  ".wasm": "application/wasm",
  ".svg": "image/svg+xml",
  ".png": "image/png",
  ".map": "application/json",
  ".ts": "text/plain; charset=utf-8",
};

export function serve(root, port = 0) {
  const base = resolve(root);
  const server = createServer(async (req, res) => {
    try {
      const path = decodeURIComponent(new URL(req.url, "http://x").pathname);
      let file = normalize(join(base, path));
      if (!file.startsWith(base)) throw Object.assign(new Error("outside"), { code: "EACCES" });
      if (path.endsWith("/")) file = join(file, "index.html");
      const body = await readFile(file);
      res.writeHead(200, {
        "content-type": TYPES[extname(file)] || "application/octet-stream",
        "cache-control": "no-store",
        "content-length": body.length,
      });
      res.end(body);
    } catch (e) {
      res.writeHead(e.code === "EACCES" ? 403 : 404, { "content-type": "text/plain" });
      res.end(e.code === "EACCES" ? "forbidden" : "not found");
    }
  });
  return new Promise((ok, fail) => {
    server.once("error", fail);
    server.listen(port, "127.0.0.1", () => ok(server));
  });
}

if (process.argv[1] === fileURLToPath(import.meta.url)) {
  const port = Number(process.argv[2] || 8080);
  const www = resolve(fileURLToPath(new URL("../www", import.meta.url)));
  const server = await serve(www, port);
  console.log(
    `gpukit demos: http://127.0.0.1:${server.address().port}/ (serving ${www}; Ctrl-C stops)`,
  );
}
