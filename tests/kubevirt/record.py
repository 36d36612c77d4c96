"""Record what KubeVirt's own code answers for kvdev's VMIs into tests/data/kubevirt/<version>.

Run by record.sh with the judge it built: ``record.py JUDGE VERSION COMMIT``. It feeds the judge
``kubevirtlab.judge_input(VERSION)`` and writes ``recording.json`` (the commit, the inputs'
hash, each case's admission and hash) and per case ``defaulted.json``, ``domain.xml``,
``devices.json``, ``launcher-pod.json`` and, for a VMI with a config drive, every file
KubeVirt puts on it under ``config-drive/`` (``openstack/latest/meta_data.json``,
``user_data``, ``network_data.json``: an empty one too, as KubeVirt writes it), and
``crd.yaml`` (virt-operator's VMI CRD). The same checkout writes the same bytes.
"""

from __future__ import annotations

import json
import shutil
import subprocess
import sys
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
import kubevirtlab


def _json(value: Any) -> str:
    return json.dumps(value, indent=2, sort_keys=True, ensure_ascii=False) + "\n"


def _write_case(out: Path, case: kubevirtlab.Case, r: dict[str, Any]) -> list[str]:
    """One case's files; the names written."""
    d = out / case.slug
    d.mkdir()
    texts = {
        "defaulted.json": _json(r["defaulted"]) if r.get("defaulted") is not None else "",
        "domain.xml": r.get("domain") or "",
        "devices.json": _json(r["devices"].get("devices") or []) if r.get("devices") else "",
        "launcher-pod.json": _json(r["pod"]) if r.get("pod") is not None else "",
    }
    written = [name for name, text in texts.items() if text]
    for name in written:
        (d / name).write_text(texts[name])
    for path, text in sorted((r.get("configDrive") or {}).items()):
        name = f"{kubevirtlab.CONFIG_DRIVE}/{path}"
        (d / name).parent.mkdir(parents=True, exist_ok=True)
        (d / name).write_bytes(text.encode())
        written.append(name)
    return written


def main(judge: str, version: str, commit: str) -> None:
    doc = kubevirtlab.judge_input(version)
    ran = subprocess.run([judge], input=json.dumps(doc).encode(), capture_output=True, check=False)
    if ran.returncode != 0:
        sys.exit(f"the judge failed ({ran.returncode}):\n{ran.stderr.decode()[-4000:]}")
    results = {r["name"]: r for r in json.loads(ran.stdout)}
    crd = subprocess.run([judge, "crd"], capture_output=True, check=True).stdout

    out = kubevirtlab.DATA / version
    if out.exists():
        shutil.rmtree(out)
    out.mkdir(parents=True)
    (out / "crd.yaml").write_bytes(crd)
    supported = kubevirtlab.supported()
    entries = []
    for case in kubevirtlab.cases():
        r = results[case.name]
        files = _write_case(out, case, r)
        entry: dict[str, Any] = {
            "name": case.name,
            "source": case.source,
            "dir": case.slug,
            "documentedFor": list(case.documented_for(supported)),
            "inputs": kubevirtlab.case_digest(version, case),
            "admission": r.get("admission"),
            "hostPCI": r.get("hostPCI") or {},
            "files": files,
        }
        if case.wired_from:
            entry["wiredFrom"] = case.wired_from
        for key in ("mutateError", "domainError", "devicesError", "podError"):
            if r.get(key):
                entry[key] = r[key]
        entries.append(entry)
    recording = {
        "kubevirt": {"version": version, "commit": commit},
        "inputs": kubevirtlab.inputs_digest(version),
        "featureGates": doc["featureGates"],
        "bindings": doc["bindings"],
        "recordedBy": kubevirtlab.RECORD,
        "cases": entries,
    }
    (out / "recording.json").write_text(_json(recording))
    refused = [e["name"] for e in entries if not (e["admission"] or {}).get("allowed")]
    print(f"recorded {len(entries)} VMIs for KubeVirt {version} ({commit[:10]}) in {out}")
    for name in refused:
        print(f"  refused: {name}")


if __name__ == "__main__":
    main(*sys.argv[1:4])
