/*
 * The files of one supervised command in the sandbox's own filesystem (docs/exec-protocol.md §3), written by the
 * background-command supervisor (burrow-supervise.c) and by the exec agent for a command it detached
 * (burrow-detach.c): spec.json, state.json, exit.json and the output ring of log segments.
 */
#define _GNU_SOURCE
#include <errno.h>
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <sys/uio.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include "burrow-agent.h"

long long wall_ms(void) {
  struct timespec t;
  clock_gettime(CLOCK_REALTIME, &t);
  return (long long)t.tv_sec * 1000 + t.tv_nsec / 1000000;
}

void write_file(const char *dir, const char *name, const char *text, int atomic) {
  char path[4200], tmp[4300];
  snprintf(path, sizeof path, "%s/%s", dir, name);
  snprintf(tmp, sizeof tmp, "%s.tmp", path);
  int fd = open(atomic ? tmp : path, O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0600);
  if (fd < 0) return;
  size_t len = strlen(text), off = 0;
  while (off < len) {
    ssize_t n = write(fd, text + off, len - off);
    if (n <= 0) break;
    off += (size_t)n;
  }
  close(fd);
  if (atomic) rename(tmp, path);
}

void make_dirs(const char *path) {
  char part[4200];
  snprintf(part, sizeof part, "%s", path);
  for (char *slash = strchr(part + 1, '/');; slash = strchr(slash + 1, '/')) {
    if (slash) *slash = 0;
    mkdir(part, 0755);
    if (!slash) break;
    *slash = '/';
  }
}

size_t json_string(char *out, size_t len, size_t cap, const char *text) {
  if (len + 2 < cap) out[len++] = '"';
  for (const unsigned char *p = (const unsigned char *)text; *p && len + 8 < cap; p++) {
    if (*p == '"' || *p == '\\') {
      out[len++] = '\\';
      out[len++] = (char)*p;
    } else if (*p < 0x20) {
      len += (size_t)snprintf(out + len, cap - len, "\\u%04x", *p);
    } else {
      out[len++] = (char)*p;
    }
  }
  if (len + 1 < cap) out[len++] = '"';
  out[len] = 0;
  return len;
}

char *spec_json(char **argv, int argc, int pty, int cols, int rows, long long created_ms) {
  size_t cap = 128;
  for (int i = 0; i < argc; i++) cap += strlen(argv[i]) * 6 + 3;
  char *json = malloc(cap);
  if (!json) return NULL;
  size_t at = (size_t)snprintf(json, cap, "{\"argv\":[");
  for (int i = 0; i < argc; i++) {
    if (i) json[at++] = ',';
    at = json_string(json, at, cap - 100, argv[i]);
  }
  if (pty)
    snprintf(json + at, cap - at, "],\"pty\":{\"cols\":%d,\"rows\":%d},\"createdAtMs\":%lld}", cols, rows, created_ms);
  else
    snprintf(json + at, cap - at, "],\"pty\":null,\"createdAtMs\":%lld}", created_ms);
  return json;
}

void ring_init(struct ring *ring, const char *log_dir, long long seg_bytes, int max_segs, unsigned long long offset) {
  memset(ring, 0, sizeof *ring);
  snprintf(ring->dir, sizeof ring->dir, "%s", log_dir);
  ring->seg_bytes = seg_bytes;
  ring->max_segs = max_segs;
  ring->offset = offset;
  ring->fd = -1;
}

void ring_rotate(struct ring *ring) {
  if (ring->fd >= 0) close(ring->fd);
  char path[4300];
  snprintf(path, sizeof path, "%s/%020llu.seg", ring->dir, ring->offset);
  ring->fd = open(path, O_WRONLY | O_CREAT | O_APPEND | O_CLOEXEC, 0600);
  ring->size = 0;
  if (ring->count == (int)(sizeof ring->starts / sizeof ring->starts[0])) {
    memmove(ring->starts, ring->starts + 1, sizeof ring->starts - sizeof ring->starts[0]);
    ring->count--;
  }
  ring->starts[ring->count++] = ring->offset;
  while (ring->count > ring->max_segs) {
    snprintf(path, sizeof path, "%s/%020llu.seg", ring->dir, ring->starts[0]);
    unlink(path);
    memmove(ring->starts, ring->starts + 1, (size_t)(ring->count - 1) * sizeof ring->starts[0]);
    ring->count--;
  }
}

void ring_append(struct ring *ring, int channel, const char *data, size_t len) {
  if (ring->fd < 0 || ring->size >= ring->seg_bytes) ring_rotate(ring);
  unsigned char head[5] = {(unsigned char)channel, (unsigned char)(len >> 24), (unsigned char)(len >> 16),
                           (unsigned char)(len >> 8), (unsigned char)len};
  struct iovec iov[2] = {{head, 5}, {(void *)data, len}};
  size_t total = 5 + len, done = 0;
  while (done < total && ring->fd >= 0) {
    ssize_t n = writev(ring->fd, iov, 2);
    if (n < 0) {
      if (errno == EINTR) continue;
      break;
    }
    done += (size_t)n;
    /* A short write: move the vectors past what went out. */
    size_t skip = (size_t)n;
    for (int i = 0; i < 2; i++) {
      size_t take = skip < iov[i].iov_len ? skip : iov[i].iov_len;
      iov[i].iov_base = (char *)iov[i].iov_base + take;
      iov[i].iov_len -= take;
      skip -= take;
    }
  }
  ring->size += (long long)total;
  ring->offset += len;
}

void ring_close(struct ring *ring) {
  if (ring->fd >= 0) close(ring->fd);
  ring->fd = -1;
}

const char *signal_name(int sig) {
  static const char *names[] = {NULL,      "SIGHUP",  "SIGINT",    "SIGQUIT", "SIGILL",    "SIGTRAP", "SIGABRT",
                                "SIGBUS",  "SIGFPE",  "SIGKILL",   "SIGUSR1", "SIGSEGV",   "SIGUSR2", "SIGPIPE",
                                "SIGALRM", "SIGTERM", "SIGSTKFLT", "SIGCHLD", "SIGCONT",   "SIGSTOP", "SIGTSTP",
                                "SIGTTIN", "SIGTTOU", "SIGURG",    "SIGXCPU", "SIGXFSZ",   "SIGVTALRM", "SIGPROF",
                                "SIGWINCH", "SIGIO",  "SIGPWR",    "SIGSYS"};
  static char other[16];
  if (sig > 0 && sig < (int)(sizeof names / sizeof names[0])) return names[sig];
  snprintf(other, sizeof other, "SIG%d", sig);
  return other;
}

void write_exit(const char *dir, int status, int timed_out) {
  char text[256];
  long long ended = wall_ms();
  if (timed_out)
    snprintf(text, sizeof text, "{\"exitCode\":null,\"signal\":\"SIGKILL\",\"timedOut\":true,\"endedAtMs\":%lld}", ended);
  else if (WIFSIGNALED(status))
    snprintf(text, sizeof text, "{\"exitCode\":null,\"signal\":\"%s\",\"timedOut\":false,\"endedAtMs\":%lld}",
             signal_name(WTERMSIG(status)), ended);
  else
    snprintf(text, sizeof text, "{\"exitCode\":%d,\"signal\":null,\"timedOut\":false,\"endedAtMs\":%lld}",
             WEXITSTATUS(status), ended);
  write_file(dir, "exit.json", text, 1);
}
