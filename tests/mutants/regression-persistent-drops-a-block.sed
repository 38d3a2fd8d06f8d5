# file: regression.cu
# what: persistent kernel: every block adds up the sums of every block but the last
# stages: 08
s|for (int g = lane; g < blocks; g += WARP_SIZE) {|for (int g = lane; g < blocks - 1; g += WARP_SIZE) {|
