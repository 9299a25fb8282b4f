# Sourced on the GPU machine, from the root of a checkout carrying .gpu/ (scripts/gpu-pack.sh copies
# this file to .gpu/env.sh): `source .gpu/env.sh`. Unpacks the builds into target/, installs the
# wheels into .gpu/site and nvCOMP into .gpu/lib (again only after a new pack), and exports what
# scripts/gpu-measure.sh uses: PYTHONPATH, LD_LIBRARY_PATH (cuFile from the NVIDIA wheels in the
# Python's site-packages, nvCOMP from .gpu/lib), H5GDS_PLUGIN_DIR, H5GDS_PYTHON (python3 unless
# set), H5GDS_PROFILE and Open MPI's run-as-root switches. The test programs embed the path of the
# checkout they were built in: where that path does not exist here, it becomes a link to this one.
gpu_root=$PWD
if [ ! -f "$gpu_root/.gpu/stamp" ]; then
  echo "env.sh: run from the root of the checkout holding .gpu/ (scripts/gpu-pack.sh makes it)" >&2
  return 1
fi
gpu_stamp=$(cat "$gpu_root/.gpu/stamp")
build_root=$(cat "$gpu_root/.gpu/build-root")
if [ "$build_root" != "$gpu_root" ] && [ ! -e "$build_root" ]; then
  mkdir -p "$(dirname "$build_root")" && ln -s "$gpu_root" "$build_root"
fi
export H5GDS_PYTHON=${H5GDS_PYTHON:-python3}
if [ "$(cat "$gpu_root/target/.gpu-stamp" 2>/dev/null)" != "$gpu_stamp" ]; then
  tar -xJf "$gpu_root/.gpu/target.tar.xz" -C "$gpu_root" && echo "$gpu_stamp" >"$gpu_root/target/.gpu-stamp"
fi
if [ "$(cat "$gpu_root/.gpu/site/.stamp" 2>/dev/null)" != "$gpu_stamp" ]; then
  rm -rf "$gpu_root/.gpu/site" "$gpu_root/.gpu/lib"
  mkdir -p "$gpu_root/.gpu/site" "$gpu_root/.gpu/lib"
  xz -dc "$gpu_root/.gpu/libnvcomp.so.6.xz" >"$gpu_root/.gpu/lib/libnvcomp.so.6"
  # The helpers (pytest, cuda-pathfinder) only where this Python lacks them: ahead on PYTHONPATH,
  # another version would shadow the one CuPy was installed with.
  gpu_wheels=()
  for gpu_wheel in "$gpu_root"/.gpu/whl/*.whl; do
    case "$(basename "$gpu_wheel")" in
      cuda_pathfinder-*) gpu_module=cuda.pathfinder ;;
      pytest-* | pluggy-* | iniconfig-* | packaging-*) gpu_module=$(basename "$gpu_wheel" | cut -d- -f1) ;;
      *) gpu_module= ;;
    esac
    [ -n "$gpu_module" ] && "$H5GDS_PYTHON" -c "import $gpu_module" 2>/dev/null && continue
    gpu_wheels+=("$gpu_wheel")
  done
  # All at once; where that fails (a wheel for another Python: KvikIO's rows are then left out and
  # the report says so), one at a time, keeping those that install.
  if ! "$H5GDS_PYTHON" -m pip install --quiet --disable-pip-version-check --no-index --no-deps --no-compile \
    --target "$gpu_root/.gpu/site" "${gpu_wheels[@]}" 2>/dev/null; then
    for gpu_wheel in "${gpu_wheels[@]}"; do
      "$H5GDS_PYTHON" -m pip install --quiet --disable-pip-version-check --no-index --no-deps --no-compile \
        --target "$gpu_root/.gpu/site" "$gpu_wheel" 2>/dev/null ||
        echo "env.sh: $(basename "$gpu_wheel") does not install for $("$H5GDS_PYTHON" -V 2>&1); left out"
    done
  fi
  tar -xJf "$gpu_root/.gpu/hdf5plugin.tar.xz" -C "$gpu_root/.gpu/site"
  echo "$gpu_stamp" >"$gpu_root/.gpu/site/.stamp"
fi
export PYTHONPATH=$gpu_root/.gpu/site${PYTHONPATH:+:$PYTHONPATH}
gpu_cufile=$("$H5GDS_PYTHON" -c '
import glob, os, site, sys
for p in site.getsitepackages() + sys.path + ["/usr/local/cuda/lib64"]:
    hits = glob.glob(os.path.join(p, "nvidia", "**", "libcufile.so.0"), recursive=True)
    hits += glob.glob(os.path.join(p, "libcufile.so.0"))
    if hits:
        print(os.path.dirname(hits[0]))
        break' 2>/dev/null)
export LD_LIBRARY_PATH=${gpu_cufile:+$gpu_cufile:}$gpu_root/.gpu/lib${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}
export H5GDS_PLUGIN_DIR=$gpu_root/target/release H5GDS_PROFILE=$(cat "$gpu_root/.gpu/profile") PYTHONUNBUFFERED=1
export OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1
echo "env.sh: builds in target/$H5GDS_PROFILE, wheels in .gpu/site for $H5GDS_PYTHON," \
  "cuFile from ${gpu_cufile:-nowhere found}, nvCOMP from .gpu/lib"
unset gpu_stamp build_root gpu_wheel gpu_wheels gpu_module gpu_cufile
