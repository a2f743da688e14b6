#!/bin/sh
# Runs a command with one GPU visible, the one of its node-local rank, as Slurm's
# --gpus-per-task=1 and site wrappers do: each rank then sees its GPU as device 0.
#   mpirun -np 4 tools/one_gpu_per_rank.sh ./train
# The local rank comes from the launcher: MPICH's MPI_LOCALRANKID, Open MPI's
# OMPI_COMM_WORLD_LOCAL_RANK or Slurm's SLURM_LOCALID.
local_rank=${MPI_LOCALRANKID:-${OMPI_COMM_WORLD_LOCAL_RANK:-${SLURM_LOCALID:-}}}
if [ -z "$local_rank" ]; then
  echo "one_gpu_per_rank.sh: no node-local rank (MPI_LOCALRANKID, OMPI_COMM_WORLD_LOCAL_RANK or SLURM_LOCALID): run it under mpirun or srun" >&2
  exit 2
fi
CUDA_VISIBLE_DEVICES=$local_rank exec "$@"
