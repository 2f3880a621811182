/*
 * Background starts ('B' frames, docs/exec-protocol.md §3): each command runs under its own supervisor
 * (`burrow-agent --supervise`, burrow-supervise.c), started ahead of its command like the spare data connection, so
 * that a start costs one process start inside the sandbox. The supervisor's "P pid ..." answer is relayed to the host
 * as 'b' on the control connection.
 */
#define _GNU_SOURCE
#include <errno.h>
#include <fcntl.h>
#include <poll.h>
#include <signal.h>
#include <stdint.h>
#include <string.h>
#include <sys/syscall.h>
#include <unistd.h>

#include "burrow-agent.h"

/* This program's path inside the sandbox (argv[0]); a background command's supervisor is this program too. */
static const char *self_path = "/.burrow-agent/burrow-agent";

/* Background starts waiting for their supervisor's "P pid" answer ('B' frames, burrow-supervise.c). */
static struct bg_start {
  int fd; /* read end of the supervisor's stdout; -1: slot free */
  char id[64];
  char answer[64];
  size_t len;
} bg_starts[MAX_BG_STARTS];

/* When an idle supervisor may be started again after one failed to start (ms). */
static long long next_idle_ms;

/* Answer a background start on the control connection: 'b' id\0answer ("P pid" or "F stage errno"). */
static void answer_background(int *ctl, const char *id, const char *answer) {
  if (*ctl < 0) return; /* quiesced meanwhile: the host's start limit ends its wait */
  struct buf frame = {0};
  size_t id_len = strlen(id), answer_len = strlen(answer);
  char payload[160];
  if (id_len + 1 + answer_len > sizeof payload) return;
  memcpy(payload, id, id_len + 1);
  memcpy(payload + id_len + 1, answer, answer_len);
  put_frame(&frame, 'b', payload, (uint32_t)(id_len + 1 + answer_len));
  if (write_all(*ctl, &frame) < 0) close_fd(ctl);
  buf_free(&frame);
}

/*
 * A supervisor started ahead of its command (at most one, like the spare data connection): `--supervise` with a
 * placeholder it overwrites with the command's id once its spec arrives on stdin, so /proc/PID/cmdline names the
 * command (the server looks for the id there to tell a running supervisor from a lost one).
 */
static struct {
  pid_t pid; /* 0: none */
  int spec_fd, answer_fd;
} idle = {0, -1, -1};
static char placeholder[] = SUPERVISE_PLACEHOLDER;

static void spawn_idle_supervisor(void) {
  int spec[2] = {-1, -1}, answer[2] = {-1, -1};
  if (pipe2(spec, O_CLOEXEC) < 0 || pipe2(answer, O_CLOEXEC) < 0) {
    close_fd(&spec[0]);
    close_fd(&spec[1]);
    return;
  }
  fcntl(spec[1], F_SETPIPE_SZ, 1024 * 1024);
  char *argv[] = {(char *)self_path, "--supervise", placeholder, NULL};
  char *envp[] = {NULL};
  pid_t pid = vfork();
  if (pid == 0) {
    setsid();
    dup2(spec[0], 0);
    dup2(answer[1], 1);
    for (int i = 0; i < ignored_count; i++) signal(ignored_signals[i], SIG_DFL);
    uint64_t none = 0;
    syscall(SYS_rt_sigprocmask, SIG_SETMASK, &none, NULL, sizeof none);
    execve(self_path, argv, envp);
    _exit(127);
  }
  close(spec[0]);
  close(answer[1]);
  if (pid < 0) {
    close(spec[1]);
    close(answer[0]);
    return;
  }
  idle.pid = pid;
  idle.spec_fd = spec[1];
  idle.answer_fd = answer[0];
}

/*
 * Start the command of a 'B' frame (id\0dir\0...; burrow-supervise.c) under the idle supervisor (one is started
 * now when there is none): this program with --supervise, in its own session, its spec on stdin; its "P ..." answer
 * on stdout is relayed as 'b' once it arrives. It is not one of the agent's commands: a quiesce leaves it and its
 * command running.
 */
void background_start(char *payload, uint32_t len, int *ctl) {
  char *id = payload, *id_end = memchr(payload, 0, len);
  if (!id_end || id_end - id >= 64) return;
  char *dir = id_end + 1, *dir_end = memchr(dir, 0, (size_t)(payload + len - dir));
  if (!dir_end || strncmp(dir, "/.burrow/commands/", 18) != 0 || strstr(dir, "/..")) {
    answer_background(ctl, id, "F 4 22");
    return;
  }
  struct bg_start *slot = NULL;
  for (int i = 0; i < MAX_BG_STARTS && !slot; i++)
    if (bg_starts[i].fd < 0) slot = &bg_starts[i];
  /* The spare supervisor, started ahead, takes it: the start then costs one process start, the command's. */
  if (idle.pid <= 0) spawn_idle_supervisor();
  if (!slot || idle.pid <= 0) {
    answer_background(ctl, id, "F 4 11");
    return;
  }
  int spec_fd = idle.spec_fd, answer_fd = idle.answer_fd;
  idle.pid = 0;
  idle.spec_fd = idle.answer_fd = -1;
  /* The whole frame is the spec; a pipe of 1 MiB takes a usual one at once, a larger one as the supervisor reads. */
  for (uint32_t off = 0; off < len;) {
    ssize_t n = write(spec_fd, payload + off, len - off);
    if (n < 0 && errno == EINTR) continue;
    if (n <= 0) break; /* EPIPE: the supervisor did not start; its answer pipe closes without an answer */
    off += (uint32_t)n;
  }
  close(spec_fd);
  fcntl(answer_fd, F_SETFL, O_NONBLOCK);
  slot->fd = answer_fd;
  memcpy(slot->id, id, (size_t)(id_end - id) + 1);
  slot->len = 0;
}

/* Read a supervisor's answer; relay it once complete (a line) or when its stdout closed without one. */
static void read_background_answer(struct bg_start *slot, int *ctl) {
  ssize_t n = read(slot->fd, slot->answer + slot->len, sizeof slot->answer - 1 - slot->len);
  if (n < 0 && (errno == EAGAIN || errno == EINTR)) return;
  if (n > 0) slot->len += (size_t)n;
  slot->answer[slot->len] = 0;
  char *newline = strchr(slot->answer, '\n');
  if (newline) *newline = 0;
  else if (n > 0 && slot->len < sizeof slot->answer - 1) return;
  answer_background(ctl, slot->id, newline ? slot->answer : "F 4 5");
  close_fd(&slot->fd);
}

void background_init(const char *self) {
  if (self) self_path = self;
  for (int i = 0; i < MAX_BG_STARTS; i++) bg_starts[i].fd = -1;
}

int background_poll(struct pollfd *fds, int *slots) {
  int n = 0;
  for (int i = 0; i < MAX_BG_STARTS; i++) {
    if (bg_starts[i].fd < 0) continue;
    fds[n] = (struct pollfd){bg_starts[i].fd, POLLIN, 0};
    slots[n++] = i;
  }
  return n;
}

void background_ready(int slot, int *ctl) {
  if (bg_starts[slot].fd >= 0) read_background_answer(&bg_starts[slot], ctl);
}

int background_keep_idle(long long busy_until) {
  if (idle.pid > 0) return -1;
  int starting = 0;
  for (int i = 0; i < MAX_BG_STARTS; i++) starting |= bg_starts[i].fd >= 0;
  if (starting) return -1;
  long long now = now_ms();
  if (now >= busy_until && now >= next_idle_ms) {
    spawn_idle_supervisor();
    if (idle.pid <= 0) next_idle_ms = now + 1000;
    return idle.pid > 0 ? -1 : 1000;
  }
  long long at = busy_until > next_idle_ms ? busy_until : next_idle_ms;
  return (int)(at - now > 0 ? at - now : 1);
}

void background_reaped(pid_t pid) {
  if (pid != idle.pid) return;
  /* The idle supervisor ended before it got a command: another one is started when needed. */
  idle.pid = 0;
  close_fd(&idle.spec_fd);
  close_fd(&idle.answer_fd);
}

void background_quiesce(int *ctl) {
  /* Starts under way are answered first (within 2 s in all): their commands run on through the checkpoint. */
  long long until = now_ms() + 2000;
  for (int i = 0; i < MAX_BG_STARTS; i++) {
    while (bg_starts[i].fd >= 0 && now_ms() < until) {
      struct pollfd p = {bg_starts[i].fd, POLLIN, 0};
      if (poll(&p, 1, (int)(until - now_ms())) > 0) read_background_answer(&bg_starts[i], ctl);
    }
    if (bg_starts[i].fd >= 0) close_fd(&bg_starts[i].fd);
  }
}
