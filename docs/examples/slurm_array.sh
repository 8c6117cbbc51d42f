#!/bin/bash
#SBATCH --job-name=prfmap
#SBATCH --gres=gpu:1
#SBATCH --cpus-per-task=4
#SBATCH --mem=16G
#SBATCH --time=02:00:00
#SBATCH --requeue
#SBATCH --open-mode=append
#SBATCH --output=logs/prfmap_%A_%a.log
# prfmap's participant level as a SLURM array: one participant per task, every task writing into one
# output folder (sbatch writes the tasks' logs into logs/: create it first). Submit it with one task
# per row of participants.tsv (at most 8 at once):
#   sbatch --array=1-$(( $(wc -l < /data/study/bids/participants.tsv) - 1 ))%8 slurm_array.sh
# then the group level once every task has ended well (docs/examples/slurm_group.sh):
#   sbatch --dependency=afterok:<array job id> slurm_group.sh
# A task stopped by SIGTERM (its time limit, pre-emption, scancel --signal=TERM) ends its current
# chunk, exits 143 and requeues itself; run again, it resumes from the chunks saved in $WORK.
set -euo pipefail
BIDS=${BIDS:-/data/study/bids}
OUT=${OUT:-/data/study/derivatives/prfmap}
WORK=${WORK:-/data/study/work/prfmap}  # on shared storage, so that a requeued task resumes on any node
SIF=${SIF:-/data/containers/prfmap-0.1.0-jax.sif}
read -r -a OPTIONS <<< "${PRFMAP_OPTIONS:-}"  # further prfmap options, e.g. PRFMAP_OPTIONS="--space fsLR"
# The container, with every folder bound at its own path (the prfmap command line reads the same
# without it):
PRFMAP=(apptainer run --nv --cleanenv -B "$BIDS:$BIDS:ro" -B "$OUT" -B "$WORK" "$SIF")  # PRFMAP-COMMAND
SUBJECT=$(awk -F'\t' 'NR > 1 {print $1}' "$BIDS/participants.tsv" | sed -n "${SLURM_ARRAY_TASK_ID}p")
mkdir -p "$OUT" "$WORK"
# SLURM also sends SIGTERM to this shell at the time limit: note it and wait for prfmap to stop.
trap 'echo "prfmap: SIGTERM received; the fit stops after its current chunk"' TERM
status=0
srun --ntasks=1 --cpus-per-task="$SLURM_CPUS_PER_TASK" "${PRFMAP[@]}" "$BIDS" "$OUT" participant \
  --participant-label "${SUBJECT#sub-}" -w "$WORK" --nprocs "$SLURM_CPUS_PER_TASK" "${OPTIONS[@]}" \
  || status=$?
if [ "$status" -eq 143 ] || [ "$status" -eq 130 ]; then
  echo "prfmap: stopped by a signal (exit $status); requeueing job $SLURM_JOB_ID to resume from its chunks"
  scontrol requeue "$SLURM_JOB_ID"
fi
exit "$status"
