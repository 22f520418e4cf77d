// `import { Gpu } from "gpukit"` in an ES module, as a Node user writes it.
import * as gpukit from "gpukit";
import { run } from "./api.mjs";

await run(gpukit, "import");
