# file: mma_ladder.cu
# what: tensor-core ladder: fragment_cell puts the A fragment's a[1] and a[3] in row g + 7 instead of g + 8
# stages: 09
s|if (matrix == FRAGMENT_A) cell = {g + 8 \* (e % 2), t + 4 \* (e / 2)};|if (matrix == FRAGMENT_A) cell = {g + 7 * (e % 2), t + 4 * (e / 2)};|
