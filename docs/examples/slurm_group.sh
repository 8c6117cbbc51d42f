#!/bin/bash
#SBATCH --job-name=prfmap-group
#SBATCH --cpus-per-task=2
#SBATCH --mem=8G
#SBATCH --time=01:00:00
#SBATCH --output=logs/prfmap-group_%j.log
# prfmap's group level, once the participant array (docs/examples/slurm_array.sh) has ended well:
#   sbatch --dependency=afterok:<array job id> slurm_group.sh
set -euo pipefail
BIDS=${BIDS:-/data/study/bids}
OUT=${OUT:-/data/study/derivatives/prfmap}
SIF=${SIF:-/data/containers/prfmap-0.1.0-jax.sif}
PRFMAP=(apptainer run --cleanenv -B "$BIDS:$BIDS:ro" -B "$OUT" "$SIF")  # PRFMAP-COMMAND
srun --ntasks=1 --cpus-per-task="$SLURM_CPUS_PER_TASK" "${PRFMAP[@]}" "$BIDS" "$OUT" group
