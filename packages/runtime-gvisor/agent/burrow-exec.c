/*
 * One command of the exec agent over its data connection (docs/exec-protocol.md §4): stdin from 'I'/'C' frames,
 * signals from 'S', output into 'O'/'R' frames read only while the previous one went out (backpressure), the raw
 * wait status in 'X' once the output ended, and what happens when the host goes away first (burrow-detach.c).
 */
#define _GNU_SOURCE
#include <errno.h>
#include <fcntl.h>
#include <signal.h>
#include <stdint.h>
#include <string.h>
#include <sys/socket.h>
#include <unistd.h>

#include "burrow-agent.h"

void exec_free(struct exec *e) {
  close_fd(&e->sock);
  close_fd(&e->in_fd);
  close_fd(&e->out_fd);
  close_fd(&e->err_fd);
  buf_free(&e->rx);
  buf_free(&e->tx);
  buf_free(&e->stdin_pending);
  detach_free(e->detach);
  if (!e->exited && e->pid > 0) kill(-e->pid, SIGKILL);
  /* A killed, unreaped child is reaped by the SIGCHLD loop (pid no longer matches any exec). */
  memset(e, 0, sizeof *e);
  e->sock = e->in_fd = e->out_fd = e->err_fd = -1;
}

/* The host connection of a command is gone: a detachable one goes on in its ring, another one's output is dropped. */
void drop_connection(struct exec *e) {
  close_fd(&e->sock);
  if (e->detach) detach_exec(e);
  buf_free(&e->tx);
}

/* Host frames of one command's data connection. */
int handle_data(struct exec *e) {
  char type;
  char *payload;
  uint32_t len;
  int r;
  while ((r = next_frame(&e->rx, &type, &payload, &len)) == 1) {
    if (type == 'I' && e->in_fd >= 0) {
      buf_reserve(&e->stdin_pending, len);
      memcpy(e->stdin_pending.data + e->stdin_pending.len, payload, len);
      e->stdin_pending.len += len;
    } else if (type == 'C') {
      e->stdin_close_pending = 1;
    } else if (type == 'S' && len == 1 && e->pid > 0 && !e->exited) {
      kill(-e->pid, (unsigned char)payload[0]);
    }
  }
  return r < 0 ? -1 : 0;
}

void pump_stdin(struct exec *e) {
  struct buf *b = &e->stdin_pending;
  while (e->in_fd >= 0 && b->off < b->len) {
    ssize_t n = write(e->in_fd, b->data + b->off, b->len - b->off);
    if (n < 0) {
      if (errno == EAGAIN || errno == EINTR) return;
      close_fd(&e->in_fd); /* EPIPE: the command does not read its input */
      break;
    }
    b->off += (size_t)n;
  }
  if (b->off >= b->len) b->off = b->len = 0;
  if (e->stdin_close_pending && b->len == 0) close_fd(&e->in_fd);
}

/* Move available output into tx frames; returns -1 when the pipe ended. */
int pump_output(struct exec *e, int *fd, char type) {
  /* Read straight into the frame buffer, behind room for the frame header (no extra copy). */
  buf_reserve(&e->tx, 5 + CHUNK);
  char *p = e->tx.data + e->tx.len;
  ssize_t n = read(*fd, p + 5, CHUNK);
  if (n > 0) {
    p[0] = type;
    put_u32(p + 1, (uint32_t)n);
    e->tx.len += 5 + (size_t)n;
    e->out_offset += (unsigned long long)n;
    return 1;
  }
  if (n == 0 || (errno != EAGAIN && errno != EINTR)) {
    close_fd(fd);
    return -1;
  }
  return 0;
}

/* After a turn of the loop: end output held open past the grace, send the exit status, flush, free. */
void exec_tick(struct exec *e, long long now) {
  if (e->closing_until_ms) {
    if (now >= e->closing_until_ms) exec_free(e);
    return;
  }
  if (e->stdin_close_pending) pump_stdin(e);
  if (e->detach && e->detach->active) {
    if (e->exited && (e->out_fd >= 0 || e->err_fd >= 0) && now >= e->exited_at_ms + OUTPUT_GRACE_MS) {
      /* A background child holds the output open: read what is there, then end it. */
      if (e->out_fd >= 0 && detached_output(e, &e->out_fd, 1) >= 0) close_fd(&e->out_fd);
      if (e->err_fd >= 0 && detached_output(e, &e->err_fd, 2) >= 0) close_fd(&e->err_fd);
    }
    if (e->exited && e->out_fd < 0 && e->err_fd < 0) {
      detached_finish(e);
      exec_free(e);
    }
    return;
  }
  if (e->sock < 0 && e->exited) {
    exec_free(e);
    return;
  }
  if (e->sock < 0) {
    /* Host gone: drain output so the command does not block on a full pipe. */
    if (e->out_fd >= 0) pump_output(e, &e->out_fd, 'O');
    if (e->err_fd >= 0) pump_output(e, &e->err_fd, 'R');
    e->tx.len = e->tx.off = 0;
    return;
  }
  if (e->exited && (e->out_fd >= 0 || e->err_fd >= 0) && now >= e->exited_at_ms + OUTPUT_GRACE_MS &&
      e->tx.len == e->tx.off) {
    /* A background child holds the output open: read what is there, then end it. */
    if (e->out_fd >= 0 && pump_output(e, &e->out_fd, 'O') <= 0) close_fd(&e->out_fd);
    if (e->err_fd >= 0 && e->tx.len == e->tx.off && pump_output(e, &e->err_fd, 'R') <= 0) close_fd(&e->err_fd);
  }
  if (e->exited && e->out_fd < 0 && e->err_fd < 0 && e->tx.len == e->tx.off) {
    char status[4];
    put_u32(status, (uint32_t)e->status);
    put_frame(&e->tx, 'X', status, 4);
    fcntl(e->sock, F_SETFL, 0);
    write_all(e->sock, &e->tx);
    fcntl(e->sock, F_SETFL, O_NONBLOCK);
    /* Not closed yet: see close_lingering. The host closes once it has the exit status. */
    shutdown(e->sock, SHUT_WR);
    close_fd(&e->in_fd);
    buf_free(&e->tx);
    buf_free(&e->rx);
    buf_free(&e->stdin_pending);
    e->closing_until_ms = now + LINGER_MS;
    return;
  }
  if (e->tx.len > e->tx.off && flush_buf(e->sock, &e->tx) < 0) drop_connection(e);
}
