# Shared by scripts/reproduce_<paper>.sh (sourced, not run): option parsing, the data check, and
# `experiment NAME KIND [SMOKE_OVERRIDES...]`, which runs one paper experiment's sweep and then
# writes its table (KIND=table: fedmoo table, md + csv) or its figures (KIND=plot: fedmoo plot).

set -uo pipefail

PYTHON=${PYTHON:-python}
SMOKE=0
OUT=""
TABLES=""
ONLY=""
DATA_DIR=""
EXTRA=()
FAILED=()
SKIPPED=()

usage() {
    cat <<EOF
usage: $0 [--smoke] [--only NAME[,NAME...]] [--out DIR] [--tables DIR] [--data-dir DIR] [-- OVERRIDES...]

Runs the ${PAPER} experiments (fedmoo/conf/experiment/${PAPER}/) and writes their tables.
  --smoke          2 rounds, seed 0, a small federation where the dataset allows; experiments
                   whose dataset is not on disk are only composed (fedmoo run --cfg job)
  --only NAMES     only these experiments, e.g. --only table3,table4_fmnist
  --out DIR        sweep directories go to DIR/${PAPER}/<name> (default outputs/experiments,
                   outputs/smoke with --smoke); re-running resumes (finished jobs are skipped)
  --tables DIR     tables and figures go here (default docs/results/${PAPER}, DIR/tables/${PAPER}
                   with --smoke)
  --data-dir DIR   data_dir for every run (default: fedmoo's, \$FEDMOO_DATA or ./data)
  -- OVERRIDES     passed to every fedmoo run, e.g. -- device=cuda hydra/launcher=local_gpus
EOF
}

parse_args() {
    while [ $# -gt 0 ]; do
        case "$1" in
            --smoke) SMOKE=1 ;;
            --only) ONLY="${2:?--only needs a list of experiment names}"; shift ;;
            --out) OUT="${2:?--out needs a directory}"; shift ;;
            --tables) TABLES="${2:?--tables needs a directory}"; shift ;;
            --data-dir) DATA_DIR="${2:?--data-dir needs a directory}"; shift ;;
            -h|--help) usage; exit 0 ;;
            --) shift; EXTRA=("$@"); break ;;
            *) echo "$0: unknown option $1 (see --help)" >&2; exit 2 ;;
        esac
        shift
    done
    if [ "$SMOKE" = 1 ]; then
        OUT=${OUT:-outputs/smoke}
        TABLES=${TABLES:-$OUT/tables/$PAPER}
    else
        OUT=${OUT:-outputs/experiments}
        TABLES=${TABLES:-docs/results/$PAPER}
    fi
    if [ -n "$DATA_DIR" ]; then
        EXTRA=("data_dir=$DATA_DIR" "${EXTRA[@]}")
    fi
}

# Is the experiment's dataset on disk? Smoke runs never download; full runs let `fedmoo prepare`
# download it. Prints the reason when it is not.
have_data() {
    local name=$1; shift
    if [ "$SMOKE" = 1 ]; then
        "$PYTHON" - "experiment=$name" "$@" <<'EOF'
import sys
from fedmoo.cli.config import compose
from fedmoo.data import load_source
from fedmoo.errors import UserError
try:
    cfg = compose(sys.argv[1:])
    data = dict(cfg["data"])
    if "download" in data:
        data["download"] = False
    load_source(data, cfg["data_dir"])
except UserError as e:
    print(e)
    sys.exit(1)
EOF
    else
        "$PYTHON" -m fedmoo prepare -m "experiment=$name" "$@" >/dev/null
    fi
}

experiment() {
    local short=$1 kind=$2; shift 2
    local name="$PAPER/$short"
    if [ -n "$ONLY" ] && [[ ",$ONLY," != *",$short,"* ]]; then
        return 0
    fi
    local overrides=("${EXTRA[@]}")
    if [ "$SMOKE" = 1 ]; then
        overrides+=(rounds=2 seed=0 "$@")
    fi
    echo "== $name"
    local reason
    if ! reason=$(have_data "$name" "${overrides[@]}" 2>&1); then
        echo "   skipped: dataset not available (${reason##*$'\n'})"
        if [ "$SMOKE" = 1 ]; then
            if "$PYTHON" -m fedmoo run --cfg job "experiment=$name" "${overrides[@]}" >/dev/null; then
                echo "   composes: fedmoo run --cfg job experiment=$name"
            else
                FAILED+=("$name (does not compose)")
            fi
        fi
        SKIPPED+=("$name")
        return 0
    fi
    local sweep="$OUT/$name"
    if ! "$PYTHON" -m fedmoo run -m "experiment=$name" "hydra.sweep.dir=$sweep" progress=false \
            "${overrides[@]}"; then
        FAILED+=("$name (sweep)")
    fi
    mkdir -p "$TABLES"
    if [ "$kind" = table ]; then
        "$PYTHON" -m fedmoo table "$sweep" --spec "$name" --format md --out "$TABLES/$short.md" \
            && "$PYTHON" -m fedmoo table "$sweep" --spec "$name" --format csv --out "$TABLES/$short.csv" \
            || FAILED+=("$name (table)")
    else
        "$PYTHON" -m fedmoo plot "$sweep" --out "$TABLES/$short" || FAILED+=("$name (plot)")
    fi
}

finish() {
    echo
    [ ${#SKIPPED[@]} -gt 0 ] && echo "skipped (dataset missing): ${SKIPPED[*]}"
    if [ ${#FAILED[@]} -gt 0 ]; then
        echo "FAILED: ${FAILED[*]}" >&2
        exit 1
    fi
    echo "done: tables and figures in $TABLES"
}
