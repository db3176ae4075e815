#!/usr/bin/env python3
"""image.py OUT.tar NAME:TAG BINARY: writes a one-layer image holding BINARY
at /<its name> as its entrypoint, user 65535, in the docker-archive format
that `ctr image import` reads. Fixed owners and times: the same binary gives
the same image."""
import hashlib
import io
import json
import os
import sys
import tarfile

out, ref, binary = sys.argv[1:4]
name = os.path.basename(binary)

layer = io.BytesIO()
with tarfile.open(fileobj=layer, mode="w", format=tarfile.GNU_FORMAT) as t:
    info = t.gettarinfo(binary, arcname=name)
    info.uid = info.gid = 0
    info.uname = info.gname = ""
    info.mtime = 0
    info.mode = 0o755
    with open(binary, "rb") as f:
        t.addfile(info, f)
layer_bytes = layer.getvalue()
layer_digest = hashlib.sha256(layer_bytes).hexdigest()

config = {
    "architecture": {"x86_64": "amd64", "aarch64": "arm64"}.get(os.uname().machine, os.uname().machine),
    "os": "linux",
    "config": {"Entrypoint": ["/" + name], "User": "65535:65535", "WorkingDir": "/"},
    "rootfs": {"type": "layers", "diff_ids": ["sha256:" + layer_digest]},
}
config_bytes = json.dumps(config, sort_keys=True).encode()
config_digest = hashlib.sha256(config_bytes).hexdigest()
manifest = [{"Config": config_digest + ".json", "RepoTags": [ref], "Layers": [layer_digest + "/layer.tar"]}]

with tarfile.open(out, "w", format=tarfile.GNU_FORMAT) as t:
    def add(member, data):
        info = tarfile.TarInfo(member)
        info.size = len(data)
        info.mtime = 0
        t.addfile(info, io.BytesIO(data))
    add(config_digest + ".json", config_bytes)
    add(layer_digest + "/layer.tar", layer_bytes)
    add("manifest.json", json.dumps(manifest).encode())
