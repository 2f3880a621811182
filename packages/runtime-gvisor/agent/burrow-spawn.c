/*
 * Process creation inside the sandbox: the vfork child of every command (the agent's and the supervisor's) and
 * `--spawn-bench`, which measures it (docs/adr/0003-exec-agent.md, "The round trip").
 */
#define _GNU_SOURCE
#include <errno.h>
#include <fcntl.h>
#include <signal.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/ioctl.h>
#include <sys/syscall.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include "burrow-agent.h"

/*
 * Signals the agent ignores (found once at start: inherited from the init's shell, and SIGPIPE): the only
 * dispositions execve keeps, so the only ones a command needs reset. Resetting all 64 in the vfork child cost about
 * 0.4 ms per exec inside gVisor (64 trapped system calls).
 */
int ignored_signals[65];
int ignored_count;

void find_ignored_signals(void) {
  for (int s = 1; s < 65; s++) {
    struct sigaction old;
    if (sigaction(s, NULL, &old) == 0 && old.sa_handler == SIG_IGN) ignored_signals[ignored_count++] = s;
  }
}

/* State the vfork child reports back through shared memory. */
volatile int child_stage;
volatile int child_errno;

/* The vfork child: only raw system calls, its own stack frame (the agent's memory is shared until execve). */
__attribute__((noinline, noreturn)) void child_exec(const char *cwd, int has_user, uid_t uid, gid_t gid, char **argv,
                                                   char **envp, const char *path_env, int in, int out, int err,
                                                   int pty) {
  /* Only raw system calls here: the child shares the agent's memory until execve. */
  setsid();
  /* A PTY's replica becomes the controlling terminal of the new session (in, out and err are that replica). */
  if (pty) ioctl(in, TIOCSCTTY, 0);
  dup2(in, 0);
  dup2(out, 1);
  dup2(err, 2);
  /*
   * Every signal back to its default and none blocked: the init's shell started the agent as an asynchronous
   * command, which POSIX shells start with SIGINT and SIGQUIT ignored, and ignored signals survive execve (a PTY's
   * Ctrl-C then did nothing and the command exited 0). The agent itself ignores SIGPIPE. Handled signals (SIGCHLD)
   * go back to their default at execve; the child has no children, so its SIGCHLD handler never runs before that.
   */
  for (int i = 0; i < ignored_count; i++) signal(ignored_signals[i], SIG_DFL);
  uint64_t none = 0;
  syscall(SYS_rt_sigprocmask, SIG_SETMASK, &none, NULL, sizeof none);
  if (chdir(cwd) < 0) {
    child_stage = 1;
    child_errno = errno;
    _exit(127);
  }
  if (has_user) {
    if (syscall(SYS_setgroups, 0, NULL) < 0 || syscall(SYS_setresgid, gid, gid, gid) < 0 ||
        syscall(SYS_setresuid, uid, uid, uid) < 0) {
      child_stage = 2;
      child_errno = errno;
      _exit(127);
    }
  }
  int last = ENOENT;
  if (strchr(argv[0], '/')) {
    execve(argv[0], argv, envp);
    last = errno;
  } else {
    char path[4096];
    const char *dir = path_env;
    int saw_eacces = 0;
    for (;;) {
      const char *colon = strchr(dir, ':');
      size_t dlen = colon ? (size_t)(colon - dir) : strlen(dir);
      size_t alen = strlen(argv[0]);
      if (dlen + alen + 2 < sizeof path) {
        if (dlen == 0) {
          path[0] = '.';
          dlen = 1;
        } else {
          memcpy(path, dir, dlen);
        }
        path[dlen] = '/';
        memcpy(path + dlen + 1, argv[0], alen + 1);
        execve(path, argv, envp);
        if (errno == EACCES) saw_eacces = 1;
        else if (errno != ENOENT && errno != ENOTDIR) {
          last = errno;
          break;
        }
      }
      if (!colon) break;
      dir = colon + 1;
    }
    if (last == ENOENT && saw_eacces) last = EACCES;
  }
  child_stage = 3;
  child_errno = last;
  _exit(127);
}

/*
 * `burrow-agent --spawn-bench N PROGRAM [ARG...]`: the floor of an exec inside this sandbox. Starts PROGRAM N times
 * exactly as a command is started (vfork, child_exec with stdio on /dev/null, cwd /, the default PATH) and waits for
 * each; prints one line, the microseconds of each start-to-reap in order, as a JSON array. No host socket is used.
 */
int spawn_bench(int n, char **argv) {
  if (n < 1 || n > 10000 || argv[0] == NULL) return 2;
  int null_fd = open("/dev/null", O_RDWR | O_CLOEXEC);
  if (null_fd < 0) return 2;
  static char *envp[] = {"PATH=/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin", NULL};
  long long *us = calloc((size_t)n, sizeof *us);
  if (!us) return 2;
  for (int i = 0; i < n; i++) {
    struct timespec t0, t1;
    clock_gettime(CLOCK_MONOTONIC, &t0);
    child_stage = 0;
    pid_t pid = vfork();
    if (pid == 0) child_exec("/", 0, 0, 0, argv, envp, envp[0] + 5, null_fd, null_fd, null_fd, 0);
    if (pid < 0) return 2;
    int status;
    while (waitpid(pid, &status, 0) < 0 && errno == EINTR) {
    }
    clock_gettime(CLOCK_MONOTONIC, &t1);
    if (child_stage != 0) return 3;
    us[i] = (t1.tv_sec - t0.tv_sec) * 1000000LL + (t1.tv_nsec - t0.tv_nsec) / 1000;
  }
  printf("[");
  for (int i = 0; i < n; i++) printf("%s%lld", i ? "," : "", us[i]);
  printf("]\n");
  free(us);
  return 0;
}

