export * from './driver.js';
export * from './sandbox-fs.js';
