# file: mnist.cu
# what: tensor cores: the next step's pixels are fetched into this step's buffer while W0's gradient reads it
# stages: 09
s|fetch_pixels(&a, row_buffers + next \* batch, x_buffers + next \* batch \* pixels|fetch_pixels(\&a, row_buffers + next * batch, x_buffers + buffer * batch * pixels|
