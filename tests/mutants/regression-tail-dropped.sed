# file: regression.cu
# what: the last n % 4 points (the ones no float4 load covers) are never added to the sums
s/^    if (leftover < n) add_point(/    if (leftover < n \&\& 0) add_point(/
