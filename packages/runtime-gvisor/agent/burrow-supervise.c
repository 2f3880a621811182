/*
 * The background-command supervisor (docs/exec-protocol.md §3): `burrow-agent --supervise DIR`, started by the exec
 * agent for a 'B' frame. It owns one command and keeps, in DIR (the sandbox's own filesystem; made if missing):
 *   spec.json   {argv, pty, createdAtMs}    written once the command runs, after the start's answer (the server
 *   state.json  {pid, startedAtMs, supervisorPid}  knows a command it just started until they are there)
 *   log/<20-digit start offset>.seg  the output ring: records [channel u8][length u32 BE][payload], a new segment
 *               every segBytes, at most maxSegs kept
 *   ctl         a FIFO of control records [kind u8][length u32 BE][payload]: 0 stdin, 1 stdin close, 2 resize
 *               (cols u16, rows u16), 3 signal u8 (to every process of the command's tree)
 *   exit.json   {exitCode, signal, timedOut, endedAtMs}, written after the last output record
 * It reads its spec on stdin (the 'B' payload: id\0dir\0cwd\0uid\0gid\0timeoutMs\0ptyCols\0ptyRows\0segBytes\0
 * maxSegs\0argc\0argv...\0env...\0; uid "" = root, timeoutMs "" = none, ptyCols "" = pipes), answers
 * "P pid supervisorPid startedAtMs\n" on stdout once the command runs (or "F stage errno\n"), then closes stdout.
 * It has no host descriptor, so it is never part of a quiesce: the command runs on through pause, resume and fork. It is a child subreaper, so the command's descendants stay
 * in its tree (a daemonizing grandchild included) and a kill or a timeout reaches every one of them.
 */
#define _GNU_SOURCE
#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <poll.h>
#include <signal.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/ioctl.h>
#include <sys/prctl.h>
#include <sys/stat.h>
#include <sys/uio.h>
#include <sys/wait.h>
#include <termios.h>
#include <time.h>
#include <unistd.h>

#include "burrow-agent.h"

#define READ_CHUNK 65536
#define OUTPUT_GRACE_MS 500
#define STDIN_PENDING_MAX (1024 * 1024)
#define MAX_TREE 4096
/* While a timeout runs the loop wakes at least this often (ms); a longer step counts as TIMEOUT_STEP_MAX_MS. */
#define TIMEOUT_TICK_MS 250
#define TIMEOUT_STEP_MAX_MS 1000

static int wake[2];
static pid_t cmd_pid;

static long long mono_ms(void) {
  struct timespec t;
  clock_gettime(CLOCK_MONOTONIC, &t);
  return (long long)t.tv_sec * 1000 + t.tv_nsec / 1000000;
}

static void on_signal(int sig) {
  (void)sig;
  int saved = errno;
  ssize_t ignored = write(wake[1], "c", 1);
  (void)ignored;
  errno = saved;
}

/* The command's output ring (log/). */
static struct ring ring;

/* Fields of /proc/PID/stat after the name: state, ppid, pgrp, session. 0 on success. */
static int proc_stat(pid_t pid, char *state, pid_t *ppid, pid_t *pgrp, pid_t *session) {
  char path[64], text[1024];
  snprintf(path, sizeof path, "/proc/%d/stat", pid);
  int fd = open(path, O_RDONLY | O_CLOEXEC);
  if (fd < 0) return -1;
  ssize_t n = read(fd, text, sizeof text - 1);
  close(fd);
  if (n <= 0) return -1;
  text[n] = 0;
  char *close_paren = strrchr(text, ')');
  if (!close_paren) return -1;
  int a, b, c;
  if (sscanf(close_paren + 1, " %c %d %d %d", state, &a, &b, &c) != 4) return -1;
  *ppid = a;
  *pgrp = b;
  *session = c;
  return 0;
}

/* Every live process of the sandbox with its parent, group and session (zombies left out). */
static int list_procs(pid_t *pids, pid_t *ppids, pid_t *pgrps, pid_t *sessions, int max) {
  DIR *d = opendir("/proc");
  if (!d) return 0;
  int n = 0;
  struct dirent *entry;
  while ((entry = readdir(d)) != NULL && n < max) {
    char *end;
    long pid = strtol(entry->d_name, &end, 10);
    if (*end != 0 || pid <= 0) continue;
    char state;
    if (proc_stat((pid_t)pid, &state, &ppids[n], &pgrps[n], &sessions[n]) < 0 || state == 'Z' || state == 'X')
      continue;
    pids[n++] = (pid_t)pid;
  }
  closedir(d);
  return n;
}

/*
 * Send sig to every descendant of this supervisor (the command's whole tree: as a subreaper it adopts orphans of the
 * tree, so a grandchild in its own session is still found) and to the command's process group. With SIGKILL the scan
 * repeats until it finds no live process it has not signalled yet, so a process forked during the kill ends too.
 */
static void signal_tree(int sig) {
  static pid_t pids[MAX_TREE], ppids[MAX_TREE], pgrps[MAX_TREE], sessions[MAX_TREE], done[MAX_TREE];
  int done_count = 0;
  if (cmd_pid > 0) kill(-cmd_pid, sig);
  for (int round = 0; round < 20; round++) {
    int n = list_procs(pids, ppids, pgrps, sessions, MAX_TREE);
    pid_t tree[MAX_TREE];
    int tree_count = 0, fresh = 0;
    tree[tree_count++] = getpid();
    for (int grew = 1; grew;) {
      grew = 0;
      for (int i = 0; i < n; i++) {
        if (pids[i] == 0) continue;
        for (int j = 0; j < tree_count; j++) {
          if (ppids[i] != tree[j]) continue;
          if (tree_count < MAX_TREE) tree[tree_count++] = pids[i];
          pids[i] = 0;
          grew = 1;
          break;
        }
      }
    }
    for (int j = 1; j < tree_count; j++) {
      int seen = 0;
      for (int k = 0; k < done_count && !seen; k++) seen = done[k] == tree[j];
      if (seen) continue;
      kill(tree[j], sig);
      fresh = 1;
      if (done_count < MAX_TREE) done[done_count++] = tree[j];
    }
    if (!fresh || sig != SIGKILL) break;
  }
}

/* SIGWINCH to every process group of the command's session (gVisor answers tcgetpgrp only inside the session). */
static void signal_session_groups(int sig) {
  static pid_t pids[MAX_TREE], ppids[MAX_TREE], pgrps[MAX_TREE], sessions[MAX_TREE];
  int n = list_procs(pids, ppids, pgrps, sessions, MAX_TREE);
  int sent = 0;
  for (int i = 0; i < n; i++)
    if (sessions[i] == cmd_pid && pgrps[i] == pids[i]) sent += kill(-pgrps[i], sig) == 0;
  if (!sent) kill(-cmd_pid, sig);
}

static char *read_all(int fd, size_t *len) {
  size_t cap = 65536, n = 0;
  char *data = malloc(cap);
  for (;;) {
    if (!data) return NULL;
    if (n == cap) data = realloc(data, cap *= 2);
    if (!data) return NULL;
    ssize_t r = read(fd, data + n, cap - n);
    if (r < 0 && errno == EINTR) continue;
    if (r <= 0) break;
    n += (size_t)r;
  }
  *len = n;
  return data;
}

static void reply(const char *text) {
  size_t len = strlen(text), off = 0;
  while (off < len) {
    ssize_t n = write(1, text + off, len - off);
    if (n <= 0) break;
    off += (size_t)n;
  }
}

int supervise_main(char *arg) {
  size_t len = 0;
  char *spec = read_all(0, &len);
  static char *fields[8192 + 16];
  int count = 0;
  for (char *p = spec, *end = spec ? spec + len : NULL; p && p < end && count < 8192 + 15;) {
    char *z = memchr(p, 0, (size_t)(end - p));
    if (!z) break;
    fields[count++] = p;
    p = z + 1;
  }
  if (count < 12) {
    reply("F 4 22\n");
    return 2;
  }
  const char *dir = fields[1];
  if (strncmp(dir, "/.burrow/commands/", 18) != 0 || strstr(dir, "/..")) {
    reply("F 4 22\n");
    return 2;
  }
  /* The placeholder argument becomes the command's id, so /proc/PID/cmdline names it. */
  size_t room = strlen(arg), id_len = strlen(dir + 18);
  memset(arg, 0, room);
  memcpy(arg, dir + 18, id_len < room ? id_len : room);
  const char *cwd = fields[2];
  int has_user = fields[3][0] != 0;
  uid_t uid = (uid_t)strtoul(fields[3], NULL, 10);
  gid_t gid = (gid_t)strtoul(fields[4], NULL, 10);
  long long timeout_ms = fields[5][0] ? atoll(fields[5]) : -1;
  int pty = fields[6][0] != 0;
  int cols = atoi(fields[6]), rows = atoi(fields[7]);
  long long seg_bytes = atoll(fields[8]);
  int max_segs = atoi(fields[9]);
  int argc = atoi(fields[10]);
  if (argc < 1 || 11 + argc > count || seg_bytes < 1 || max_segs < 1 || max_segs > 63) {
    reply("F 4 22\n");
    return 2;
  }
  char **argv = &fields[11];
  char *first_env = 11 + argc < count ? fields[11 + argc] : NULL;
  fields[11 + argc] = NULL;
  static char *envp[8192 + 1];
  int envc = 0;
  if (first_env) envp[envc++] = first_env;
  for (int i = 12 + argc; i < count && envc < 8192; i++) envp[envc++] = fields[i];
  envp[envc] = NULL;
  const char *path_env = "/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin";
  for (int i = 0; i < envc; i++)
    if (strncmp(envp[i], "PATH=", 5) == 0) path_env = envp[i] + 5;

  prctl(PR_SET_CHILD_SUBREAPER, 1, 0, 0, 0);
  signal(SIGPIPE, SIG_IGN);
  if (pipe2(wake, O_CLOEXEC | O_NONBLOCK) < 0) {
    reply("F 4 24\n");
    return 2;
  }
  struct sigaction sa = {0};
  sa.sa_handler = on_signal;
  sa.sa_flags = SA_RESTART | SA_NOCLDSTOP;
  sigaction(SIGCHLD, &sa, NULL);

  char log_dir[4200];
  snprintf(log_dir, sizeof log_dir, "%s/log", dir);
  ring_init(&ring, log_dir, seg_bytes, max_segs, 0);

  int in_fd = -1, out_fd = -1, err_fd = -1, child_in, child_out, child_err;
  if (pty) {
    int master = posix_openpt(O_RDWR | O_NOCTTY | O_CLOEXEC);
    int number = 0, unlock = 0;
    char name[64];
    if (master < 0 || ioctl(master, TIOCGPTN, &number) < 0 || ioctl(master, TIOCSPTLCK, &unlock) < 0) {
      reply("F 4 5\n");
      return 2;
    }
    snprintf(name, sizeof name, "/dev/pts/%d", number);
    int replica = open(name, O_RDWR | O_NOCTTY | O_CLOEXEC);
    if (replica < 0) {
      reply("F 4 5\n");
      return 2;
    }
    struct winsize size = {.ws_row = (unsigned short)rows, .ws_col = (unsigned short)cols};
    ioctl(replica, TIOCSWINSZ, &size);
    in_fd = out_fd = master;
    child_in = child_out = child_err = replica;
  } else {
    int in[2], out[2], err[2];
    if (pipe2(in, O_CLOEXEC) < 0 || pipe2(out, O_CLOEXEC) < 0 || pipe2(err, O_CLOEXEC) < 0) {
      reply("F 4 24\n");
      return 2;
    }
    in_fd = in[1];
    out_fd = out[0];
    err_fd = err[0];
    child_in = in[0];
    child_out = out[1];
    child_err = err[1];
  }
  long long started_wall = wall_ms();
  child_stage = 0;
  pid_t pid = vfork();
  if (pid == 0) child_exec(cwd, has_user, uid, gid, argv, envp, path_env, child_in, child_out, child_err, pty);
  close(child_in);
  if (!pty) {
    close(child_out);
    close(child_err);
  }
  if (pid < 0) {
    reply("F 4 11\n");
    return 2;
  }
  cmd_pid = pid;
  char text[512];
  snprintf(text, sizeof text, "{\"pid\":%d,\"startedAtMs\":%lld,\"supervisorPid\":%d}", pid, started_wall, getpid());
  int status = 0, exited = 0, timed_out = 0;
  char answer[128];
  snprintf(answer, sizeof answer, "P %d %d %lld\n", pid, getpid(), started_wall);
  /*
   * A command that runs is answered at once, before any of its files exist (each file is a gofer round trip; the
   * server knows a command it just started without them, and its output waits in the pipe meanwhile). Then
   * spec.json (what the server lists), state.json, the log and the FIFO.
   */
  int started = child_stage == 0;
  if (started) reply(answer);
  if (mkdir(dir, 0755) < 0 && errno == ENOENT) make_dirs(dir);
  char *spec_text = spec_json(argv, argc, pty, cols, rows, started_wall);
  if (spec_text) write_file(dir, "spec.json", spec_text, started);
  free(spec_text);
  mkdir(ring.dir, 0700);
  if (!started) {
    /* Like a shell: 127 for a program or directory that is not there, 126 for one that cannot be used. */
    int missing = child_errno == ENOENT || child_errno == ENOTDIR;
    ring_rotate(&ring);
    char message[4400];
    snprintf(message, sizeof message, "burrow: cannot run %s: %s%s%s\n", argv[0], strerror(child_errno),
             child_stage == 1 ? ": " : "", child_stage == 1 ? cwd : "");
    ring_append(&ring, 2, message, strlen(message));
    while (waitpid(pid, NULL, 0) < 0 && errno == EINTR) {
    }
    write_file(dir, "state.json", text, 0);
    write_exit(dir, (missing ? 127 : 126) << 8, 0);
    reply(answer);
    return 0;
  }
  write_file(dir, "state.json", text, 1);
  int null_fd = open("/dev/null", O_RDWR | O_CLOEXEC);
  if (null_fd >= 0) {
    dup2(null_fd, 0);
    dup2(null_fd, 1);
  }
  ring_rotate(&ring);
  char ctl_path[4300];
  snprintf(ctl_path, sizeof ctl_path, "%s/ctl", dir);
  mkfifo(ctl_path, 0600);
  int ctl = open(ctl_path, O_RDWR | O_NONBLOCK | O_CLOEXEC);
  fcntl(in_fd, F_SETFL, O_NONBLOCK);
  fcntl(out_fd, F_SETFL, O_NONBLOCK);
  if (err_fd >= 0) fcntl(err_fd, F_SETFL, O_NONBLOCK);

  /*
   * The timeout counts the sandbox's running time. gVisor's monotonic clock jumps by the time a sandbox spent
   * paused, so the time left is counted down in steps: the loop wakes at least every TIMEOUT_TICK_MS while a timeout
   * runs, and a step longer than TIMEOUT_STEP_MAX_MS (a pause, or a sandbox not scheduled for that long) counts as
   * TIMEOUT_STEP_MAX_MS.
   */
  long long time_left = timeout_ms;
  long long last_tick = mono_ms();
  long long exited_at = 0;
  int killed_by_request = 0;
  static char chunk[READ_CHUNK];
  char *pending = NULL, *ctl_buf = NULL;
  size_t pending_len = 0, pending_cap = 0, ctl_len = 0, ctl_cap = 0;
  int close_in = 0;
  for (;;) {
    int wstatus;
    pid_t got;
    while ((got = waitpid(-1, &wstatus, WNOHANG)) > 0) {
      if (got == pid && !exited) {
        exited = 1;
        status = wstatus;
        exited_at = mono_ms();
      }
    }
    long long now = mono_ms();
    if (exited && ((out_fd < 0 && err_fd < 0) || now - exited_at >= OUTPUT_GRACE_MS)) break;
    if (time_left >= 0 && !exited) {
      long long step = now - last_tick;
      time_left -= step > TIMEOUT_STEP_MAX_MS ? TIMEOUT_STEP_MAX_MS : step;
      if (time_left <= 0) {
        timed_out = 1;
        time_left = -1;
        signal_tree(SIGKILL);
      }
    }
    last_tick = now;
    int timeout = 500;
    if (time_left >= 0 && !exited) timeout = (int)(time_left < TIMEOUT_TICK_MS ? time_left : TIMEOUT_TICK_MS);
    if (exited && OUTPUT_GRACE_MS - (now - exited_at) < timeout)
      timeout = (int)(OUTPUT_GRACE_MS - (now - exited_at) > 0 ? OUTPUT_GRACE_MS - (now - exited_at) : 0);
    struct pollfd fds[5];
    int n = 0, at_out = -1, at_err = -1, at_ctl = -1, at_in = -1;
    fds[n++] = (struct pollfd){wake[0], POLLIN, 0};
    if (out_fd >= 0) fds[at_out = n++] = (struct pollfd){out_fd, POLLIN, 0};
    if (err_fd >= 0) fds[at_err = n++] = (struct pollfd){err_fd, POLLIN, 0};
    if (ctl >= 0 && pending_len < STDIN_PENDING_MAX) fds[at_ctl = n++] = (struct pollfd){ctl, POLLIN, 0};
    if (in_fd >= 0 && pending_len > 0) fds[at_in = n++] = (struct pollfd){in_fd, POLLOUT, 0};
    if (poll(fds, (nfds_t)n, timeout) < 0 && errno != EINTR) break;
    if (fds[0].revents) {
      while (read(wake[0], chunk, sizeof chunk) > 0) {
      }
    }
    int *outputs[2] = {&out_fd, &err_fd};
    int ats[2] = {at_out, at_err};
    for (int k = 0; k < 2; k++) {
      if (ats[k] < 0 || !fds[ats[k]].revents) continue;
      ssize_t r = read(*outputs[k], chunk, sizeof chunk);
      if (r > 0) {
        ring_append(&ring, k + 1, chunk, (size_t)r);
      } else if (r == 0 || (errno != EAGAIN && errno != EINTR)) {
        /* EOF, or EIO on a PTY whose replicas all closed. The PTY's master stays open for input. */
        if (!pty) close(*outputs[k]);
        *outputs[k] = -1;
      }
    }
    if (at_ctl >= 0 && fds[at_ctl].revents) {
      if (ctl_len + READ_CHUNK > ctl_cap) ctl_buf = realloc(ctl_buf, ctl_cap = ctl_len + READ_CHUNK * 2);
      ssize_t r = ctl_buf ? read(ctl, ctl_buf + ctl_len, READ_CHUNK) : -1;
      if (r > 0) ctl_len += (size_t)r;
      size_t off = 0;
      while (ctl_len - off >= 5) {
        unsigned char *h = (unsigned char *)ctl_buf + off;
        uint32_t body = ((uint32_t)h[1] << 24) | ((uint32_t)h[2] << 16) | ((uint32_t)h[3] << 8) | h[4];
        if (ctl_len - off < 5 + (size_t)body) break;
        unsigned char *p = h + 5;
        if (h[0] == 0 && in_fd >= 0 && !close_in) {
          if (pending_len + body > pending_cap) pending = realloc(pending, pending_cap = (pending_len + body) * 2);
          if (pending) {
            memcpy(pending + pending_len, p, body);
            pending_len += body;
          }
        } else if (h[0] == 1) {
          close_in = 1;
        } else if (h[0] == 2 && body == 4 && pty) {
          /* Each resize is applied and signalled (a scan of /proc costs about a millisecond here). */
          struct winsize size = {.ws_row = (unsigned short)((p[2] << 8) | p[3]),
                                 .ws_col = (unsigned short)((p[0] << 8) | p[1])};
          ioctl(in_fd, TIOCSWINSZ, &size);
          signal_session_groups(SIGWINCH);
        } else if (h[0] == 3 && body == 1 && !exited) {
          if (p[0] == SIGKILL) killed_by_request = 1;
          signal_tree(p[0]);
        }
        off += 5 + body;
      }
      memmove(ctl_buf, ctl_buf + off, ctl_len - off);
      ctl_len -= off;
    }
    if (close_in && pending_len == 0 && in_fd >= 0) {
      close_in = 0;
      if (pty) {
        /* ^D: the terminal's end of input. */
        pending = realloc(pending, pending_cap = pending_cap > 1 ? pending_cap : 16);
        if (pending) pending[pending_len++] = 4;
      } else {
        close(in_fd);
        in_fd = -1;
      }
    }
    if (in_fd >= 0 && pending_len > 0 && (at_in < 0 || fds[at_in].revents)) {
      ssize_t w = write(in_fd, pending, pending_len);
      if (w > 0) {
        memmove(pending, pending + w, pending_len - (size_t)w);
        pending_len -= (size_t)w;
      } else if (w < 0 && errno != EAGAIN && errno != EINTR) {
        pending_len = 0; /* EPIPE: the command does not read its input */
      }
    }
  }
  if (!exited) {
    while (waitpid(pid, &status, 0) < 0 && errno == EINTR) {
    }
  }
  /* What a kill or a timeout started ends with the whole tree, children that outlived the command included. */
  if (killed_by_request || timed_out) signal_tree(SIGKILL);
  write_exit(dir, status, timed_out);
  return 0;
}
