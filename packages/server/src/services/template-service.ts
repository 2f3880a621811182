import type { Template } from '@burrow/contract';
import { ErrorCode } from '@burrow/contract';
import type { TemplateRef } from '@burrow/runtime';
import type { Logger } from 'pino';
import type { SandboxStore } from '../store/sandbox-store.js';
import { PUBLIC_TENANT, type TemplateRecord, type TemplateStore } from '../store/template-store.js';
import { ApiError } from '../util/api-error.js';
import { type Clock, isoNow } from '../util/clock.js';
import type { Principal } from './key-service.js';

/** Name of the template every install has. */
export const BASE_TEMPLATE = 'base';

/** Name of the template E2B's `templateID: "base"` runs on. */
export const E2B_BASE_TEMPLATE = 'e2b-base';

/**
 * What `e2b-base` adds to `base`: what E2B's own `base` template gives code (python3 and pip come with `base`;
 * node and npm, sudo, ncurses for `tput`), and user `user` (uid 1000, home `/home/user`) with passwordless sudo,
 * the user E2B's clients run commands and write files as.
 */
export const E2B_BASE_RECIPE = {
  apt: ['nodejs', 'npm', 'sudo', 'ncurses-bin'],
  run: [
    'useradd --create-home --shell /bin/bash --uid 1000 user',
    "echo 'user ALL=(ALL:ALL) NOPASSWD: ALL' > /etc/sudoers.d/user && chmod 0440 /etc/sudoers.d/user",
  ],
} as const;

/** A template the builder produced. */
export interface BuiltTemplateInfo extends TemplateRef {
  /** Disk usage of the root filesystem, bytes. */
  sizeBytes: number;
}

/**
 * Builds and finds template root filesystems on this node (the gVisor template builder in production, a fake
 * in fast tests).
 */
export interface TemplateBuilder {
  /** Build (or find in the content-addressed cache) a template from `parentId` plus packages and commands. @throws Error when the build fails */
  build(options: {
    parentId: string | null;
    apt: string[];
    run: string[];
    onLog?: ((line: string) => void) | undefined;
    signal?: AbortSignal | undefined;
  }): Promise<BuiltTemplateInfo>;
  /** The template `id` if it is completely built on disk, else null. */
  find(id: string): Promise<TemplateRef | null>;
}

/** A build request after contract defaults are applied. */
export interface BuildInput {
  name: string;
  from: string;
  apt: string[];
  run: string[];
}

/** A registered build waiting to run. */
export interface PendingBuild {
  /** Run the build. @throws ApiError `template_build_failed` */
  run(options?: { onLog?: (line: string) => void; signal?: AbortSignal }): Promise<Template>;
}

function toTemplate(r: TemplateRecord): Template {
  return {
    name: r.name,
    id: r.id,
    state: r.state,
    from: r.fromName,
    apt: r.apt,
    run: r.run,
    sizeBytes: r.sizeBytes,
    createdAt: r.createdAt,
    error: r.error,
  };
}

function templateNotFound(name: string, why = 'does not exist'): ApiError {
  return new ApiError(ErrorCode.templateNotFound, `template ${name} ${why}`, {
    hint: 'run `burrow template ls` to see the templates you can use',
  });
}

/** Templates: listing, building (admin), deleting (admin), and resolving a name to a root filesystem. */
export class TemplateService {
  constructor(
    private readonly deps: {
      templates: TemplateStore;
      sandboxes: SandboxStore;
      builder: TemplateBuilder;
      clock: Clock;
      logger: Logger;
    },
  ) {}

  async list(caller: Principal): Promise<Template[]> {
    return (await this.deps.templates.list(caller.tenantId)).map(toTemplate);
  }

  /** @throws ApiError `template_not_found` */
  async get(caller: Principal, name: string): Promise<Template> {
    const record = await this.deps.templates.get(caller.tenantId, name);
    if (record === null) throw templateNotFound(name);
    return toTemplate(record);
  }

  /**
   * The root filesystem of a ready template `name` visible to `tenantId`.
   * @throws ApiError `template_not_found` when it is unknown, not ready or missing on disk
   */
  async resolveReady(tenantId: string, name: string): Promise<{ record: TemplateRecord; ref: TemplateRef }> {
    const record = await this.deps.templates.get(tenantId, name);
    if (record === null) throw templateNotFound(name);
    if (record.state !== 'ready') throw templateNotFound(name, `is ${record.state}, not ready`);
    const ref = await this.deps.builder.find(record.id);
    if (ref === null) throw templateNotFound(name, 'is registered but its files are missing on this node');
    return { record, ref };
  }

  /**
   * The root filesystem of template content address `id` on this node (a sandbox keeps the id it started from).
   * @throws ApiError `template_not_found` when its files are gone
   */
  async refById(id: string, name: string): Promise<TemplateRef> {
    const ref = await this.deps.builder.find(id);
    if (ref === null) throw templateNotFound(name, `(${id.slice(0, 12)}) is missing on this node`);
    return ref;
  }

  /**
   * Build template `request.name` for the caller's tenant and wait for it. Admin only.
   * @returns the ready template
   * @throws ApiError `forbidden`, `template_exists`, `template_not_found` (parent), `template_build_failed`
   */
  async build(
    caller: Principal,
    request: BuildInput,
    options: { onLog?: (line: string) => void; signal?: AbortSignal } = {},
  ): Promise<Template> {
    return (await this.begin(caller, request)).run(options);
  }

  /**
   * Check a build request and register the template as `building`; the returned handle runs the build.
   * Splitting the two lets a streaming caller answer request errors before it starts streaming.
   * @throws ApiError `forbidden`, `template_exists`, `template_not_found` (parent)
   */
  async begin(caller: Principal, request: BuildInput): Promise<PendingBuild> {
    if (caller.role !== 'admin') {
      throw new ApiError(ErrorCode.forbidden, 'building templates needs an admin key', {
        hint: 'ask an admin to build the template',
      });
    }
    const parent = await this.resolveReady(caller.tenantId, request.from);
    const exists = () =>
      new ApiError(ErrorCode.templateExists, `template ${request.name} already exists`, {
        hint: 'pick another name, or delete the template first',
      });
    if ((await this.deps.templates.get(caller.tenantId, request.name)) !== null) throw exists();
    const record: TemplateRecord = {
      tenantId: caller.tenantId,
      name: request.name,
      id: '',
      state: 'building',
      fromName: request.from,
      apt: request.apt,
      run: request.run,
      sizeBytes: 0,
      error: null,
      createdAt: isoNow(this.deps.clock),
    };
    if (!(await this.deps.templates.insertNew(record))) throw exists();
    const logger = this.deps.logger.child({ template: request.name, tenantId: caller.tenantId });
    return {
      run: async (options = {}) => {
        logger.info({ from: request.from, apt: request.apt, runCount: request.run.length }, 'template build started');
        try {
          const built = await this.deps.builder.build({
            parentId: parent.record.id,
            apt: request.apt,
            run: request.run,
            onLog: options.onLog,
            signal: options.signal,
          });
          const outcome = { state: 'ready' as const, id: built.id, sizeBytes: built.sizeBytes, error: null };
          await this.deps.templates.finish(caller.tenantId, request.name, outcome);
          logger.info({ templateId: built.id, sizeBytes: built.sizeBytes }, 'template built');
          return toTemplate({ ...record, ...outcome });
        } catch (error) {
          const message = error instanceof Error ? error.message : String(error);
          await this.deps.templates.finish(caller.tenantId, request.name, {
            state: 'error',
            id: '',
            sizeBytes: 0,
            error: message,
          });
          logger.warn({ err: error }, 'template build failed');
          throw new ApiError(ErrorCode.templateBuildFailed, `template ${request.name} failed to build: ${message}`, {
            hint: 'check the package names and commands, then delete the failed template and build again',
            cause: error,
          });
        }
      },
    };
  }

  /**
   * Delete template `name` of the caller's tenant. Admin only. The files stay in the content-addressed cache.
   * @throws ApiError `forbidden`, `template_not_found`, `conflict` (base, in use, or a parent)
   */
  async remove(caller: Principal, name: string): Promise<void> {
    if (caller.role !== 'admin') {
      throw new ApiError(ErrorCode.forbidden, 'deleting templates needs an admin key', {
        hint: 'ask an admin to delete the template',
      });
    }
    const record = await this.deps.templates.get(caller.tenantId, name);
    if (record === null) throw templateNotFound(name);
    if (record.tenantId === PUBLIC_TENANT || name === BASE_TEMPLATE) {
      throw new ApiError(ErrorCode.conflict, `template ${name} is built in and cannot be deleted`, {
        hint: 'delete only templates you built',
      });
    }
    if (await this.deps.sandboxes.usesTemplate(caller.tenantId, name)) {
      throw new ApiError(ErrorCode.conflict, `template ${name} is used by sandboxes`, {
        hint: 'delete the sandboxes started from it first (`burrow sandbox ls`)',
      });
    }
    if (await this.deps.templates.hasChildren(caller.tenantId, name)) {
      throw new ApiError(ErrorCode.conflict, `other templates are built from ${name}`, {
        hint: 'delete the templates built from it first',
      });
    }
    await this.deps.templates.remove(caller.tenantId, name);
  }

  /**
   * Build (or find cached) the `base` template and register it for every tenant.
   * @returns the ready base template
   * @throws Error when the build fails
   */
  async ensureBase(options: { onLog?: (line: string) => void; signal?: AbortSignal } = {}): Promise<Template> {
    return this.ensurePublic(BASE_TEMPLATE, null, { apt: [], run: [] }, options);
  }

  /**
   * Build (or find cached) `e2b-base` ({@link E2B_BASE_RECIPE} on top of `base`) and register it for every tenant.
   * @returns the ready template
   * @throws Error when a build fails
   */
  async ensureE2bBase(options: { onLog?: (line: string) => void; signal?: AbortSignal } = {}): Promise<Template> {
    const base = await this.ensureBase(options);
    return this.ensurePublic(
      E2B_BASE_TEMPLATE,
      { name: BASE_TEMPLATE, id: base.id },
      { apt: [...E2B_BASE_RECIPE.apt], run: [...E2B_BASE_RECIPE.run] },
      options,
    );
  }

  private async ensurePublic(
    name: string,
    parent: { name: string; id: string } | null,
    recipe: { apt: string[]; run: string[] },
    options: { onLog?: (line: string) => void; signal?: AbortSignal },
  ): Promise<Template> {
    const built = await this.deps.builder.build({
      parentId: parent?.id ?? null,
      apt: recipe.apt,
      run: recipe.run,
      onLog: options.onLog,
      signal: options.signal,
    });
    const existing = await this.deps.templates.get(PUBLIC_TENANT, name);
    const record: TemplateRecord = {
      tenantId: PUBLIC_TENANT,
      name,
      id: built.id,
      state: 'ready',
      fromName: parent?.name ?? null,
      apt: recipe.apt,
      run: recipe.run,
      sizeBytes: built.sizeBytes,
      error: null,
      createdAt: existing?.id === built.id ? existing.createdAt : isoNow(this.deps.clock),
    };
    await this.deps.templates.upsert(record);
    return toTemplate(record);
  }
}
