/*
 * Shared between the exec agent (burrow-agent.c) and the background-command supervisor (burrow-supervise.c), which
 * are one static program: `burrow-agent --supervise DIR` runs the supervisor.
 */
#ifndef BURROW_AGENT_H
#define BURROW_AGENT_H

#include <sys/types.h>

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

#endif
