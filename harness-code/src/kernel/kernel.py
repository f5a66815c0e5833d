# The harness Python kernel: runs the cells of one notebook in a
# persistent namespace. Started by harness_code::kernel::Kernel as
# `python3 -s -u -c <this file> <config json>`; needs only the standard library.
#
# Protocol: one JSON object per line. At start the kernel moves the pipes it
# was given on fds 0 and 1 to private descriptors and speaks only there; fd 0
# becomes /dev/null and fds 1 and 2 become per-cell capture files, so nothing
# user code prints (from Python or C) can reach the protocol channel. The
# original fd 2 is kept for diagnostics (faulthandler on a crash).

import sys

# Isolated mode by hand. `python -I` would ignore PYTHONHASHSEED, which the
# kernel needs (its only PYTHON* variable; the host removes the others, and
# `-s` leaves out the user's site directory). What remains of `-I` is this:
# `-c` puts the working directory first on sys.path, where a json.py or a
# pickle.py beside a notebook would replace the kernel's own imports.
sys.path[:] = [entry for entry in sys.path if entry not in ("", ".")]

import ast
import builtins
import faulthandler
import hashlib
import importlib
import io
import json
import linecache
import os
import pickle
import reprlib
import select
import signal
import tempfile
import threading
import time
import traceback
import types

KERNEL_FILE = "<string>"
REPR_LIMIT = 200
MESSAGE_LIMIT = 4000
TRACEBACK_LIMIT = 16000
SPILL_BYTES = 1 << 20


class TooLarge(Exception):
    pass


class CorruptBlob(Exception):
    pass


def is_blob_name(digest):
    return (isinstance(digest, str) and len(digest) == 64
            and all(c in "0123456789abcdef" for c in digest))


def existing_size(path):
    try:
        return os.stat(path).st_size
    except OSError:
        return None


class Capture:
    """One output stream: a private unlinked file dup'ed onto fd 1 or 2."""

    def __init__(self, directory, name, target_fd, cap):
        path = os.path.join(directory, name)
        self.fd = os.open(path, os.O_RDWR | os.O_CREAT | os.O_TRUNC, 0o600)
        os.unlink(path)
        self.target = target_fd
        self.cap = cap

    def reset(self):
        os.dup2(self.fd, self.target)
        os.ftruncate(self.fd, 0)
        os.lseek(self.fd, 0, os.SEEK_SET)

    def trim(self):
        # Keeps disk use bounded while a cell prints without end: the head we
        # report stays, the rest becomes a hole (the offset keeps counting).
        try:
            if os.fstat(self.fd).st_size > 4 * self.cap + (1 << 20):
                os.ftruncate(self.fd, self.cap)
        except OSError:
            pass

    def collect(self):
        try:
            total = os.lseek(self.fd, 0, os.SEEK_CUR)
            size = os.fstat(self.fd).st_size
            total = max(total, size)
            head = os.pread(self.fd, min(self.cap, total), 0) if total else b""
        except OSError as error:
            return {"text": "<output lost: %s>" % error, "total_bytes": 0, "truncated": False}
        return {
            "text": head.decode("utf-8", "replace"),
            "total_bytes": total,
            "truncated": total > len(head),
        }


class Tracker:
    """What the running cell reads from the namespace at its own level."""

    def __init__(self):
        self.filename = None
        self.before = None
        self.seen = set()
        self.observed = set()


_track = [None]
_dict_getitem = dict.__getitem__
_dict_contains = dict.__contains__
_dict_get = dict.get
_getframe = sys._getframe
_MISSING = object()


class Namespace(dict):
    """The notebook namespace; records module-level reads of the running cell."""

    __slots__ = ()

    def __getitem__(self, key):
        tracker = _track[0]
        if tracker is not None and key not in tracker.seen:
            if _getframe(1).f_code.co_filename == tracker.filename:
                tracker.seen.add(key)
                value = _dict_get(self, key, _MISSING)
                if value is _MISSING:
                    if not hasattr(builtins, key):
                        tracker.observed.add(key)
                elif tracker.before.get(key, _MISSING) is value:
                    tracker.observed.add(key)
        return _dict_getitem(self, key)


class Sink:
    """Pickle output: hashed, kept in memory up to SPILL_BYTES, then spilled."""

    def __init__(self, spill_dir, limit):
        self.hash = hashlib.sha256()
        self.size = 0
        self.limit = limit
        self.buffer = bytearray()
        self.spill_dir = spill_dir
        self.file = None
        self.path = None

    def write(self, data):
        self.size += len(data)
        if self.size > self.limit:
            raise TooLarge()
        self.hash.update(data)
        if self.file is not None:
            self.file.write(data)
        elif self.spill_dir is not None:
            self.buffer += data
            if len(self.buffer) > SPILL_BYTES:
                fd, self.path = tempfile.mkstemp(dir=self.spill_dir, prefix="spill-")
                self.file = os.fdopen(fd, "wb")
                self.file.write(self.buffer)
                self.buffer = bytearray()

    def discard(self):
        if self.file is not None:
            self.file.close()
            try:
                os.unlink(self.path)
            except OSError:
                pass


def bounded(text, limit):
    if len(text) > limit:
        return text[:limit] + "... [%d more characters]" % (len(text) - limit)
    return text


class Kernel:
    def __init__(self, config):
        self.config = config
        self.output_cap = int(config.get("output_cap") or 65536)
        self.blob_dir = config.get("blob_dir")
        self.max_blob = int(config.get("max_blob_bytes") or (256 << 20))
        self.check_reads = bool(config.get("check_reads", True))
        self.repr = reprlib.Repr()
        self.repr.maxstring = 120
        self.repr.maxother = 120
        self.repr.maxlist = 8
        self.repr.maxtuple = 8
        self.repr.maxdict = 6
        self.repr.maxset = 8
        namespace_type = Namespace if self.check_reads else dict
        self.ns = namespace_type(__name__="__main__", __builtins__=builtins, __doc__=None)
        self.running = threading.Event()

    def setup(self, warnings):
        self.proto_in = os.fdopen(os.dup(0), "rb")
        self.proto_out = os.fdopen(os.dup(1), "wb")
        self.diag = os.fdopen(os.dup(2), "w")
        null = os.open(os.devnull, os.O_RDONLY)
        os.dup2(null, 0)
        os.close(null)
        directory = tempfile.mkdtemp(prefix="harness-kernel-")
        self.out = Capture(directory, "stdout", 1, self.output_cap)
        self.err = Capture(directory, "stderr", 2, self.output_cap)
        os.rmdir(directory)
        self.out.reset()
        self.err.reset()
        self.stdin = self.stdout = self.stderr = None
        self.reset_streams()
        faulthandler.enable(file=self.diag)
        if self.blob_dir:
            os.makedirs(os.path.join(self.blob_dir, "tmp"), exist_ok=True)
        threading.Thread(target=self.watch_output, daemon=True).start()
        # Like Jupyter, modules beside the notebook's files are importable,
        # but after the standard library and installed packages, so that a
        # json.py there shadows neither the kernel's modules nor a cell's.
        if "" not in sys.path:
            sys.path.append("")

    def reset_streams(self):
        # New wrappers if a cell closed ours; they never own the descriptors.
        if self.stdin is None or self.stdin.closed:
            self.stdin = open(0, "r", closefd=False)
        if self.stdout is None or self.stdout.closed:
            self.stdout = io.TextIOWrapper(
                io.FileIO(1, "w", closefd=False), encoding="utf-8",
                errors="backslashreplace", write_through=True)
        if self.stderr is None or self.stderr.closed:
            self.stderr = io.TextIOWrapper(
                io.FileIO(2, "w", closefd=False), encoding="utf-8",
                errors="backslashreplace", write_through=True)
        sys.stdin = self.stdin
        sys.stdout = self.stdout
        sys.stderr = self.stderr

    def watch_output(self):
        while True:
            self.running.wait()
            time.sleep(0.1)
            self.out.trim()
            self.err.trim()

    def send(self, message):
        try:
            self.proto_out.write(json.dumps(message, separators=(",", ":")).encode() + b"\n")
            self.proto_out.flush()
        except (OSError, ValueError):
            # The protocol pipe is gone (closed by user code or the harness).
            os._exit(70)

    def serve(self):
        while True:
            try:
                line = self.proto_in.readline()
            except (OSError, ValueError):
                os._exit(71)
            if not line:
                os._exit(0)
            try:
                request = json.loads(line)
            except ValueError as error:
                self.send({"id": None, "kernel_error": "bad request: %s" % error})
                continue
            rid = request.get("id")
            op = request.get("op")
            try:
                if op == "execute":
                    reply = self.execute(request)
                elif op == "restore":
                    reply = self.restore(request)
                elif op == "ping":
                    reply = {}
                elif op == "reset":
                    self.ns.clear()
                    self.ns.update(__name__="__main__", __builtins__=builtins, __doc__=None)
                    reply = {}
                elif op == "shutdown":
                    self.send({"id": rid})
                    os._exit(0)
                else:
                    reply = {"kernel_error": "unknown op %r" % (op,)}
            except BaseException as error:  # the kernel's own failure, not the cell's
                reply = {"kernel_error": bounded("".join(
                    traceback.format_exception(type(error), error, error.__traceback__)),
                    TRACEBACK_LIMIT)}
            reply["id"] = rid
            self.send(reply)

    # -- execute -----------------------------------------------------------

    def execute(self, request):
        cell = request["cell"]
        source = request["source"]
        declared = request.get("declared") or []
        snapshot = bool(request.get("snapshot", True))
        filename = "<cell %s>" % cell
        linecache.cache[filename] = (len(source), None, source.splitlines(True), filename)
        ns = self.ns
        before = dict(ns)
        self.reset_streams()
        self.out.reset()
        self.err.reset()
        tracker = None
        if self.check_reads:
            tracker = Tracker()
            tracker.filename = filename
            tracker.before = before
        error = None
        display = None
        self.running.set()
        start = time.perf_counter()
        try:
            tree = ast.parse(source, filename)
            last = None
            if tree.body and isinstance(tree.body[-1], ast.Expr):
                last = compile(ast.Expression(tree.body.pop().value), filename, "eval",
                               dont_inherit=True)
            code = compile(tree, filename, "exec", dont_inherit=True)
            _track[0] = tracker
            exec(code, ns)
            if last is not None:
                value = eval(last, ns)
                if value is not None:
                    display = self.safe_repr(value)
        except BaseException as exc:
            _track[0] = None
            error = self.describe_error(exc, filename)
        finally:
            _track[0] = None
            elapsed = time.perf_counter() - start
            self.running.clear()
        for stream in (sys.stdout, sys.stderr, self.stdout, self.stderr):
            try:
                stream.flush()
            except Exception:
                pass
        self.reset_streams()
        reply = {
            "ok": error is None,
            "duration_us": int(elapsed * 1e6),
            "stdout": self.out.collect(),
            "stderr": self.err.collect(),
        }
        self.out.reset()
        self.err.reset()
        if error is not None:
            reply["error"] = error
        if display is not None:
            reply["display"] = display
        outputs, deleted = self.summarize(before, declared, snapshot)
        reply["outputs"] = outputs
        reply["deleted"] = deleted
        if tracker is not None:
            reply["reads"] = sorted(tracker.observed)
        return reply

    def describe_error(self, exc, filename):
        tb = exc.__traceback__
        te = traceback.TracebackException(type(exc), exc, tb, limit=None)
        # Drop the kernel's own frames (the exec call) from every stack.
        stacks = []
        node = te
        seen = set()
        while node is not None and id(node) not in seen:
            seen.add(id(node))
            stacks.append(node)
            node = node.__cause__ or (None if node.__suppress_context__ else node.__context__)
        for item in stacks:
            frames = list(item.stack)
            # The outermost frames are the kernel's (and, for a syntax error,
            # the compiler's); the cell's own frame comes first after them.
            if any(frame.filename == filename for frame in frames):
                while frames and frames[0].filename != filename:
                    frames.pop(0)
            elif item is te:
                frames = [frame for frame in frames if frame.filename != KERNEL_FILE]
                if isinstance(exc, SyntaxError):
                    frames = []
            item.stack = traceback.StackSummary.from_list(frames)
        frames = []
        line = None
        for frame in te.stack:
            entry = {"file": frame.filename, "line": frame.lineno, "function": frame.name,
                     "text": (frame.line or "")}
            if frame.filename.startswith("<cell ") and frame.filename.endswith(">"):
                try:
                    entry["cell"] = int(frame.filename[6:-1])
                except ValueError:
                    pass
            if frame.filename == filename:
                line = frame.lineno
            frames.append(entry)
        if isinstance(exc, SyntaxError) and exc.filename == filename:
            line = exc.lineno
        kind = type(exc)
        name = kind.__qualname__ if kind.__module__ == "builtins" else "%s.%s" % (
            kind.__module__, kind.__qualname__)
        try:
            message = str(exc)
        except Exception as inner:
            message = "<str() failed: %r>" % (inner,)
        try:
            formatted = "".join(te.format())
        except Exception as inner:
            formatted = "%s: %s (traceback unavailable: %r)" % (name, message, inner)
        return {
            "type": name,
            "message": bounded(message, MESSAGE_LIMIT),
            "line": line,
            "frames": frames[-64:],
            "traceback": bounded(formatted, TRACEBACK_LIMIT),
        }

    # -- values ------------------------------------------------------------

    def safe_repr(self, value):
        try:
            text = self.repr.repr(value)
        except Exception as error:
            text = "<repr failed: %s>" % type(error).__name__
        return bounded(text, REPR_LIMIT)

    def summarize(self, before, declared, snapshot):
        ns = self.ns
        names = set()
        for name in declared:
            if _dict_contains(ns, name) or name in before:
                names.add(name)
        for name, value in ns.items():
            if before.get(name, _MISSING) is not value:
                names.add(name)
        deleted = []
        for name in before:
            if not _dict_contains(ns, name):
                deleted.append(name)
        outputs = {}
        for name in sorted(names):
            if name == "__builtins__" or not _dict_contains(ns, name):
                continue
            outputs[name] = self.describe_value(_dict_getitem(ns, name), snapshot)
        return outputs, sorted(deleted)

    def describe_value(self, value, snapshot):
        kind = type(value)
        type_name = kind.__qualname__ if kind.__module__ == "builtins" else "%s.%s" % (
            kind.__module__, kind.__qualname__)
        summary = {"type": type_name, "repr": self.safe_repr(value)}
        try:
            if hasattr(kind, "__len__") and not isinstance(value, type):
                summary["len"] = int(len(value))
        except Exception:
            pass
        try:
            shape = getattr(value, "shape", None)
            if isinstance(shape, tuple) and all(isinstance(n, int) for n in shape):
                summary["shape"] = list(shape)
        except Exception:
            pass
        summary["stored"] = self.store(value, snapshot)
        return summary

    def store(self, value, snapshot):
        if isinstance(value, types.ModuleType):
            return {"kind": "module", "name": value.__name__}
        module = getattr(value, "__module__", None) if isinstance(
            value, (types.FunctionType, type, types.MethodType)) else None
        if module == "__main__":
            what = "class" if isinstance(value, type) else "function"
            return {"kind": "unrestorable",
                    "reason": "%s defined in a cell: restored by running that cell" % what}
        sink = Sink(os.path.join(self.blob_dir, "tmp") if (snapshot and self.blob_dir) else None,
                    self.max_blob)
        try:
            pickle.Pickler(sink, protocol=5).dump(value)
        except TooLarge:
            sink.discard()
            return {"kind": "unrestorable",
                    "reason": "pickle larger than the %d-byte limit" % self.max_blob}
        except BaseException as error:
            sink.discard()
            if isinstance(error, (KeyboardInterrupt, SystemExit)):
                raise
            return {"kind": "unrestorable",
                    "reason": bounded("cannot pickle: %s: %s" % (type(error).__name__, error), 300)}
        digest = sink.hash.hexdigest()
        stored = {"kind": "blob", "hash": digest, "bytes": sink.size}
        if sink.spill_dir is None:
            stored["written"] = False
            return stored
        path = self.blob_path(digest)
        try:
            if existing_size(path) == sink.size:
                sink.discard()
            else:
                os.makedirs(os.path.dirname(path), exist_ok=True)
                if sink.file is not None:
                    sink.file.close()
                    os.replace(sink.path, path)
                else:
                    fd, tmp = tempfile.mkstemp(dir=os.path.join(self.blob_dir, "tmp"))
                    with os.fdopen(fd, "wb") as handle:
                        handle.write(sink.buffer)
                    os.replace(tmp, path)
            stored["written"] = True
        except OSError as error:
            sink.discard()
            stored["written"] = False
            stored["write_error"] = str(error)
        return stored

    def blob_path(self, digest):
        return os.path.join(self.blob_dir, "sha256", digest[:2], digest)

    # -- restore -----------------------------------------------------------

    def load_blob(self, digest):
        """The value pickled in blob `digest`, whose bytes are checked first.

        A blob whose bytes do not hash to its name is removed (unless it was
        replaced meanwhile), so that the value is recomputed and written
        again rather than read wrong.
        """
        if not self.blob_dir:
            raise RuntimeError("the kernel has no blob directory")
        if not is_blob_name(digest):
            raise ValueError("invalid blob hash %r" % (digest,))
        path = self.blob_path(digest)
        with open(path, "rb") as handle:
            data = handle.read()
            actual = hashlib.sha256(data).hexdigest()
            if actual != digest:
                try:
                    if os.path.samestat(os.fstat(handle.fileno()), os.stat(path)):
                        os.unlink(path)
                except OSError:
                    pass
                raise CorruptBlob("blob %s is corrupt: its bytes hash to %s (removed)"
                                  % (digest, actual))
        return pickle.loads(data)

    def restore(self, request):
        ns = self.ns
        restored = []
        failed = []
        for item in request.get("values") or []:
            name = item["name"]
            try:
                if item.get("delete"):
                    ns.pop(name, None)
                elif "module" in item:
                    dict.__setitem__(ns, name, importlib.import_module(item["module"]))
                elif "blob" in item:
                    dict.__setitem__(ns, name, self.load_blob(item["blob"]))
                else:
                    raise ValueError("nothing to restore")
                restored.append(name)
            except BaseException as error:
                if isinstance(error, (KeyboardInterrupt, SystemExit)):
                    raise
                failed.append({"name": name, "reason": bounded(
                    "%s: %s" % (type(error).__name__, error), 500)})
        return {"restored": restored, "failed": failed}


def rlimit(resource, which, wanted):
    """Sets soft and hard limits to `wanted`, or to a lower one in force."""
    value = int(wanted)
    for current in resource.getrlimit(which):
        if current != resource.RLIM_INFINITY and current < value:
            value = current
    resource.setrlimit(which, (value, value))
    return value


def user_tasks(uid):
    """How many processes and threads the user `uid` runs (what Linux
    counts against RLIMIT_NPROC)."""
    count = 0
    for entry in os.listdir("/proc"):
        if not entry.isdigit():
            continue
        real = threads = None
        try:
            with open("/proc/%s/status" % entry) as status:
                for line in status:
                    if line.startswith("Uid:"):
                        real = int(line.split()[1])
                    elif line.startswith("Threads:"):
                        threads = int(line.split()[1])
        except (OSError, ValueError, IndexError):
            continue
        if real == uid and threads:
            count += threads
    return count


def is_initial_root():
    """Whether the kernel runs as root of the initial user namespace, to
    which Linux does not apply RLIMIT_NPROC."""
    if os.getuid() != 0:
        return False
    try:
        with open("/proc/self/uid_map") as mapping:
            for line in mapping:
                inside, outside = line.split()[:2]
                if inside == "0":
                    return outside == "0"
    except (OSError, ValueError):
        pass
    return True


def set_limits(config, warnings):
    try:
        import resource
    except ImportError as error:
        if config.get("memory_limit") or config.get("process_limit"):
            warnings.append("limits not set: %s" % error)
        return
    memory = config.get("memory_limit")
    if memory:
        try:
            rlimit(resource, resource.RLIMIT_AS, memory)
        except (ValueError, OSError) as error:
            warnings.append("memory limit not set: %s" % error)
    extra = config.get("process_limit")
    if extra and hasattr(resource, "RLIMIT_NPROC"):
        try:
            rlimit(resource, resource.RLIMIT_NPROC, user_tasks(os.getuid()) + int(extra))
        except (ValueError, OSError) as error:
            warnings.append("process limit not set: %s" % error)
        else:
            if is_initial_root():
                warnings.append("process limit set but not enforced: Linux does not apply "
                                "RLIMIT_NPROC to root; run the kernel as another user or under "
                                "a sandbox (command_prefix) to limit its processes")


def capabilities():
    caps = {}
    with open("/proc/self/status") as status:
        for line in status:
            if line.startswith("Cap"):
                key, value = line.split(":", 1)
                caps[key] = int(value, 16)
    return caps


def drop_privileges(warnings):
    """Drops every capability (the bounding set too, when allowed) and sets
    no_new_privs, so that no cell gains privileges through exec (setuid
    programs, file capabilities, root's implicit ones)."""
    if not sys.platform.startswith("linux"):
        warnings.append("privileges not dropped: only done on Linux")
        return
    try:
        import ctypes
        libc = ctypes.CDLL(None, use_errno=True)
        before = capabilities()
    except (ImportError, OSError, ValueError) as error:
        warnings.append("privileges not dropped: %s" % error)
        return
    arg = ctypes.c_ulong
    pr_capbset_drop, pr_set_no_new_privs = 24, 38
    if before.get("CapBnd"):
        try:
            with open("/proc/sys/kernel/cap_last_cap") as last:
                last_cap = int(last.read())
        except (OSError, ValueError):
            last_cap = 63
        for cap in range(last_cap + 1):
            # Fails without CAP_SETPCAP; no_new_privs then keeps exec from
            # using the bounding set.
            libc.prctl(pr_capbset_drop, arg(cap), arg(0), arg(0), arg(0))
    if any(before.get(key) for key in ("CapPrm", "CapEff", "CapInh", "CapAmb")):
        # _LINUX_CAPABILITY_VERSION_3: a header, then two sets of
        # (effective, permitted, inheritable), all empty.
        header = (ctypes.c_uint32 * 2)(0x20080522, 0)
        data = (ctypes.c_uint32 * 6)()
        if libc.capset(header, data) != 0:
            warnings.append("capabilities not dropped: %s" % os.strerror(ctypes.get_errno()))
    if libc.prctl(pr_set_no_new_privs, arg(1), arg(0), arg(0), arg(0)) != 0:
        warnings.append("no_new_privs not set: %s" % os.strerror(ctypes.get_errno()))
    try:
        after = capabilities()
    except (OSError, ValueError) as error:
        warnings.append("capabilities not checked: %s" % error)
        return
    kept = [key for key in ("CapPrm", "CapEff", "CapAmb") if after.get(key)]
    if kept:
        warnings.append("capabilities kept: %s" % ", ".join(
            "%s=%x" % (key, after[key]) for key in kept))


def start_watchdog(warnings):
    """Starts a process, in the kernel's process group, that kills the group
    once the host is gone.

    The host holds the only write end of the kernel's request pipe (fd 0
    here), so the pipe reports a hang-up when the host ends, however it
    ends. A process of its own rather than a thread: a cell in C code that
    holds the interpreter lock would stall a thread. Forked twice, so that
    it is not the kernel's child: `os.wait()` in a cell sees only the
    cell's own children.
    """
    if not hasattr(os, "fork") or not hasattr(select, "poll"):
        warnings.append("no watchdog on this system: the kernel may outlive its host")
        return
    kernel = os.getpid()
    try:
        child = os.fork()
    except OSError as error:
        warnings.append("no watchdog (the kernel may outlive its host): %s" % error)
        return
    if child:
        _, status = os.waitpid(child, 0)
        if status != 0:
            warnings.append("no watchdog: it could not be forked (the kernel may outlive "
                            "its host)")
        return
    code = 1
    try:
        if os.fork():
            code = 0
        else:
            code = 0
            watch(kernel)
    finally:
        os._exit(code)


def watch(kernel):
    """The watchdog's body: waits for the hang-up, then kills the group."""
    try:
        open_fds = [int(fd) for fd in os.listdir("/proc/self/fd")]
    except OSError:
        open_fds = range(3, 1024)
    for fd in open_fds:
        if fd != 0:
            try:
                os.close(fd)
            except OSError:
                pass
    poller = select.poll()
    # No events asked: only a hang-up or an error is reported.
    poller.register(0, 0)
    while not poller.poll(1000):
        try:
            os.kill(kernel, 0)
        except ProcessLookupError:
            # The kernel is gone and reaped: its host kills the group too.
            break
        except OSError:
            pass
    os.killpg(0, signal.SIGKILL)


def main():
    config = json.loads(sys.argv[1])
    warnings = []
    set_limits(config, warnings)
    if config.get("drop_privileges", True):
        drop_privileges(warnings)
    start_watchdog(warnings)
    kernel = Kernel(config)
    kernel.setup(warnings)
    kernel.send({"hello": {"pid": os.getpid(), "python": sys.version.split()[0],
                           "warnings": warnings}})
    kernel.serve()


main()
