import { readdir, readFile } from 'node:fs/promises';
import { join } from 'node:path';
import { describe, expect, it } from 'vitest';
import { buildTemplate, readTemplate, removeTemplate, templateId, templateRecipe } from './template-builder.js';

/** Shared test cache of templates (the base template is built once per machine). */
const TEST_TEMPLATES_DIR = '/var/tmp/burrow-test-templates';

describe('template ids', () => {
  it('are the same for the same packages in any order and differ for other commands', () => {
    const a = templateRecipe({ apt: ['jq', 'less'], run: [] });
    const b = templateRecipe({ apt: ['less', 'jq', 'jq'], run: [] });
    expect(templateId(a)).toBe(templateId(b));
    expect(templateId(templateRecipe({ apt: ['jq'], run: ['true'] }))).not.toBe(templateId(a));
    expect(a.packages).toContain('tini');
  });
});

describe('buildTemplate', () => {
  it('returns the cached base template at once', async () => {
    const base = await buildTemplate({ templatesDir: TEST_TEMPLATES_DIR, apt: [], run: [] });
    const started = Date.now();
    const again = await buildTemplate({ templatesDir: TEST_TEMPLATES_DIR, apt: [], run: [] });
    expect(Date.now() - started).toBeLessThan(500);
    expect(again).toEqual(base);
    expect(await readTemplate(TEST_TEMPLATES_DIR, base.id)).toEqual(base);
    expect(await readFile(join(base.rootfsDir, 'etc/debian_version'), 'utf8')).toMatch(/^12\./);
  });

  it('builds a derived template and runs its commands inside gVisor', { timeout: 600_000 }, async () => {
    const base = await buildTemplate({ templatesDir: TEST_TEMPLATES_DIR, apt: [], run: [] });
    const lines: string[] = [];
    const derived = await buildTemplate({
      templatesDir: TEST_TEMPLATES_DIR,
      parent: { id: base.id, recipe: base.recipe },
      apt: [],
      run: ['echo hi > /etc/hi', 'grep -q gVisor /proc/version || dmesg | grep -q gVisor'],
      onLog: (line) => lines.push(line),
    });
    try {
      expect(derived.recipe.parentId).toBe(base.id);
      expect(await readFile(join(derived.rootfsDir, 'etc/hi'), 'utf8')).toBe('hi\n');
      expect(lines.some((line) => line.startsWith('I: '))).toBe(true);
      const leftovers = (await readdir(TEST_TEMPLATES_DIR)).filter((name) => name.startsWith('.tmp-'));
      expect(leftovers).toEqual([]);
    } finally {
      await removeTemplate(TEST_TEMPLATES_DIR, derived.id);
    }
    expect(await readTemplate(TEST_TEMPLATES_DIR, derived.id)).toBeNull();
  });

  it('leaves nothing behind when the build fails', { timeout: 300_000 }, async () => {
    const before = await readdir(TEST_TEMPLATES_DIR);
    await expect(
      buildTemplate({ templatesDir: TEST_TEMPLATES_DIR, apt: ['no-such-package-burrow-test'], run: [] }),
    ).rejects.toThrow(/mmdebstrap failed/);
    expect(await readdir(TEST_TEMPLATES_DIR)).toEqual(before);
  });
});
