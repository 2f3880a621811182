/** Capabilities of the sandbox's processes inside gVisor: Docker's default set, so `apt`, `pip` and `chown` work as root. */
const DEFAULT_CAPABILITIES = [
  'CAP_CHOWN',
  'CAP_DAC_OVERRIDE',
  'CAP_FSETID',
  'CAP_FOWNER',
  'CAP_MKNOD',
  'CAP_NET_RAW',
  'CAP_SETGID',
  'CAP_SETUID',
  'CAP_SETFCAP',
  'CAP_SETPCAP',
  'CAP_NET_BIND_SERVICE',
  'CAP_SYS_CHROOT',
  'CAP_KILL',
  'CAP_AUDIT_WRITE',
];

/** CFS period of every sandbox's CPU quota, µs (the kernel's default). */
export const CPU_PERIOD_US = 100_000;

/** Default PATH inside sandboxes. */
export const SANDBOX_PATH = '/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin';

/**
 * Share of the sandbox's memory its `/tmp` tmpfs may fill (Debian 13's tmp.mount default): without a limit, 400 MB
 * written to /tmp in a 256 MiB sandbox got the whole sandbox OOM-killed; with it the write fails with ENOSPC.
 */
export const TMP_MEMORY_SHARE = 0.5;

/** A bind mount of a host path into the sandbox. */
export interface BindMount {
  /** Absolute host path. */
  source: string;
  /** Absolute path inside the sandbox. */
  destination: string;
  readonly: boolean;
}

/** Limits written to `linux.resources` and `process.rlimits`. */
export interface SpecLimits {
  /** cgroup path, for example `/burrow/sbx_...`. */
  cgroupsPath: string;
  memoryMiB: number;
  /** CPU cores; quota = cpuCount × {@link CPU_PERIOD_US} per period. */
  cpuCount: number;
  /**
   * Host CPUs the container starts on (cpuset list, for example `0` or `0-1`): runsc boots the sentry with as many
   * CPUs as this names, which is what `nproc`, `sysconf(_SC_NPROCESSORS_ONLN)` and the affinity mask show inside.
   * Absent: every host CPU.
   */
  cpus?: string | undefined;
  /** Host pids cgroup limit (gVisor needs about 2 host tasks per guest process on systrap). */
  pidsLimit: number;
  /** RLIMIT_NPROC inside the sandbox: the graceful cap that makes `fork` fail with EAGAIN. */
  processLimit: number;
}

/** Input of {@link buildOciSpec}. */
export interface OciSpecInput {
  /** Absolute host path of the root filesystem (writable). */
  rootPath: string;
  hostname: string;
  args: string[];
  env?: Record<string, string>;
  mounts?: BindMount[];
  /** Omitted for build sandboxes, which run without a cgroup of their own. */
  limits?: SpecLimits;
  /**
   * Paths inside the sandbox that get a tmpfs of gVisor's own (mode 1777, in the sandbox's memory, at most
   * `sizeMiB`: a write past it fails with ENOSPC): files there are saved in a checkpoint image even when deleted
   * while open, and the host never sees them. @default none
   */
  tmpfs?: Array<{ destination: string; sizeMiB: number }>;
  /** The network namespace (path) runsc's own network stack takes its links from. @default a new, empty one */
  networkNamespacePath?: string | undefined;
  /** OCI `annotations`: Burrow's own facts about the container (runsc ignores keys it does not know). */
  annotations?: Record<string, string>;
}

/** OCI runtime spec (the subset runsc reads) for one sandbox. */
export function buildOciSpec(input: OciSpecInput): Record<string, unknown> {
  const env = { PATH: SANDBOX_PATH, HOME: '/root', LANG: 'C.UTF-8', ...input.env };
  const caps = DEFAULT_CAPABILITIES;
  const rlimits: Array<{ type: string; hard: number; soft: number }> = [
    { type: 'RLIMIT_NOFILE', hard: 1_048_576, soft: 1_048_576 },
  ];
  const spec: Record<string, unknown> = {
    ociVersion: '1.0.0',
    process: {
      terminal: false,
      user: { uid: 0, gid: 0 },
      args: input.args,
      env: Object.entries(env).map(([key, value]) => `${key}=${value}`),
      cwd: '/',
      capabilities: { bounding: caps, effective: caps, inheritable: caps, permitted: caps },
      rlimits,
    },
    root: { path: input.rootPath, readonly: false },
    hostname: input.hostname,
    ...(input.annotations === undefined ? {} : { annotations: input.annotations }),
    mounts: [
      { destination: '/proc', type: 'proc', source: 'proc' },
      { destination: '/dev', type: 'tmpfs', source: 'tmpfs' },
      { destination: '/sys', type: 'sysfs', source: 'sysfs', options: ['nosuid', 'noexec', 'nodev', 'ro'] },
      ...(input.tmpfs ?? []).map((mount) => ({
        destination: mount.destination,
        type: 'tmpfs',
        source: 'tmpfs',
        options: ['nosuid', 'nodev', 'mode=1777', `size=${mount.sizeMiB}m`],
      })),
      ...(input.mounts ?? []).map((mount) => ({
        destination: mount.destination,
        type: 'bind',
        source: mount.source,
        options: ['rbind', mount.readonly ? 'ro' : 'rw'],
      })),
    ],
    linux: {
      namespaces: [
        { type: 'pid' },
        input.networkNamespacePath === undefined
          ? { type: 'network' }
          : { type: 'network', path: input.networkNamespacePath },
        { type: 'ipc' },
        { type: 'uts' },
        { type: 'mount' },
      ],
    },
  };
  if (input.limits) {
    const { limits } = input;
    rlimits.push({ type: 'RLIMIT_NPROC', hard: limits.processLimit, soft: limits.processLimit });
    const memoryBytes = limits.memoryMiB * 1024 * 1024;
    (spec.linux as Record<string, unknown>).cgroupsPath = limits.cgroupsPath;
    (spec.linux as Record<string, unknown>).resources = {
      memory: { limit: memoryBytes, swap: memoryBytes },
      cpu: {
        quota: Math.round(limits.cpuCount * CPU_PERIOD_US),
        period: CPU_PERIOD_US,
        ...(limits.cpus === undefined ? {} : { cpus: limits.cpus }),
      },
      pids: { limit: limits.pidsLimit },
    };
  }
  return spec;
}
