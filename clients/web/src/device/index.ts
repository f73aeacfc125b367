// The device role in the browser (docs/web-client.md, "The device role").
export { Device, DeviceError, DEFAULT_TIMING, checkEncoding, checkFeatures, transportOf } from "./device.js";
export type { DecideResult, DeviceEvent, DeviceOptions, DeviceTiming, FeedbackResult, Reporter }
  from "./device.js";
export { ModelFollower, wellFormed } from "./model.js";
export { DeviceStore } from "./store.js";
export type { Counters, Marker, OutboxItem } from "./store.js";
export { Uploader } from "./uploader.js";
export { workerReporter } from "./worker_client.js";
export type { Decision, HpkeConfig, Lib, ModelMessage, SealedReport, TaskInfo } from "./ports.js";
