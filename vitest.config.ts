import { defineConfig } from 'vitest/config';

export default defineConfig({
  test: {
    include: ['packages/*/src/**/*.test.ts', 'tests/**/*.test.ts'],
    testTimeout: 120_000,
    hookTimeout: 180_000,
    // Real runsc sandboxes share 2 cores: one file at a time keeps timings sane and tests independent.
    fileParallelism: false,
    reporters: ['default'],
  },
});
