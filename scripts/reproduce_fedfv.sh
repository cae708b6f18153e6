#!/usr/bin/env bash
# Reproduce FedFV (Wang et al., IJCAI'21): Tables 2-4 and Figure 2. See docs/experiments.md.
#   scripts/reproduce_fedfv.sh            # full runs; tables in docs/results/fedfv_<name>.md
#   scripts/reproduce_fedfv.sh --smoke    # 2 rounds, 1 seed: proves every experiment runs / composes
PAPER=fedfv
source "$(dirname "$0")/reproduce_lib.sh"
parse_args "$@"

C10_SMALL=(num_clients=10 clients_per_round=5)
experiment table3        table                 # FMNIST, 3 clients (runs offline with Debian's FMNIST)
experiment table4_fmnist table
experiment table2        table "${C10_SMALL[@]}"
experiment table4_cifar10 table "${C10_SMALL[@]}"
experiment fig2_cifar10  plot  "${C10_SMALL[@]}"
experiment fig2_mnist    plot  "${C10_SMALL[@]}"
finish
