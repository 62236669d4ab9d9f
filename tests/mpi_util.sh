# tests/mpi_util.sh: running several StarPU-MPI ranks on this machine, for the
# multi-rank tests. Sourced; sets MPIRUN (an array: mpirun with the options
# every run needs here) or exits 77 when there is no mpirun.
#   --oversubscribe   more ranks than cores (2 cores here)
#   --allow-run-as-root only when we are root (CI containers)
#   --bind-to none    ranks and their StarPU workers share the cores
#   btl self,vader,tcp and vader without single-copy (CMA needs ptrace
#                     rights containers often lack)
mpirun_bin=${MPIEXEC:-$(command -v mpirun || true)}
if [ -z "$mpirun_bin" ] || [ ! -x "$mpirun_bin" ]; then
    echo "SKIP: no mpirun found (install openmpi-bin, or run scripts/setup.sh)"
    exit 77
fi
MPIRUN=("$mpirun_bin" --oversubscribe --bind-to none --mca btl self,vader,tcp
        --mca btl_vader_single_copy_mechanism none)
[ "$(id -u)" = 0 ] && MPIRUN+=(--allow-run-as-root)
# One StarPU CPU worker per device; no StarPU banner noise per rank.
export STARPU_SILENT=1
