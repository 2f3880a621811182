import { createHash } from 'node:crypto';
import { mkdir } from 'node:fs/promises';
import { join } from 'node:path';
import type { TemplateRef } from '@burrow/runtime';
import type { BuiltTemplateInfo, TemplateBuilder } from '../services/template-service.js';

/**
 * A FAKE template builder for the fast API test layer: a "template" is an empty directory named by the sha256
 * of its recipe. Builds whose `run` contains `fail` fail, so tests can see the failure path.
 */
export class FakeTemplateBuilder implements TemplateBuilder {
  readonly built = new Map<string, BuiltTemplateInfo>();

  /** @param templatesDir test-owned directory for the fake root filesystems */
  constructor(readonly templatesDir: string) {}

  async build(options: {
    parentId: string | null;
    apt: string[];
    run: string[];
    onLog?: ((line: string) => void) | undefined;
  }): Promise<BuiltTemplateInfo> {
    const recipe = JSON.stringify({ parentId: options.parentId, apt: options.apt, run: options.run });
    const id = createHash('sha256').update(recipe).digest('hex');
    options.onLog?.(`fake build ${id.slice(0, 12)}`);
    if (options.run.some((c) => c.includes('fail'))) throw new Error('command exited with status 1 (fake)');
    const rootfsDir = join(this.templatesDir, id, 'rootfs');
    await mkdir(rootfsDir, { recursive: true });
    const info = { id, rootfsDir, sizeBytes: 4096 };
    this.built.set(id, info);
    return info;
  }

  async find(id: string): Promise<TemplateRef | null> {
    const info = this.built.get(id);
    return info === undefined ? null : { id: info.id, rootfsDir: info.rootfsDir };
  }
}
