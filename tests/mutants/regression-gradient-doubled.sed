# file: regression.cu
# what: the update uses twice the MSE's gradient
s|^    double scale = 2\.0 / (double)n;|    double scale = 4.0 / (double)n;|
