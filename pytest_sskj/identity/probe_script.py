"""The program run on every node to say what it runs (stdlib only; it imports none of the probed packages).

It is sent as ``python -c PROBE_PY MODULE...`` over the session's launcher (ssh on remote nodes, a
container runtime in container mode) and prints one JSON object:

``{"hostname", "python", "packages": {name: {"version", "commit", "commit_source", "path", "cuda"}},
"driver": {"version", "cuda", "reason"}, "image": {"name", "digest", "runtime"}}``.

Per package the version comes from the distribution's metadata, else a ``version.py``/``__init__``
assignment read as text.  The source commit, in order: the package directory inside a git checkout
(``.git`` HEAD, its ref resolved through ``refs/`` or ``packed-refs``), the wheel's ``direct_url.json``
``vcs_info.commit_id`` (pip install from git), a build-meta attribute (``flashinfer/_build_meta.py``
``__git_commit__``, torch ``version.py`` ``git_version``, setuptools-scm ``_version.py``
``__commit_id__``, ``__commit__``), or
a ``+g<hex>`` local version tag.  torch's CUDA comes from ``torch/version.py`` (``cuda = '13.0'``), read as
text so no GPU library is loaded.  The driver comes from NVML (``pynvml``) or ``nvidia-smi``; where
there is none, ``reason`` says why.  The image: ``SSKJ_CONTAINER_IMAGE`` / ``SSKJ_CONTAINER_DIGEST`` (set
by the container launcher) or podman's ``/run/.containerenv``.
"""

from __future__ import annotations

__all__ = ["PROBE_PY"]

PROBE_PY = r"""
import importlib.metadata as md, importlib.util, json, os, re, shutil, socket, subprocess, sys

HEX = re.compile(r"^[0-9a-f]{7,40}$")
ASSIGN = r"^\s*{name}\s*(?::\s*str\s*)?=\s*(?:\w+\s*=\s*)*['\"]([^'\"]+)['\"]"

def assigned(path, name):
    try:
        text = open(path, encoding="utf-8", errors="replace").read()
    except OSError:
        return None
    m = re.search(ASSIGN.format(name=re.escape(name)), text, re.M)
    return m.group(1) if m else None

def git_head(start):
    parts = start.replace(os.sep, "/").split("/")
    if "site-packages" in parts or "dist-packages" in parts:
        return None  # an installed package, not a checkout (a venv may itself live in some repository)
    d = start
    while d and d != os.path.dirname(d):
        g = os.path.join(d, ".git")
        if os.path.isfile(g):
            line = open(g).read().strip()
            if line.startswith("gitdir:"):
                g = os.path.join(d, line.split(":", 1)[1].strip())
        if os.path.isdir(g):
            try:
                head = open(os.path.join(g, "HEAD")).read().strip()
            except OSError:
                return None
            if not head.startswith("ref:"):
                return head if HEX.match(head) else None
            ref = head.split(":", 1)[1].strip()
            common = g
            cd = os.path.join(g, "commondir")
            if os.path.isfile(cd):
                common = os.path.normpath(os.path.join(g, open(cd).read().strip()))
            for base in (g, common):
                p = os.path.join(base, ref)
                if os.path.isfile(p):
                    return open(p).read().strip()
            try:
                for line in open(os.path.join(common, "packed-refs")):
                    parts = line.split()
                    if len(parts) == 2 and parts[1] == ref:
                        return parts[0]
            except OSError:
                pass
            return None
        d = os.path.dirname(d)
    return None

def dist_of(module):
    for n in (module, module.replace("_", "-")):
        try:
            return md.distribution(n)
        except Exception:
            continue
    try:
        names = md.packages_distributions().get(module) or []
    except Exception:
        names = []
    for n in names:
        try:
            return md.distribution(n)
        except Exception:
            continue
    return None

def package(module):
    out = {}
    try:
        spec = importlib.util.find_spec(module)
    except Exception:
        spec = None
    dist = dist_of(module)
    if spec is None and dist is None:
        return None
    pkg_dir = None
    if spec is not None and spec.submodule_search_locations:
        pkg_dir = list(spec.submodule_search_locations)[0]
    elif spec is not None and spec.origin:
        pkg_dir = os.path.dirname(spec.origin)
    out["path"] = pkg_dir
    if dist is not None:
        out["version"] = dist.version
        out["distribution"] = dist.metadata["Name"]
    for f, attr in (("version.py", "__version__"), ("_version.py", "__version__"), ("__init__.py", "__version__")):
        if out.get("version") or not pkg_dir:
            break
        out["version"] = assigned(os.path.join(pkg_dir, f), attr)
    commit, source = None, None
    if pkg_dir:
        commit = git_head(pkg_dir)
        source = "git checkout" if commit else None
    if commit is None and dist is not None:
        try:
            du = json.loads(dist.read_text("direct_url.json") or "null") or {}
            commit = (du.get("vcs_info") or {}).get("commit_id")
            source = "direct_url.json vcs_info" if commit else None
        except Exception:
            pass
    if commit is None and pkg_dir:
        for f, attr in (("_build_meta.py", "__git_commit__"), ("version.py", "git_version"),
                        ("_version.py", "__commit_id__"), ("version.py", "__commit__"), ("__init__.py", "__commit__"),
                        ("_version.py", "__commit__")):
            v = (assigned(os.path.join(pkg_dir, f), attr) or "").lower()
            v = v[1:] if v.startswith("g") else v
            if v and HEX.match(v):
                commit, source = v, f"{module}/{f} {attr}"
                break
    if commit is None and out.get("version"):
        m = re.search(r"\+g?([0-9a-f]{7,40})\b", out["version"])
        if m:
            commit, source = m.group(1), "local version tag"
    out["commit"], out["commit_source"] = commit, source
    if module == "torch" and pkg_dir:
        out["cuda"] = assigned(os.path.join(pkg_dir, "version.py"), "cuda")
        out["version"] = assigned(os.path.join(pkg_dir, "version.py"), "__version__") or out.get("version")
    return out

def driver():
    try:
        import pynvml
        pynvml.nvmlInit()
        try:
            v = pynvml.nvmlSystemGetDriverVersion()
            c = pynvml.nvmlSystemGetCudaDriverVersion_v2()
            n = pynvml.nvmlDeviceGetCount()
        finally:
            pynvml.nvmlShutdown()
        v = v.decode() if isinstance(v, bytes) else v
        return {"version": v, "cuda": f"{c // 1000}.{c % 1000 // 10}", "gpus": n, "reason": None}
    except ImportError:
        why = "no pynvml (nvidia-ml-py) in " + sys.executable
    except Exception as exc:
        why = f"NVML: {type(exc).__name__}: {exc}"
    smi = shutil.which("nvidia-smi")
    if smi:
        try:
            r = subprocess.run([smi, "--query-gpu=driver_version", "--format=csv,noheader"],
                               capture_output=True, text=True, timeout=20)
            lines = [x.strip() for x in r.stdout.splitlines() if x.strip()]
            if r.returncode == 0 and lines:
                return {"version": lines[0], "cuda": None, "gpus": len(lines), "reason": None}
            why += f"; nvidia-smi exited {r.returncode}"
        except Exception as exc:
            why += f"; nvidia-smi: {exc}"
    else:
        why += "; no nvidia-smi on PATH"
    return {"version": None, "cuda": None, "gpus": 0, "reason": why}

def image():
    name = os.environ.get("SSKJ_CONTAINER_IMAGE")
    digest = os.environ.get("SSKJ_CONTAINER_DIGEST")
    runtime = os.environ.get("SSKJ_CONTAINER_RUNTIME")
    try:
        for line in open("/run/.containerenv"):
            k, _, v = line.strip().partition("=")
            v = v.strip('"')
            if k == "image" and not name:
                name = v
            elif k == "imageid" and not digest:
                digest = v
            elif k == "engine" and not runtime:
                runtime = v.split("-")[0]
    except OSError:
        pass
    if not runtime and os.path.exists("/.dockerenv"):
        runtime = "docker"
    if not (name or digest or runtime):
        return None
    return {"name": name, "digest": digest, "runtime": runtime}

out = {"hostname": socket.gethostname(), "python": ".".join(map(str, sys.version_info[:3])),
       "packages": {}, "driver": driver(), "image": image()}
for m in sys.argv[1:]:
    p = package(m)
    if p is not None:
        out["packages"][m] = p
print("SSKJ-IDENTITY " + json.dumps(out, sort_keys=True))
"""
