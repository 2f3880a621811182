/*
 * Shared between the exec agent (burrow-agent.c) and the background-command supervisor (burrow-supervise.c), which
 * are one static program: `burrow-agent --supervise DIR` runs the supervisor.
 */
#ifndef BURROW_AGENT_H
#define BURROW_AGENT_H

#include <stddef.h>
#include <stdint.h>
#include <sys/types.h>

/* A byte buffer: data[off, len) is what is still to be read or written. */
struct buf {
  char *data;
  size_t len, cap, off;
};

/* burrow-frames.c: frames [type u8][length u32 BE][payload] over the host sockets. */
long long now_ms(void);
void buf_reserve(struct buf *b, size_t more);
void buf_free(struct buf *b);
void put_u32(char *p, uint32_t v);
void put_frame(struct buf *b, char type, const void *payload, uint32_t len);
/* Write what the buffer holds; 0 when all written or would block, -1 when the peer is gone. */
int flush_buf(int fd, struct buf *b);
/* Blocking write of a whole buffer. */
int write_all(int fd, struct buf *b);
/* Read what is available into the buffer; 1 on data, 0 on would-block, -1 on EOF or error. */
int read_into(int fd, struct buf *b);
/* Next complete frame in the buffer: 1 and the frame, 0 when incomplete, -1 when over the size bound. */
int next_frame(struct buf *b, char *type, char **payload, uint32_t *len);
/* After a half-close: 1 once the peer closed its side (what it still sends is discarded). */
int linger_done(int fd);
/* Half-close, wait (bounded) for the peer's close, then close: the last frame is not lost. */
void close_lingering(int fd);
void close_fd(int *fd);

/* A command of the agent: its process, its host data connection, and what it becomes without one. */
struct exec {
  int used;
  pid_t pid;
  int sock; /* data connection (-1: none) */
  int in_fd, out_fd, err_fd;
  int exited;
  int status;
  long long exited_at_ms;
  long long started_at_ms;
  int stdin_close_pending;
  struct buf rx; /* frames from the host */
  struct buf tx; /* frames to the host, not yet written */
  struct buf stdin_pending;
  long long closing_until_ms; /* X sent, half-closed: waiting for the host's close until then (0: not closing) */
  unsigned long long out_offset; /* output payload bytes (both channels) framed so far */
  struct detach *detach;         /* NULL: the command ends with its data connection (an 'E' frame) */
};

/* burrow-command-files.c: a supervised command's files (docs/exec-protocol.md §3). */
struct ring {
  char dir[4200];
  long long seg_bytes, size;
  int max_segs, fd, count;
  unsigned long long offset, starts[64];
};
long long wall_ms(void);
/* A small file in dir; `atomic` writes through tmp + rename (for a file the server may read at any moment). */
void write_file(const char *dir, const char *name, const char *text, int atomic);
/* mkdir -p of an absolute path. */
void make_dirs(const char *path);
/* Append text as a JSON string to out (at most cap bytes in all); returns the new length. */
size_t json_string(char *out, size_t len, size_t cap, const char *text);
/* spec.json's text (malloc'd): {argv, pty, createdAtMs}. */
char *spec_json(char **argv, int argc, int pty, int cols, int rows, long long created_ms);
/* The output ring: segments named by the output offset they start at, a new one every seg_bytes, max_segs kept. */
void ring_init(struct ring *ring, const char *log_dir, long long seg_bytes, int max_segs, unsigned long long offset);
void ring_rotate(struct ring *ring);
void ring_append(struct ring *ring, int channel, const char *data, size_t len);
void ring_close(struct ring *ring);
const char *signal_name(int sig);
/* exit.json from a wait status (or a timeout). */
void write_exit(const char *dir, int status, int timed_out);

/* Signals ignored at the agent's start (see find_ignored_signals); the vfork child resets them. */
extern int ignored_signals[65];
extern int ignored_count;
void find_ignored_signals(void);

/* What a failed vfork child reports through shared memory: stage (1 cwd, 2 user, 3 exec) and errno. */
extern volatile int child_stage;
extern volatile int child_errno;

/*
 * The vfork child of a command: new session, stdio from in/out/err (with `pty`, in is a PTY replica that becomes the
 * session's controlling terminal), default signals, cwd, user (uid/gid when has_user), execve with a PATH search.
 */
__attribute__((noinline, noreturn)) void child_exec(const char *cwd, int has_user, uid_t uid, gid_t gid, char **argv,
                                                   char **envp, const char *path_env, int in, int out, int err,
                                                   int pty);

/* The argument of an idle supervisor, overwritten in place with its command's id (cmd_ + 20 characters). */
#define SUPERVISE_PLACEHOLDER "cmd_...................."

/*
 * `burrow-agent --supervise ARG`: run one background command described on stdin (burrow-supervise.c); ARG is the
 * placeholder, overwritten with the command's id once the spec named it.
 */
int supervise_main(char *arg);

/* burrow-background.c: background starts ('B' frames) under supervisors started ahead. */
#define MAX_BG_STARTS 256
struct pollfd;
/* `self`: this program's path inside the sandbox (NULL: the default). */
void background_init(const char *self);
/* Start the command of a 'B' frame; a refusal is answered on *ctl at once (closed on a write error). */
void background_start(char *payload, uint32_t len, int *ctl);
/* Poll entries of the starts waiting for their supervisor's answer, and their slots; returns how many. */
int background_poll(struct pollfd *fds, int *slots);
/* A start's answer is readable: relay it on *ctl once complete. */
void background_ready(int slot, int *ctl);
/* Start a spare supervisor when none runs, no start is under way and busy_until passed; ms until due, or -1. */
int background_keep_idle(long long busy_until);
/* A reaped child: the spare supervisor may have ended. */
void background_reaped(pid_t pid);
/* Before a quiesce: answer every start under way (at most 2 s in all), then drop the rest. */
void background_quiesce(int *ctl);

/* `burrow-agent --spawn-bench N PROGRAM [ARG...]` (burrow-spawn.c). */
int spawn_bench(int n, char **argv);

/* burrow-exec.c: a command over its data connection. */
/* Largest read of a command's output (one 'O'/'R' frame), bytes. */
#define CHUNK (1024 * 1024)
/* How long after its exit a command's output held open by a background child is still read, ms. */
#define OUTPUT_GRACE_MS 500
/* Stdin from the host buffered for a command at most, bytes. */
#define STDIN_BUFFER_MAX (1024 * 1024)
/* How long a finished data connection waits for the host to close its side, ms. */
#define LINGER_MS 2000
/* Close everything of a command (killing its group if it still runs) and free its slot. */
void exec_free(struct exec *e);
/* The host connection of a command is gone: a detachable one goes on in its ring, another one's output is dropped. */
void drop_connection(struct exec *e);
/* Host frames of one command's data connection; -1 on a bad frame. */
int handle_data(struct exec *e);
void pump_stdin(struct exec *e);
/* Move available output into tx frames; -1 when the pipe ended. */
int pump_output(struct exec *e, int *fd, char type);
void exec_tick(struct exec *e, long long now);

/*
 * burrow-detach.c: a command started by an 'e' frame outlives its data connection (a quiesce before a checkpoint,
 * or a host that went away) as a supervised command in /.burrow/commands/<id>/ (docs/exec-protocol.md §3): its
 * output goes on into the log ring from the offset the host has not been sent, input comes from its ctl FIFO, and
 * its exit status goes into exit.json.
 */
struct detach {
  char command_id[32];
  long long seg_bytes;
  int max_segs;
  char *spec; /* spec.json's text */
  long long started_wall_ms;
  int active; /* the data connection is gone: output goes to the ring */
  char dir[96];
  struct ring ring;
  int ctl_fd;
  struct buf ctl_rx;
};
/* The detach plan of an 'e' frame's command (NULL when the fields are invalid). */
struct detach *detach_plan(const char *command_id, const char *seg_bytes, const char *max_segs, char **argv, int argc);
/* Switch a command to its ring: what is framed but not sent goes there first; the caller owns the socket. */
void detach_exec(struct exec *e);
/* Move available output of a detached command into its ring; -1 when the pipe ended. */
int detached_output(struct exec *e, int *fd, int channel);
/* Control records from the detached command's ctl FIFO: stdin, stdin close, signal. */
void detached_control(struct exec *e);
/* The command ended and its output is read: exit.json, then the plan is freed. */
void detached_finish(struct exec *e);
void detach_free(struct detach *d);

#endif
