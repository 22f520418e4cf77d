// `require("gpukit")` in CommonJS, as a Node user writes it.
const gpukit = require("gpukit");

import("./api.mjs")
  .then(({ run }) => run(gpukit, "require"))
  .catch((e) => {
    console.error(e);
    process.exit(1);
  });
