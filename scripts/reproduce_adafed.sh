#!/usr/bin/env bash
# Reproduce AdaFed (Hamidi & Yang, TMLR 2024): Tables 1-4, 7-9 and the gamma Tables 10-16.
#   scripts/reproduce_adafed.sh [--smoke] [--only NAMES]   (see docs/experiments.md)
PAPER=adafed
source "$(dirname "$0")/reproduce_lib.sh"
parse_args "$@"

SHARDS=(num_clients=10 clients_per_round=5)   # 100-client shard federations
FEW=(num_clients=4)                           # Dirichlet federations with every client every round
for t in table7 table12; do                   # FMNIST, 3 clients (runs offline with Debian's FMNIST)
    experiment $t table
done
for t in table1_setup1 table10_setup1; do experiment $t table "${SHARDS[@]}"; done
for t in table1_setup2 table10_setup2 table2_setup1 table11_setup1 table2_setup2 table11_setup2 \
         table8 table15 table9 table16; do
    experiment $t table "${FEW[@]}"
done
for t in table3_skewed table13_skewed; do experiment $t table num_clients=10; done
for t in table3_original table13_original table4_setup1 table14_setup1 table4_setup2 table14_setup2; do
    experiment $t table                        # LEAF writers / roles: the federation cannot shrink
done
finish
