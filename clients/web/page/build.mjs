// Builds the demo page (docs/web-client.md, "The page") into dist/page/: app.js (the page and
// its test harness, with the device role), worker.js (the device's Web Worker: randomise,
// shard, seal), index.html and style.css. `privbandit up --web` serves that folder; the
// end-to-end test and the benchmark build it first. Run from clients/web: `node page/build.mjs`.
import { build } from "esbuild";
import { copyFile, mkdir } from "node:fs/promises";
import { dirname, join } from "node:path";
import { fileURLToPath } from "node:url";

const root = dirname(dirname(fileURLToPath(import.meta.url)));
const out = join(root, "dist", "page");
await mkdir(out, { recursive: true });
const common = {
  bundle: true, format: "esm", platform: "browser", target: "es2022", minify: true,
  sourcemap: true, logLevel: "warning",
};
await build({ ...common, entryPoints: [join(root, "page", "app.ts")], outfile: join(out, "app.js") });
await build({ ...common, entryPoints: [join(root, "src", "worker.ts")], outfile: join(out, "worker.js") });
for (const f of ["index.html", "style.css"]) await copyFile(join(root, "page", f), join(out, f));
