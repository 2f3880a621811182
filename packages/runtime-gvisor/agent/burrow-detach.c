/*
 * Commands that outlive their host connection (docs/exec-protocol.md §4, 'e' frames). A foreground command runs as
 * the agent's child and streams over its data connection; when that connection goes away (the agent drops every
 * host socket before a checkpoint, or the host is gone) the command keeps running and becomes a supervised command
 * in /.burrow/commands/<id>/, the layout of burrow-supervise.c: spec.json and state.json, its output in the log
 * ring from the first byte the host was not sent, control records from the ctl FIFO, exit.json once it ended. The
 * host learns the offset it reached from its own count and reattaches from there, so nothing is lost or repeated.
 */
#define _GNU_SOURCE
#include <errno.h>
#include <fcntl.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "burrow-agent.h"

#define DETACH_READ_CHUNK 65536

struct detach *detach_plan(const char *command_id, const char *seg_bytes, const char *max_segs, char **argv, int argc) {
  size_t id_len = strlen(command_id);
  /* cmd_ and 20 characters of [0-9a-z], as the server names commands. */
  if (id_len != 24 || strncmp(command_id, "cmd_", 4) != 0) return NULL;
  for (size_t i = 4; i < id_len; i++) {
    char c = command_id[i];
    if (!((c >= '0' && c <= '9') || (c >= 'a' && c <= 'z'))) return NULL;
  }
  long long bytes = atoll(seg_bytes);
  int segs = atoi(max_segs);
  if (bytes < 1 || segs < 1 || segs > 63) return NULL;
  struct detach *d = calloc(1, sizeof *d);
  if (!d) return NULL;
  memcpy(d->command_id, command_id, id_len + 1);
  d->seg_bytes = bytes;
  d->max_segs = segs;
  d->started_wall_ms = wall_ms();
  d->spec = spec_json(argv, argc, 0, 0, 0, d->started_wall_ms);
  d->ctl_fd = -1;
  d->ring.fd = -1;
  return d;
}

void detach_free(struct detach *d) {
  if (!d) return;
  ring_close(&d->ring);
  if (d->ctl_fd >= 0) close(d->ctl_fd);
  buf_free(&d->ctl_rx);
  free(d->spec);
  free(d);
}

/* Output payload of e's unsent frames ('O'/'R' parts past what the socket took), appended to the ring in order. */
static unsigned long long unsent_output(struct exec *e, int append) {
  unsigned long long unsent = 0;
  size_t at = 0;
  while (at + 5 <= e->tx.len) {
    const unsigned char *h = (const unsigned char *)e->tx.data + at;
    size_t n = ((size_t)h[1] << 24) | ((size_t)h[2] << 16) | ((size_t)h[3] << 8) | h[4];
    size_t payload = at + 5;
    if (payload + n > e->tx.len) break;
    if (h[0] == 'O' || h[0] == 'R') {
      size_t sent = e->tx.off > payload ? e->tx.off - payload : 0;
      if (sent < n) {
        unsent += n - sent;
        /* Records of at most DETACH_READ_CHUNK, as the log's readers expect. */
        for (size_t at_byte = sent; append && at_byte < n; at_byte += DETACH_READ_CHUNK) {
          size_t piece = n - at_byte < DETACH_READ_CHUNK ? n - at_byte : DETACH_READ_CHUNK;
          ring_append(&e->detach->ring, h[0] == 'O' ? 1 : 2, e->tx.data + payload + at_byte, piece);
        }
      }
    }
    at = payload + n;
  }
  return unsent;
}

void detach_exec(struct exec *e) {
  struct detach *d = e->detach;
  if (!d || d->active) return;
  d->active = 1;
  snprintf(d->dir, sizeof d->dir, "/.burrow/commands/%s", d->command_id);
  char log_dir[160];
  snprintf(log_dir, sizeof log_dir, "%s/log", d->dir);
  make_dirs(log_dir);
  if (d->spec) write_file(d->dir, "spec.json", d->spec, 1);
  char state[160];
  snprintf(state, sizeof state, "{\"pid\":%d,\"startedAtMs\":%lld}", e->pid, d->started_wall_ms);
  write_file(d->dir, "state.json", state, 1);
  ring_init(&d->ring, log_dir, d->seg_bytes, d->max_segs, e->out_offset - unsent_output(e, 0));
  ring_rotate(&d->ring);
  unsent_output(e, 1);
  buf_free(&e->tx);
  buf_free(&e->rx);
  char ctl_path[160];
  snprintf(ctl_path, sizeof ctl_path, "%s/ctl", d->dir);
  mkfifo(ctl_path, 0600);
  d->ctl_fd = open(ctl_path, O_RDWR | O_NONBLOCK | O_CLOEXEC);
}

int detached_output(struct exec *e, int *fd, int channel) {
  static char chunk[DETACH_READ_CHUNK];
  ssize_t n = read(*fd, chunk, sizeof chunk);
  if (n > 0) {
    ring_append(&e->detach->ring, channel, chunk, (size_t)n);
    e->out_offset += (unsigned long long)n;
    return 1;
  }
  if (n == 0 || (errno != EAGAIN && errno != EINTR)) {
    close_fd(fd);
    return -1;
  }
  return 0;
}

void detached_control(struct exec *e) {
  struct detach *d = e->detach;
  buf_reserve(&d->ctl_rx, DETACH_READ_CHUNK);
  ssize_t n = read(d->ctl_fd, d->ctl_rx.data + d->ctl_rx.len, d->ctl_rx.cap - d->ctl_rx.len);
  if (n <= 0) return;
  d->ctl_rx.len += (size_t)n;
  while (d->ctl_rx.len - d->ctl_rx.off >= 5) {
    const unsigned char *h = (const unsigned char *)d->ctl_rx.data + d->ctl_rx.off;
    size_t body = ((size_t)h[1] << 24) | ((size_t)h[2] << 16) | ((size_t)h[3] << 8) | h[4];
    if (d->ctl_rx.len - d->ctl_rx.off < 5 + body) break;
    const char *p = (const char *)h + 5;
    if (h[0] == 0 && e->in_fd >= 0 && !e->stdin_close_pending) {
      buf_reserve(&e->stdin_pending, body);
      memcpy(e->stdin_pending.data + e->stdin_pending.len, p, body);
      e->stdin_pending.len += body;
    } else if (h[0] == 1) {
      e->stdin_close_pending = 1;
    } else if (h[0] == 3 && body == 1 && !e->exited) {
      kill(-e->pid, (unsigned char)p[0]);
    }
    d->ctl_rx.off += 5 + body;
  }
}

void detached_finish(struct exec *e) {
  struct detach *d = e->detach;
  ring_close(&d->ring);
  write_exit(d->dir, e->status, 0);
  detach_free(d);
  e->detach = NULL;
}
