// The agent that runs inside every sandbox as its first process (Debian's python3, read-only from
// the host's /usr). The host speaks to it over its stdin and stdout, one JSON object per line;
// everything the agent does (commands, file reads and writes) happens inside the sandbox, as the
// sandbox's user, so a path or a symlink can never reach outside it. The host treats every line
// it reads back as untrusted (a process in the sandbox could write to the agent's stdout).
//
// In:  {"op":"init","env":{...}}                    environment of every command (secrets included)
//      {"op":"exec","id","argv","cwd","env","stdin","timeout_ms","max_output","stream"}
//      {"op":"kill","id"}
//      {"op":"write","id","path","data","append"}   data base64; parents are created
//      {"op":"read","id","path","offset","length"}
//      {"op":"list","id","path","limit"}
// Out: {"id","t":"out"|"err","d"}  (streamed output chunks, base64)
//      {"id","t":"exit","code","signal","timed_out","truncated","stdout","stderr"}
//      {"id","t":"ok", ...} / {"id","t":"error","message"}
export const AGENT_SOURCE = String.raw`
import base64, json, os, signal, subprocess, sys, threading, time

out_lock = threading.Lock()
base_env = {"PATH": "/usr/local/bin:/usr/bin:/bin", "HOME": "/workspace", "LANG": "C.UTF-8"}
running = {}
WS = "/workspace"

def send(obj):
    line = (json.dumps(obj, separators=(",", ":")) + "\n").encode()
    with out_lock:
        os.write(1, line)

def b64(data):
    return base64.b64encode(data).decode()

def inside(path):
    real = os.path.realpath(os.path.join(WS, path))
    if real != WS and not real.startswith(WS + "/"):
        raise ValueError("path is outside /workspace")
    return real

class Run:
    def __init__(self, req):
        self.id = req["id"]
        self.stream = bool(req.get("stream"))
        self.max_output = int(req.get("max_output", 262144))
        self.kept = {"out": bytearray(), "err": bytearray()}
        self.total = 0
        self.truncated = False
        self.timed_out = False
        env = dict(base_env)
        env.update(req.get("env") or {})
        self.proc = subprocess.Popen(req["argv"], cwd=inside(req.get("cwd") or "."), env=env,
            stdin=subprocess.PIPE, stdout=subprocess.PIPE, stderr=subprocess.PIPE, start_new_session=True, close_fds=True)
        self.readers = [threading.Thread(target=self.pump, args=(self.proc.stdout, "out"), daemon=True),
                        threading.Thread(target=self.pump, args=(self.proc.stderr, "err"), daemon=True)]
        for r in self.readers: r.start()
        threading.Thread(target=self.feed, args=(base64.b64decode(req.get("stdin") or ""),), daemon=True).start()
        self.deadline = time.monotonic() + int(req.get("timeout_ms", 60000)) / 1000.0
        threading.Thread(target=self.wait, daemon=True).start()

    def feed(self, data):
        try:
            if data: self.proc.stdin.write(data)
            self.proc.stdin.close()
        except Exception:
            pass

    def pump(self, pipe, kind):
        while True:
            try:
                chunk = os.read(pipe.fileno(), 65536)
            except Exception:
                break
            if not chunk: break
            if self.stream:
                room = self.max_output - self.total
                if room <= 0:
                    self.truncated = True
                    self.killgroup()
                    continue
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

    def wait(self):
        while True:
            left = self.deadline - time.monotonic()
            if left <= 0:
                self.timed_out = True
                self.killgroup()
                self.proc.wait()
                break
            try:
                self.proc.wait(timeout=min(left, 1.0))
                break
            except subprocess.TimeoutExpired:
                pass
        # The command's group goes with it: background children never outlive their exec.
        self.killgroup()
        for r in self.readers: r.join(0.5)
        rc = self.proc.returncode
        running.pop(self.id, None)
        msg = {"id": self.id, "t": "exit", "code": rc if rc >= 0 else None, "signal": signal.Signals(-rc).name if rc < 0 else None,
               "timed_out": self.timed_out, "truncated": self.truncated}
        if not self.stream:
            msg["stdout"] = b64(bytes(self.kept["out"]))
            msg["stderr"] = b64(bytes(self.kept["err"]))
        send(msg)

def handle(req):
    op, rid = req.get("op"), req.get("id")
    try:
        if op == "init":
            base_env.update(req.get("env") or {})
            send({"id": rid, "t": "ok"})
        elif op == "exec":
            try:
                running[rid] = Run(req)
            except (FileNotFoundError, PermissionError) as e:
                send({"id": rid, "t": "exit", "code": 127 if isinstance(e, FileNotFoundError) else 126, "signal": None, "timed_out": False,
                      "truncated": False, "stdout": "", "stderr": b64((str(e.strerror) + ": " + str(req.get("argv", [""])[0]) + "\n").encode())})
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
for line in sys.stdin.buffer:
    try:
        req = json.loads(line)
    except Exception:
        continue
    handle(req)
`;
