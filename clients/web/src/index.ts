export * from "./crypto/prio3/field.js";
export * from "./crypto/prio3/xof.js";
export * from "./crypto/prio3/flp.js";
export * from "./crypto/prio3/circuits.js";
export * from "./crypto/prio3/prio3.js";
export * from "./crypto/random.js";
