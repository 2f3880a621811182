import type { Socket } from 'node:net';
import type { ExecOptions, SandboxProcess, SupervisedStart, SupervisedStartOptions } from '@burrow/runtime';
import { type AgentBuild, buildAgent } from './agent-binary.js';
import { AgentHub, AgentStartError } from './agent-hub.js';
import { explainBlockers, HostSocketOpenError } from './checkpoint-blockers.js';
import type { ExecExitReasons } from './exec-exit-reason.js';
import { assertNoHostFds } from './host-fd-scan.js';
import type { RunscCli } from './runsc-cli.js';
import type { SandboxPaths } from './sandbox-paths.js';

/** How long a checkpoint that found an open host socket waits before its one retry, in ms. */
const HOST_SOCKET_RETRY_DELAY_MS = 250;
/** How long after a start or resume a missing agent is still expected to connect, in ms. */
const AGENT_START_GRACE_MS = 3_000;
/**
 * How long an exec waits for the agent of a container that just started, was restored or checkpointed, counted
 * from that moment, in ms. Generous: on a loaded host (load 15 on 2 cores) the agent can take over 3 s to connect, and
 * the alternative, `runsc exec`, can make the sandbox's next checkpoint impossible (host-fd-scan.ts).
 */
const AGENT_EXEC_WAIT_MS = 10_000;
/** How long an exec waits for an agent to find a listener that was just opened (server restart), in ms. */
const AGENT_RECONNECT_WAIT_MS = 400;

/** The structured log lines the agent plumbing writes (a subset of the driver's logger). */
interface AgentLogger {
  info(object: object, message?: string): void;
  warn(object: object, message?: string): void;
}

/**
 * The host side of the in-sandbox exec agents (docs/adr/0003): the agent build, the listeners, exec through an
 * agent (or null, then the driver uses `runsc exec`), and the quiescing of agents around a checkpoint.
 */
export class AgentExec {
  /** Host ends of the in-sandbox exec agents. */
  readonly hub = new AgentHub();
  private agentBuildPromise: Promise<AgentBuild> | null = null;
  /** Sandboxes whose agent did not connect when waited for (exec goes through runsc exec without waiting). */
  private readonly agentAbsent = new Set<string>();
  private readonly logger: AgentLogger | undefined;

  constructor(
    private readonly deps: {
      runsc: RunscCli;
      /** Run commands through the agent; `false` makes every exec a `runsc exec` (`GvisorDriverOptions.execAgent`). */
      execAgent: boolean;
      /** Where the compiled agent is cached (`GvisorDriverOptions.agentCacheDir`). */
      cacheDir: string;
      paths(sandboxId: string): SandboxPaths;
      exitReasons: ExecExitReasons;
      logger: AgentLogger | undefined;
    },
  ) {
    this.logger = deps.logger;
  }

  /**
   * Run a checkpointing step with the exec agent quiesced (gVisor cannot save an open host socket: the agent drops
   * them and ends its running commands, as a restore would), then listen again if the sandbox still runs.
   */
  async quiesced<T>(sandboxId: string, step: () => Promise<T>): Promise<T> {
    const startedMs = performance.now();
    this.deps.exitReasons.checkpointStarting(sandboxId);
    await this.hub.quiesce(sandboxId);
    const quiesceMs = Math.round(performance.now() - startedMs);
    try {
      // An image holding a host descriptor saves without complaint and then never restores: refuse it up front.
      await assertNoHostFds(this.deps.runsc, sandboxId, this.deps.paths(sandboxId).dir);
      try {
        return await step();
      } catch (error) {
        // The sandbox runs again after a refused checkpoint: say which process holds what.
        if (!(error instanceof HostSocketOpenError)) throw await explainBlockers(this.deps.runsc, sandboxId, error);
        // A connection the agent opened as the listener closed can still be on its way down: once more, later.
        this.logger?.warn({ sandboxId }, 'checkpoint found an open host socket; retrying once');
        await new Promise((resolve) => setTimeout(resolve, HOST_SOCKET_RETRY_DELAY_MS));
        return await step();
      }
    } finally {
      const stepEndMs = performance.now();
      const state = await this.deps.runsc.state(sandboxId).catch(() => null);
      if (state?.status === 'running') await this.listen(sandboxId).catch(() => undefined);
      this.logger?.info(
        { sandboxId, quiesceMs, relistenMs: Math.round(performance.now() - stepEndMs) },
        'agent quiesce steps',
      );
    }
  }

  /** Listen for the sandbox's agent (idempotent); false when there is no agent build or the path is too long. */
  async listen(sandboxId: string): Promise<boolean> {
    if ((await this.build()).kind !== 'built') return false;
    return this.hub.listen(sandboxId, this.deps.paths(sandboxId).agentDir);
  }

  /** The agent build, made once per driver (compiled on first use, cached by source hash under the data dir). */
  build(): Promise<AgentBuild> {
    if (!this.deps.execAgent) return Promise.resolve({ kind: 'unavailable', reason: 'disabled by the driver options' });
    if (this.agentBuildPromise === null) {
      this.agentBuildPromise = buildAgent(this.deps.cacheDir).then((build) => {
        if (build.kind === 'unavailable') {
          this.logger?.warn({ reason: build.reason }, 'exec agent unavailable; exec uses runsc exec');
        }
        return build;
      });
    }
    return this.agentBuildPromise;
  }

  /**
   * The agent's control connection for an exec, or null: then exec falls back to `runsc exec`. An agent still
   * connecting after a start, resume, fork or checkpoint is waited for until {@link AGENT_EXEC_WAIT_MS} after
   * its container started (or its listener opened again after a checkpoint); after a server restart the listener
   * is opened here and the agent, which retries every 100 ms, is waited for briefly. A sandbox whose agent does not
   * come (one made without it) is logged once.
   */
  private async control(sandboxId: string): Promise<Socket | null> {
    const connected = await this.hub.control(sandboxId, 0);
    if (connected !== null) return connected;
    const listeningForMs = this.hub.listeningForMs(sandboxId);
    let control: Socket | null = null;
    if (listeningForMs === null) {
      if (!(await this.listen(sandboxId).catch(() => false))) return null;
      control = await this.hub.control(sandboxId, AGENT_RECONNECT_WAIT_MS);
    } else if (listeningForMs < AGENT_EXEC_WAIT_MS) {
      // Just created, resumed or forked: the agent connects within ~100-300 ms. Waiting for it costs about what a
      // `runsc exec` costs, and a `runsc exec` hands the command host descriptors that block the next checkpoint.
      control = await this.hub.control(sandboxId, AGENT_EXEC_WAIT_MS - listeningForMs);
    }
    if (control === null && !this.agentAbsent.has(sandboxId)) {
      this.agentAbsent.add(sandboxId);
      this.logger?.warn({ sandboxId }, 'no exec agent connected; exec uses runsc exec for this sandbox');
    }
    return control;
  }

  /**
   * Wait until the sandbox's exec agent is connected (for example before handing a fresh sandbox out, or in
   * tests). Resolves false after `timeoutMs` or when the sandbox has no agent listener.
   */
  async ready(sandboxId: string, timeoutMs = AGENT_START_GRACE_MS): Promise<boolean> {
    if (this.hub.listeningForMs(sandboxId) === null) await this.listen(sandboxId).catch(() => false);
    return (await this.hub.control(sandboxId, timeoutMs)) !== null;
  }

  /**
   * Start `options.argv` through the sandbox's agent, tracked by the exit reasons from `oomKillsBefore`; null when
   * no agent is connected or it refused the command before anything ran: then the caller uses `runsc exec`.
   */
  async exec(
    sandboxId: string,
    options: ExecOptions,
    oomKillsBefore: Promise<number | null>,
  ): Promise<SandboxProcess | null> {
    const control = await this.control(sandboxId);
    if (control !== null) {
      try {
        const process = await this.hub.exec(sandboxId, control, options);
        return this.deps.exitReasons.track(sandboxId, process, oomKillsBefore, 'agent');
      } catch (error) {
        if (!(error instanceof AgentStartError)) throw error;
        // Nothing ran: start it with runsc exec instead.
        this.logger?.warn({ sandboxId, reason: error.message }, 'exec agent refused a command; using runsc exec');
      }
    }
    return null;
  }

  /**
   * Start a background command under its supervisor through the sandbox's agent (waiting for an agent that is
   * still connecting, as exec does); null when there is no agent or it is too old for it.
   * @throws RuntimeError as {@link AgentHub.startBackground}
   */
  async startSupervised(sandboxId: string, options: SupervisedStartOptions): Promise<SupervisedStart | null> {
    const control = await this.control(sandboxId);
    return control === null ? null : this.hub.startBackground(sandboxId, control, options);
  }

  /** Expect the sandbox's agent again (a container is starting, or the sandbox is gone). */
  forgetAbsence(sandboxId: string): void {
    this.agentAbsent.delete(sandboxId);
  }
}
