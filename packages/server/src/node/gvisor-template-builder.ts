import type { TemplateRef } from '@burrow/runtime';
import { buildTemplate, readTemplate, templateRef } from '@burrow/runtime-gvisor';
import type { BuiltTemplateInfo, TemplateBuilder } from '../services/template-service.js';

/**
 * {@link TemplateBuilder} over the gVisor template builder: mmdebstrap root filesystems in a content-addressed
 * cache under `templatesDir`.
 * @example
 * const builder = new GvisorTemplateBuilder({ templatesDir: '/var/lib/burrow/templates' });
 */
export class GvisorTemplateBuilder implements TemplateBuilder {
  constructor(private readonly options: { templatesDir: string; runscPath?: string | undefined }) {}

  async build(options: {
    parentId: string | null;
    apt: string[];
    run: string[];
    onLog?: ((line: string) => void) | undefined;
    signal?: AbortSignal | undefined;
  }): Promise<BuiltTemplateInfo> {
    const { templatesDir } = this.options;
    let parent: { id: string; recipe: NonNullable<Awaited<ReturnType<typeof readTemplate>>>['recipe'] } | undefined;
    if (options.parentId !== null) {
      const found = await readTemplate(templatesDir, options.parentId);
      if (found === null) throw new Error(`parent template ${options.parentId} is not on disk`);
      parent = { id: found.id, recipe: found.recipe };
    }
    const built = await buildTemplate({
      templatesDir,
      parent,
      apt: options.apt,
      run: options.run,
      onLog: options.onLog,
      signal: options.signal,
      runscPath: this.options.runscPath,
    });
    return { id: built.id, rootfsDir: built.rootfsDir, sizeBytes: built.sizeBytes };
  }

  async find(id: string): Promise<TemplateRef | null> {
    const found = await readTemplate(this.options.templatesDir, id);
    return found === null ? null : templateRef(this.options.templatesDir, id);
  }
}
