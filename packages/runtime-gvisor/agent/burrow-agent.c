/*
 * burrow-agent: the in-sandbox exec agent (docs/adr/0003-exec-agent.md, docs/exec-protocol.md §4).
 *
 * Started by the sandbox's init (so it survives pause, resume and fork), it connects to the host's Unix socket
 * AGENT_DIR/agent.sock (gVisor --host-uds=open) and starts commands the host asks for with vfork + execve (the
 * cheapest process creation under systrap), relaying their stdio over one host connection per command. Children
 * only ever see sandbox-internal pipes, so the agent can drop every host socket before a checkpoint ("quiesce"):
 * gVisor cannot save a sandbox with an open host socket.
 *
 * Frames in both directions: [type u8][length u32 BE][payload].
 *   control, host -> agent: 'E' exec  id\0cwd\0uid\0gid\0argc\0argv...\0env...\0  (uid "" = keep root)
 *                           'e' detachable exec (protocol 3): commandId\0segBytes\0maxSegs\0 then an 'E' payload; the
 *                               command outlives its data connection (burrow-detach.c)
 *                           'B' background start (protocol 2, burrow-background.c), answered 'b' id\0answer
 *                           'Q' quiesce: detach 'e' commands, kill every other command's group, close all host
 *                               sockets, reply 'q'
 *   control, agent -> host: 'A' hello (payload: protocol version), 'q' quiesced, 'N' id: could not connect the
 *                           data connection of exec id (nothing ran)
 *   data (one connection per command, opened by the agent), agent -> host:
 *     'H' id, then 'P' pid u32 | 'F' stage u8 + errno u32 (1 cwd, 2 user, 3 exec), 'O' stdout, 'R' stderr,
 *     'X' raw wait status u32 (last frame; output ended or OUTPUT_GRACE_MS after the exit)
 *   data, host -> agent: 'I' stdin bytes, 'C' stdin close, 'S' signal u8 (sent to the process group)
 *   spare (a data connection opened ahead of its command, at most one, opened while no command is starting or
 *   running, so that an exec needs no connect inside the sandbox): agent -> host 'W' (empty), then host -> agent
 *   'E' as on the control connection; from there on it is that command's data connection, without the 'H' frame.
 *   Any other frame, or EOF, closes it; quiesce closes it.
 *
 * Built static on the host (gcc -static) and bind-mounted read-only into the sandbox; no libc needed inside.
 */
#define _GNU_SOURCE
#include <errno.h>
#include <fcntl.h>
#include <poll.h>
#include <signal.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/ioctl.h>
#include <sys/socket.h>
#include <sys/syscall.h>
#include <sys/un.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include "burrow-agent.h"

#define PROTOCOL "burrow-agent 3"
#define MAX_EXECS 64
/*
 * While a command runs, look for exited children at least this often (ms) even without a SIGCHLD wake-up: once in
 * CI an exec whose background child held its stdout open ended only when that child did (30 s), as if the exit's
 * wake-up was missed. A periodic waitpid bounds that to this plus OUTPUT_GRACE_MS.
 */
#define REAP_BACKSTOP_MS 500
/* The spare data connection is not opened while a command started less than this long ago still runs (ms). */
#define SPARE_AFTER_MS 200
/* How long a quiesce waits for the host to close the data connections of commands that go on detached (ms). */
#define DETACH_LINGER_MS 1000

static const char *socket_path = "/.burrow-agent/agent.sock";

static struct exec execs[MAX_EXECS];
static int ctl = -1;
static struct buf ctl_rx;
/* The spare data connection (-1: none) and what the host sent on it so far. */
static int spare = -1;
static struct buf spare_rx;
static long long next_spare_ms;
static int sigchld_pipe[2];

static int connect_host(void) {
  int fd = socket(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0);
  if (fd < 0) return -1;
  /* No effect: after connect this is the gofer's host socket, which keeps the host's wmem_default (getsockopt
   * reads 212992 and 233152 bytes fit in flight with or without the 8 MiB: ADR 0003's 208 KiB window). */
  int sndbuf = 8 << 20;
  setsockopt(fd, SOL_SOCKET, SO_SNDBUF, &sndbuf, sizeof sndbuf);
  struct sockaddr_un addr = {.sun_family = AF_UNIX};
  strncpy(addr.sun_path, socket_path, sizeof addr.sun_path - 1);
  if (connect(fd, (struct sockaddr *)&addr, sizeof addr) < 0) {
    close(fd);
    return -1;
  }
  return fd;
}

static void on_sigchld(int sig) {
  (void)sig;
  int saved = errno;
  ssize_t ignored = write(sigchld_pipe[1], "c", 1);
  (void)ignored;
  errno = saved;
}

/*
 * Start the command of an 'E' frame, or of an 'e' frame (`detachable`: command id, segment bytes and segment count
 * first, then an 'E' payload; the command outlives its data connection, burrow-detach.c). `sock` is its data
 * connection (a spare), or -1 to connect one.
 */
static void start_exec(char *payload, uint32_t len, int sock, int detachable) {
  char *detach_fields[3] = {NULL, NULL, NULL};
  for (int i = 0; detachable && i < 3; i++) {
    char *z = memchr(payload, 0, len);
    if (!z) {
      if (sock >= 0) close(sock);
      return;
    }
    detach_fields[i] = payload;
    len -= (uint32_t)(z + 1 - payload);
    payload = z + 1;
  }
  /* Parse id\0cwd\0uid\0gid\0argc\0argv...\0env...\0 */
  char *fields[4096 + 8];
  int count = 0;
  char *p = payload, *end = payload + len;
  while (p < end && count < (int)(sizeof fields / sizeof fields[0]) - 1) {
    char *z = memchr(p, 0, (size_t)(end - p));
    if (!z) break;
    fields[count++] = p;
    p = z + 1;
  }
  /* A malformed frame starts nothing; a spare it came on is closed (the host's start limit ends its side). */
  if (count < 5) {
    if (sock >= 0) close(sock);
    return;
  }
  const char *id = fields[0];
  const char *cwd = fields[1];
  int has_user = fields[2][0] != 0;
  uid_t uid = (uid_t)strtoul(fields[2], NULL, 10);
  gid_t gid = (gid_t)strtoul(fields[3], NULL, 10);
  int argc = atoi(fields[4]);
  if (argc < 1 || 5 + argc > count) {
    if (sock >= 0) close(sock);
    return;
  }
  char **argv = &fields[5];
  char *saved_after_argv = 5 + argc < count ? fields[5 + argc] : NULL;
  fields[5 + argc] = NULL; /* argv terminator; env follows */
  char *envp[4096 + 1];
  int envc = 0;
  if (saved_after_argv) envp[envc++] = saved_after_argv;
  for (int i = 6 + argc; i < count && envc < 4096; i++) envp[envc++] = fields[i];
  envp[envc] = NULL;
  const char *path_env = "/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin";
  for (int i = 0; i < envc; i++)
    if (strncmp(envp[i], "PATH=", 5) == 0) path_env = envp[i] + 5;

  struct exec *e = NULL;
  for (int i = 0; i < MAX_EXECS; i++)
    if (!execs[i].used) {
      e = &execs[i];
      break;
    }
  int spared = sock >= 0;
  if (!spared) sock = connect_host();
  if (sock < 0) {
    /* Tell the host at once (it would otherwise wait out its start limit); nothing ran. */
    struct buf refusal = {0};
    put_frame(&refusal, 'N', id, (uint32_t)strlen(id));
    if (write_all(ctl, &refusal) < 0) {
      close_fd(&ctl); /* the frame loop over ctl_rx stops on ctl < 0; payload is not used after this */
      buf_free(&ctl_rx);
    }
    buf_free(&refusal);
    return;
  }
  struct buf hello = {0};
  if (!spared) put_frame(&hello, 'H', id, (uint32_t)strlen(id));
  if (!e) {
    char fail[5] = {4, 0, 0, 0, 0};
    put_u32(fail + 1, EAGAIN);
    put_frame(&hello, 'F', fail, 5);
    write_all(sock, &hello);
    buf_free(&hello);
    close_lingering(sock);
    return;
  }
  int in[2], out[2], err[2];
  if (pipe2(in, O_CLOEXEC) < 0 || pipe2(out, O_CLOEXEC) < 0 || pipe2(err, O_CLOEXEC) < 0) {
    char fail[5] = {4, 0, 0, 0, 0};
    put_u32(fail + 1, (uint32_t)errno);
    put_frame(&hello, 'F', fail, 5);
    write_all(sock, &hello);
    buf_free(&hello);
    close_lingering(sock);
    return;
  }
  fcntl(out[0], F_SETPIPE_SZ, 1024 * 1024);
  child_stage = 0;
  child_errno = 0;
  pid_t pid = vfork();
  if (pid == 0) {
    child_exec(cwd, has_user, uid, gid, argv, envp, path_env, in[0], out[1], err[1], 0);
  }
  close(in[0]);
  close(out[1]);
  close(err[1]);
  if (pid < 0 || child_stage != 0) {
    char fail[5];
    fail[0] = (char)(pid < 0 ? 4 : child_stage);
    put_u32(fail + 1, (uint32_t)(pid < 0 ? errno : child_errno));
    put_frame(&hello, 'F', fail, 5);
    write_all(sock, &hello);
    buf_free(&hello);
    close_lingering(sock);
    close(in[1]);
    close(out[0]);
    close(err[0]);
    /* The failed child is reaped by the SIGCHLD loop. */
    return;
  }
  memset(e, 0, sizeof *e);
  e->used = 1;
  e->pid = pid;
  if (detachable) e->detach = detach_plan(detach_fields[0], detach_fields[1], detach_fields[2], argv, argc);
  e->started_at_ms = now_ms();
  e->sock = sock;
  e->in_fd = in[1];
  e->out_fd = out[0];
  e->err_fd = err[0];
  fcntl(e->in_fd, F_SETFL, O_NONBLOCK);
  fcntl(e->out_fd, F_SETFL, O_NONBLOCK);
  fcntl(e->err_fd, F_SETFL, O_NONBLOCK);
  fcntl(sock, F_SETFL, O_NONBLOCK);
  char pidbuf[4];
  put_u32(pidbuf, (uint32_t)pid);
  put_frame(&hello, 'P', pidbuf, 4);
  e->tx = hello;
}

/*
 * Whole quiesce: drop every host socket. Commands of 'e' frames go on in their rings (the host half-closed data
 * connections get up to DETACH_LINGER_MS to take what was sent); every other command ends, as a checkpoint would.
 */
static void quiesce(void) {
  background_quiesce(&ctl);
  int lingering[MAX_EXECS], linger_count = 0;
  for (int i = 0; i < MAX_EXECS; i++) {
    struct exec *e = &execs[i];
    if (!e->used || (e->detach && e->detach->active)) continue;
    if (e->closing_until_ms || !e->detach) {
      exec_free(e);
      continue;
    }
    detach_exec(e);
    shutdown(e->sock, SHUT_WR);
    lingering[linger_count++] = e->sock;
    e->sock = -1;
  }
  for (long long end = now_ms() + DETACH_LINGER_MS; linger_count > 0 && now_ms() < end;) {
    struct pollfd p[MAX_EXECS];
    for (int i = 0; i < linger_count; i++) p[i] = (struct pollfd){lingering[i], POLLIN, 0};
    poll(p, (nfds_t)linger_count, (int)(end - now_ms()));
    for (int i = 0; i < linger_count;)
      if (linger_done(lingering[i])) {
        close(lingering[i]);
        lingering[i] = lingering[--linger_count];
      } else {
        i++;
      }
  }
  for (int i = 0; i < linger_count; i++) close(lingering[i]);
  close_fd(&spare);
  buf_free(&spare_rx);
  struct buf reply = {0};
  put_frame(&reply, 'q', NULL, 0);
  write_all(ctl, &reply);
  buf_free(&reply);
  close_fd(&ctl);
  buf_free(&ctl_rx);
}

static void reap(void) {
  int status;
  pid_t pid;
  while ((pid = waitpid(-1, &status, WNOHANG)) > 0) {
    background_reaped(pid);
    for (int i = 0; i < MAX_EXECS; i++) {
      if (execs[i].used && execs[i].pid == pid && !execs[i].exited) {
        execs[i].exited = 1;
        execs[i].status = status;
        execs[i].exited_at_ms = now_ms();
      }
    }
  }
}

int main(int argc, char **argv) {
  signal(SIGPIPE, SIG_IGN);
  find_ignored_signals();
  if (argc > 3 && strcmp(argv[1], "--spawn-bench") == 0) return spawn_bench(atoi(argv[2]), &argv[3]);
  if (argc == 3 && strcmp(argv[1], "--supervise") == 0) return supervise_main(argv[2]);
  if (argc > 1) socket_path = argv[1];
  background_init(argv[0][0] == '/' ? argv[0] : NULL);
  for (int i = 0; i < MAX_EXECS; i++) execs[i].sock = execs[i].in_fd = execs[i].out_fd = execs[i].err_fd = -1;
  if (pipe2(sigchld_pipe, O_CLOEXEC | O_NONBLOCK) < 0) return 1;
  struct sigaction sa = {0};
  sa.sa_handler = on_sigchld;
  sa.sa_flags = SA_RESTART | SA_NOCLDSTOP;
  sigaction(SIGCHLD, &sa, NULL);
  long long next_connect_ms = 0;
  for (;;) {
    struct pollfd fds[3 + MAX_EXECS * 4 + MAX_BG_STARTS];
    struct exec *owner[3 + MAX_EXECS * 4 + MAX_BG_STARTS];
    int kind[3 + MAX_EXECS * 4 + MAX_BG_STARTS];
    int bg_slot[3 + MAX_EXECS * 4 + MAX_BG_STARTS]; /* for kind 8: the background start's slot */
    int n = 0;
    int timeout = -1;
    if (ctl < 0) {
      long long now = now_ms();
      if (now >= next_connect_ms) {
        ctl = connect_host();
        if (ctl >= 0) {
          struct buf hello = {0};
          put_frame(&hello, 'A', PROTOCOL, (uint32_t)strlen(PROTOCOL));
          if (write_all(ctl, &hello) < 0) close_fd(&ctl);
          buf_free(&hello);
        }
        next_connect_ms = now + 100;
      }
      if (ctl < 0) timeout = (int)(next_connect_ms - now_ms() > 0 ? next_connect_ms - now_ms() : 1);
    }
    if (ctl >= 0 && spare < 0) {
      /*
       * The spare is opened while no command started in the last SPARE_AFTER_MS still runs: its connect would take
       * the sandbox's CPU from that command's start. After a short command it is ready for the next exec.
       */
      long long now = now_ms(), busy_until = 0;
      for (int i = 0; i < MAX_EXECS; i++)
        if (execs[i].used && !execs[i].exited && execs[i].started_at_ms + SPARE_AFTER_MS > busy_until)
          busy_until = execs[i].started_at_ms + SPARE_AFTER_MS;
      long long at = busy_until > next_spare_ms ? busy_until : next_spare_ms;
      if (now >= at) {
        spare = connect_host();
        if (spare >= 0) {
          struct buf w = {0};
          put_frame(&w, 'W', NULL, 0);
          if (write_all(spare, &w) < 0) close_fd(&spare);
          buf_free(&w);
        }
        /* A failed one is retried after 100 ms, like the control connection. */
        if (spare < 0) at = next_spare_ms = now + 100;
      }
      if (spare < 0) {
        int t = (int)(at - now > 0 ? at - now : 1);
        if (timeout < 0 || t < timeout) timeout = t;
      }
    }
    if (ctl >= 0) {
      /* A supervisor started ahead, like the spare: not while a command that just started runs. */
      long long busy_until = 0;
      for (int i = 0; i < MAX_EXECS; i++)
        if (execs[i].used && !execs[i].exited && execs[i].started_at_ms + SPARE_AFTER_MS > busy_until)
          busy_until = execs[i].started_at_ms + SPARE_AFTER_MS;
      int t = background_keep_idle(busy_until);
      if (t >= 0 && (timeout < 0 || t < timeout)) timeout = t;
    }
    fds[n] = (struct pollfd){sigchld_pipe[0], POLLIN, 0};
    owner[n] = NULL;
    kind[n++] = 0;
    if (spare >= 0) {
      fds[n] = (struct pollfd){spare, POLLIN, 0};
      owner[n] = NULL;
      kind[n++] = 7;
    }
    if (ctl >= 0) {
      fds[n] = (struct pollfd){ctl, POLLIN, 0};
      owner[n] = NULL;
      kind[n++] = 1;
    }
    int waiting = background_poll(fds + n, bg_slot + n);
    for (int i = n; i < n + waiting; i++) {
      owner[i] = NULL;
      kind[i] = 8;
    }
    n += waiting;
    long long now = now_ms();
    for (int i = 0; i < MAX_EXECS; i++) {
      struct exec *e = &execs[i];
      if (!e->used) continue;
      if (e->closing_until_ms) {
        fds[n] = (struct pollfd){e->sock, POLLIN, 0};
        owner[n] = e;
        kind[n++] = 6;
        long long left = e->closing_until_ms - now;
        int t = left > 0 ? (int)left : 0;
        if (timeout < 0 || t < timeout) timeout = t;
        continue;
      }
      if (e->detach && e->detach->active) {
        /* Detached: output into the ring as it comes, input from the ctl FIFO. */
        if (e->out_fd >= 0) {
          fds[n] = (struct pollfd){e->out_fd, POLLIN, 0};
          owner[n] = e;
          kind[n++] = 2;
        }
        if (e->err_fd >= 0) {
          fds[n] = (struct pollfd){e->err_fd, POLLIN, 0};
          owner[n] = e;
          kind[n++] = 3;
        }
        if (e->detach->ctl_fd >= 0 && e->stdin_pending.len - e->stdin_pending.off < STDIN_BUFFER_MAX) {
          fds[n] = (struct pollfd){e->detach->ctl_fd, POLLIN, 0};
          owner[n] = e;
          kind[n++] = 9;
        }
        if (e->in_fd >= 0 && e->stdin_pending.len > e->stdin_pending.off) {
          fds[n] = (struct pollfd){e->in_fd, POLLOUT, 0};
          owner[n] = e;
          kind[n++] = 5;
        }
        if (!e->exited && (timeout < 0 || timeout > REAP_BACKSTOP_MS)) timeout = REAP_BACKSTOP_MS;
        if (e->exited) {
          long long left = e->exited_at_ms + OUTPUT_GRACE_MS - now;
          int t = left > 0 ? (int)left : 0;
          if (timeout < 0 || t < timeout) timeout = t;
        }
        continue;
      }
      int tx_pending = e->tx.len > e->tx.off;
      /* Read output only while the previous chunk went out: a slow host slows the command, not our memory. */
      if (!tx_pending) {
        if (e->out_fd >= 0) {
          fds[n] = (struct pollfd){e->out_fd, POLLIN, 0};
          owner[n] = e;
          kind[n++] = 2;
        }
        if (e->err_fd >= 0) {
          fds[n] = (struct pollfd){e->err_fd, POLLIN, 0};
          owner[n] = e;
          kind[n++] = 3;
        }
      }
      short sock_events = e->stdin_pending.len - e->stdin_pending.off < STDIN_BUFFER_MAX ? POLLIN : 0;
      if (tx_pending) sock_events |= POLLOUT;
      fds[n] = (struct pollfd){e->sock, sock_events, 0};
      owner[n] = e;
      kind[n++] = 4;
      if (e->in_fd >= 0 && e->stdin_pending.len > e->stdin_pending.off) {
        fds[n] = (struct pollfd){e->in_fd, POLLOUT, 0};
        owner[n] = e;
        kind[n++] = 5;
      }
      if (!e->exited && (timeout < 0 || timeout > REAP_BACKSTOP_MS)) timeout = REAP_BACKSTOP_MS;
      if (e->exited && (e->out_fd >= 0 || e->err_fd >= 0)) {
        long long left = e->exited_at_ms + OUTPUT_GRACE_MS - now;
        int t = left > 0 ? (int)left : 0;
        if (timeout < 0 || t < timeout) timeout = t;
      }
    }
    int ready = poll(fds, (nfds_t)n, timeout);
    if (ready < 0 && errno != EINTR) return 2;
    for (int i = 0; i < n && ready > 0; i++) {
      if (!fds[i].revents) continue;
      struct exec *e = owner[i];
      if (kind[i] == 0) {
        char drain[64];
        while (read(sigchld_pipe[0], drain, sizeof drain) > 0) {
        }
      } else if (kind[i] == 1) {
        if (ctl < 0) continue;
        if (read_into(ctl, &ctl_rx) < 0) {
          close_fd(&ctl);
          buf_free(&ctl_rx);
          next_connect_ms = now_ms() + 100;
          continue;
        }
        char type;
        char *payload;
        uint32_t len;
        int r;
        while (ctl >= 0 && (r = next_frame(&ctl_rx, &type, &payload, &len)) == 1) {
          if (type == 'E' || type == 'e') start_exec(payload, len, -1, type == 'e');
          else if (type == 'B') background_start(payload, len, &ctl);
          else if (type == 'Q') {
            quiesce();
            next_connect_ms = now_ms() + 100;
          }
        }
        if (ctl >= 0 && r < 0) {
          close_fd(&ctl);
          buf_free(&ctl_rx);
        }
      } else if (kind[i] == 7) {
        if (spare < 0) continue;
        if (read_into(spare, &spare_rx) < 0) {
          /* Closed by the host without a command (a host that has no use for spares): retried after 100 ms. */
          close_fd(&spare);
          buf_free(&spare_rx);
          next_spare_ms = now_ms() + 100;
          continue;
        }
        char type;
        char *payload;
        uint32_t len;
        int r = next_frame(&spare_rx, &type, &payload, &len);
        if (r == 0) continue; /* a partial frame */
        int sock = spare;
        spare = -1;
        /* Anything but 'E' (a quiesce sent before the host knew this was a spare) ends it. */
        if (r == 1 && (type == 'E' || type == 'e')) {
          start_exec(payload, len, sock, type == 'e');
          /* Frames the host sent right behind the 'E' (a signal) belong to the command. */
          for (int j = 0; j < MAX_EXECS && spare_rx.len > spare_rx.off; j++) {
            struct exec *started = &execs[j];
            if (!started->used || started->sock != sock) continue;
            size_t rest = spare_rx.len - spare_rx.off;
            buf_reserve(&started->rx, rest);
            memcpy(started->rx.data + started->rx.len, spare_rx.data + spare_rx.off, rest);
            started->rx.len += rest;
            if (handle_data(started) < 0) close_fd(&started->sock);
            break;
          }
        } else {
          close(sock);
          next_spare_ms = now_ms() + 100;
        }
        buf_free(&spare_rx);
      } else if (kind[i] == 8) {
        background_ready(bg_slot[i], &ctl);
      } else if (!e->used) {
        continue;
      } else if (kind[i] == 2) {
        if (e->detach && e->detach->active) detached_output(e, &e->out_fd, 1);
        else pump_output(e, &e->out_fd, 'O');
      } else if (kind[i] == 3) {
        if (e->detach && e->detach->active) detached_output(e, &e->err_fd, 2);
        else pump_output(e, &e->err_fd, 'R');
      } else if (kind[i] == 9) {
        detached_control(e);
        pump_stdin(e);
      } else if (kind[i] == 4) {
        if (fds[i].revents & POLLIN) {
          /* The host went away: the command keeps running (in its ring when detachable, else its output dropped). */
          if (read_into(e->sock, &e->rx) < 0 || handle_data(e) < 0) drop_connection(e);
        }
        if (e->sock >= 0 && (fds[i].revents & (POLLOUT | POLLERR | POLLHUP))) {
          if (flush_buf(e->sock, &e->tx) < 0) drop_connection(e);
        }
        pump_stdin(e);
      } else if (kind[i] == 5) {
        pump_stdin(e);
      } else if (kind[i] == 6) {
        if (linger_done(e->sock)) exec_free(e);
      }
    }
    reap();
    now = now_ms();
    for (int i = 0; i < MAX_EXECS; i++)
      if (execs[i].used) exec_tick(&execs[i], now);
  }
}
