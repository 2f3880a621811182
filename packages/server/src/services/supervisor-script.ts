/**
 * The in-sandbox command supervisor (Python 3, run by the sandbox's own python3): owns one background command,
 * keeps its output in a ring of log segments and its state in files beside it. Installed at {@link SUPERVISOR_PATH}.
 * File layout and record formats: docs/exec-protocol.md.
 */
export const SUPERVISOR_SCRIPT = String.raw`#!/usr/bin/env python3
# Burrow command supervisor: runs inside a sandbox, owns one background command (pipes or a PTY), keeps its
# output in a bounded ring of log segments and its state in files, so the command and its output survive the
# server restarting and the sandbox being checkpointed and restored. Protocol: docs/exec-protocol.md.
#
#   supervisor.py start DIR   start the command described by DIR/spec.json; prints DIR/state.json once it runs
#   supervisor.py ctl DIR     copy control records from stdin into DIR/ctl (the supervisor's control FIFO)
import errno, fcntl, json, os, select, signal, struct, sys, termios, time

REC = struct.Struct('>BI')  # channel (1 stdout, 2 stderr), payload length; then the payload


def write_json(path, value):
    tmp = path + '.tmp'
    with open(tmp, 'w') as f:
        json.dump(value, f)
    os.rename(tmp, path)


def now_ms():
    return int(time.time() * 1000)


class Ring:
    """Output log: segments named by the output offset (payload bytes, both channels) they start at."""

    def __init__(self, d, seg_bytes, max_segs):
        self.d, self.seg_bytes, self.max_segs = d, seg_bytes, max_segs
        os.makedirs(d, exist_ok=True)
        self.offset = 0
        self.fd = -1
        self.size = 0
        self.segs = []
        self.rotate()

    def rotate(self):
        if self.fd >= 0:
            os.close(self.fd)
        name = os.path.join(self.d, '%020d.seg' % self.offset)
        self.fd = os.open(name, os.O_WRONLY | os.O_CREAT | os.O_APPEND | os.O_CLOEXEC, 0o600)
        self.size = 0
        self.segs.append(name)
        while len(self.segs) > self.max_segs:
            try:
                os.unlink(self.segs.pop(0))
            except OSError:
                pass

    def append(self, channel, data):
        if self.size >= self.seg_bytes:
            self.rotate()
        rec = REC.pack(channel, len(data)) + data
        view = memoryview(rec)
        while view:
            n = os.write(self.fd, view)
            view = view[n:]
        self.size += len(rec)
        self.offset += len(data)


def set_user(user):
    if user is None:
        return
    if user.get('name'):
        os.initgroups(user['name'], user['gid'])
    else:
        os.setgroups([])
    os.setgid(user['gid'])
    os.setuid(user['uid'])


def session_groups(sid):
    """Process groups of session sid, from /proc/PID/stat (fields after the name: state ppid pgrp session)."""
    groups = set()
    for name in os.listdir('/proc'):
        if not name.isdigit():
            continue
        try:
            with open('/proc/%s/stat' % name, 'rb') as f:
                fields = f.read().rsplit(b')', 1)[1].split()
        except (OSError, IndexError):
            continue
        if len(fields) > 3 and int(fields[3]) == sid:
            groups.add(int(fields[2]))
    return groups


def signal_foreground(master, sid, sig):
    """Send sig to the foreground process group of the PTY whose session is sid.

    gVisor raises no SIGWINCH when a PTY's size is set and answers TIOCGPGRP (tcgetpgrp) only inside the
    terminal's own session, so there the foreground group cannot be known from outside: every process group of
    the session gets the signal (background jobs ignore SIGWINCH unless they handle it, and a stopped job sees it
    when continued, as it would see a resize anyway)."""
    try:
        groups = {os.tcgetpgrp(master)}
    except OSError:
        groups = session_groups(sid)
    for group in groups:
        try:
            os.killpg(group, sig)
        except OSError:
            pass


def spawn(spec):
    """Fork the command in its own session; returns (pid, stdin fd, [(fd, channel)], is_pty)."""
    argv, env, cwd, user, pty = spec['argv'], spec['env'], spec['cwd'], spec.get('user'), spec.get('pty')
    err_r, err_w = os.pipe2(os.O_CLOEXEC)
    if pty:
        master, slave = os.openpty()
        fcntl.ioctl(slave, termios.TIOCSWINSZ, struct.pack('HHHH', pty['rows'], pty['cols'], 0, 0))
    else:
        in_r, in_w = os.pipe2(os.O_CLOEXEC)
        out_r, out_w = os.pipe2(os.O_CLOEXEC)
        er_r, er_w = os.pipe2(os.O_CLOEXEC)
    pid = os.fork()
    if pid == 0:
        try:
            os.setsid()
            if pty:
                fcntl.ioctl(slave, termios.TIOCSCTTY, 0)
                for fd in (0, 1, 2):
                    os.dup2(slave, fd)
            else:
                os.dup2(in_r, 0)
                os.dup2(out_w, 1)
                os.dup2(er_w, 2)
            for s in range(1, signal.NSIG):
                try:
                    signal.signal(s, signal.SIG_DFL)
                except (OSError, ValueError):
                    pass
            signal.pthread_sigmask(signal.SIG_SETMASK, [])
            set_user(user)
            os.chdir(cwd)
            os.execvpe(argv[0], argv, env)
        except OSError as e:
            os.write(err_w, json.dumps({'errno': e.errno, 'message': str(e)}).encode())
        finally:
            os._exit(127)
    os.close(err_w)
    failure = b''
    while True:
        chunk = os.read(err_r, 4096)
        if not chunk:
            break
        failure += chunk
    os.close(err_r)
    if pty:
        os.close(slave)
        return pid, master, [(master, 1)], True, failure
    for fd in (in_r, out_w, er_w):
        os.close(fd)
    return pid, in_w, [(out_r, 1), (er_r, 2)], False, failure


def supervise(d):
    spec = json.load(open(os.path.join(d, 'spec.json')))
    ring = Ring(os.path.join(d, 'log'), spec['segmentBytes'], spec['maxSegments'])
    ctl_path = os.path.join(d, 'ctl')
    try:
        os.mkfifo(ctl_path, 0o600)
    except FileExistsError:
        pass
    ctl = os.open(ctl_path, os.O_RDWR | os.O_NONBLOCK | os.O_CLOEXEC)
    wake_r, wake_w = os.pipe2(os.O_NONBLOCK | os.O_CLOEXEC)
    signal.set_wakeup_fd(wake_w)
    signal.signal(signal.SIGCHLD, lambda *_: None)
    signal.signal(signal.SIGPIPE, signal.SIG_IGN)
    started = now_ms()
    pid, stdin_fd, outputs, is_pty, failure = spawn(spec)
    if failure:
        info = json.loads(failure.decode())
        code = 127 if info['errno'] in (errno.ENOENT, errno.ENOTDIR) else 126
        ring.append(2, ('burrow: cannot run %s: %s\n' % (spec['argv'][0], info['message'])).encode())
        os.waitpid(pid, 0)
        write_json(os.path.join(d, 'state.json'), {'pid': pid, 'startedAtMs': started, 'supervisorPid': os.getpid()})
        write_json(os.path.join(d, 'exit.json'), {'exitCode': code, 'signal': None, 'timedOut': False, 'endedAtMs': now_ms()})
        return
    write_json(os.path.join(d, 'state.json'), {'pid': pid, 'startedAtMs': started, 'supervisorPid': os.getpid()})
    for fd, _ in outputs:
        os.set_blocking(fd, False)
    os.set_blocking(stdin_fd, False)
    timeout_ms = spec.get('timeoutMs')
    deadline = None if timeout_ms is None else time.monotonic() + timeout_ms / 1000.0
    timed_out = False
    status = None
    exited_at = None
    pending_in = b''
    close_in = False
    ctl_buf = b''
    open_outputs = dict(outputs)
    while True:
        if status is None:
            got, st = os.waitpid(pid, os.WNOHANG)
            if got == pid:
                status = st
                exited_at = time.monotonic()
        if status is not None and (not open_outputs or time.monotonic() - exited_at > 0.5):
            break
        if deadline is not None and status is None and time.monotonic() >= deadline:
            timed_out = True
            deadline = None
            try:
                os.killpg(pid, signal.SIGKILL)
            except OSError:
                pass
        waits = [0.5]
        if deadline is not None:
            waits.append(max(0.0, deadline - time.monotonic()))
        if status is not None:
            waits.append(max(0.0, 0.5 - (time.monotonic() - exited_at)))
        rl = list(open_outputs) + [ctl, wake_r]
        wl = [stdin_fd] if pending_in and stdin_fd >= 0 else []
        try:
            r, w, _ = select.select(rl, wl, [], min(waits))
        except InterruptedError:
            continue
        if wake_r in r:
            try:
                os.read(wake_r, 4096)
            except BlockingIOError:
                pass
        for fd in r:
            if fd in open_outputs:
                try:
                    data = os.read(fd, 65536)
                except BlockingIOError:
                    continue
                except OSError:  # EIO: every PTY replica closed
                    data = b''
                if data:
                    ring.append(open_outputs[fd], data)
                else:
                    del open_outputs[fd]
                    if not is_pty:
                        os.close(fd)
        if ctl in r:
            try:
                ctl_buf += os.read(ctl, 65536)
            except BlockingIOError:
                pass
            resize = None
            while len(ctl_buf) >= 5:
                kind, n = REC.unpack_from(ctl_buf)
                if len(ctl_buf) < 5 + n:
                    break
                body, ctl_buf = ctl_buf[5:5 + n], ctl_buf[5 + n:]
                if kind == 0:
                    pending_in += body
                elif kind == 1:
                    close_in = True
                elif kind == 2 and is_pty:
                    resize = struct.unpack('>HH', body)
                elif kind == 3:
                    try:
                        os.killpg(pid, struct.unpack('>B', body)[0])
                    except OSError:
                        pass
            # Only the last size of a batch is applied: a window dragged wider sends many, and finding the
            # session's process groups took ~60 ms inside gVisor (46 processes, a busy host).
            if resize is not None:
                cols, rows = resize
                fcntl.ioctl(stdin_fd, termios.TIOCSWINSZ, struct.pack('HHHH', rows, cols, 0, 0))
                signal_foreground(stdin_fd, pid, signal.SIGWINCH)
        if stdin_fd in w or (pending_in and stdin_fd >= 0 and not wl):
            try:
                n = os.write(stdin_fd, pending_in)
                pending_in = pending_in[n:]
            except BlockingIOError:
                pass
            except OSError:
                pending_in = b''
        if close_in and not pending_in and stdin_fd >= 0:
            close_in = False
            if is_pty:
                pending_in = b'\x04'
            else:
                os.close(stdin_fd)
                stdin_fd = -1
    if status is None:
        _, status = os.waitpid(pid, 0)
    if os.WIFSIGNALED(status):
        code, sig = None, signal.Signals(os.WTERMSIG(status)).name
    else:
        code, sig = os.WEXITSTATUS(status), None
    if timed_out:
        code, sig = None, 'SIGKILL'
    write_json(os.path.join(d, 'exit.json'), {'exitCode': code, 'signal': sig, 'timedOut': timed_out, 'endedAtMs': now_ms()})


def start(d):
    if os.fork() == 0:
        os.setsid()
        if os.fork() == 0:
            devnull = os.open('/dev/null', os.O_RDWR)
            for fd in (0, 1, 2):
                os.dup2(devnull, fd)
            try:
                supervise(d)
            except BaseException as e:  # noqa: BLE001 - recorded for the server
                write_json(os.path.join(d, 'exit.json'), {'exitCode': 126, 'signal': None, 'timedOut': False, 'endedAtMs': now_ms(), 'error': repr(e)})
            os._exit(0)
        os._exit(0)
    state = os.path.join(d, 'state.json')
    failed = os.path.join(d, 'exit.json')
    end = time.monotonic() + 30
    while time.monotonic() < end:
        if os.path.exists(state) or os.path.exists(failed):
            break
        time.sleep(0.002)
    if os.path.exists(state):
        sys.stdout.write(open(state).read())
        return 0
    sys.stderr.write(open(failed).read() if os.path.exists(failed) else 'supervisor did not start\n')
    return 1


def ctl(d):
    out = os.open(os.path.join(d, 'ctl'), os.O_WRONLY)
    src = sys.stdin.buffer.raw
    while True:
        data = src.read(65536)
        if not data:
            return 0
        view = memoryview(data)
        while view:
            view = view[os.write(out, view):]


if __name__ == '__main__':
    sys.exit({'start': start, 'ctl': ctl}[sys.argv[1]](sys.argv[2]))
`;

/** Where the supervisor lives inside a sandbox. */
export const SUPERVISOR_PATH = '/.burrow/bin/supervisor.py';
/** Directory inside a sandbox holding one directory per background command. */
export const COMMANDS_DIR = '/.burrow/commands';
/** Bytes per log segment of a command: 4 MiB. */
export const LOG_SEGMENT_BYTES = 4 * 1024 * 1024;
/** Segments a command keeps: with {@link LOG_SEGMENT_BYTES}, at least 16 MiB and at most 20 MiB of output. */
export const LOG_MAX_SEGMENTS = 5;
