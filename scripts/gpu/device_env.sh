# Sourced by the scripts that run ON THE GPU MACHINE, with $root set to the repository root: unpacks what
# scripts/gpu/stage.sh packed (.device/stage.tar.xz, once), finds the shared libraries a statically linked tern build
# still loads there (cuBLASLt from the CUDA toolkit or from PyTorch's wheels, libgomp staged in .device/lib) and
# sets $site to PyTorch's site-packages (NCCL also comes from there).
if [ -f "$root/.device/stage.tar.xz" ]; then
  tar -C "$root/.device" -xJf "$root/.device/stage.tar.xz" && rm "$root/.device/stage.tar.xz"
fi
site=$(ls -d /opt/torch/.venv/lib/python3*/site-packages 2>/dev/null | head -1)
cublas_dirs=$(ls -d /usr/local/cuda/lib64 /usr/local/cuda/targets/x86_64-linux/lib "$site/nvidia/cu13/lib" \
  "$site/nvidia/cublas/lib" 2>/dev/null | tr '\n' ':')
export LD_LIBRARY_PATH="$root/.device/lib:${cublas_dirs}${LD_LIBRARY_PATH:-}"
export PYTHONUNBUFFERED=1
