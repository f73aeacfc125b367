// Bundles src/index.ts into one ES module with its dependencies (@hpke/core, @noble/hashes):
// dist/privbandit.js (readable, what the tests import) and dist/privbandit.min.js (minified,
// what a page ships; docs/benchmarks/web-client.md gives its gzipped size). Run by `npm run build`.
import { build } from "esbuild";

const common = {
  entryPoints: ["src/index.ts"],
  bundle: true,
  format: "esm",
  platform: "neutral",
  target: "es2022",
  mainFields: ["module", "main"],
  logLevel: "warning",
};

await build({ ...common, outfile: "dist/privbandit.js" });
await build({ ...common, outfile: "dist/privbandit.min.js", minify: true });
