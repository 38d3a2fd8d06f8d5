# file: regression.cu
# what: persistent kernel: the points a block reads from global memory (past its whole rows on chip) are never added
# stages: 08
s|^        add_global_points(&s, |        if (0) add_global_points(\&s, |
