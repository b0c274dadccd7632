# The agent that runs inside every sandbox as its first process (Debian's python3, read-only from
# the host's /usr). The host speaks to it over its stdin and stdout, one JSON object per line;
# everything the agent does (commands, file reads and writes) happens inside the sandbox, as the
# sandbox's user, so a path or a symlink can never reach outside it. The host treats every line
# it reads back as untrusted (a process in the sandbox could write to the agent's stdout).
#
# In:  {"op":"init","env":{...}}                    environment of every command (secrets included)
#      {"op":"exec","id","argv","cwd","env","stdin","timeout_ms","max_output","stream"}
#      {"op":"kill","id"}
#      {"op":"write","id","path","data","append"}   data base64; parents are created
#      {"op":"read","id","path","offset","length"}
#      {"op":"list","id","path","limit"}
# Out: {"id","t":"out"|"err","d"}  (streamed output chunks, base64)
#      {"id","t":"exit","code","signal","timed_out","truncated","stdout","stderr"}
#      {"id","t":"ok", ...} / {"id","t":"error","message"}

import base64, json, os, selectors, signal, sys, threading, time
subprocess = None  # imported on the first exec: the sandbox is ready sooner

out_lock = threading.Lock()
base_env = {"PATH": "/usr/local/bin:/usr/bin:/bin", "HOME": "/workspace", "LANG": "C.UTF-8"}
running = {}
WS = "/workspace"

# One I/O thread, started before any command runs, moves every command's output and enforces
# every deadline: nothing is created per command but the command itself, so a command that
# exhausts the sandbox's process limit (a fork bomb) cannot stop its own deadline from firing.
sel = selectors.DefaultSelector()
wake_r, wake_w = os.pipe()
os.set_blocking(wake_r, False)
sel.register(wake_r, selectors.EVENT_READ, ("wake", None))
incoming = []
incoming_lock = threading.Lock()

def send(obj):
    line = (json.dumps(obj, separators=(",", ":")) + "\n").encode()
    with out_lock:
        os.write(1, line)

# The agent's exit code when it cannot go on (its I/O thread or its main loop failed): rather than
# linger half alive, where calls would hang until their deadlines, it ends, and the host fails the
# sandbox at once, naming this.
AGENT_FAILED = 70

def signame(n):
    """A signal's name, real-time ones included (the enum lacks them: SIGRTMIN+1)."""
    try:
        return signal.Signals(n).name
    except ValueError:
        if signal.SIGRTMIN <= n <= signal.SIGRTMAX: return "SIGRTMIN+%d" % (n - signal.SIGRTMIN)
        return "SIG%d" % n

def b64(data):
    return base64.b64encode(data).decode()

def inside(path):
    real = os.path.realpath(os.path.join(WS, path))
    if real != WS and not real.startswith(WS + "/"):
        raise ValueError("path is outside /workspace")
    return real

class Run:
    def __init__(self, req):
        global subprocess
        if subprocess is None:
            import subprocess
        self.id = req["id"]
        self.stream = bool(req.get("stream"))
        self.max_output = int(req.get("max_output", 262144))
        self.kept = {"out": bytearray(), "err": bytearray()}
        self.total = 0
        self.truncated = False
        self.timed_out = False
        self.exited_at = None
        env = dict(base_env)
        env.update(req.get("env") or {})
        cwd = inside(req.get("cwd") or ".")
        if not os.path.isdir(cwd):
            raise ValueError("cwd is not a directory in /workspace")
        self.proc = subprocess.Popen(req["argv"], cwd=cwd, env=env, stdin=subprocess.PIPE, stdout=subprocess.PIPE,
            stderr=subprocess.PIPE, start_new_session=True, close_fds=True)
        self.stdin_data = base64.b64decode(req.get("stdin") or "")
        self.deadline = time.monotonic() + int(req.get("timeout_ms", 60000)) / 1000.0
        self.pipes = {}
        with incoming_lock:
            incoming.append(self)
        os.write(wake_w, b"x")

    def attach(self):
        for pipe, kind in ((self.proc.stdout, "out"), (self.proc.stderr, "err")):
            os.set_blocking(pipe.fileno(), False)
            sel.register(pipe.fileno(), selectors.EVENT_READ, (kind, self))
            self.pipes[pipe.fileno()] = pipe
        fd = self.proc.stdin.fileno()
        if self.stdin_data:
            os.set_blocking(fd, False)
            sel.register(fd, selectors.EVENT_WRITE, ("in", self))
            self.pipes[fd] = self.proc.stdin
        else:
            self.proc.stdin.close()

    def detach(self, fd):
        try: sel.unregister(fd)
        except Exception: pass
        pipe = self.pipes.pop(fd, None)
        if pipe is not None:
            try: pipe.close()
            except Exception: pass

    def feed(self, fd):
        try:
            n = os.write(fd, self.stdin_data[:65536])
            self.stdin_data = self.stdin_data[n:]
        except BlockingIOError:
            return
        except OSError:
            self.stdin_data = b""
        if not self.stdin_data: self.detach(fd)

    def take(self, kind, chunk):
        if self.stream:
            room = self.max_output - self.total
            if room <= 0:
                self.truncated = True
                self.killgroup()
                return
            if len(chunk) > room: self.truncated = True
            chunk = chunk[:room]
            self.total += len(chunk)
            send({"id": self.id, "t": kind, "d": b64(chunk)})
        else:
            kept = self.kept[kind]
            room = self.max_output - len(kept)
            if len(chunk) > room: self.truncated = True
            if room > 0: kept.extend(chunk[:room])

    def killgroup(self):
        try: os.killpg(self.proc.pid, signal.SIGKILL)
        except Exception: pass

    def check(self, now):
        """True once the run is over and reported."""
        if self.exited_at is None:
            if self.proc.poll() is None:
                if now < self.deadline: return False
                self.timed_out = True
                self.killgroup()
                self.proc.wait()
            self.exited_at = now
            # The command's group goes with it: background children never outlive their exec.
            self.killgroup()
        readers = [fd for fd, p in self.pipes.items() if p is not self.proc.stdin]
        if readers and now - self.exited_at < 0.5: return False
        for fd in list(self.pipes): self.detach(fd)
        rc = self.proc.returncode
        running.pop(self.id, None)
        msg = {"id": self.id, "t": "exit", "code": rc if rc >= 0 else None, "signal": signame(-rc) if rc < 0 else None,
               "timed_out": self.timed_out, "truncated": self.truncated}
        if not self.stream:
            msg["stdout"] = b64(bytes(self.kept["out"]))
            msg["stderr"] = b64(bytes(self.kept["err"]))
        send(msg)
        return True

class PtySession:
    """An interactive shell on a pseudo-terminal of its own (new session, the pty as its controlling terminal)."""
    def __init__(self, req):
        import fcntl, pty, struct, termios
        self.fcntl, self.struct, self.termios = fcntl, struct, termios
        self.id = req["id"]
        env = dict(base_env)
        env.update(req.get("env") or {})
        env["TERM"] = env.get("TERM") or "xterm-256color"
        argv = req["argv"]
        cwd = inside(req.get("cwd") or ".")
        master, slave = pty.openpty()
        self.resize(master, req.get("rows") or 24, req.get("cols") or 80)
        pid = os.fork()
        if pid == 0:
            try:
                os.setsid()
                fcntl.ioctl(slave, termios.TIOCSCTTY, 0)
                for fd in (0, 1, 2): os.dup2(slave, fd)
                os.closerange(3, 65536)
                os.chdir(cwd)
                os.execvpe(argv[0], argv, env)
            finally:
                os._exit(127)
        os.close(slave)
        self.pid = pid
        self.master = master
        self.open = True
        self.exited_at = None
        self.status = None
        self.timed_out = False
        self.deadline = time.monotonic() + int(req.get("timeout_ms", 3600000)) / 1000.0
        with incoming_lock:
            incoming.append(self)
        os.write(wake_w, b"x")

    def resize(self, fd, rows, cols):
        self.fcntl.ioctl(fd, self.termios.TIOCSWINSZ, self.struct.pack("HHHH", int(rows), int(cols), 0, 0))

    def attach(self):
        os.set_blocking(self.master, False)
        sel.register(self.master, selectors.EVENT_READ, ("pty", self))

    def take(self, kind, chunk):
        send({"id": self.id, "t": "out", "d": b64(chunk)})

    def detach(self, fd):
        if not self.open: return
        self.open = False
        try: sel.unregister(self.master)
        except Exception: pass

    def write(self, data):
        view = memoryview(data)
        while len(view) > 0:
            try:
                n = os.write(self.master, view)
                view = view[n:]
            except BlockingIOError:
                time.sleep(0.01)

    def killgroup(self):
        try: os.killpg(self.pid, signal.SIGKILL)
        except Exception: pass

    def check(self, now):
        if self.exited_at is None:
            if now >= self.deadline:
                self.timed_out = True
                self.killgroup()
            pid, status = os.waitpid(self.pid, os.WNOHANG)
            if pid == 0: return False
            self.status = status
            self.exited_at = now
            self.killgroup()
        if self.open and now - self.exited_at < 0.3: return False
        self.detach(self.master)
        try: os.close(self.master)
        except Exception: pass
        running.pop(self.id, None)
        code = os.WEXITSTATUS(self.status) if os.WIFEXITED(self.status) else None
        sig = signame(os.WTERMSIG(self.status)) if os.WIFSIGNALED(self.status) else None
        send({"id": self.id, "t": "exit", "code": code, "signal": sig, "timed_out": self.timed_out, "truncated": False})
        return True

def io_loop():
    active = []
    while True:
        for key, _ in sel.select(0.05):
            kind, run = key.data
            if kind == "wake":
                try: os.read(wake_r, 4096)
                except BlockingIOError: pass
                with incoming_lock:
                    fresh = incoming[:]
                    del incoming[:]
                for r in fresh:
                    r.attach()
                    active.append(r)
            elif kind == "in":
                run.feed(key.fd)
            else:
                try:
                    chunk = os.read(key.fd, 65536)
                except BlockingIOError:
                    continue
                except OSError:
                    chunk = b""  # EIO: the terminal's other side closed
                if chunk: run.take(kind, chunk)
                else: run.detach(key.fd)
        now = time.monotonic()
        active = [r for r in active if not r.check(now)]

def io_thread():
    try:
        io_loop()
    finally:
        os._exit(AGENT_FAILED)

threading.Thread(target=io_thread, daemon=True).start()

def handle(req):
    op, rid = req.get("op"), req.get("id")
    try:
        if op == "init":
            base_env.update(req.get("env") or {})
            send({"id": rid, "t": "ok"})
        elif op == "exec":
            try:
                running[rid] = Run(req)
            except OSError as e:
                # Cannot start it (no such program, not executable, no process left): like a shell, 127 or 126.
                send({"id": rid, "t": "exit", "code": 127 if isinstance(e, FileNotFoundError) else 126, "signal": None, "timed_out": False,
                      "truncated": False, "stdout": "", "stderr": b64((str(e.strerror) + ": " + str(req.get("argv", [""])[0]) + "\n").encode())})
        elif op == "pty_open":
            running[rid] = PtySession(req)
        elif op == "pty_in":
            session = running.get(req.get("target"))
            if isinstance(session, PtySession) and session.open: session.write(base64.b64decode(req.get("data") or ""))
            send({"id": rid, "t": "ok"})
        elif op == "pty_resize":
            session = running.get(req.get("target"))
            if isinstance(session, PtySession) and session.open: session.resize(session.master, req.get("rows") or 24, req.get("cols") or 80)
            send({"id": rid, "t": "ok"})
        elif op == "kill":
            run = running.get(req.get("target"))
            if run: run.killgroup()
            send({"id": rid, "t": "ok"})
        elif op == "write":
            path = inside(req["path"])
            os.makedirs(os.path.dirname(path), exist_ok=True)
            with open(path, "ab" if req.get("append") else "wb") as f:
                f.write(base64.b64decode(req.get("data") or ""))
            send({"id": rid, "t": "ok", "size": os.path.getsize(path)})
        elif op == "read":
            path = inside(req["path"])
            size = os.path.getsize(path)
            with open(path, "rb") as f:
                f.seek(int(req.get("offset", 0)))
                data = f.read(int(req.get("length", 65536)))
            send({"id": rid, "t": "ok", "d": b64(data), "size": size})
        elif op == "list":
            path = inside(req.get("path") or ".")
            entries = []
            with os.scandir(path) as it:
                for e in it:
                    if len(entries) >= int(req.get("limit", 1000)): break
                    st = e.stat(follow_symlinks=False)
                    kind = "dir" if e.is_dir(follow_symlinks=False) else "symlink" if e.is_symlink() else "file"
                    entries.append({"name": e.name, "type": kind, "size": st.st_size, "modified_at": int(st.st_mtime)})
            send({"id": rid, "t": "ok", "entries": entries})
        else:
            send({"id": rid, "t": "error", "message": "unknown op"})
    except FileNotFoundError:
        send({"id": rid, "t": "error", "code": "not_found", "message": "no such file or directory"})
    except IsADirectoryError:
        send({"id": rid, "t": "error", "code": "is_directory", "message": "the path is a directory"})
    except NotADirectoryError:
        send({"id": rid, "t": "error", "code": "not_directory", "message": "the path is not a directory"})
    except OSError as e:
        send({"id": rid, "t": "error", "code": "os_error", "message": os.strerror(e.errno) if e.errno else str(e)})
    except Exception as e:
        send({"id": rid, "t": "error", "code": "invalid", "message": str(e)[:500]})

signal.signal(signal.SIGPIPE, signal.SIG_DFL)
send({"t": "ready"})
try:
    for line in sys.stdin.buffer:
        try:
            req = json.loads(line)
        except Exception:
            continue
        handle(req)
except BaseException:
    os._exit(AGENT_FAILED)
