// The library's exports behind the device's ports (ports.ts). The pure library (decide.ts,
// randomizers/, crypto/) is written in parallel (issue 41); until its decide, randomisers and
// sealing land, these refuse with a clear message rather than pretend.
import type { Lib } from "./ports.js";

const PENDING = "the library's decide/randomise/seal exports have not landed in this build";

export const lib: Lib = {
  decide() {
    throw new Error(PENDING);
  },
  report() {
    return Promise.reject(new Error(PENDING));
  },
};
