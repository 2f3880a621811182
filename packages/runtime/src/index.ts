export * from './crash-points.js';
export * from './driver.js';
export * from './file-read-stream.js';
export * from './fs-errors.js';
export * from './sandbox-fs.js';
export * from './sandbox-fs-archive.js';
export * from './sandbox-fs-watch.js';
export * from './write-coalesced.js';
