#!/usr/bin/env bash
# The GPU run rehearsed on the emulators, so that it cannot rot between GPU sessions
# (scripts/test.sh runs this last, after it has built the debug builds, the emulators, the wheel
# and the wheel's environment): packs .gpu/ with scripts/gpu-pack.sh (the debug builds), copies
# the checkout as a GPU machine receives it (the files git does not ignore, and .gpu/) into a
# temporary directory, sources .gpu/env.sh there and runs `scripts/gpu-measure.sh all` at small
# sizes with h5gds's emulators as libcuda, libcufile and libnvcomp. Fails unless every step
# passes within the run's own time budget, the report (Markdown and JSON, each under 1 MiB) and
# the logs' archive are written, the report says EMULATED, never "ON THE REAL GPU", and it holds
# the from-file-pair step's figures, side by side, with issue 42's goals measured.
#
#   scripts/test-gpu-measure.sh [PYTHON]    (default .venv-wheel/bin/python)
set -euo pipefail
cd "$(dirname "$0")/.."
root=$PWD
python=$root/${1:-.venv-wheel/bin/python}
emulator=$root/target/emulator-lib-python
if [ ! -e "$emulator/libcuda.so.1" ]; then
  echo "test-gpu-measure.sh: $emulator is missing (scripts/test.sh links it)" >&2
  exit 1
fi
scripts/gpu-pack.sh --profile debug --wheel "$(ls target/wheels/h5gds-*-manylinux_2_28_x86_64.whl)"
copy=$(mktemp -d)
trap 'rm -rf "$copy"' EXIT
git ls-files -z --cached --others --exclude-standard | tar -cf - --null -T - .gpu | tar -xf - -C "$copy"
echo "test-gpu-measure.sh: the checkout as it travels: $(du -sm "$copy" | cut -f1) MiB"
# The results stay for a look after a failure.
out=$root/target/gpu-measure-rehearsal
rm -rf "$out"
status=0
(
  cd "$copy"
  export H5GDS_PYTHON=$python
  # shellcheck disable=SC1091 # made by scripts/gpu-pack.sh
  source .gpu/env.sh
  # The emulators ahead of everything env.sh found, as the machine's libcuda/libcufile/libnvcomp; the
  # Rust device tests on the emulator configured as the first real-GPU machine (as scripts/test.sh runs them).
  export LD_LIBRARY_PATH=$emulator:$LD_LIBRARY_PATH H5GDS_EMULATOR_DIR=$emulator H5GDS_EMU_POISON=off \
    H5GDS_TEST_EMULATED_MACHINE=h200-vm H5GDS_EMU_DEVICES=2
  OUT=$out SIZE_MIB=16 REPS=1 DAMAGED_CHUNKS=24 FIRST_READ_SIZES=4K scripts/gpu-measure.sh all
) || status=$?
for file in report.md report.json logs.tar.xz; do
  [ -s "$out/$file" ] || { echo "test-gpu-measure.sh: $file was not written" >&2; exit 1; }
done
"$python" - "$out" <<'EOF'
import json, sys
from pathlib import Path
out = Path(sys.argv[1])
report = json.loads((out / "report.json").read_text())
text = (out / "report.md").read_text()
problems = []
for name in ("report.md", "report.json"):
    if (out / name).stat().st_size >= 1 << 20:
        problems.append(f"{name} is over 1 MiB")
if not report["emulated"] or "ON THE REAL GPU" in text or "EMULATED" not in report["device_label"]:
    problems.append("the report does not say EMULATED (or says ON THE REAL GPU) on the emulators")
unlabelled = [f for f in report["figures"] if f.get("memory") == "device" and not f["emulated"]]
if unlabelled:
    problems.append(f"device figures not labelled EMULATED: {unlabelled[:3]}")
if report["seconds"] > report["budget"]:
    problems.append(f"the run took {report['seconds']} s, over its budget of {report['budget']} s")
failed = [s["name"] + ": " + s["outcome"] for s in report["steps"] if s["outcome"] != "passed"]
if failed:
    problems.append(f"steps that did not pass: {failed}")
if report["tests"]["failed"] or not report["tests"]["passed"]:
    problems.append(f"tests: {report['tests']['headline']}")
if not any(g["met"] is not None for g in report["goals"]):
    problems.append("no goal was measured")
# The from-file-pair step (issue 42): both sides for each memory and layout (the device figures
# are held to EMULATED above, as every device figure), in the side-by-side table, its goals measured.
pair = {(f.get("memory"), f.get("layout"), f["alternative"])
        for f in report["figures"] if f["bench"] == "from_file_pair"}
missing = [want for want in ((memory, layout, side) for memory in ("host", "device")
                             for layout in ("contiguous", "chunked")
                             for side in ("array-io from_file", "h5gds.from_file")) if want not in pair]
if missing:
    problems.append(f"from-file-pair figures missing: {missing}")
rows = [c for c in report["comparisons"] if c["what"].startswith("array-io from_file into ")
        and c["against"].startswith("h5gds.from_file")]
if len(rows) != 4 or any(f"| {c['what']} |" not in text for c in rows):
    problems.append(f"from-file-pair: {len(rows)} side-by-side rows of 4 in the report")
issue42 = [g for g in report["goals"] if g["issue"] == 42]
if len(issue42) != 4 or any(g["met"] is None for g in issue42) or \
        sum(line.startswith("| 42 |") for line in text.splitlines()) != 4:
    problems.append(f"issue 42's goals not all measured and reported: {issue42}")
print(f"test-gpu-measure.sh: {report['device_label']}: {report['tests']['headline']}; goals {report['goals_summary']}")
sys.exit("test-gpu-measure.sh: " + "; ".join(problems) if problems else 0)
EOF
exit "$status"
