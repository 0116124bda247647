"""Generated protobuf and gRPC modules for kiln.v1, made from the project's proto/ on first use.

The *_pb2.py and *_pb2_grpc.py modules are never committed or edited: on first import they are
generated with grpc_tools.protoc (Debian's python3-grpc-tools) into a cache folder named after a
hash of the .proto files and of the protobuf runtime, so a changed .proto (or a new protobuf)
gets fresh modules and an unchanged one costs nothing. The folder keeps the kiln/v1 layout
because the generated service modules import `kiln.v1.types_pb2`.

Where things are:
  KILN_PROTO_DIR      the folder holding kiln/v1/*.proto (default: proto/ of this source tree)
  XDG_CACHE_HOME      the cache root (default ~/.cache); modules go to
                      $XDG_CACHE_HOME/kiln_client/<hash>/kiln/v1/
"""

import hashlib
import importlib
import os
import shutil
import sys
import tempfile
from pathlib import Path

_MODULES = ("types", "tuning_service", "worker_service")


def proto_root():
    env = os.environ.get("KILN_PROTO_DIR")
    root = Path(env) if env else Path(__file__).resolve().parents[3] / "proto"
    if not (root / "kiln" / "v1" / "types.proto").is_file():
        raise ImportError(
            f"kiln_client: no kiln/v1/types.proto under {root}; run from a Kiln source tree "
            "or set KILN_PROTO_DIR to the folder that holds kiln/v1/*.proto")
    return root


def _digest(root, files):
    from google.protobuf import __version__ as protobuf_version
    h = hashlib.sha256()
    h.update(f"layout 2; protobuf {protobuf_version}\0".encode())  # bump when _generate changes
    for f in files:
        h.update(str(f.relative_to(root)).encode() + b"\0" + f.read_bytes() + b"\0")
    return h.hexdigest()[:16]


def _cache_roots():
    # The usual per-user cache first; a per-user temporary folder where HOME is read-only.
    xdg = os.environ.get("XDG_CACHE_HOME") or os.path.join(os.path.expanduser("~"), ".cache")
    yield Path(xdg) / "kiln_client"
    yield Path(tempfile.gettempdir()) / f"kiln_client-{os.getuid()}"


def _generate(root, files, dest):
    """Runs protoc into a fresh folder beside dest, then renames it into place, so that a
    process importing at the same time sees either no folder or a complete one."""
    try:
        from grpc_tools import protoc
    except ImportError as e:
        raise ImportError(
            "kiln_client needs grpc_tools to generate its modules from proto/: install Debian's "
            "python3-grpc-tools and python3-grpcio (scripts/setup.sh does) and run "
            "/usr/bin/python3") from e
    dest.parent.mkdir(parents=True, exist_ok=True)
    tmp = Path(tempfile.mkdtemp(prefix=".gen-", dir=dest.parent))
    try:
        args = ["grpc_tools.protoc", f"-I{root}"]
        well_known = Path(protoc.__file__).parent / "_proto"
        if well_known.is_dir():
            args.append(f"-I{well_known}")
        args += [f"--python_out={tmp}", f"--grpc_python_out={tmp}"]
        args += [str(f) for f in files]
        rc = protoc.main(args)
        if rc != 0:
            raise ImportError(f"kiln_client: grpc_tools.protoc failed (exit {rc}) on {root}")
        # Regular packages, not namespace ones: a namespace portion loses to any regular `kiln`
        # package later on sys.path.
        for pkg in (tmp / "kiln", tmp / "kiln" / "v1"):
            (pkg / "__init__.py").touch()
        try:
            os.rename(tmp, dest)
        except OSError:
            if not (dest / "kiln" / "v1" / "types_pb2.py").is_file():
                raise
            # Another process finished first with the same inputs: use its folder.
    finally:
        shutil.rmtree(tmp, ignore_errors=True)


def load():
    """{name: module} for types_pb2, tuning_service_pb2(_grpc) and worker_service_pb2(_grpc)."""
    root = proto_root()
    files = sorted((root / "kiln" / "v1").glob("*.proto"))
    key = _digest(root, files)
    errors = []
    for cache in _cache_roots():
        dest = cache / key
        if not (dest / "kiln" / "v1" / "types_pb2.py").is_file():
            try:
                _generate(root, files, dest)
            except OSError as e:  # not writable: try the next root
                errors.append(f"{cache}: {e.strerror or e}")
                continue
        if str(dest) not in sys.path:
            sys.path.insert(0, str(dest))
        break
    else:
        raise ImportError("kiln_client: cannot write the generated modules: " + "; ".join(errors))
    mods = {}
    for name in _MODULES:
        mods[f"{name}_pb2"] = importlib.import_module(f"kiln.v1.{name}_pb2")
        if name != "types":
            mods[f"{name}_pb2_grpc"] = importlib.import_module(f"kiln.v1.{name}_pb2_grpc")
    return mods
