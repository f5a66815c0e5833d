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
import ctypes
import dis
import faulthandler
import gc
import hashlib
import importlib
import io
import itertools
import json
import linecache
import operator
import os
import pickle
import reprlib
import select
import signal
import struct
import tempfile
import threading
import time
import traceback
import types
import zlib

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


def _same_bytes(path, data):
    """Whether the regular file `path` holds exactly `data`."""
    try:
        fd = os.open(path, os.O_RDONLY | os.O_NONBLOCK | getattr(os, "O_NOFOLLOW", 0))
    except OSError:
        return False
    try:
        with os.fdopen(fd, "rb") as handle:
            return handle.read(len(data) + 1) == data
    except OSError:
        return False


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
    """What the running cell reads from the namespace: at its own level
    (`observed`, the check of the static analysis) and from any frame
    (`reads`, the trace: functions defined in earlier cells that the cell
    calls read through the same namespace), plus the files it opens and the
    code it hands to `exec`/`eval`, seen by the kernel's audit hook."""

    def __init__(self, filename, before):
        self.filename = filename
        self.before = before
        # Names read by the cell's own code: later reads of them add nothing.
        self.done = set()
        self.observed = set()
        self.traced = set()
        self.reads = set()
        self.files_read = set()
        self.files_written = set()
        self.files_dropped = 0
        self.evaluated = []


_track = [None]
_dict_getitem = dict.__getitem__
_dict_contains = dict.__contains__
_dict_get = dict.get
_getframe = sys._getframe
_MISSING = object()


class Namespace(dict):
    """The notebook namespace; records the reads of the running cell.

    Python looks globals up through `__getitem__` when the globals are not
    an exact dict (CPython's `LOAD_GLOBAL` and `LOAD_NAME` slow paths), so
    every read by the cell's code, by functions defined in cells and by
    comprehensions in them comes here; library code has its own module
    globals and is not slowed down. Once the cell's own code has read a
    name, every read of it costs one set lookup; until then, reads from
    functions also look at the caller's frame."""

    __slots__ = ()

    def __getitem__(self, key):
        tracker = _track[0]
        if tracker is not None and key not in tracker.done:
            if key not in tracker.traced:
                tracker.traced.add(key)
                value = _dict_get(self, key, _MISSING)
                if value is _MISSING:
                    if type(key) is not str or not hasattr(builtins, key):
                        tracker.reads.add(key)
                elif tracker.before.get(key, _MISSING) is value:
                    tracker.reads.add(key)
            if _getframe(1).f_code.co_filename == tracker.filename:
                # Read by the cell's own code: nothing more to learn about
                # this name in this cell.
                tracker.done.add(key)
                value = _dict_get(self, key, _MISSING)
                if value is _MISSING:
                    if type(key) is not str or not hasattr(builtins, key):
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


# -- the trace: what a cell did ------------------------------------------------
#
# Mutations are found by fingerprinting every value of the namespace before
# and after a cell (the "after" of one cell is the "before" of the next, so
# each value is fingerprinted once per cell). A fingerprint is the value's
# identity and type, then its content: all the data of arrays and buffers up
# to FP_HASH_CAP bytes each (numpy data as sums of its 64-bit words over
# rows and columns, 0.06 ms per MB in cache and 0.3 from memory; other
# buffers by CRC-32), container items up to FP_ITEMS (sampled beyond). An array past
# FP_HASH_CAP is sampled, and counts as changed by every cell that could
# reach it. numpy and pandas are never imported: their objects are
# recognised by their type's module.
#
# After a cell, a value is fingerprinted again only if the cell could have
# reached it (`holdings`): the cell loaded its name, or loaded a name whose
# value holds one of the objects or the memory (numpy bases, pandas blocks
# and indexes) this value holds. Values the cell could not reach keep their
# fingerprint, so a large array costs its hash only in the cells that use it.
#
# What a cell costs the trace grows with what it touched, not with the
# namespace: the kernel keeps, from one cell to the next, the fingerprints,
# an index from the ids of held objects to the names holding them
# (`Kernel.holders`, so the names a cell reached are looked up, not
# searched for), the alias groups (`AliasIndex`) and a copy of the
# namespace. The names a cell bound or deleted are found in C (`changes`).
# Whatever changed the namespace between cells (a restore, a reset, a
# thread a cell started) makes the next cell's trace start from the
# namespace as it is.

FP_FULL_BYTES = 1 << 14
FP_HASH_CAP = 1 << 28
FP_ROW_WORDS = 1021
FP_BLOCK_ROWS = 128
HOLD_NODES = 4096
HOLD_DEPTH = 8
FP_SAMPLES = 2048
FP_EDGE = 64
FP_CHUNK = 1 << 8
FP_CHUNKS = 64
FP_ITEMS = 4096
FP_PICKLE_BYTES = 1 << 16
FP_DEPTH = 3
TRACE_FILES = 256
TRACE_NAMES = 4096
# pyplot's figures whose changes are looked at after each cell (the newest).
MATPLOTLIB_FIGURES = 1024

_ATOMIC = (int, float, complex, bool, str, bytes, type(None), range, type(Ellipsis))
_OPAQUE = (types.ModuleType, types.FunctionType, types.BuiltinFunctionType, types.MethodType,
           type, types.CodeType)
_SKIPPED_PREFIXES = tuple(sorted({os.path.join(p, "") for p in (
    sys.prefix, sys.base_prefix, sys.exec_prefix, sys.base_exec_prefix)} | {
    "/proc/", "/sys/", "/dev/"}))


class PickleLimit(Exception):
    pass


class BoundedHash:
    """A pickle sink that hashes and stops past a byte limit."""

    def __init__(self, limit):
        self.hash = hashlib.blake2b(digest_size=16)
        self.left = limit

    def write(self, data):
        self.left -= len(data)
        if self.left < 0:
            raise PickleLimit()
        self.hash.update(data)


def _bounded_flat(array, limit):
    """At most `limit` elements of an array, evenly spaced, without copying
    more than those (a reshape of a strided view would copy it all)."""
    if array.flags.c_contiguous or array.flags.f_contiguous:
        flat = array.ravel(order="K")  # a view in either order
        return flat if flat.size <= limit else flat[::flat.size // limit + 1]
    if array.size <= limit:
        return array.ravel(order="K")
    step = array.size // limit + 1
    return array.flat[list(range(0, array.size, step))]


def _feed_buffer(h, buffer):
    """Feeds a buffer's bytes (a bytearray, a memoryview): all of them up to
    FP_FULL_BYTES, else FP_CHUNKS evenly spaced chunks."""
    try:
        view = memoryview(buffer).cast("B")
    except (TypeError, ValueError, BufferError):
        h.update(id(buffer).to_bytes(8, "little"))
        return
    size = len(view)
    # CRC-32 rather than the running hash: four times as fast, and a
    # fingerprint only has to tell a value from its own earlier self.
    if size <= FP_HASH_CAP:
        crc = zlib.crc32(view)
    else:
        _over_cap[0] = True
        crc = 0
        step = (size - FP_CHUNK) // (FP_CHUNKS - 1)
        for index in range(FP_CHUNKS):
            start = index * step
            crc = zlib.crc32(view[start:start + FP_CHUNK], crc)
    h.update(size.to_bytes(8, "little") + crc.to_bytes(4, "little"))


# id() of the notebook namespace, which holdings() never enters.
_namespace_id = [None]

# Set by a fingerprint that had to sample an array past FP_HASH_CAP.
_over_cap = [False]


def _word_sums(array):
    """All of an array's bytes, cheaply: its data as unsigned 64-bit words
    (bytes when the size is not a multiple of 8) laid out in rows of
    FP_ROW_WORDS words; the CRC of every row's sum and of every column's
    sum (numpy's own reductions, wrapping modulo 2**64), taken a block of
    FP_BLOCK_ROWS rows at a time so that the data is read from memory once.
    A change of one element changes its row's sum; a swap of two different
    elements changes a row's or a column's; only changes that cancel
    exactly in every row and every column they touch go unseen."""
    flat = array.ravel(order="K")  # a copy only for a non-contiguous array
    words = flat.view("u1")
    if words.size % 8 == 0:
        words = words.view("<u8")
    crc = 0
    full = words.size - words.size % FP_ROW_WORDS
    columns = None
    step = FP_ROW_WORDS * FP_BLOCK_ROWS
    for start in range(0, full, step):
        rows = words[start:min(start + step, full)].reshape(-1, FP_ROW_WORDS)
        crc = zlib.crc32(rows.sum(axis=1), crc)
        if columns is None:
            columns = rows.sum(axis=0)
        else:
            columns += rows.sum(axis=0)
    if columns is not None:
        crc = zlib.crc32(columns, crc)
    return zlib.crc32(words[full:].tobytes(), crc)


# ndarray type -> the offset of its data pointer in the object, or None
# (see _array_data).
_data_offsets = {}


def _array_data(array):
    """The address of an array's data: read from the object (the field after
    the object header, where numpy's C struct keeps it) once that offset is
    checked on probes of the type, else from `__array_interface__`, which
    builds a dict (about 3 µs)."""
    kind = type(array)
    offset = _data_offsets.get(kind, _MISSING)
    if offset is _MISSING:
        offset = 2 * ctypes.sizeof(ctypes.c_void_p)
        try:
            # One element or none, copied (never the whole array).
            probes = [array.flat[:0], array.flat[:1]]
            if any(ctypes.c_void_p.from_address(id(probe) + offset).value
                   != probe.__array_interface__["data"][0] for probe in probes):
                offset = None
        except Exception:
            offset = None
        _data_offsets[kind] = offset
    if offset is None:
        return array.__array_interface__["data"][0]
    return ctypes.c_void_p.from_address(id(array) + offset).value or 0


def _feed_ndarray(h, array):
    # Shape, type and strides by their hash (a repr costs 2.5 µs), then
    # where the data is.
    h.update(hash((array.shape, array.dtype.str, array.strides)).to_bytes(
        8, "little", signed=True))
    try:
        h.update(_array_data(array).to_bytes(8, "little"))
    except Exception:
        pass
    if array.dtype.hasobject:
        # Object arrays (strings in pandas): the elements themselves, bounded.
        _feed_items(h, tuple(_bounded_flat(array, FP_ITEMS)), 1)
        return
    # All the data up to FP_FULL_BYTES by CRC-32, up to FP_HASH_CAP by word
    # sums; past it FP_SAMPLES elements spread evenly over the whole array
    # plus its first and last elements, and the array counts as changed by
    # every cell that could reach it.
    if array.nbytes <= FP_FULL_BYTES:
        h.update(zlib.crc32(array.tobytes()).to_bytes(4, "little"))
        return
    if array.nbytes <= FP_HASH_CAP:
        h.update(b"w" + _word_sums(array).to_bytes(4, "little"))
        return
    _over_cap[0] = True
    data = _bounded_flat(array, FP_SAMPLES).tobytes()
    if array.flags.c_contiguous or array.flags.f_contiguous:
        flat = array.ravel(order="K")
        data += flat[:FP_EDGE].tobytes() + flat[-FP_EDGE:].tobytes()
    h.update(zlib.crc32(data).to_bytes(4, "little"))


def _feed_pandas(h, value, depth):
    kind = type(value).__name__
    h.update(kind.encode())
    if kind in ("DataFrame", "Series"):
        h.update(repr(getattr(value, "shape", None)).encode())
        h.update(id(value.index).to_bytes(8, "little"))
        _feed(h, value.index, depth - 1)
        if kind == "DataFrame":
            h.update(id(value.columns).to_bytes(8, "little"))
            _feed(h, value.columns, depth - 1)
        else:
            h.update(repr(value.name).encode())
        manager = getattr(value, "_mgr", None)
        arrays = getattr(manager, "arrays", None)
        if arrays is None:
            arrays = [value.to_numpy()]
        for array in arrays[:256]:
            h.update(id(array).to_bytes(8, "little"))
            _feed(h, array, depth - 1)
        return
    if kind.endswith("Index"):
        # tuple(): pandas' own repr of the names is slow.
        h.update(repr((len(value), tuple(getattr(value, "names", ()) or ()))).encode())
        if kind == "RangeIndex":
            h.update(repr((value.start, value.stop, value.step)).encode())
            return
        data = getattr(value, "_data", None)
        if data is None:
            data = value.to_numpy()
        _feed(h, data, depth - 1)
        return
    # Extension arrays (Categorical, masked arrays, ...): their numpy parts.
    for part in ("_ndarray", "_data", "_mask", "_codes"):
        inner = getattr(value, part, None)
        if inner is not None and type(inner).__module__ == "numpy":
            _feed(h, inner, depth - 1)
    h.update(repr(len(value) if hasattr(value, "__len__") else None).encode())


class _ChangeCount:
    """A figure's `stale_callback`, wrapped to count its changes.

    matplotlib marks an artist stale on every change that would show when
    the figure is drawn next (a line restyled, a title set, data added) and
    passes the mark up through its axes to the figure, whose callback is
    called each time: pyplot's redraw in interactive mode, or none. This
    counts those calls, then makes the call it replaced. Marks made while
    the figure is being saved or drawn for pyplot (`plt.savefig` draws it
    again once saved) are not counted: drawing computes tick labels and
    positions, which is not a change made by the cell, and pyplot skips them
    too. Artists set `animated` pass no marks up, and changes matplotlib
    makes without a mark (an attribute set directly) are not seen."""

    __slots__ = ("inner", "count")

    def __init__(self, inner):
        self.inner = inner
        self.count = 0

    def __call__(self, figure, value):
        try:
            canvas = figure.canvas
            drawing = canvas.is_saving() or getattr(canvas, "_is_idle_drawing", False)
        except Exception:
            drawing = False
        if not drawing:
            self.count += 1
        inner = self.inner
        if inner is not None:
            inner(figure, value)


def _root_figure(value):
    """The figure `value` is drawn in (the top one, for a subfigure), or
    None."""
    figure = value if type(value).__name__ in ("Figure", "SubFigure") else getattr(
        value, "figure", None)
    for _ in range(16):
        parent = getattr(figure, "figure", None)
        if parent is None or parent is figure:
            break
        figure = parent
    return figure


def _feed_matplotlib(h, value):
    """A matplotlib object: the figure it is drawn in, by identity and its
    count of changes (`_ChangeCount`, installed on the figure the first
    time), in about a microsecond however much the figure holds. A figure
    whose callback cannot be replaced: its axes, their artists' count,
    titles, labels and data limits."""
    figure = _root_figure(value)
    if figure is None:
        h.update(b"-")
        return
    axes = getattr(figure, "axes", None) or []
    h.update(id(figure).to_bytes(8, "little") + len(axes).to_bytes(8, "little"))
    try:
        counter = figure.stale_callback
        if type(counter) is not _ChangeCount:
            counter = _ChangeCount(counter)
            figure.stale_callback = counter
        # Its id too: a callback replaced by the cell (and so the counter
        # installed afresh) counts as a change.
        h.update(id(counter).to_bytes(8, "little") + counter.count.to_bytes(8, "little"))
        return
    except (KeyboardInterrupt, SystemExit):
        raise
    except BaseException:
        pass
    for ax in axes[:64]:
        try:
            # dataLim, not get_xlim(): reading the view limits autoscales.
            h.update(repr((len(ax.get_children()), ax.get_title(), ax.get_xlabel(),
                           ax.get_ylabel(), ax.dataLim.bounds)).encode())
        except Exception:
            h.update(b"?")


def _feed_items(h, items, depth):
    """Container items: hashed together when hashable, else one by one."""
    count = len(items)
    h.update(count.to_bytes(8, "little"))
    if count > FP_ITEMS:
        step = count // FP_ITEMS + 1
        items = [items[i] for i in range(0, count, step)] + [items[-1]]
    try:
        h.update(hash(tuple(items)).to_bytes(8, "little", signed=True))
        return
    except TypeError:
        pass
    for item in items:
        if isinstance(item, _ATOMIC):
            h.update(hash(item).to_bytes(8, "little", signed=True))
        else:
            h.update(id(item).to_bytes(8, "little"))
            if depth > 0:
                _feed(h, item, depth - 1)


def _function_state(function):
    """What a function holds that a cell can change without rebinding it:
    its defaults, the contents of its closure's cells and its attributes
    (empty for most functions)."""
    state = list(function.__defaults__ or ())
    if function.__kwdefaults__:
        state.extend(function.__kwdefaults__.values())
    for cell in function.__closure__ or ():
        try:
            state.append(cell.cell_contents)
        except ValueError:
            state.append(_MISSING)
    attributes = getattr(function, "__dict__", None)
    if attributes:
        for name, value in attributes.items():
            state.append(name)
            state.append(value)
    return state


def _feed(h, value, depth):
    kind = type(value)
    if isinstance(value, _ATOMIC):
        h.update(hash(value).to_bytes(8, "little", signed=True))
        return
    if kind is types.FunctionType:
        # The function, and the state it keeps (a default list it appends
        # to, a counter in its closure): calling it changes that state.
        h.update(id(value).to_bytes(8, "little"))
        if depth > 0:
            # Item by item, never by the hash of a tuple of them: an
            # instance in a closure hashes by identity, not by its state.
            for item in _function_state(value)[:FP_ITEMS]:
                if isinstance(item, _ATOMIC):
                    h.update(hash(item).to_bytes(8, "little", signed=True))
                else:
                    h.update(id(item).to_bytes(8, "little"))
                    _feed(h, item, depth - 1)
        return
    if isinstance(value, _OPAQUE):
        h.update(id(value).to_bytes(8, "little"))
        return
    module = getattr(kind, "__module__", "") or ""
    if module == "numpy" and kind.__name__ == "ndarray":
        _feed_ndarray(h, value)
        return
    if module.startswith("pandas."):
        _feed_pandas(h, value, depth)
        return
    if module.startswith("matplotlib."):
        _feed_matplotlib(h, value)
        return
    if module.startswith("numpy.random") and hasattr(value, "bit_generator"):
        _feed_state(h, value.bit_generator.state)
        return
    if depth <= 0:
        h.update(id(value).to_bytes(8, "little"))
        return
    if isinstance(value, (list, tuple)):
        _feed_items(h, value, depth)
        return
    if isinstance(value, dict):
        h.update(b"d")
        _feed_items(h, list(value.keys()), depth)
        _feed_items(h, list(value.values()), depth)
        return
    if isinstance(value, (set, frozenset)):
        h.update(len(value).to_bytes(8, "little"))
        try:
            h.update(hash(frozenset(value)).to_bytes(8, "little", signed=True))
        except TypeError:
            pass
        return
    if isinstance(value, memoryview):
        owner = value.obj
        if type(owner).__name__ == "ndarray" and type(owner).__module__ == "numpy":
            # All of the array the view is over, by its (cheaper) word sums.
            h.update(b"m" + repr((value.format, value.shape)).encode())
            _feed_ndarray(h, owner)
            return
    if isinstance(value, (bytearray, memoryview)):
        _feed_buffer(h, value)
        return
    if module == "collections" and hasattr(value, "__len__"):
        _feed_items(h, list(value), depth)
        return
    # Small values of other kinds: a hash of their pickle.
    sink = BoundedHash(FP_PICKLE_BYTES)
    try:
        pickle.Pickler(sink, protocol=5).dump(value)
        h.update(sink.hash.digest())
        return
    except (KeyboardInterrupt, SystemExit):
        raise
    except PickleLimit:
        pass
    except BaseException:
        # What an unpicklable object keeps in C (a generator's frame, an
        # iterator's position, a file's offset) is not seen: such a value
        # counts as changed by every cell that could reach it, as a sampled
        # array does.
        _over_cap[0] = True
    # Large or unpicklable objects: their attributes, shallowly.
    attributes = getattr(value, "__dict__", None)
    if isinstance(attributes, dict):
        h.update(b"o")
        _feed_items(h, list(attributes.keys()), 0)
        _feed_items(h, list(attributes.values()), depth - 1)
    else:
        h.update(id(value).to_bytes(8, "little"))


def _feed_state(h, state):
    """A generator's state: a dict of numbers, strings and arrays."""
    if isinstance(state, dict):
        for key in sorted(state):
            h.update(repr(key).encode())
            _feed_state(h, state[key])
    elif type(state).__module__ == "numpy" and hasattr(state, "tobytes"):
        h.update(state.tobytes())
    else:
        h.update(repr(state).encode())


def fingerprint(value):
    """A bounded fingerprint of `value`, or None for values that cannot be
    changed in place (numbers, strings, modules, classes, functions that
    keep no defaults, closure or attributes)."""
    if isinstance(value, _ATOMIC) or isinstance(value, _OPAQUE) and not (
            type(value) is types.FunctionType and (
                value.__defaults__ or value.__kwdefaults__ or value.__closure__
                or getattr(value, "__dict__", None))):
        return None
    h = hashlib.blake2b(digest_size=16)
    try:
        _feed(h, value, FP_DEPTH)
    except (KeyboardInterrupt, SystemExit):
        raise
    except BaseException as error:
        # A value whose inspection fails (a broken __len__, a lazy proxy):
        # identity only, and a note that the value could not be read.
        h.update(("unreadable %s" % type(error).__name__).encode())
    return h.digest()


def _array_roots(array, out):
    """The array and every object under it through `.base`: the memory a
    view shares with its base (and a pandas column with its block)."""
    node = array
    for _ in range(64):
        out.add(id(node))
        node = getattr(node, "base", None)
        if node is None:
            return
        if type(node).__name__ != "ndarray":
            out.add(id(node))
            return


def holdings(value):
    """The ids of the objects and the memory `value` holds, through which a
    cell that reaches it could change another value: containers and their
    items, instances' attributes, classes' attributes, the defaults and
    closures of functions, numpy arrays' bases, pandas objects' blocks and
    indexes, and what the garbage collector says other objects refer to.
    None when the walk is cut short (past HOLD_DEPTH levels or HOLD_NODES
    objects), meaning "could hold anything". Modules, classes of libraries
    and matplotlib objects (which copy the data they are given) are not
    entered.

    Returned with the part of them the value's pickle holds as copies (a
    pair): not what is pickled by reference (classes and functions, and
    what is reached through them), nor tuples and frozensets, which cannot
    change (their items count). A value that is itself a function is
    restored by re-running its cell, not from a blob: what its defaults,
    closure and attributes hold counts as copied (that cell must re-run
    when another name holding it is loaded apart), though not the function
    itself. Two names whose copies meet share an
    object that restoring them from separate blobs would split."""
    out = set()
    refs = set()
    budget = HOLD_NODES
    level = [value]
    level_refs = []
    # Level by level (no tuple per object: allocations wake the collector);
    # what is reached through a class or a function goes in a list of its
    # own (by reference).
    for depth in range(HOLD_DEPTH + 1):
        below = []
        below_refs = []
        for by_reference, items in ((False, level), (True, level_refs)):
            for item in items:
                if isinstance(item, _ATOMIC) or isinstance(item, types.ModuleType):
                    continue
                key = id(item)
                if key in out:
                    continue
                budget -= 1
                if budget < 0:
                    return None
                kind = type(item)
                module = getattr(kind, "__module__", "") or ""
                if by_reference or isinstance(item, type) or (
                        depth and isinstance(item, types.FunctionType)):
                    push = below_refs.append
                    extend = below_refs.extend
                    mark = True
                else:
                    # The value itself a function (defined in a cell: it has
                    # no blob, its cell re-runs): what its defaults, closure
                    # and attributes hold is held as a copy would be, since
                    # loading another name's blob parts them from it.
                    push = below.append
                    extend = below.extend
                    mark = isinstance(item, (tuple, frozenset, types.FunctionType))
                if module == "numpy" and kind.__name__ == "ndarray":
                    if by_reference:
                        roots = set()
                        _array_roots(item, roots)
                        out.update(roots)
                        refs.update(roots)
                    else:
                        _array_roots(item, out)
                    if item.dtype.hasobject:
                        if item.size > FP_ITEMS:
                            return None
                        extend(item.ravel(order="K"))
                    continue
                out.add(key)
                if mark:
                    refs.add(key)
                if module.startswith("matplotlib."):
                    # Not entered, but its figure is held: a cell that reaches
                    # one artist may change any other of the figure (they share
                    # its count of changes).
                    figure = _root_figure(item)
                    if figure is not None:
                        out.add(id(figure))
                        if by_reference:
                            refs.add(id(figure))
                    continue
                if module.startswith("pandas."):
                    # Attributes by kind: DataFrame._data warns, and warnings are slow.
                    name = kind.__name__
                    if name in ("DataFrame", "Series"):
                        wanted = ("_mgr", "index", "columns") if name == "DataFrame" else (
                            "_mgr", "index")
                    elif name.endswith("Index"):
                        wanted = ("_data",)
                    elif name.endswith("Manager"):
                        wanted = ("arrays",)
                    else:
                        wanted = ("_ndarray", "_data", "_mask", "_codes")
                    for part in wanted:
                        inner = getattr(item, part, None)
                        if isinstance(inner, list) and name.endswith("Manager"):
                            extend(inner[:FP_ITEMS])
                        elif inner is not None:
                            push(inner)
                    continue
                if isinstance(item, (list, tuple, set, frozenset)) or (
                        module == "collections" and hasattr(item, "__iter__")
                        and not isinstance(item, dict)):
                    if len(item) > FP_ITEMS:
                        # Past the bound, unless every sampled item is atomic.
                        sample = list(item)[::len(item) // FP_ITEMS + 1]
                        if any(not isinstance(x, _ATOMIC) for x in sample):
                            return None
                        continue
                    extend(item)
                    continue
                if isinstance(item, dict):
                    if len(item) > FP_ITEMS:
                        return None
                    extend(item.values())
                    extend(item.keys())
                    continue
                if isinstance(item, types.FunctionType):
                    extend(item.__defaults__ or ())
                    extend((item.__kwdefaults__ or {}).values())
                    attributes = getattr(item, "__dict__", None)
                    if attributes:
                        extend(attributes.values())
                    for cell in item.__closure__ or ():
                        try:
                            push(cell.cell_contents)
                        except ValueError:
                            pass
                    continue
                if isinstance(item, type):
                    if item.__module__ == "__main__":
                        extend(list(vars(item).values()))
                    continue
                if isinstance(item, types.CodeType):
                    continue
                if isinstance(item, memoryview):
                    push(item.obj)
                    continue
                if module == "numpy":
                    # Iterators and other numpy objects over an array (a.flat).
                    base = getattr(item, "base", None)
                    if base is not None:
                        push(base)
                # Anything else (instances, bound methods, partials, iterators):
                # what the garbage collector says it refers to, but never the
                # notebook namespace itself, modules, or classes from libraries.
                for referent in gc.get_referents(item):
                    if id(referent) == _namespace_id[0] or isinstance(
                            referent, (types.ModuleType, types.CodeType)):
                        continue
                    if isinstance(referent, type) and referent.__module__ != "__main__":
                        continue
                    push(referent)
        level = below
        level_refs = below_refs
        if not level and not level_refs:
            break
    else:
        # Objects left past HOLD_DEPTH levels: unknown unless all atomic.
        if any(not isinstance(x, _ATOMIC) and not isinstance(x, types.ModuleType)
               for x in itertools.chain(level, level_refs)):
            return None
    held = frozenset(out)
    return held, (held - refs if refs else held)


def fingerprint_entry(value):
    """(value, fingerprint, holdings, past the cap, copied holdings) of a
    namespace value (see `holdings`; the holdings None when unknown)."""
    _over_cap[0] = False
    fp = fingerprint(value)
    over = _over_cap[0]
    try:
        found = holdings(value)
    except (KeyboardInterrupt, SystemExit):
        raise
    except BaseException:
        found = None
    held, copied = found if found is not None else (None, None)
    return value, fp, held, over, copied


# Names whose value, read by a cell, reaches every value of the namespace
# without loading its name (globals(), frames, the garbage collector).
ESCAPES = frozenset(("globals", "vars", "locals", "dir", "__builtins__"))
ESCAPE_MODULES = frozenset(("gc", "sys", "inspect", "ctypes", "__main__", "builtins"))


def escapes(module):
    """Whether a cell that reads `module` could reach any value: a module
    that reaches into the interpreter (ESCAPE_MODULES), or the notebook's
    own code (a module outside the interpreter's directories, which may
    keep references to the notebook's values in its globals)."""
    if module.__name__.split(".")[0] in ESCAPE_MODULES:
        return True
    path = getattr(module, "__file__", None)
    return isinstance(path, str) and not os.path.abspath(path).startswith(_SKIPPED_PREFIXES)


# numpy's MT19937 state as laid out in C: uint32_t key[624]; int pos.
_MT_STATE_BYTES = 624 * 4 + 4
# RandomState type -> where it keeps its cached Gaussian (see
# _numpy_gauss_offset), or None when it could not be found.
_gauss_offsets = {}


# random.Random type -> where its C state (624 words, then the index) is,
# or None (see _random_offsets).
_random_layouts = {}


def _random_offsets(kind):
    """Where a random.Random object keeps its Mersenne Twister in C: the
    offsets of the 624 state words and of the index, found on two fresh
    instances and checked against `getstate`; None unless each is found
    exactly once in both. The global generator is never touched."""
    base = kind.__mro__[1]
    found = []
    for seed in (12345, 67890):
        probe = kind(seed)
        probe.getrandbits(32 * 100)
        words = base.getstate(probe)
        raw = ctypes.string_at(id(probe), base.__basicsize__)
        state = struct.pack("624I", *words[:624])
        at = raw.find(state)
        if at < 0 or raw.find(state, at + 1) >= 0:
            return None
        index = struct.pack("i", words[624])
        candidates = [i for i in range(0, len(raw) - 3, 4)
                      if raw[i:i + 4] == index and not at <= i < at + len(state)]
        if len(candidates) != 1:
            return None
        found.append((at, candidates[0]))
    return found[0] if found[0] == found[1] else None


def _random_state(module):
    """The `random` module's generator state. For the stock random.Random,
    the bytes of its C state and `gauss_next`, read in about a microsecond
    (`getstate` builds a tuple of 625 ints: ~10 µs a cell); else
    `getstate()`."""
    generator = getattr(module.getstate, "__self__", None)
    kind = type(generator)
    if kind is getattr(module, "Random", None) and isinstance(kind, type):
        layout = _random_layouts.get(kind, _MISSING)
        if layout is _MISSING:
            try:
                layout = _random_offsets(kind)
            except Exception:
                layout = None
            _random_layouts[kind] = layout
        if layout is not None:
            at, index = layout
            view = _memory_view(generator, ((at, 624 * 4), (index, 4)))
            return view[0].raw, view[1].raw, generator.gauss_next
    return module.getstate()


# id(owner) -> (owner, [ctypes arrays over parts of its memory]).
_views = {}


def _memory_view(owner, parts, base=None):
    """ctypes arrays over `parts` ((offset, size) from `base`, else from the
    object's own address) of the memory of `owner`, which the cache keeps
    alive so the memory stays valid: read with `.raw` each cell, with no
    new object and no audit event (as ctypes.string_at makes)."""
    cached = _views.get(id(owner))
    if cached is None or cached[0] is not owner:
        start = id(owner) if base is None else base
        if len(_views) >= 16:
            _views.clear()
        cached = _views[id(owner)] = (owner, [(ctypes.c_char * size).from_address(start + at)
                                             for at, size in parts])
    return cached[1]


def _numpy_gauss_offset(kind, mt19937):
    """Where a numpy RandomState object keeps its cached Gaussian: the
    offset of `has_gauss` (a C int; `gauss`, a double, is 8 bytes on), found
    on a fresh instance by setting three known states and reading the object
    back; None unless exactly one offset matches all three, nothing else in
    the object moved, and the MT19937 state reads back from
    `ctypes.state_address` as set. The global generator is never touched."""
    import numpy
    probe = kind(mt19937(12345))
    size = kind.__basicsize__
    key = numpy.arange(1, 625, dtype=numpy.uint32) * numpy.uint32(2654435761)
    samples = []
    for has, value in ((1, 0.8765432101234567), (0, -2.5), (1, 1234.0625)):
        probe.set_state(("MT19937", key, 17, has, value))
        samples.append((has, value, ctypes.string_at(id(probe), size)))
    moved = {i for i in range(size)
             if len({raw[i] for _, _, raw in samples}) > 1}
    found = None
    for at in range(0, size - 15, 4):
        if all(raw[at:at + 4] == struct.pack("i", has)
               and raw[at + 8:at + 16] == struct.pack("d", value)
               for has, value, raw in samples):
            if found is not None:
                return None
            found = at
    if found is None or not moved <= set(range(found, found + 16)):
        return None
    bits = probe._bit_generator
    expected = key.tobytes() + struct.pack("i", 17)
    if ctypes.string_at(bits.ctypes.state_address, _MT_STATE_BYTES) != expected:
        return None
    return found


def _numpy_state(module):
    """numpy's global generator state. For the legacy RandomState on
    MT19937 (the default), the bytes of its C state and cached Gaussian,
    read in about a microsecond (`get_state` builds its 624-word key one
    word at a time: ~0.07 ms a cell); else a hash of `get_state`."""
    generator = getattr(module.get_state, "__self__", None)
    kind = type(generator)
    mtrand = sys.modules.get("numpy.random.mtrand")
    mt19937 = getattr(module, "MT19937", None)
    if mtrand is not None and kind is getattr(mtrand, "RandomState", None) \
            and isinstance(mt19937, type):
        offset = _gauss_offsets.get(kind, _MISSING)
        if offset is _MISSING:
            try:
                offset = _numpy_gauss_offset(kind, mt19937)
            except Exception:
                offset = None
            _gauss_offsets[kind] = offset
        bits = generator._bit_generator
        if offset is not None and type(bits) is mt19937:
            state = _memory_view(bits, ((0, _MT_STATE_BYTES),), bits.ctypes.state_address)
            gauss = _memory_view(generator, ((offset, 4), (offset + 8, 8)))
            return id(bits), state[0].raw, gauss[0].raw, gauss[1].raw
    h = hashlib.blake2b(digest_size=16)
    _feed_state(h, module.get_state(legacy=False))
    return h.digest()


def state_fingerprints():
    """Snapshots of state kept inside modules that cells change through
    calls: the random generators and pyplot's figures and settings, compared
    with `!=`. Only modules already imported are looked at."""
    states = {}
    module = sys.modules.get("random")
    if module is not None:
        try:
            states["@random"] = _random_state(module)
        except Exception:
            pass
    module = sys.modules.get("numpy.random")
    if module is not None:
        try:
            states["@numpy.random"] = _numpy_state(module)
        except Exception:
            pass
    helpers = sys.modules.get("matplotlib._pylab_helpers")
    if helpers is not None and "matplotlib.pyplot" in sys.modules:
        try:
            h = hashlib.blake2b(digest_size=16)
            # Read without pyplot's accessors, which make a figure current.
            managers = list(helpers.Gcf.figs.items())
            h.update(repr([number for number, _ in managers]).encode())
            for _, manager in managers[-MATPLOTLIB_FIGURES:]:
                _feed_matplotlib(h, manager.canvas.figure)
            # The settings' keys and values as they stand (rcParams'
            # validators store new values), in tuples: half the time of a
            # dict copy, and compared item by item just the same.
            params = sys.modules["matplotlib"].rcParams
            states["@matplotlib"] = (h.digest(), tuple(dict.keys(params)),
                                     tuple(dict.values(params)))
        except Exception:
            pass
    return states


def _open_event(tracker, args):
    try:
        path, mode, flags = args
    except ValueError:
        return
    if isinstance(path, int):
        return
    try:
        path = os.fsdecode(os.fspath(path))
    except (TypeError, ValueError):
        return
    if isinstance(mode, str):
        reads = "r" in mode or "+" in mode
        writes = any(c in mode for c in "wax+")
    else:
        access = (flags or 0) & 3
        reads = access in (os.O_RDONLY, os.O_RDWR)
        writes = access in (os.O_WRONLY, os.O_RDWR) or bool(
            (flags or 0) & (os.O_CREAT | os.O_TRUNC | os.O_APPEND))
    path = os.path.abspath(path)
    if path.startswith(_SKIPPED_PREFIXES) or "__pycache__" in path:
        return
    for wanted, target in ((reads, tracker.files_read), (writes, tracker.files_written)):
        if wanted and path not in target:
            if len(target) < TRACE_FILES:
                target.add(path)
            else:
                tracker.files_dropped += 1


def audit(event, args):
    """The kernel's audit hook: files a running cell opens, code it runs
    through `exec` or `eval`. Does nothing between cells."""
    tracker = _track[0]
    if tracker is None:
        return
    if event == "open":
        _open_event(tracker, args)
    elif event == "exec" and args and isinstance(args[0], types.CodeType):
        # Code compiled from a string ("<string>", "<stdin>"), not the
        # modules that imports execute.
        name = args[0].co_filename
        if name != tracker.filename and name[:1] == "<" and len(tracker.evaluated) < 64:
            tracker.evaluated.append(args[0])


_build_class = builtins.__build_class__
_class_names = {}


def _class_body_loads(code):
    """The names a class body loads by name (LOAD_NAME): looked up in the
    class's own namespace, then in the globals, which Python reads there
    without `Namespace.__getitem__`. Cached per code object."""
    names = _class_names.get(code)
    if names is None:
        names = tuple(sorted({ins.argval for ins in dis.get_instructions(code)
                              if ins.opname == "LOAD_NAME"}))
        if len(_class_names) < 4096:
            _class_names[code] = names
    return names


def build_class(func, name, *bases, **keywords):
    """`builtins.__build_class__` for a running cell: a class body whose
    globals are the notebook's reads them as the cell's reads (every name
    the body loads by name that the namespace holds, or that is missing and
    not a builtin), judged as `Namespace.__getitem__` judges a read. The
    body's functions read at call time, through `Namespace.__getitem__`."""
    tracker = _track[0]
    if tracker is not None and isinstance(func, types.FunctionType) and \
            id(func.__globals__) == _namespace_id[0]:
        ns = func.__globals__
        for key in _class_body_loads(func.__code__):
            if key in tracker.traced:
                continue
            tracker.traced.add(key)
            value = _dict_get(ns, key, _MISSING)
            if value is _MISSING:
                if not hasattr(builtins, key):
                    tracker.reads.add(key)
            elif tracker.before.get(key, _MISSING) is value:
                tracker.reads.add(key)
    return _build_class(func, name, *bases, **keywords)


def changes(before, after):
    """(names bound, names deleted) from dict `before` to dict `after`: a
    name is bound when it is new or holds another object (`is not`). In C
    when no name was deleted or moved (dicts keep their order: a rebound
    name keeps its place, a new one comes last)."""
    keys = list(after)
    count = len(before)
    if keys[:count] == list(before):
        bound = list(itertools.compress(keys, map(operator.is_not, after.values(),
                                                   before.values())))
        bound.extend(keys[count:])
        return bound, []
    bound = [name for name, value in after.items() if before.get(name, _MISSING) is not value]
    deleted = [name for name in before if not _dict_contains(after, name)]
    return bound, deleted


def alias_root(value):
    """The id of the object whose name groups `value` with others: the
    value itself, or for a numpy array the array at the bottom of its
    `.base` chain (a view and its base share memory); None for values
    that cannot be changed in place."""
    if isinstance(value, _ATOMIC) or isinstance(value, _OPAQUE):
        return None
    root = value
    kind = type(value)
    if kind.__name__ == "ndarray" and kind.__module__ == "numpy":
        for _ in range(64):
            base = getattr(root, "base", None)
            if base is None or type(base).__name__ != "ndarray":
                break
            root = base
    return id(root)


class AliasIndex:
    """Groups of names bound to one object, or to numpy arrays over the same
    memory (a view and its base), which restoring the names one by one would
    separate; kept up to date from the names each cell binds, deletes and
    changes in place.
    The ids stay valid: a name's value keeps its root alive."""

    def __init__(self, items):
        self.root_of = {}
        self.names_at = {}
        self.shared = set()
        for name, value in items:
            self.add(name, value)

    def add(self, name, value):
        if name[:2] == "__" and name[-2:] == "__":
            return
        root = alias_root(value)
        if root is None:
            return
        self.root_of[name] = root
        names = self.names_at.setdefault(root, set())
        names.add(name)
        if len(names) > 1:
            self.shared.add(root)

    def remove(self, name):
        root = self.root_of.pop(name, None)
        if root is None:
            return
        names = self.names_at[root]
        names.discard(name)
        if len(names) < 2:
            self.shared.discard(root)
            if not names:
                del self.names_at[root]

    def update(self, ns, bound, deleted):
        for name in deleted:
            self.remove(name)
        for name in bound:
            self.remove(name)
            self.add(name, _dict_getitem(ns, name))

    def groups(self):
        if not self.shared:
            return []
        return sorted(sorted(self.names_at[root]) for root in self.shared)[:TRACE_FILES]


def code_names(code, out, budget=4096):
    """Every global a code object (and the code nested in it) may load."""
    stack = [code]
    while stack and budget > 0:
        item = stack.pop()
        budget -= 1
        out.update(item.co_names)
        for const in item.co_consts:
            if isinstance(const, types.CodeType):
                stack.append(const)


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
        self.trace = bool(config.get("trace", True))
        # What the trace keeps between cells: name -> fingerprint_entry() of
        # its value, the names' ids, the index from ids of objects to the
        # names whose values hold them, and the alias groups, as of the end
        # of the last cell (see forget_trace).
        self.forget_trace()
        # Keys of the namespace that are not strings, set aside between
        # cells (see set_aside_odd_names).
        self.odd = {}
        # state_fingerprints() and the names in sys.modules as of the end of
        # the last cell.
        self.states = None
        self.modules = None
        self.repr = reprlib.Repr()
        self.repr.maxstring = 120
        self.repr.maxother = 120
        self.repr.maxlist = 8
        self.repr.maxtuple = 8
        self.repr.maxdict = 6
        self.repr.maxset = 8
        namespace_type = Namespace if (self.check_reads or self.trace) else dict
        self.ns = namespace_type(__name__="__main__", __builtins__=builtins, __doc__=None)
        _namespace_id[0] = id(self.ns)
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
        # A process a cell forks (`os.fork()` without exec) runs on from the
        # cell into the kernel's own code: it must never answer the host.
        self.forked = False
        if hasattr(os, "register_at_fork"):
            os.register_at_fork(after_in_child=self.in_forked_child)
        if self.blob_dir:
            os.makedirs(os.path.join(self.blob_dir, "tmp"), exist_ok=True)
        threading.Thread(target=self.watch_output, daemon=True).start()
        # Like Jupyter, modules beside the notebook's files are importable,
        # but after the standard library and installed packages, so that a
        # json.py there shadows neither the kernel's modules nor a cell's.
        if "" not in sys.path:
            sys.path.append("")
        if self.trace:
            sys.addaudithook(audit)
            builtins.__build_class__ = build_class
            # Finds where `random`'s generator keeps its state (imported
            # already, by tempfile) now rather than in the first cell.
            state_fingerprints()

    def in_forked_child(self):
        """Runs in every process forked from the kernel once it is set up:
        the protocol descriptors become /dev/null there (a request is never
        read by the child, a reply never written), and the child exits
        quietly when it gets back to the kernel's code (`leave_if_forked`)."""
        self.forked = True
        try:
            null = os.open(os.devnull, os.O_RDWR)
            try:
                for handle in (self.proto_in, self.proto_out):
                    os.dup2(null, handle.fileno())
            finally:
                os.close(null)
        except (OSError, ValueError):
            pass

    def leave_if_forked(self):
        """Ends a forked child that came back from a cell (or from a value's
        unpickling) to the kernel: only the kernel itself replies."""
        if self.forked:
            os._exit(0)

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
        self.leave_if_forked()
        try:
            # As UTF-8, a lone surrogate (a file name or a message made
            # from undecodable bytes) as `?`: JSON readers refuse it.
            text = json.dumps(message, separators=(",", ":"), ensure_ascii=False)
            self.proto_out.write(text.encode("utf-8", "replace") + b"\n")
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
            self.leave_if_forked()
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
                    self.forget_trace()
                    self.odd = {}
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
        if self.check_reads or self.trace:
            tracker = Tracker(filename, before)
        prepared = self.trace_before(before) if self.trace else None
        if self.odd:
            ns.update(self.odd)
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
        self.leave_if_forked()
        self.set_aside_odd_names()
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
        trace = None
        if error is not None:
            # What the cell was to bind may not have been reached: only what
            # it did bind or change is its output.
            declared = []
        if prepared is not None:
            trace = self.trace_after(before, tracker, prepared)
            declared = list(declared) + [name for name in trace["mutated"]
                                         if not name.startswith("@")]
        outputs, deleted = self.summarize(before, declared, snapshot)
        reply["outputs"] = outputs
        reply["deleted"] = deleted
        if tracker is not None and self.check_reads:
            reply["reads"] = sorted(name for name in tracker.observed if type(name) is str)
        if trace is not None:
            reply["trace"] = trace
        return reply

    def set_aside_odd_names(self):
        """Takes keys that are not strings (`globals()[1] = 2`) out of the
        namespace until the next cell runs: what the kernel reads between
        cells is names."""
        ns = self.ns
        if set(map(type, ns)) <= {str}:
            self.odd = {}
            return
        self.odd = {key: _dict_getitem(ns, key) for key in [key for key in ns if type(key) is not str]}
        for key in self.odd:
            dict.__delitem__(ns, key)

    # -- trace -------------------------------------------------------------

    def fingerprint_all(self, items):
        """Fingerprints of the namespace's values, reusing those of values
        that are the very objects fingerprinted at the end of the last
        cell (nothing runs between cells)."""
        cache = self.fps
        fresh = {}
        for name, value in items:
            if name[:2] == "__" and name[-2:] == "__":
                continue
            cached = cache.get(name)
            if cached is not None and cached[0] is value:
                fresh[name] = cached
            else:
                fresh[name] = fingerprint_entry(value)
        return fresh

    def trace_before(self, before):
        """What the trace of the cell about to run compares against: the
        fingerprints of the namespace's values, the states of modules and
        how many modules are imported. When the namespace holds the very
        objects the last cell left (compared in C), its fingerprints are
        taken as they are."""
        start = time.perf_counter()
        if self.last is None or changes(self.last, before) != ([], []):
            self.fps = self.fingerprint_all(before.items())
            self.index_holdings()
            self.roots = None
        fps = self.fps
        states = self.states if self.states is not None else state_fingerprints()
        if self.modules is None:
            self.modules = set(sys.modules)
        return fps, states, len(sys.modules), time.perf_counter() - start

    def forget_trace(self):
        """Drops what the trace keeps between cells (the namespace was
        reset)."""
        self.fps = {}
        self.last = None
        self.holders = {}
        self.unknown = set()
        self.copies = {}
        self.shared = set()
        self.roots = None

    def index_holdings(self):
        """Rebuilds `holders` (object id -> the names whose value holds it)
        and `unknown` (names whose holdings are unknown) from `fps`."""
        self.holders = {}
        self.unknown = set()
        self.copies = {}
        self.shared = set()
        for name, entry in self.fps.items():
            self.hold(name, None, entry[2])
            self.share(name, None, entry[4])

    def hold(self, name, old, new):
        """Moves `name` in the index from holdings `old` to `new` (either
        None for unknown, or a missing entry's _MISSING)."""
        holders = self.holders
        if old is None:
            self.unknown.discard(name)
        elif old is not _MISSING:
            for key in old:
                names = holders.get(key)
                if names is not None:
                    names.discard(name)
                    if not names:
                        del holders[key]
        if new is None:
            self.unknown.add(name)
        elif new is not _MISSING:
            for key in new:
                names = holders.get(key)
                if names is None:
                    holders[key] = {name}
                else:
                    names.add(name)

    def share(self, name, old, new):
        """Moves `name` in the index of copied holdings (object id -> the
        names whose pickle would copy it) from `old` to `new` (None or
        _MISSING for none), keeping `shared`: the ids two names or more
        hold."""
        copies = self.copies
        shared = self.shared
        if old is not None and old is not _MISSING:
            for key in old:
                names = copies.get(key)
                if names is not None:
                    names.discard(name)
                    if len(names) < 2:
                        shared.discard(key)
                        if not names:
                            del copies[key]
        if new is not None and new is not _MISSING:
            for key in new:
                names = copies.get(key)
                if names is None:
                    copies[key] = {name}
                else:
                    names.add(name)
                    if len(names) == 2:
                        shared.add(key)

    def alias_groups(self):
        """Groups of names that share an object: bound to one object (or to
        numpy arrays over the same memory), or holding one mutable object
        their pickles would copy apart (a list held by a dict and by a name
        of its own, a pandas Series and its frame's block)."""
        found = self.roots.groups()
        if not self.shared:
            return found
        group_of = {}
        sets = []
        for names in itertools.chain(found, (self.copies[key] for key in self.shared)):
            merged = set(names)
            for name in names:
                index = group_of.get(name)
                if index is not None and sets[index] is not None:
                    merged |= sets[index]
                    sets[index] = None
            sets.append(merged)
            for name in merged:
                group_of[name] = len(sets) - 1
        return sorted(sorted(group) for group in sets if group is not None)[:TRACE_FILES]

    def reached(self, before, fps_before, tracker, fresh):
        """The ids the cell could have reached (see `holdings`), from the
        names it loaded (by its own code, the functions it called, class
        bodies, code run through exec or eval) and the values it bound
        (`fresh`, their new entries); None when it could have reached
        anything (it loaded `globals`, `vars`, `sys`, `gc`, ..., or a value
        whose holdings are unknown)."""
        names = tracker.traced
        if tracker.evaluated:
            names = set(names)
            for code in tracker.evaluated:
                code_names(code, names)
        if not names.isdisjoint(ESCAPES):
            return None
        reach = set()
        for name in names:
            entry = fps_before.get(name)
            if entry is not None:
                if entry[2] is None:
                    return None
                reach.update(entry[2])
                value = entry[0]
            else:
                value = before.get(name, _MISSING)
            if isinstance(value, types.ModuleType) and escapes(value):
                return None
        for entry in fresh.values():
            value = entry[0]
            if isinstance(value, types.ModuleType):
                if escapes(value):
                    return None
                continue
            if entry[2] is None:
                return None
            reach.update(entry[2])
        return reach

    def trace_after(self, before, tracker, prepared):
        start = time.perf_counter()
        fps_before, states_before, modules_before, spent = prepared
        # Until this trace is complete, the next one starts afresh: an
        # exception raised in it (a cell's signal handler) may leave the
        # fingerprints and the index out of step.
        self.last = None
        # One copy of the namespace for the whole trace: whatever binds a
        # name meanwhile (a thread, a value's pickle hook) is a change the
        # next cell's trace sees.
        after = dict(self.ns)
        bound, deleted = changes(before, after)
        bound = [name for name in bound if not (name[:2] == "__" and name[-2:] == "__")]
        fresh = {name: fingerprint_entry(after[name]) for name in bound}
        # A value is fingerprinted again when the cell could have reached it
        # (any of them may have changed), else it keeps its fingerprint.
        reach = self.reached(before, fps_before, tracker, fresh)
        if reach is None:
            again = set(fps_before)
        else:
            again = tracker.traced & fps_before.keys()
            again |= self.unknown
            holders = self.holders
            for key in reach & holders.keys():
                again |= holders[key]
        again.difference_update(fresh, deleted)
        again.intersection_update(fps_before.keys())
        mutated = set()
        for name in again:
            old = fps_before[name]
            now = fresh[name] = fingerprint_entry(old[0])
            # Past FP_HASH_CAP an array is only sampled: a cell that reached
            # it may have changed it.
            if old[1] is not None and (now[1] != old[1] or now[3]):
                mutated.add(name)
        # The index and the fingerprints as this cell leaves them (the last
        # cell's, changed in place: the only reference to them is ours).
        fps = fps_before
        for name in deleted:
            entry = fps.pop(name, None)
            if entry is not None:
                self.hold(name, entry[2], _MISSING)
                self.share(name, entry[4], _MISSING)
        for name, entry in fresh.items():
            old = fps.get(name)
            held = old[2] if old is not None else _MISSING
            if held is not entry[2] and held != entry[2]:
                self.hold(name, held, entry[2])
            copied = old[4] if old is not None else _MISSING
            if copied is not entry[4] and copied != entry[4]:
                self.share(name, copied, entry[4])
            fps[name] = entry
        self.fps = fps
        if self.roots is None:
            self.roots = AliasIndex(after.items())
        elif bound or deleted or mutated:
            # A value changed in place may have changed what it shares
            # memory with (`a.data = b`, `a.resize(...)`): its group is read
            # again, as a bound name's is.
            roots, self.roots = self.roots, None
            roots.update(after, [*bound, *(mutated & after.keys())], deleted)
            self.roots = roots
        self.last = after
        states_after = self.states = state_fingerprints()
        for name, value in states_after.items():
            if states_before.get(name, _MISSING) != value:
                mutated.add(name)
        reads = {name for name in tracker.reads
                 if type(name) is str and not (name[:2] == "__" and name[-2:] == "__")}
        if tracker.evaluated:
            names = set()
            for code in tracker.evaluated:
                code_names(code, names)
            reads.update(name for name in names if name in before
                         and not (name[:2] == "__" and name[-2:] == "__"))
        for name in list(reads):
            value = before.get(name, _MISSING)
            if value is _MISSING:
                continue
            owner = value.__name__ if isinstance(value, types.ModuleType) else \
                getattr(type(value), "__module__", "") or ""
            if isinstance(owner, str) and owner.startswith("matplotlib"):
                reads.add("@matplotlib")
                break
        # A cell that moved a generator or drew on a figure also read that state.
        reads.update(name for name in mutated if name.startswith("@"))
        imported = []
        if len(sys.modules) != modules_before or self.modules is None:
            names = set(sys.modules)
            if self.modules is not None:
                imported = sorted({name.split(".")[0] for name in names - self.modules
                                   if name[:1] != "_"})
            self.modules = names
        names_dropped = 0
        fields = {}
        for key, values in (("reads", reads), ("bound", bound), ("deleted", deleted),
                            ("mutated", mutated)):
            ordered = sorted(values)
            if len(ordered) > TRACE_NAMES:
                names_dropped += len(ordered) - TRACE_NAMES
                ordered = ordered[:TRACE_NAMES]
            fields[key] = ordered
        fields["aliases"] = self.alias_groups()
        fields["files_read"] = sorted(tracker.files_read)
        fields["files_written"] = sorted(tracker.files_written)
        fields["imports"] = imported[:TRACE_NAMES]
        fields["dropped"] = names_dropped + tracker.files_dropped
        fields["overhead_us"] = int((spent + time.perf_counter() - start) * 1e6)
        return fields

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
        if isinstance(exc, AttributeError) and ". Did you mean" not in message:
            hint = close_attribute(exc)
            if hint is not None:
                message = "%s. Did you mean: '%s'?" % (message, hint)
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
            if isinstance(shape, tuple) and all(
                    type(n) is int and 0 <= n < 1 << 64 for n in shape):
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
            # A blob already there is kept only if it holds these bytes: one
            # damaged at the same size is replaced. A spilled pickle is
            # renamed into place (cheaper than reading the blob back).
            if sink.file is None and existing_size(path) == sink.size \
                    and _same_bytes(path, sink.buffer):
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


def close_attribute(exc):
    """For an AttributeError on a module (`os.path.joinn`), the public
    attribute of the module closest to the name asked, if one is close, as
    Python suggests for other objects; else None."""
    owner = getattr(exc, "obj", None)
    asked = getattr(exc, "name", None)
    if not isinstance(owner, types.ModuleType) or not isinstance(asked, str):
        return None
    try:
        names = [n for n in dir(owner) if isinstance(n, str) and n[:1] != "_"]
    except Exception:
        return None
    if len(names) > 20000:
        return None
    import difflib
    found = difflib.get_close_matches(asked, names, n=1, cutoff=0.8)
    return found[0] if found else None


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


def close_inherited():
    """Closes every descriptor but 0, 1 and 2: those the host's process
    held without close-on-exec (a supervisor's pipe, a job server's, an
    open file) are not the cells' to read."""
    try:
        fds = [int(fd) for fd in os.listdir("/proc/self/fd")]
    except (OSError, ValueError):
        os.closerange(3, min(os.sysconf("SC_OPEN_MAX"), 1 << 16))
        return
    for fd in fds:
        if fd > 2:
            try:
                os.close(fd)
            except OSError:
                pass


def main():
    close_inherited()
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
