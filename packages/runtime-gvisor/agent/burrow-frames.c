/*
 * Frames over the exec agent's host sockets (docs/exec-protocol.md §4): [type u8][length u32 BE][payload], buffered
 * in both directions; shared by the agent's connections.
 */
#define _GNU_SOURCE
#include <errno.h>
#include <poll.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <time.h>
#include <unistd.h>

#include "burrow-agent.h"

#define MAX_FRAME (16 * 1024 * 1024)

long long now_ms(void) {
  struct timespec t;
  clock_gettime(CLOCK_MONOTONIC, &t);
  return (long long)t.tv_sec * 1000 + t.tv_nsec / 1000000;
}

void buf_reserve(struct buf *b, size_t more) {
  if (b->off > 0 && b->off == b->len) b->off = b->len = 0;
  if (b->len + more <= b->cap) return;
  if (b->off > 0) {
    memmove(b->data, b->data + b->off, b->len - b->off);
    b->len -= b->off;
    b->off = 0;
    if (b->len + more <= b->cap) return;
  }
  size_t cap = b->cap ? b->cap : 4096;
  while (cap < b->len + more) cap *= 2;
  char *data = realloc(b->data, cap);
  if (!data) _exit(70);
  b->data = data;
  b->cap = cap;
}

void buf_free(struct buf *b) {
  free(b->data);
  memset(b, 0, sizeof *b);
}

void put_frame(struct buf *b, char type, const void *payload, uint32_t len) {
  buf_reserve(b, 5 + len);
  char *p = b->data + b->len;
  p[0] = type;
  p[1] = (char)(len >> 24);
  p[2] = (char)(len >> 16);
  p[3] = (char)(len >> 8);
  p[4] = (char)len;
  if (len) memcpy(p + 5, payload, len);
  b->len += 5 + len;
}

/* Write what the buffer holds; 0 when all written or would block, -1 when the peer is gone. */
int flush_buf(int fd, struct buf *b) {
  while (b->off < b->len) {
    ssize_t n = send(fd, b->data + b->off, b->len - b->off, MSG_NOSIGNAL | MSG_DONTWAIT);
    if (n < 0) return errno == EAGAIN || errno == EINTR ? 0 : -1;
    b->off += (size_t)n;
  }
  b->off = b->len = 0;
  return 0;
}

/* Blocking write of a whole buffer (control connection only). */
int write_all(int fd, struct buf *b) {
  while (b->off < b->len) {
    ssize_t n = send(fd, b->data + b->off, b->len - b->off, MSG_NOSIGNAL);
    if (n < 0) {
      if (errno == EINTR) continue;
      if (errno == EAGAIN) {
        struct pollfd p = {fd, POLLOUT, 0};
        poll(&p, 1, 1000);
        continue;
      }
      return -1;
    }
    b->off += (size_t)n;
  }
  b->off = b->len = 0;
  return 0;
}

/* Read what is available into the buffer; 1 on data, 0 on would-block, -1 on EOF or error. */
int read_into(int fd, struct buf *b) {
  buf_reserve(b, 65536);
  ssize_t n = recv(fd, b->data + b->len, b->cap - b->len, MSG_DONTWAIT);
  if (n == 0) return -1;
  if (n < 0) return errno == EAGAIN || errno == EINTR ? 0 : -1;
  b->len += (size_t)n;
  return 1;
}

/* Next complete frame in the buffer, or 0. */
int next_frame(struct buf *b, char *type, char **payload, uint32_t *len) {
  size_t avail = b->len - b->off;
  if (avail < 5) return 0;
  unsigned char *p = (unsigned char *)b->data + b->off;
  uint32_t n = ((uint32_t)p[1] << 24) | ((uint32_t)p[2] << 16) | ((uint32_t)p[3] << 8) | p[4];
  if (n > MAX_FRAME) return -1;
  if (avail < 5 + (size_t)n) return 0;
  *type = (char)p[0];
  *payload = (char *)p + 5;
  *len = n;
  b->off += 5 + n;
  return 1;
}

void close_fd(int *fd) {
  if (*fd >= 0) close(*fd);
  *fd = -1;
}

/*
 * End a data connection after its last frame without losing that frame: half-close, then wait (at most
 * LINGER_MS) for the host to close its side, discarding what it still sends. Closing at once lost the last frame
 * now and then (measured: ~1 in 50 execs answered no exit status under load): gVisor's host socket dropped the
 * unsent tail when the socket was closed while the host's stdin-close frame sat unread in it.
 */
int linger_done(int fd) {
  char sink[4096];
  for (;;) {
    ssize_t n = recv(fd, sink, sizeof sink, MSG_DONTWAIT);
    if (n > 0) continue;
    if (n == 0) return 1;
    return errno == EAGAIN || errno == EINTR ? 0 : 1;
  }
}

void close_lingering(int fd) {
  shutdown(fd, SHUT_WR);
  long long deadline = now_ms() + LINGER_MS;
  while (!linger_done(fd)) {
    long long left = deadline - now_ms();
    if (left <= 0) break;
    struct pollfd p = {fd, POLLIN, 0};
    poll(&p, 1, (int)left);
  }
  close(fd);
}

void put_u32(char *p, uint32_t v) {
  p[0] = (char)(v >> 24);
  p[1] = (char)(v >> 16);
  p[2] = (char)(v >> 8);
  p[3] = (char)v;
}

