#!/usr/bin/env bash
# Reproduce FedMGDA+ (Hu et al.): Tables 6 and 8, Figures 1 / 5 (eps interpolation) and 4 (improved
# participants), the Adult bias-attack table (B.2) and the CIFAR-10 scaling attack (Fig. 2 right).
#   scripts/reproduce_fedmgda_plus.sh [--smoke] [--only NAMES]   (see docs/experiments.md)
PAPER=fedmgda_plus
source "$(dirname "$0")/reproduce_lib.sh"
parse_args "$@"

SMALL=(num_clients=10 clients_per_round=5)
experiment fig1_fmnist  plot  "${SMALL[@]}"    # FMNIST (runs offline with Debian's FMNIST)
experiment table8       table "${SMALL[@]}"
experiment table6       table                  # FEMNIST writers: the federation cannot shrink
experiment fig1_cifar10 plot  "${SMALL[@]}"
experiment fig4         plot  "${SMALL[@]}"
experiment adult_bias   table                  # 2 clients: phd, non-phd
experiment adult_bias_authors_code table       # the same, as the authors' code trains it
experiment cifar10_scaling table "${SMALL[@]}"
finish
