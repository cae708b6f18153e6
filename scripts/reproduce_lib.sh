# Shared by scripts/reproduce_<paper>.sh (sourced, not run): option parsing, the data check,
# `experiment NAME KIND [SMOKE_OVERRIDES...]`, which queues one paper experiment, and `finish`,
# which runs the queue: each experiment's sweep, then its table (KIND=table: fedmoo table, md +
# csv) or its figures (KIND=plot: fedmoo plot), and a summary. Experiments run in queue order.

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
QUEUE=()              # one entry per queued experiment: NAME<US>KIND<US>OVERRIDE<US>...
US=$'\x1f'            # the separator (no override contains it)

usage() {
    cat <<EOF
usage: $0 [--smoke] [--only NAME[,NAME...]] [--out DIR] [--tables DIR] [--data-dir DIR] [-- OVERRIDES...]

Runs the ${PAPER} experiments (fedmoo/conf/experiment/${PAPER}/) and writes their tables.
  --smoke          2 rounds, seed 0, a small federation where the dataset allows; experiments
                   whose dataset is not on disk are only composed (fedmoo run --cfg job)
  --only NAMES     only these experiments, e.g. --only table3,table4_fmnist
  --out DIR        sweep directories go to DIR/${PAPER}/<name> (default outputs/experiments,
                   outputs/smoke with --smoke); re-running resumes (finished jobs are skipped)
  --tables DIR     tables and figures go here as ${PAPER}_<name>.md / .csv / folder of PNGs
                   (default docs/results, where the reproduced tables are kept; DIR/tables with
                   --smoke)
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
        TABLES=${TABLES:-$OUT/tables}
    else
        OUT=${OUT:-outputs/experiments}
        TABLES=${TABLES:-docs/results}
    fi
    if [ -n "$DATA_DIR" ]; then
        EXTRA=("data_dir=$DATA_DIR" "${EXTRA[@]}")
    fi
}

# Smoke runs never download: one Python process checks every queued experiment at once (does
# it compose, is its dataset on disk) and prints one line per experiment, in order:
# `ok`, `missing<TAB>why` (composes, no data) or `bad<TAB>why` (does not compose).
smoke_check() {
    printf '%s\n' "$@" | "$PYTHON" -c '
import sys
from fedmoo.cli.config import compose
from fedmoo.cli.overrides import check_new_keys, check_overrides
from fedmoo.data import load_source
from fedmoo.errors import UserError

for line in sys.stdin.read().splitlines():
    args = line.split("\x1f")
    why = check_overrides(args) or check_new_keys(args)
    try:
        if why:
            raise UserError(why)
        cfg = compose(args)
    except UserError as e:
        print(f"bad\t{e}", flush=True)
        continue
    data = dict(cfg["data"])
    if "download" in data:
        data["download"] = False
    try:
        load_source(data, cfg["data_dir"])
        print("ok", flush=True)
    except UserError as e:
        print(f"missing\t{e}", flush=True)
'
}

# Full runs: `fedmoo prepare` downloads the experiment's data (exit status 0 when it is there).
prepare_data() {
    local name=$1; shift
    "$PYTHON" -m fedmoo prepare -m "experiment=$name" "$@" 2>&1 >/dev/null
}

experiment() {
    local short=$1 kind=$2; shift 2
    if [ -n "$ONLY" ] && [[ ",$ONLY," != *",$short,"* ]]; then
        return 0
    fi
    local entry="$short$US$kind"
    if [ "$SMOKE" = 1 ]; then
        for o in rounds=2 seed=0 "$@"; do entry+="$US$o"; done
    fi
    QUEUE+=("$entry")
}

run_experiment() {   # SHORT KIND STATUS WHY [SMOKE_OVERRIDES...]
    local short=$1 kind=$2 status=$3 why=$4; shift 4
    local name="$PAPER/$short"
    local overrides=("${EXTRA[@]}" "$@")
    echo "== $name"
    if [ "$status" = bad ]; then
        echo "   does not compose: $why" >&2
        FAILED+=("$name (does not compose)")
        return 0
    fi
    if [ "$status" != ok ]; then
        echo "   skipped: dataset not available (${why##*$'\n'})"
        [ "$SMOKE" = 1 ] && echo "   composes: fedmoo run --cfg job experiment=$name"
        SKIPPED+=("$name")
        return 0
    fi
    local sweep="$OUT/$name"
    if ! "$PYTHON" -m fedmoo run -m "experiment=$name" "hydra.sweep.dir=$sweep" progress=false \
            "${overrides[@]}"; then
        FAILED+=("$name (sweep)")
    fi
    mkdir -p "$TABLES"
    local file="$TABLES/${PAPER}_$short"        # docs/results/fedfv_table3.md, ...
    if [ "$kind" = table ]; then
        "$PYTHON" -m fedmoo table "$sweep" --spec "$name" --format md --out "$file.md" \
            && "$PYTHON" -m fedmoo table "$sweep" --spec "$name" --format csv --out "$file.csv" \
            || FAILED+=("$name (table)")
    else
        "$PYTHON" -m fedmoo plot "$sweep" --out "$file" || FAILED+=("$name (plot)")
    fi
}

finish() {
    local checks=() entry fields i status why
    if [ "$SMOKE" = 1 ] && [ ${#QUEUE[@]} -gt 0 ]; then
        local lines=()
        for entry in "${QUEUE[@]}"; do
            IFS="$US" read -r -a fields <<< "$entry"
            local line="experiment=$PAPER/${fields[0]}"
            for o in "${EXTRA[@]}" "${fields[@]:2}"; do line+="$US$o"; done
            lines+=("$line")
        done
        mapfile -t checks < <(smoke_check "${lines[@]}")
        if [ ${#checks[@]} -ne ${#QUEUE[@]} ]; then
            echo "FAILED: the smoke check of the experiments stopped early" >&2
            exit 1
        fi
    fi
    for i in "${!QUEUE[@]}"; do
        IFS="$US" read -r -a fields <<< "${QUEUE[$i]}"
        if [ "$SMOKE" = 1 ]; then
            status=${checks[$i]%%$'\t'*}
            why=${checks[$i]#*$'\t'}
        elif why=$(prepare_data "$PAPER/${fields[0]}" "${EXTRA[@]}"); then
            status=ok
        else
            status=missing
        fi
        run_experiment "${fields[0]}" "${fields[1]}" "$status" "$why" "${fields[@]:2}"
    done
    echo
    [ ${#SKIPPED[@]} -gt 0 ] && echo "skipped (dataset missing): ${SKIPPED[*]}"
    if [ ${#FAILED[@]} -gt 0 ]; then
        echo "FAILED: ${FAILED[*]}" >&2
        exit 1
    fi
    echo "done: tables and figures in $TABLES"
}
