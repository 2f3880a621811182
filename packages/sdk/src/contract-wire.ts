/**
 * The contract's zod-free run-time half, imported here once for the whole SDK: Node 20 resolves a bare specifier
 * anew for every module that imports it (about 1 ms of CPU each at start), a relative one in microseconds.
 */
export * from '@burrow/contract/wire';
